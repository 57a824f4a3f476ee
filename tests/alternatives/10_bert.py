"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "10_bert"

_EMB_INIT = '''
class BertEmbeddings(nn.Module):
    def __init__(self, vocab_size, d_model, max_len, n_segments=2, dropout=0.0):
        super().__init__()
        self.token = nn.Embedding(vocab_size, d_model)
        self.segment = nn.Embedding(n_segments, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.norm = nn.LayerNorm(d_model, eps=1e-12)
        self.dropout = nn.Dropout(dropout)
'''

VARIANTS = {
    "nsp_loop_shifted_index_style": {
        "blind": True, "style": "a loop; the other document drawn among the rest by shifting the index",
        "replace": {"make_nsp_pairs": '''
def make_nsp_pairs(documents, generator=None):
    pairs = []
    n = len(documents)
    for d, doc in enumerate(documents):
        for i in range(len(doc) - 1):
            if bool(torch.rand((), generator=generator) < 0.5):
                pairs.append((doc[i], doc[i + 1], True))
                continue
            while True:
                other = int(torch.randint(0, n - 1, (), generator=generator))
                other = other + 1 if other >= d else other
                if len(documents[other]) > 0:
                    break
            j = int(torch.randint(0, len(documents[other]), (), generator=generator))
            pairs.append((doc[i], documents[other][j], False))
    return pairs
'''},
        "must_fail": [],
    },
    "embeddings_table_slices_style": {
        "blind": True, "style": "the position table sliced, segment 0's vector broadcast when segments is None",
        "replace": {"BertEmbeddings": _EMB_INIT + '''
    def forward(self, ids, segments=None):
        T = ids.shape[1]
        x = self.token(ids) + self.position.weight[:T].unsqueeze(0)
        x = x + (self.segment.weight[0] if segments is None else self.segment(segments))
        return self.dropout(self.norm(x))
'''},
        "must_fail": [],
    },
    "embeddings_expanded_positions_style": {
        "blind": True, "style": "positions expanded over the batch, zero segments made explicitly",
        "replace": {"BertEmbeddings": _EMB_INIT + '''
    def forward(self, ids, segments=None):
        B, T = ids.shape
        if segments is None:
            segments = torch.zeros_like(ids)
        positions = torch.arange(T, device=ids.device).unsqueeze(0).expand(B, T)
        summed = self.token(ids) + self.segment(segments) + self.position(positions)
        return self.dropout(self.norm(summed))
'''},
        "must_fail": [],
    },
    "bert_float_key_padding_style": {
        "blind": True, "style": "key padding passed as src_key_padding_mask, other masks as a (B*H, T, T) src_mask",
        "replace": {"Bert": '''
class Bert(nn.Module):
    def __init__(self, vocab_size, d_model=64, n_heads=4, d_ff=256, n_layers=2, max_len=128, n_segments=2,
                 dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        self.embeddings = BertEmbeddings(vocab_size, d_model, max_len, n_segments, dropout)
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            self.layers.append(nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, activation="gelu",
                                                          layer_norm_eps=1e-12, batch_first=True))
        self.pooler = nn.Linear(d_model, d_model)
        self.nsp = nn.Linear(d_model, 2)
        self.mlm_dense = nn.Linear(d_model, d_model)
        self.mlm_norm = nn.LayerNorm(d_model, eps=1e-12)
        self.mlm_bias = nn.Parameter(torch.zeros(vocab_size))

    def encode(self, ids, segments=None, mask=None):
        h = self.embeddings(ids, segments)
        B, T, _ = h.shape
        src_mask, padding = None, None
        if mask is not None:
            full = masks.attention_mask(mask, B=B, H=self.n_heads, T_q=T, T_k=T)
            if full.shape[1] == 1 and full.shape[2] == 1 and full.shape[0] == B:
                padding = ~full[:, 0, 0, :]                       # (B, T), True = padding
            else:
                src_mask = ~full.expand(B, self.n_heads, T, T).reshape(B * self.n_heads, T, T)
        for layer in self.layers:
            h = layer(h, src_mask=src_mask, src_key_padding_mask=padding)
        return h, torch.tanh(self.pooler(h[:, 0]))

    def forward(self, ids, segments=None, mask=None):
        h, pooled = self.encode(ids, segments, mask)
        t = self.mlm_norm(F.gelu(self.mlm_dense(h)))
        mlm = torch.einsum("btd,vd->btv", t, self.embeddings.token.weight) + self.mlm_bias
        return mlm, self.nsp(pooled)
'''},
        "must_fail": [],
    },
}

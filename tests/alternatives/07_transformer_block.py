"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "07_transformer_block"

_LN_INIT = '''
class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))
'''

VARIANTS = {
    "pe_outer_product_interleave_style": {
        "blind": True, "style": "an outer product of positions and frequencies, sin/cos interleaved by stack",
        "replace": {"sinusoidal_encoding": '''
def sinusoidal_encoding(n_positions, d_model):
    p = torch.arange(n_positions, dtype=torch.float64)
    i = torch.arange(0, d_model, 2, dtype=torch.float64)
    w = torch.pow(10000.0, -i / d_model)
    angles = torch.outer(p, w)                                      # (P, D/2)
    pe = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1)  # (P, D/2, 2)
    return pe.reshape(n_positions, -1)[:, :d_model].float()
'''},
        "must_fail": [],
    },
    "offset_loop_blocks_style": {
        "blind": True, "style": "a loop writing each 2x2 rotation into a zero matrix",
        "replace": {"offset_matrix": '''
def offset_matrix(k, d_model):
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        phi = k * 10000.0 ** (-2 * i / d_model)
        c, s = math.cos(phi), math.sin(phi)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, s
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -s, c
    return M.float()
'''},
        "must_fail": [],
    },
    "offset_block_diag_star_style": {
        "blind": True, "style": "torch.block_diag of the rotation blocks built as tensors",
        "replace": {"offset_matrix": '''
def offset_matrix(k, d_model):
    i = torch.arange(d_model // 2, dtype=torch.float64)
    phi = k * torch.exp(-(2 * i / d_model) * math.log(10000.0))
    blocks = [torch.stack([torch.stack([torch.cos(a), torch.sin(a)]), torch.stack([-torch.sin(a), torch.cos(a)])])
              for a in phi]
    return torch.block_diag(*blocks).to(torch.float32)
'''},
        "must_fail": [],
    },
    "layernorm_centered_second_moment_style": {
        "blind": True, "style": "the mean of the squared deviations, divided by sqrt(var + eps)",
        "replace": {"LayerNorm": _LN_INIT + '''
    def forward(self, x):
        centered = x - x.mean(dim=-1, keepdim=True)
        var = (centered * centered).mean(dim=-1, keepdim=True)
        return self.weight * (centered / torch.sqrt(var + self.eps)) + self.bias
'''},
        "must_fail": [],
    },
    "feedforward_sequential_style": {
        "blind": True, "style": "the layers also held in an nn.Sequential",
        "replace": {"FeedForward": '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.net = nn.Sequential(self.linear1, nn.ReLU(), nn.Dropout(dropout), self.linear2)

    def forward(self, x):
        return self.net(x)
'''},
        "must_fail": [],
    },
    "feedforward_clamp_functional_dropout_style": {
        "blind": True, "style": "clamp(min=0) as the ReLU, F.dropout with the module's mode",
        "replace": {"FeedForward": '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x):
        h = self.linear1(x).clamp(min=0)
        h = F.dropout(h, p=self.p, training=self.training)
        return self.linear2(h)
'''},
        "must_fail": [],
    },
    "block_sublayer_methods_style": {
        "blind": True, "style": "one method per sublayer, the mask checked and converted with course.masks",
        "replace": {"EncoderBlock": '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _attend(self, x, mask):
        B, T, _ = x.shape
        H = self.self_attn.num_heads
        attn_mask = None
        if mask is not None:
            full = masks.attention_mask(mask, B=B, H=H, T_q=T, T_k=T)
            if mask.dim() == 2:
                attn_mask = masks.to_torch(mask)
            else:
                attn_mask = masks.to_torch(full.expand(B, H, T, T).reshape(B * H, T, T))
        out, _ = self.self_attn(x, x, x, attn_mask=attn_mask, need_weights=False)
        return self.dropout1(out)

    def _feed(self, x):
        return self.dropout2(self.ff(x))

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self._attend(self.norm1(x), mask)
            return x + self._feed(self.norm2(x))
        x = self.norm1(x + self._attend(x, mask))
        return self.norm2(x + self._feed(x))
'''},
        "must_fail": [],
    },
}

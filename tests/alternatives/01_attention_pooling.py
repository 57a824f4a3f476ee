"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2. The entries marked ``blind: False`` were
written with the hidden tests in view (issue 42), in styles that its new checks could wrongly punish.
"""

_INIT = '''
class TweetClassifier(nn.Module):
    def __init__(self, vectors, pooling="attention", n_classes=2):
        super().__init__()
        if pooling not in ("mean", "attention"):
            raise ValueError(f"pooling must be 'mean' or 'attention', not {pooling!r}")
        d_model = vectors.shape[1]
        self.pooling = pooling
        self.embed = nn.Embedding.from_pretrained(vectors, freeze=True, padding_idx=0)
        self.pool = AttentionPooling(d_model) if pooling == "attention" else None
        self.head = nn.Linear(d_model, n_classes)
'''

LESSON = "01_attention_pooling"
VARIANTS = {
    "classifier_einsum_mean_weights_style": {
        "blind": True, "style": "mean pooling written as its uniform weights and an einsum",
        "replace": {"TweetClassifier": _INIT + '''
    def forward(self, ids, mask):
        x = self.embed(ids)
        if self.pooling == "attention":
            pooled, weights = self.pool(x, mask)
        else:
            m = mask.to(x.dtype)
            weights = m / m.sum(dim=1, keepdim=True).clamp_min(1.0)
            pooled = torch.einsum("bt,btd->bd", weights, x)
        return self.head(pooled), weights
'''},
        "must_fail": [],
    },
    "classifier_padding_ids_zeroed_style": {
        "blind": True, "style": "padded ids replaced by 0 before the lookup, F.linear head",
        "replace": {"TweetClassifier": _INIT + '''
    def forward(self, ids, mask):
        x = self.embed(ids.masked_fill(~mask, 0))
        if self.pool is not None:
            pooled, weights = self.pool(x, mask)
        else:
            pooled = mean_pooling(x, mask)
            lengths = mask.sum(dim=1, keepdim=True)
            weights = torch.where(mask, 1.0 / lengths.clamp(min=1).to(x.dtype), torch.zeros((), dtype=x.dtype))
        return F.linear(pooled, self.head.weight, self.head.bias), weights
'''},
        "must_fail": [],
    },
    "attention_log_mask_style": {
        "blind": False, "style": "the log of the float mask added to the scores (0 or -inf), NaN rows zeroed by nan_to_num",
        "replace": {"AttentionPooling": '''class AttentionPooling(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.query = nn.Parameter(torch.randn(d_model) / d_model ** 0.5)

    def forward(self, x, mask):
        scores = torch.matmul(x, self.query) + torch.log(mask.to(x.dtype))     # log 1 = 0, log 0 = -inf
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)                # a row of -inf only: NaN -> 0
        pooled = (weights.unsqueeze(-1) * x).sum(dim=1)
        return pooled, weights
'''},
        "must_fail": [],
    },
    "classifier_l1_normalised_mask_style": {
        "blind": False, "style": "mean weights as the L1-normalised mask (F.normalize), pooled by bmm",
        "replace": {"TweetClassifier": _INIT + '''
    def forward(self, ids, mask):
        x = self.embed(ids)
        if self.pool is not None:
            pooled, weights = self.pool(x, mask)
        else:
            weights = F.normalize(mask.to(x.dtype), p=1, dim=-1)               # 1/L on real tokens; 0/eps = 0 if L = 0
            pooled = torch.bmm(weights.unsqueeze(1), x).squeeze(1)
        return self.head(pooled), weights
'''},
        "must_fail": [],
    },
}

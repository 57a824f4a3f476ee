"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
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
}

"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "05_self_attention"
VARIANTS = {
    "causal_by_comparison_style": {
        "blind": True, "style": "a comparison of two position ranges",
        "replace": {"causal_mask": '''
def causal_mask(T):
    rows = torch.arange(T).unsqueeze(1)       # query t
    cols = torch.arange(T).unsqueeze(0)       # key s
    return cols <= rows
'''},
        "must_fail": [],
    },
    "causal_not_triu_style": {
        "blind": True, "style": "the complement of the strict upper triangle",
        "replace": {"causal_mask": '''
def causal_mask(T):
    return ~torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
'''},
        "must_fail": [],
    },
    "padding_expand_style": {
        "blind": True, "style": "an expanded position grid against a column of lengths",
        "replace": {"padding_mask": '''
def padding_mask(lengths, T):
    grid = torch.arange(T, device=lengths.device).expand(lengths.shape[0], T)
    return grid < lengths.reshape(-1, 1)
'''},
        "must_fail": [],
    },
    "padding_loop_style": {
        "blind": True, "style": "a loop over the batch filling a zero mask",
        "replace": {"padding_mask": '''
def padding_mask(lengths, T):
    out = torch.zeros(lengths.shape[0], T, dtype=torch.bool, device=lengths.device)
    for b in range(lengths.shape[0]):
        out[b, : int(lengths[b])] = True
    return out
'''},
        "must_fail": [],
    },
    "self_attention_functional_linear_style": {
        "blind": True, "style": "F.linear with the layers' weights, attention written inline with torch.where",
        "replace": {"SelfAttention": '''
class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        if d_v is None:
            d_v = d_k
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_v)

    def forward(self, x, mask=None):
        q = F.linear(x, self.w_q.weight, self.w_q.bias)
        k = F.linear(x, self.w_k.weight, self.w_k.bias)
        v = F.linear(x, self.w_v.weight, self.w_v.bias)
        scores = torch.einsum("btd,bsd->bts", q, k) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
        weights = torch.softmax(scores, dim=-1)
        weights = torch.nan_to_num(weights, nan=0.0)
        return weights @ v, weights
'''},
        "must_fail": [],
    },
}

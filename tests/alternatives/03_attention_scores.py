"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "03_attention_scores"
VARIANTS = {
    "dot_broadcast_sum_style": {
        "blind": True, "style": "broadcast products summed over d (no matmul)",
        "replace": {"dot_score": '''
def dot_score(q, k):
    return (q.unsqueeze(-2) * k.unsqueeze(-3)).sum(dim=-1)
'''},
        "must_fail": [],
    },
    "scaled_einsum_rsqrt_style": {
        "blind": True, "style": "einsum, multiplied by d_k ** -0.5",
        "replace": {"scaled_dot_score": '''
def scaled_dot_score(q, k):
    return torch.einsum("...id,...jd->...ij", q, k) * k.shape[-1] ** -0.5
'''},
        "must_fail": [],
    },
    "scaled_query_first_style": {
        "blind": True, "style": "the queries scaled before the product",
        "replace": {"scaled_dot_score": '''
def scaled_dot_score(q, k):
    d_k = k.size(-1)
    return (q / math.sqrt(d_k)) @ k.transpose(-2, -1)
'''},
        "must_fail": [],
    },
    "cosine_F_normalize_style": {
        "blind": True, "style": "F.normalize with eps, then a dot product",
        "replace": {"cosine_score": '''
def cosine_score(q, k, eps=1e-8):
    q_hat = F.normalize(q, p=2.0, dim=-1, eps=eps)
    k_hat = F.normalize(k, p=2.0, dim=-1, eps=eps)
    return q_hat @ k_hat.transpose(-2, -1)
'''},
        "must_fail": [],
    },
    "bilinear_keys_projected_first_style": {
        "blind": True, "style": "W applied to the keys first",
        "replace": {"BilinearScore": '''
class BilinearScore(nn.Module):
    def __init__(self, d_q, d_k):
        super().__init__()
        self.W = nn.Parameter(torch.randn(d_q, d_k) / math.sqrt(d_q * d_k))

    def forward(self, q, k):
        wk = k @ self.W.transpose(0, 1)          # (..., T_k, d_q)
        return q @ wk.transpose(-2, -1)
'''},
        "must_fail": [],
    },
    "mlp_loop_over_keys_style": {
        "blind": True, "style": "a loop over the keys, one column of scores at a time",
        "replace": {"MLPScore": '''
class MLPScore(nn.Module):
    def __init__(self, d_q, d_k, d_hidden):
        super().__init__()
        self.w_q = nn.Linear(d_q, d_hidden, bias=False)
        self.w_k = nn.Linear(d_k, d_hidden)
        self.v = nn.Linear(d_hidden, 1, bias=False)

    def forward(self, q, k):
        hq = self.w_q(q)                         # (..., T_q, H)
        hk = self.w_k(k)                         # (..., T_k, H)
        columns = []
        for j in range(k.shape[-2]):
            h = torch.tanh(hq + hk[..., j, :].unsqueeze(-2))
            columns.append(self.v(h)[..., 0])    # (..., T_q)
        return torch.stack(columns, dim=-1)
'''},
        "must_fail": [],
    },
}

"""Planted bugs and correct alternative styles for lesson 03 (see CONTRIBUTING.md)."""

LESSON = "03_attention_scores"

_BILINEAR_INIT = '''
class BilinearScore(nn.Module):
    def __init__(self, d_q, d_k):
        super().__init__()
        self.W = nn.Parameter(torch.randn(d_q, d_k) / math.sqrt(d_q * d_k))
'''

_MLP_INIT = '''
class MLPScore(nn.Module):
    def __init__(self, d_q, d_k, d_hidden):
        super().__init__()
        self.w_q = nn.Linear(d_q, d_hidden, bias=False)
        self.w_k = nn.Linear(d_k, d_hidden)
        self.v = nn.Linear(d_hidden, 1, bias=False)
'''

VARIANTS = {
    # ------------------------------------------------------------------ scores
    "dot_transposes_batch_axes": {
        # k.transpose(0, 1) is k.T for a 2-D k, but swaps the batch and key axes of a 3-D one
        "replace": {"dot_score": """
            def dot_score(q, k):
                return q @ k.transpose(0, 1)
        """},
        "must_fail": ["test_dot_score_batched"],
    },
    "scaled_by_d_not_sqrt_d": {
        "replace": {"scaled_dot_score": """
            def scaled_dot_score(q, k):
                return dot_score(q, k) / k.size(-1)
        """},
        "must_fail": ["test_scaled_dot_score_example", "test_scaled_dot_score_uses_d_k"],
    },
    "scaled_by_number_of_queries": {
        # q.shape[1] is d_k for a 2-D q, but T_q (or the head count) once batch dimensions appear
        "replace": {"scaled_dot_score": """
            def scaled_dot_score(q, k):
                return dot_score(q, k) / math.sqrt(q.shape[1])
        """},
        "must_fail": ["test_scaled_dot_score_uses_d_k"],
    },
    "cosine_without_eps": {
        "replace": {"cosine_score": """
            def cosine_score(q, k, eps=1e-8):
                q_hat = q / q.norm(dim=-1, keepdim=True)
                k_hat = k / k.norm(dim=-1, keepdim=True)
                return dot_score(q_hat, k_hat)
        """},
        "must_fail": ["test_cosine_score_zero_vector"],
    },
    "cosine_normalises_only_keys": {
        "replace": {"cosine_score": """
            def cosine_score(q, k, eps=1e-8):
                return dot_score(q, k / k.norm(dim=-1, keepdim=True).clamp(min=eps))
        """},
        "must_fail": ["test_cosine_score_value"],
    },
    "bilinear_forgets_W": {
        "replace": {"BilinearScore": _BILINEAR_INIT + '''
    def forward(self, q, k):
        return q @ k.transpose(-2, -1)
'''},
        "must_fail": ["test_bilinear_score_shape", "test_bilinear_score_value"],
    },
    "mlp_without_tanh": {
        "replace": {"MLPScore": _MLP_INIT + '''
    def forward(self, q, k):
        return self.v(self.w_q(q).unsqueeze(-2) + self.w_k(k).unsqueeze(-3)).squeeze(-1)
'''},
        "must_fail": ["test_mlp_score_value"],
    },
    "mlp_query_key_axes_swapped": {
        # the query gets the key axis and vice versa: a (T_k, T_q) block
        "replace": {"MLPScore": _MLP_INIT + '''
    def forward(self, q, k):
        h = torch.tanh(self.w_q(q).unsqueeze(-3) + self.w_k(k).unsqueeze(-2))
        return self.v(h).squeeze(-1)
'''},
        "must_fail": ["test_mlp_score_shape", "test_mlp_score_value"],
    },
    "cosine_ignores_eps": {
        # the documented eps argument is replaced by a constant
        "replace": {"cosine_score": """
            def cosine_score(q, k, eps=1e-8):
                q_hat = q / q.norm(dim=-1, keepdim=True).clamp(min=1e-8)
                k_hat = k / k.norm(dim=-1, keepdim=True).clamp(min=1e-8)
                return dot_score(q_hat, k_hat)
        """},
        "must_fail": ["test_cosine_score_zero_vector"],
    },
    "mlp_drops_the_bias": {
        # b (held by w_k) is documented but left out
        "replace": {"MLPScore": _MLP_INIT + '''
    def forward(self, q, k):
        k_h = F.linear(k, self.w_k.weight)
        return self.v(torch.tanh(self.w_q(q).unsqueeze(-2) + k_h.unsqueeze(-3))).squeeze(-1)
'''},
        "must_fail": ["test_mlp_score_value"],
    },
    # ------------------------------------------------------------------ masked softmax
    "masked_softmax_finite_fill": {
        "replace": {"masked_softmax": """
            def masked_softmax(scores, mask):
                return torch.softmax(scores.masked_fill(~mask, -1e4), dim=-1)
        """},
        "must_fail": ["test_masked_softmax_no_leak"],
    },
    "masked_softmax_additive_fill": {
        # the classic "scores + (1 - mask) * -1e4", with the fully masked row handled
        "replace": {"masked_softmax": """
            def masked_softmax(scores, mask):
                w = torch.softmax(scores + (~mask) * -1e4, dim=-1)
                return w * mask.any(dim=-1, keepdim=True)
        """},
        "must_fail": ["test_masked_softmax_no_leak"],
    },
    "masked_softmax_fill_minus_1e9": {
        "replace": {"masked_softmax": """
            def masked_softmax(scores, mask):
                w = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1)
                return w * mask
        """},
        "must_fail": ["test_masked_softmax_no_leak"],
    },
    "masked_softmax_nan_on_fully_masked_row": {
        "replace": {"masked_softmax": """
            def masked_softmax(scores, mask):
                return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        """},
        "must_fail": ["test_masked_softmax_fully_masked"],
    },
    "masked_softmax_uniform_on_fully_masked_row": {
        # dtype-min fill without zeroing: a fully masked row comes out uniform, not zero
        "replace": {"masked_softmax": """
            def masked_softmax(scores, mask):
                return torch.softmax(scores.masked_fill(~mask, torch.finfo(scores.dtype).min), dim=-1)
        """},
        "must_fail": ["test_masked_softmax_fully_masked"],
    },
    "masked_softmax_exp_without_max": {
        "replace": {"masked_softmax": """
            def masked_softmax(scores, mask):
                e = scores.exp() * mask
                return e / e.sum(dim=-1, keepdim=True).clamp(min=1e-30)
        """},
        "must_fail": ["test_masked_softmax_stable"],
    },
    "masked_softmax_wrong_axis": {
        "replace": {"masked_softmax": """
            def masked_softmax(scores, mask):
                w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-2)
                return torch.nan_to_num(w, nan=0.0) * mask
        """},
        "must_fail": ["test_masked_softmax_rows"],
    },
    "masked_softmax_guesses_padding": {
        # a 2-D mask whose first size equals the batch is read as (B, T_k) padding: wrong when B == T_q
        "replace": {"masked_softmax": """
            def masked_softmax(scores, mask):
                if mask.dim() == 2 and scores.dim() == 3 and mask.shape[0] == scores.shape[0]:
                    mask = mask[:, None, :]
                w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
                return torch.nan_to_num(w, nan=0.0)
        """},
        "must_fail": ["test_masked_softmax_rows"],
    },
    # ------------------------------------------------------------------ correct alternative styles
    "einsum_and_where_style": {
        "replace": {
            "dot_score": """
                def dot_score(q, k):
                    return torch.einsum("...qd,...kd->...qk", q, k)
            """,
            "scaled_dot_score": """
                def scaled_dot_score(q, k):
                    return torch.einsum("...qd,...kd->...qk", q, k) * k.shape[-1] ** -0.5
            """,
            "cosine_score": """
                def cosine_score(q, k, eps=1e-8):
                    # normalise with F.normalize (divides by max(norm, eps))
                    return torch.einsum("...qd,...kd->...qk", F.normalize(q, dim=-1, eps=eps), F.normalize(k, dim=-1, eps=eps))
            """,
            "BilinearScore": _BILINEAR_INIT + '''
    def forward(self, q, k):
        return torch.einsum("...qa,ab,...kb->...qk", q, self.W, k)
''',
            "MLPScore": _MLP_INIT + '''
    def forward(self, q, k):
        T_q, T_k = q.shape[-2], k.shape[-2]
        q_h = self.w_q(q)[..., :, None, :].expand(*q.shape[:-2], T_q, T_k, -1)
        k_h = self.w_k(k)[..., None, :, :].expand(*k.shape[:-2], T_q, T_k, -1)
        return torch.einsum("...h,h->...", torch.tanh(q_h + k_h), self.v.weight[0])
''',
            "masked_softmax": """
                def masked_softmax(scores, mask):
                    mask = mask.expand_as(scores)
                    w = torch.softmax(torch.where(mask, scores, torch.tensor(float("-inf"))), dim=-1)
                    return torch.where(mask.any(dim=-1, keepdim=True), w, torch.zeros_like(w))
            """,
        },
        "must_fail": [],
    },
    "loop_and_logsumexp_style": {
        "replace": {
            "dot_score": """
                def dot_score(q, k):
                    # loop over every leading index, one 2-D product each
                    lead = q.shape[:-2]
                    qf, kf = q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:])
                    out = torch.stack([torch.mm(a, b.t()) for a, b in zip(qf, kf)])
                    return out.reshape(*lead, q.shape[-2], k.shape[-2])
            """,
            "cosine_score": """
                def cosine_score(q, k, eps=1e-8):
                    norms = q.norm(dim=-1).unsqueeze(-1) * k.norm(dim=-1).unsqueeze(-2)    # (..., T_q, T_k)
                    return dot_score(q, k) / torch.maximum(norms, torch.tensor(eps))
            """,
            "masked_softmax": """
                def masked_softmax(scores, mask):
                    # log-sum-exp over the allowed entries only
                    neg = torch.full_like(scores, float("-inf"))
                    s = torch.where(mask, scores, neg)
                    lse = torch.logsumexp(s, dim=-1, keepdim=True)                          # -inf on fully masked rows
                    w = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse))
                    return torch.where(mask, w, torch.zeros_like(w))
            """,
        },
        "must_fail": [],
    },
    "unused_extra_state_style": {
        # Extra state the score does not use: a fill value kept for masking (a float buffer) and a learned
        # temperature kept for a later experiment. The contract names W (and w_q, w_k, v); only those must
        # move the scores.
        "replace": {
            "BilinearScore": _BILINEAR_INIT + '''
        self.register_buffer("mask_value", torch.tensor(-1e9))

    def forward(self, q, k):
        return q @ self.W @ k.transpose(-2, -1)
''',
            "MLPScore": _MLP_INIT + '''
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def forward(self, q, k):
        return self.v(torch.tanh(self.w_q(q).unsqueeze(-2) + self.w_k(k).unsqueeze(-3))).squeeze(-1)
''',
        },
        "must_fail": [],
    },
    "masked_softmax_max_by_hand": {
        "replace": {"masked_softmax": """
            def masked_softmax(scores, mask):
                # subtract the largest allowed score by hand; masked entries are zeroed after exp
                mask = mask.expand_as(scores)
                top = torch.where(mask, scores, torch.full_like(scores, float("-inf"))).amax(dim=-1, keepdim=True)
                top = torch.where(torch.isinf(top), torch.zeros_like(top), top)
                e = torch.where(mask, torch.exp(torch.where(mask, scores - top, torch.zeros_like(scores))), torch.zeros_like(scores))
                total = e.sum(dim=-1, keepdim=True)
                return e / torch.where(total > 0, total, torch.ones_like(total))
        """},
        "must_fail": [],
    },
}

# Graded only with COURSE_PLANTED=all (tests/planting.py): further variants of bugs the core bank already
# catches in the same cells, kept runnable without costing `make test` its time budget.
EXTENDED = [
    "scaled_by_number_of_queries", "cosine_ignores_eps", "masked_softmax_additive_fill",
    "masked_softmax_uniform_on_fully_masked_row", "masked_softmax_max_by_hand",
]

# ---------------------------------------------------------------------------------------- issue 42
# Found by strangers: messages that pointed the wrong way. ``says`` / ``never_says``: what the failing
# cell's message must (not) contain (tests/test_grading.py, message_problems).
VARIANTS["cosine_without_eps"]["says"] = {"test_cosine_score_zero_vector": ["max(norm, eps)"]}
VARIANTS["cosine_without_eps"]["never_says"] = {"test_cosine_score_zero_vector": ["exp()", "subtract the maximum"]}
VARIANTS.update({
    # the text warns against k.T: it passes the 2-D example and breaks on a batched k (a raw shape error before)
    "dot_score_k_T": {
        "replace": {"dot_score": """
            def dot_score(q, k):
                return q @ k.T
        """},
        "must_fail": ["test_dot_score_batched"],
        "says": {"test_dot_score_batched": ["k.transpose(-2, -1)", "dot_score raised"]},
    },
})

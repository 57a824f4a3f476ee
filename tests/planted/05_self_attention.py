"""Planted-bug submissions and correct alternative styles for lesson 05 (self-attention).

Each variant replaces whole solution cells (by grade_id) of the reference solution; ``must_fail``
lists the test cells (by grade_id) that must lose points. An empty ``must_fail`` marks a correct
solution in another style, which must keep full marks.
"""

LESSON = "05_self_attention"

# --------------------------------------------------------------------------------------------
# scaled_dot_product_attention: classic mistakes
# --------------------------------------------------------------------------------------------

SDPA_NO_SCALING = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)                      # forgot / sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights
'''

SDPA_SCALE_BY_D_V = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(v.size(-1))   # the value width, not d_k
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v, weights
'''

SDPA_MASK_AFTER_SOFTMAX = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)           # masked after the softmax: rows no longer sum to 1
    return weights @ v, weights
'''

SDPA_SOFTMAX_OVER_QUERIES = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-2)                 # normalises over the queries
    weights = torch.nan_to_num(weights, nan=0.0)
    return weights @ v, weights
'''

SDPA_FINITE_MASK_FILL = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e4)            # a finite fill the scores can beat
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights
'''

SDPA_NAN_ON_FULLY_MASKED = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)                 # a row of -inf gives NaN, left as is
    return weights @ v, weights
'''

SDPA_UNSTABLE_SOFTMAX = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    e = scores.exp()                                        # no max subtraction: exp(1000) = inf
    if mask is not None:
        e = e * mask
    total = e.sum(-1, keepdim=True)
    weights = torch.where(total > 0, e / total, torch.zeros_like(e))
    return weights @ v, weights
'''

# --------------------------------------------------------------------------------------------
# scaled_dot_product_attention: correct alternative styles
# --------------------------------------------------------------------------------------------

SDPA_EINSUM = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", q, k) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    weights = torch.softmax(scores, dim=-1)
    weights = torch.where(torch.isnan(weights), torch.zeros_like(weights), weights)
    out = torch.einsum("...qk,...kd->...qd", weights, v)
    return out, weights
'''

SDPA_LOOPS = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    T_q, d_k = q.shape[-2], q.shape[-1]
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if mask is None:
        mask = torch.ones(T_q, k.shape[-2], dtype=torch.bool)
    mask = mask.expand(*lead, T_q, k.shape[-2])
    outs, rows = [], []
    for i in range(T_q):                                    # one query at a time
        s = (q[..., i:i + 1, :] * k).sum(-1) / d_k ** 0.5   # (..., T_k)
        allowed = mask[..., i, :]
        s = s.masked_fill(~allowed, float("-inf"))
        m = s.amax(-1, keepdim=True).clamp(min=-1e30)       # a fully masked row has max -inf
        e = (s - m).exp() * allowed
        total = e.sum(-1, keepdim=True)
        w = e / total.clamp(min=1e-38)
        rows.append(w)
        outs.append((w.unsqueeze(-1) * v).sum(-2))
    return torch.stack(outs, -2), torch.stack(rows, -2)
'''

SDPA_FINFO_MIN = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(k.shape[-1])
    if mask is not None:
        scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    weights = F.softmax(scores, dim=-1)
    if mask is not None:
        has_key = mask.any(dim=-1, keepdim=True)            # rows that may see at least one key
        weights = weights * has_key
    return torch.matmul(weights, v), weights
'''

# --------------------------------------------------------------------------------------------
# masks
# --------------------------------------------------------------------------------------------

CAUSAL_SEES_NEXT = '''
def causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).tril(diagonal=1)   # position t also sees t+1
'''

CAUSAL_LOOPS = '''
def causal_mask(T):
    mask = torch.zeros(T, T, dtype=torch.bool)
    for t in range(T):
        for s in range(t + 1):
            mask[t, s] = True
    return mask
'''

PADDING_OFF_BY_ONE = '''
def padding_mask(lengths, T):
    return torch.arange(T).unsqueeze(0) <= lengths.unsqueeze(1)   # keeps one padding token
'''

PADDING_LOOPS = '''
def padding_mask(lengths, T):
    mask = torch.zeros(len(lengths), T, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        mask[b, :n] = True
    return mask
'''

# --------------------------------------------------------------------------------------------
# SelfAttention
# --------------------------------------------------------------------------------------------

SA_SCALE_BY_D_MODEL = '''
class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.d_model = d_model
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_k if d_v is None else d_v)

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)   # the model width, not d_k
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)
        return weights @ v, weights
'''

SA_SHARED_PROJECTION = '''
class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = self.w_q                                  # one projection for all three
        self.w_v = self.w_q

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.w_q(x), self.w_k(x), self.w_v(x), mask)
'''

SA_FORWARD_USES_W_Q_THRICE = '''
class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_k if d_v is None else d_v)

    def forward(self, x, mask=None):
        q = self.w_q(x)
        return scaled_dot_product_attention(q, q, q, mask)   # w_k and w_v never used
'''

SA_INLINE_EINSUM_NO_BIAS = '''
class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.d_k = d_k
        self.w_q = nn.Linear(d_model, d_k, bias=False)
        self.w_k = nn.Linear(d_model, d_k, bias=False)
        self.w_v = nn.Linear(d_model, d_v or d_k, bias=False)

    def forward(self, x, mask=None):
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        scores = torch.einsum("btd,bsd->bts", q, k) / self.d_k ** 0.5
        if mask is not None:
            scores = scores.masked_fill(mask.logical_not(), float("-inf"))
        weights = torch.nan_to_num(scores.softmax(-1), nan=0.0)
        return torch.einsum("bts,bsd->btd", weights, v), weights
'''

# --------------------------------------------------------------------------------------------
# masks read by their shape, an ignored argument, and another correct style
# --------------------------------------------------------------------------------------------

SDPA_GUESSES_PADDING = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        if mask.dim() == 2 and q.dim() == 3 and mask.shape[0] == q.shape[0]:
            mask = mask[:, None, :]                           # "a (B, T) mask must be padding": wrong when B == T
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return weights @ v, weights
'''

SDPA_3D_MASK_GETS_HEAD_AXIS = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        if mask.dim() == 3:
            mask = mask.unsqueeze(1)                          # assumes (B, T_q, T_k) and a heads axis
        scores = torch.where(mask, scores, torch.tensor(float("-inf")))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return weights @ v, weights
'''

SDPA_LOGSUMEXP = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)       # -inf on a fully masked row
    lse = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    weights = torch.exp(scores - lse)
    return weights @ v, weights
'''

PADDING_AS_KEY_MASK = '''
def padding_mask(lengths, T):
    return (torch.arange(T) < lengths[:, None])[:, None, :]    # (B, 1, T): not the documented (B, T)
'''

SA_IGNORES_D_V = '''
class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_k)                      # d_v ignored

    def forward(self, x, mask=None):
        return scaled_dot_product_attention(self.w_q(x), self.w_k(x), self.w_v(x), mask)
'''

SA_GUESSES_PADDING = '''
class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_k if d_v is None else d_v)

    def forward(self, x, mask=None):
        if mask is not None and mask.dim() == 2 and mask.shape[0] == x.shape[0]:
            mask = mask[:, None, :]                           # reads a (T, T) causal mask as padding when B == T
        return scaled_dot_product_attention(self.w_q(x), self.w_k(x), self.w_v(x), mask)
'''

SA_FUSED_QKV_LOOP = '''
class SelfAttention(nn.Module):
    # the three projections stay separate layers, but forward loops over the batch
    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.w_q = nn.Linear(d_model, d_k)
        self.w_k = nn.Linear(d_model, d_k)
        self.w_v = nn.Linear(d_model, d_k if d_v is None else d_v)

    def forward(self, x, mask=None):
        B, T, _ = x.shape
        if mask is None:
            mask = torch.ones(T, T, dtype=torch.bool)
        mask = mask.expand(B, T, T)
        outs, ws = [], []
        for b in range(B):
            o, w = scaled_dot_product_attention(self.w_q(x[b]), self.w_k(x[b]), self.w_v(x[b]), mask[b])
            outs.append(o)
            ws.append(w)
        return torch.stack(outs), torch.stack(ws)
'''

# A module that answers the test differently from how it computes (the red team's "lying projections"): its
# forward attends without the 1/sqrt(d_k) scale, and w_q, called from outside forward, hands out queries
# scaled by sqrt(d_k), so an oracle built on w_q(x) agrees. The test builds its oracle on its own weights.
SA_LYING_PROJECTIONS = '''
class _Proj(nn.Linear):
    inside = False

    def forward(self, x):
        y = super().forward(x)
        return y if _Proj.inside or self.role != "q" else y * math.sqrt(self.out_features)


class SelfAttention(nn.Module):
    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        d_v = d_k if d_v is None else d_v
        self.w_q, self.w_k, self.w_v = _Proj(d_model, d_k), _Proj(d_model, d_k), _Proj(d_model, d_v)
        self.w_q.role, self.w_k.role, self.w_v.role = "q", "k", "v"

    def forward(self, x, mask=None):
        _Proj.inside = True
        try:
            q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        finally:
            _Proj.inside = False
        return scaled_dot_product_attention(q * math.sqrt(q.size(-1)), k, v, mask)   # unscaled scores
'''

VARIANTS = {
    # ---- bugs in scaled_dot_product_attention
    "sdpa_no_scaling": {
        "replace": {"scaled_dot_product_attention": SDPA_NO_SCALING},
        "must_fail": ["test_sdpa_matches_pytorch", "test_sdpa_scale"],
    },
    "sdpa_scale_by_d_v": {
        "replace": {"scaled_dot_product_attention": SDPA_SCALE_BY_D_V},
        "must_fail": ["test_sdpa_scale"],
    },
    "sdpa_mask_after_softmax": {
        "replace": {"scaled_dot_product_attention": SDPA_MASK_AFTER_SOFTMAX},
        "must_fail": ["test_sdpa_masks", "test_sdpa_rows_sum_to_one", "test_self_attention_causal_no_leak"],
    },
    "sdpa_softmax_over_queries": {
        "replace": {"scaled_dot_product_attention": SDPA_SOFTMAX_OVER_QUERIES},
        "must_fail": ["test_sdpa_rows_sum_to_one", "test_sdpa_matches_pytorch"],
    },
    "sdpa_finite_mask_fill": {
        "replace": {"scaled_dot_product_attention": SDPA_FINITE_MASK_FILL},
        "must_fail": ["test_sdpa_fully_masked", "test_sdpa_large_logits"],
    },
    "sdpa_nan_on_fully_masked": {
        "replace": {"scaled_dot_product_attention": SDPA_NAN_ON_FULLY_MASKED},
        "must_fail": ["test_sdpa_fully_masked"],
    },
    "sdpa_unstable_softmax": {
        "replace": {"scaled_dot_product_attention": SDPA_UNSTABLE_SOFTMAX},
        "must_fail": ["test_sdpa_large_logits"],
    },
    # ---- bugs in the masks
    "causal_mask_sees_next": {
        "replace": {"causal_mask": CAUSAL_SEES_NEXT},
        "must_fail": ["test_causal_mask", "test_self_attention_causal_no_leak"],
    },
    # course.masks.causal is the later lessons' copy of the answer: the exercise forbids calling it
    "causal_mask_calls_course_masks": {
        "replace": {"causal_mask": "def causal_mask(T):\n    return masks.causal(T)\n"},
        "must_fail": ["test_causal_mask"],
    },
    "padding_mask_off_by_one": {
        "replace": {"padding_mask": PADDING_OFF_BY_ONE},
        "must_fail": ["test_padding_mask"],
    },
    # ---- bugs in SelfAttention
    "self_attention_scale_by_d_model": {
        "replace": {"SelfAttention": SA_SCALE_BY_D_MODEL},
        "must_fail": ["test_self_attention_matches_pytorch"],
    },
    "self_attention_shared_projection": {
        "replace": {"SelfAttention": SA_SHARED_PROJECTION},
        "must_fail": ["test_self_attention_projections"],
    },
    "self_attention_uses_w_q_thrice": {
        "replace": {"SelfAttention": SA_FORWARD_USES_W_Q_THRICE},
        "must_fail": ["test_self_attention_projections", "test_self_attention_matches_pytorch"],
    },
    # ---- masks read by their shape, an ignored documented argument
    "sdpa_2d_mask_guessed_as_padding_when_B_equals_T": {
        "replace": {"scaled_dot_product_attention": SDPA_GUESSES_PADDING},
        "must_fail": ["test_sdpa_masks"],
    },
    "sdpa_3d_mask_given_a_head_axis": {
        "replace": {"scaled_dot_product_attention": SDPA_3D_MASK_GETS_HEAD_AXIS},
        "must_fail": ["test_sdpa_masks", "test_sdpa_fully_masked"],
    },
    "padding_mask_returns_key_mask_shape": {
        "replace": {"padding_mask": PADDING_AS_KEY_MASK},
        "must_fail": ["test_padding_mask"],
    },
    "self_attention_ignores_d_v": {
        "replace": {"SelfAttention": SA_IGNORES_D_V},
        "must_fail": ["test_self_attention_shapes", "test_self_attention_projections"],
    },
    "self_attention_guesses_padding_when_B_equals_T": {
        "replace": {"SelfAttention": SA_GUESSES_PADDING},
        "must_fail": ["test_self_attention_causal_no_leak"],
    },
    # ---- correct alternative styles: full marks
    "sdpa_einsum_where": {"replace": {"scaled_dot_product_attention": SDPA_EINSUM}, "must_fail": []},
    "sdpa_loop_over_queries": {"replace": {"scaled_dot_product_attention": SDPA_LOOPS}, "must_fail": []},
    "sdpa_finfo_min_fill": {"replace": {"scaled_dot_product_attention": SDPA_FINFO_MIN}, "must_fail": []},
    "masks_with_loops": {"replace": {"causal_mask": CAUSAL_LOOPS, "padding_mask": PADDING_LOOPS}, "must_fail": []},
    "self_attention_inline_einsum_no_bias": {"replace": {"SelfAttention": SA_INLINE_EINSUM_NO_BIAS}, "must_fail": []},
    "sdpa_logsumexp": {"replace": {"scaled_dot_product_attention": SDPA_LOGSUMEXP}, "must_fail": []},
    "self_attention_loop_over_batch": {"replace": {"SelfAttention": SA_FUSED_QKV_LOOP}, "must_fail": []},
    "self_attention_lying_projections": {"replace": {"SelfAttention": SA_LYING_PROJECTIONS},
                                         "must_fail": ["test_self_attention_matches_pytorch"]},
}

# Graded only with COURSE_PLANTED=all (tests/planting.py): further variants of bugs the core bank already
# catches in the same cells, kept runnable without costing `make test` its time budget.
EXTENDED = [
    "sdpa_nan_on_fully_masked", "self_attention_uses_w_q_thrice", "padding_mask_returns_key_mask_shape",
    "self_attention_guesses_padding_when_B_equals_T", "sdpa_finfo_min_fill", "masks_with_loops",
]

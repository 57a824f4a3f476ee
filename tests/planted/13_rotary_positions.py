"""Planted-bug submissions and correct alternative styles for lesson 13 (rotary positions, ALiBi).

Each variant replaces whole solution cells (by grade_id) of the reference solution; ``must_fail``
lists the test cells (by grade_id) that must lose points. An empty ``must_fail`` marks a correct
solution in another style, which must keep full marks. The bugs the lesson's issue names come first;
``EXTENDED`` holds more bugs of the same cells and more styles (``COURSE_PLANTED=all``).
"""

from planting import derived

LESSON = "13_rotary_positions"


def rope(*changes):
    return derived(LESSON, "apply_rope", *changes)


def attention(*changes):
    return derived(LESSON, "RotarySelfAttention", *changes)


def alibi(*changes):
    return derived(LESSON, "alibi_bias", *changes)


# --------------------------------------------------------------------------------------------
# apply_rope: the classic bugs
# --------------------------------------------------------------------------------------------

INTERLEAVED_PAIRS = '''
def apply_rope(x, positions, base=10000.0):
    positions = torch.as_tensor(positions)
    theta = rope_frequencies(x.shape[-1], base).double()
    angles = positions.double()[..., None] * theta
    if positions.dim() == 2:
        angles = angles.view(angles.shape[0], *([1] * (x.dim() - 3)), *angles.shape[1:])
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]             # neighbours 2i, 2i+1 (GPT-J): the contract pairs i with i + Dh/2
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
'''

SAME_ANGLE_EVERY_PAIR = rope(
    ("theta = rope_frequencies(x.shape[-1], base).to(device=x.device, dtype=torch.float64)",
     "theta = torch.full((half,), base ** (-2.0 / x.shape[-1]), dtype=torch.float64)   # one angle for every pair"))

IGNORES_POSITIONS = rope(
    ("positions = torch.as_tensor(positions, device=x.device)",
     "positions = torch.arange(x.shape[-2], device=x.device)      # the positions given are ignored"))

HEADS_TAKE_THE_ROWS = rope(                          # (B, T) positions: no head axis, so row b meets head b
    ("angles = angles.view(angles.shape[0], *([1] * (x.dim() - 3)), *angles.shape[1:])", "pass"))

TURNS_BACKWARDS = rope(("x1 * cos - x2 * sin, x1 * sin + x2 * cos", "x1 * cos + x2 * sin, -x1 * sin + x2 * cos"))

WRITES_INTO_X = '''
def apply_rope(x, positions, base=10000.0):
    half = x.shape[-1] // 2
    positions = torch.as_tensor(positions)
    angles = positions.double()[..., None] * rope_frequencies(x.shape[-1], base).double()
    if positions.dim() == 2:
        angles = angles.view(angles.shape[0], *([1] * (x.dim() - 3)), *angles.shape[1:])
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half].clone(), x[..., half:].clone()
    x[..., :half] = x1 * cos - x2 * sin              # in place: the caller's tensor changes
    x[..., half:] = x1 * sin + x2 * cos
    return x
'''

FREQUENCIES_WRONG_EXPONENT = '''
def rope_frequencies(head_dim, base=10000.0):
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return (base ** (-i / head_dim)).float()          # -i/Dh: the exponent of pair i is -2i/Dh
'''

FREQUENCIES_ALL_ONE_ANGLE = '''
def rope_frequencies(head_dim, base=10000.0):
    return torch.full((head_dim // 2,), base ** (-2.0 / head_dim))
'''

# --------------------------------------------------------------------------------------------
# RotarySelfAttention: the classic bugs
# --------------------------------------------------------------------------------------------

ROTATES_VALUES = attention(
    ("k = apply_rope(k, positions, self.base)                 # ... never the values",
     "k = apply_rope(k, positions, self.base)\n        v = apply_rope(v, positions, self.base)        # v rotated too"))

ROTATES_ALONG_HEADS = '''
class RotarySelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, base=10000.0, bias=False):
        super().__init__()
        self.n_heads, self.base = n_heads, base
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, positions=None, causal=True):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = (w(x).view(B, T, H, D // H) for w in (self.w_q, self.w_k, self.w_v))   # (B, T, H, Dh)
        if positions is None:
            positions = torch.arange(q.shape[-2])     # the axis before Dh is the heads here, not time
        q, k = apply_rope(q, positions, self.base), apply_rope(k, positions, self.base)   # rotated before the transpose
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.w_o(out.transpose(1, 2).reshape(B, T, D))
'''

ROTATES_BEFORE_THE_SPLIT = '''
class RotarySelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, base=10000.0, bias=False):
        super().__init__()
        self.n_heads, self.base = n_heads, base
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, positions=None, causal=True):
        B, T, D = x.shape
        H = self.n_heads
        if positions is None:
            positions = torch.arange(T)
        q = apply_rope(self.w_q(x), positions, self.base)          # all D features turned as one head
        k = apply_rope(self.w_k(x), positions, self.base)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, self.w_v(x)))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.w_o(out.transpose(1, 2).reshape(B, T, D))
'''

NO_SCALE = attention(("is_causal=causal)", "is_causal=causal, scale=1.0)   # no 1/sqrt(Dh)"))

IGNORES_GIVEN_POSITIONS = attention(
    ("        if positions is None:\n            positions = torch.arange(T, device=x.device)",
     "        positions = torch.arange(T, device=x.device)                 # the positions given are ignored"))

ALWAYS_CAUSAL = attention(("is_causal=causal)", "is_causal=True)"))

NO_BIAS_EVER = attention(*[(f"self.{w} = nn.Linear(d_model, d_model, bias=bias)", f"self.{w} = nn.Linear(d_model, d_model, bias=False)")
                           for w in ("w_q", "w_k", "w_v", "w_o")])

# --------------------------------------------------------------------------------------------
# alibi_bias: the classic bugs
# --------------------------------------------------------------------------------------------

SLOPES_REVERSED = alibi(
    ("slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, dtype=torch.float64) / n_heads)",
     "slopes = 2.0 ** (-8.0 * torch.arange(n_heads, 0, -1, dtype=torch.float64) / n_heads)   # head 0 the gentlest"))

BIAS_ON_THE_FUTURE = alibi(
    ("distance = (query_pos - key_pos).to(torch.float64)", "distance = (query_pos - key_pos).abs().to(torch.float64)"),
    ('return bias.masked_fill(key_pos > query_pos, float("-inf")).float()', "return bias.float()       # future keys biased, not masked"))

SLOPES_WRONG_FORMULA = alibi(("slopes = 2.0 ** (-8.0 *", "slopes = 2.0 ** (-1.0 *"))

ALIGNED_TO_THE_FIRST_KEYS = alibi(("query_pos = torch.arange(T_q)[:, None] + (T_k - T_q)", "query_pos = torch.arange(T_q)[:, None]"))

FINITE_MASK = alibi(('float("-inf")).float()', "-1e4).float()           # a finite 'mask' the scores can beat"))

# --------------------------------------------------------------------------------------------
# Correct alternatives
# --------------------------------------------------------------------------------------------

FREQUENCIES_HF_STYLE = '''
def rope_frequencies(head_dim, base=10000.0):
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
'''

ROPE_COMPLEX = '''
def apply_rope(x, positions, base=10000.0):
    """Pair i as the complex number x[i] + 1j x[i + Dh/2], multiplied by exp(1j p theta_i)."""
    h = x.shape[-1] // 2
    p = torch.as_tensor(positions).to(torch.float64)
    if p.dim() == 2:
        p = p.reshape(p.shape[0], *([1] * (x.dim() - 3)), p.shape[1])
    angles = p[..., None] * rope_frequencies(2 * h, base).double()
    z = torch.complex(x[..., :h].double(), x[..., h:].double()) * torch.exp(1j * angles)
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)
'''

ROPE_POLAR = '''
def apply_rope(x, positions, base=10000.0):
    h = x.shape[-1] // 2
    p = torch.as_tensor(positions).float()
    angles = p[..., None] * rope_frequencies(2 * h, base)                  # float32 angles, as transformers does
    if p.dim() == 2:
        angles = angles.reshape(angles.shape[0], *([1] * (x.dim() - 3)), *angles.shape[1:])
    turn = torch.polar(torch.ones_like(angles), angles)                   # exp(1j * angle), complex64
    z = torch.view_as_complex(torch.stack([x[..., :h].float(), x[..., h:].float()], dim=-1).contiguous()) * turn
    out = torch.view_as_real(z)                                           # (..., T, h, 2)
    return torch.cat([out[..., 0], out[..., 1]], dim=-1).to(x.dtype)
'''

ROPE_EINSUM = '''
def apply_rope(x, positions, base=10000.0):
    h = x.shape[-1] // 2
    p = torch.as_tensor(positions).double()
    if p.dim() == 2:
        p = p.reshape(p.shape[0], *([1] * (x.dim() - 3)), p.shape[1])
    angles = p[..., None] * rope_frequencies(2 * h, base).double()          # (..., T, h)
    c, s = angles.cos(), angles.sin()
    rot = torch.stack([torch.stack([c, -s], dim=-1), torch.stack([s, c], dim=-1)], dim=-2)   # (..., T, h, 2, 2)
    pairs = torch.stack([x[..., :h], x[..., h:]], dim=-1)                   # (..., T, h, 2)
    rot = rot.to(x.dtype).expand(*pairs.shape[:-1], 2, 2)
    out = torch.einsum("...ij,...j->...i", rot, pairs)
    return torch.cat([out[..., 0], out[..., 1]], dim=-1)
'''

ROPE_INTERLEAVED_PERMUTED = '''
def apply_rope(x, positions, base=10000.0):
    """GPT-J's neighbour pairs, after permuting the features so that neighbours are (i, i + Dh/2)."""
    Dh = x.shape[-1]
    h = Dh // 2
    perm = torch.arange(Dh).view(2, h).T.reshape(-1)          # slots read features 0, h, 1, h + 1, ...
    back = torch.argsort(perm)
    p = torch.as_tensor(positions).double()
    if p.dim() == 2:
        p = p.reshape(p.shape[0], *([1] * (x.dim() - 3)), p.shape[1])
    angles = p[..., None] * rope_frequencies(Dh, base).double()
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    pairs = x[..., perm].unflatten(-1, (h, 2))                 # (..., T, h, 2): neighbours
    a, b = pairs[..., 0], pairs[..., 1]
    turned = torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    return turned[..., back]
'''

ATTENTION_CACHED_COS_SIN = '''
class RotarySelfAttention(nn.Module):
    """Llama's own style: cos and sin cached per position (float32), rotate_half, an explicit softmax."""

    def __init__(self, d_model, n_heads, base=10000.0, bias=False):
        super().__init__()
        self.n_heads, self.base = n_heads, base
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        d_head = d_model // n_heads
        self.register_buffer("inv_freq", 1.0 / (base ** (torch.arange(0, d_head, 2).float() / d_head)), persistent=False)
        self._cache(16)

    def _cache(self, n):
        freqs = torch.outer(torch.arange(n, dtype=torch.float32), self.inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    @staticmethod
    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)

    def forward(self, x, positions=None, causal=True):
        B, T, D = x.shape
        H = self.n_heads
        positions = torch.arange(T) if positions is None else torch.as_tensor(positions).long()
        if int(positions.max()) >= self.cos_cached.shape[0]:
            self._cache(2 * int(positions.max()) + 1)
        cos, sin = self.cos_cached[positions], self.sin_cached[positions]      # (T, Dh) or (B, T, Dh)
        if positions.dim() == 2:
            cos, sin = cos[:, None], sin[:, None]
        q, k, v = (w(x).view(B, T, H, D // H).transpose(1, 2) for w in (self.w_q, self.w_k, self.w_v))
        q = q * cos + self.rotate_half(q) * sin
        k = k * cos + self.rotate_half(k) * sin
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)
        if causal:
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        out = torch.softmax(scores, dim=-1) @ v
        return self.w_o(out.transpose(1, 2).reshape(B, T, D))
'''

ATTENTION_HEAD_LOOP = '''
class RotarySelfAttention(nn.Module):
    """One head at a time, with einsum and apply_rope on (B, T, Dh) slices."""

    def __init__(self, d_model, n_heads, base=10000.0, bias=False):
        super().__init__()
        self.n_heads = n_heads
        self.base = base
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))

    def forward(self, x, positions=None, causal=True):
        B, T, D = x.shape
        Dh = D // self.n_heads
        pos = torch.arange(T) if positions is None else torch.as_tensor(positions)
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        heads = []
        for h in range(self.n_heads):
            cols = slice(h * Dh, (h + 1) * Dh)
            qh = apply_rope(q[..., cols], pos, self.base)
            kh = apply_rope(k[..., cols], pos, self.base)
            scores = torch.einsum("btd,bsd->bts", qh, kh) / Dh ** 0.5
            if causal:
                scores = torch.where(torch.ones(T, T, dtype=torch.bool).tril(), scores, torch.tensor(float("-inf")))
            heads.append(torch.einsum("bts,bsd->btd", scores.softmax(-1), v[..., cols]))
        return self.w_o(torch.cat(heads, dim=-1))
'''

ALIBI_LOOPS = '''
def alibi_bias(n_heads, T_q, T_k):
    out = torch.empty(n_heads, T_q, T_k)
    offset = T_k - T_q
    for h in range(n_heads):
        slope = 2 ** (-8 * (h + 1) / n_heads)
        for i in range(T_q):
            for j in range(T_k):
                out[h, i, j] = -slope * (i + offset - j) if j <= i + offset else float("-inf")
    return out
'''

ALIBI_WHERE_DTYPE_MIN = '''
def alibi_bias(n_heads, T_q, T_k):
    slopes = torch.pow(2.0, -8.0 / n_heads * torch.arange(1, n_heads + 1, dtype=torch.float32))
    relative = torch.arange(T_k)[None, :] - torch.arange(T_k - T_q, T_k)[:, None]     # j - p: <= 0 where visible
    bias = slopes[:, None, None] * relative
    return torch.where(relative <= 0, bias, torch.finfo(torch.float32).min)
'''

VARIANTS = {
    # the bugs the lesson's issue names
    # GPT-J's pairing fails every later check of RoPE too; their messages must send the learner to the pairing,
    # not claim that the scores are not relative (they are) or that the pairs share one angle
    "rope_interleaved_pairs": {"replace": {"apply_rope": INTERLEAVED_PAIRS},
                               "must_fail": ["test_apply_rope_pairing", "test_apply_rope_frequencies",
                                             "test_apply_rope_relative", "test_rotary_attention_matches_llama"],
                               "says": {g: "pairing of dimensions is not RoPE's" for g in
                                        ("test_apply_rope_frequencies", "test_apply_rope_relative",
                                         "test_rotary_attention_matches_llama")},
                               "never_says": {"test_apply_rope_frequencies": "not one angle for all"}},
    "rope_rotates_values": {"replace": {"RotarySelfAttention": ROTATES_VALUES},
                            "must_fail": ["test_rotary_attention_matches_llama", "test_rotary_attention_positions"]},
    "rope_rotates_along_heads": {"replace": {"RotarySelfAttention": ROTATES_ALONG_HEADS},
                                 "must_fail": ["test_rotary_attention_matches_llama"]},
    "rope_same_angle_every_pair": {"replace": {"apply_rope": SAME_ANGLE_EVERY_PAIR}, "must_fail": ["test_apply_rope_frequencies"]},
    "rope_ignores_positions": {"replace": {"apply_rope": IGNORES_POSITIONS},
                               "must_fail": ["test_apply_rope_positions", "test_apply_rope_relative"]},
    "alibi_slopes_reversed": {"replace": {"alibi_bias": SLOPES_REVERSED}, "must_fail": ["test_alibi_bias_slopes"]},
    "alibi_bias_on_the_future": {"replace": {"alibi_bias": BIAS_ON_THE_FUTURE}, "must_fail": ["test_alibi_bias_causal"]},
    # correct alternatives
    "rope_complex_style": {"replace": {"apply_rope": ROPE_COMPLEX, "rope_frequencies": FREQUENCIES_HF_STYLE}, "must_fail": []},
    "rope_polar_cached_cos_sin_style": {"replace": {"apply_rope": ROPE_POLAR, "RotarySelfAttention": ATTENTION_CACHED_COS_SIN,
                                                    "alibi_bias": ALIBI_WHERE_DTYPE_MIN}, "must_fail": []},
    "rope_einsum_head_loop_style": {"replace": {"apply_rope": ROPE_EINSUM, "RotarySelfAttention": ATTENTION_HEAD_LOOP,
                                                "alibi_bias": ALIBI_LOOPS}, "must_fail": []},
    "rope_interleaved_permuted_style": {"replace": {"apply_rope": ROPE_INTERLEAVED_PERMUTED}, "must_fail": []},
    # more bugs of the same cells
    "rope_frequencies_wrong_exponent": {"replace": {"rope_frequencies": FREQUENCIES_WRONG_EXPONENT},
                                        "must_fail": ["test_rope_frequencies"]},
    "rope_frequencies_one_angle": {"replace": {"rope_frequencies": FREQUENCIES_ALL_ONE_ANGLE}, "must_fail": ["test_rope_frequencies"]},
    "rope_heads_take_the_rows": {"replace": {"apply_rope": HEADS_TAKE_THE_ROWS}, "must_fail": ["test_apply_rope_positions"]},
    "rope_turns_backwards": {"replace": {"apply_rope": TURNS_BACKWARDS}, "must_fail": ["test_apply_rope_pairing"]},
    "rope_writes_into_x": {"replace": {"apply_rope": WRITES_INTO_X}, "must_fail": ["test_apply_rope_shapes"]},
    "rope_rotates_before_the_split": {"replace": {"RotarySelfAttention": ROTATES_BEFORE_THE_SPLIT},
                                      "must_fail": ["test_rotary_attention_matches_llama"]},
    "rope_attention_no_scale": {"replace": {"RotarySelfAttention": NO_SCALE}, "must_fail": ["test_rotary_attention_matches_llama"]},
    "rope_attention_ignores_given_positions": {"replace": {"RotarySelfAttention": IGNORES_GIVEN_POSITIONS},
                                               "must_fail": ["test_rotary_attention_positions"]},
    "rope_attention_always_causal": {"replace": {"RotarySelfAttention": ALWAYS_CAUSAL}, "must_fail": ["test_rotary_attention_causal"]},
    "rope_attention_no_bias_ever": {"replace": {"RotarySelfAttention": NO_BIAS_EVER}, "must_fail": ["test_rotary_attention_structure"]},
    "alibi_slopes_wrong_formula": {"replace": {"alibi_bias": SLOPES_WRONG_FORMULA}, "must_fail": ["test_alibi_bias_slopes"]},
    "alibi_aligned_to_the_first_keys": {"replace": {"alibi_bias": ALIGNED_TO_THE_FIRST_KEYS}, "must_fail": ["test_alibi_bias_causal"]},
    "alibi_finite_mask": {"replace": {"alibi_bias": FINITE_MASK}, "must_fail": ["test_alibi_bias_causal"]},
}

EXTENDED = [
    "rope_frequencies_wrong_exponent", "rope_frequencies_one_angle", "rope_heads_take_the_rows", "rope_turns_backwards",
    "rope_writes_into_x", "rope_rotates_before_the_split", "rope_attention_no_scale", "rope_attention_ignores_given_positions",
    "rope_attention_always_causal", "rope_attention_no_bias_ever", "alibi_slopes_wrong_formula",
    "alibi_aligned_to_the_first_keys", "alibi_finite_mask",
]

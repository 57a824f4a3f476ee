"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "13_rotary_positions"
VARIANTS = {
    "freq_inverse_power_arange_step_style": {
        "blind": True, "style": "Llama's 1 / base ** (arange(0, Dh, 2) / Dh), in float32",
        "replace": {"rope_frequencies": '''
def rope_frequencies(head_dim, base=10000.0):
    return 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
'''},
        "must_fail": [],
    },
    "freq_log_space_float64_style": {
        "blind": True, "style": "exp(-2i log(base) / Dh) computed in float64, cast to float32",
        "replace": {"rope_frequencies": '''
def rope_frequencies(head_dim, base=10000.0):
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return torch.exp(-2.0 * i * math.log(base) / head_dim).to(torch.float32)
'''},
        "must_fail": [],
    },
    "freq_python_list_style": {
        "blind": True, "style": "a Python list of floats turned into a tensor",
        "replace": {"rope_frequencies": '''
def rope_frequencies(head_dim, base=10000.0):
    half = head_dim // 2
    return torch.tensor([float(base) ** (-2.0 * i / head_dim) for i in range(half)], dtype=torch.float32)
'''},
        "must_fail": [],
    },
    "rope_rotate_half_cat_style": {
        "blind": True, "style": "transformers' rotate_half: x * cos + rotate_half(x) * sin, angles duplicated with cat",
        "replace": {"apply_rope": '''
def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x, positions, base=10000.0):
    Dh = x.shape[-1]
    theta = rope_frequencies(Dh, base).to(device=x.device, dtype=torch.float64)          # (Dh/2,)
    pos = torch.as_tensor(positions, device=x.device).to(torch.float64)
    angles = pos[..., None] * theta                                                      # (T, Dh/2) or (B, T, Dh/2)
    angles = torch.cat([angles, angles], dim=-1)                                         # (..., T, Dh)
    if pos.dim() == 2:                                                                   # (B, T): one row per sequence
        angles = angles.reshape(angles.shape[0], *([1] * (x.dim() - 3)), *angles.shape[1:])
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return x * cos + _rotate_half(x) * sin
'''},
        "must_fail": [],
    },
    "rope_complex_polar_style": {
        "blind": True, "style": "pairs as complex numbers x_i + i x_(i+h), multiplied by polar(1, p theta)",
        "replace": {"apply_rope": '''
def apply_rope(x, positions, base=10000.0):
    h = x.shape[-1] // 2
    theta = rope_frequencies(2 * h, base).double().to(x.device)
    pos = positions.to(device=x.device, dtype=torch.float64)
    angles = torch.outer(pos.reshape(-1), theta).reshape(*pos.shape, h)                # (T, h) or (B, T, h)
    if pos.dim() == 2:
        for _ in range(x.dim() - 3):
            angles = angles.unsqueeze(1)                                                 # (B, 1, ..., T, h)
    rot = torch.polar(torch.ones_like(angles), angles).to(torch.complex64)
    z = torch.complex(x[..., :h].float(), x[..., h:].float()) * rot
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)
'''},
        "must_fail": [],
    },
    "rope_pair_loop_float32_angles_style": {
        "blind": True, "style": "an explicit loop over the pairs, angles in float32 as transformers computes them",
        "replace": {"apply_rope": '''
def apply_rope(x, positions, base=10000.0):
    Dh = x.shape[-1]
    h = Dh // 2
    theta = rope_frequencies(Dh, base).to(x.device)
    p = positions.to(x.device).float()
    if p.dim() == 2:                                       # (B, T) -> (B, 1, ..., 1, T) to meet x[..., t]
        p = p.reshape(p.shape[0], *([1] * (x.dim() - 3)), p.shape[1])
    firsts, seconds = [], []
    for i in range(h):
        c = torch.cos(p * theta[i]).to(x.dtype)
        s = torch.sin(p * theta[i]).to(x.dtype)
        a, b = x[..., i], x[..., i + h]
        firsts.append(a * c - b * s)
        seconds.append(a * s + b * c)
    return torch.stack(firsts + seconds, dim=-1)
'''},
        "must_fail": [],
    },
    "rope_rotation_matrix_matmul_style": {
        "blind": True, "style": "a (Dh, Dh) rotation matrix per position applied with a broadcast matmul",
        "replace": {"apply_rope": '''
def apply_rope(x, positions, base=10000.0):
    Dh = x.shape[-1]
    h = Dh // 2
    theta = rope_frequencies(Dh, base).double().to(x.device)
    ang = positions.to(x.device).double().unsqueeze(-1) * theta                        # (..., T, h)
    c, s = ang.cos(), ang.sin()
    R = torch.zeros(*ang.shape[:-1], Dh, Dh, dtype=torch.float64, device=x.device)     # (..., T, Dh, Dh)
    idx = torch.arange(h, device=x.device)
    R[..., idx, idx] = c
    R[..., idx, idx + h] = -s
    R[..., idx + h, idx] = s
    R[..., idx + h, idx + h] = c
    if positions.dim() == 2:
        R = R.reshape(R.shape[0], *([1] * (x.dim() - 3)), *R.shape[1:])
    out = R.to(x.dtype) @ x.unsqueeze(-1)                                               # (..., T, Dh, 1)
    return out.squeeze(-1)
'''},
        "must_fail": [],
    },
    "rotary_attn_manual_masked_fill_style": {
        "blind": True, "style": "scores written out, masked_fill with a tril mask, softmax, batched heads",
        "replace": {"RotarySelfAttention": '''
class RotarySelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, base=10000.0, bias=False):
        super().__init__()
        assert d_model % n_heads == 0 and (d_model // n_heads) % 2 == 0, "each head needs an even number of features"
        self.n_heads = n_heads
        self.base = base
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, x, positions=None, causal=True):
        B, T, D = x.shape
        H = self.n_heads
        Dh = D // H
        if positions is None:
            positions = torch.arange(T, device=x.device)
        q = self.w_q(x).view(B, T, H, Dh).transpose(1, 2)          # (B, H, T, Dh)
        k = self.w_k(x).view(B, T, H, Dh).transpose(1, 2)
        v = self.w_v(x).view(B, T, H, Dh).transpose(1, 2)
        q = apply_rope(q, positions, self.base)
        k = apply_rope(k, positions, self.base)
        scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)           # (B, H, T, T)
        if causal:
            allowed = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            scores = scores.masked_fill(~allowed, float("-inf"))
        out = scores.softmax(dim=-1) @ v                            # (B, H, T, Dh)
        return self.w_o(out.transpose(1, 2).reshape(B, T, D))
'''},
        "must_fail": [],
    },
    "rotary_attn_sdpa_unflatten_style": {
        "blind": True, "style": "F.scaled_dot_product_attention(is_causal=causal), unflatten / flatten for the heads",
        "replace": {"RotarySelfAttention": '''
class RotarySelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, base=10000.0, bias=False):
        super().__init__()
        assert d_model % n_heads == 0 and (d_model // n_heads) % 2 == 0, "each head needs an even number of features"
        self.n_heads = n_heads
        self.base = base
        for name in ("w_q", "w_k", "w_v", "w_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))

    def _heads(self, t):
        return t.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)  # (B, T, D) -> (B, H, T, Dh)

    def forward(self, x, positions=None, causal=True):
        T = x.shape[1]
        pos = torch.arange(T, device=x.device) if positions is None else positions.to(x.device)
        q = apply_rope(self._heads(self.w_q(x)), pos, self.base)
        k = apply_rope(self._heads(self.w_k(x)), pos, self.base)
        v = self._heads(self.w_v(x))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.w_o(out.transpose(1, 2).flatten(2))
'''},
        "must_fail": [],
    },
    "rotary_attn_head_loop_einsum_where_style": {
        "blind": True, "style": "a Python loop over heads on (B, T, Dh) slices, einsum scores, torch.where mask",
        "replace": {"RotarySelfAttention": '''
class RotarySelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, base=10000.0, bias=False):
        super().__init__()
        assert d_model % n_heads == 0 and (d_model // n_heads) % 2 == 0, "each head needs an even number of features"
        self.n_heads = n_heads
        self.base = base
        self.w_q = nn.Linear(d_model, d_model, bias)
        self.w_k = nn.Linear(d_model, d_model, bias)
        self.w_v = nn.Linear(d_model, d_model, bias)
        self.w_o = nn.Linear(d_model, d_model, bias)

    def forward(self, x, positions=None, causal=True):
        B, T, D = x.shape
        Dh = D // self.n_heads
        if positions is None:
            positions = torch.arange(T, device=x.device)
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        keep = torch.ones(T, T, dtype=torch.bool, device=x.device)
        if causal:
            keep = keep.tril()
        outs = []
        for h in range(self.n_heads):
            cols = slice(h * Dh, (h + 1) * Dh)
            qh = apply_rope(q[..., cols], positions, self.base)            # (B, T, Dh)
            kh = apply_rope(k[..., cols], positions, self.base)
            s = torch.einsum("bid,bjd->bij", qh, kh) / math.sqrt(Dh)       # (B, T, T)
            s = torch.where(keep, s, torch.full_like(s, float("-inf")))
            outs.append(torch.einsum("bij,bjd->bid", torch.softmax(s, dim=-1), v[..., cols]))
        return self.w_o(torch.cat(outs, dim=-1))
'''},
        "must_fail": [],
    },
    "rotary_attn_inv_freq_buffer_inline_style": {
        "blind": True,
        "style": "the frequencies kept in a non-persistent buffer, q and k turned in one inline rotate-half step "
                 "(the rotation apply_rope computes, written out as Llama's rotary module does)",
        "replace": {"RotarySelfAttention": """
class RotarySelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, base=10000.0, bias=False):
        super().__init__()
        assert d_model % n_heads == 0 and (d_model // n_heads) % 2 == 0, "each head needs an even number of features"
        self.n_heads = n_heads
        self.base = base
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.register_buffer("inv_freq", rope_frequencies(d_model // n_heads, base), persistent=False)

    def forward(self, x, positions=None, causal=True):
        B, T, D = x.shape
        H, Dh = self.n_heads, D // self.n_heads
        pos = torch.arange(T, device=x.device) if positions is None else positions.to(x.device)
        ang = pos.double()[..., None] * self.inv_freq.double()             # (T, Dh/2) or (B, T, Dh/2)
        ang = torch.cat([ang, ang], dim=-1)
        if ang.dim() == 3:
            ang = ang[:, None]                                               # (B, 1, T, Dh): every head of sequence b
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)

        def turn(t):
            t1, t2 = t[..., :Dh // 2], t[..., Dh // 2:]
            return t * cos + torch.cat([-t2, t1], dim=-1) * sin

        q = turn(self.w_q(x).view(B, T, H, Dh).transpose(1, 2))
        k = turn(self.w_k(x).view(B, T, H, Dh).transpose(1, 2))
        v = self.w_v(x).view(B, T, H, Dh).transpose(1, 2)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril() if causal else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.w_o(out.transpose(1, 2).contiguous().view(B, T, D))
"""},
        "must_fail": [],
    },
    "alibi_broadcast_masked_fill_style": {
        "blind": True, "style": "slopes 2 ** (-8 arange(1, H+1) / H), distances by broadcasting, masked_fill(-inf)",
        "replace": {"alibi_bias": '''
def alibi_bias(n_heads, T_q, T_k):
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, dtype=torch.float32) / n_heads)      # (H,)
    query_pos = torch.arange(T_q)[:, None] + (T_k - T_q)                                      # (T_q, 1)
    dist = (query_pos - torch.arange(T_k)[None, :]).float()                                   # (T_q, T_k)
    bias = -slopes[:, None, None] * dist                                                      # (H, T_q, T_k)
    return bias.masked_fill(dist < 0, float("-inf"))
'''},
        "must_fail": [],
    },
    "alibi_geometric_tril_finfo_min_style": {
        "blind": True, "style": "BLOOM's geometric slopes start ** (h+1), a tril(T_k - T_q) mask, torch.where with the dtype's minimum",
        "replace": {"alibi_bias": '''
def alibi_bias(n_heads, T_q, T_k):
    start = 2.0 ** (-8.0 / n_heads)
    slopes = torch.tensor([start ** (h + 1) for h in range(n_heads)])
    j = torch.arange(T_k, dtype=torch.float32)
    i = torch.arange(T_q, dtype=torch.float32) + (T_k - T_q)
    rel = j[None, :] - i[:, None]                                                  # key - query: <= 0 in the past
    visible = torch.ones(T_q, T_k, dtype=torch.bool).tril(diagonal=T_k - T_q)
    bias = slopes.view(-1, 1, 1) * rel
    return torch.where(visible, bias, torch.tensor(torch.finfo(torch.float32).min))
'''},
        "must_fail": [],
    },
    "alibi_python_loops_style": {
        "blind": True, "style": "three nested Python loops filling a tensor of -inf",
        "replace": {"alibi_bias": '''
def alibi_bias(n_heads, T_q, T_k):
    bias = torch.full((n_heads, T_q, T_k), float("-inf"))
    for h in range(n_heads):
        slope = 2 ** (-8 * (h + 1) / n_heads)
        for i in range(T_q):
            p = i + T_k - T_q
            for j in range(p + 1):
                bias[h, i, j] = -slope * (p - j)
    return bias
'''},
        "must_fail": [],
    },
}

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
    "block_float_mask_key_padding_style": {
        "blind": True,
        "style": "the course mask turned into an additive float mask (0 / -inf), key padding passed as key_padding_mask, "
                 "the ambiguous 3-D mask refused by hand",
        "replace": {"EncoderBlock": """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.n_heads = n_heads
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _torch_masks(self, mask, x):
        # -> (attn_mask, key_padding_mask) in PyTorch's conventions: an additive float mask, True on padding
        B, T, _ = x.shape
        if mask is None:
            return None, None
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise ValueError("the mask must be a bool tensor, True where attention is allowed")
        if mask.dim() == 3:
            raise ValueError(f"a 3-D mask {tuple(mask.shape)} is ambiguous (per example or per head?): pass "
                             "(B, 1, T, T) for one pattern per example, or (B, H, T, T)")
        if mask.dim() == 2:
            if tuple(mask.shape) != (T, T):
                raise ValueError(f"a 2-D mask must be (T, T) = {(T, T)}; got {tuple(mask.shape)}")
            return torch.zeros(T, T, dtype=x.dtype, device=x.device).masked_fill(~mask, float("-inf")), None
        if mask.dim() != 4:
            raise ValueError(f"masks are (T, T), (B, 1, 1, T), (B, 1, T, T) or (B, H, T, T); got {tuple(mask.shape)}")
        if mask.shape[1] == 1 and mask.shape[2] == 1:                      # (B, 1, 1, T): key padding
            return None, ~mask[:, 0, 0, :].expand(B, T)
        full = mask.expand(B, self.n_heads, T, T).reshape(B * self.n_heads, T, T)
        additive = torch.zeros(full.shape, dtype=x.dtype, device=x.device).masked_fill(~full, float("-inf"))
        return additive, None

    def forward(self, x, mask=None):
        attn_mask, padding = self._torch_masks(mask, x)

        def attend(h):
            out, _ = self.self_attn(h, h, h, attn_mask=attn_mask, key_padding_mask=padding, need_weights=False)
            return self.dropout1(out)

        if self.norm_first:
            x = x + attend(self.norm1(x))
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            x = self.norm1(x + attend(x))
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x
"""},
        "must_fail": [],
    },
    "block_sublayer_loop_expanded_mask_style": {
        "blind": True,
        "style": "a loop over (sublayer, norm, dropout) triples; every mask checked by course.masks and expanded to "
                 "(B*H, T, T) before the one conversion",
        "replace": {"EncoderBlock": """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask=None):
        B, T, _ = x.shape
        H = self.self_attn.num_heads
        checked = masks.attention_mask(mask, B=B, H=H, T_q=T, T_k=T)          # None or 4-D, raises on 3-D
        attn_mask = None
        if checked is not None:
            attn_mask = masks.to_torch(checked.expand(B, H, T, T).reshape(B * H, T, T))

        def attention(h):
            return self.self_attn(h, h, h, attn_mask=attn_mask, need_weights=False)[0]

        for sublayer, norm, drop in ((attention, self.norm1, self.dropout1), (self.ff, self.norm2, self.dropout2)):
            if self.norm_first:
                x = x + drop(sublayer(norm(x)))
            else:
                x = norm(x + drop(sublayer(x)))
        return x
"""},
        "must_fail": [],
    },
}

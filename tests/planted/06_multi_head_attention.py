"""Planted-bug submissions and correct alternative styles for lesson 06 (multi-head attention).

Each variant replaces whole solution cells (by grade_id) of the reference solution; ``must_fail``
lists the test cells (by grade_id) that must lose points. An empty ``must_fail`` marks a correct
solution in another style, which must keep full marks.

The ``MultiHeadAttention`` variants are written out in full (a cell is replaced as a whole), from
one template: ``_mha(...)`` fills in the parts a variant changes.
"""

LESSON = "06_multi_head_attention"

# --------------------------------------------------------------------------------------------
# split_heads / merge_heads
# --------------------------------------------------------------------------------------------

MERGE_WITHOUT_TRANSPOSE = '''
def merge_heads(x):
    B, H, T, Dh = x.shape
    return x.reshape(B, T, H * Dh)               # right shape, but glues features of different tokens together
'''

SPLIT_WITHOUT_TRANSPOSE = '''
def split_heads(x, n_heads):
    B, T, D = x.shape
    return x.reshape(B, n_heads, T, D // n_heads)  # right shape, but each "head" holds pieces of several tokens
'''

# Both halves wrong in the same way: the round trip is the identity, yet the heads are scrambled.
SPLIT_WITHOUT_TRANSPOSE_MATCHING_MERGE = '''
def merge_heads(x):
    B, H, T, Dh = x.shape
    return x.reshape(B, T, H * Dh)
'''

SPLIT_UNFLATTEN_STYLE = '''
def split_heads(x, n_heads):
    return x.unflatten(-1, (n_heads, -1)).permute(0, 2, 1, 3)    # (B, T, D) -> (B, T, H, Dh) -> (B, H, T, Dh)
'''

MERGE_PERMUTE_FLATTEN_STYLE = '''
def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)           # (B, H, T, Dh) -> (B, T, H, Dh) -> (B, T, H*Dh)
'''

MERGE_CAT_STYLE = '''
def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)                   # H tensors (B, T, Dh) side by side
'''

# --------------------------------------------------------------------------------------------
# MultiHeadAttention
# --------------------------------------------------------------------------------------------

_INIT = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
'''

_CHECK_MASK = '''
        mask = masks.attention_mask(mask, B=query.shape[0], H=self.n_heads, T_q=query.shape[1], T_k=key.shape[1])
'''

_PROJECT = '''
        q = split_heads(self.w_q(query), self.n_heads)
        k = split_heads(self.w_k(key), self.n_heads)
        v = split_heads(self.w_v(value), self.n_heads)
'''

_SCORES = '''
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
'''

_MASK_AND_SOFTMAX = '''
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)
'''

_DROPOUT = '''
        weights = self.dropout(weights)
'''

_OUTPUT = '''
        return self.w_o(merge_heads(weights @ v)), weights
'''


def _indent_join(*parts):
    return "".join(p.strip("\n") + "\n" for p in parts)


def _mha(project=_PROJECT, scores=_SCORES, mask_and_softmax=_MASK_AND_SOFTMAX, dropout=_DROPOUT, output=_OUTPUT,
         init=_INIT, check_mask=_CHECK_MASK):
    return _indent_join(init, check_mask, project, scores, mask_and_softmax, dropout, output)


# Correct: the four layers are nn.Linear under weight normalisation (their state_dict holds
# w_q.parametrizations.weight.original0/1 instead of w_q.weight).
MHA_WEIGHT_NORM_STYLE = _mha(init=_INIT.replace("        self.dropout = nn.Dropout(dropout)", """        for name in ("w_q", "w_k", "w_v", "w_o"):
            nn.utils.parametrizations.weight_norm(getattr(self, name))
        self.dropout = nn.Dropout(dropout)"""))

# Correct: every weight and bias under a parametrization of its own (stored halved, used doubled).
MHA_PARAMETRIZED_BIASES_STYLE = """
class Doubled(nn.Module):
    def forward(self, x):
        return 2 * x

    def right_inverse(self, x):
        return x / 2
""" + _mha(init=_INIT.replace("        self.dropout = nn.Dropout(dropout)", """        for name in ("w_q", "w_k", "w_v", "w_o"):
            for what in ("weight", "bias") if bias else ("weight",):
                nn.utils.parametrize.register_parametrization(getattr(self, name), what, Doubled())
        self.dropout = nn.Dropout(dropout)"""))

MHA_NO_OUTPUT_PROJECTION = _mha(output='''
        return merge_heads(weights @ v), weights                # w_o is never used
''')

MHA_SCALE_BY_D_MODEL = _mha(scores='''
        d_model = query.shape[-1]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_model)   # the model width, not the head size
''')

MHA_SHARED_PROJECTION = _mha(project='''
        q = split_heads(self.w_q(query), self.n_heads)
        k = split_heads(self.w_q(key), self.n_heads)            # one projection for q, k and v
        v = split_heads(self.w_q(value), self.n_heads)
''')

MHA_SELF_ATTENTION_ONLY = _mha(project='''
        q = split_heads(self.w_q(query), self.n_heads)
        k = split_heads(self.w_k(query), self.n_heads)          # ignores key and value: breaks cross-attention
        v = split_heads(self.w_v(query), self.n_heads)
''')

MHA_SOFTMAX_OVER_QUERIES = _mha(mask_and_softmax='''
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-2).nan_to_num(0.0)  # normalises over the queries
''')

MHA_MASK_INVERTED = _mha(mask_and_softmax='''
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))     # nn.MultiheadAttention's convention: True = blocked
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
''')

MHA_MASK_AFTER_SOFTMAX = _mha(mask_and_softmax='''
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = weights * mask                             # rows no longer sum to 1
''')

MHA_NAN_ON_FULLY_MASKED = _mha(mask_and_softmax='''
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)                  # a row of -inf becomes NaN
''')

MHA_UNIFORM_ON_FULLY_MASKED = _mha(mask_and_softmax='''
        if mask is not None:
            scores = scores.masked_fill(~mask, -1e9)             # finite fill: a fully masked row becomes uniform
        weights = torch.softmax(scores, dim=-1)
''')

MHA_DROPOUT_ALWAYS_ON = _mha(dropout='''
        weights = F.dropout(weights, p=self.dropout.p)           # training=True by default: also drops in eval mode
''')

# Dropout used for the output but the undropped weights returned: forward no longer shows what it computed.
MHA_RETURNS_WEIGHTS_BEFORE_DROPOUT = _mha(dropout='''
        dropped = self.dropout(weights)
''', output='''
        return self.w_o(merge_heads(dropped @ v)), weights
''')

MHA_NO_DROPOUT = _mha(dropout='''
        pass                                                     # dropout is ignored
''')

MHA_NO_BIAS_OPTION = _mha(init='''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model)                   # bias=... ignored
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
''')

# ---- masks outside the contract, and a delegating answer ---------------------------------------

MHA_GUESSES_KEY_PADDING = _mha(check_mask='''
        B, T_k = query.shape[0], key.shape[1]
        if mask is not None and mask.dim() == 2 and tuple(mask.shape) == (B, T_k):
            mask = mask[:, None, None, :]                        # guesses: a (B, T_k) padding mask (wrong when B == T_q)
''')

MHA_ACCEPTS_3D_MASK = _mha(check_mask='''
        if mask is not None and mask.dim() == 3:
            mask = mask[:, None]                                 # silently reads a 3-D mask as per example
''')

MHA_NO_MASK_CHECK = _mha(check_mask="")                          # broadcasts whatever it gets: (B, T, T) with B == H is per head

MHA_DELEGATES_TO_TORCH = _INIT + '''
        ref = to_torch_mha(self)                                 # the course's bridge: nn.MultiheadAttention does the work
        B, T_q, T_k = query.shape[0], query.shape[1], key.shape[1]
        attn_mask = None if mask is None else to_torch_attn_mask(mask, batch_size=B, n_heads=self.n_heads, tgt_len=T_q, src_len=T_k)
        out, weights = ref(query, key, value, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)
        return out, weights.nan_to_num(0.0)
'''

MHA_CALLS_SDPA = _mha(scores="", mask_and_softmax='''
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.d_head), dim=-1)
        if mask is not None:
            weights = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(self.d_head)).masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
''', output='''
        return self.w_o(merge_heads(out.nan_to_num(0.0))), weights
''')

# ---- correct alternative styles --------------------------------------------------------------

MHA_EINSUM_STYLE = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.p = dropout

    def forward(self, query, key, value, mask=None):
        B, Tq, D = query.shape
        Tk = key.shape[1]
        H, Dh = self.n_heads, self.d_head
        q = self.w_q(query).view(B, Tq, H, Dh)
        k = self.w_k(key).view(B, Tk, H, Dh)
        v = self.w_v(value).view(B, Tk, H, Dh)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * Dh ** -0.5
        if mask is not None:
            if mask.dtype != torch.bool or mask.dim() not in (2, 4):
                raise ValueError("pass a bool mask of shape (T_q, T_k) or (B, 1|H, T_q, T_k); a 3-D one is ambiguous")
            mask = torch.broadcast_to(mask, scores.shape)
            scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = torch.where(mask, weights, torch.zeros_like(weights))
        weights = F.dropout(weights, self.p, training=self.training)
        out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(B, Tq, D)
        return self.w_o(out), weights
'''

MHA_LOOP_OVER_HEADS_STYLE = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        mask = masks.attention_mask(mask, B=query.shape[0], H=self.n_heads, T_q=query.shape[1], T_k=key.shape[1])
        Q, K, V = self.w_q(query), self.w_k(key), self.w_v(value)
        heads, maps = [], []
        for h in range(self.n_heads):                            # one head at a time, as in the paper's formula
            cols = slice(h * self.d_head, (h + 1) * self.d_head)
            s = Q[..., cols] @ K[..., cols].transpose(-2, -1) / math.sqrt(self.d_head)   # (B, Tq, Tk)
            if mask is not None:
                m = mask.expand(Q.shape[0], self.n_heads, Q.shape[1], K.shape[1])[:, h]
                s = s.masked_fill(~m, torch.finfo(s.dtype).min)
            w = torch.softmax(s, dim=-1)
            if mask is not None:
                w = w * m
            w = self.dropout(w)
            heads.append(w @ V[..., cols])
            maps.append(w)
        return self.w_o(torch.cat(heads, dim=-1)), torch.stack(maps, dim=1)
'''

MHA_NAN_TO_NUM_STYLE = _mha(mask_and_softmax='''
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
''')

# Weights zeroed in __init__ and never read: PyTorch's layer holding a copy of them returns zeros and uniform
# weights too, so only weights the test chooses can tell (checks.randomise_weights).
MHA_COMPUTES_NOTHING = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model = {d_model} is not divisible by n_heads = {n_heads}")
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
        for p in self.parameters():
            nn.init.zeros_(p)                        # nothing below ever reads them
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        B, T_q, T_k = query.shape[0], query.shape[1], key.shape[1]
        mask = masks.attention_mask(mask, B=B, H=self.n_heads, T_q=T_q, T_k=T_k)
        allowed = torch.ones(B, self.n_heads, T_q, T_k) if mask is None else mask.expand(B, self.n_heads, T_q, T_k).float()
        weights = self.dropout(allowed / allowed.sum(-1, keepdim=True).clamp(min=1))
        return torch.zeros_like(query), weights
'''


VARIANTS = {
    # ---- split / merge
    "merge_heads_without_transpose": {
        "replace": {"merge_heads": MERGE_WITHOUT_TRANSPOSE},
        "must_fail": ["test_merge_heads", "test_mha_matches_torch"],
    },
    "split_heads_without_transpose": {
        "replace": {"split_heads": SPLIT_WITHOUT_TRANSPOSE},
        "must_fail": ["test_split_heads", "test_mha_matches_torch"],
    },
    "split_and_merge_both_without_transpose": {
        "replace": {"split_heads": SPLIT_WITHOUT_TRANSPOSE, "merge_heads": SPLIT_WITHOUT_TRANSPOSE_MATCHING_MERGE},
        "must_fail": ["test_split_heads", "test_merge_heads", "test_mha_matches_torch", "test_mha_scale"],
    },
    # ---- MultiHeadAttention
    "mha_no_output_projection": {
        "replace": {"MultiHeadAttention": MHA_NO_OUTPUT_PROJECTION},
        "must_fail": ["test_mha_matches_torch", "test_mha_gradients"],
    },
    "mha_scale_by_d_model": {
        "replace": {"MultiHeadAttention": MHA_SCALE_BY_D_MODEL},
        "must_fail": ["test_mha_scale", "test_mha_matches_torch"],
    },
    "mha_shared_qkv_projection": {
        "replace": {"MultiHeadAttention": MHA_SHARED_PROJECTION},
        "must_fail": ["test_mha_matches_torch", "test_mha_gradients"],
    },
    "mha_self_attention_only": {
        "replace": {"MultiHeadAttention": MHA_SELF_ATTENTION_ONLY},
        "must_fail": ["test_mha_cross_attention"],
    },
    "mha_softmax_over_queries": {
        "replace": {"MultiHeadAttention": MHA_SOFTMAX_OVER_QUERIES},
        "must_fail": ["test_mha_weights_are_distributions", "test_mha_matches_torch"],
    },
    "mha_mask_inverted": {
        "replace": {"MultiHeadAttention": MHA_MASK_INVERTED},
        "must_fail": ["test_mha_masks"],
    },
    "mha_mask_after_softmax": {
        "replace": {"MultiHeadAttention": MHA_MASK_AFTER_SOFTMAX},
        "must_fail": ["test_mha_masks"],
    },
    "mha_nan_on_fully_masked_row": {
        "replace": {"MultiHeadAttention": MHA_NAN_ON_FULLY_MASKED},
        "must_fail": ["test_mha_fully_masked_row"],
    },
    "mha_uniform_on_fully_masked_row": {
        "replace": {"MultiHeadAttention": MHA_UNIFORM_ON_FULLY_MASKED},
        "must_fail": ["test_mha_fully_masked_row"],
    },
    "mha_dropout_in_eval_mode": {
        "replace": {"MultiHeadAttention": MHA_DROPOUT_ALWAYS_ON},
        "must_fail": ["test_mha_dropout"],
    },
    "mha_returns_weights_before_dropout": {
        "replace": {"MultiHeadAttention": MHA_RETURNS_WEIGHTS_BEFORE_DROPOUT},
        "must_fail": ["test_mha_dropout"],
    },
    "mha_dropout_ignored": {
        "replace": {"MultiHeadAttention": MHA_NO_DROPOUT},
        "must_fail": ["test_mha_dropout"],
    },
    "mha_bias_argument_ignored": {
        "replace": {"MultiHeadAttention": MHA_NO_BIAS_OPTION},
        "must_fail": ["test_mha_shapes"],
    },
    "mha_guesses_key_padding_from_shape": {
        "replace": {"MultiHeadAttention": MHA_GUESSES_KEY_PADDING},
        "must_fail": ["test_mha_masks"],
    },
    "mha_accepts_3d_mask_as_per_example": {
        "replace": {"MultiHeadAttention": MHA_ACCEPTS_3D_MASK},
        "must_fail": ["test_mha_masks"],
    },
    "mha_no_mask_check_3d_mask_per_head": {
        "replace": {"MultiHeadAttention": MHA_NO_MASK_CHECK},
        "must_fail": ["test_mha_masks"],
    },
    "mha_delegates_to_nn_multiheadattention": {
        "replace": {"MultiHeadAttention": MHA_DELEGATES_TO_TORCH},
        "must_fail": ["test_mha_shapes", "test_mha_matches_torch", "test_mha_cross_attention", "test_mha_masks",
                      "test_mha_gradients", "test_mha_dropout"],
    },
    "mha_calls_scaled_dot_product_attention": {
        "replace": {"MultiHeadAttention": MHA_CALLS_SDPA},
        "must_fail": ["test_mha_matches_torch", "test_mha_masks"],
    },
    "mha_computes_nothing_zero_init": {
        "replace": {"MultiHeadAttention": MHA_COMPUTES_NOTHING},
        "must_fail": ["test_mha_matches_torch", "test_mha_cross_attention", "test_mha_masks"],
    },
    # ---- correct alternative styles: full marks
    "split_merge_unflatten_permute_style": {
        "replace": {"split_heads": SPLIT_UNFLATTEN_STYLE, "merge_heads": MERGE_PERMUTE_FLATTEN_STYLE},
        "must_fail": [],
    },
    "merge_heads_cat_style": {"replace": {"merge_heads": MERGE_CAT_STYLE}, "must_fail": []},
    "mha_einsum_style": {"replace": {"MultiHeadAttention": MHA_EINSUM_STYLE}, "must_fail": []},
    "mha_loop_over_heads_style": {"replace": {"MultiHeadAttention": MHA_LOOP_OVER_HEADS_STYLE}, "must_fail": []},
    "mha_nan_to_num_style": {"replace": {"MultiHeadAttention": MHA_NAN_TO_NUM_STYLE}, "must_fail": []},
    "mha_weight_norm_style": {"replace": {"MultiHeadAttention": MHA_WEIGHT_NORM_STYLE}, "must_fail": []},
    "mha_parametrized_biases_style": {"replace": {"MultiHeadAttention": MHA_PARAMETRIZED_BIASES_STYLE}, "must_fail": []},
}

# Graded only with COURSE_PLANTED=all (tests/planting.py): further variants of bugs the core bank already
# catches in the same cells, kept runnable without costing `make test` its time budget.
EXTENDED = [
    "split_and_merge_both_without_transpose", "mha_uniform_on_fully_masked_row", "mha_dropout_ignored",
    "mha_no_mask_check_3d_mask_per_head", "merge_heads_cat_style", "mha_nan_to_num_style",
]

# ---------------------------------------------------------------------------------------- issue 42
# Found by grading strangers' code: layers exposed under the contract's names through properties. The
# tests set weights by state_dict names (w_q.weight), so such a module loses points; the text now says
# the layers are registered submodules under those names, and the message says why the name is missing.
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
from planting import derived as _derived  # noqa: E402

MHA_LAYERS_BEHIND_PROPERTIES = _derived(LESSON, "MultiHeadAttention", (
    """        self.w_q = nn.Linear(d_model, d_model, bias=bias)
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)
""", """        self.proj = nn.ModuleDict({n: nn.Linear(d_model, d_model, bias=bias) for n in ("q", "k", "v", "o")})
"""), ("""    def forward(self, query, key, value, mask=None):""", """    @property
    def w_q(self):
        return self.proj["q"]

    @property
    def w_k(self):
        return self.proj["k"]

    @property
    def w_v(self):
        return self.proj["v"]

    @property
    def w_o(self):
        return self.proj["o"]

    def forward(self, query, key, value, mask=None):"""))

# A scale kept as a buffer: a buffer is not a parameter (nor a bias).
MHA_SCALE_BUFFER_STYLE = _derived(LESSON, "MultiHeadAttention",
    ("        self.dropout = nn.Dropout(dropout)\n",
     "        self.dropout = nn.Dropout(dropout)\n        self.register_buffer(\"scale\", torch.tensor(self.d_head ** -0.5))\n"),
    ("/ math.sqrt(self.d_head)", "* self.scale"))

VARIANTS.update({
    "mha_layers_behind_properties": {"replace": {"MultiHeadAttention": MHA_LAYERS_BEHIND_PROPERTIES},
                                     "must_fail": ["test_mha_shapes", "test_mha_scale", "test_mha_gradients"],
                                     "says": {"test_mha_shapes": ["registered"], "test_mha_scale": ["registered"],
                                              "test_mha_gradients": ["registered"]}},
    "mha_scale_buffer_style": {"replace": {"MultiHeadAttention": MHA_SCALE_BUFFER_STYLE}, "must_fail": []},
})

# ---------------------------------------------------------------------------------------- issue 42 (certificate)
# Survivors of the fairness certificate. A finite fill loses once every allowed score is below it; one layer
# under two names agrees with every oracle that copies the learner's weights.
MHA_FILL_MINUS_1E4 = _derived(LESSON, "MultiHeadAttention",
                              ("scores.masked_fill(~mask, torch.finfo(scores.dtype).min)", "scores.masked_fill(~mask, -1e4)"))
_ONE_LAYER = "        self.{0} = nn.Linear(d_model, d_model, bias=bias)\n"
MHA_W_K_IS_W_Q = _derived(LESSON, "MultiHeadAttention", (_ONE_LAYER.format("w_k"), "        self.w_k = self.w_q\n"))
MHA_W_V_IS_W_Q = _derived(LESSON, "MultiHeadAttention", (_ONE_LAYER.format("w_v"), "        self.w_v = self.w_q\n"))
MHA_W_O_IS_W_Q = _derived(LESSON, "MultiHeadAttention", (_ONE_LAYER.format("w_o"), "        self.w_o = self.w_q\n"))

VARIANTS.update({
    "mha_fill_minus_1e4": {"replace": {"MultiHeadAttention": MHA_FILL_MINUS_1E4}, "must_fail": ["test_mha_masks"],
                           "says": {"test_mha_masks": ["-1e4", "-inf"]}},
    "mha_w_k_is_w_q": {"replace": {"MultiHeadAttention": MHA_W_K_IS_W_Q}, "must_fail": ["test_mha_shapes"],
                       "says": {"test_mha_shapes": ["same layer"]}},
    "mha_w_v_is_w_q": {"replace": {"MultiHeadAttention": MHA_W_V_IS_W_Q}, "must_fail": ["test_mha_shapes"],
                       "says": {"test_mha_shapes": ["same layer"]}},
    "mha_w_o_is_w_q": {"replace": {"MultiHeadAttention": MHA_W_O_IS_W_Q}, "must_fail": ["test_mha_shapes"],
                       "says": {"test_mha_shapes": ["same layer"]}},
})
EXTENDED += ["mha_w_v_is_w_q", "mha_w_o_is_w_q"]

"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2. The entries marked ``blind: False`` were
written with the hidden tests in view (issue 42), in styles that its new checks could wrongly punish.
"""

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
from planting import derived as _derived  # noqa: E402

LESSON = "06_multi_head_attention"
_ONE_LAYER = "        self.{0} = nn.Linear(d_model, d_model, bias=bias)\n"

# Correct, in styles the new checks could wrongly punish: the four layers built in a list, then assigned;
# a float mask added to the scores (-inf where forbidden) with torch.where zeroing the weights.
MHA_LAYERS_FROM_A_LIST_STYLE = _derived(LESSON, "MultiHeadAttention", (
    "".join(_ONE_LAYER.format(n) for n in ("w_q", "w_k", "w_v", "w_o")),
    "        self.w_q, self.w_k, self.w_v, self.w_o = [nn.Linear(d_model, d_model, bias=bias) for _ in range(4)]\n"))
MHA_ADDITIVE_MASK_WHERE_STYLE = _derived(LESSON, "MultiHeadAttention", (
    """        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = torch.softmax(scores, dim=-1)          # (B, H, T_q, T_k), a distribution over the keys
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)    # exact zeros; a query with no allowed key gets none
""", """        if mask is not None:
            scores = scores + torch.zeros_like(scores).masked_fill(~mask, float("-inf"))   # additive float mask
        weights = torch.softmax(scores, dim=-1)
        if mask is not None:
            weights = torch.where(mask, weights, torch.zeros_like(weights))            # also turns NaN rows into 0
"""))

VARIANTS = {
    "split_view_permute_style": {
        "blind": True, "style": "view then permute",
        "replace": {"split_heads": '''
def split_heads(x, n_heads):
    B, T, D = x.shape
    return x.view(B, T, n_heads, D // n_heads).permute(0, 2, 1, 3)
'''},
        "must_fail": [],
    },
    "split_stack_chunks_style": {
        "blind": True, "style": "torch.chunk along the features, stacked on a head axis",
        "replace": {"split_heads": '''
def split_heads(x, n_heads):
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)
'''},
        "must_fail": [],
    },
    "merge_permute_flatten_style": {
        "blind": True, "style": "permute then flatten the last two axes",
        "replace": {"merge_heads": '''
def merge_heads(x):
    return x.permute(0, 2, 1, 3).flatten(start_dim=2)
'''},
        "must_fail": [],
    },
    "mha_layers_from_a_list_style": {
        "blind": False, "style": "the four layers built in a list comprehension, then unpacked into w_q, w_k, w_v, w_o",
        "replace": {"MultiHeadAttention": MHA_LAYERS_FROM_A_LIST_STYLE},
        "must_fail": [],
    },
    "mha_additive_mask_where_style": {
        "blind": False, "style": "an additive float mask (-inf where forbidden), torch.where zeroing the weights",
        "replace": {"MultiHeadAttention": MHA_ADDITIVE_MASK_WHERE_STYLE},
        "must_fail": [],
    },
}

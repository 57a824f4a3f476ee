"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "06_multi_head_attention"
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
}

"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "00_softmax_lookup"
VARIANTS = {
    "softmax_movedim_amax_style": {
        "blind": True, "style": "the axis moved last, amax, moved back",
        "replace": {"softmax": '''
def softmax(x, dim=-1):
    moved = x.movedim(dim, -1)
    shifted = moved - moved.amax(-1, keepdim=True)
    e = torch.exp(shifted)
    return (e / e.sum(-1, keepdim=True)).movedim(-1, dim)
'''},
        "must_fail": [],
    },
    "lookup_broadcast_sum_style": {
        "blind": True, "style": "broadcast products summed, the learner's softmax over dim 0",
        "replace": {"soft_lookup": '''
def soft_lookup(query, keys, values, temperature=1.0):
    scores = (keys * query.unsqueeze(0)).sum(dim=1) / temperature
    weights = softmax(scores, dim=0)
    out = (weights.unsqueeze(1) * values).sum(dim=0)
    return out, weights
'''},
        "must_fail": [],
    },
}

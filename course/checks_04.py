"""Test helpers for lesson 04 (multi-hop attention), shared by its test cells.

They take the learner's class as an argument and work the same in the learner's kernel and under
the grading judge: parameters are set with :func:`course.checks.set_params`, never in place.
"""

from __future__ import annotations

import torch
from torch import nn

from course import checks

__all__ = ["make_hop", "forward"]


def make_hop(MemoryHop, d_model: int, H=None):
    """``MemoryHop(d_model)``, with its controller map ``H`` set to the matrix ``H`` (if given)."""
    hop = checks.call(MemoryHop, d_model, what="MemoryHop(d_model)")
    lin = getattr(hop, "H", None)
    checks.check(isinstance(lin, nn.Linear) and tuple(lin.weight.shape) == (d_model, d_model),
                 "MemoryHop(d_model) should keep its controller map in self.H, an nn.Linear(d_model, d_model, "
                 "bias=False); __init__ creates it for you.")
    if H is not None:
        checks.set_params(hop, {"H.weight": torch.as_tensor(H, dtype=torch.float32)}, "your MemoryHop")
    return hop


def forward(hop, controller, keys, values, mask):
    """Call the learner's hop and check that it returns a pair ``(new_controller, weights)``."""
    out = checks.call(hop, controller, keys, values, mask, what="MemoryHop.forward")
    checks.check(isinstance(out, tuple) and len(out) == 2,
                 "MemoryHop.forward should return a tuple (new_controller, weights).")
    return out

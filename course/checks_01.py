"""Helpers for lesson 01's test cells (attention pooling), so that each locked cell reads as its one idea.

Nothing here computes a graded answer: :func:`pooling` builds the learner's own ``AttentionPooling``
and gives its documented ``query`` parameter a chosen value through :func:`course.checks.set_params`
(never an in-place edit, which would not reach the learner's module under grading), and :func:`pool`
calls it. The explicit formula the hidden tests compare with is instructor side, in
``course/tools/references/refs_01.py`` (students do not receive it).
"""

from __future__ import annotations

import torch

from course import checks

__all__ = ["pooling", "pool"]


def pooling(cls, d_model: int, query=None):
    """The learner's ``cls(d_model)`` (an ``AttentionPooling``), with ``query`` as its scoring vector.

    The exercise documents the parameter: ``self.query``, of shape ``(d_model,)``.
    """
    module = checks.call(cls, d_model, what="AttentionPooling(d_model)")
    state = checks.call(module.state_dict, what="AttentionPooling.state_dict")
    checks.check("query" in state and tuple(state["query"].shape) == (d_model,),
                 "AttentionPooling(d_model) should keep its scoring vector in self.query, a parameter of shape (d_model,).")
    if query is not None:
        checks.set_params(module, {"query": torch.as_tensor(query, dtype=torch.float32)}, "your AttentionPooling")
    return module


def pool(module, x, mask):
    """``module(x, mask)``, checked to be a pair ``(pooled, weights)``."""
    out = checks.call(module, x, mask, what="AttentionPooling.forward")
    checks.check(isinstance(out, (tuple, list)) and len(out) == 2,
                 "AttentionPooling.forward should return a tuple (pooled, weights).")
    return out

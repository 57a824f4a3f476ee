"""Test helpers for lesson 05 (self-attention), shared by its test cells.

Nothing here computes a graded answer: visible tests compare with ``F.scaled_dot_product_attention``
or hand-worked numbers, and the explicit reference the hidden tests use (it is the exercise's answer)
lives on the instructor's side, in ``course/tools/references/refs_05.py``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["scale_hint", "own_projections"]


def scale_hint(weights, q, k, v) -> str:
    """Name the scale the learner's weights correspond to, if it is a common wrong one."""
    raw = q @ k.transpose(-2, -1)
    d_k, d_v = q.shape[-1], v.shape[-1]
    for name, s in [("not scaled at all", 1.0), (f"divided by d_k = {d_k} instead of sqrt(d_k)", d_k),
                    (f"divided by sqrt(d_v) = sqrt({d_v}): use the size of q and k", math.sqrt(d_v)),
                    (f"divided by d_v = {d_v}", d_v)]:
        if tuple(weights.shape) == tuple(raw.shape) and torch.allclose(weights, torch.softmax(raw / s, -1), atol=1e-5):
            return f"Your scores look {name}."
    return "Divide q @ k^T by sqrt(d_k) = sqrt(q.size(-1))."


def own_projections(attn, x, generator: torch.Generator, what: str = "your SelfAttention"):
    """Give the learner's ``w_q``, ``w_k``, ``w_v`` weights (and biases, where they have them) values chosen
    here, and return ``q, k, v`` computed from those values: an oracle built on them never depends on what
    the learner's layers report or compute."""
    from course import checks

    state = checks.call(attn.state_dict, what=f"{what}.state_dict")
    values = {k: torch.randn(v.shape, generator=generator) / 4 for k, v in state.items()
              if k.split(".")[0] in ("w_q", "w_k", "w_v") and k.split(".")[-1] in ("weight", "bias")}
    checks.set_params(attn, values, what)
    return tuple(x @ values[f"{n}.weight"].T + values.get(f"{n}.bias", 0.0) for n in ("w_q", "w_k", "w_v"))

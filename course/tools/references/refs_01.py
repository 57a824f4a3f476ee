"""Oracle for lesson 01's hidden tests (attention pooling), written out in float64.

Instructor side, never shipped to learners: it is the exercise's answer. Imported inside the hidden
block of a test cell (``from course.tools.references import refs_01``).
"""

from __future__ import annotations

import torch

__all__ = ["reference"]


def reference(x, mask, query):
    """``(pooled, weights)`` of attention pooling, by its formula, in float64.

    scores = x . query; a softmax over the real tokens (mask True) only; zero weights and a zero
    pooled vector for a row with no real token.
    """
    x, q = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(query, dtype=torch.float64)
    scores = x @ q                                                        # (B, T, D) @ (D,) -> (B, T)
    weights = torch.zeros_like(scores)
    for b in range(scores.shape[0]):
        real = mask[b]
        if real.any():
            s = scores[b, real]
            e = torch.exp(s - s.max())
            weights[b, real] = e / e.sum()
    pooled = torch.einsum("bt,btd->bd", weights, x)                        # (B, T) x (B, T, D) -> (B, D)
    return pooled, weights

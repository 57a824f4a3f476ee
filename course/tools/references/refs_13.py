"""Oracles for lesson 13's hidden tests (rotary positions and ALiBi). Instructor side: never shipped to learners.

* :func:`reference_frequencies`: theta_i = base^(-2i / Dh) in float64;
* :func:`reference_rope`: the half-split rotation written with complex numbers in float64: pair i is the
  complex number ``x[i] + 1j * x[i + Dh/2]``, multiplied by ``exp(1j * p * theta_i)``;
* :func:`reference_score`: the score of a query at position m and a key at position n after rotation,
  computed as ``q . R((n - m) theta) k`` (only the offset enters);
* :func:`bloom_alibi`: BLOOM's ``build_alibi_tensor`` (``transformers``) read out in the lesson's layout.
"""

from __future__ import annotations

import torch

__all__ = ["reference_frequencies", "reference_rope", "reference_score", "bloom_alibi"]


def reference_frequencies(head_dim: int, base: float = 10000.0) -> torch.Tensor:
    """(Dh/2,) float64: base^(-2i / Dh) for i = 0 .. Dh/2 - 1."""
    i = torch.arange(head_dim // 2, dtype=torch.float64)
    return torch.as_tensor(float(base), dtype=torch.float64) ** (-2.0 * i / head_dim)


def reference_rope(x: torch.Tensor, positions, base: float = 10000.0) -> torch.Tensor:
    """x (..., T, Dh) rotated at ``positions`` ((T,) or (B, T) for x of shape (B, ..., T, Dh)), float64."""
    x = x.detach().to(torch.float64)
    h = x.shape[-1] // 2
    positions = torch.as_tensor(positions).to(torch.float64)
    if positions.dim() == 2:                                   # (B, T) -> (B, 1, ..., 1, T)
        positions = positions.reshape(positions.shape[0], *([1] * (x.dim() - 3)), positions.shape[1])
    phase = torch.polar(torch.ones((), dtype=torch.float64), positions[..., None] * reference_frequencies(2 * h, base))
    z = torch.complex(x[..., :h], x[..., h:]) * phase          # (..., T, h): pair i as one complex number
    return torch.cat([z.real, z.imag], dim=-1)


def reference_score(q: torch.Tensor, k: torch.Tensor, offset, base: float = 10000.0) -> torch.Tensor:
    """q (N, Dh) . R(offset_n * theta) k (N, Dh) for each row n: the score of a query at m and a key at
    m + offset after both are rotated (float64)."""
    offset = torch.as_tensor(offset, dtype=torch.float64)
    k_turned = reference_rope(k[:, None, :], offset[:, None])[:, 0]        # (N, Dh): k rotated by the offset
    return (q.detach().to(torch.float64) * k_turned).sum(-1)


def bloom_alibi(n_heads: int, T_q: int, T_k: int) -> torch.Tensor:
    """BLOOM's ALiBi tensor in the lesson's layout: (H, T_q, T_k), queries aligned to the last keys.

    ``build_alibi_tensor(attention_mask (1, T_k), H, dtype)`` returns (1 * H, 1, T_k): row h holds
    ``slope_h * j`` for key j (its index among the non-padding keys), one row shared by every query. Query i
    sits at position ``p = i + T_k - T_q``; subtracting BLOOM's value at ``p`` (a constant per query, which
    softmax ignores) gives ``slope_h * (j - p) = -slope_h * (p - j)``, and the keys after ``p`` are the future.
    """
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    rows = build_alibi_tensor(torch.ones(1, T_k, dtype=torch.long), n_heads, torch.float32)   # (H, 1, T_k)
    rows = rows.view(n_heads, T_k)                                                             # slope_h * j
    p = torch.arange(T_q) + (T_k - T_q)                                                        # (T_q,)
    bias = rows[:, None, :] - rows[:, p][:, :, None]                                           # (H, T_q, T_k)
    future = torch.arange(T_k)[None, :] > p[:, None]                                           # (T_q, T_k)
    return bias.masked_fill(future, float("-inf"))

"""Oracles for lesson 12's hidden tests (efficient attention). Instructor side: never shipped to learners.

:func:`reference_attention` is plain attention written out in float64 with an explicit mask, so that
hidden tests can check cases where an oracle from PyTorch would be less clear (causal attention with
``T_q != T_k``, the convention the lesson documents: query ``i`` sees keys ``0..i``, counted from the
start of both sequences, as ``F.scaled_dot_product_attention(is_causal=True)`` does).
"""

from __future__ import annotations

import math

import torch

__all__ = ["reference_attention", "reference_repeat_kv"]


def reference_attention(q, k, v, causal=False):
    """softmax(q k^T / sqrt(Dh)) v in float64; ``causal``: key j allowed for query i iff j <= i."""
    q, k, v = (t.detach().to(torch.float64) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])          # (..., T_q, T_k)
    if causal:
        T_q, T_k = scores.shape[-2:]
        allowed = torch.arange(T_k)[None, :] <= torch.arange(T_q)[:, None]   # (T_q, T_k)
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v                            # (..., T_q, Dv)


def reference_repeat_kv(x, n_rep):
    """(B, H_kv, T, Dh) -> (B, H_kv * n_rep, T, Dh); query head h reads key/value head h // n_rep."""
    return torch.repeat_interleave(x.detach(), n_rep, dim=1)

"""Oracles for lesson 05's hidden tests (self-attention): scaled dot-product attention, written out.

The masked reference is explicit, in float64, rather than ``F.scaled_dot_product_attention``: for a
query that may see no key, PyTorch returns zeros only from torch 2.5 on (NaN before), and the course
supports torch >= 2.4. Instructor side: never shipped to learners (it is the exercise's answer).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["reference_attention", "pytorch_weights"]


def reference_attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d_k)) v, computed explicitly in float64.

    ``mask`` (bool, True = may attend) broadcasts to the scores under PyTorch's rules: a 2-D mask is
    ``(T_q, T_k)``. Masked scores get exactly zero weight; a query with no allowed key gets all-zero
    weights and a zero output.

    Returns:
        (out, weights) as float32: out (..., T_q, d_v), weights (..., T_q, T_k).
    """
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])           # (..., T_q, T_k)
    if mask is not None:
        scores = torch.where(mask, scores, torch.tensor(-math.inf, dtype=scores.dtype))
    top = scores.amax(dim=-1, keepdim=True)
    top = torch.where(torch.isinf(top), torch.zeros_like(top), top)     # a fully masked row: max is -inf
    e = torch.exp(scores - top)                                         # exactly 0 where masked
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total > 0, total, torch.ones_like(total))
    return (weights @ v).float(), weights.float()


def pytorch_weights(q, k, mask=None):
    """The weights of ``F.scaled_dot_product_attention`` (which returns only the output): with the
    identity as values, the output IS the weights. Use it only where every query sees some key."""
    T_k = k.shape[-2]
    eye = torch.eye(T_k, dtype=q.dtype).expand(*k.shape[:-2], T_k, T_k)
    return F.scaled_dot_product_attention(q, k, eye, attn_mask=mask)

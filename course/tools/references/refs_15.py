"""Oracles for lesson 15's hidden tests (attention at serving time). Instructor side: never shipped to learners.

* :func:`kept_positions`: which positions a sliding window with sinks keeps after ``n`` tokens;
* :func:`windowed_attention`: attention over a whole sequence with the sliding-window-and-sinks mask and a
  distance bias, written out in float64 (what attention over the cache must equal, token by token);
* :func:`quantize_reference`: symmetric per-vector int8 codes and scales, in float64;
* :func:`linear_attention_reference`: linear attention with the elu + 1 feature map, written as explicit
  sums over the keys in float64 (causal or not).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = ["kept_positions", "windowed_attention", "quantize_reference", "linear_attention_reference"]


def kept_positions(n: int, window: int, n_sinks: int) -> list[int]:
    """The positions a cache of the first ``n_sinks`` and the last ``window`` tokens holds after ``n`` tokens."""
    return sorted(set(range(min(n, n_sinks))) | set(range(max(0, n - window), n)))


def windowed_attention(q, k, v, window, n_sinks, bias):
    """Query t (at position t) attends to keys j <= t with j < n_sinks or j > t - window; scores
    q.k / sqrt(Dh) + bias[h, min(t - j, max_distance)] (float64). q, k (B, H, T, Dh), v (B, H, T, Dv)."""
    q, k, v, bias = (x.detach().double() for x in (q, k, v, bias))
    T = q.shape[2]
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = (j <= i) & ((j < n_sinks) | (j > i - window))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + bias[:, (i - j).clamp(0, bias.shape[1] - 1)]
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def quantize_reference(x, dim=-1):
    """(codes as float64 in [-127, 127], scale float64): scale = max |x| / 127 along ``dim``, codes = round(x / scale)."""
    x = x.detach().double()
    scale = x.abs().amax(dim=dim, keepdim=True) / 127
    codes = torch.where(scale > 0, torch.round(x / scale.clamp_min(1e-300)), torch.zeros_like(x)).clamp(-127, 127)
    return codes, scale


def linear_attention_reference(q, k, v, causal=True):
    """out_i = sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j), j over the keys query i may see
    (j <= i when causal), phi(x) = elu(x) + 1, in float64."""
    fq, fk, v = (F.elu(x.detach().double()) + 1 if n < 2 else x.detach().double() for n, x in enumerate((q, k, v)))
    sim = fq @ fk.transpose(-2, -1)                                          # (..., T_q, T_k): all positive
    if causal:
        T_q, T_k = sim.shape[-2:]
        sim = sim * (torch.arange(T_k)[None, :] <= torch.arange(T_q)[:, None])
    return (sim @ v) / sim.sum(-1, keepdim=True)

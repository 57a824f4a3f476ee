"""Oracles for lesson 09's hidden tests (the GPT language model).

Instructor side: never shipped to learners (they compute the exercises' answers).

* :func:`reference_lm_loss`: the shifted cross-entropy, in float64 through PyTorch's ``cross_entropy``;
* :func:`next_token_probs`: the distribution ``sample_next`` must draw from, written out;
* :func:`greedy_continuation`: greedy decoding by ``transformers``' GPT-2 holding the learner's weights,
  re-reading the (cropped) sequence at every step, without any cache.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course.oracles.gpt2 import gpt2_logits, to_gpt2

__all__ = ["reference_lm_loss", "next_token_probs", "greedy_continuation"]


def reference_lm_loss(logits, idx):
    """Mean over the B * (T - 1) positions of -log softmax(logits[:, t])[idx[:, t + 1]] (float64)."""
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].double().reshape(-1, V), idx[:, 1:].reshape(-1))


def next_token_probs(logits, temperature=1.0, top_k=None):
    """(R, V) probabilities of softmax(logits / temperature) restricted to each row's top_k (float64)."""
    z = logits.double() / temperature
    if top_k is not None and top_k < z.shape[-1]:
        order = z.argsort(dim=-1, descending=True)
        keep = torch.zeros_like(z, dtype=torch.bool).scatter(-1, order[:, :top_k], True)
        z = z.masked_fill(~keep, float("-inf"))
    z = z - z.max(dim=-1, keepdim=True).values
    p = z.exp()
    return p / p.sum(dim=-1, keepdim=True)


def greedy_continuation(model, idx, max_new_tokens, *, n_heads, block_size):
    """``idx`` followed by ``max_new_tokens`` greedy tokens of GPT-2 holding ``model``'s weights."""
    gpt2 = to_gpt2(model, n_heads)
    for _ in range(max_new_tokens):
        logits = gpt2_logits(gpt2, idx[:, -block_size:])[:, -1]            # (B, V)
        idx = torch.cat([idx, logits.argmax(dim=-1, keepdim=True)], dim=1)
    return idx

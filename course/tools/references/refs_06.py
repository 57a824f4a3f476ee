"""Oracles for lesson 06's hidden tests (multi-head attention).

:func:`reference` runs PyTorch's ``nn.MultiheadAttention`` holding a copy of the learner's weights and
returns what the learner's module should return, per head; :func:`compare` checks the learner's module
against it. Instructor side: never shipped to learners (it computes the exercise's answer).
"""

from __future__ import annotations

import torch

from course import checks, checks_06
from course.oracles.attention import to_torch_attn_mask, to_torch_mha

__all__ = ["reference", "compare"]


def reference(mha, query, key, value, mask=None):
    """``(out, weights)`` of ``nn.MultiheadAttention`` holding a copy of ``mha``'s weights, per head.

    ``mask`` follows the course's contract (True = allowed); it is flipped to PyTorch's convention here.
    """
    ref = to_torch_mha(mha)
    attn_mask = None
    if mask is not None:
        attn_mask = to_torch_attn_mask(mask, batch_size=query.shape[0], n_heads=ref.num_heads,
                                       tgt_len=query.shape[1], src_len=key.shape[1])
    with torch.no_grad():
        return ref(query, key, value, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)


def compare(cls, mha, query, key, value, what, mask=None, *, hint_weights="", hint_out=""):
    """The learner's out and per-head weights equal ``nn.MultiheadAttention``'s (atol 1e-5).

    With a mask, forbidden keys must also get exactly zero weight. Every query row must keep at least
    one allowed key (PyTorch returns NaN for the others; the fully-masked case has its own test).
    """
    # Weights the test chose: a module that ignores its own (zero output projection, returning zeros)
    # would otherwise agree with PyTorch's layer holding a copy of them.
    checks.randomise_weights(mha, torch.Generator().manual_seed(606), "your MultiHeadAttention")
    want = reference(mha, query, key, value, mask)
    args = (query, key, value) if mask is None else (query, key, value, mask)
    checks_06.check_against(cls, mha, args, want, what, hint_weights=hint_weights, hint_out=hint_out)

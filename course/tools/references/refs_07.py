"""Oracles for lesson 07's hidden tests (the Transformer block).

:func:`torch_block_output` runs PyTorch's ``nn.TransformerEncoderLayer`` holding a copy of the learner's
block's weights (any documented mask shape, flipped to PyTorch's convention), and :func:`compare_with_torch`
checks a fresh learner block against it. Instructor side: never shipped to learners (it computes the
exercise's answer).
"""

from __future__ import annotations

import torch

from course import checks_07
from course.oracles.attention import to_torch_attn_mask
from course.oracles.transformer import to_torch_encoder_layer

__all__ = ["torch_block_output", "compare_with_torch"]


def torch_block_output(block, x, mask=None):
    """``nn.TransformerEncoderLayer`` with a copy of ``block``'s weights (eval mode) applied to ``x``.

    ``mask`` follows the course's contract (True = allowed; (T, T), (B, 1, 1, T), (B, 1, T, T) or
    (B, H, T, T)) and is flipped to PyTorch's ``src_mask`` convention here.
    """
    layer = to_torch_encoder_layer(block).eval()
    src_mask = None
    if mask is not None:
        B, T = x.shape[0], x.shape[1]
        src_mask = to_torch_attn_mask(mask, batch_size=B, n_heads=layer.self_attn.num_heads, tgt_len=T, src_len=T)
    with torch.no_grad():
        return layer(x, src_mask=src_mask)


def compare_with_torch(cls, x, what, *, norm_first, n_heads, d_ff, generator, mask=None, dropout=0.0, hint=""):
    """A fresh ``cls(D, n_heads, d_ff, dropout=..., norm_first=...)`` in eval mode, with random weights, equals
    PyTorch's layer on ``x``. Returns the block."""
    block = checks_07.make_block(cls, x.shape[-1], n_heads, d_ff, norm_first=norm_first, generator=generator,
                                 dropout=dropout)
    want = torch_block_output(block, x, mask)
    args = (x,) if mask is None else (x, mask)
    checks_07.check_block(cls, block, args, want, what, norm_first=norm_first, hint=hint)
    return block

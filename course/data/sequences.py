"""Synthetic sequence tasks for the self-attention lessons (05-07).

``reversal_batch`` makes the classic "reverse the sequence" task: a model must move the token at
position t to position T-1-t, which no position-wise layer can do and one attention layer can.
Token 0 is reserved for padding; real tokens are 1..vocab_size-1.
"""

from __future__ import annotations

import torch

__all__ = ["PAD", "reversal_batch", "random_lengths"]

PAD = 0


def random_lengths(batch_size: int, min_len: int, max_len: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Integer lengths uniform in [min_len, max_len], shape (B,)."""
    return torch.randint(min_len, max_len + 1, (batch_size,), generator=generator)


def reversal_batch(batch_size: int, seq_len: int, vocab_size: int = 16, *, generator: torch.Generator | None = None,
                   min_len: int | None = None):
    """A batch of the sequence-reversal task.

    Args:
        batch_size: B.
        seq_len: T, the padded length.
        vocab_size: V, including the padding token 0.
        generator: a seeded ``torch.Generator`` for reproducible batches.
        min_len: if given, each sequence has a random true length in [min_len, T] and is padded
            with ``PAD`` after its end; otherwise every sequence has length T.

    Returns:
        (x, y, mask): ``x`` (B, T) input tokens, ``y`` (B, T) the same tokens reversed within each
        sequence's true length (padding stays at the end), ``mask`` (B, T) bool, True on real tokens.
    """
    x = torch.randint(1, vocab_size, (batch_size, seq_len), generator=generator)
    if min_len is None:
        lengths = torch.full((batch_size,), seq_len)
    else:
        lengths = random_lengths(batch_size, min_len, seq_len, generator)
    pos = torch.arange(seq_len).unsqueeze(0)                      # (1, T)
    mask = pos < lengths.unsqueeze(1)                              # (B, T)
    x = x.masked_fill(~mask, PAD)
    src_pos = (lengths.unsqueeze(1) - 1 - pos).clamp(min=0)        # (B, T): where each output comes from
    y = torch.gather(x, 1, src_pos).masked_fill(~mask, PAD)
    return x, y, mask

"""The course's one mask contract, and the one place it meets PyTorch's inverted convention.

Contract (every lesson from 05 on, and every test):

* a mask is a **boolean** tensor, **True where attention is allowed** (the convention of
  ``F.scaled_dot_product_attention``);
* it broadcasts to ``(B, H, T_q, T_k)`` (or ``(B, T_q, T_k)`` for single-head attention) under
  PyTorch's ordinary rules. The shapes the lessons use:

  ==================  ===================================================================
  ``(T_q, T_k)``      one pattern for every example and head (a causal mask)
  ``(B, 1, 1, T_k)``  key padding: ``real[:, None, None, :]`` (:func:`key_padding`)
  ``(B, 1, T_q, T_k)`` one pattern per example, shared by the heads
  ``(B, H, T_q, T_k)`` one pattern per example and head
  ==================  ===================================================================

* no shape guessing: a 2-D mask is always ``(T_q, T_k)``, never a ``(B, T_k)`` padding mask, even
  when ``B == T_q``. A 3-D mask given to multi-head attention is ambiguous (per example, or per
  head?) and is an error that says what to pass (:func:`attention_mask`);
* a query with no allowed key gets zero weights, never NaN.

``nn.MultiheadAttention`` and ``nn.Transformer*`` read boolean masks the other way round (True =
blocked); :func:`to_torch` flips the convention at that boundary and nowhere else.
"""

from __future__ import annotations

import torch

__all__ = ["key_padding", "causal", "attention_mask", "to_torch", "to_torch_key_padding"]


def key_padding(real: torch.Tensor) -> torch.Tensor:
    """``(B, T_k)`` bool, True on real tokens -> the ``(B, 1, 1, T_k)`` mask of the contract."""
    if real.dtype != torch.bool or real.dim() != 2:
        raise ValueError(f"key_padding expects a (B, T_k) bool tensor (True on real tokens), got "
                         f"{tuple(real.shape)} {real.dtype}.")
    return real[:, None, None, :]


def causal(T_q: int, T_k: int | None = None, *, device=None) -> torch.Tensor:
    """``(T_q, T_k)`` bool, True on and below the diagonal (query i may see keys 0..i)."""
    T_k = T_q if T_k is None else T_k
    return torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril(T_k - T_q)


def attention_mask(mask: torch.Tensor | None, *, B: int, T_q: int, T_k: int, H: int | None = None):
    """Check ``mask`` against the contract and return it as 4-D (or 3-D when ``H`` is None).

    Args:
        mask: None, or a bool tensor that broadcasts to ``(B, H, T_q, T_k)`` (``(B, T_q, T_k)`` when
            ``H`` is None). For multi-head attention (``H`` given) only 2-D and 4-D masks are
            accepted: a 3-D one could mean per example or per head.
        B, T_q, T_k, H: the sizes of the attention the mask is for.

    Returns:
        None, or a view of ``mask`` with 4 (3) dimensions, each 1 or the full size.

    Raises:
        ValueError: a mask that is not boolean, does not broadcast, or is ambiguous; the message
            says which shape to pass instead.
    """
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"masks are bool tensors, True where attention is allowed; got {kind}. "
                         "Use e.g. lengths[:, None] > torch.arange(T) for padding.")
    full = (B, T_q, T_k) if H is None else (B, H, T_q, T_k)
    shapes = "(T_q, T_k), (B, 1, 1, T_k), (B, 1, T_q, T_k) or (B, H, T_q, T_k)" if H is not None else \
        "(T_q, T_k), (B, 1, T_k) or (B, T_q, T_k)"
    if H is not None and mask.dim() == 3:
        raise ValueError(f"a 3-D mask {tuple(mask.shape)} is ambiguous for multi-head attention (per example "
                         f"or per head?). Pass mask[:, None] for one pattern per example, shape (B, 1, T_q, T_k), "
                         f"or one of {shapes}.")
    if mask.dim() < 2 or mask.dim() > len(full):
        raise ValueError(f"a mask of shape {tuple(mask.shape)} does not fit attention of shape {full}; pass {shapes}. "
                         "A (B, T_k) padding mask must be given as real[:, None, None, :] (see course.masks.key_padding).")
    shaped = mask.reshape((1,) * (len(full) - mask.dim()) + tuple(mask.shape))
    for got, want, name in zip(shaped.shape, full, ("B", "H", "T_q", "T_k")[-len(full):] if H is not None else ("B", "T_q", "T_k")):
        if got not in (1, want):
            raise ValueError(f"mask of shape {tuple(mask.shape)} does not broadcast to {full}: its {name} "
                             f"dimension is {got}, expected 1 or {want}. Pass {shapes}.")
    return shaped


def to_torch(mask: torch.Tensor | None) -> torch.Tensor | None:
    """The course's mask (True = allowed) as PyTorch's ``attn_mask`` for ``nn.MultiheadAttention`` /
    ``nn.Transformer*`` (True = blocked). Use it at that boundary only."""
    return None if mask is None else ~mask


def to_torch_key_padding(real: torch.Tensor | None) -> torch.Tensor | None:
    """``(B, T_k)`` True-on-real-tokens -> PyTorch's ``key_padding_mask`` (True on padding)."""
    return None if real is None else ~real

"""Bridges between a learner's ``MultiHeadAttention`` (lesson 06) and ``nn.MultiheadAttention``.

Lesson 06 proves that the learner's module computes exactly what PyTorch's does. Two things stand
between them, and this module handles both:

1. **Weights.** The learner's module has four ``nn.Linear`` layers ``w_q, w_k, w_v, w_o``
   (each ``d_model -> d_model``); PyTorch packs the first three into one ``in_proj_weight`` of
   shape ``(3 * d_model, d_model)`` and calls the last ``out_proj``. :func:`to_torch_mha` copies
   them across. Both split the projected ``d_model`` features into heads the same way: head ``i``
   owns features ``i * Dh : (i + 1) * Dh``.
2. **Masks.** The course's boolean masks are **True where attention is allowed** (the convention of
   ``F.scaled_dot_product_attention``). ``nn.MultiheadAttention`` uses the **opposite**: a boolean
   ``attn_mask`` / ``key_padding_mask`` is True where attention is **NOT** allowed.
   :func:`to_torch_attn_mask` and :func:`to_torch_key_padding_mask` are the one place where the
   convention flips. Never hand one of the course's masks to ``nn.MultiheadAttention`` directly.

Mask shapes the course's ``MultiHeadAttention`` accepts: anything that broadcasts to
``(B, H, T_q, T_k)`` under PyTorch's ordinary rules, e.g. ``(T_q, T_k)`` (one pattern for every
example, such as a causal mask), ``(B, 1, 1, T_k)`` (key padding), ``(B, 1, T_q, T_k)`` (one pattern
per example) or ``(B, H, T_q, T_k)``.

One behaviour differs on purpose: where a query row has no allowed key at all, the course's module
returns weights of zero (house rule: never NaN) while ``nn.MultiheadAttention`` returns NaN. Compare
only rows with at least one allowed key (see :func:`rows_with_a_key`).
"""

from __future__ import annotations

import torch
from torch import nn

from course import masks

__all__ = ["to_torch_mha", "to_torch_attn_mask", "to_torch_key_padding_mask", "rows_with_a_key", "torch_mha_forward"]


def to_torch_mha(ours: nn.Module, n_heads: int | None = None) -> nn.MultiheadAttention:
    """A ``nn.MultiheadAttention(batch_first=True)`` holding a copy of ``ours``'s weights.

    Args:
        ours: a module with ``n_heads`` (or ``h``) and four ``nn.Linear(d_model, d_model)`` layers
            ``w_q, w_k, w_v, w_o`` (all with a bias, or all without), and optionally a ``dropout``
            probability (a float, or an ``nn.Dropout``).
        n_heads: the number of heads; read from ``ours.n_heads`` (or ``ours.h``) when not given.

    Returns:
        PyTorch's module on the same device and dtype, in the same train/eval mode, with
        ``in_proj_weight = cat(w_q, w_k, w_v)``, ``out_proj = w_o`` and the biases copied. The copy is
        independent: changing one module's weights later does not change the other's.
    """
    # One state_dict() read brings the four projections' tensors at once: under grading every read of the
    # learner's module is a round trip to the sandbox (reading them name by name took about thirty).
    state = dict(ours.state_dict())
    names = ("w_q", "w_k", "w_v", "w_o")
    for name in names:
        if f"{name}.weight" not in state:
            # Not registered under that name (a property over a list of layers, a parametrized Linear):
            # read the attribute itself, as an nn.Linear.
            layer = getattr(ours, name, None)
            weight = getattr(layer, "weight", None)
            if not isinstance(weight, torch.Tensor):
                raise AttributeError(f"to_torch_mha needs four nn.Linear(d_model, d_model) layers w_q, w_k, w_v, w_o; "
                                     f"{type(ours).__name__} has no {name}.weight.")
            state[f"{name}.weight"] = weight.detach()
            bias = getattr(layer, "bias", None)
            if isinstance(bias, torch.Tensor):
                state[f"{name}.bias"] = bias.detach()
    d_model = state["w_q.weight"].shape[1]
    if n_heads is None:
        n_heads = getattr(ours, "n_heads", None) or getattr(ours, "h", None)
    if n_heads is None:
        raise AttributeError("to_torch_mha needs the number of heads: pass n_heads=, or store it as `self.n_heads`.")
    for name in names:
        out_features, in_features = state[f"{name}.weight"].shape
        if (in_features, out_features) != (d_model, d_model):
            raise ValueError(
                f"{name} maps {in_features} -> {out_features} features; nn.MultiheadAttention "
                f"needs every projection to map d_model -> d_model ({d_model} -> {d_model})."
            )
    has_bias = "w_q.bias" in state
    if any((f"{n}.bias" in state) != has_bias for n in names[1:]):
        raise ValueError("nn.MultiheadAttention needs all four projections with a bias, or all four without.")
    p = getattr(ours, "dropout", 0.0)
    p = p.p if isinstance(p, nn.Dropout) else float(p or 0.0)

    weight = state["w_q.weight"]
    ref = nn.MultiheadAttention(d_model, int(n_heads), dropout=p, bias=has_bias, batch_first=True)
    ref = ref.to(device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([state[f"{n}.weight"] for n in names[:3]], dim=0))    # (3D, D)
        ref.out_proj.weight.copy_(state["w_o.weight"])
        if has_bias:
            ref.in_proj_bias.copy_(torch.cat([state[f"{n}.bias"] for n in names[:3]], dim=0))    # (3D,)
            ref.out_proj.bias.copy_(state["w_o.bias"])
    ref.train(ours.training)
    return ref


def to_torch_attn_mask(mask: torch.Tensor, *, batch_size: int | None = None, n_heads: int | None = None,
                       tgt_len: int | None = None, src_len: int | None = None) -> torch.Tensor:
    """Convert OUR boolean mask to ``nn.MultiheadAttention``'s ``attn_mask``.

    !!! THE CONVENTION FLIPS HERE !!!  Ours: **True = attention allowed**.
    ``nn.MultiheadAttention``'s boolean masks: **True = NOT allowed** (the position is masked out).
    This function inverts the mask (with :func:`course.masks.to_torch`, the course's one flip) and
    reshapes it.

    Args:
        mask: bool, True where query ``i`` may attend to key ``j``. Either ``(T_q, T_k)`` (shared by
            every example and head) or 4-D and broadcastable to ``(B, H, T_q, T_k)``.
        batch_size, n_heads, tgt_len, src_len: ``B, H, T_q, T_k``; needed for a 4-D mask only
            (``tgt_len`` / ``src_len`` default to the mask's own sizes where those are not 1).

    Returns:
        bool, True where attention is NOT allowed: ``(T_q, T_k)`` for a 2-D mask, else
        ``(B * H, T_q, T_k)``, the layout ``nn.MultiheadAttention`` expects for per-example masks.
    """
    if mask.dtype != torch.bool:
        raise TypeError(f"expected a boolean mask (True = allowed), got dtype {mask.dtype}.")
    if mask.dim() == 2:
        return masks.to_torch(mask)                                           # (T_q, T_k)
    if mask.dim() != 4:
        raise ValueError(
            f"expected a (T_q, T_k) or a 4-D (B, H, T_q, T_k)-broadcastable mask, got shape {tuple(mask.shape)}; "
            "a key padding mask of shape (B, T_k) is written mask[:, None, None, :]."
        )
    if batch_size is None or n_heads is None:
        raise ValueError("a 4-D mask needs batch_size and n_heads to be expanded to (B * H, T_q, T_k).")
    tq = tgt_len if tgt_len is not None else mask.shape[2]
    tk = src_len if src_len is not None else mask.shape[3]
    full = mask.expand(batch_size, n_heads, tq, tk)                             # (B, H, T_q, T_k)
    return masks.to_torch(full.reshape(batch_size * n_heads, tq, tk))           # (B*H, T_q, T_k)


def to_torch_key_padding_mask(real: torch.Tensor) -> torch.Tensor:
    """Convert OUR key padding mask ``(B, T_k)``, True on real tokens, to PyTorch's (True on padding).

    The convention flips here too: ``nn.MultiheadAttention(key_padding_mask=...)`` wants True where
    the key must be IGNORED.
    """
    if real.dtype != torch.bool or real.dim() != 2:
        raise ValueError(f"expected a boolean (B, T_k) mask, True on real tokens; got {real.dtype} {tuple(real.shape)}.")
    return masks.to_torch_key_padding(real)


def rows_with_a_key(mask: torch.Tensor | None, batch_size: int, n_heads: int, tgt_len: int, src_len: int) -> torch.Tensor:
    """bool ``(B, H, T_q)``: True for the query rows that may attend to at least one key."""
    if mask is None:
        return torch.ones(batch_size, n_heads, tgt_len, dtype=torch.bool)
    return mask.expand(batch_size, n_heads, tgt_len, src_len).any(dim=-1)


def torch_mha_forward(ours: nn.Module, query, key, value, mask=None):
    """Run PyTorch's module, with ``ours``'s weights, on the course's arguments and mask convention.

    Returns:
        ``(out, weights)`` as ``nn.MultiheadAttention`` computes them, with per-head weights
        ``(B, H, T_q, T_k)`` (``need_weights=True, average_attn_weights=False``).
    """
    ref = to_torch_mha(ours)
    n_heads = ref.num_heads
    attn_mask = None
    if mask is not None:
        attn_mask = to_torch_attn_mask(mask.to(query.device), batch_size=query.shape[0], n_heads=n_heads,
                                       tgt_len=query.shape[1], src_len=key.shape[1])
    with torch.no_grad():
        return ref(query, key, value, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)

"""Oracles for lesson 11's hidden tests (the Vision Transformer).

:func:`reference_patchify` cuts the patches out pixel by pixel with explicit loops (no reshapes to get
wrong): patch ``n = r * (W // p) + c`` covers rows ``r*p .. r*p+p-1`` and columns ``c*p .. c*p+p-1``,
and its vector lists channel 0's pixels row by row, then channel 1's, and so on ((C, p, p) flattened).
:func:`reference_embeddings` writes the class token and the positions out the same way.
Instructor side: never shipped to learners (it computes the exercise's answer).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["reference_patchify", "reference_embeddings", "unfold_patches", "conv_embedding"]


def reference_patchify(images: torch.Tensor, p: int) -> torch.Tensor:
    """``(B, C, H, W)`` -> ``(B, N, C*p*p)`` by explicit loops, in float64."""
    B, C, H, W = images.shape
    rows, cols = H // p, W // p
    out = torch.zeros(B, rows * cols, C * p * p, dtype=torch.float64)
    for r in range(rows):
        for c in range(cols):
            n = r * cols + c                                  # row-major: along the first row, then the next
            k = 0
            for ch in range(C):                               # channels first ...
                for i in range(p):                            # ... then the rows of the patch ...
                    for j in range(p):                        # ... then its columns
                        out[:, n, k] = images[:, ch, r * p + i, c * p + j].double()
                        k += 1
    return out


def reference_embeddings(images: torch.Tensor, p: int, weight: torch.Tensor, bias: torch.Tensor,
                         cls_token: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """``cat([cls, patches @ W^T + b]) + pos``, in float64: ``(B, 1 + N, D)``."""
    patches = reference_patchify(images, p)                           # (B, N, C*p*p)
    tokens = patches @ weight.double().T + bias.double()              # (B, N, D)
    cls = cls_token.double().reshape(1, 1, -1).expand(images.shape[0], 1, -1)
    return torch.cat([cls, tokens], dim=1) + pos.double().reshape(1, tokens.shape[1] + 1, -1)


def unfold_patches(images: torch.Tensor, p: int) -> torch.Tensor:
    """PyTorch's ``F.unfold`` with kernel = stride = p, as ``(B, N, C*p*p)``: patches row by row, each (C, p, p).

    It is ``patchify`` in one call (the exercise allows ``F.unfold``), so it lives here, on the trusted side.
    """
    return F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)          # (B, C*p*p, N) -> (B, N, C*p*p)


def conv_embedding(weight: torch.Tensor, bias: torch.Tensor, images: torch.Tensor, p: int) -> torch.Tensor:
    """``F.conv2d`` with kernel = stride = p and the linear layer's ``(D, C*p*p)`` weight read as the kernel
    ``(D, C, p, p)``, output as ``(B, N, D)``: ``PatchEmbedding.forward`` for those weights."""
    D, C = weight.shape[0], images.shape[1]
    out = F.conv2d(images, weight.reshape(D, C, p, p), bias, stride=p)      # (B, D, H/p, W/p)
    return out.flatten(2).transpose(1, 2)                                    # (B, N, D), patches row by row

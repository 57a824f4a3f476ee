"""Small images for the Vision Transformer lesson (11): handwritten digits, and generated shapes.

``digits``: scikit-learn's bundled 8x8 handwritten digits (1 797 images, 10 classes), read from the
files that ship inside scikit-learn (no download), scaled to [0, 1] and split into a fixed,
stratified train and test set. ``subset`` picks a smaller, class-balanced training set (the "how
many images does each model need?" experiment), ``random_shift`` is the augmentation (every image
moved by up to a pixel or two, the gap filled with black).

``shapes``: generated 1-channel images holding two 3x3 glyphs (each a hollow **square**, a **cross**
or a **plus**), dropped at random places a chosen horizontal distance (the "gap") apart. The label is
a *relation between two distant parts of the image*: 1 when the two glyphs are the same shape, 0 when
they differ. Where the glyphs are says nothing about the label, and each glyph alone says nothing
either: a model must compare the two places. Self-attention relates any two patches in one layer. A
convolutional network sees only its receptive field, and its global average pooling adds up what it
found: the sum "one square + one cross" lies exactly halfway between "two squares" and "two crosses",
so a linear head on the pooled features cannot tell same from different once the glyphs are too far
apart to fall in one receptive field. Optional ``noise`` sprinkles distracting pixels.

Everything is seeded and offline: the same ``seed`` gives the same split and images everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["ImageSplits", "digits", "subset", "random_shift", "shapes", "GLYPHS", "SHAPE_CLASSES"]

# what `digits` imports when it is first called (about 1.5 s): a warm grading sandbox imports it once
# per batch instead of once per submission (see course.grading.sandboxed.zygote.warm_imports)
WARM_IMPORTS = ("sklearn.datasets",)

SHAPE_CLASSES = ("different", "same")

# The 3x3 glyphs: a hollow square, a cross and a plus.
GLYPHS = {
    "square": torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0], [1.0, 1.0, 1.0]]),
    "cross": torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 0.0, 1.0]]),
    "plus": torch.tensor([[0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]),
}


@dataclass
class ImageSplits:
    """Images ``(N, C, H, W)`` float32 in [0, 1] and labels ``(N,)`` int64, for training and testing."""

    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    classes: tuple[str, ...]

    def __repr__(self) -> str:
        return (f"ImageSplits(train={tuple(self.train_x.shape)}, test={tuple(self.test_x.shape)}, "
                f"classes={len(self.classes)})")


def digits(seed: int = 0, test_fraction: float = 0.25) -> ImageSplits:
    """scikit-learn's 8x8 digits, split per class into train and test (the same split for the same seed).

    Args:
        seed: seeds the split.
        test_fraction: share of each class held out for testing.

    Returns:
        :class:`ImageSplits` with images of shape ``(N, 1, 8, 8)`` in [0, 1] (the raw 0..16 ink levels
        divided by 16): 1 347 training and 450 test images for the default fraction.
    """
    from sklearn.datasets import load_digits   # bundled with scikit-learn: read from disk, no download

    raw = load_digits()
    images = torch.tensor(raw.images, dtype=torch.float32).unsqueeze(1) / 16.0   # (1797, 1, 8, 8)
    labels = torch.tensor(raw.target, dtype=torch.int64)
    g = torch.Generator().manual_seed(seed)
    train_idx, test_idx = [], []
    for c in range(10):
        idx = (labels == c).nonzero().squeeze(1)
        idx = idx[torch.randperm(len(idx), generator=g)]
        n_test = round(len(idx) * test_fraction)
        test_idx.append(idx[:n_test])
        train_idx.append(idx[n_test:])
    train_idx = torch.cat(train_idx)
    test_idx = torch.cat(test_idx)
    train_idx = train_idx[torch.randperm(len(train_idx), generator=g)]      # classes interleaved
    return ImageSplits(images[train_idx], labels[train_idx], images[test_idx], labels[test_idx],
                       tuple(str(c) for c in range(10)))


def subset(x: torch.Tensor, y: torch.Tensor, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` examples of ``(x, y)`` with the classes as balanced as possible (seeded).

    Args:
        x: ``(N, ...)`` examples; y: ``(N,)`` integer labels.
        n: how many to keep (at most N).
        seed: seeds the choice.
    """
    if n >= len(y):
        return x, y
    g = torch.Generator().manual_seed(seed)
    classes = y.unique()
    per_class = [(y == c).nonzero().squeeze(1) for c in classes]
    per_class = [idx[torch.randperm(len(idx), generator=g)] for idx in per_class]
    # Round-robin over the classes: every class gets n // K examples, the first n % K one more.
    chosen, i = [], 0
    while len(chosen) < n:
        for idx in per_class:
            if i < len(idx) and len(chosen) < n:
                chosen.append(int(idx[i]))
        i += 1
    chosen = torch.tensor(chosen)
    chosen = chosen[torch.randperm(len(chosen), generator=g)]
    return x[chosen], y[chosen]


def random_shift(images: torch.Tensor, max_shift: int = 1, generator: torch.Generator | None = None) -> torch.Tensor:
    """Move every image by its own random (dy, dx), each in [-max_shift, max_shift]; black fills the gap.

    Args:
        images: ``(B, C, H, W)``.
        max_shift: the largest move in pixels (0 returns the images unchanged).
        generator: a ``torch.Generator`` (CPU) for the moves.

    Returns:
        A new ``(B, C, H, W)`` tensor on the images' device.
    """
    if max_shift <= 0:
        return images
    B, C, H, W = images.shape
    s = max_shift
    padded = torch.nn.functional.pad(images, (s, s, s, s))                       # (B, C, H+2s, W+2s)
    shifts = torch.randint(0, 2 * s + 1, (B, 2), generator=generator).to(images.device)
    rows = shifts[:, 0, None] + torch.arange(H, device=images.device)             # (B, H): rows to read
    cols = shifts[:, 1, None] + torch.arange(W, device=images.device)             # (B, W)
    b = torch.arange(B, device=images.device)[:, None, None, None]
    c = torch.arange(C, device=images.device)[None, :, None, None]
    return padded[b, c, rows[:, None, :, None], cols[:, None, None, :]]          # (B, C, H, W)


def shapes(n: int, seed: int = 0, *, image_size: int = 24, cell: int = 1, min_gap: int = 4, max_gap: int | None = None,
           noise: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Images with two glyphs; label 1 when they are the same shape, 0 when they differ.

    Args:
        n: number of images.
        seed: seeds the glyphs, the positions, the labels and the noise.
        image_size: side S of the square image.
        cell: glyphs sit on a grid of ``cell`` x ``cell`` squares (their top-left corners at multiples of
            ``cell``; ``cell >= 3``, and S a multiple of it, puts each glyph inside one square, e.g. one
            ViT patch); 1 puts them at any pixel.
        min_gap, max_gap: the glyphs' left edges are ``gap`` pixels apart horizontally, ``gap`` a multiple
            of ``cell`` drawn uniformly from [min_gap, max_gap] (``max_gap`` defaults to the widest that
            fits); ``gap >= 3`` keeps the glyphs from overlapping. Their rows are independent.
        noise: the probability that any pixel is lit at random (a distraction; 0 for clean images).

    Returns:
        ``(images (n, 1, S, S) float32 in [0, 1], labels (n,) int64, gaps (n,) int64)``: the labels
        balanced 50/50 in expectation, ``gaps`` the horizontal distance between the glyphs' left edges.
    """
    S, k = image_size, 3
    slots = (S - k) // cell + 1                                   # positions a glyph's corner can take, per axis
    lo = -(-max(min_gap, 3) // cell)                              # the gap in cells: ceil(min_gap / cell) ...
    hi = (slots - 1) if max_gap is None else min(slots - 1, max_gap // cell)   # ... up to floor(max_gap / cell)
    if lo > hi:
        raise ValueError(f"no gap between {min_gap} and {max_gap} pixels fits: image_size={S}, cell={cell}.")
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (n,), generator=g)
    glyphs = torch.stack(list(GLYPHS.values()))                                    # (K, 3, 3)
    K = len(glyphs)
    first = torch.randint(0, K, (n,), generator=g)
    # same: the second glyph is the first; different: one of the other K - 1, uniformly
    second = torch.where(labels == 1, first, (first + torch.randint(1, K, (n,), generator=g)) % K)
    gaps = torch.randint(lo, hi + 1, (n,), generator=g)                            # in cells
    left = torch.floor(torch.rand(n, generator=g) * (slots - gaps).float()).long()  # [0, slots - 1 - gap]
    right = left + gaps
    rows = torch.randint(0, slots, (n, 2), generator=g)
    images = torch.zeros(n, 1, S, S)
    for i in range(n):
        r0, r1 = int(rows[i, 0]) * cell, int(rows[i, 1]) * cell
        c0, c1 = int(left[i]) * cell, int(right[i]) * cell
        images[i, 0, r0:r0 + k, c0:c0 + k] = glyphs[first[i]]
        images[i, 0, r1:r1 + k, c1:c1 + k] = glyphs[second[i]]          # gap >= 3 pixels: no overlap
    if noise > 0:
        images = torch.maximum(images, (torch.rand(images.shape, generator=g) < noise).float())
    return images, labels, gaps * cell

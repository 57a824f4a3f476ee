"""Plots every lesson uses: attention heatmaps, bar charts of weights, training curves."""

from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = ["heatmap", "bars", "curves", "grid"]


def _np(x):
    """Tensors, lists and arrays alike become a NumPy array."""
    if isinstance(x, torch.Tensor):
        return x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=float)


def heatmap(weights, *, rows: Sequence[str] | None = None, cols: Sequence[str] | None = None, title: str = "",
            ax=None, xlabel: str = "keys", ylabel: str = "queries", annotate: bool | None = None, cmap: str = "viridis",
            colorbar: bool = True, vmin: float | None = 0.0, vmax: float | None = None):
    """Draw a (T_q, T_k) attention matrix with token labels; returns the axes."""
    w = _np(weights)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(3.0, 0.45 * w.shape[1] + 1.5), max(2.5, 0.4 * w.shape[0] + 1.0)))
    im = ax.imshow(w, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    if cols is not None:
        ax.set_xticks(range(len(cols)), list(cols), rotation=60, ha="right", fontsize=8)
    if rows is not None:
        ax.set_yticks(range(len(rows)), list(rows), fontsize=8)
    if annotate is None:
        annotate = w.size <= 64
    if annotate:                     # the text's colour from its cell's: dark on light, white on dark, any colormap
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                r, g, b, _ = im.cmap(im.norm(w[i, j]))
                ax.text(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if 0.2126 * r + 0.7152 * g + 0.0722 * b < 0.45 else "black")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def bars(values, labels: Sequence[str] | None = None, *, title: str = "", ax=None, ylabel: str = "weight",
         highlight: int | None = None, ylim=(0, 1)):
    """Bar chart of one distribution (e.g. attention weights over tokens); returns the axes."""
    v = _np(values).reshape(-1)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, 0.4 * len(v) + 1), 2.8))
    colors = ["tab:orange" if i == highlight else "tab:blue" for i in range(len(v))]
    ax.bar(range(len(v)), v, color=colors)
    if labels is not None:
        ax.set_xticks(range(len(v)), list(labels), rotation=60, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    if title:
        ax.set_title(title)
    return ax


def curves(series: Mapping[str, Sequence[float]], *, title: str = "", xlabel: str = "step", ylabel: str = "loss",
           ax=None, logy: bool = False, smooth: int = 1, baselines: Mapping[str, float] | None = None):
    """Line plot of several named curves (training losses, accuracies); returns the axes. ``baselines``: named
    levels drawn as dashed grey lines (chance, a trivial predictor), so a curve is read against what no learning
    gives."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.2))
    for name, ys in series.items():
        ys = list(_np(torch.as_tensor(list(ys), dtype=torch.float32)))
        if smooth > 1 and len(ys) >= smooth:
            k = smooth
            ys = [sum(ys[max(0, i - k + 1): i + 1]) / len(ys[max(0, i - k + 1): i + 1]) for i in range(len(ys))]
        ax.plot(range(len(ys)), ys, label=name)
    for k, (name, level) in enumerate((baselines or {}).items()):
        ax.axhline(level, color="0.35", linestyle=("--", ":", "-.")[k % 3], linewidth=1, label=name)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def grid(n: int, *, cols: int = 4, size: float = 3.0):
    """A figure with ``n`` axes in rows of ``cols``; returns (fig, flat list of axes)."""
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, min(cols, n), figsize=(size * min(cols, n), size * rows), squeeze=False)
    flat = [a for row in axes for a in row]
    for a in flat[n:]:
        a.axis("off")
    return fig, flat[:n]

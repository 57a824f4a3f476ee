"""A small drawing kit for the lessons' explanatory diagrams, on matplotlib (offline, deterministic).

A diagram is drawn on a :class:`Sheet` in its own units (1 unit = :data:`UNIT` inches), with boxes, tensors
drawn as grids of cells with their shape beside them, arrows and text. Colours carry one meaning each,
everywhere in the course (:data:`COLORS`): queries blue, keys orange, values green, scores and weights
purple, masks grey, embeddings and the residual stream teal, outputs red. Saved as a small palette PNG
with no timestamp in it, so the same source gives the same bytes on every machine that has the pinned
matplotlib (``course learner-layer --check`` relies on it).
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402

__all__ = ["Sheet", "COLORS", "UNIT"]

UNIT = 0.42            # inches per unit of a sheet
DPI = 110
COLORS = {
    "q": "#4C72B0", "k": "#DD8452", "v": "#55A868", "w": "#8172B3", "mask": "#8C8C8C", "x": "#2A9D8F",
    "out": "#C44E52", "pos": "#E9C46A", "ffn": "#B07AA1", "norm": "#9C755F", "neutral": "#E6E6E6",
    "ink": "#222222", "soft": "#666666", "ok": "#2E7D32", "bad": "#B71C1C", "white": "#FFFFFF",
}


def _color(name: str) -> str:
    return COLORS.get(name, name)


def _luminance(color) -> float:
    """Relative luminance of a colour (0 black, 1 white), to choose a legible text colour on it."""
    r, g, b = matplotlib.colors.to_rgb(color)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def light(color: str, amount: float = 0.72) -> tuple:
    """``color`` mixed with white: the fill behind a label of that colour."""
    r, g, b = matplotlib.colors.to_rgb(_color(color))
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


class Sheet:
    """A drawing area ``width`` x ``height`` units; (0, 0) is the bottom left."""

    def __init__(self, width: float, height: float, title: str | None = None):
        self.fig = plt.figure(figsize=(width * UNIT, height * UNIT + (0.35 if title else 0)), dpi=DPI)
        self.ax = self.fig.add_axes((0, 0, 1, height * UNIT / (height * UNIT + (0.35 if title else 0))))
        self.ax.set_xlim(0, width)
        self.ax.set_ylim(0, height)
        self.ax.set_aspect("equal")
        self.ax.axis("off")
        if title:
            self.fig.text(0.5, 1 - 0.12 / (height * UNIT + 0.35), title, ha="center", va="top", fontsize=12,
                          weight="bold", color=COLORS["ink"])

    # -- pieces --------------------------------------------------------------------------------
    def text(self, x, y, s, *, size=10, color="ink", ha="center", va="center", weight="normal", style="normal",
             rotation=0):
        self.ax.text(x, y, s, ha=ha, va=va, fontsize=size, color=_color(color), weight=weight, style=style,
                     rotation=rotation)

    def box(self, x, y, w, h, label="", *, color="neutral", size=10, sub=None, fill=None, round_=0.15, lw=1.4,
            dashed=False, weight="normal"):
        """A rounded box with a label (and a smaller second line ``sub``); ``(x, y)`` is its bottom left."""
        edge = _color(color) if color != "neutral" else COLORS["soft"]
        face = fill if fill is not None else (light(color) if color != "neutral" else COLORS["neutral"])
        self.ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle=f"round,pad=0,rounding_size={round_}",
                                         facecolor=face, edgecolor=edge, linewidth=lw,
                                         linestyle="--" if dashed else "-"))
        if sub:
            self.text(x + w / 2, y + h * 0.62, label, size=size, weight=weight)
            self.text(x + w / 2, y + h * 0.28, sub, size=size - 2, color="soft")
        elif label:
            self.text(x + w / 2, y + h / 2, label, size=size, weight=weight)
        return (x, y, w, h)

    def grid(self, x, y, rows, cols, *, cell=0.38, color="neutral", values=None, label=None, shape=None,
             shape_side="below", cmap=None, vmax=None, marks=None, size=9):
        """A tensor as a ``rows`` x ``cols`` grid of cells, bottom left at ``(x, y)``. ``values`` (rows x cols, 0..1)
        shade the cells with ``cmap`` (one colormap per meaning); ``marks`` writes a short text in each cell;
        ``label`` goes above, ``shape`` (e.g. "(T, d_k)") below or to the right."""
        cm = plt.get_cmap(cmap) if cmap else None
        for i in range(rows):
            for j in range(cols):
                if values is not None and cm is not None:
                    v = values[i][j]
                    face = cm(min(1.0, v / vmax) if vmax else v) if v == v else COLORS["white"]
                elif values is not None:
                    face = _color(color) if values[i][j] else COLORS["white"]
                else:
                    face = light(color, 0.55) if color != "neutral" else COLORS["neutral"]
                self.ax.add_patch(Rectangle((x + j * cell, y + (rows - 1 - i) * cell), cell, cell, facecolor=face,
                                            edgecolor=COLORS["white"] if values is None else "#BBBBBB", linewidth=0.8))
                if marks is not None:              # dark text on light cells, white on dark ones
                    self.text(x + (j + 0.5) * cell, y + (rows - 1 - i + 0.5) * cell, str(marks[i][j]), size=size - 2,
                              color="white" if _luminance(face) < 0.45 else "ink")
        edge = _color(color) if color != "neutral" else COLORS["soft"]
        self.ax.add_patch(Rectangle((x, y), cols * cell, rows * cell, fill=False, edgecolor=edge, linewidth=1.4))
        if label:
            self.text(x + cols * cell / 2, y + rows * cell + 0.3, label, size=size + 1, weight="bold",
                      color=color if color in COLORS and color != "neutral" else "ink")
        if shape:
            if shape_side == "below":
                self.text(x + cols * cell / 2, y - 0.3, shape, size=size, color="soft")
            else:
                self.text(x + cols * cell + 0.15, y + rows * cell / 2, shape, size=size, color="soft", ha="left")
        return (x, y, cols * cell, rows * cell)

    def arrow(self, x0, y0, x1, y1, label=None, *, color="ink", lw=1.4, style="-|>", rad=0.0, size=9,
              label_at=0.5, label_dx=0.0, label_dy=0.25, dashed=False):
        self.ax.add_patch(FancyArrowPatch((x0, y0), (x1, y1), arrowstyle=style, mutation_scale=12,
                                          color=_color(color), linewidth=lw, linestyle="--" if dashed else "-",
                                          connectionstyle=f"arc3,rad={rad}", shrinkA=2, shrinkB=2))
        if label:
            self.text(x0 + (x1 - x0) * label_at + label_dx, y0 + (y1 - y0) * label_at + label_dy, label, size=size,
                      color="soft")

    def line(self, xs, ys, *, color="soft", lw=1.0, dashed=False):
        self.ax.plot(xs, ys, color=_color(color), linewidth=lw, linestyle="--" if dashed else "-")

    def circle(self, x, y, r, label="", *, color="neutral", size=10):
        from matplotlib.patches import Circle

        self.ax.add_patch(Circle((x, y), r, facecolor=light(color) if color != "neutral" else COLORS["neutral"],
                                 edgecolor=_color(color) if color != "neutral" else COLORS["soft"], linewidth=1.4))
        if label:
            self.text(x, y, label, size=size)

    def cell(self, x, y, w, h, face, edge="#BBBBBB", lw=0.8, text=None, size=8, color="ink"):
        """A plain rectangle of colour ``face`` (one cell of a grid drawn by hand), with optional centred text."""
        from matplotlib.patches import Rectangle

        self.ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor=edge, linewidth=lw))
        if text is not None:
            self.text(x + w / 2, y + h / 2, text, size=size, color=color)

    def plus(self, x, y, r=0.36, *, lw=1.6):
        """A residual sum: a circle with a plus in it."""
        self.circle(x, y, r, color="x")
        self.line([x - r * 0.55, x + r * 0.55], [y, y], color="ink", lw=lw)
        self.line([x, x], [y - r * 0.55, y + r * 0.55], color="ink", lw=lw)

    # -- output --------------------------------------------------------------------------------
    def png(self) -> bytes:
        """The sheet as palette PNG bytes (no timestamp, no software tag: the same drawing, the same bytes)."""
        from PIL import Image

        buf = io.BytesIO()
        self.fig.savefig(buf, format="png", dpi=DPI, facecolor="white", metadata={"Software": None})
        plt.close(self.fig)
        buf.seek(0)
        image = Image.open(buf).convert("RGB").quantize(colors=96, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        out = io.BytesIO()
        image.save(out, format="png", optimize=True)
        return out.getvalue()

    def save(self, path: Path) -> None:
        Path(path).write_bytes(self.png())


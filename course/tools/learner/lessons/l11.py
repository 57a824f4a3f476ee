"""Lesson 11: an image cut into patch tokens, the patch embedding as a strided convolution, the class token and the
positions."""

from __future__ import annotations

from course.tools.learner.lessons import diagram, front
from course.tools.learner.draw import COLORS, Sheet

L = "11_vit"

front(L, level="optional", part="Beyond the core", lessons=("06_multi_head_attention", "07_transformer_block"),
      needs="lesson 10's [CLS] token helps (not required); a convolution's kernel and stride; PyTorch's "
            "`reshape`, `permute`, `nn.Conv2d` and `nn.TransformerEncoderLayer`",
      objectives=[
          "Cut images into patch tokens in row-major order, each patch its (C, p, p) block flattened.",
          "Show that a linear layer on the patches is a convolution whose kernel size and stride are both p.",
          "Build a Vision Transformer (class token, learned positions, pre-norm blocks, a head on the class "
          "token) equal to `transformers`' `ViTModel` holding the same weights.",
          "Measure how a ViT and a CNN of the same size fare with fewer training images, and on a task that "
          "needs two distant parts of an image compared.",
          "Read the class token's attention over an image, and say what such a map does and does not show.",
      ],
      standard_minutes=11,
      runs_long="the standard profile trains a ViT for 2 500 steps and a small CNN on the digits, both models "
                "again on three smaller training sets, then both on the shapes task: about 10 to 13 minutes on "
                "a laptop CPU, most of it the ViT's digits training. The smoke profile runs in under a minute.")

# the pixel values of a small 6 x 6 "image" (one channel shown; the other two are drawn behind it)
_IMG = [[0.0, 0.2, 0.7, 0.8, 0.2, 0.0],
        [0.0, 0.7, 0.3, 0.2, 0.8, 0.0],
        [0.0, 0.2, 0.0, 0.1, 0.9, 0.1],
        [0.0, 0.0, 0.3, 0.8, 0.4, 0.0],
        [0.0, 0.4, 0.8, 0.2, 0.0, 0.0],
        [0.1, 0.9, 0.9, 0.9, 0.8, 0.2]]
_CH = (0.78, 0.55, 0.3)            # channels 0, 1, 2: three shades of the tokens' teal (light to dark)


def _teal(amount: float) -> tuple:
    """The tokens' teal mixed with white (amount 1: white)."""
    import matplotlib.colors

    r, g, b = matplotlib.colors.to_rgb(COLORS["x"])
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


@diagram(L, "l11-patches", alt="""An image of C = 3 channels and 6 by 6 pixels, drawn as three stacked layers, is cut
into a 3 by 3 grid of patches of p = 2 pixels. The patches are numbered in row-major order, like reading a page:
0, 1, 2 on the top row, 3, 4, 5 on the middle row, 6, 7, 8 on the bottom row, so patch n sits in grid row n // 3
and grid column n % 3. Patch 5 (grid row 1, column 2) is taken out as its (C, p, p) = (3, 2, 2) block: one 2 by 2
square per channel. Flattened channel first, then row, then column, it becomes one vector of C p p = 12 numbers:
the 4 pixels of channel 0, then the 4 of channel 1, then the 4 of channel 2; entry ch p p + i p + j is pixel
(ch, i, j) of the patch. Stacking the N = 9 vectors gives patchify's output, of shape (B, N, C p p) = (B, 9, 12),
one row per patch, in the order 0 to 8.""")
def patches():
    s = Sheet(31, 13.0, title="patchify: an image becomes N tokens, patches in row-major order, each its (C, p, p) "
                              "block flattened")
    c, x0, y0 = 0.75, 1.6, 2.4
    for k, off in ((2, 0.5), (1, 0.25)):                     # channels 2 and 1, behind channel 0
        s.box(x0 + off, y0 + off, 6 * c, 6 * c, "", color="x", fill=_teal(_CH[k]), round_=0.02)
    s.grid(x0, y0, 6, 6, cell=c, values=_IMG, cmap="Greys", label=None)
    for k in range(1, 3):                                     # the patch grid
        s.line([x0 + 2 * k * c] * 2, [y0, y0 + 6 * c], color="out", lw=2.0)
        s.line([x0, x0 + 6 * c], [y0 + 2 * k * c] * 2, color="out", lw=2.0)
    for n in range(9):
        r, col = divmod(n, 3)
        s.text(x0 + (2 * col + 0.35) * c, y0 + (6 - 2 * r - 0.3) * c, str(n), size=9, color="out", weight="bold")
    s.box(x0 + 4 * c, y0 + 2 * c, 2 * c, 2 * c, "", color="out", fill="none", lw=2.6, round_=0.02)
    s.text(x0 + 3 * c + 0.25, y0 + 6 * c + 1.1, "image (C, H, W) = (3, 6, 6)", size=10, weight="bold")
    s.text(x0 + 3 * c + 0.25, y0 - 0.55, "p = 2: a 3 × 3 grid of patches,", size=9, color="soft")
    s.text(x0 + 3 * c + 0.25, y0 - 1.1, "numbered row by row (red)", size=9, color="soft")
    # patch 5 as its (C, p, p) block
    bx, by = 9.0, 4.6
    s.arrow(x0 + 6 * c + 0.7, y0 + 3 * c, bx - 0.2, by + 0.8, color="out", label="patch 5:", label_dy=0.35)
    s.text(bx + 2.3, by + 3.2, "its (C, p, p) = (3, 2, 2) block", size=10, weight="bold")
    block = [[_IMG[r][cc] for cc in (4, 5)] for r in (2, 3)]
    for k in range(3):
        if k == 0:
            s.grid(bx, by, 2, 2, cell=c, values=block, cmap="Greys", shape="ch 0 (front)")
        else:
            for i in range(2):
                for j in range(2):
                    s.box(bx + k * 1.75 + j * c, by + (1 - i) * c, c, c, "", color="x", fill=_teal(_CH[k]),
                          round_=0.02, lw=0.8)
            s.text(bx + k * 1.75 + c, by - 0.3, f"ch {k}", size=9, color="soft")
        for i in range(2):
            for j in range(2):
                s.text(bx + k * 1.75 + (j + 0.5) * c, by + (1 - i + 0.5) * c, f"{i}{j}", size=7,
                       color="white" if (k == 0 and block[i][j] > 0.5) or k == 2 else "ink")
    s.text(bx + 2.3, by - 1.1, "cells: row i, column j inside the patch", size=8, color="soft")
    # flattened vector
    vx, vy = 16.4, 4.6
    s.arrow(bx + 5.3, by + 0.75, vx - 0.2, vy + 0.3, color="ink", label="flatten", label_dy=0.35)
    for e in range(12):
        k, rest = divmod(e, 4)
        s.box(vx + e * 0.62, vy, 0.6, 0.6, "", color="x", fill=_teal(_CH[k]), round_=0.02, lw=0.8)
        s.text(vx + e * 0.62 + 0.3, vy + 0.3, f"{rest // 2}{rest % 2}", size=6)
    for k in range(3):
        s.text(vx + (4 * k + 2) * 0.62, vy + 0.95, f"ch {k}", size=8, color="x", weight="bold")
    s.text(vx + 3.7, vy - 0.5, "C·p·p = 12 numbers: entry ch·p·p + i·p + j", size=9, color="soft")
    # the sequence of tokens
    tx, ty = 18.2, 7.2
    s.text(tx + 4.6, 12.0, "patchify(images, 2): (B, N, C·p·p) = (B, 9, 12)", size=10, weight="bold")
    for n in range(9):
        yy = ty + (8 - n) * 0.42
        for e in range(12):
            s.box(tx + e * 0.62, yy, 0.6, 0.38, "", color="out" if n == 5 else "x", fill=_teal(_CH[e // 4]),
                  round_=0.02, lw=0.6 if n != 5 else 1.4)
        s.text(tx - 0.3, yy + 0.19, f"patch {n}", size=7, color="out" if n == 5 else "soft", ha="right")
    s.arrow(vx + 3.7, vy + 1.3, tx + 3.7, ty + 3 * 0.42 + 0.05, color="soft", dashed=True)
    s.text(tx + 3.7, 1.5, "one row (a token) per patch, in the order 0 … 8; N = (H/p)(W/p)", size=9, color="soft")
    s.text(15.5, 0.6, "a plain reshape would read p pixels of one image row as a patch: split H and W into "
                      "(grid, offset), permute, merge", size=9, color="soft")
    return s


@diagram(L, "l11-patch-embedding", alt="""Two ways to compute the patch embedding give the same numbers. Top: patchify
turns images (B, C, H, W) into patches (B, N, C p p); one nn.Linear(C p p, D), whose weight W_E has shape (D, C p p),
is applied to every patch and gives tokens (B, N, D). Bottom: nn.Conv2d(C, D, kernel_size = p, stride = p) with a
kernel K of shape (D, C, p, p) slides over the image in steps of p, so its windows never overlap and window (r, c)
is exactly patch n = r (W/p) + c; its output (B, D, H/p, W/p), flattened over the grid and transposed, is (B, N, D).
The two are the same function when W_E = K.reshape(D, C p p), because the convolution's triple sum over channel, row
and column runs over the patch's pixels in the order patchify flattens them.""")
def patch_embedding():
    s = Sheet(31, 11.2, title="The patch embedding: a linear layer on the patches is a convolution with kernel = "
                              "stride = p")
    # top path
    y = 7.6
    s.box(0.5, y, 3.2, 1.3, "images", sub="(B, C, H, W)", color="x", size=11)
    s.arrow(3.8, y + 0.65, 4.5, y + 0.65, color="ink")
    s.box(4.6, y, 3.2, 1.3, "patchify", sub="(B, N, C·p·p)", color="neutral", size=11)
    s.arrow(7.9, y + 0.65, 8.6, y + 0.65, color="ink")
    s.box(8.7, y, 7.0, 1.3, "nn.Linear(C·p·p, D)", sub="weight W_E (D, C·p·p), shared by all patches",
          color="neutral", size=11)
    s.arrow(15.8, y + 0.65, 16.5, y + 0.65, color="ink")
    s.box(16.6, y, 3.2, 1.3, "tokens", sub="(B, N, D)", color="x", size=11)
    s.text(10.15, 9.65, "what the lesson writes (PatchEmbedding.proj)", size=10, weight="bold")
    # bottom path
    y2 = 2.2
    s.box(0.5, y2, 3.2, 1.3, "images", sub="(B, C, H, W)", color="x", size=11)
    s.arrow(3.8, y2 + 0.65, 4.5, y2 + 0.65, color="ink")
    s.box(4.6, y2, 7.0, 1.3, "Conv2d(C, D, kernel_size=p, stride=p)", sub="kernel K (D, C, p, p)",
          color="neutral", size=10)
    s.arrow(11.7, y2 + 0.65, 12.4, y2 + 0.65, color="ink")
    s.box(12.5, y2, 3.2, 1.3, "(B, D, H/p, W/p)", sub="one value per window", color="neutral", size=10)
    s.arrow(15.8, y2 + 0.65, 16.5, y2 + 0.65, color="ink")
    s.box(16.6, y2, 3.2, 1.3, "tokens", sub="(B, N, D)", color="x", size=11)
    s.text(18.2, y2 - 0.45, ".flatten(2).transpose(1, 2)", size=8, color="soft")
    s.text(10.15, 4.25, "what transformers and timm run (one fast kernel)", size=10, weight="bold")
    # equality
    s.box(5.8, 5.3, 8.7, 1.1, "the same numbers when W_E = K.reshape(D, C·p·p)", color="w", size=10)
    s.arrow(18.2, 7.5, 18.2, 3.6, color="w", style="<|-|>", lw=1.6)
    s.text(18.6, 5.85, "equal", size=9, color="w", ha="left")
    # the stride picture
    gx, gy, c = 24.0, 2.4, 0.6
    s.grid(gx, gy, 6, 6, cell=c, color="neutral")
    for (r, col), label in (((0, 0), "0"), ((0, 1), "1"), ((1, 2), "5")):
        s.box(gx + 2 * col * c, gy + (4 - 2 * r) * c, 2 * c, 2 * c, label, color="x", round_=0.02, lw=2.0, size=9)
    s.text(gx + 3 * c, gy + 6 * c + 0.45, "stride = kernel = p = 2", size=10, weight="bold")
    s.text(gx + 3 * c, gy - 0.45, "windows never overlap:", size=9, color="soft")
    s.text(gx + 3 * c, gy - 0.95, "window (r, c) = patch r·(W/p) + c", size=9, color="soft")
    s.text(gx + 3 * c, 8.9, "conv[d, r, c] = $b_d + \\sum_{ch,i,j} K[d, ch, i, j]$", size=9)
    s.text(gx + 3 * c, 8.3, "· image[ch, rp + i, cp + j]", size=9)
    s.text(gx + 3 * c, 7.6, "= row d of W_E · patch n, + $b_d$", size=9, color="soft")
    return s


@diagram(L, "l11-class-token", alt="""How the ViT's input sequence is assembled, with shapes, for N = 9 patches of
width D. The patch tokens (B, N, D) from the patch embedding get one more token in front: the learned class token
cls_token (1, 1, D), expanded to (B, 1, D), one copy per image, and concatenated at position 0, giving (B, N + 1, D).
The learned position embeddings pos_embedding (1, N + 1, D), one row per position 0 to N, are added to every
image's sequence (broadcast over B); row 0 goes to the class token. Dropout gives z_0 (B, N + 1, D), which the
pre-norm encoder blocks turn into hidden states (B, N + 1, D); after the final LayerNorm, the head, a linear layer
from D to the number of classes, reads token 0 only, the class token, giving logits (B, n_classes).""")
def class_token():
    s = Sheet(32.5, 11.0, title="The input sequence: a class token in front, a learned position added to every token")
    N, c, y0 = 9, 0.5, 2.2
    top = y0 + (N + 1) * c                                    # the top of a (N + 1)-row grid
    # the class token, expanded, and the patch tokens
    s.grid(0.8, top + 1.2, 1, 4, cell=c, color="out", label="cls_token")
    s.text(1.8, top + 0.85, "(1, 1, D) → (B, 1, D)", size=8, color="soft")
    s.grid(0.8, y0 - 0.4, N, 4, cell=c, color="x", shape="patch tokens (B, N, D)")
    s.arrow(2.9, top + 1.45, 5.0, top - 0.3, color="out", rad=-0.25)
    s.arrow(2.9, y0 + 2.0, 4.9, y0 + 2.0, color="x")
    s.text(3.9, y0 + 2.4, "cat", size=9, color="soft")
    # the concatenation
    cx = 6.6
    s.grid(cx, y0, N + 1, 4, cell=c, color="x", shape="(B, N + 1, D)")
    s.box(cx, top - c, 4 * c, c, "", color="out", fill="#F2C4C5", round_=0.02, lw=1.4)
    for n in range(N + 1):
        s.text(cx - 0.15, y0 + (N - n + 0.5) * c, "cls 0" if n == 0 else f"patch {n - 1}", size=7,
               color="out" if n == 0 else "soft", ha="right")
    s.text(cx + 1.0, top + 0.45, "torch.cat(dim=1)", size=9, weight="bold")
    # + positions
    s.text(9.6, y0 + 2.5, "+", size=20, weight="bold")
    px = 10.5
    s.grid(px, y0, N + 1, 4, cell=c, color="pos", label="pos_embedding", shape="(1, N + 1, D)")
    for n in range(N + 1):
        s.text(px + 4 * c + 0.15, y0 + (N - n + 0.5) * c, f"{n}", size=7, color="soft", ha="left")
    s.text(px + 1.0, y0 - 0.85, "learned; broadcast over B", size=8, color="soft")
    s.text(13.5, y0 + 2.5, "=", size=20, weight="bold")
    # z0
    zx = 14.4
    s.grid(zx, y0, N + 1, 4, cell=c, color="x", label="$z_0$", shape="(B, N + 1, D)")
    s.box(zx, top - c, 4 * c, c, "", color="out", fill="#F2C4C5", round_=0.02, lw=1.4)
    s.text(zx + 1.0, y0 - 0.85, "row 0: cls + position 0", size=8, color="out")
    # encoder and head
    s.arrow(16.6, y0 + 2.5, 18.2, y0 + 2.5, color="ink", label="dropout", label_dy=0.35)
    s.box(18.3, y0 + 1.0, 4.6, 3.0, "pre-norm encoder", sub="L blocks, then LayerNorm", color="neutral", size=10)
    s.arrow(23.0, y0 + 2.5, 23.9, y0 + 2.5, color="ink")
    hx = 24.0
    s.grid(hx, y0, N + 1, 4, cell=c, color="x", label="hidden", shape="(B, N + 1, D)")
    s.box(hx, top - c, 4 * c, c, "", color="out", fill="#F2C4C5", round_=0.02, lw=1.4)
    s.arrow(hx + 4 * c + 0.1, top - c / 2, 27.5, top - c / 2, color="out", label="token 0", label_dy=0.3)
    s.box(27.6, top - 1.1, 4.6, 1.3, "head: Linear(D, n_classes)", sub="logits (B, n_classes)", color="out", size=9)
    s.text(16.2, 0.45, "the class token belongs to no patch: through attention it gathers what the classifier needs "
                       "from all of them", size=9, color="soft")
    return s

"""Lesson 07: the encoder block in its two layouts, the sinusoidal positions, and the offset as a rotation."""

from __future__ import annotations

import math

from course.tools.learner.lessons import diagram, front
from course.tools.learner.draw import Sheet

L = "07_transformer_block"

front(L, level="core", part="Transformers", lessons=("05_self_attention", "06_multi_head_attention"),
      needs="sines, cosines and the angle-addition formulas; a 2 × 2 rotation matrix; mean and variance; "
            "PyTorch's `nn.Module`, `nn.Linear` and `nn.MultiheadAttention`",
      objectives=[
          "Write the sinusoidal position encoding and the matrix $M_k$ that moves it $k$ positions along, and "
          "explain why $PE(p) \\cdot PE(p')$ depends only on $p - p'$.",
          "Write `LayerNorm` and the position-wise feed-forward network, equal to PyTorch's.",
          "Build an encoder block in the post-norm and the pre-norm layout, equal to "
          "`nn.TransformerEncoderLayer`, with the course's masks.",
          "Measure whether adding or concatenating positions matters when the model is narrow.",
          "Show what a deep stack loses without residual connections, and why.",
      ],
      standard_minutes=55 / 60,
      runs_long="the two experiments train small encoders for about a minute in all in the standard profile; "
                "everything else takes seconds.")


# -- helpers -----------------------------------------------------------------------------------------------

def _residual(s: Sheet, x_from: float, y_from: float, x_side: float, y_to: float, x_to: float, r: float = 0.38):
    """The identity path: out to the side at y_from, up, and into the left of the sum at (x_to, y_to)."""
    s.line([x_from, x_side], [y_from, y_from], color="x", lw=2.0)
    s.line([x_side, x_side], [y_from, y_to], color="x", lw=2.0)
    s.arrow(x_side, y_to, x_to - r, y_to, color="x", lw=2.0)


@diagram(L, "l07-post-pre-norm", alt="""Two encoder blocks side by side, read from the bottom up; every arrow carries a
tensor of shape (B, T, D). Left, post-norm (the 2017 paper, norm_first=False): x enters multi-head self-attention,
the attention's output is added to x (the residual path, drawn in teal, goes round the attention), then LayerNorm
norm1; the result enters the feed-forward network (D to d_ff to D), is added to its own input, then LayerNorm norm2.
The residual path passes through both LayerNorms, so the stream is normalised after every sublayer. Right, pre-norm
(norm_first=True): x goes through LayerNorm norm1 into the attention, and the output is added to the unnormalised x;
then norm2, the feed-forward network, and another addition. The teal residual path runs from the input to the output
without passing through any LayerNorm, so a pre-norm stack ends with one final LayerNorm.""")
def post_pre_norm():
    s = Sheet(30, 15.0, title="One encoder block, two layouts: where the LayerNorm sits on the residual path")
    bw, bh, r = 5.2, 1.05, 0.38

    def column(cx, title, formula, steps):
        s.text(cx, 14.3, title, size=12, weight="bold")
        s.text(cx, 13.6, formula, size=11, color="soft")
        s.box(cx - 2.0, 0.3, 4.0, 0.9, "x   (B, T, D)", color="x", size=10)
        y_prev = 1.2
        for kind, y, label, sub in steps:
            if kind == "plus":
                s.arrow(cx, y_prev, cx, y - r, color="ink")
                s.plus(cx, y, r)
                y_prev = y + r
            else:
                s.arrow(cx, y_prev, cx, y, color="ink")
                color = {"attn": "w", "ffn": "ffn", "ln": "norm"}[kind]
                s.box(cx - bw / 2, y, bw, bh, label, color=color, sub=sub, size=10)
                y_prev = y + bh
        s.arrow(cx, y_prev, cx, 12.2, color="ink")
        s.box(cx - 2.0, 12.2, 4.0, 0.85, "out   (B, T, D)", color="out", size=10)

    # post-norm: attn, +, LN1, ffn, +, LN2
    post = [("attn", 2.4, "multi-head self-attention", "q, k, v from its input; H heads"), ("plus", 4.4, "", ""),
            ("ln", 5.3, "LayerNorm  norm1", None), ("ffn", 7.4, "feed-forward", "D → d_ff → D, ReLU"),
            ("plus", 9.5, "", ""), ("ln", 10.4, "LayerNorm  norm2", None)]
    column(7.5, "post-norm (the paper)", "$x \\leftarrow \\mathrm{LN}(x + f(x))$", post)
    cx = 7.5
    _residual(s, cx, 1.8, cx - 3.6, 4.4, cx, r)         # around the attention, into the first sum
    _residual(s, cx, 6.85, cx - 3.6, 9.5, cx, r)        # around the feed-forward
    s.text(cx - 3.75, 3.2, "residual", size=9, color="x", rotation=90)
    s.text(cx + 4.1, 6.1, "the stream is\nnormalised\nafter every\nsublayer", size=9, color="norm")

    # pre-norm: LN1, attn, +, LN2, ffn, +
    pre = [("ln", 2.0, "LayerNorm  norm1", None), ("attn", 3.7, "multi-head self-attention", "q, k, v from its input; H heads"),
           ("plus", 5.85, "", ""), ("ln", 7.0, "LayerNorm  norm2", None),
           ("ffn", 8.7, "feed-forward", "D → d_ff → D, ReLU"), ("plus", 10.85, "", "")]
    column(22.5, "pre-norm (GPT-2 and most models since)", "$x \\leftarrow x + f(\\mathrm{LN}(x))$", pre)
    cx = 22.5
    _residual(s, cx, 1.55, cx - 3.6, 5.85, cx, r)       # from x, around LN1 and the attention
    _residual(s, cx, 6.55, cx - 3.6, 10.85, cx, r)      # around LN2 and the feed-forward
    s.text(cx - 3.75, 3.6, "residual", size=9, color="x", rotation=90)
    s.text(cx + 4.0, 8.0, "the stream itself\nis never\nnormalised: a\nstack ends with\none final LN", size=9,
           color="norm")
    s.text(15.0, 0.75, "every arrow carries (B, T, D)", size=10, color="soft")
    s.line([15.0, 15.0], [1.5, 13.0], color="neutral", lw=1.0, dashed=True)
    return s


def _rdbu(v: float) -> float:
    """A value in [-1, 1] as a position on RdBu_r's [0, 1]."""
    return (v + 1) / 2


@diagram(L, "l07-sinusoids", alt="""The sinusoidal position table for 24 positions (rows, p = 0 at the top) and D = 16
features (columns), coloured from blue (-1) through white (0) to red (+1). Columns come in pairs: column 2i holds
sin(p w_i) and column 2i+1 holds cos(p w_i), with w_i = 10000^(-2i/D). The first pair changes colour from one row
to the next (about one radian per position); each pair to the right turns more slowly, and the last columns hardly
change over the 24 rows. Row 0 reads 0, 1, 0, 1, ... (sin 0 and cos 0). Beside the table, the frequencies w_i of the
eight pairs fall geometrically, from 1 radian per position down to about 1/3000.""")
def sinusoids():
    P, D, c = 24, 16, 0.42
    s = Sheet(28, 13.6, title="Sinusoidal positions: one (sin, cos) pair per frequency, the frequency falling with the pair")
    pe = [[0.0] * D for _ in range(P)]
    for p in range(P):
        for i in range(D // 2):
            w = 10000 ** (-2 * i / D)
            pe[p][2 * i], pe[p][2 * i + 1] = math.sin(p * w), math.cos(p * w)
    x0, y0 = 2.2, 1.6
    s.grid(x0, y0, P, D, cell=c, values=[[_rdbu(v) for v in row] for row in pe], cmap="RdBu_r", label="PE",
           shape="(P, D): P = 24 positions, D = 16 features")
    for p in (0, 6, 12, 18, 23):
        s.text(x0 - 0.35, y0 + (P - 1 - p + 0.5) * c, f"p={p}", size=8, color="soft", ha="right")
    for i in range(D // 2):
        s.text(x0 + (2 * i + 1) * c, y0 + P * c + 0.95, f"i={i}", size=8, color="soft")
        s.line([x0 + 2 * i * c + 0.05, x0 + (2 * i + 2) * c - 0.05], [y0 + P * c + 0.65] * 2, color="soft")
    s.text(x0 + D * c / 2, y0 + P * c + 1.5, "columns 2i (sin) and 2i+1 (cos): pair i", size=9, color="soft")
    # colour key
    kx = x0 + D * c + 1.0
    s.grid(kx, y0 + 1.0, 9, 1, cell=0.42, values=[[_rdbu(1 - 2 * k / 8)] for k in range(9)], cmap="RdBu_r")
    s.text(kx + 0.65, y0 + 1.0 + 9 * 0.42 - 0.2, "+1", size=8, color="soft", ha="left")
    s.text(kx + 0.65, y0 + 1.0 + 4.5 * 0.42, "0", size=8, color="soft", ha="left")
    s.text(kx + 0.65, y0 + 1.2, "−1", size=8, color="soft", ha="left")
    # the frequencies, on a log scale
    fx, fy, fw, fh = 14.5, 3.4, 11.5, 6.3
    s.text(fx + fw / 2, fy + fh + 1.3, "$\\omega_i = 10000^{-2i/D}$ radians per position (log scale)", size=10)
    s.line([fx, fx], [fy, fy + fh], color="ink")
    s.line([fx, fx + fw], [fy, fy], color="ink")
    lo = math.log10(10000 ** (-2 * 7 / D))
    for i in range(D // 2):
        w = 10000 ** (-2 * i / D)
        h = fh * (math.log10(w) - lo + 0.35) / (0 - lo + 0.35)
        bx = fx + 0.5 + i * 1.38
        s.box(bx, fy, 0.9, h, "", color="pos", round_=0.05)
        s.text(bx + 0.45, fy - 0.45, f"{i}", size=8, color="soft")
        s.text(bx + 0.45, fy + h + 0.3, f"{w:.2g}" if w < 0.1 else f"{w:.2f}", size=7, color="soft")
    s.text(fx + fw / 2, fy - 1.05, "pair i", size=9, color="soft")
    s.text(fx + fw / 2, 1.3, "one full turn every $2\\pi/\\omega_i$ positions: 6.3 for i = 0, about 20 000 for i = 7",
           size=9, color="soft")
    s.text(fx + fw / 2, 0.6, "fast pairs tell neighbours apart; slow pairs tell the start of a text from its end",
           size=9, color="soft")
    return s


@diagram(L, "l07-offset-rotation", alt="""Left: one pair i of the sinusoidal encoding drawn as a point on the unit
circle, with cos(p w_i) across and sin(p w_i) up, for positions p = 0 to 5 of the fastest pair (w_0 = 1 radian per
position). The vector of position p = 1 and the vector of position p + k = 4 are drawn as clock hands; going k = 3
positions along turns the hand by the angle k w_i, whatever p is. The rotation is the 2 by 2 matrix R(k w_i) with rows
(cos k w_i, sin k w_i) and (-sin k w_i, cos k w_i) acting on the column (sin, cos). Right: M_k for D = 8 is
block-diagonal, one such 2 by 2 rotation per pair on the diagonal and zeros elsewhere, so PE(p + k) = M_k PE(p) for
every p, and M_k is orthogonal.""")
def offset_rotation():
    s = Sheet(30, 11.2, title="Moving $k$ positions along turns each (sin, cos) pair by its own angle $k\\,\\omega_i$: "
                           "$PE(p+k) = M_k\\,PE(p)$")
    cx, cy, R = 5.6, 5.5, 3.8
    n = 120
    s.line([cx + R * math.cos(2 * math.pi * t / n) for t in range(n + 1)],
           [cy + R * math.sin(2 * math.pi * t / n) for t in range(n + 1)], color="neutral", lw=1.2)
    s.line([cx - R - 0.5, cx + R + 0.5], [cy, cy], color="soft", lw=0.6)
    s.line([cx, cx], [cy - R - 0.5, cy + R + 0.5], color="soft", lw=0.6)
    s.text(cx + R + 0.5, cy + 0.45, "cos", size=9, color="soft")
    s.text(cx + 0.55, cy + R + 0.5, "sin", size=9, color="soft")
    for p in range(6):
        a = p * 1.0
        px, py = cx + R * math.cos(a), cy + R * math.sin(a)
        s.circle(px, py, 0.16, color="pos")
        s.text(cx + (R + 0.6) * math.cos(a), cy + (R + 0.6) * math.sin(a), f"p={p}", size=8, color="soft")
    p, k = 1, 3
    for q, col, lab in ((p, "x", "PE(p)"), (p + k, "out", "PE(p+k)")):
        a = q * 1.0
        s.arrow(cx, cy, cx + (R - 0.2) * math.cos(a), cy + (R - 0.2) * math.sin(a), color=col, lw=2.2)
        s.text(cx + (R * 0.55) * math.cos(a) + (0.55 if q == p else -0.2), cy + (R * 0.55) * math.sin(a) + 0.45,
               lab, size=9, color=col, weight="bold")
    arc = [p + (k) * t / 40 for t in range(41)]
    s.line([cx + 1.3 * math.cos(a) for a in arc], [cy + 1.3 * math.sin(a) for a in arc], color="ink", lw=1.3)
    s.text(cx - 1.55, cy + 1.35, "$k\\,\\omega_i$", size=11)
    s.text(cx, 0.5, "pair i = 0 ($\\omega_0$ = 1), p = 1, k = 3", size=9, color="soft")
    # the 2x2 rotation
    s.text(16.3, 9.6, "$[\\sin(\\theta{+}\\varphi),\\ \\cos(\\theta{+}\\varphi)]$", size=11)
    s.text(16.3, 8.6, "$= R(\\varphi)\\,[\\sin\\theta,\\ \\cos\\theta]$", size=11)
    s.text(16.3, 7.3, "$R(\\varphi) = $", size=11)
    vals = [["cos φ", "sin φ"], ["−sin φ", "cos φ"]]
    s.grid(17.3, 5.7, 2, 2, cell=1.15, color="x", marks=vals, size=11)
    s.text(16.3, 4.9, "$\\theta = p\\,\\omega_i$,  $\\varphi = k\\,\\omega_i$: no $p$ in $R$", size=10, color="soft")
    s.text(16.3, 4.2, "(pairs written as columns)", size=9, color="soft")
    # M_k block diagonal, D = 8
    D, c = 8, 0.62
    vals = [[float("nan")] * D for _ in range(D)]
    marks = [[""] * D for _ in range(D)]
    for i in range(D // 2):
        phi = k * 10000 ** (-2 * i / D)
        block = [[math.cos(phi), math.sin(phi)], [-math.sin(phi), math.cos(phi)]]
        for a in range(2):
            for b in range(2):
                vals[2 * i + a][2 * i + b] = _rdbu(0.5 * block[a][b])
                marks[2 * i + a][2 * i + b] = f"{block[a][b]:.2f}".replace("-0.00", "0.00")
    gx, gy = 23.6, 2.3
    s.grid(gx, gy, D, D, cell=c, values=vals, cmap="RdBu_r", marks=marks, size=8, label="$M_k$, k = 3, D = 8",
           shape="(D, D): one $R(k\\,\\omega_i)$ per pair, 0 elsewhere")
    for i in range(D // 2):
        s.text(gx - 0.3, gy + (D - 2 * i - 1) * c, f"i={i}", size=8, color="soft", ha="right")
    s.text(gx + D * c / 2, 0.9, "orthogonal: $M_k M_k^{\\top} = I$, $M_{-k} = M_k^{\\top}$", size=9, color="soft")
    return s

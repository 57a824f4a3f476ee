"""Lesson 03: the five score functions with their shapes and costs, why 1/sqrt(d_k), the masked softmax, and
Luong's order of a decoder step."""

from __future__ import annotations

import math

from matplotlib.patches import Rectangle

from course.tools.learner.draw import COLORS, Sheet
from course.tools.learner.lessons import diagram, front

L = "03_attention_scores"

front(L, level="core", part="Attention", lessons=("00_softmax_lookup", "01_attention_pooling", "02_rnn_attention"),
      needs="dot products, matrix products and broadcasting in PyTorch; the mean and variance of a sum of "
            "independent variables; `nn.Module` and `nn.Linear`",
      objectives=[
          "Write the dot, scaled dot, cosine, bilinear and MLP scores for any batch of queries and keys, "
          "`(..., T_q, d) x (..., T_k, d) -> (..., T_q, T_k)`.",
          "Write a masked softmax that gives masked keys exactly zero weight whatever the scores, and a query "
          "that may see nothing all-zero weights.",
          "Explain, with a measurement, why the dot product is divided by $\\sqrt{d_k}$: the variance of "
          "$q \\cdot k$, the saturated softmax, the vanishing gradient.",
          "Compare the five scores in one translator for accuracy, sharpness and cost, and say why the scaled "
          "dot product won.",
      ],
      standard_minutes=0.57,
      runs_long="the comparison trains five small translators, about 30 s in all in the standard profile; "
                "everything else takes a few seconds.")


# -- small helpers (draw.py has no bar chart or number line) ---------------------------------------------------

def _softmax(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    z = sum(e)
    return [v / z for v in e]


def _entropy(p):
    return -sum(v * math.log(v) for v in p if v > 0)


def _jacobian_norm(p):
    """Frobenius norm of diag(p) - p p^T (course.scores.softmax_jacobian_norm, in closed form)."""
    s2, s3 = sum(v * v for v in p), sum(v ** 3 for v in p)
    return math.sqrt(max(0.0, s2 - 2 * s3 + s2 * s2))


def _bars(s: Sheet, x, y, values, *, width=0.5, gap=0.14, height=2.6, vmax=1.0, color="w", marks=None, size=8):
    """Bars from (x, y) up, ``vmax`` drawn ``height`` tall, one value written above each bar."""
    for i, v in enumerate(values):
        bx = x + i * (width + gap)
        h = v / vmax * height
        s.ax.add_patch(Rectangle((bx, y), width, h, facecolor=COLORS[color], edgecolor="none"))
        if marks is not None:
            s.text(bx + width / 2, y + h + 0.22, marks[i], size=size, color="soft")
    s.line([x - 0.1, x + len(values) * (width + gap)], [y, y], color="ink", lw=0.8)


# -- 1. the five scores ---------------------------------------------------------------------------------------

@diagram(L, "l03-score-functions", alt="""The five score functions side by side, each turning queries q of shape (T_q,
d) and keys k of shape (T_k, d) into scores of shape (T_q, T_k). Dot: q times k transposed, one matrix product, no
parameters, T_q times T_k times d multiply-adds. Scaled dot: the same product divided by the square root of d_k, no
parameters, the same cost. Cosine: each row of q and of k divided by its length (at least eps) first, then the
product; no parameters, and the scores lie between -1 and 1. Bilinear: q times a learned matrix W of shape (d_q, d_k)
times k transposed; d_q times d_k parameters; the query and the key may have different sizes. MLP: W_q q gets a key
axis, (T_q, 1, d_hidden), W_k k gets a query axis, (1, T_k, d_hidden); their sum passes through tanh as a (T_q, T_k,
d_hidden) tensor, one hidden vector per pair, and v reduces it to one score per pair; d_hidden times (d_q + d_k + 2)
parameters, and a tensor d_hidden times larger than the scores to build, with a tanh on every entry.""")
def score_functions():
    s = Sheet(33, 13.0, title="Five score functions, one output shape (T_q, T_k): only the MLP score builds a "
                              "(T_q, T_k, d_hidden) tensor on the way")
    c = 0.36
    cols = [
        ("dot", "$q\\,k^{\\top}$", "none", "$T_q T_k d$ multiply-adds:\none matrix product"),
        ("scaled dot", "$q\\,k^{\\top} / \\sqrt{d_k}$", "none", "the same, plus one division\nper score"),
        ("cosine", "$\\hat q\\, \\hat k^{\\top}$,  $\\hat q = q / \\max(\\Vert q\\Vert, \\varepsilon)$", "none",
         "the same, plus $T_q + T_k$ norms;\nscores only in $[-1, 1]$"),
        ("bilinear", "$q\\, W k^{\\top}$", "$W$: $d_q \\times d_k$",
         "$T_q d_q d_k + T_q T_k d_k$;\n$d_q \\neq d_k$ allowed"),
        ("MLP (additive)", "$v^{\\top} \\tanh(W_q q + W_k k + b)$", "$d_{hidden}(d_q + d_k + 2)$",
         "$T_q T_k d_{hidden}$ entries to store,\na tanh on each"),
    ]
    width = 6.5
    for n, (name, formula, params, cost) in enumerate(cols):
        x0 = 0.3 + n * width
        mid = x0 + width / 2 - 0.15
        s.box(x0 + 0.1, 11.0, width - 0.5, 1.1, name, color="w", size=12, weight="bold")
        s.text(mid, 10.3, formula, size=10 if n == 2 else 11)
        s.grid(x0 + 0.5, 7.5, 3, 3, cell=c, color="q", label="q", shape="($T_q$, $d_q$)" if n >= 3 else "($T_q$, d)")
        s.grid(x0 + 2.8, 7.5, 4, 3 if n < 3 else 4, cell=c, color="k", label="k",
               shape="($T_k$, $d_k$)" if n >= 3 else "($T_k$, d)")
        if n == 2:
            s.text(x0 + 4.5, 8.3, "each row\nto length 1", size=8, color="soft", ha="left")
        if n == 3:
            s.grid(x0 + 4.8, 7.7, 3, 4, cell=0.3, color="neutral", label="W", shape="($d_q$, $d_k$)")
        if n < 4:
            s.arrow(mid, 6.8, mid, 5.0, color="w")
            s.text(mid + 0.3, 5.9, {0: "one matmul", 1: "matmul, then ÷ √d_k", 2: "normalise, matmul",
                                   3: "(q W) @ kᵀ"}[n], size=8, color="soft", ha="left")
            s.grid(x0 + 1.7, 3.3, 3, 4, cell=c, color="w", shape="scores ($T_q$, $T_k$)")
        else:
            s.text(x0 + 1.55, 6.6, "$W_q q$: ($T_q$, 1, $d_{hidden}$)", size=8, color="q")
            s.text(x0 + 4.35, 6.15, "$W_k k$: (1, $T_k$, $d_{hidden}$)", size=8, color="k")
            s.arrow(x0 + 1.3, 6.35, x0 + 2.2, 5.55, color="q")
            s.arrow(x0 + 3.6, 5.92, x0 + 2.6, 5.55, color="k")
            for d in range(3):
                s.grid(x0 + 1.55 + 0.22 * d, 4.55 + 0.14 * d, 3, 4, cell=0.22, color="ffn")
            s.text(x0 + 3.3, 4.95, "tanh( + ):\n($T_q$, $T_k$, $d_{hidden}$)", size=8, color="ffn", ha="left")
            s.arrow(mid, 4.45, mid, 4.0, color="w")
            s.text(mid + 0.25, 4.2, "· v", size=9, color="soft", ha="left")
            s.grid(x0 + 1.7, 2.85, 3, 4, cell=c, color="w", shape="scores ($T_q$, $T_k$)")
        s.text(mid, 2.0, f"parameters: {params}", size=9)
        s.text(mid, 1.05, cost, size=8.5, color="soft")
        if n:
            s.line([x0 - 0.05, x0 - 0.05], [0.5, 12.2], color="neutral", lw=1.0)
    s.text(16.5, 0.2, "d: the size of q and k (d_k for keys, d_q for queries when they differ);  d_hidden: the "
                      "hidden width of the MLP score;  every score also takes leading batch or head axes (...)",
           size=8.5, color="soft")
    return s


# -- 2. why 1/sqrt(d_k) ---------------------------------------------------------------------------------------

# Eight scores of one query, standardised (mean 0, sd 1), fixed so that the picture is the same on every machine.
_Z = [1.31, -0.42, 0.58, -1.57, 0.12, 2.05, -0.86, -1.21]


@diagram(L, "l03-why-scale", alt="""Left: the scores q dot k of one query against eight keys, for random q and k with
unit-variance entries, drawn on one number line for d_k = 4, 64 and 256. The same pattern of eight scores stretches
with d_k: its standard deviation is the square root of d_k, 2, 8 and 16, because the variance of q dot k is d_k.
Right: the softmax of the same eight scores at two scales, with the same ranking of the keys. Divided by the square
root of d_k (standard deviation 1) the weights are spread out, the entropy is well above zero and the softmax's
Jacobian, the gate every gradient to q and k goes through, is open. Unscaled at d_k = 256 (standard deviation 16)
one key takes almost all the weight, the entropy is near zero and the Jacobian is almost closed: the model gets
almost no signal to change its choice.""")
def why_scale():
    s = Sheet(31, 11.2, title="Unscaled, q·k spreads like √d_k and the softmax saturates; divided by √d_k it keeps "
                              "the same ranking and stays soft")
    # left: number lines
    x0, x1, span = 1.0, 13.5, 80.0                 # the line shows scores from -span/2 to +span/2
    scale = (x1 - x0) / span
    mid = (x0 + x1) / 2
    s.text(mid, 10.0, "scores q·k of one query against 8 keys", size=11, weight="bold")
    for row, d_k in enumerate((4, 64, 256)):
        y = 8.2 - row * 2.3
        sd = math.sqrt(d_k)
        s.line([x0, x1], [y, y], color="soft", lw=0.8)
        s.ax.add_patch(Rectangle((mid - sd * scale, y - 0.32), 2 * sd * scale, 0.64, facecolor=COLORS["w"],
                                 alpha=0.18, edgecolor="none"))
        for z in _Z:
            s.circle(mid + z * sd * scale, y, 0.13, color="w")
        s.text(x0 - 0.15, y + 0.55, f"$d_k = {d_k}$", size=10, ha="left")
        s.text(x1 + 0.1, y + 0.55, f"sd $= \\sqrt{{{d_k}}} = {sd:g}$", size=9, color="soft", ha="right")
    for tick in (-40, -20, 0, 20, 40):
        s.line([mid + tick * scale] * 2, [1.45, 1.65], color="soft", lw=0.8)
        s.text(mid + tick * scale, 1.15, f"{tick}", size=8, color="soft")
    s.line([x0, x1], [1.55, 1.55], color="soft", lw=0.8)
    s.text(mid, 0.5, "Var(q·k) = $d_k$ for entries of variance 1: the shaded band is ± one sd", size=9, color="soft")
    s.line([15.0, 15.0], [0.6, 10.3], color="neutral", lw=1.0)
    # right: two softmaxes of the same ranking
    for n, (scale_name, factor, label) in enumerate((("scaled, any $d_k$: softmax(q·k / √$d_k$)", 1.0, "sd 1"),
                                                     ("unscaled at $d_k$ = 256: softmax(q·k)", 16.0, "sd 16"))):
        bx = 16.2 + n * 7.6
        p = _softmax([z * factor for z in _Z])
        s.text(bx + 2.6, 10.0, scale_name, size=10, weight="bold", color="w")
        _bars(s, bx, 3.6, p, height=4.6, marks=[f"{v:.2f}" for v in p], size=7.5)
        for i in range(len(_Z)):
            s.text(bx + 0.25 + i * 0.64, 3.25, f"k{i}", size=7, color="soft")
        s.text(bx + 2.6, 2.4, f"entropy {_entropy(p):.2f} nats (uniform: ln 8 = {math.log(8):.2f})", size=9)
        s.text(bx + 2.6, 1.6, f"softmax Jacobian norm ‖J‖ = {_jacobian_norm(p):.3f}", size=9,
               color="ok" if n == 0 else "bad")
        s.text(bx + 2.6, 0.8, "gradients reach every key" if n == 0 else "almost no gradient gets through",
               size=9, color="soft")
    s.text(23.6, 9.2, "same scores, same order of keys (k5 first), two temperatures", size=9, color="soft")
    return s


# -- 3. the masked softmax ------------------------------------------------------------------------------------

@diagram(L, "l03-masked-softmax", alt="""The masked softmax on 3 queries and 4 keys. The scores (T_q by T_k) and a
boolean mask of the same shape, True where attention is allowed: query 0 may see keys 0 to 2 (key 3 is padding),
query 1 keys 0 and 1, query 2 no key at all. Step 1 replaces every masked score by minus infinity. Step 2, the
softmax over each row, gives rows 0 and 1 weights that sum to 1 with exact zeros on the masked keys, but row 2 is
softmax of four minus infinities, 0 divided by 0, NaN. Step 3 sets the weights of masked positions to zero after
the softmax, so row 2 becomes all zeros: the query reads nothing. A note says that a finite fill such as -1e4 is
beaten by allowed scores below it, and that filling with the dtype's minimum makes a fully masked row uniform
instead of NaN, which step 3 also turns into zeros.""")
def masked_softmax_picture():
    s = Sheet(31, 7.0, title="Masked softmax: −∞ before the softmax, zeros after it, so a query that sees nothing "
                             "reads nothing")
    scores = [[1.0, 2.0, 0.5, 3.0], [0.3, -1.0, 2.0, 1.5], [2.0, 1.0, 0.0, -1.0]]
    mask = [[True, True, True, False], [True, True, False, False], [False, False, False, False]]
    c, y = 0.7, 3.1
    mid_y = y + 1.5 * c
    norm = [[(v + 1.5) / 5 for v in row] for row in scores]
    s.grid(0.9, y, 3, 4, cell=c, values=norm, cmap="Purples", label="scores", shape="($T_q$, $T_k$)",
           marks=[[f"{v:g}" for v in row] for row in scores], size=10)
    for t in range(3):
        s.text(0.5, y + (2 - t + 0.5) * c, f"q{t}", size=8, color="soft")
    s.text(4.25, mid_y, "with", size=10, color="soft")
    s.grid(4.9, y, 3, 4, cell=c, color="mask", values=mask, label="mask (True = allowed)", shape="($T_q$, $T_k$) bool")

    def step(x, first, second):
        s.arrow(x, mid_y, x + 2.2, mid_y, color="w")
        s.text(x + 1.1, mid_y + 0.75, first, size=8, color="soft")
        s.text(x + 1.1, mid_y + 0.4, second, size=8, color="soft")

    step(8.0, "1. masked_fill", "(~mask, −∞)")
    filled = [[v if m else float("nan") for v, m in zip(r1, r2)] for r1, r2 in zip(norm, mask)]
    s.grid(10.5, y, 3, 4, cell=c, values=filled, cmap="Purples", label="masked scores", shape="−∞ where masked",
           marks=[[f"{v:g}" if m else "−∞" for v, m in zip(r1, r2)] for r1, r2 in zip(scores, mask)], size=10)
    step(13.6, "2. softmax", "over the keys")
    plain = []
    for row, m in zip(scores, mask):
        allowed = [v for v, ok in zip(row, m) if ok]
        if not allowed:
            plain.append([float("nan")] * 4)
            continue
        p = iter(_softmax(allowed))
        plain.append([next(p) if ok else 0.0 for ok in m])
    marks = [["" if v != v else f"{v:.2f}" for v in row] for row in plain]
    s.grid(16.1, y, 3, 4, cell=c, values=plain, cmap="Purples", label="softmax", shape="row q2: 0/0 = NaN",
           marks=marks, size=10)
    for j in range(4):
        s.text(16.1 + (j + 0.5) * c, y + 0.5 * c, "NaN", size=8, color="bad", weight="bold")
    step(19.2, "3. zero the", "masked weights")
    final = [[0.0 if v != v else v for v in row] for row in plain]
    s.grid(21.7, y, 3, 4, cell=c, values=final, cmap="Purples", label="weights", shape="rows sum to 1, or to 0",
           marks=[[f"{v:.2f}" for v in row] for row in final], size=10)
    s.text(24.75, y + 2.5 * c, "sum 1", size=9, color="ok", ha="left")
    s.text(24.75, y + 1.5 * c, "sum 1", size=9, color="ok", ha="left")
    s.text(24.75, y + 0.5 * c, "sum 0: q2 reads nothing", size=9, color="ok", ha="left")
    s.box(0.9, 0.25, 29.2, 1.7, "", color="neutral", fill="#F5F5F5")
    s.text(15.5, 1.45, "Why not a finite fill?  −1e4 works only while every allowed score is above it: allowed "
                       "scores near −1e5 make the masked keys win.", size=9)
    s.text(15.5, 0.75, "Filling with torch.finfo(dtype).min instead of −∞ gives row q2 a uniform 1/4 (not NaN), "
                       "just as wrong: step 3 still turns it into zeros.", size=9)
    return s


# -- 4. Luong's order of a decoder step ------------------------------------------------------------------------

@diagram(L, "l03-luong-step", alt="""One decoder step in two orders. Top, lesson 02 (Bahdanau): the previous state
s_{i-1}, of shape (B, d_hidden), is the query; attention over the encoder states h, shape (B, S, 2 d_hidden), as
keys and values gives the context c_i, shape (B, 2 d_hidden); the GRU then reads e(y_{i-1}), the embedding of the previous
target word, together with c_i and gives the new state s_i; the output layer reads s_i, c_i and e(y_{i-1}). Bottom,
this lesson (Luong): the GRU moves first, reading e(y_{i-1}) alone, and gives s_i; the current state s_i is the query of the
attention, whose score is the one
being compared; the output layer reads s_i and c_i. In both, padding positions of h are masked.""")
def luong_step():
    s = Sheet(31, 10.2, title="Where the query comes from: Bahdanau's step asks with $s_{i-1}$, Luong's step asks "
                             "with the new state $s_i$")

    def row(y, name, order):
        s.text(0.3, y + (2.55 if y > 4 else 1.5), name, size=10, weight="bold", ha="left")
        x = 0.3
        for kind, text, sub, w in order:
            if kind == "arrow":
                s.arrow(x, y + 0.5, x + w, y + 0.5, color=text)
            else:
                s.box(x, y, w, 1.0, text, color=kind, size=10, sub=sub)
            x += w + (0.1 if kind != "arrow" else 0.1)
        return x

    bahdanau = [("x", "$s_{i-1}$", "(B, $d_{hidden}$)", 2.4), ("arrow", "q", None, 1.0),
                ("w", "attention: query $s_{i-1}$", "score, masked softmax, mix", 5.0), ("arrow", "v", None, 1.0),
                ("v", "$c_i$", "(B, 2 $d_{hidden}$)", 2.4), ("arrow", "ink", None, 1.0),
                ("neutral", "GRU reads $[e(y_{i-1}) \\Vert c_i]$", "", 5.0), ("arrow", "ink", None, 1.0),
                ("x", "$s_i$", "(B, $d_{hidden}$)", 2.4), ("arrow", "ink", None, 1.0),
                ("out", "out: $[s_i \\Vert c_i \\Vert e(y_{i-1})]$", "logits (B, V)", 5.4)]
    luong = [("x", "$s_{i-1}$", "(B, $d_{hidden}$)", 2.4), ("arrow", "ink", None, 1.0),
             ("neutral", "GRU reads $e(y_{i-1})$ only", "", 5.0), ("arrow", "ink", None, 1.0),
             ("x", "$s_i$", "(B, $d_{hidden}$)", 2.4), ("arrow", "q", None, 1.0),
             ("w", "attention: query $s_i$", "your score, masked softmax, mix", 5.0), ("arrow", "v", None, 1.0),
             ("v", "$c_i$", "(B, 2 $d_{hidden}$)", 2.4), ("arrow", "ink", None, 1.0),
             ("out", "out: $[s_i \\Vert c_i]$", "logits (B, V)", 5.4)]
    row(6.6, "lesson 02 (Bahdanau): attend, then step", bahdanau)
    row(1.6, "this lesson (Luong): step, then attend", luong)
    # the encoder states feed both attentions; the GRU of the top row also reads s_{i-1}
    s.box(12.4, 4.1, 6.0, 1.1, "encoder states h: keys and values", color="k", size=10,
          sub="(B, S, 2 $d_{hidden}$), padding masked")
    s.arrow(12.3, 5.0, 7.0, 6.55, color="k")
    s.arrow(15.4, 4.05, 15.4, 2.65, color="k")
    s.arrow(1.5, 7.65, 15.8, 7.65, color="x", rad=-0.12, dashed=True)
    s.text(9.0, 8.1, "the GRU also reads $s_{i-1}$", size=8.5, color="soft")
    s.text(15.5, 0.6, "$e(y_{i-1})$: the embedding of the previous target word; the attention module is the same "
                      "plug-in in both, (query (B, Dq), keys (B, S, Dk), values, mask) -> (context, weights)",
           size=8.5, color="soft")
    return s

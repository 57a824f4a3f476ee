"""Lesson 13: RoPE as a rotation of each query and key pair, the half-split pairing inside attention, ALiBi's biases."""

from __future__ import annotations

import math

from course.tools.learner.lessons import diagram, front
from course.tools.learner.draw import Sheet

L = "13_rotary_positions"

front(L, level="optional", part="Beyond the core", lessons=("07_transformer_block", "09_language_model"),
      needs="lesson 07's sinusoidal positions and its offset as a rotation; lesson 06's heads; 2 × 2 rotation "
            "matrices and the angle-addition formulas; PyTorch broadcasting",
      objectives=[
          "Write rotary position embeddings (`rope_frequencies`, `apply_rope`) with Llama's half-split pairs, "
          "and show that a rotated score depends only on the offset $i - j$.",
          "Build `RotarySelfAttention`, equal to `transformers`' `LlamaAttention` holding the same weights, at "
          "any positions.",
          "Write ALiBi's biases, equal to BLOOM's, with the queries aligned to the last keys.",
          "Measure how five position schemes (learned, sinusoidal, rotary, ALiBi, none) read texts up to four "
          "times their training length, and what two RoPE fixes change.",
      ],
      standard_minutes=3.3,
      runs_long="the standard profile trains five small GPTs, one per position scheme (800 steps each): about "
                "3 to 4 minutes of CPU time, up to 10 minutes on a busy laptop. Everything before section 7 runs "
                "in seconds.")


def _circle(s: Sheet, cx: float, cy: float, r: float):
    n = 120
    s.line([cx + r * math.cos(2 * math.pi * t / n) for t in range(n + 1)],
           [cy + r * math.sin(2 * math.pi * t / n) for t in range(n + 1)], color="neutral", lw=1.2)
    s.line([cx - r - 0.4, cx + r + 0.4], [cy, cy], color="soft", lw=0.6)
    s.line([cx, cx], [cy - r - 0.4, cy + r + 0.4], color="soft", lw=0.6)


def _arc(s: Sheet, cx: float, cy: float, r: float, a0: float, a1: float, color: str = "ink", lw: float = 1.3):
    pts = [a0 + (a1 - a0) * t / 40 for t in range(41)]
    s.line([cx + r * math.cos(a) for a in pts], [cy + r * math.sin(a) for a in pts], color=color, lw=lw)


def _hand(s: Sheet, cx: float, cy: float, length: float, angle: float, color: str, *, faint: bool = False):
    s.arrow(cx, cy, cx + length * math.cos(angle), cy + length * math.sin(angle), color=color,
            lw=1.2 if faint else 2.4, dashed=faint)


@diagram(L, "l13-rope-rotation", alt="""One pair of features of a query and of a key, drawn as arrows in their plane,
in two panels. Left: the query at position i = 5 and the key at position j = 2. Dashed, the query q (blue) and the key
k (orange) before rotation; solid, the query turned by the angle i theta = 5 theta and the key turned by j theta =
2 theta, with theta = 0.25 radians per position for this pair. The angle between the two solid arrows is the angle
between q and k plus (i - j) theta = 3 theta. Right: both tokens moved four places along, i = 9 and j = 6: each arrow
turns further, 9 theta and 6 theta, but the angle between them is the same, so their dot product, the score, is the
same. Beneath, the identity: R(i theta) q dotted with R(j theta) k equals q dotted with R((j - i) theta) k, which
depends on the offset i - j only. Every pair of a head's d_k features turns this way, each at its own frequency.""")
def rope_rotation():
    s = Sheet(28.5, 12.6, title="RoPE turns the query by $i\\,\\theta$ and the key by $j\\,\\theta$: the angle between "
                              "them, and the score, depend on $i - j$ only")
    theta, aq, ak, lq, lk, R = 0.25, 0.45, 0.05, 3.3, 2.5, 3.7
    for cx, (i, j), head in ((6.0, (5, 2), "query at $i = 5$, key at $j = 2$"),
                             (17.0, (9, 6), "both moved 4 places: $i = 9$, $j = 6$")):
        cy = 5.3
        s.text(cx, 11.4, head, size=11, weight="bold")
        _circle(s, cx, cy, R)
        _hand(s, cx, cy, lq, aq, "q", faint=True)
        _hand(s, cx, cy, lk, ak, "k", faint=True)
        tq, tk = aq + i * theta, ak + j * theta
        _hand(s, cx, cy, lq, tq, "q")
        _hand(s, cx, cy, lk, tk, "k")
        _arc(s, cx, cy, R + 0.25, aq, tq, color="q", lw=1.0)
        _arc(s, cx, cy, lk + 0.3, ak, tk, color="k", lw=1.0)
        mq, mk = (aq + tq) / 2, (ak + tk) / 2
        s.text(cx + (R + 0.65) * math.cos(mq), cy + (R + 0.65) * math.sin(mq), f"${i}\\theta$", size=10, color="q")
        s.text(cx + (lk + 0.75) * math.cos(mk), cy + (lk + 0.75) * math.sin(mk), f"${j}\\theta$", size=10, color="k")
        _arc(s, cx, cy, 1.1, tk, tq, color="w", lw=2.2)
        s.text(cx + 1.8 * math.cos((tq + tk) / 2), cy + 1.8 * math.sin((tq + tk) / 2), "same\nangle", size=8,
               color="w", weight="bold")
        for length, angle, color, label, side in ((lq, tq, "q", f"$R({i}\\theta)\\,q$", 1),
                                                  (lk, tk, "k", f"$R({j}\\theta)\\,k$", -1)):
            at, off = (0.62 if side > 0 else 0.3) * length, 0.75 * side               # beside the arrow's middle, on its outer side
            s.text(cx + at * math.cos(angle) - off * math.sin(angle), cy + at * math.sin(angle) + off * math.cos(angle),
                   label, size=10, color=color, weight="bold")
        for length, angle, color in ((lq, aq, "q"), (lk, ak, "k")):
            s.text(cx + (length + 0.45) * math.cos(angle), cy + (length + 0.45) * math.sin(angle), color, size=11,
                   color=color, weight="bold")
    s.text(24.6, 9.0, "one pair of a head's $d_k$ features;", size=9, color="soft")
    s.text(24.6, 8.4, "this pair: $\\theta$ = 0.25 rad per position", size=9, color="soft")
    s.text(24.6, 7.8, "dashed: before the rotation", size=9, color="soft")
    s.box(22.4, 4.4, 4.4, 2.4, "", color="w")
    s.text(24.6, 6.25, "score", size=10, weight="bold", color="w")
    s.text(24.6, 5.55, "$R(i\\theta)q \\cdot R(j\\theta)k$", size=10)
    s.text(24.6, 4.9, "$= q \\cdot R((j-i)\\theta)\\,k$", size=10)
    s.text(24.6, 3.7, "every pair turns at its", size=9, color="soft")
    s.text(24.6, 3.15, "own frequency $\\theta_c$: the", size=9, color="soft")
    s.text(24.6, 2.6, "score sees only $i - j$", size=9, color="soft")
    s.text(11.5, 0.6, "rotations compose: $R(\\alpha)^{\\top}R(\\beta) = R(\\beta - \\alpha)$, so moving both tokens "
                      "by the same amount changes nothing", size=10, color="soft")
    return s


@diagram(L, "l13-half-split", alt="""Top: one head's query (or key) vector of d_k = 8 features, indices 0 to 7,
each cell shaded by the pair it belongs to. In the half-split layout of Llama and GPT-NeoX (this lesson's contract),
feature c pairs with feature c + 4: pairs (0, 4), (1, 5), (2, 6), (3, 7), and pair c turns by p theta_c at position
p, with theta_c = 10000^(-2c/d_k) = 1, 0.1, 0.01 and 0.001 radians per position. Beside it, the interleaved layout
of RoFormer and GPT-J pairs neighbours (0, 1), (2, 3), (4, 5), (6, 7): the same turns with the features listed in
another order. Bottom: where the rotation sits in RotarySelfAttention. x (B, T, D) goes through w_q, w_k and w_v to
(B, T, D) each, is split into heads (B, H, T, Dh); apply_rope turns q and k at their positions, v is not rotated;
softmax(q k^T / sqrt(d_k)) v with the causal mask gives (B, H, T, Dh); the heads are merged to (B, T, D) and w_o
gives the output (B, T, D).""")
def half_split():
    s = Sheet(31, 13.4, title="Which features turn together, and where the rotation sits in attention")
    c = 0.9
    shade = [0.3, 0.5, 0.7, 0.9]                                # one shade per pair
    thetas = ["1", "0.1", "0.01", "0.001"]
    for x0, title, pair_of, note in (
            (1.5, "half-split (Llama, GPT-NeoX): this lesson", lambda f: f % 4,
             "pair $c$ = features $c$ and $c + d_k/2$, turned by $p\\,\\theta_c$"),
            (13.2, "interleaved (RoFormer, GPT-J)", lambda f: f // 2,
             "pair $c$ = neighbours $2c$ and $2c + 1$: the same turns, features reordered")):
        y0 = 9.4
        s.text(x0 + 4 * c, 12.3, title, size=11, weight="bold")
        s.grid(x0, y0, 1, 8, cell=c, values=[[shade[pair_of(f)] for f in range(8)]], cmap="Blues",
               marks=[[str(f) for f in range(8)]], size=11)
        for f in range(8):
            s.text(x0 + (f + 0.5) * c, y0 + c + 0.35, f"c={pair_of(f)}", size=8, color="q")
        s.text(x0 + 4 * c, y0 - 0.4, "one head's q (or k): $d_k$ = 8 features, shaded by pair", size=9, color="soft")
        s.text(x0 + 4 * c, y0 - 1.1, note, size=9, color="soft")
    s.text(27.0, 11.2, "$\\theta_c = 10000^{-2c/d_k}$", size=11)
    s.text(27.0, 10.4, "$d_k$ = 8: $\\theta$ = " + ", ".join(thetas), size=9, color="soft")
    s.text(27.0, 9.7, "radians per position", size=9, color="soft")
    # the attention pipeline
    y = 2.6
    s.box(0.5, y, 2.6, 1.3, "x", sub="(B, T, D)", color="x", size=11)
    s.box(4.3, y + 2.2, 3.0, 1.1, "q = w_q(x)", color="q", size=10)
    s.box(4.3, y + 0.6, 3.0, 1.1, "k = w_k(x)", color="k", size=10)
    s.box(4.3, y - 1.0, 3.0, 1.1, "v = w_v(x)", color="v", size=10)
    for yy, col in ((y + 2.75, "q"), (y + 1.15, "k"), (y - 0.45, "v")):
        s.arrow(3.2, y + 0.65, 4.2, yy, color=col)
    s.text(5.8, y + 3.7, "each (B, T, D)", size=9, color="soft")
    s.box(8.3, y - 1.0, 3.0, 4.3, "split heads", sub="(B, H, T, Dh)", color="neutral", size=10)
    for yy, col in ((y + 2.75, "q"), (y + 1.15, "k"), (y - 0.45, "v")):
        s.arrow(7.4, yy, 8.2, yy, color=col)
    s.box(12.3, y + 2.2, 4.4, 1.1, "apply_rope(q, positions)", color="q", size=9)
    s.box(12.3, y + 0.6, 4.4, 1.1, "apply_rope(k, positions)", color="k", size=9)
    s.box(12.3, y - 1.0, 4.4, 1.1, "v: not rotated", color="v", size=9, dashed=True)
    for yy, col in ((y + 2.75, "q"), (y + 1.15, "k"), (y - 0.45, "v")):
        s.arrow(11.4, yy, 12.2, yy, color=col)
    s.box(17.6, y - 0.2, 4.6, 2.7, "softmax($q k^{\\top}/\\sqrt{d_k}$) v", sub="causal: query i sees keys 0..i",
          color="w", size=10)
    for yy, col in ((y + 2.75, "q"), (y + 1.15, "k"), (y - 0.45, "v")):
        s.arrow(16.8, yy, 17.5, min(max(yy, y), y + 2.3), color=col)
    s.text(19.9, y - 0.65, "(B, H, T, Dh)", size=9, color="soft")
    s.arrow(22.3, y + 1.15, 23.1, y + 1.15, color="out")
    s.box(23.2, y + 0.5, 3.0, 1.3, "merge heads", sub="(B, T, D)", color="neutral", size=10)
    s.arrow(26.3, y + 1.15, 27.0, y + 1.15, color="out")
    s.box(27.1, y + 0.5, 3.5, 1.3, "w_o → out", sub="(B, T, D)", color="out", size=10)
    s.text(15.5, 0.55, "the rotation acts on each head's Dh features, with time on the axis before them; values "
                       "carry content, not position", size=9, color="soft")
    return s


def _short(v: float) -> str:
    """A bias for a small cell: 0, −0.50, −1.50, or −.004 for the tiny ones."""
    if v == 0:
        return "0"
    text = f"{v:.2f}" if abs(v) >= 0.095 else f"{v:.3f}".replace("0.", ".")
    return text.replace("-", "−")


def _rdbu(v: float, lim: float = 2.5) -> float:
    return (max(-lim, min(lim, v)) + lim) / (2 * lim)


@diagram(L, "l13-alibi", alt="""ALiBi's biases for H = 8 heads and T = 6 positions, for three of the heads, each a
(T_q, T_k) grid of queries (rows) by keys (columns). Head 0 has slope m = 2^(-8 x 1 / 8) = 1/2: the bias is 0 on
the diagonal (a query and its own key), -0.5 one key back, down to -2.5 five keys back, drawn in deepening blue.
Head 3 has slope 2^(-8 x 4 / 8) = 1/16: the same pattern, sixteen times flatter (-0.31 five keys back). Head 7 has
slope 2^(-8) = 1/256: almost no penalty at this range (-0.02). Future keys (above the diagonal) are grey, with a
bias of minus infinity. Right: the penalty m_h times the distance i - j for all eight heads, one line per head,
steep for head 0 and nearly flat for head 7, so the heads look back over different ranges. The bias is added to
q k^T / sqrt(d_k) before the softmax, so a key d places back has its exponentiated score multiplied by
exp(-m_h d).""")
def alibi():
    s = Sheet(31, 9.9, title="ALiBi subtracts slope × distance from each head's scores: steep heads look near, "
                              "gentle heads far")
    T, c, H = 6, 0.78, 8
    for n, h in enumerate((0, 3, 7)):
        m = 2 ** (-8 * (h + 1) / H)
        x0, y0 = 1.2 + n * 6.6, 3.0
        vals = [[_rdbu(-m * (i - j)) if j <= i else float("nan") for j in range(T)] for i in range(T)]
        marks = [[_short(-m * (i - j)) if j <= i else "" for j in range(T)] for i in range(T)]
        s.grid(x0, y0, T, T, cell=c, values=vals, cmap="RdBu_r", marks=marks, size=9,
               label=f"head {h}: $m$ = 2^(−8·{h + 1}/8) = 1/{round(1 / m)}", shape="($T_q$, $T_k$)")
        for i in range(T):                               # the future, masked: grey cells
            for j in range(i + 1, T):
                s.box(x0 + j * c, y0 + (T - 1 - i) * c, c, c, "−∞", color="mask", fill="#D9D9D9", round_=0.0,
                      lw=0.6, size=7)
        for i in range(T):
            s.text(x0 - 0.3, y0 + (T - 1 - i + 0.5) * c, f"i={i}", size=7, color="soft", ha="right")
        s.text(x0 + T * c / 2, y0 - 0.85, "keys j = 0 … 5 →", size=8, color="soft")
    # colour key
    kx, ky = 20.0, 3.2
    s.grid(kx, ky, 6, 1, cell=0.55, values=[[_rdbu(-2.5 * k / 5)] for k in range(6)], cmap="RdBu_r")
    s.text(kx + 0.75, ky + 6 * 0.55 - 0.25, "0", size=8, color="soft", ha="left")
    s.text(kx + 0.75, ky + 0.25, "−2.5", size=8, color="soft", ha="left")
    s.text(kx + 0.3, ky - 0.45, "bias", size=8, color="soft")
    # penalty against distance, every head
    px, py, pw, ph = 22.8, 3.0, 7.2, 5.6
    s.line([px, px], [py, py + ph], color="ink")
    s.line([px, px + pw], [py, py], color="ink")
    dmax, ymax = 20, 10.0
    for h in range(H):
        m = 2 ** (-8 * (h + 1) / H)
        d_end = min(dmax, ymax / m)
        s.line([px, px + pw * d_end / dmax], [py, py + ph * m * d_end / ymax], color="w" if h in (0, 3, 7) else "soft",
               lw=1.8 if h in (0, 3, 7) else 0.9)
    s.text(px + pw * 10 / dmax + 0.2, py + ph - 0.1, "head 0", size=8, color="w", ha="left")
    s.text(px + pw + 0.1, py + ph * (2 ** -4 * 20) / ymax + 0.15, "head 3", size=8, color="w", ha="left")
    s.text(px + pw + 0.1, py + 0.15, "head 7", size=8, color="w", ha="left")
    s.text(px + pw / 2, py - 0.5, "distance i − j", size=8, color="soft")
    for d in (0, 10, 20):
        s.text(px + pw * d / dmax, py - 0.25, str(d), size=7, color="soft")
    for v in (5, 10):
        s.text(px - 0.15, py + ph * v / ymax, str(v), size=7, color="soft", ha="right")
    s.text(px - 0.75, py + ph / 2, "penalty $m_h (i - j)$", size=8, color="soft", rotation=90)
    s.text(px + pw / 2, py + ph + 0.6, "all 8 heads, slopes 1/2 … 1/256", size=9, weight="bold")
    s.text(15.5, 0.7, "scores$_h$ = $q k^{\\top}/\\sqrt{d_k}$ + bias$_h$: a key $d$ places back gets "
                      "its $e^{\\,score}$ scaled by $e^{-m_h d}$; nothing is learned, and a longer text only brings "
                      "larger distances", size=9, color="soft")
    return s

"""Lesson 00: attention as a soft dictionary lookup, the temperature of a softmax, and why it subtracts the maximum."""

from __future__ import annotations

import math

from matplotlib.patches import Rectangle

from course.tools.learner.draw import COLORS, Sheet
from course.tools.learner.lessons import diagram, front

L = "00_softmax_lookup"

front(L, level="core", part="Foundations", lessons=(),
      needs="no earlier lesson: Python; PyTorch tensors, indexing and the matrix product `@`; the exponential and "
            "the logarithm; "
            "what a gradient is (one optimiser step)",
      objectives=[
          "Write a numerically stable softmax along any axis, equal to `torch.softmax` for scores in the thousands.",
          "Explain how the temperature moves a softmax from a uniform distribution to a one-hot arg-max, and "
          "measure it with the entropy.",
          "Write `soft_lookup`, attention as a soft dictionary: a query compared with every key, a softmax, a "
          "weighted average of the values.",
          "Measure how often a noisy query finds its entry as the temperature changes.",
          "Learn a query by gradient descent through the softmax, and explain why a hard arg-max lookup gives "
          "nothing to learn from.",
      ],
      standard_minutes=0.2,
      runs_long="nothing runs long: the whole standard run takes about 12 s, most of it the 5000 noisy lookups "
                "at five temperatures.")


def _softmax(xs, tau=1.0):
    m = max(x / tau for x in xs)
    e = [math.exp(x / tau - m) for x in xs]
    return [v / sum(e) for v in e]


def _bars(s: Sheet, x, y, values, *, width=0.55, gap=0.15, height=2.4, vmax=1.0, color="w", marks=None,
          labels=None, size=8, baseline=None):
    """A small bar chart drawn on the sheet: bottom left at (x, y), bars scaled so that ``vmax`` is ``height``
    tall (negative values hang below ``y``). ``marks`` go above each bar, ``labels`` below the axis; a dashed
    ``baseline`` level (e.g. the uniform weight) may be drawn across. Returns the chart's width."""
    n = len(values)
    total = n * width + (n - 1) * gap
    for k, v in enumerate(values):
        bx = x + k * (width + gap)
        h = height * v / vmax
        s.ax.add_patch(Rectangle((bx, y if h >= 0 else y + h), width, abs(h), facecolor=COLORS[color] if color in COLORS
                                 else color, edgecolor="none"))
        if marks is not None:
            s.text(bx + width / 2, (y + max(h, 0)) + 0.25, marks[k], size=size - 1, color="ink")
        if labels is not None:
            s.text(bx + width / 2, y - 0.3 + min(h, 0), labels[k], size=size - 1, color="soft")
    s.line([x - 0.15, x + total + 0.15], [y, y], color="soft", lw=1.0)
    if baseline is not None:
        s.line([x - 0.15, x + total + 0.15], [y + height * baseline / vmax] * 2, color="soft", dashed=True, lw=0.9)
    return total


@diagram(L, "l00-soft-lookup", alt="""Attention as a soft dictionary lookup, for a table of n = 5 entries. A query q
of size d (blue) is compared with each of the five keys, the rows of a table of shape (n, d) (orange), by a dot
product: five scores, shape (n). The scores are divided by the temperature tau and a softmax turns them into five
weights that are positive and sum to 1 (purple): here 0.87 on the key of 'bread', the one that matches, and a few hundredths on each other.
The weights mix the rows of the values table, shape (n, d_v) (green), into one output of shape (d_v) (red), close to
the value of the matching entry. A Python dict would return exactly one value, and only for an exact key: weights
(0, 1, 0, 0, 0).""")
def soft_lookup():
    s = Sheet(32, 11.5, title="A soft dictionary lookup: compare the query with every key, softmax, mix the values")
    c = 0.6
    y0 = 2.4
    names = ["apple", "bread", "cheese", "dates", "eggs"]

    def numbers(x, vals, fmt):
        for r, v in enumerate(vals):
            s.text(x, y0 + (4 - r + 0.5) * c, fmt.format(v), size=8.5, ha="left")

    s.grid(1.6, 8.4, 1, 6, cell=c, color="q", label="query q", shape="(d)")
    s.grid(1.6, y0, 5, 6, cell=c, color="k", label="keys", shape="(n, d): one key per entry")
    for r, name in enumerate(names):
        s.text(1.4, y0 + (4 - r + 0.5) * c, name, size=8.5, color="soft", ha="right")
    s.box(6.4, 4.9, 3.0, 1.2, "keys @ q", sub="n dot products", color="w", size=10)
    s.arrow(4.2, 8.6, 7.4, 6.15, color="q")
    s.arrow(5.3, 4.5, 6.5, 4.85, color="k")
    scores = [0.1, 1.1, 0.25, -0.1, 0.05]
    s.arrow(9.5, 5.5, 10.3, 4.7, color="w")
    s.grid(10.4, y0, 5, 1, cell=c, values=[[0.1 + 0.5 * (v + 0.2) / 1.3] for v in scores], cmap="Purples",
           label="scores", shape="(n)")
    numbers(11.1, scores, "{:.2f}")
    s.text(13.9, 4.75, "÷ τ (here 0.3),", size=9.5)
    s.text(13.9, 4.3, "then softmax", size=9.5, weight="bold")
    s.arrow(12.4, 3.9, 15.4, 3.9, color="w")
    weights = [round(w, 2) for w in _softmax(scores, 0.3)]
    s.grid(15.6, y0, 5, 1, cell=c, values=[[w] for w in weights], cmap="Purples", label="weights",
           shape="(n), sum to 1")
    numbers(16.3, weights, "{:.2f}")
    s.arrow(17.5, 3.9, 18.9, 3.9, color="w")
    s.grid(19.1, y0, 5, 3, cell=c, color="v", label="values", shape="(n, $d_v$): one value per entry")
    for r, name in enumerate(names):
        s.text(21.0, y0 + (4 - r + 0.5) * c, name, size=8.5, color="soft", ha="left")
    s.box(23.2, 3.3, 3.6, 1.2, "weights @ values", sub="$\\Sigma_j$ weight$_j$ · value$_j$", color="w", size=10)
    s.arrow(22.3, 3.9, 23.1, 3.9, color="v")
    s.arrow(26.9, 3.9, 28.2, 3.9, color="out")
    s.grid(28.4, 3.6, 1, 3, cell=c, color="out", label="out", shape="($d_v$)")
    s.text(29.3, 2.4, "≈ the value of 'bread',", size=9, color="soft")
    s.text(29.3, 1.95, "plus a little of", size=9, color="soft")
    s.text(29.3, 1.5, "every other value", size=9, color="soft")
    s.box(14.2, 7.9, 17.2, 2.0, "", color="neutral", fill="#F4F4F4", dashed=True)
    s.text(22.8, 9.3, "A Python dict: table['bread'] returns one value, for an exact key only", size=10)
    s.text(22.8, 8.45, "= weights (0, 1, 0, 0, 0): the soft lookup's limit as τ → 0, which has no gradient",
           size=9, color="soft")
    s.text(9.5, 0.6, "The keys decide where to look; the values are what comes back.", size=10, color="soft")
    return s


@diagram(L, "l00-temperature", alt="""The same five scores (1, 3, 2.5, 0.2 and -1) turned into weights by a softmax
at three temperatures, as bar charts. At tau = 0.1 the largest score takes 0.99 of the weight: nearly one-hot, the
arg-max, entropy close to 0. At tau = 1 the weights are 0.07, 0.55, 0.33, 0.03 and 0.01: the largest score leads
and the second one still counts. At tau = 10 every weight is between 0.16 and 0.24, close to 0.2, the uniform 1/5 drawn as a dashed line:
entropy close to log 5 = 1.61. Dividing by tau stretches (tau below 1) or squeezes (tau above 1) the gaps between
scores; the order of the weights never changes.""")
def temperature():
    s = Sheet(30, 8.6, title="One set of scores at three temperatures: from one-hot (τ = 0.1) to uniform (τ = 10)")
    scores = [1.0, 3.0, 2.5, 0.2, -1.0]
    labels = [f"{v:g}" for v in scores]
    s.text(2.9, 7.3, "scores s", size=11, weight="bold")
    _bars(s, 1.1, 3.0, scores, vmax=3.0, height=3.0, color="#A9A9C9", marks=None, labels=None)
    for k, v in enumerate(scores):
        s.text(1.1 + k * 0.7 + 0.275, 3.0 + 3.0 * v / 3.0 + (0.25 if v >= 0 else -0.3), labels[k], size=7)
    s.text(2.9, 1.0, "(n = 5)", size=9, color="soft")
    for x, tau in ((8.6, 0.1), (15.6, 1.0), (22.6, 10.0)):
        w = _softmax(scores, tau)
        ent = -sum(p * math.log(p) for p in w if p > 0)
        s.text(x + 1.8, 7.3, f"softmax(s / {tau:g})", size=11, weight="bold", color="w")
        _bars(s, x, 3.0, w, vmax=1.0, height=3.3, color="w", marks=[f"{p:.2f}" for p in w], baseline=0.2)
        s.text(x + 1.8, 2.3, f"τ = {tau:g}", size=10, weight="bold")
        s.text(x + 1.8, 1.6, f"entropy {ent:.2f} nats", size=9, color="soft")
        s.arrow(x - 2.2, 4.6, x - 0.6, 4.6, color="w")
        s.text(x + 3.6, 3.0 + 3.3 * 0.2, "1/n", size=7.5, color="soft", ha="left")
    s.text(15.0, 0.55, "The order of the weights never changes; τ only stretches or squeezes the gaps between "
                       "scores. Uniform: entropy log 5 = 1.61.", size=9, color="soft")
    return s


@diagram(L, "l00-max-subtraction", alt="""Why softmax subtracts the maximum first, for the scores 1000, 999 and 998.
Top row, the naive way: exp(1000) overflows float32 (its largest exp is about exp(88.7)) and gives inf for all
three, and inf divided by inf is NaN. Bottom row, the stable way: subtract the maximum, 1000, to get 0, -1 and -2;
their exponentials 1, 0.37 and 0.14 are finite, and divided by their sum 1.50 they give the weights 0.67, 0.24 and
0.09. Both ways compute the same function, because softmax(s - c) = softmax(s) for any constant c: the factor
exp(-c) cancels.""")
def max_subtraction():
    s = Sheet(29, 8.2, title="Subtract the maximum before exp: the same softmax, and no overflow")
    c = 0.75

    def column(x, y, vals, label, color="w", values=None, shape=None, size=9):
        s.grid(x, y, 3, 1, cell=c, color=color, values=values, cmap="Purples" if values else None,
               marks=[[v] for v in vals], label=label, shape=shape, size=size)

    scores = ["1000", "999", "998"]
    # naive row
    y1 = 4.6
    s.text(0.3, y1 + 1.1, "naive", size=11, weight="bold", ha="left", color="bad")
    column(3.0, y1, scores, "s", color="neutral")
    s.arrow(4.0, y1 + 1.1, 6.0, y1 + 1.1, "exp", color="bad", label_dy=0.3)
    column(6.3, y1, ["inf", "inf", "inf"], "exp(s)", color="bad")
    s.arrow(7.3, y1 + 1.1, 9.6, y1 + 1.1, "÷ sum (inf)", color="bad", label_dy=0.3)
    column(9.9, y1, ["nan", "nan", "nan"], "weights", color="bad")
    s.text(11.2, y1 + 1.1, "float32's exp overflows above 88.7,", size=9, color="soft", ha="left")
    s.text(11.2, y1 + 0.6, "and inf / inf = NaN", size=9, color="soft", ha="left")
    # stable row
    y2 = 0.9
    s.text(0.3, y2 + 1.1, "stable", size=11, weight="bold", ha="left", color="ok")
    column(3.0, y2, scores, "s", color="neutral")
    s.arrow(4.0, y2 + 1.1, 6.0, y2 + 1.1, "− max(s)", color="ok", label_dy=0.3)
    column(6.3, y2, ["0", "−1", "−2"], "s − 1000", color="neutral")
    s.arrow(7.3, y2 + 1.1, 9.6, y2 + 1.1, "exp", color="ok", label_dy=0.3)
    e = [1.0, math.exp(-1), math.exp(-2)]
    column(9.9, y2, [f"{v:.2f}" for v in e], "exp", color="neutral")
    s.arrow(10.9, y2 + 1.1, 13.2, y2 + 1.1, f"÷ {sum(e):.2f}", color="ok", label_dy=0.3)
    w = [v / sum(e) for v in e]
    column(13.5, y2, [f"{v:.2f}" for v in w], "weights", values=[[v] for v in w], shape="sum to 1")
    s.box(17.6, 1.0, 10.8, 2.6, "softmax(s − c) = softmax(s)", sub="exp(−c) multiplies the top and the bottom alike",
          color="w", size=11)
    s.text(23.0, 0.45, "c = max(s): the largest exponent is exp(0) = 1, the sum is at least 1", size=8.5,
           color="soft")
    return s

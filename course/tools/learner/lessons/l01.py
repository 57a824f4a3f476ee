"""Lesson 01: attention pooling of a padded tweet with one learned query, beside mean pooling of the same tweet."""

from __future__ import annotations

import math

from matplotlib.patches import Rectangle

from course.tools.learner.draw import COLORS, Sheet
from course.tools.learner.lessons import diagram, front

L = "01_attention_pooling"

front(L, level="core", part="Foundations", lessons=("00_softmax_lookup",),
      needs="PyTorch's `nn.Module`, `nn.Parameter` and boolean masks; a linear classifier trained with cross-entropy",
      objectives=[
          "Write mean pooling over the real tokens of a padded batch, independent of the padding and of the batch.",
          "Write attention pooling with one learned query: masked scores, a softmax over the real tokens, a "
          "weighted sum, exactly zero weight on padding and zeros for an empty row.",
          "Explain why padding's scores must be masked to -inf before the softmax, and why a small finite fill "
          "such as -1e4 fails.",
          "Measure, by tweet length, how much accuracy averaging loses when one word in forty matters, and "
          "explain it with a signal-to-noise argument.",
          "Read what the learned query looks for from the scores it gives every word of the vocabulary.",
      ],
      standard_minutes=0.25,
      runs_long="nothing runs long: the two classifiers train in about a second each, and the whole standard run "
                "takes about 15 s.")

TOKENS = ["the", "coffee", "is", "awful", "lol", "<pad>", "<pad>"]
SCORES = [0.2, 0.5, -0.3, 3.2, 0.4]                # the real words' scores x_t . q


def _softmax(xs):
    m = max(xs)
    e = [math.exp(x - m) for x in xs]
    return [v / sum(e) for v in e]


def _weight_bars(s: Sheet, x, y, weights, *, title, note=None, highlight=3, height=3.6, width=0.62, gap=0.12,
                 pad_from=5):
    """Bars of one weight per token (bottom left at (x, y)), a token under each, its value above; the padding's
    bars grey when ``pad_from`` says where it starts, the word that matters (``highlight``) named in bold."""
    for k, w in enumerate(weights):
        bx = x + k * (width + gap)
        face = COLORS["mask"] if k >= pad_from else COLORS["w"]
        s.ax.add_patch(Rectangle((bx, y), width, max(height * w, 0.03), facecolor=face, edgecolor="none"))
        s.text(bx + width / 2, y + height * w + 0.25, f"{w:.2f}" if w else "0", size=7.5)
        s.text(bx + width / 2 + 0.15, y - 0.12, TOKENS[k], size=7.5, color="ink" if k == highlight else "soft",
               ha="right", va="top", rotation=50, weight="bold" if k == highlight else "normal")
    right = x + len(weights) * (width + gap) - gap
    s.line([x - 0.1, right + 0.1], [y, y], color="soft")
    s.text((x + right) / 2, y + height + 0.6, title, size=10.5, weight="bold")
    if note:
        for k, line in enumerate(note):
            s.text((x + right) / 2, y - 1.55 - 0.45 * k, line, size=8.5, color="soft")


@diagram(L, "l01-attention-pooling", alt="""Attention pooling of one padded tweet, 'the coffee is awful lol' padded
with two <pad> tokens to T = 7. Its word vectors x form a (T, D) grid (teal; the two padding rows in grey). The
learned query q, of shape (D), is compared with every row by a dot product: seven scores, shape (T). The padding rows hold the
zero vector, so their scores are 0, higher than the real word 'is' (-0.3). The mask, True on the five real words, turns the two
padding scores into -inf before the softmax. The softmax gives seven weights (T)
that sum to 1 over the real words: 0.83 on 'awful', a few hundredths on each filler word, exactly 0 on the padding.
The pooled tweet vector, shape (D), is the weighted sum of the rows of x: nearly the vector of 'awful'.""")
def attention_pooling():
    s = Sheet(31, 11.2, title="Attention pooling: one learned query scores every word; padding is masked to −inf")
    c = 0.6
    y0 = 2.2
    T = len(TOKENS)

    def row_y(t):
        return y0 + (T - 1 - t + 0.5) * c

    vals = [[None] * 4 for _ in range(T)]
    s.grid(2.4, y0, T, 4, cell=c, color="x", label="word vectors x", shape="(T, D): T = 7 padded, L = 5 real")
    for t in range(5, T):
        s.ax.add_patch(Rectangle((2.4, y0 + (T - 1 - t) * c), 4 * c, c, facecolor="#D9D9D9", edgecolor="white"))
    for t, tok in enumerate(TOKENS):
        s.text(2.2, row_y(t), tok, size=8.5, color="soft" if t >= 5 else "ink", ha="right")
    del vals
    s.grid(3.0, 8.6, 1, 4, cell=c, color="q", label="learned query q", shape="(D): one nn.Parameter")
    s.box(6.3, 6.9, 2.8, 1.2, "x @ q", sub="T dot products", color="w", size=10)
    s.arrow(5.5, 8.9, 7.2, 8.15, color="q")
    s.arrow(5.0, 6.4, 6.6, 6.85, color="x")
    scores = SCORES + [0.0, 0.0]                    # <pad>'s vector is 0 here: its score is 0, not small enough
    s.arrow(9.2, 7.3, 10.2, 7.1, color="w")
    s.grid(10.2, y0, T, 1, cell=c, values=[[0.15 + 0.6 * v / 3.2] for v in scores], cmap="Purples", label="scores",
           shape="(T)")
    for t, v in enumerate(scores):
        s.text(10.95, row_y(t), f"{v:.1f}", size=8.5, ha="left")
    s.grid(12.9, y0, T, 1, cell=c, color="mask", values=[[t < 5] for t in range(T)], label="mask", shape="(T), bool")
    for t in range(T):
        s.text(13.65, row_y(t), "True" if t < 5 else "False", size=8, ha="left", color="soft")
    s.text(16.6, 7.35, "masked_fill(~mask, −inf)", size=9, color="mask")
    s.arrow(14.8, 4.3, 16.1, 4.3, color="mask")
    masked = [[0.15 + 0.6 * v / 3.2] for v in SCORES] + [[float("nan")], [float("nan")]]
    s.grid(16.3, y0, T, 1, cell=c, values=masked, cmap="Purples", label="masked scores", shape="(T)")
    for t in range(5, T):
        s.ax.add_patch(Rectangle((16.3, y0 + (T - 1 - t) * c), c, c, facecolor="#D9D9D9", edgecolor="#BBBBBB"))
    for t, v in enumerate(SCORES + [None, None]):
        s.text(17.05, row_y(t), f"{v:.1f}" if v is not None else "−inf", size=8.5, ha="left",
               color="ink" if v is not None else "mask", weight="normal" if v is not None else "bold")
    s.arrow(18.1, 4.3, 19.6, 4.3, "softmax", color="w", label_dy=0.3)
    weights = [round(w, 2) for w in _softmax(SCORES)] + [0.0, 0.0]
    s.grid(19.8, y0, T, 1, cell=c, values=[[w] for w in weights], cmap="Purples", label="weights",
           shape="(T), sum to 1")
    for t, w in enumerate(weights):
        s.text(20.55, row_y(t), f"{w:.2f}" if w else "0", size=8.5, ha="left")
    s.box(22.2, 3.7, 3.4, 1.2, "$\\Sigma_t\\ a_t\\, x_t$", sub="weights @ x", color="w", size=11)
    s.arrow(21.3, 4.3, 22.1, 4.3, color="w")
    s.arrow(25.7, 4.3, 26.6, 4.3, color="out")
    s.grid(26.8, 4.0, 1, 4, cell=c, color="out", label="pooled", shape="(D)")
    s.text(28.0, 3.0, "≈ the vector of 'awful'", size=9, color="soft")
    s.text(15.5, 0.45, "exp(−inf) = 0: the padding gets exactly zero weight, whatever its vectors hold, and the "
                       "real words' weights still sum to 1", size=9, color="soft")
    return s


@diagram(L, "l01-mean-vs-attention", alt="""The same padded tweet, 'the coffee is awful lol' plus two <pad> tokens,
pooled three ways, drawn as one bar of weight per token. Mean pooling over the real words gives each of the five
words 0.20 and the padding 0: 'awful' is one fifth of the tweet vector. Averaging over all seven positions, the
classic mistake, gives 0.14 to every position, padding included: the padding dilutes the mean, and the same tweet
gets another vector in a batch padded to another length. Attention pooling gives 'awful' 0.83 and the padding
exactly 0. Beside them, how the sentiment word's weight changes with the tweet's length L: mean pooling gives it 1/L,
attention pooling with a score margin of 5 over every filler word gives it 1 / (1 + (L - 1) e^-5), still 0.79 at
L = 40.""")
def mean_vs_attention():
    s = Sheet(33, 10.0, title="One padded tweet, pooled three ways; and the sentiment word's share as tweets get longer")
    mean_right = [0.2] * 5 + [0.0, 0.0]
    mean_wrong = [1 / 7] * 7
    attention = [round(w, 2) for w in _softmax(SCORES)] + [0.0, 0.0]
    y = 3.4
    _weight_bars(s, 0.8, y, mean_right, title="mean over the L = 5 real words",
                 note=["every real word 1/L; 'awful' is", "a fifth of the tweet vector"])
    _weight_bars(s, 7.4, y, [round(w, 2) for w in mean_wrong], title="mean over all T = 7 (a bug)",
                 pad_from=99, note=["padding dilutes the mean: 1/T each,", "and the vector changes with the batch's T"])
    _weight_bars(s, 14.0, y, attention, title="attention pooling",
                 note=["'awful' scores far above the filler;", "padding masked: exactly 0"])
    # share of the sentiment word against the length
    x0, y0, w, h = 23.2, 3.1, 8.6, 4.8
    s.line([x0, x0 + w], [y0, y0], color="ink")
    s.line([x0, x0], [y0, y0 + h], color="ink")
    for v in (0.0, 0.5, 1.0):
        s.text(x0 - 0.2, y0 + h * v, f"{v:g}", size=8, color="soft", ha="right")
    for Lx in (4, 10, 20, 30, 40):
        s.text(x0 + w * (Lx - 2) / 38, y0 - 0.35, str(Lx), size=8, color="soft")
    s.text(x0 + w / 2, y0 - 0.95, "tweet length L (words)", size=9, color="soft")
    s.text(x0 + w / 2, y0 + h + 0.85, "the sentiment word's weight", size=10.5, weight="bold")
    Ls = list(range(2, 41))
    mean = [1 / Lx for Lx in Ls]
    att = [1 / (1 + (Lx - 1) * math.exp(-5)) for Lx in Ls]
    X = [x0 + w * (Lx - 2) / 38 for Lx in Ls]
    s.ax.plot(X, [y0 + h * v for v in mean], color=COLORS["soft"], lw=2, ls="--")
    s.ax.plot(X, [y0 + h * v for v in att], color=COLORS["w"], lw=2)
    s.text(x0 + 2.6, y0 + 0.75, "mean pooling: 1/L", size=9, color="soft", ha="left")
    s.text(x0 + 0.4, y0 + h * 0.86 - 0.55, "attention, margin Δ = 5:", size=9, color="w", ha="left")
    s.text(x0 + 0.4, y0 + h * 0.86 - 1.1, "$1 / (1 + (L - 1)\\, e^{-\\Delta})$", size=10, color="w", ha="left")
    s.text(16.5, 0.45, "Averaging shrinks the one word that matters like 1/L; attention keeps it, as long as its score "
                       "margin Δ is well above log(L − 1).", size=9, color="soft")
    return s

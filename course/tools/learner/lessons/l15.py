"""Lesson 15: the sliding window with its sinks over time, one round of speculative decoding, and linear
attention's fixed state beside a growing cache."""

from __future__ import annotations

from matplotlib.patches import Rectangle

from course.tools.learner.draw import COLORS, Sheet, light
from course.tools.learner.lessons import diagram, front

L = "15_serving"

front(L, level="optional", part="Beyond the core", lessons=("09_language_model", "12_efficient_attention"),
      needs="lesson 13's idea that positions can enter attention as distances (helpful, not required); "
            "probability distributions, sampling and total variation distance; the χ² test as a tool "
            "(the lesson explains what it reads)",
      objectives=[
          "Write a sliding-window key/value cache with attention sinks that keeps each token's absolute "
          "position, and check it against one masked pass.",
          "Quantise keys and values to int8 with one scale per vector, and measure what it saves and costs.",
          "Write speculative decoding with the acceptance rule min(1, p/q) and the residual max(0, p − q), and "
          "show with a χ² test that its text follows the target's distribution exactly.",
          "Explain when speculative decoding saves time, from the acceptance rate and the cost of a draft pass.",
          "Write linear attention in its parallel and recurrent forms, and compare its fixed-size state with a "
          "growing cache.",
      ],
      standard_minutes=2,
      runs_long="the standard profile trains three small character models (600 steps each) and runs a few "
                "thousand short speculative generations for the χ² test: about 2 minutes of CPU time, several "
                "minutes of wall-clock time on a busy laptop. The smoke profile runs the whole lesson in seconds.")


@diagram(L, "l15-window-sinks", alt="""A sliding-window cache with window = 4 and n_sinks = 2, over time. Left: a
grid with one row per step t = 0 to 11 (a new token arrives and its query reads the cache) and one column per
position 0 to 11. In row t, the positions the query sees are coloured: positions 0 and 1, the sinks, in gold in every
row from the moment they arrive; the last four positions t - 3 to t, the window, in orange; the positions between
them, evicted, in light grey; the future, after t, left white. Until step 5 nothing is evicted (the cache holds at
most 2 + 4 tokens); from step 6 on, one token leaves the window at each step. Right: what the cache holds after step
9: six entries whose positions() are 0, 1, 6, 7, 8, 9, the absolute positions they were appended at, never renumbered,
so the query at 9 sees them at distances 9, 8, 3, 2, 1, 0. A ring buffer stores the window in window slots, writing
position p into slot p mod window.""")
def window_sinks():
    s = Sheet(31, 10.6, title="A sliding window with sinks: which cached positions each new token's query sees")
    window, sinks, T, c = 4, 2, 12, 0.72
    x0, y0 = 2.6, 1.2
    sink_face, win_face, gone = light("pos", 0.15), light("k", 0.2), "#E4E4E4"
    for t in range(T):
        y = y0 + (T - 1 - t) * c
        s.text(x0 - 0.3, y + c / 2, f"t = {t}", size=8, color="soft", ha="right")
        for p in range(T):
            if p > t:
                face = COLORS["white"]
            elif p < sinks:
                face = sink_face
            elif p > t - window:
                face = win_face
            else:
                face = gone
            s.cell(x0 + p * c, y, c, c, face)
        s.cell(x0 + t * c, y, c, c, win_face if t >= sinks else sink_face, edge=COLORS["q"], text="q",
              color="q")
    for p in range(T):
        s.text(x0 + (p + 0.5) * c, y0 - 0.35, f"{p}", size=8, color="soft")
    s.text(x0 + T * c / 2, y0 - 0.85, "position of a cached key", size=9, color="soft")
    s.text(0.4, y0 + T * c / 2, "step: a new token arrives", size=9, color="soft", rotation=90)
    # legend
    lx, ly = x0 + T * c + 0.8, y0 + T * c - 0.9
    for i, (face, label) in enumerate(((sink_face, "sink: the first n_sinks = 2 tokens, kept for ever"),
                                        (win_face, "window: the last window = 4 tokens"),
                                        (gone, "evicted: no longer in the cache"),
                                        (COLORS["white"], "the future: not appended yet"))):
        s.cell(lx, ly - i * 0.85, 0.6, 0.6, face)
        s.text(lx + 0.85, ly - i * 0.85 + 0.3, label, size=9, ha="left")
    s.text(lx + 0.3, ly - 3.9, "q: the query of step t (it sees its own key too)", size=9, ha="left", color="q")
    s.text(lx + 0.3, ly - 4.6, "until t = 5 nothing leaves: the cache holds at most 2 + 4 tokens", size=9,
           ha="left", color="soft")
    # the cache after step 9
    bx, by = lx, 1.3
    s.text(bx, by + 2.25, "what the cache holds after step 9", size=10, weight="bold", ha="left")
    kept = [0, 1, 6, 7, 8, 9]
    for i, p in enumerate(kept):
        s.cell(bx + i * 1.25, by + 0.75, 1.1, 0.8, sink_face if p < sinks else win_face, text="k, v", size=9)
        s.text(bx + i * 1.25 + 0.55, by + 0.4, f"{p}", size=9, weight="bold")
        s.text(bx + i * 1.25 + 0.55, by - 0.1, f"{9 - p}", size=9, color="soft")
    s.text(bx + 7.7, by + 1.15, "keys(), values()", size=9, ha="left")
    s.text(bx + 7.7, by + 0.4, "positions(): never renumbered", size=9, ha="left", weight="bold")
    s.text(bx + 7.7, by - 0.1, "distance to the query at 9", size=9, ha="left", color="soft")
    s.text(bx, by - 0.9, "a ring buffer keeps the window in 4 slots: position p goes to slot p mod 4", size=9,
           ha="left", color="soft")
    return s


@diagram(L, "l15-speculative-round", alt="""One round of speculative decoding with k = 4, read left to right. The
text so far ends in "... def". The cheap draft proposes four tokens one at a time, x1 to x4, each drawn from its own
distribution q_i (blue boxes). One pass of the target over the text followed by the four proposals gives p_1 to p_5,
the target's distribution at each of those places (the logits at position t score the token at t + 1). The proposals
are tested in order: x1 is kept because a uniform number u fell below min(1, p_1(x1) / q_1(x1)); x2 is kept the same
way; x3 is rejected. The round then draws its last token from the residual, normalise(max(0, p_3 - q_3)), shown as a
small bar chart: where the draft over-proposed (q above p) the residual is zero, where it under-proposed it makes up
the difference. x4 was drawn after a token that is no longer there, so it is dropped unseen. The round wrote three
tokens (two kept proposals and one residual draw) for one target pass. Had all four been kept, a fifth token would
come free from p_5.""")
def speculative_round():
    s = Sheet(30, 13.4, title="One round of speculative decoding: the draft proposes k = 4, ONE target pass checks "
                               "them all")
    bw, bh = 2.1, 0.9
    xs = [5.0 + i * 2.6 for i in range(4)]
    # the text so far
    s.box(0.4, 10.5, 3.9, bh, "… def", color="x", size=10)
    s.text(2.35, 11.8, "text so far", size=9, color="soft")
    # draft proposals
    s.text(5.0, 12.7, "1. the draft proposes, one token at a time", size=9, ha="left", weight="bold")
    toks = ["x1 = ' '", "x2 = 'f'", "x3 = 'o'", "x4 = 'o'"]
    for i, x in enumerate(xs):
        s.box(x, 10.5, bw, bh, toks[i], color="q", size=9)
        s.text(x + bw / 2, 11.8, f"$x_{i + 1} \\sim q_{i + 1}$", size=9, color="q")
        if i:
            s.arrow(xs[i - 1] + bw, 10.95, x, 10.95, color="q", lw=1.0)
    s.arrow(4.3, 10.95, xs[0], 10.95, color="q", lw=1.0)
    # one target pass
    s.box(5.0, 7.7, xs[-1] + bw - 5.0, 1.1, "2. ONE target pass over the text + the 4 proposals", color="out", size=10)
    for i, x in enumerate(xs):
        s.arrow(x + bw / 2, 10.45, x + bw / 2, 8.85, color="soft", lw=0.8)
    ps = ["$p_1$", "$p_2$", "$p_3$", "$p_4$", "$p_5$"]
    for i in range(5):
        x = (xs[i] if i < 4 else xs[-1] + 2.6)
        s.box(x + 0.4, 6.1, 1.3, 0.8, ps[i], color="out", size=10)
        s.arrow(min(x + 1.05, xs[-1] + bw - 0.2), 7.65, x + 1.05, 6.95, color="out", lw=0.9)
    s.text(xs[-1] + 2.6 + 1.05, 5.6, "free token if\nall 4 are kept", size=8, color="soft")
    # tests
    s.text(0.4, 4.5, "3. test in order:\n    keep $x_i$ if\n    $u < \\min(1, p_i(x_i)/q_i(x_i))$", size=9,
           ha="left", weight="bold")
    verdicts = [("kept", "ok"), ("kept", "ok"), ("rejected", "bad"), ("dropped", "soft")]
    for i, (word, col) in enumerate(verdicts):
        x = xs[i]
        s.box(x, 4.2, bw, bh, word, color="neutral" if col == "soft" else col, size=10,
              fill="#F2F2F2" if col == "soft" else None, dashed=col == "soft")
        s.arrow(x + 1.05, 6.05, x + 1.05, 5.15, color="soft", lw=0.8)
    s.text(xs[3] + 1.05, 3.75, "drawn after a token\nthat is gone: unseen", size=8, color="soft")
    # residual
    rx, ry = xs[2] - 0.6, 0.5
    s.text(rx - 0.2, ry + 2.55, "4. resample from normalise(max(0, $p_3 - q_3$))", size=9, ha="left",
           weight="bold", color="bad")
    pv, qv = [0.15, 0.45, 0.25, 0.15], [0.40, 0.20, 0.30, 0.10]
    for j in range(4):
        bx = rx + j * 0.9
        s.ax.add_patch(Rectangle((bx, ry), 0.35, pv[j] * 3.2, facecolor=COLORS["out"], alpha=0.8))
        s.ax.add_patch(Rectangle((bx + 0.37, ry), 0.35, qv[j] * 3.2, facecolor=COLORS["q"], alpha=0.8))
    s.line([rx - 0.2, rx + 3.7], [ry, ry], color="ink", lw=0.8)
    s.text(rx + 4.0, ry + 1.4, "red: p, blue: q", size=8, color="soft", ha="left")
    s.text(rx + 4.0, ry + 0.8, "residual: where p > q", size=8, color="soft", ha="left")
    s.text(rx + 4.0, ry + 0.2, "(here the 2nd and 4th tokens)", size=8, color="soft", ha="left")
    # the result
    s.arrow(xs[3] + bw + 0.2, 4.65, 19.4, 4.65, color="x", lw=1.4)
    s.box(19.5, 4.0, 9.8, 1.3, "the round wrote  ' '  'f'  y", sub="2 kept proposals + 1 residual draw, for 1 target "
          "pass", color="x", size=10)
    s.text(24.4, 2.6, "$P(\\mathrm{token} = y) = \\min(p, q) + \\max(0, p - q) = p(y)$", size=11)
    s.text(24.4, 1.8, "kept where the draft agrees, made up where it under-proposed:", size=9, color="soft")
    s.text(24.4, 1.3, "the text follows the target exactly", size=9, color="soft")
    s.text(24.4, 0.6, "α = Σ min(p, q), the chance a proposal is kept, sets the speed", size=9, color="soft")
    return s


@diagram(L, "l15-state-vs-cache", alt="""What a causal layer carries from one token to the next. Top, softmax
attention: a key/value cache, one key of d_k numbers and one value of d_v numbers per token read so far, a strip that
grows by one column with every token (shown after 4, 8 and 12 tokens: keys (4, d_k) and values (4, d_v), then
(8, d_k) and (8, d_v), then (12, d_k) and (12, d_v)). Bottom, linear attention with the feature map
phi(x) = elu(x) + 1: a state S of d_k by d_v numbers and a normaliser z of d_k numbers; each new token adds
phi(k_t) v_t transposed to S and phi(k_t) to z, and its query reads phi(q_t) S divided by phi(q_t) dot z. The state has
the same size after 4, 8 or 12 tokens.""")
def state_vs_cache():
    s = Sheet(28, 10.6, title="Softmax attention keeps every key and value; linear attention folds them into a "
                               "fixed state")
    c = 0.34
    s.text(0.4, 9.2, "softmax attention: the cache grows", size=11, weight="bold", ha="left")
    for i, n in enumerate((4, 8, 12)):
        x = [1.0, 6.0, 13.0][i]
        s.grid(x, 6.4, 4, n, cell=c, color="k", shape=None)
        s.grid(x, 4.9, 4, n, cell=c, color="v", shape=None)
        s.text(x + n * c / 2, 8.05, f"after {n} tokens", size=9, color="soft")
        s.text(x + n * c / 2, 4.55, f"k ({n}, $d_k$), v ({n}, $d_v$)", size=8, color="soft")
    s.text(1.0 - 0.2, 7.05, "k", size=10, color="k", ha="right")
    s.text(1.0 - 0.2, 5.55, "v", size=10, color="v", ha="right")
    s.text(20.0, 6.6, "a key ($d_k$ numbers) and a value ($d_v$) per token:", size=9, ha="left")
    s.text(20.0, 6.0, "one more column for every token read", size=9, ha="left", color="soft")
    s.text(0.4, 3.7, "linear attention: a state of fixed size", size=11, weight="bold", ha="left")
    for i, n in enumerate((4, 8, 12)):
        x = [1.0, 6.0, 13.0][i]
        s.grid(x, 0.6, 4, 4, cell=c, color="w", shape=None)
        s.grid(x + 1.6, 0.6, 4, 1, cell=c, color="w", shape=None)
        s.text(x + 0.7, 2.2, "S", size=9, color="w")
        s.text(x + 1.77, 2.2, "z", size=9, color="w")
        s.text(x + 1.0, 2.75, f"after {n} tokens", size=9, color="soft")
        s.text(x + 0.7, 0.3, "($d_k$, $d_v$)", size=8, color="soft")
        s.text(x + 1.8, 0.3, "($d_k$)", size=8, color="soft")
    s.text(20.0, 2.3, "$S \\leftarrow S + \\phi(k_t)\\,v_t^{\\top}$  ($d_k$, $d_v$),   $z \\leftarrow z + \\phi(k_t)$  ($d_k$)",
           size=10, ha="left")
    s.text(20.0, 1.5, "$\\mathrm{out}_t = \\phi(q_t)\\,S\\ /\\ \\phi(q_t) \\cdot z$", size=10, ha="left")
    s.text(20.0, 0.8, "the same size after any number of tokens", size=9, ha="left", color="soft")
    return s

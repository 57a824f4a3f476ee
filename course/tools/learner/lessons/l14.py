"""Lesson 14: the residual stream as a shared bus, how two heads compose into an induction head, and the OV and QK
circuits as products of matrices."""

from __future__ import annotations

from course.tools.learner.lessons import diagram, front
from course.tools.learner.draw import Sheet

L = "14_induction_heads"

front(L, level="optional", part="Beyond the core", lessons=("06_multi_head_attention", "09_language_model"),
      needs="the causal multi-head attention of lessons 05 and 06 (heads as column blocks of q, k, v and of "
            "W^O's input); the residual connection of lesson 07; matrix products, transposes and the Frobenius "
            "norm; Python's `with` statement",
      objectives=[
          "Build an attention-only Transformer whose layers add one term per head to the residual stream, and "
          "keep its attention weights.",
          "Train it on repeated random tokens and watch the phase change: the second copy's loss and the "
          "induction score jump at the same step.",
          "Find previous-token and induction heads by their scores, and test what they cause by switching them "
          "off (a context manager) beside random controls.",
          "Read a head's OV and QK circuits from its weights, and measure how much one head reads what another "
          "wrote (K-composition).",
          "Score lesson 09's GPT with the same tools, and say what it has and has not learned.",
      ],
      standard_minutes=1.5,
      runs_long="the standard profile trains the two-layer model for 2 000 steps and lesson 09's GPT for its "
                "700: about 80 s of CPU time, a few minutes of wall-clock time on a busy laptop. The smoke "
                "profile runs the whole lesson in seconds.")


# -- helpers -----------------------------------------------------------------------------------------------

@diagram(L, "l14-residual-bus", alt="""The residual stream of the two-layer attention-only model drawn as a shared
bus, a teal band running left to right, one vector r_t of width d_model per position, shape (B, T, D). On the left
the embedding writes onto it: r^(0)_t is the row of W_E for token x_t plus the row of W_P for position t. Then
layer 0's four heads each read the whole stream
(an arrow up from the bus) and add their own term z^h W_O^h back onto it (an arrow down into a plus), which gives
r^(1); layer 1's four heads do the same and give r^(2). On the right the unembedding W_U reads r^(2) and gives the
logits (B, T, V). Nothing is overwritten: r^(2) is the embedding plus one term per head of each layer, and a head
of layer 1 reads, among the rest, what the heads of layer 0 wrote. With no MLP and no LayerNorm, every term
reaches the unembedding unchanged.""")
def residual_bus():
    s = Sheet(32, 11.5, title="The residual stream is a shared bus: the embedding writes, every head reads and adds "
                               "its term, the unembedding reads")
    y0, h = 3.2, 0.9                                         # the bus
    s.box(4.0, y0, 23.6, h, "", color="x", round_=0.1)
    s.text(15.8, y0 - 0.55, "residual stream: one vector $r_t$ of width $d_{model}$ per position, (B, T, D)",
           size=10, color="x")
    # embedding
    s.box(0.3, y0 - 0.25, 3.2, 1.4, "$W_E[x_t] + W_P[t]$", color="pos", size=10)
    s.arrow(3.5, y0 + h / 2, 4.3, y0 + h / 2, color="x", lw=2.0)
    s.text(1.9, y0 - 0.7, "embedding writes", size=9, color="soft")
    s.text(1.9, y0 + 1.7, "tokens $x_t$ (B, T)", size=9, color="soft")
    s.text(4.7, y0 + h / 2, "$r^{(0)}$", size=11, weight="bold", color="ink")
    # heads of two layers: all heads of a layer read the same stream (one tap), and their terms are summed after it
    for layer, x_start, label in ((0, 6.2, "layer 0"), (1, 16.9, "layer 1")):
        s.box(x_start - 0.5, 5.0, 9.2, 4.7, "", color="neutral", fill="#F4F4F4")
        s.text(x_start + 4.1, 9.25, f"{label}: four heads, side by side", size=10, weight="bold")
        tap = x_start - 0.9
        s.line([tap, tap], [y0 + h, 5.6], color="ink", lw=1.3)
        s.line([tap, x_start + 3 * 2.15 + 0.3], [5.6, 5.6], color="ink", lw=1.3)
        for hd in range(4):
            x = x_start + hd * 2.15
            s.box(x, 6.2, 1.8, 1.4, f"head {layer}.{hd}", color="w", size=9)
            s.arrow(x + 0.3, 5.6, x + 0.3, 6.15, color="ink", lw=1.2)                    # reads
            s.plus(x + 1.5, y0 + h / 2, 0.28, lw=1.5)
            s.arrow(x + 1.5, 6.15, x + 1.5, y0 + h / 2 + 0.3, color="out", lw=1.2)       # writes
        s.text(x_start + 4.1, 8.3, "all read the same stream; each adds its own $z^h W_O^h$", size=9, color="soft")
        if layer == 0:
            s.text(tap - 0.15, 4.7, "reads", size=8, color="ink", ha="right")
            s.text(x_start + 1.6, 4.7, "adds", size=8, color="out", ha="left")
    s.text(15.05, y0 + h / 2, "$r^{(1)}$", size=11, weight="bold", color="ink")
    s.text(26.5, y0 + h / 2, "$r^{(2)}$", size=11, weight="bold", color="ink")
    # unembedding
    s.arrow(27.6, y0 + h / 2, 28.4, y0 + h / 2, color="x", lw=2.0)
    s.box(28.4, y0 - 0.25, 3.3, 1.4, "$W_U$: logits", color="out", size=10)
    s.text(30.05, y0 - 0.7, "(B, T, V)", size=9, color="soft")
    s.text(30.05, y0 + 1.7, "unembedding reads", size=9, color="soft")
    s.text(15.8, 1.3, "$r^{(2)} = W_E[x] + W_P + \\Sigma_{h}$ (layer 0's terms) $+ \\Sigma_{h}$ (layer 1's terms): "
                      "nothing is overwritten, no MLP or LayerNorm in between", size=10)
    s.text(15.8, 0.45, "a head of layer 1 reads, among the rest, what layer 0's heads wrote: that is composition",
           size=10, color="soft")
    return s


@diagram(L, "l14-k-composition", alt="""How a previous-token head and an induction head compose, on the repeated
sequence <s> A B C D A B C D (positions 0 to 8, L = 4), read from the bottom up. Bottom row: the tokens. Middle row,
layer 0: the previous-token head attends from every position j to j - 1 (short purple arcs) and writes into the
stream at j what token stood before it; at position 2 (token B) it writes "previous token: A". Top row, layer 1:
at the query position 5, whose token is the second A, the induction head's query asks for "a key whose previous
token is A". Its keys read what layer 0 wrote (K-composition), so the key at position 2 answers, and the head
attends from 5 to 2 = t - L + 1 (a long purple arc). Its value there is the token B, which the head's OV circuit
copies to the output: at position 5 the model predicts B, the token that comes next.""")
def k_composition():
    s = Sheet(35.5, 15.2, title="K-composition: layer 0 writes \"the token before me\", layer 1's keys read it, and the "
                               "induction head copies what follows")
    toks = ["<s>", "A", "B", "C", "D", "A", "B", "C", "D"]
    prev = ["—", "<s>", "A", "B", "C", "D", "A", "B", "C"]
    x0, dx, w = 4.2, 2.9, 2.3

    def cx(t):
        return x0 + t * dx + w / 2

    # row labels
    s.text(0.2, 1.3, "tokens", size=10, weight="bold", ha="left")
    s.text(0.2, 5.35, "layer 0:\nprevious-\ntoken head", size=10, weight="bold", ha="left")
    s.text(0.2, 10.3, "layer 1:\ninduction\nhead", size=10, weight="bold", ha="left")
    for t, tok in enumerate(toks):
        s.box(x0 + t * dx, 0.9, w, 0.85, tok, color="x", size=11, round_=0.08,
              weight="bold" if t in (2, 5) else "normal")
        s.text(cx(t), 0.45, f"{t}", size=8, color="soft")
    # layer 0: what the stream holds at each position after the previous-token head added its term
    for t in range(len(toks)):
        s.box(x0 + t * dx, 4.0, w, 1.35, toks[t], sub=f"+ prev: {prev[t]}", color="x", size=10, round_=0.08,
              fill="#CFEDEA" if t == 2 else None)
        s.arrow(cx(t), 1.8, cx(t), 3.95, color="soft", lw=0.8)
        if t >= 1:
            s.arrow(cx(t) - 0.2, 3.1, cx(t - 1) + 0.2, 3.1, color="w", rad=0.45, lw=1.6 if t == 2 else 1.0)
    s.text(cx(8) + 1.5, 3.3, "attends\n$j \\to j-1$,\ncopies that\ntoken in", size=9, color="w", ha="left")
    s.text(cx(8) + 1.5, 4.7, "the stream\nafter layer 0", size=9, color="x", ha="left")
    # layer 1: the query at 5 and the key at 2
    s.box(x0 + 5 * dx - 0.35, 8.1, w + 0.7, 1.5, "query at 5:", sub="my token is A", color="q", size=10)
    s.box(x0 + 2 * dx - 0.35, 8.1, w + 0.7, 1.5, "key at 2:", sub="prev: A  ✓ match", color="k", size=10)
    for t in (0, 1, 3, 4):
        s.box(x0 + t * dx + 0.2, 8.35, w - 0.4, 1.0, "key", sub=f"prev: {prev[t]}", color="k", size=8,
              fill="#F8E6DA")
    s.arrow(cx(5), 5.4, cx(5), 8.05, color="q", lw=1.2)
    s.text(cx(5) + 0.15, 6.7, "$W_Q$ reads the token", size=8, color="q", ha="left")
    s.arrow(cx(2), 5.4, cx(2), 8.05, color="k", lw=1.6)
    s.text(cx(2) + 0.15, 6.7, "$W_K$ reads what layer 0 wrote", size=8, color="k", ha="left")
    s.arrow(cx(5) - 0.5, 9.7, cx(2) + 0.5, 9.7, color="w", rad=0.35, lw=2.4)
    s.text((cx(5) + cx(2)) / 2, 11.35, "attends from 5 to 2 = t − L + 1", size=10, color="w", weight="bold")
    # copy the value: OV
    s.box(x0 + 5 * dx - 0.35, 12.6, w + 0.7, 1.2, "predicts B", color="out", size=11, weight="bold")
    s.arrow(cx(2) + 0.9, 9.65, x0 + 5 * dx - 0.4, 13.2, color="v", rad=-0.25, lw=1.6)
    s.text(cx(3) + 0.6, 12.6, "value at 2: token B, copied by the OV circuit", size=9, color="v")
    s.text(cx(6) + 0.2, 13.2, "the next token\nat 6 is B ✓", size=9, color="soft", ha="left")
    s.text((cx(6) + cx(8)) / 2, 8.85, "keys 6 … 8: the future, masked", size=9, color="mask")
    s.text(cx(7) + 0.4, 11.0, "without layer 0, no key\nsays \"prev: A\": nothing\nto find", size=9, color="soft",
           ha="left")
    return s


@diagram(L, "l14-circuits", alt="""A head's two circuits as products of matrices, with their shapes. Top, the OV
circuit: W_E (V by D) times W_V^h (D by d_k) times W_O^h (d_k by D) times W_U (D by V) gives a V by V matrix whose
row a is what the head adds to the logits when it attends to a position holding token a, and whose column b is the
token whose logit it raises; a copying head has its largest entry of each row on the diagonal (a small map with a
dark diagonal). Bottom, the QK circuit: W_E W_Q^h (V by d_k) times (W_E W_K^h) transposed (d_k by V), divided by
the square root of d_k, gives a V by V matrix of scores, row a the query's token and column b the key's token.
Both leave out positions and earlier layers: they are read from the weights alone, the same for every
sequence.""")
def circuits():
    s = Sheet(31, 11.0, title="A head's circuits are products of its matrices: OV (what it writes), QK (where it looks)")
    c = 0.36
    # OV
    s.text(0.3, 9.4, "OV circuit", size=11, weight="bold", ha="left")
    y = 6.0
    s.grid(0.5, y, 6, 4, cell=c, color="x", label="$W_E$", shape="(V, D)")
    s.text(2.3, y + 1.1, "·", size=16)
    s.grid(2.7, y + 0.35, 4, 2, cell=c, color="v", label="$W_V^h$", shape="(D, $d_k$)")
    s.text(3.75, y + 1.1, "·", size=16)
    s.grid(4.1, y + 0.7, 2, 4, cell=c, color="v", label="$W_O^h$", shape="($d_k$, D)")
    s.text(5.8, y + 1.1, "·", size=16)
    s.grid(6.1, y + 0.35, 4, 6, cell=c, color="out", label="$W_U$", shape="(D, V)")
    s.text(8.7, y + 1.1, "=", size=16)
    diag = [[0.95 if i == j else 0.38 + 0.09 * ((i * 3 + j) % 3) for j in range(6)] for i in range(6)]   # 0.5 = 0
    s.grid(9.3, y, 6, 6, cell=c, values=diag, cmap="RdBu_r", vmax=1.0, label="(V, V)", shape=None)
    s.text(11.9, y + 1.8, "row a: the token the head attends to", size=9, ha="left")
    s.text(11.9, y + 1.1, "column b: the token whose logit it raises", size=9, ha="left")
    s.text(11.9, y + 0.4, "a copying head: each row peaks on the diagonal (red: raises, blue: lowers)", size=9,
           ha="left", color="out")
    s.text(23.0, y + 1.1, "$W_E\\,W_V^h\\,W_O^h\\,W_U$", size=13)
    # QK
    s.text(0.3, 4.3, "QK circuit", size=11, weight="bold", ha="left")
    y = 0.9
    s.grid(0.5, y, 6, 2, cell=c, color="q", label="$W_E W_Q^h$", shape="(V, $d_k$)")
    s.text(1.6, y + 1.1, "·", size=16)
    s.grid(2.0, y + 0.7, 2, 6, cell=c, color="k", label="$(W_E W_K^h)^{\\top}$", shape="($d_k$, V)")
    s.text(5.1, y + 1.1, "/ $\\sqrt{d_k}$  =", size=12)
    sc = [[0.5 + 0.7 * (((i * 7 + j * 3 + i * j) % 5) / 4 - 0.5) for j in range(6)] for i in range(6)]
    s.grid(6.2, y, 6, 6, cell=c, values=sc, cmap="RdBu_r", vmax=1.0, label="scores (V, V)", shape=None)
    s.text(8.8, y + 1.8, "row a: the query's token", size=9, ha="left")
    s.text(8.8, y + 1.1, "column b: the key's token", size=9, ha="left")
    s.text(8.8, y + 0.4, "the score between them, through the embeddings alone", size=9, ha="left", color="soft")
    s.text(23.0, y + 1.1, "$W_E W_Q^h\\,(W_E W_K^h)^{\\top} / \\sqrt{d_k}$", size=13)
    s.text(15.5, 4.6, "positions and earlier layers left out: read from the weights, the same for every sequence",
           size=9, color="soft")
    return s

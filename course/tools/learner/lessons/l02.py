"""Lesson 02: the GRU encoder-decoder's bottleneck, Bahdanau's additive attention step with its shapes, and the
alignment of a reordered pair."""

from __future__ import annotations

from course.tools.learner.draw import Sheet
from course.tools.learner.lessons import diagram, front

L = "02_rnn_attention"

front(L, level="core", part="Foundations", lessons=("00_softmax_lookup", "01_attention_pooling"),
      needs="recurrent networks: what a GRU's hidden state is and how `nn.GRU` and `nn.GRUCell` are called; "
            "embeddings and cross-entropy; teacher forcing is explained here",
      objectives=[
          "Write Bahdanau's additive attention, $v^\\top \\tanh(W_q\\, s + W_k\\, h + b)$, with a padding mask, for "
          "a batch of decoder queries and encoder keys and values of different sizes.",
          "Write one step of the attention decoder: look with the previous state, read with the GRU, write the "
          "next word's logits.",
          "Explain the bottleneck of a plain encoder-decoder, and measure it: translation quality by sentence "
          "length, with and without attention, at equal steps.",
          "Read an attention map as a word alignment, and measure how often its largest weight falls on the gold "
          "source word.",
      ],
      standard_minutes=3.0,
      runs_long="the two translators train for one to two minutes each in the standard profile (about 3 minutes "
                "for the whole run on a 2-core CPU, longer on a busy one); the smoke profile takes seconds.")

SRC = ["the", "small", "black", "cat", "sleeps"]
TGT = ["le", "chat", "noir", "petit", "dort"]
ALIGN = [0, 3, 2, 1, 4]                    # target word i translates source word ALIGN[i]


def _words(s: Sheet, xs, y, words, *, color="soft", size=9, rotation=0):
    for x, w in zip(xs, words):
        s.text(x, y, w, size=size, color=color, rotation=rotation)


@diagram(L, "l02-bottleneck", alt="""Two GRU translators of the same English sentence, 'the small black cat sleeps',
into 'le chat noir petit dort'. Top, without attention: the bidirectional encoder reads the five words into five
states h_1 to h_5 (orange, shape (B, S, 2 d_hidden)), but only one vector leaves it: h_final, its two directions' last
states (shape (B, 2 d_hidden)). The decoder gets that same vector as its context at every step, whatever word it is
writing: the whole sentence must fit in it, the bottleneck. Bottom, with attention: every encoder state stays
available. At each step i the decoder's previous state s_(i-1) (blue) is compared with every h_j, and a softmax gives
weights a_(i,j); writing 'noir', most of the weight goes to 'black'. The context c_i, the weighted sum of the h_j
(shape (B, 2 d_hidden)), is recomputed at every step.""")
def bottleneck():
    s = Sheet(31, 15.8, title="Without attention the decoder gets one fixed vector; with it, a new mix of every "
                              "encoder state at each step")
    xs = [1.6 + 2.2 * k for k in range(5)]
    xt = [17.6 + 2.3 * k for k in range(5)]
    for top, y in ((True, 9.2), (False, 1.4)):
        s.text(0.3, y + 5.6, "without attention" if top else "with attention (Bahdanau)", size=11, weight="bold",
               ha="left", color="bad" if top else "ok")
        _words(s, xs, y + 0.2, SRC, color="ink")
        for k, x in enumerate(xs):
            s.grid(x - 0.15, y + 1.0, 2, 1, cell=0.3, color="k")
            s.arrow(x, y + 0.45, x, y + 0.95, color="soft", lw=1.0)
            if k < 4:
                s.arrow(x + 0.25, y + 1.3, xs[k + 1] - 0.25, y + 1.3, color="soft", lw=0.8, style="<|-|>")
            s.text(x - 0.5, y + 1.85, f"$h_{k + 1}$", size=9, color="k")
        s.text((xs[0] + xs[-1]) / 2, y - 0.55, "encoder: a bidirectional GRU, states (B, S, 2 d_hidden)",
               size=8.5, color="soft")
        _words(s, xt, y + 0.2, ["<bos>"] + TGT[:4], color="soft", size=8.5)
        for k, x in enumerate(xt):
            s.circle(x, y + 1.4, 0.38, f"$s_{k + 1}$", color="q", size=8)
            s.arrow(x, y + 0.45, x, y + 1.0, color="soft", lw=1.0)
            s.arrow(x, y + 1.8, x, y + 3.0, color="out", lw=1.0)
            s.text(x, y + 3.3, TGT[k], size=9, color="out", weight="bold")
            if k < 4:
                s.arrow(x + 0.4, y + 1.4, xt[k + 1] - 0.4, y + 1.4, color="q", lw=1.0)
        s.text((xt[0] + xt[-1]) / 2, y - 0.55, "decoder: a GRU cell, state $s_i$ (B, d_hidden), one word per step",
               size=8.5, color="soft")
        if top:
            s.grid(4.6, y + 3.6, 1, 4, cell=0.45, color="out")
            s.text(5.5, y + 4.5, "$h_{final}$ (B, 2 d_hidden): each direction's last state", size=9, color="out")
            s.arrow(xs[-1], y + 1.7, 6.45, y + 3.55, color="soft", lw=1.0)
            s.arrow(xs[0], y + 1.7, 4.55, y + 3.55, color="soft", lw=1.0)
            s.line([6.5, xt[-1] - 0.75], [y + 3.85, y + 3.85], color="out", dashed=True, lw=1.2)
            for x in xt:
                s.arrow(x - 0.75, y + 3.85, x - 0.3, y + 1.7, color="out", lw=0.9, dashed=True)
            s.text(24.6, y + 5.0, "the same context $c_i = h_{final}$ at every step:", size=9, color="bad")
            s.text(24.6, y + 4.5, "the whole sentence in one vector", size=9, color="bad")
        else:
            target = 2                                               # writing 'noir'
            weights = [0.02, 0.05, 0.86, 0.05, 0.02]
            box_x, box_y = 4.4, y + 3.5
            s.box(box_x, box_y, 3.6, 1.2, "attention", sub="scores, softmax, mix", color="w", size=9.5)
            for k, (x, w) in enumerate(zip(xs, weights)):
                s.arrow(x, y + 1.65, box_x + 0.4 + 0.7 * k, box_y - 0.05, color="w", lw=0.6 + 5 * w)
                s.text(x + (0.5 if k >= 2 else -0.1), y + 2.55, f"{w:.2f}", size=7.5, color="w",
                       ha="left" if k >= 2 else "right")
            s.arrow(xt[target - 1] - 0.2, y + 1.8, box_x + 3.65, box_y + 0.3, color="q", lw=1.2, rad=-0.1)
            s.text(15.0, y + 2.0, "query $s_{i-1}$ (B, d_hidden)", size=8.5, color="q")
            s.arrow(box_x + 3.65, box_y + 0.9, xt[target] - 0.3, y + 1.75, color="out", lw=1.4, rad=-0.1)
            s.text(12.6, y + 4.55, "context $c_i$ (B, 2 d_hidden)", size=8.5, color="out")
            s.text(24.6, y + 5.0, "$c_i = \\Sigma_j\\, a_{ij} h_j$, recomputed at every step:", size=9, color="ok")
            s.text(24.6, y + 4.5, "writing 'noir', the decoder reads mostly 'black'", size=9, color="ok")
    s.line([0.3, 30.7], [8.05, 8.05], color="neutral", lw=1.0)
    return s


@diagram(L, "l02-additive-step", alt="""One step i of Bahdanau's attention decoder, with shapes. The query is the previous
decoder state s_(i-1), shape (B, D_q) (blue); the keys and the values are the encoder states h_1 to h_S, shape
(B, S, D_k) (orange for keys, green for values; here the same tensor). The score network maps the query by W_q to
(B, d_attn), broadcast over the S positions, and each key by W_k to (B, S, d_attn); their sum plus a bias goes through
tanh, and v maps each position's d_attn numbers to one score: e_i, shape (B, S) (purple). Padded positions are set to
-inf, a softmax over the S positions gives the weights a_i, shape (B, S), each row summing to 1, and the context c_i
= sum over j of a_(i,j) h_j has shape (B, D_v) (red). The GRU cell then reads the embedded previous word e(y_(i-1)),
shape (B, E), concatenated with c_i, and updates s_(i-1) to s_i, shape (B, d_hidden); the output layer reads
s_i, c_i and e, concatenated, and gives the logits of the next word, shape (B, V).""")
def additive_step():
    s = Sheet(33.5, 13.0, title="One decoder step: the previous state asks, every encoder state answers, the GRU reads "
                              "the answer")
    c = 0.42
    # query and keys
    s.grid(0.8, 10.2, 1, 4, cell=c, color="q", label="query $s_{i-1}$", shape="(B, $D_q$)")
    s.grid(0.8, 4.2, 5, 6, cell=c, color="k", label="keys $h_1 \\dots h_S$", shape="(B, S, $D_k$)")
    s.arrow(2.7, 10.4, 4.4, 10.4, "$W_q$", color="q", label_dy=0.3)
    s.grid(4.6, 10.2, 1, 5, cell=c, color="q")
    s.text(5.65, 9.85, "(B, d_attn), broadcast over S", size=8, color="soft")
    s.arrow(3.5, 5.3, 4.4, 5.3, "$W_k$", color="k", label_dy=0.3)
    s.grid(4.6, 4.2, 5, 5, cell=c, color="k")
    s.text(5.65, 3.85, "(B, S, d_attn)", size=8, color="soft")
    s.box(8.2, 7.0, 3.4, 1.3, "tanh( · + · + b)", sub="(B, S, d_attn)", color="w", size=10)
    s.arrow(6.8, 10.1, 9.0, 8.35, color="q")
    s.arrow(6.8, 5.5, 9.0, 6.95, color="k")
    s.arrow(11.7, 7.65, 12.7, 7.65, "$v^\\top$", color="w", label_dy=0.3)
    scores = [0.3, 0.9, 2.8, 0.6, None]
    s.grid(12.9, 6.6, 5, 1, cell=c, values=[[0.1 + 0.25 * v] if v is not None else [float("nan")] for v in scores],
           cmap="Purples", label="scores $e_i$", shape="(B, S)")
    s.text(13.55, 6.6 + 0.5 * c, "−inf", size=7.5, color="mask", ha="left", weight="bold")
    s.text(13.1, 5.75, "padding → −inf", size=8, color="mask")
    s.arrow(13.5, 7.65, 15.9, 7.65, "softmax", color="w", label_dy=0.3)
    weights = [0.05, 0.09, 0.81, 0.05, 0.0]
    s.grid(16.1, 6.6, 5, 1, cell=c, values=[[w] for w in weights], cmap="Purples", label="weights $a_i$",
           shape="(B, S), sum to 1")
    s.grid(16.2, 1.3, 5, 6, cell=c, color="v", label="values $h_1 \\dots h_S$", shape="(B, S, $D_v$)")
    s.box(19.0, 4.3, 3.0, 1.2, "$\\Sigma_j\\ a_{ij}\\, h_j$", color="w", size=11)
    s.arrow(16.7, 5.75, 19.4, 5.55, color="w")
    s.arrow(18.9, 2.8, 19.7, 4.25, color="v")
    s.arrow(22.1, 4.9, 22.8, 4.9, color="out")
    s.grid(23.0, 4.7, 1, 6, cell=c, color="out", label="context $c_i$", shape="(B, $D_v$)")
    # the decoder
    s.grid(23.0, 10.4, 1, 3, cell=c, color="x", label="$e(y_{i-1})$ (B, E)", shape="the previous word, embedded")
    s.box(26.4, 7.4, 3.4, 1.3, "GRU cell", sub="input $[e \\,\\|\\, c_i]$, state $s_{i-1}$", color="q", size=10)
    s.arrow(24.4, 10.4, 26.9, 8.75, color="x")
    s.arrow(25.1, 5.2, 26.9, 7.35, color="out")
    s.arrow(29.9, 8.05, 30.6, 8.05, color="q")
    s.grid(30.8, 7.85, 1, 4, cell=c, color="q", label="$s_i$", shape="(B, d_hidden)")
    s.box(26.4, 2.2, 3.4, 1.3, "out", sub="$[s_i \\,\\|\\, c_i \\,\\|\\, e]$ → logits", color="out", size=10)
    s.arrow(31.6, 7.3, 29.7, 3.55, color="q")
    s.arrow(25.1, 4.65, 26.6, 3.55, color="out")
    s.arrow(28.1, 2.15, 28.1, 1.2, color="out")
    s.text(28.1, 0.85, "logits (B, V): the next word", size=8.5, color="soft")
    s.text(8.0, 1.4, "score $e_{ij} = v^\\top \\tanh(W_q\\, s_{i-1} + W_k\\, h_j + b)$: a one-hidden-layer MLP",
           size=9.5, color="soft")
    s.text(8.0, 0.8, "on the pair (query, key); in the lesson's translator $D_q$ = d_hidden, $D_k = D_v$ = 2 d_hidden",
           size=9, color="soft")
    return s


@diagram(L, "l02-alignment", alt="""The alignment of 'the small black cat sleeps' with its French-like translation 'le
chat noir petit dort', drawn twice. Left, as lines from each French word down to the English word it translates:
le to the, dort to sleeps, and chat, noir, petit to cat, black, small: the lines of chat and petit cross. Right, as a grid with
the French words as rows (queries, one per decoder step) and the English words as columns (keys): one dark cell per
row. 'le' and 'dort' sit on the diagonal; the three rows of 'chat noir petit' point at columns 'cat', 'black',
'small', an anti-diagonal block: the crossed diagonal an attention map should show.""")
def alignment():
    s = Sheet(26, 9.6, title="Adjectives after the noun, in mirror order: the alignment crosses the diagonal")
    xs = [1.4 + 2.2 * k for k in range(5)]
    for k, (x, w) in enumerate(zip(xs, SRC)):
        s.text(x, 7.6, w, size=10, color="k", weight="bold")
    for i, (x, w) in enumerate(zip(xs, TGT)):
        s.text(x, 2.0, w, size=10, color="q", weight="bold")
        j = ALIGN[i]
        s.line([x, xs[j]], [2.4, 7.2], color="w" if i != j else "soft", lw=2.0 if i != j else 1.2)
    s.text(5.8, 8.5, "English (source, keys $j$)", size=9, color="soft")
    s.text(5.8, 1.1, "French-like (target, queries $i$)", size=9, color="soft")
    c = 0.9
    gx, gy = 16.5, 2.2
    grid = [[1.0 if ALIGN[i] == j else 0.0 for j in range(5)] for i in range(5)]
    s.grid(gx, gy, 5, 5, cell=c, values=grid, cmap="Purples", vmax=1.2)
    for j, w in enumerate(SRC):
        s.text(gx + (j + 0.5) * c, gy + 5 * c + 0.25, w, size=8.5, color="k", rotation=35, ha="left", va="bottom")
    for i, w in enumerate(TGT):
        s.text(gx - 0.2, gy + (4 - i + 0.5) * c, w, size=8.5, color="q", ha="right")
    s.text(gx + 2.5 * c, gy - 0.45, "(T, S): one row per French word", size=8.5, color="soft")
    s.text(gx + 2.5 * c, gy - 0.95, "dark = its gold source word", size=8.5, color="soft")
    return s

"""Lesson 08: the encoder-decoder Transformer with its shapes, the decoder block, and a beam search tree."""

from __future__ import annotations

from course.tools.learner.lessons import diagram, front
from course.tools.learner.draw import Sheet

L = "08_transformer"

front(L, level="core", part="Transformers", lessons=("02_rnn_attention", "07_transformer_block"),
      needs="the causal and padding masks of lesson 05; cross-entropy and teacher forcing as in lesson 02; "
            "log-probabilities; PyTorch's `nn.MultiheadAttention` and `nn.TransformerEncoderLayer`",
      objectives=[
          "Build a decoder block (masked self-attention, cross-attention, feed-forward) and the whole "
          "encoder-decoder, equal to `nn.TransformerDecoderLayer` and `nn.Transformer`.",
          "Write the teacher-forced loss with the targets shifted by one, and explain what goes wrong without "
          "the shift.",
          "Write greedy decoding and beam search with the GNMT length penalty, and check beam search against "
          "an exhaustive search.",
          "Compare the Transformer with lesson 02's GRU translator at equal steps, and measure which trains "
          "faster per step.",
          "Read cross-attention as an alignment, and test what checkpoint averaging and learning-rate warm-up "
          "change on a small model.",
      ],
      standard_minutes=15.5,
      runs_long="the standard profile trains the Transformer and the GRU (about 2 500 steps each), then a few "
                "shorter models for checkpoint averaging and warm-up: about 15 minutes on a laptop CPU, longer "
                "if the machine is busy. The smoke profile runs the whole lesson in under a minute.")


# -- helpers -----------------------------------------------------------------------------------------------

def _residual(s: Sheet, x_from: float, y_from: float, x_side: float, y_to: float, x_to: float, r: float = 0.36):
    s.line([x_from, x_side], [y_from, y_from], color="x", lw=2.0)
    s.line([x_side, x_side], [y_from, y_to], color="x", lw=2.0)
    s.arrow(x_side, y_to, x_to - r, y_to, color="x", lw=2.0)


def _tokens(s: Sheet, x: float, y: float, words, *, w: float = 1.35, h: float = 0.7, color: str = "x", size: int = 9):
    """A row of token boxes, left to right from (x, y); returns the x of its right edge."""
    for i, word in enumerate(words):
        s.box(x + i * w, y, w - 0.1, h, word, color=color, size=size, round_=0.08)
    return x + len(words) * w


@diagram(L, "l08-encoder-decoder", alt="""The encoder-decoder Transformer for one translation, "the black cat" to
"le chat noir", read from the bottom up. Left, the encoder: the source ids (B, S) go through src_embed, multiplied
by the square root of D, plus the sinusoidal positions of the first S positions, giving (B, S, D); N encoder blocks (self-attention
over the whole source, with the source padding masked, and a feed-forward network) turn them into the memory,
(B, S, D), one vector per source word. Right, the decoder: the target shifted right by one, <bos> le chat noir, of
shape (B, T), goes through tgt_embed times the square root of D plus the positions to (B, T, D); N decoder blocks, each with
masked self-attention, cross-attention that reads the same memory, and a feed-forward network, keep (B, T, D); the
generator, a linear layer D to V, gives logits (B, T, V), and position t predicts the next word: le chat noir <eos>.
In the pre-norm layout each stack ends with a final LayerNorm.""")
def encoder_decoder():
    s = Sheet(32, 17.0, title="The Transformer for translation: the encoder reads the source once, the decoder writes "
                               "the target one position ahead")
    # encoder column
    ex = 7.0
    s.text(ex, 16.0, "encoder", size=12, weight="bold")
    right = _tokens(s, ex - 2.0, 0.6, ["the", "black", "cat"])
    s.text(right + 0.3, 0.95, "src (B, S) ids", size=9, color="soft", ha="left")
    s.arrow(ex, 1.35, ex, 2.2, color="ink")
    s.box(ex - 2.9, 2.2, 5.8, 1.0, "src_embed(src) · √D  +  PE[:S]", color="pos", size=10)
    s.text(ex + 3.1, 2.7, "(B, S, D)", size=9, color="soft", ha="left")
    s.arrow(ex, 3.2, ex, 4.2, color="ink")
    s.box(ex - 3.0, 4.2, 6.0, 4.4, "", color="neutral")
    s.text(ex, 8.15, "N encoder blocks", size=11, weight="bold")
    s.box(ex - 2.6, 6.5, 5.2, 1.0, "self-attention", sub="every source word sees every other", color="w", size=10)
    s.box(ex - 2.6, 4.85, 5.2, 1.0, "feed-forward", sub="D → d_ff → D", color="ffn", size=10)
    s.text(ex, 4.45, "+ residuals and LayerNorms (lesson 07)", size=8, color="soft")
    s.arrow(ex, 8.6, ex, 9.6, color="ink")
    s.grid(ex - 0.9, 9.6, 3, 4, cell=0.45, color="x", label="memory", shape=None)
    s.text(ex - 1.15, 10.3, "(B, S, D)\none vector per\nsource word", size=9, color="soft", ha="right")
    s.text(ex, 12.6, "source padding: masked as keys\n(src_mask, True on real tokens)", size=9, color="mask")

    # decoder column
    dx = 22.0
    s.text(dx, 16.0, "decoder", size=12, weight="bold")
    left = dx - 2.7
    right = _tokens(s, left, 0.6, ["<bos>", "le", "chat", "noir"])
    s.text(left - 0.25, 0.95, "tgt[:, :-1] (B, T)\nshifted right", size=9, color="soft", ha="right")
    s.arrow(dx, 1.35, dx, 2.2, color="ink")
    s.box(dx - 2.9, 2.2, 5.8, 1.0, "tgt_embed(tgt) · √D  +  PE[:T]", color="pos", size=10)
    s.text(dx + 3.1, 2.7, "(B, T, D)", size=9, color="soft", ha="left")
    s.arrow(dx, 3.2, dx, 4.2, color="ink")
    s.box(dx - 3.0, 4.2, 6.0, 6.1, "", color="neutral")
    s.text(dx, 9.85, "N decoder blocks", size=11, weight="bold")
    s.box(dx - 2.6, 8.2, 5.2, 1.0, "masked self-attention", sub="position t sees 0 … t (causal)", color="w", size=10)
    s.box(dx - 2.6, 6.55, 5.2, 1.0, "cross-attention", sub="queries: decoder; keys, values: memory", color="q", size=10)
    s.box(dx - 2.6, 4.85, 5.2, 1.0, "feed-forward", sub="D → d_ff → D", color="ffn", size=10)
    # memory into every decoder block's cross-attention
    s.arrow(ex + 1.0, 10.3, dx - 2.65, 7.05, color="k", lw=2.0, rad=-0.2)
    s.text(14.0, 11.1, "keys and values: the same memory\nin every decoder block", size=9, color="k")
    s.arrow(dx, 10.3, dx, 11.0, color="ink")
    s.text(dx + 3.1, 10.6, "(B, T, D)", size=9, color="soft", ha="left")
    s.box(dx - 2.9, 11.0, 5.8, 1.0, "generator: Linear(D, V)", color="out", size=10)
    s.arrow(dx, 12.0, dx, 12.7, color="ink")
    s.text(dx + 3.1, 12.35, "logits (B, T, V)", size=9, color="soft", ha="left")
    right = _tokens(s, left, 12.7, ["le", "chat", "noir", "<eos>"], color="out")
    s.text(left - 0.25, 13.05, "predicts tgt[:, 1:]", size=9, color="soft", ha="right")
    s.text(dx, 14.3, "position t reads <bos> y_1 … y_t and predicts y_(t+1)", size=9, color="soft")
    s.text(16.0, 15.2, "pre-norm layout: each stack ends with one more LayerNorm (encoder_norm, decoder_norm)",
           size=9, color="norm")
    return s


@diagram(L, "l08-decoder-block", alt="""One decoder block in the post-norm layout, read from the bottom up; the
decoder's stream y is (B, T, D). First, masked self-attention: queries, keys and values all come from y, under the
causal mask (T, T), drawn as a lower-triangular grid: position t sees positions 0 to t. Its output is added to y
(a teal residual path goes round it) and normalised by norm1. Second, cross-attention: the queries come from the
decoder's stream, the keys and values from the encoder's memory (B, S, D), entering from the right, with the source
padding masked by memory_mask (B, 1, 1, S); its weights are a (T, S) map, one distribution over the source words per
target position. Its output is added and normalised by norm2. Third, the feed-forward network, added and normalised
by norm3. The output is (B, T, D). In the pre-norm layout each LayerNorm moves to the input of its sublayer, as in
lesson 07.""")
def decoder_block():
    s = Sheet(30, 16.6, title="A decoder block: three sublayers, each with its residual and its LayerNorm (post-norm)")
    cx, bw, bh, r = 10.0, 6.0, 1.1, 0.36
    s.box(cx - 2.2, 0.3, 4.4, 0.85, "y   (B, T, D)", color="x", size=10)

    def column(steps):
        y_prev = 1.15
        for kind, y, label, sub in steps:
            if kind == "plus":
                s.arrow(cx, y_prev, cx, y - r, color="ink")
                s.plus(cx, y, r)
                y_prev = y + r
            else:
                s.arrow(cx, y_prev, cx, y, color="ink")
                color = {"self": "w", "cross": "q", "ffn": "ffn", "ln": "norm"}[kind]
                s.box(cx - bw / 2, y, bw, bh if kind != "ln" else 0.85, label, color=color, sub=sub, size=10)
                y_prev = y + (bh if kind != "ln" else 0.85)
        return y_prev

    steps = [("self", 2.0, "masked self-attention", "q, k, v from y"), ("plus", 3.9, "", ""),
             ("ln", 4.65, "LayerNorm  norm1", None),
             ("cross", 6.4, "cross-attention", "q from the decoder; k, v from memory"), ("plus", 8.3, "", ""),
             ("ln", 9.05, "LayerNorm  norm2", None),
             ("ffn", 10.8, "feed-forward", "D → d_ff → D, each position alone"), ("plus", 12.7, "", ""),
             ("ln", 13.45, "LayerNorm  norm3", None)]
    top = column(steps)
    s.arrow(cx, top, cx, 15.0, color="ink")
    s.box(cx - 2.2, 15.0, 4.4, 0.85, "out   (B, T, D)", color="out", size=10)
    _residual(s, cx, 1.55, cx - 4.0, 3.9, cx, r)
    _residual(s, cx, 5.95, cx - 4.0, 8.3, cx, r)
    _residual(s, cx, 10.35, cx - 4.0, 12.7, cx, r)
    s.text(cx - 4.2, 2.8, "residual", size=9, color="x", rotation=90)

    # causal mask beside the self-attention
    T = 4
    mx, my, c = 15.2, 1.3, 0.42
    s.grid(mx, my, T, T, cell=c, color="mask", values=[[j <= i for j in range(T)] for i in range(T)],
           label="tgt_mask", shape="(T, T): causal")
    s.arrow(mx - 0.1, my + T * c / 2 + 0.3, cx + bw / 2 + 0.05, 2.55, color="mask")
    # memory and the cross-attention weights
    s.grid(24.0, 6.3, 3, 4, cell=0.45, color="x", label="memory", shape="(B, S, D), from the encoder")
    s.arrow(23.9, 7.0, cx + bw / 2 + 0.05, 7.0, color="k", lw=2.0, label="keys and values", label_dy=0.3)
    w = [[0.80, 0.10, 0.10], [0.05, 0.15, 0.80], [0.10, 0.75, 0.15], [0.20, 0.20, 0.60]]
    s.grid(16.0, 9.3, 4, 3, cell=0.45, values=w, cmap="Purples", vmax=1.0, label="weights",
           shape=None)
    s.text(17.7, 9.0, "(T, S): one distribution over\nthe source words per position", size=8, color="soft",
           ha="left")
    s.arrow(cx + bw / 2 + 0.05, 7.35, 15.9, 9.6, color="w", rad=0.1)
    s.text(18.0, 6.3, "memory_mask (B, 1, 1, S): the source padding", size=9, color="mask")
    s.text(15.5, 14.1, "pre-norm: each LayerNorm moves to its sublayer's input,\nx + f(LN(x)), as in lesson 07",
           size=9, color="norm", ha="left")
    return s


@diagram(L, "l08-beam-tree", alt="""Beam search with beam size k = 2 on the lesson's table model, left to right,
one column per step, each node a prefix with its log-probability. Step 1 from <bos>: "a" (-0.69) and "b" (-0.80)
are kept, "<eos>" (-3.00) is pruned. Step 2: of all extensions, "b b" (-0.90) and "a <eos>" (-0.99) are the best two;
"a <eos>" ends with <eos>, so it is finished and leaves the beam for good, and "a a", "a b" (-2.73) and "b <eos>"
(-3.79) are pruned. Step 3: one place is left (k minus one finished), kept by "b b b" (-1.01); "b b <eos>" (-3.90) is
pruned. Step 4: "b b b <eos>" (-1.12) is kept and finishes; no hypothesis is live, so the search stops. The two
finished sentences are ranked by log P divided by the GNMT length penalty ((5 + |Y|) / 6) to the power alpha: with
alpha = 0, "a <eos>" wins (-0.99 against -1.12); with alpha = 0.6, "b b b <eos>" wins (-0.87 against -0.91).""")
def beam_tree():
    s = Sheet(38, 13.6, title="Beam search, k = 2: keep the best k − (finished) candidates; a finished one leaves the "
                               "beam for good")
    nw, nh = 3.6, 0.9
    cols = {0: 0.6, 1: 5.4, 2: 10.4, 3: 15.4, 4: 20.4}

    def node(step, y, text, logp, kind):
        x = cols[step]
        color = {"live": "x", "done": "out", "pruned": "neutral", "root": "x"}[kind]
        s.box(x, y, nw, nh, f"{text}   {logp}" if logp else text, color=color, size=9, dashed=kind == "pruned")
        return (x, y)

    def edge(a, b, kind):
        s.arrow(a[0] + nw, a[1] + nh / 2, b[0], b[1] + nh / 2, color="soft" if kind == "pruned" else "ink",
                dashed=kind == "pruned", lw=1.0 if kind == "pruned" else 1.5)

    for step, head in ((1, "step 1: keep 2"), (2, "step 2: keep 2"), (3, "step 3: keep 2 − 1 = 1"),
                       (4, "step 4: keep 1")):
        s.text(cols[step] + nw / 2, 12.4, head, size=9, color="soft")
    root = node(0, 6.3, "<bos>   0", "", "root")
    a = node(1, 9.3, "a", "−0.69", "live")
    b = node(1, 5.3, "b", "−0.80", "live")
    e1 = node(1, 1.6, "<eos>", "−3.00", "pruned")
    for n, k in ((a, "live"), (b, "live"), (e1, "pruned")):
        edge(root, n, k)
    ae = node(2, 11.0, "a <eos>", "−0.99", "done")
    aa = node(2, 9.6, "a a", "−2.73", "pruned")
    ab = node(2, 8.3, "a b", "−2.73", "pruned")
    bb = node(2, 5.3, "b b", "−0.90", "live")
    be = node(2, 3.9, "b <eos>", "−3.79", "pruned")
    for n, k in ((ae, "done"), (aa, "pruned"), (ab, "pruned")):
        edge(a, n, k)
    for n, k in ((bb, "live"), (be, "pruned")):
        edge(b, n, k)
    s.text(cols[2] + nw + 0.2, 11.45, "finished:\nleaves the beam", size=8, color="out", ha="left")
    bbb = node(3, 5.3, "b b b", "−1.01", "live")
    bbe = node(3, 3.9, "b b <eos>", "−3.90", "pruned")
    edge(bb, bbb, "live")
    edge(bb, bbe, "pruned")
    bbbe = node(4, 5.3, "b b b <eos>", "−1.12", "done")
    bbba = node(4, 3.9, "b b b a", "−4.01", "pruned")
    edge(bbb, bbbe, "done")
    edge(bbb, bbba, "pruned")
    s.text(cols[4] + nw / 2, 2.9, "no live hypothesis: stop", size=9, color="soft")
    s.text(11.0, 0.6, "teal: live · red: finished · dashed: pruned; numbers: log P(prefix | x), summed over the steps",
           size=9, color="soft")

    # the final ranking
    tx = 25.4
    s.text(tx + 5.8, 10.9, "rank the finished ones by", size=10, weight="bold")
    s.text(tx + 5.8, 10.1, "$\\mathrm{score} = \\log P(Y\\,|\\,x)\\ /\\ ((5 + |Y|)/6)^{\\alpha}$", size=11)
    rows = [("", "log P", "|Y|", "α = 0", "lp(α = 0.6)", "α = 0.6"),
            ("a <eos>", "−0.99", "2", "−0.99 ★", "1.10", "−0.91"),
            ("b b b <eos>", "−1.12", "4", "−1.12", "1.28", "−0.87 ★")]
    xs = [tx + 0.2, tx + 3.5, tx + 4.9, tx + 6.4, tx + 8.5, tx + 10.6]
    for i, row in enumerate(rows):
        y = 8.8 - i * 1.0
        for j, cell in enumerate(row):
            s.text(xs[j], y, cell, size=9, weight="bold" if i == 0 else "normal",
                   color="out" if "★" in cell else "ink", ha="left" if j == 0 else "center")
    s.line([tx, tx + 11.8], [8.35, 8.35], color="soft")
    s.text(tx + 5.8, 5.6, "★ the sentence returned first", size=9, color="soft")
    s.text(tx + 5.8, 4.6, "without the penalty the short sentence wins;\nwith it the longer one does", size=9,
           color="soft")
    return s

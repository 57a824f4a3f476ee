"""Lesson 10: BERT's input (three embeddings summed), the 80/10/10 corruption of the selected 15 %, and the
next-sentence pairs."""

from __future__ import annotations

from course.tools.learner.lessons import diagram, front
from course.tools.learner.draw import Sheet

L = "10_bert"

front(L, level="optional", part="Beyond the core", lessons=("01_attention_pooling", "07_transformer_block"),
      needs="from them, the tweets, attention pooling and the post-norm encoder block; the padding mask of lesson 05; "
            "cross-entropy with `ignore_index=-100`; PyTorch's `nn.TransformerEncoderLayer`",
      objectives=[
          "Write BERT's masked-language-model corruption (15 % of the ordinary tokens, then 80 % `[MASK]`, 10 % a "
          "random token, 10 % unchanged) and the next-sentence pairs, and explain why each rule is there.",
          "Build BERT's input layer (token + segment + position embeddings) and the whole model with its MLM and "
          "NSP heads, equal to `transformers`' `BertForPreTraining`.",
          "Pre-train a small BERT from scratch and read both tasks against their baselines (chance, a unigram "
          "guess).",
          "Measure what makes an embedding contextual: the same word's vectors before and after the encoder, "
          "against an untrained encoder.",
          "Fine-tune the `[CLS]` vector on tweets whose meaning depends on word order, against BERT trained from "
          "scratch and lesson 01's attention pooling, at equal steps and each at its own learning rate.",
      ],
      standard_minutes=5.7,
      runs_long="pre-training (1 500 steps) and the fine-tuning runs (a learning-rate sweep, then three seeds for "
                "each of three models) take about 6 minutes in the standard profile on a laptop CPU, longer if the "
                "machine is busy. The smoke profile runs the whole lesson in under a minute.")

MASK_FILL = "#BDBDBD"                 # the [MASK] token: the grey of masks, darker than an ordinary token's box
RANDOM = "#C2185B"                    # a random replacement token (magenta: no other meaning in the course)
SEGMENT = "#8C9A3C"                   # segments: a colour of their own (olive), beside teal tokens and yellow positions


def _tokens(s: Sheet, x: float, y: float, words, *, w: float = 2.0, h: float = 0.75, color="x", size: int = 10,
            colors=None, dashed=None):
    """A row of token boxes, left edges at x, x + w, ...; returns the centres."""
    centres = []
    for t, word in enumerate(words):
        c = colors[t] if colors else color
        s.box(x + t * w, y, w - 0.2, h, word, color=c, size=size, round_=0.08,
              dashed=bool(dashed and dashed[t]))
        centres.append(x + t * w + (w - 0.2) / 2)
    return centres


PAIR = ["[CLS]", "drank", "the", "coffee", "[SEP]", "taste", "great", "[SEP]"]
SEGMENTS = [0, 0, 0, 0, 0, 1, 1, 1]


@diagram(L, "l10-embeddings", alt="""BERT's input for the pair "drank the coffee" and "taste great", fed as CLS drank
the coffee SEP taste great SEP: eight tokens, positions 0 to 7. Bottom row: the token ids, (B, T). Above each
token, three rows of embedding vectors are added, each of shape (B, T, D): the token embedding E_token of the id, one row
of a (V, D) table; the segment embedding, E_A for the five tokens of CLS and sentence A with its SEP (segment id
0) and E_B for sentence B and its SEP (segment id 1), rows of a (2, D) table; and the position embedding E_0 to
E_7, rows of a learned (max_len, D) table, counted over the whole sequence, so that sentence B's first word is at
position 5, not 0. The sum goes through a LayerNorm (eps 1e-12) and dropout, giving x, (B, T, D), the input of the
encoder. The CLS position's final vector later feeds the next-sentence head.""")
def embeddings():
    s = Sheet(30, 9.4, title="BERT's input: token + segment + position embeddings, summed per token, then a "
                              "LayerNorm")
    T, w, x0 = len(PAIR), 2.55, 6.4
    xs = _tokens(s, x0, 1.5, PAIR, w=w, color="neutral")
    s.text(x0 - 0.4, 1.87, "ids  (B, T)", size=9, color="soft", ha="right")
    rows = [("token", "x", [f"$E_{{\\mathrm{{{p.strip('[]')}}}}}$" for p in PAIR], "E_token: (V, D)"),
            ("segment", SEGMENT, ["$E_A$" if g == 0 else "$E_B$" for g in SEGMENTS], "E_segment: (2, D)"),
            ("position", "pos", [f"$E_{t}$" for t in range(T)], "E_position: (max_len, D)")]
    for r, (name, color, marks, shape) in enumerate(rows):
        y = 3.0 + r * 1.65
        _tokens(s, x0, y, marks, w=w, color=color, size=10)
        s.text(x0 - 0.4, y + 0.5, name, size=10, weight="bold", ha="right",
               color=color if color in ("x", "pos") else "ink")
        s.text(x0 - 0.4, y + 0.12, shape, size=8, color="soft", ha="right")
        if r:
            for cx in xs:
                s.text(cx, y - 0.42, "+", size=13, weight="bold")
    for cx in xs:
        s.arrow(cx, 2.25, cx, 2.95, color="soft", lw=1.0)
    s.text(x0 + T * w + 0.1, 3.0 + 2 * 1.65 + 0.37, "B's first word:\n$E_5$, not $E_0$", size=8, color="soft",
           ha="left")
    s.text(x0 + T * w + 0.1, 3.0 + 1.65 + 0.37, "one vector per\nsentence", size=8, color="soft", ha="left")
    s.text(x0 + T * w + 0.1, 3.0 + 0.37, "each row of\nvectors: (B, T, D)", size=8, color="soft", ha="left")
    # the sum, the LayerNorm, the output
    top = 3.0 + 2 * 1.65 + 0.75
    for cx in xs:
        s.arrow(cx, top + 0.05, cx, top + 0.75, color="ink", lw=1.2)
    s.box(x0, top + 0.8, T * w - 0.2, 0.9, "LayerNorm (eps 1e-12), dropout   →   x  (B, T, D), the encoder's input",
          color="norm", size=10)
    # brackets under the tokens: sentence A and sentence B
    ya = 1.15
    s.line([xs[0] - 1.05, xs[4] + 1.05], [ya, ya], color=SEGMENT, lw=2.0)
    s.text((xs[0] + xs[4]) / 2, ya - 0.45, "segment id 0: [CLS], sentence A and its [SEP] (positions 0 to 4)", size=9,
           color=SEGMENT)
    s.line([xs[5] - 1.05, xs[7] + 1.05], [ya, ya], color=SEGMENT, lw=2.0)
    s.text((xs[5] + xs[7]) / 2, ya - 0.45, "segment id 1: sentence B and its [SEP] (5 to 7)", size=9, color=SEGMENT)
    return s


MASKED = ["[CLS]", "watched", "the", "movie", "at", "cinema", "not", "boring", ".", "[SEP]"]
# what happens to each position: None (not selected), "mask", "random", "same"; special tokens are never selected
ACTION = [None, None, None, "mask", None, "random", None, "same", None, None]


@diagram(L, "l10-masking", alt="""BERT's masked-language-model corruption, in two parts. Left: of all the ordinary
tokens (never CLS, SEP or padding), 15 % are selected, drawn as a thin slice of a bar; the selected 15 % are
split again: 80 % are replaced by MASK, 10 % by a random token from the vocabulary, and 10 % are left unchanged.
Right, an example: the input CLS watched the movie at cinema not boring . SEP with three tokens selected:
"movie" becomes MASK, "cinema" becomes a random token, "gym", and "boring" stays "boring". The labels row holds
the original token at exactly those three positions, movie, cinema and boring, and -100 (ignored by the loss)
everywhere else, CLS and SEP included. The model must predict all three, the unchanged one too, so it cannot
assume that only MASK positions matter.""")
def masking():
    s = Sheet(33, 10.4, title="Masked language modelling: select 15 % of the ordinary tokens, then corrupt them 80 / 10 "
                              "/ 10")
    # left: the proportions
    bx, by, bw = 1.5, 1.6, 1.4
    s.box(bx, by, bw, 7.2, "", color="neutral", round_=0.05)
    s.box(bx, by + 7.2 * 0.85, bw, 7.2 * 0.15, "", color="out", round_=0.02)
    s.text(bx + bw / 2, by + 7.2 * 0.42, "85 %\nnot\nselected\n\nlabel\n−100", size=9, color="soft")
    s.text(bx + bw / 2, by + 7.2 + 0.45, "ordinary tokens", size=9, weight="bold")
    s.text(bx + bw / 2, by - 0.45, "[CLS], [SEP], padding:\nnever selected", size=8, color="soft")
    sx, sy, sh = 5.6, 1.6, 7.2
    s.arrow(bx + bw + 0.05, by + 7.2 * 0.925, sx - 0.1, sy + sh - 0.3, color="out", rad=-0.1)
    s.text(bx + bw + 1.0, by + 7.2 + 0.05, "15 %", size=10, color="out", weight="bold")
    for frac, y0, label, color in ((0.8, sy + sh * 0.2, "80 %: [MASK]", "mask"),
                                   (0.1, sy + sh * 0.1, "10 %: a random token", RANDOM),
                                   (0.1, sy, "10 %: unchanged", "x")):
        s.box(sx, y0, bw, sh * frac, "", color=color, round_=0.03, fill=MASK_FILL if color == "mask" else None)
        s.text(sx + bw + 0.25, y0 + sh * frac / 2, label, size=9, ha="left")
    s.text(sx + bw / 2, sy + sh + 0.45, "the selected 15 %", size=9, weight="bold")
    s.text(sx + 1.9, sy - 0.45, "all of them keep their label", size=8, color="soft")
    # right: the example
    ex, w = 11.6, 2.05
    s.text(ex - 0.3, 8.65, "input", size=9, color="soft", ha="right")
    xs = _tokens(s, ex, 8.3, MASKED, w=w, color="neutral", size=9)
    corrupted = [{"mask": "", "random": "gym", "same": MASKED[t]}.get(a, MASKED[t]) for t, a in enumerate(ACTION)]
    colors = [{"mask": "mask", "random": RANDOM, "same": "x"}.get(a, "neutral") for a in ACTION]
    for t, (cx, a) in enumerate(zip(xs, ACTION)):
        s.arrow(cx, 8.25, cx, 6.75, color="out" if a else "soft", lw=1.6 if a else 0.8)
    s.text(ex - 0.3, 6.32, "inputs", size=9, color="soft", ha="right")
    _tokens(s, ex, 5.95, corrupted, w=w, size=9, colors=colors)
    s.box(ex + 3 * w, 5.95, w - 0.2, 0.75, "[MASK]", color="mask", fill=MASK_FILL, size=9, round_=0.08, weight="bold")
    labels = [MASKED[t] if a else "−100" for t, a in enumerate(ACTION)]
    s.text(ex - 0.3, 4.52, "labels", size=9, color="soft", ha="right")
    _tokens(s, ex, 4.15, labels, w=w, size=9, colors=["out" if a else "neutral" for a in ACTION])
    for cx, a in zip(xs, ACTION):
        if a:
            s.text(cx + 0.12, 7.5, {"mask": "[MASK]", "random": "random", "same": "kept"}[a], size=8, color="out",
                   ha="left")
    s.text(ex + 10 * w / 2, 2.6, "the loss is computed at the three labelled positions only (F.cross_entropy ignores −100),",
           size=9, color="soft")
    s.text(ex + 10 * w / 2, 2.0, "the kept one included: any token may be one the model must check", size=9,
           color="soft")
    s.text(ex + 10 * w / 2, 1.0, "why not always [MASK]? fine-tuning inputs have no [MASK]: the model must keep a "
           "useful vector at every position", size=9, color="soft")
    return s


@diagram(L, "l10-nsp", alt="""Next-sentence pairs from three two-sentence documents. For every sentence that has a
next sentence, here the first sentence of each document, a fair coin decides. Heads: the pair is that sentence and
the sentence that follows it in the same document, labelled is_next = True (class 0 of the NSP head, as in
transformers). Tails: the second sentence is drawn at random from a different document, labelled is_next = False
(class 1); it is never taken from the sentence's own document, which would share its topic and could even be the
true next sentence. Each pair is fed as CLS A SEP B SEP, and the NSP head reads the pooled vector of the CLS
position.""")
def nsp():
    s = Sheet(30, 10.0, title="Next-sentence pairs: a fair coin per sentence; a negative's B always comes from another "
                              "document")
    docs = [("drank the coffee at cafe .", "taste great ."), ("charged the phone at shop .", "battery never good ."),
            ("watched the movie at cinema .", "plot brilliant .")]
    for k, (a, b) in enumerate(docs):
        y = 7.6 - k * 2.7
        s.box(0.6, y - 0.9, 8.6, 2.05, "", color="neutral", round_=0.1)
        s.text(0.9, y + 0.85, f"document {k + 1}", size=8, color="soft", ha="left")
        s.box(0.9, y, 8.0, 0.65, a, color="x", size=9)
        s.box(0.9, y - 0.75, 8.0, 0.65, b, color="x", size=9)
    # pairs
    px = 13.8
    s.text(px + 7.0, 9.0, "the pairs make_nsp_pairs returns", size=10, weight="bold")
    pairs = [(docs[0][0], docs[0][1], True, "heads: its own next sentence"),
             (docs[1][0], docs[2][1], False, "tails: B drawn from another document (here document 3)"),
             (docs[2][0], docs[0][0], False, "tails: B drawn from another document (here document 1)")]
    for k, (a, b, nxt, why) in enumerate(pairs):
        y = 7.55 - k * 2.7
        s.box(px, y, 6.0, 0.65, f"A: {a}", color="x", size=8)
        s.box(px + 6.2, y, 4.8, 0.65, f"B: {b}", color="x" if nxt else "neutral", size=8, dashed=not nxt)
        s.box(px + 11.2, y, 3.2, 0.65, f"is_next = {nxt}", color="ok" if nxt else "bad", size=8)
        s.text(px + 8.6, y - 0.4, why + (" (class 0)" if nxt else " (class 1)"), size=8, color="soft")
        s.arrow(9.3, 7.6 - k * 2.7 + 0.3, px - 0.1, y + 0.3, color="soft")
    s.text(px + 7.0, 0.55, "each pair is fed as [CLS] A [SEP] B [SEP]; the NSP head reads the pooled [CLS] vector",
           size=9, color="soft")
    s.text(4.9, 0.55, "only a sentence with a next one makes a pair", size=8, color="soft")
    return s

"""Lesson 09: a loss at every position (the causal mask and the targets shifted by one), the GPT's layout with its
tied head, and the KV cache growing during generation."""

from __future__ import annotations

from course.tools.learner.lessons import diagram, front
from course.tools.learner.draw import Sheet

L = "09_language_model"

front(L, level="core", part="Transformers", lessons=("05_self_attention", "07_transformer_block", "08_transformer"),
      needs="from them, the causal mask, the pre-norm block and the targets shifted by one; cross-entropy in nats; "
            "drawing from a categorical distribution; PyTorch's `F.scaled_dot_product_attention`",
      objectives=[
          "Write the language-modelling loss that scores every position of a window at once, and explain why the "
          "causal mask makes those T − 1 predictions honest.",
          "Write temperature and top-k sampling that draw every random number from a given generator.",
          "Build a GPT (causal multi-head attention, pre-norm blocks, a tied head) equal to `transformers`' "
          "`GPT2LMHeadModel`, with a key/value cache that gives exactly the tokens of uncached generation.",
          "Build the GPT up one part at a time at an equal budget, and measure what heads, the feed-forward layer, "
          "residual connections and LayerNorm each add to the validation loss.",
          "Measure what the cache saves, what a loss at every position buys over one per window, and how a GRU of "
          "the same size compares.",
      ],
      standard_minutes=4.6,
      runs_long="the standard profile trains the GPT (about 30 s alone), five smaller variants of it for the ladder "
                "(about 1½ min), a GRU and a GPT scored on the last position only, and times generation with and "
                "without the cache: about 4½ minutes on a laptop CPU, longer if the machine is busy. The smoke "
                "profile runs the whole lesson in seconds.")


# -- helpers -----------------------------------------------------------------------------------------------

def _tokens(s: Sheet, x: float, y: float, chars, *, w: float = 1.5, h: float = 0.8, color: str = "x",
            size: int = 11, dashed_last: bool = False):
    """A row of character boxes, one per position, left edges at x, x + w, ...; returns the centres."""
    centres = []
    for t, ch in enumerate(chars):
        dashed = dashed_last and t == len(chars) - 1
        s.box(x + t * w, y, w - 0.2, h, ch, color="neutral" if dashed else color, size=size, round_=0.08,
              dashed=dashed)
        centres.append(x + t * w + (w - 0.2) / 2)
    return centres


SHOWN = ["d", "e", "f", "␣", "f", "("]          # "def f(": one window of T = 6 characters


@diagram(L, "l09-shifted-targets", alt="""One window of T = 6 characters, "def f(", read by the GPT in a single
forward pass. Bottom: the input idx, of shape (B, T), one character per position t = 0 to 5. The GPT's attention
is causal: the mask on the right, a lower-triangular (T, T) grid of queries by keys, lets position i read keys
j up to i and never a later one. Above the model, the logits (B, T, V): one score per vocabulary character at
every position. Top: the targets are the same window shifted left by one (idx from position 1 on), of shape (B, T - 1): position
0 ("d") is scored on "e", position 1 on "f", and so on, up to position 4 ("f"), scored on "(". Each position gives
one cross-entropy term, and the loss is their mean over the B (T - 1) predictions. The last position, "(", has no
next character inside the window, so its logits are not scored. Because position t cannot see position t + 1,
none of the five predictions can copy its answer.""")
def shifted_targets():
    s = Sheet(29, 13.2, title="A loss at every position: one pass, T − 1 predictions, each scored on the next "
                              "character")
    T, w, x0 = len(SHOWN), 1.9, 3.0
    # inputs
    xs = _tokens(s, x0, 0.9, SHOWN, w=w)
    s.text(x0 - 0.3, 1.3, "idx\n(B, T)", size=9, color="soft", ha="right")
    for t, cx in enumerate(xs):
        s.text(cx, 0.45, f"t = {t}", size=8, color="soft")
        s.arrow(cx, 1.7, cx, 2.55, color="ink")
    # the model
    s.box(x0 - 0.1, 2.55, T * w, 2.0, "GPT: causal attention in every block", sub="position t reads tokens 0 … t",
          color="w", size=11)
    # logits
    for t, cx in enumerate(xs):
        s.arrow(cx, 4.55, cx, 5.25, color="ink")
        s.grid(cx - 0.3, 5.3, 4, 1, cell=0.3, color="out")
    s.text(x0 - 0.3, 5.9, "logits\n(B, T, V)", size=9, color="soft", ha="right")
    # targets: the window shifted left by one
    targets = SHOWN[1:] + ["?"]
    ts = _tokens(s, x0, 8.3, targets, w=w, color="out", dashed_last=True)
    s.text(x0 - 0.3, 8.7, "targets\nidx[:, 1:]\n(B, T − 1)", size=9, color="soft", ha="right")
    for t, cx in enumerate(ts[:-1]):
        s.arrow(cx, 6.6, cx, 8.25, color="out")
        s.text(cx + 0.08, 7.45, f"$\\ell_{t}$", size=10, color="out", ha="left")
    s.text(ts[-1], 7.45, "not\nscored", size=8, color="soft")
    s.text(ts[-1], 9.65, "no next char\nin the window", size=8, color="soft")
    s.arrow(x0 + T * w + 1.9, 8.7, x0 + T * w + 0.1, 8.7, color="soft")
    s.text(x0 + T * w + 2.0, 8.7, "idx moved one\nstep to the left", size=9, color="soft", ha="left")
    s.text(x0 + T * w / 2 - 0.2, 10.75, "$\\mathcal{L} = \\frac{1}{B\\,(T-1)} \\sum_{b}\\sum_{t=0}^{T-2} "
           "-\\log\\,\\mathrm{softmax}(\\mathrm{logits}[b, t])_{\\,\\mathrm{idx}[b,\\,t+1]}$", size=12)
    s.text(x0 + T * w / 2 - 0.2, 11.8, "position t predicts the character at t + 1: the same text, moved one step left",
           size=9, color="soft")
    # the causal mask
    mx, my, c = 21.0, 2.2, 0.95
    mask = [[j <= i for j in range(T)] for i in range(T)]
    s.grid(mx, my, T, T, cell=c, color="mask", values=mask, shape="(T, T): True where key j ≤ query i")
    s.text(mx + T * c / 2, my + T * c + 1.75, "the causal mask", size=11, weight="bold")
    for t, ch in enumerate(SHOWN):
        s.text(mx - 0.35, my + (T - 1 - t + 0.5) * c, f"{t} {ch}", size=9, color="soft", ha="right")
        s.text(mx + (t + 0.5) * c, my + T * c + 0.15, ch, size=9, color="soft", va="bottom")
    s.text(mx - 1.5, my + T * c / 2, "queries i", size=9, color="soft", rotation=90)
    s.text(mx + T * c / 2, my + T * c + 0.95, "keys j", size=9, color="soft")
    s.text(mx + T * c / 2, 1.0, "row 1 (\"e\") reads \"d\" and \"e\"; its target \"f\"\nsits in column 2, which "
           "the mask hides", size=9, color="soft")
    return s


def _rows(s: Sheet, x, y, n_old, n_new, cols, cmap, *, cell=0.38, label=None, shape=None, size=9):
    """A tensor of n_old + n_new rows (positions) by cols, the n_old cached rows light, the n_new computed ones dark."""
    values = [[0.3] * cols for _ in range(n_old)] + [[0.8] * cols for _ in range(n_new)]
    return s.grid(x, y, n_old + n_new, cols, cell=cell, values=values, cmap=cmap, vmax=1.0, label=label, shape=shape,
                  size=size)


@diagram(L, "l09-kv-cache", alt="""Two ways to produce the next token at step t, drawn for one layer with t = 4 tokens
already there. Top, without the cache: the whole prefix of t + 1 tokens, (B, t + 1, D), goes through qkv again; q, k
and v are each (B, H, t + 1, Dh), all of them computed again (dark); the scores are a (t + 1) by (t + 1) causal
matrix, and only its last row, the new token's, decides the next token: the other t rows were already computed at
earlier steps. Bottom, with the cache: only the new token, (B, 1, D), goes through qkv; its query is (B, H, 1, Dh);
its key and value are appended as one new dark row below the cached keys and values (light), which grow from
(B, H, t, Dh) to (B, H, t + 1, Dh) along the time axis (dim 2); the scores are one row, (B, H, 1, t + 1), with no
mask, since the new token may see every key; the weights times the values give (B, H, 1, Dh). On the right, the
cache over four steps: 1, 2, 3, then 4 rows of keys, one row added per generated token. Per step and layer the
uncached way puts t + 1 tokens through qkv, proj and the MLP and computes (t + 1) squared scores, the cached way one
token and t + 1 scores; the tokens generated are the same.""")
def kv_cache():
    s = Sheet(31, 12.9, title="Generation with a KV cache: each step computes q, k, v for the new token only, and the "
                              "cache grows by one row")
    c, Dh, t = 0.38, 4, 4
    # -- without the cache ------------------------------------------------------------------------------
    y0 = 7.3
    s.text(0.5, 11.9, "without the cache: step t reads the whole prefix again", size=11, weight="bold", ha="left")
    s.box(0.5, y0 + 1.5, 3.4, 1.1, "prefix", sub="(B, t + 1, D)", color="x", size=10)
    s.arrow(3.95, y0 + 2.05, 5.3, y0 + 2.05, "qkv", color="ink", label_dy=0.3)
    for k_, (name, cmap) in enumerate((("q", "Blues"), ("k", "Oranges"), ("v", "Greens"))):
        _rows(s, 5.5 + k_ * 2.2, y0 + 0.9, 0, t + 1, Dh, cmap, cell=c, label=name)
    s.text(8.3, y0 + 0.35, "each (B, H, t + 1, Dh): all computed again", size=9, color="soft")
    T1 = t + 1
    tri = [[(0.35 if i < T1 - 1 else 0.85) if j <= i else float("nan") for j in range(T1)] for i in range(T1)]
    s.arrow(12.4, y0 + 2.05, 14.0, y0 + 2.05, color="ink")
    s.grid(14.2, y0 + 0.9, T1, T1, cell=c, values=tri, cmap="Purples", vmax=1.0, label="scores")
    s.text(14.2 + T1 * c / 2, y0 + 0.35, "(B, H, t + 1, t + 1), causal", size=9, color="soft")
    s.arrow(16.3, y0 + 1.1, 17.9, y0 + 1.1, color="w")
    s.text(18.1, y0 + 1.1, "only the last row is new: it gives the next token;\nthe other t rows were computed at "
           "earlier steps", size=9, color="soft", ha="left")
    s.text(18.1, y0 + 2.6, "work per step and layer: t + 1 tokens through\nqkv, proj and the MLP, and (t + 1)² scores", size=10, ha="left")
    s.line([0.5, 30.5], [7.05, 7.05], color="neutral", dashed=True)
    # -- with the cache ---------------------------------------------------------------------------------
    y1 = 1.2
    s.text(0.5, 6.4, "with the cache: step t computes one new row, appends it, and reads the rest", size=11,
           weight="bold", ha="left")
    s.box(0.5, y1 + 1.5, 3.4, 1.1, "new token", sub="x_t  (B, 1, D)", color="x", size=10)
    s.arrow(3.95, y1 + 2.05, 5.3, y1 + 2.05, "qkv", color="ink", label_dy=0.3)
    _rows(s, 5.5, y1 + 1.9, 0, 1, Dh, "Blues", cell=c, label="q")
    s.text(5.5 + Dh * c / 2, y1 + 1.45, "(B, H, 1, Dh)", size=8, color="soft")
    _rows(s, 8.1, y1 + 0.4, t, 1, Dh, "Oranges", cell=c, label="K")
    _rows(s, 10.5, y1 + 0.4, t, 1, Dh, "Greens", cell=c, label="V")
    s.text(10.0, y1 - 0.15, "cache (B, H, t, Dh) + the new row → (B, H, t + 1, Dh)", size=9, color="soft")
    s.text(13.0, y1 + 0.6, "← appended\n    (dim 2)", size=8, color="soft", ha="left")
    s.arrow(7.1, y1 + 2.1, 15.0, y1 + 2.5, color="q", rad=-0.3)
    s.text(12.4, y1 + 3.75, "$q\\,K^{\\top} / \\sqrt{d_k}$", size=10, color="q")
    s.grid(15.2, y1 + 2.2, 1, T1, cell=c, values=[[0.85] * T1], cmap="Purples", vmax=1.0, label="scores")
    s.text(15.2 + T1 * c / 2, y1 + 1.7, "(B, H, 1, t + 1): no mask,\nthe new token sees every key", size=8,
           color="soft")
    s.arrow(17.3, y1 + 2.4, 18.6, y1 + 2.4, "@ V", color="w", label_dy=0.3)
    _rows(s, 18.8, y1 + 2.2, 0, 1, Dh, "Reds", cell=c, label="out")
    s.text(18.8 + Dh * c / 2, y1 + 1.7, "(B, H, 1, Dh)", size=8, color="soft")
    s.text(17.3, y1 + 4.0, "work per step and layer: 1 token through\nqkv, proj and the MLP, and t + 1 scores", size=10, ha="left")
    # the cache over four steps
    gx = 23.4
    s.text(gx + 3.3, y1 + 2.2, "the cache K after\neach of four steps", size=9, color="soft")
    for n in range(1, 5):
        _rows(s, gx + (n - 1) * 1.95, y1 + 0.4, n - 1, 1, 3, "Oranges", cell=0.3)
        s.text(gx + (n - 1) * 1.95 + 0.45, y1 - 0.05, f"step {n}", size=8, color="soft")
    s.text(15.5, 0.25, "light: kept from earlier steps · dark: computed at this step · the tokens are the same either way",
           size=9, color="soft")
    return s


@diagram(L, "l09-gpt", alt="""The GPT of this lesson, read from the bottom up. The ids idx, (B, T), look up rows of the
token embedding tok_emb, a (V, D) table, and the learned positions 0 to T - 1 look up rows of pos_emb, a (block_size,
D) table; their sum, (B, T, D), is the residual stream. Then n_layers pre-norm blocks, each of two sublayers added to
the stream: ln1 and the causal multi-head attention, then ln2 and the feed-forward network fc (D to 4D), GELU, proj
(4D to D); every arrow on the stream carries (B, T, D). Beside the block, the attention in detail: qkv, one linear
layer D to 3D, gives q, k and v, split into H heads of shape (B, H, T, Dh) with Dh = D / H; causal scaled dot-product
attention per head; the heads merged back to (B, T, D); proj, D to D. At the top, the final LayerNorm ln_f and the
head, a linear layer D to V without bias, give the logits (B, T, V). The head's weight is the same (V, D) matrix as
tok_emb (tied, drawn as a dashed link): one table reads characters in and scores them out.""")
def gpt():
    s = Sheet(30, 18.0, title="The GPT: embeddings, n_layers pre-norm blocks on the residual stream, ln_f, and a head "
                              "tied to the embedding")
    cx, bw, r = 9.0, 6.4, 0.34
    s.box(cx - 2.2, 0.3, 4.4, 0.85, "idx   (B, T)", color="x", size=10)
    s.arrow(cx, 1.15, cx, 1.8, color="ink")
    s.box(cx - 3.6, 1.8, 3.4, 1.1, "tok_emb(idx)", sub="table (V, D)", color="x", size=10)
    s.box(cx + 0.2, 1.8, 3.4, 1.1, "pos_emb(0 … T−1)", sub="table (block_size, D)", color="pos", size=10)
    s.plus(cx, 3.5, r)
    s.arrow(cx - 1.9, 2.9, cx - r, 3.45, color="ink")
    s.arrow(cx + 1.9, 2.9, cx + r, 3.45, color="ink")
    s.text(cx + 0.6, 3.5, "(B, T, D)", size=9, color="soft", ha="left")
    # one block
    s.box(cx - 4.4, 4.3, 8.8, 7.9, "", color="neutral")
    s.text(cx - 4.2, 11.85, "Block  × n_layers (pre-norm)", size=10, weight="bold", ha="left")
    s.arrow(cx, 3.84, cx, 5.0, color="ink")
    s.box(cx - bw / 2, 5.0, bw, 0.75, "ln1  LayerNorm(D)", color="norm", size=9)
    s.arrow(cx, 5.75, cx, 6.2, color="ink")
    s.box(cx - bw / 2, 6.2, bw, 1.0, "attn: causal multi-head attention", sub="qkv → heads → SDPA → proj", color="w",
          size=9)
    s.plus(cx, 7.75, r)
    s.arrow(cx, 7.2, cx, 7.75 - r, color="ink")
    s.arrow(cx, 7.75 + r, cx, 8.5, color="ink")
    s.box(cx - bw / 2, 8.5, bw, 0.75, "ln2  LayerNorm(D)", color="norm", size=9)
    s.arrow(cx, 9.25, cx, 9.7, color="ink")
    s.box(cx - bw / 2, 9.7, bw, 1.0, "mlp: fc (D → 4D), GELU, proj (4D → D)", color="ffn", size=9)
    s.plus(cx, 11.2, r)
    s.arrow(cx, 10.7, cx, 11.2 - r, color="ink")
    # residual paths (teal) around each sublayer
    for y_from, y_to in ((4.6, 7.75), (8.15, 11.2)):
        s.line([cx, cx - 3.7], [y_from, y_from], color="x", lw=2.0)
        s.line([cx - 3.7, cx - 3.7], [y_from, y_to], color="x", lw=2.0)
        s.arrow(cx - 3.7, y_to, cx - r, y_to, color="x", lw=2.0)
    s.text(cx - 3.95, 6.0, "residual stream", size=8, color="x", rotation=90)
    s.text(cx + 4.6, 7.75, "x + attn(ln1(x))", size=9, color="soft", ha="left")
    s.text(cx + 4.6, 11.2, "x + mlp(ln2(x))", size=9, color="soft", ha="left")
    # top: ln_f and the tied head
    s.arrow(cx, 11.54, cx, 12.7, color="ink")
    s.box(cx - bw / 2, 12.7, bw, 0.75, "ln_f  LayerNorm(D)", color="norm", size=9)
    s.arrow(cx, 13.45, cx, 13.8, color="ink")
    s.box(cx - bw / 2, 13.8, bw, 1.0, "head: Linear(D, V), no bias", sub="head.weight is tok_emb.weight", color="out",
          size=9)
    s.arrow(cx, 14.8, cx, 15.4, color="ink")
    s.box(cx - 2.6, 15.4, 5.2, 0.85, "logits   (B, T, V)", color="out", size=10)
    # the tie, a dashed link on the left
    s.line([cx - bw / 2, cx - 6.0], [14.3, 14.3], color="out", dashed=True, lw=1.4)
    s.line([cx - 6.0, cx - 6.0], [14.3, 2.35], color="out", dashed=True, lw=1.4)
    s.arrow(cx - 6.0, 2.35, cx - 3.65, 2.35, color="out", dashed=True)
    s.text(cx - 6.3, 8.5, "tied: one (V, D) matrix", size=9, color="out", rotation=90)
    # the attention in detail
    ax = 19.0
    s.text(ax + 4.5, 16.3, "inside attn (shapes for one call)", size=10, weight="bold")
    s.box(ax + 2.5, 14.6, 4.0, 0.8, "x   (B, T, D)", color="x", size=9)
    s.arrow(ax + 4.5, 14.6, ax + 4.5, 13.95, "qkv: Linear(D, 3D)", color="ink", label_dx=2.0, label_dy=0.0)
    s.box(ax + 2.0, 13.1, 5.0, 0.8, "[q | k | v]   (B, T, 3D)", color="neutral", size=9)
    for k_, (name, col) in enumerate((("q", "q"), ("k", "k"), ("v", "v"))):
        gx = ax + 0.6 + k_ * 2.9
        s.arrow(ax + 4.5, 13.1, gx + 0.75, 12.25, color=col)
        s.grid(gx, 10.7, 4, 4, cell=0.38, color=col, label=None)
        s.text(gx + 0.76, 10.35, f"{name} (B, H, T, Dh)", size=8, color=col)
    s.text(ax + 4.5, 9.75, "split the D features into H heads of Dh = D / H", size=8, color="soft")
    s.arrow(ax + 4.5, 9.45, ax + 4.5, 8.75, color="ink")
    s.box(ax + 1.2, 7.75, 6.6, 1.0, "$\\mathrm{softmax}(q\\,k^{\\top} / \\sqrt{d_k} + \\mathrm{causal\\ mask})\\,v$",
          sub="per head: F.scaled_dot_product_attention",
          color="w", size=9)
    s.arrow(ax + 4.5, 7.75, ax + 4.5, 7.05, "(B, H, T, Dh)", color="ink", label_dx=1.2, label_dy=0.0)
    s.box(ax + 1.7, 6.25, 5.6, 0.8, "merge heads → (B, T, D)", color="neutral", size=9)
    s.arrow(ax + 4.5, 6.25, ax + 4.5, 5.6, color="ink")
    s.box(ax + 2.0, 4.8, 5.0, 0.8, "proj: Linear(D, D)", color="w", size=9)
    s.arrow(ax + 4.5, 4.8, ax + 4.5, 4.15, color="ink")
    s.box(ax + 2.5, 3.35, 4.0, 0.8, "out   (B, T, D)", color="out", size=9)
    s.line([cx + bw / 2, ax + 0.2], [6.7, 7.2], color="soft", dashed=True)
    return s


@diagram(L, "l09-ladder", alt="""The six rungs of the ladder, left to right, each read from the bottom up and each adding
one part to the one before; every rung starts with the token and position embeddings and ends with the head tied to
the token embedding. Rung 1: one causal attention head of width D. Rung 2: H heads of width D / H in its place.
Rung 3: a feed-forward network (D to 4D to D) after the attention. Rung 4: that attention and feed-forward pair
stacked n_layers times, each output replacing its input. Rung 5: the same stack with residual connections, drawn as
teal paths around each sublayer into a plus: each sublayer's output is added to its input. Rung 6: LayerNorms ln1
and ln2 before each sublayer and ln_f before the head: this is the lesson's GPT. All six train with the same steps,
windows, learning-rate schedule and seed.""")
def ladder():
    s = Sheet(31, 10.4, title="The ladder: each rung adds one part to the one before; rung 6 is your GPT")
    bw, gap, r = 3.5, 0.32, 0.26
    tall, short = 0.72, 0.5

    def unit(x, cx, y, boxes, residual):
        y_in = y
        for label, color, h in boxes:
            s.arrow(cx, y, cx, y + gap, color="ink", lw=1.0)
            y += gap
            s.box(x, y, bw, h, label, color=color, size=8)
            y += h
        if residual:
            s.arrow(cx, y, cx, y + gap + 0.05, color="ink", lw=1.0)
            y += gap + 0.05 + r
            s.plus(cx, y, r)
            side = x - 0.3
            s.line([cx, side], [y_in + gap * 0.5, y_in + gap * 0.5], color="x", lw=1.6)
            s.line([side, side], [y_in + gap * 0.5, y], color="x", lw=1.6)
            s.arrow(side, y, cx - r, y, color="x", lw=1.6)
            y += r
        return y

    def column(x, number, title, units, *, repeat=False, ln_f=False):
        cx = x + bw / 2
        s.text(cx, 0.95, f"{number}", size=12, weight="bold")
        s.text(cx, 0.4, title, size=9, color="soft")
        y = 1.6
        s.box(x, y, bw, short, "embeddings", color="x", size=8)
        y += short
        group_y = y + gap * 0.5
        for boxes, residual in units:
            y = unit(x, cx, y, boxes, residual)
        if repeat:
            s.box(x - 0.55, group_y, bw + 1.1, y - group_y + 0.12, "", color="soft", fill="none", lw=1.0,
                  dashed=True)
            s.text(x + bw + 0.8, (group_y + y) / 2, "× n_layers", size=8, color="soft", rotation=90)
            y += 0.12
        if ln_f:
            s.arrow(cx, y, cx, y + gap, color="ink", lw=1.0)
            y += gap
            s.box(x, y, bw, short, "ln_f", color="norm", size=8)
            y += short
        s.arrow(cx, y, cx, y + gap, color="ink", lw=1.0)
        y += gap
        s.box(x, y, bw, short, "head (tied)", color="out", size=8)

    attn1 = ("attention, 1 head", "w", tall)
    attnH = ("attention, H heads", "w", tall)
    ffn = ("feed-forward", "ffn", tall)
    ln1, ln2 = ("ln1", "norm", short), ("ln2", "norm", short)
    xs = [0.9 + k * 5.0 for k in range(6)]
    column(xs[0], 1, "one head", [([attn1], False)])
    column(xs[1], 2, "H heads", [([attnH], False)])
    column(xs[2], 3, "+ feed-forward", [([attnH, ffn], False)])
    column(xs[3], 4, "stacked", [([attnH, ffn], False)], repeat=True)
    column(xs[4], 5, "+ residuals", [([attnH], True), ([ffn], True)], repeat=True)
    column(xs[5], 6, "+ LayerNorm = your GPT", [([ln1, attnH], True), ([ln2, ffn], True)], repeat=True, ln_f=True)
    return s

"""Lesson 06: heads split and merged with every shape, what each head sees, and concatenate-then-project as a sum
over heads."""

from __future__ import annotations

from course.tools.learner.draw import Sheet
from course.tools.learner.lessons import diagram, front

L = "06_multi_head_attention"

front(L, level="core", part="Attention", lessons=("03_attention_scores", "05_self_attention"),
      needs="`view`, `reshape` and `transpose` of PyTorch tensors, and what contiguous memory means; batched "
            "matrix products; `nn.Linear`, `nn.Dropout`",
      objectives=[
          "Write `split_heads` and `merge_heads`, and explain why the transpose is needed on both sides.",
          "Write multi-head attention with all heads in one batched matrix product, equal to PyTorch's "
          "`nn.MultiheadAttention`, under the course's mask contract (True = may attend).",
          "Show that concatenating the heads and projecting with $W^O$ is a sum of one model per head.",
          "Measure, over seeds, whether more heads at the same $d_{model}$ help one attention layer, and read "
          "from the maps what each head attends to.",
      ],
      standard_minutes=0.65,
      runs_long="the head-count experiment trains 24 small models, about half a minute in all in the standard "
                "profile; everything else takes seconds.")


# -- 1. split, attend, merge ---------------------------------------------------------------------------------

@diagram(L, "l06-split-merge", alt="""Multi-head attention with the shape of every tensor, for H = 4 heads. The input
x of shape (B, T, D) goes through w_q (and likewise w_k and w_v) and stays (B, T, D). split_heads views it as (B, T,
H, Dh), each token's D features cut into H chunks of Dh = D / H, then transposes it to (B, H, T, Dh), so that the
head axis sits next to the batch axis. Attention runs in every head at once, as one batched matrix product: scores
of shape (B, H, T, T), divided by the square root of Dh, the head size d_k, a softmax over the keys, and a product
with the values, (B, H, T, Dh). merge_heads transposes back to (B, T, H, Dh) and reshapes to (B, T, H times Dh),
each token's heads side by side; w_o mixes them into the output, (B, T, D).""")
def split_merge():
    s = Sheet(33.6, 6.9, title="One projection, cut into H heads, attended in one batched product, glued back, "
                               "mixed by $W^O$ (H = 4)")
    blues = ["#1B3A6B", "#4C72B0", "#7D9FD3", "#A9C1E8"]        # head 0..3 of the queries
    greens = ["#1E5631", "#55A868", "#8CC79A", "#BFE3C6"]       # head 0..3 after attention: mixes of values
    c = 0.36
    y = 3.4
    s.grid(0.4, y, 4, 8, cell=c, color="x", label="x", shape="(B, T, D)")
    s.arrow(3.5, y + 0.72, 4.5, y + 0.72, "w_q", color="q", label_dy=0.3)
    x0 = 4.7
    for h in range(4):
        s.grid(x0 + h * 2 * c, y, 4, 2, cell=c, color=blues[h])
    s.text(x0 + 4 * c, y + 4 * c + 0.3, "q = w_q(x)", size=10, weight="bold", color="q")
    s.text(x0 + 4 * c, y - 0.3, "(B, T, D)", size=9, color="soft")
    s.text(x0 + 4 * c, y - 0.75, "head h owns features", size=8, color="soft")
    s.text(x0 + 4 * c, y - 1.1, "h·Dh … (h+1)·Dh − 1", size=8, color="soft")
    s.arrow(7.9, y + 0.72, 9.0, y + 0.72, "view", color="ink", label_dy=0.3)
    x1 = 9.2
    for h in range(4):
        s.grid(x1 + h * (2 * c + 0.12), y, 4, 2, cell=c, color=blues[h])
    s.text(x1 + 1.65, y + 4 * c + 0.3, "(B, T, H, Dh)", size=9.5, weight="bold")
    s.text(x1 + 1.65, y - 0.3, "the same memory,", size=8, color="soft")
    s.text(x1 + 1.65, y - 0.65, "relabelled", size=8, color="soft")
    s.arrow(12.8, y + 0.72, 14.3, y + 0.72, color="ink")
    s.text(13.55, y + 1.35, "transpose", size=8.5, color="soft")
    s.text(13.55, y + 1.0, "(1, 2)", size=8.5, color="soft")
    x2 = 14.6
    for h in range(4):
        yy = y - 1.6 + 0.95 * (3 - h)
        s.grid(x2 + 0.15 * h, yy, 4, 2, cell=0.2, color=blues[h])
        s.text(x2 + 0.15 * h + 0.55, yy + 0.4, f"head {h}", size=7, ha="left", color="soft")
    s.text(x2 + 0.9, y + 2.4, "(B, H, T, Dh)", size=9.5, weight="bold")
    s.text(x2 + 0.9, y - 1.95, "heads next to the batch", size=8, color="soft")
    s.arrow(16.9, y + 0.72, 17.9, y + 0.72, color="w")
    s.box(18.0, y - 0.75, 6.0, 2.9, "", color="w")
    s.text(21.0, y + 1.75, "attention in every head at once", size=9, weight="bold")
    s.text(21.0, y + 1.15, "scores $q k^{\\top} / \\sqrt{d_k}$: (B, H, T, T)", size=8.5)
    s.text(21.0, y + 0.6, "softmax over the keys", size=8.5)
    s.text(21.0, y + 0.05, "weights @ v: (B, H, T, Dh)", size=8.5)
    s.text(21.0, y - 0.45, "$d_k$ = Dh = D / H, the head size", size=8, color="soft")
    s.arrow(24.2, y + 0.72, 25.6, y + 0.72, color="ink")
    s.text(24.9, y + 0.3, "transpose,", size=8, color="soft")
    s.text(24.9, y - 0.05, "reshape", size=8, color="soft")
    x3 = 25.8
    for h in range(4):
        s.grid(x3 + h * 2 * c, y, 4, 2, cell=c, color=greens[h])
    s.text(x3 + 4 * c, y + 4 * c + 0.3, "merge_heads", size=10, weight="bold", color="v")
    s.text(x3 + 4 * c, y - 0.3, "(B, T, H·Dh)", size=9, color="soft")
    s.arrow(28.9, y + 0.72, 29.9, y + 0.72, "w_o", color="out", label_dy=0.3)
    s.grid(30.1, y, 4, 8, cell=c, color="out", label="out", shape="(B, T, D)")
    s.text(16.8, 0.55, "k = w_k(key) and v = w_v(value) are split the same way. A single view(B, H, T, Dh) without the "
                       "transpose, or a reshape without it when merging, has the right shape and mixes tokens.",
           size=9, color="soft")
    return s


# -- 2. what each head sees ----------------------------------------------------------------------------------

_WORDS = ["the", "dog", "chased", "the", "cat", "."]


def _pattern(kind):
    """An illustrative causal map: query i sees keys 0..i; a head whose target is not visible yet looks at itself."""
    T = len(_WORDS)
    rows = []
    for i in range(T):
        if kind == "broad":                                # spread evenly over everything so far
            rows.append([1.0 / (i + 1) if j <= i else 0.0 for j in range(T)])
            continue
        target = {"previous": max(i - 1, 0), "verb": 2, "noun": 1 if i < 4 else 4}[kind]
        target = target if target <= i else i
        # 85 % on the pattern, the rest spread over the visible keys: every row sums to 1
        rows.append([(0.85 if j == target else 0.0) + 0.15 / (i + 1) if j <= i else 0.0 for j in range(T)])
    return rows


@diagram(L, "l06-what-heads-see", alt="""What each head sees: the causal attention maps of four heads of one layer for
the sentence "the dog chased the cat .", queries as rows, keys as columns, darker for more weight (the patterns are
illustrative). Head 0 looks at the previous word; head 1 sends every word from "chased" on to the verb (the words before it, which cannot
see it yet, look at themselves); head 2 to the nearest
noun so far, "dog" and later "cat"; head 3 spreads its weight evenly over everything before. One head, with one
softmax per query, would have to split its weight between these patterns and hand on a blend of the values; four
heads each follow one pattern, and W^O combines what they found.""")
def what_heads_see():
    s = Sheet(31, 8.6, title="H = 4 heads, 4 maps of one sentence: each head can follow its own pattern")
    kinds = [("previous", "head 0: the previous word"), ("verb", "head 1: the verb"),
             ("noun", "head 2: the latest noun"), ("broad", "head 3: everything so far")]
    T, c = len(_WORDS), 0.72
    for n, (kind, title) in enumerate(kinds):
        x = 1.9 + n * 7.6
        w = _pattern(kind)
        s.grid(x, 1.7, T, T, cell=c, values=w, cmap="Purples", vmax=1.0, label=title, shape=None)
        for i, word in enumerate(_WORDS):
            s.text(x - 0.12, 1.7 + (T - 1 - i + 0.5) * c, word, size=8, color="soft", ha="right")
            s.text(x + (i + 0.5) * c, 1.45, word, size=8, color="soft", rotation=60, va="top")
    s.text(15.5, 7.75, "weights (B, H, T_q, T_k): one (T_q, T_k) map per head; rows are queries, columns keys, each "
                       "row a softmax over the keys (causal here; illustrative patterns)", size=9, color="soft")
    return s


# -- 3. concatenate-then-project = sum over heads -------------------------------------------------------------

@diagram(L, "l06-sum-over-heads", alt="""Concatenating the heads and multiplying by W^O equals a sum over heads. Left:
the heads' outputs, each of shape (T, Dh), side by side form a (T, H times Dh) matrix, multiplied by W^O of shape
(H times Dh, D), whose rows are cut into H blocks W^O_h of Dh rows each. Right: the same result as head 1 times
W^O_1 plus head 2 times W^O_2 and so on up to head H, each term of shape (T, D): one small attention model per head, with its own
output map, all added together.""")
def sum_over_heads():
    s = Sheet(30, 6.4, title="Concat(head$_1$ … head$_H$) $W^O$ = $\\Sigma_h$ head$_h$ $W^O_h$: one small model per "
                             "head, all added up (H = 4)")
    greens = ["#1E5631", "#55A868", "#8CC79A", "#BFE3C6"]
    c = 0.34
    y = 2.2
    for h in range(4):
        s.grid(0.6 + h * 2 * c, y, 4, 2, cell=c, color=greens[h])
    s.text(0.6 + 4 * c, y + 1.7, "concat of the heads", size=9.5, weight="bold")
    s.text(0.6 + 4 * c, y - 0.3, "(T, H·Dh)", size=9, color="soft")
    s.text(3.8, y + 0.7, "×", size=16)
    for h in range(4):
        s.grid(4.4, y - 1.2 + (3 - h) * 2 * c, 2, 6, cell=c, color=greens[h])
    s.text(4.4 + 3 * c, y + 1.8, "$W^O$", size=10, weight="bold", color="out")
    s.text(4.4 + 3 * c, y - 1.5, "(H·Dh, D): blocks $W^O_h$", size=8.5, color="soft")
    s.text(7.9, y + 0.7, "=", size=18)
    x = 8.7
    for h in range(4):
        s.grid(x, y, 4, 2, cell=c, color=greens[h])
        s.text(x + 0.95, y + 0.7, "×", size=12)
        s.grid(x + 1.25, y + 0.35, 2, 6, cell=c, color=greens[h])
        s.text(x + 2.0, y - 0.3, f"head$_{h + 1}$ $W^O_{h + 1}$", size=9, color="soft")
        s.text(x + 2.0, y - 0.7, "(T, Dh)(Dh, D) = (T, D)", size=7.5, color="soft")
        if h < 3:
            s.text(x + 3.75, y + 0.7, "+", size=16)
        x += 4.3
    s.text(15.0, 5.3, "each term is a single-head attention model with its own $W^Q_h, W^K_h, W^V_h$ and output map "
                      "$W^O_h$; the heads are trained together, each reads a Dh-dimensional subspace and writes "
                      "anywhere in D", size=8.5, color="soft")
    s.text(15.0, 0.3, "the same parameters whatever H is: 4 · D² weights (plus 4 · D biases)", size=9, color="soft")
    return s

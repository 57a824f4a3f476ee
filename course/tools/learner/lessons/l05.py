"""Lesson 05: scaled dot-product attention with its shapes, and the two masks."""

from __future__ import annotations

from course.tools.learner.lessons import diagram, front
from course.tools.learner.draw import Sheet

L = "05_self_attention"

front(L, level="core", part="Attention", lessons=("03_attention_scores",),
      needs="lesson 04 (optional) reads a memory with one controller, the idea this lesson gives every position; "
            "matrix products and transposes; PyTorch tensors, broadcasting and `nn.Module`",
      objectives=[
          "Write scaled dot-product attention for any batch and head dimensions, equal to PyTorch's "
          "`F.scaled_dot_product_attention`.",
          "Build causal and padding masks and combine them under one mask contract (True = may attend).",
          "Explain why attention weights are *fast weights*, recomputed from every input, unlike a linear layer's.",
          "Measure the quadratic cost of attention in the sequence length.",
          "Train one attention layer to reverse sequences, and read from its attention map how it does it.",
      ],
      standard_minutes=0.5,
      runs_long="the reversal model trains for about 20 s in the standard profile; everything else takes seconds.")


@diagram(L, "l05-attention-shapes", alt="""Scaled dot-product attention, left to right, for T = 4 tokens: the input x
(T by d_model) is multiplied by W^Q, W^K and W^V to give q (T by d_k, blue), k (T by d_k, orange) and v (T by d_v,
green). q times k transposed, divided by the square root of d_k, gives the scores (T_q by T_k, purple); softmax along
each row (over the keys) turns them into weights whose rows sum to 1; weights times v gives the output
(T by d_v, red), one mix of values per query.""")
def attention_shapes():
    s = Sheet(30, 10.5, title="Scaled dot-product attention, with the shape of every tensor (T = 4 tokens)")
    c = 0.45
    s.grid(0.5, 3.9, 4, 6, cell=c, color="x", label="x", shape="(T, d_model)")
    for name, col, width, y in (("q", "q", 3, 7.3), ("k", "k", 3, 4.1), ("v", "v", 2, 0.9)):
        s.arrow(3.3, 4.8, 5.2, y + 0.9, color=col)
        s.text(4.0, (4.8 + y + 0.9) / 2 + (0.35 if y > 4 else -0.35 if y < 4 else 0.3), f"$W^{name.upper()}$",
               size=11, color=col)
        s.grid(5.4, y, 4, width, cell=c, color=col, label=name, shape=f"(T, $d_{'v' if name == 'v' else 'k'}$)")
    s.arrow(6.9, 5.0, 9.1, 5.0, "transpose", color="k", label_dy=0.3)
    s.grid(9.3, 4.4, 3, 4, cell=c, color="k", label="$k^{\\top}$", shape="($d_k$, T)")
    s.box(11.9, 7.55, 3.6, 1.1, "$q\\,k^{\\top} / \\sqrt{d_k}$", color="w", size=12)
    s.arrow(6.8, 8.2, 11.8, 8.15, color="q")
    s.arrow(10.2, 6.3, 12.6, 7.5, color="k")
    vals = [[0.8, 0.1, 0.5, 0.3], [0.2, 0.9, 0.4, 0.1], [0.3, 0.2, 0.7, 0.6], [0.6, 0.1, 0.2, 0.9]]
    s.grid(16.4, 5.9, 4, 4, cell=0.55, values=vals, cmap="Purples", label="scores", shape="($T_q$, $T_k$)")
    s.arrow(15.6, 8.1, 16.3, 7.9, color="w")
    s.arrow(18.8, 7.0, 21.5, 7.0, color="w")
    s.text(20.15, 7.75, "softmax along", size=9, color="soft")
    s.text(20.15, 7.4, "each row (keys)", size=9, color="soft")
    w = [[0.45, 0.10, 0.30, 0.15], [0.10, 0.60, 0.20, 0.10], [0.15, 0.10, 0.45, 0.30], [0.30, 0.05, 0.10, 0.55]]
    s.grid(21.6, 5.4, 4, 4, cell=0.8, values=w, cmap="Purples", vmax=0.9, label="weights",
           shape="each row sums to 1", marks=[[f"{x:.2f}" for x in row] for row in w], size=9)
    s.box(21.9, 2.3, 2.6, 1.0, "weights @ v", color="w", size=10)
    s.arrow(23.2, 4.7, 23.2, 3.35, color="w")
    s.arrow(6.4, 1.8, 21.9, 2.6, color="v", rad=0.05)
    s.grid(26.2, 1.9, 4, 2, cell=c, color="out", label="out", shape="(T, $d_v$)")
    s.arrow(24.7, 2.8, 26.1, 2.8, color="out")
    s.text(25.0, 0.55, "out[i] = $\\Sigma_j$ weights[i, j] · v[j]: one mix of values per query", size=9,
           color="soft")
    return s


@diagram(L, "l05-masks", alt="""Three boolean masks for T = 5, drawn as grids of queries (rows) by keys (columns), dark
where attention is allowed. The causal mask is lower triangular: query t sees keys 0 to t. The padding mask of a
sequence of length 3 allows the first three keys for every query. Combined with &, query t sees keys 0 to
min(t, 2); the rows of the padding positions 3 and 4 still see the real keys, and no row is empty.""")
def masks():
    s = Sheet(24, 6.6, title="Masks are True where attention is allowed; combine them with &")
    T, c = 5, 0.62
    causal = [[j <= i for j in range(T)] for i in range(T)]
    pad = [[j < 3 for j in range(T)] for i in range(T)]
    both = [[a and b for a, b in zip(r1, r2)] for r1, r2 in zip(causal, pad)]
    for x, grid_, label, shape in ((1.2, causal, "causal_mask(5)", "(T_q, T_k)"),
                                  (9.0, pad, "padding_mask([3], 5)[:, None, :]", "(B, 1, T_k): every query"),
                                  (16.8, both, "causal & padding", "(B, T_q, T_k)")):
        s.grid(x, 1.6, T, T, cell=c, color="mask", values=grid_, label=label, shape=shape)
        for t in range(T):
            s.text(x - 0.35, 1.6 + (T - 1 - t + 0.5) * c, f"q{t}", size=8, color="soft")
        s.text(x + T * c / 2, 0.55, "keys 0 … 4 →", size=8, color="soft")
    s.text(7.5, 3.15, "&", size=20, weight="bold")
    s.text(15.3, 3.15, "=", size=20, weight="bold")
    s.text(12.0, 5.75, "a False entry's score becomes −inf before the softmax: it gets exactly zero weight",
           size=10, color="soft")
    return s

"""Lesson 16: FlashAttention's forward tiling with its running statistics, what the backward stores and recomputes,
the tiles a causal launch skips, and why padded scores must be -inf before the running max."""

from __future__ import annotations

from matplotlib.patches import Rectangle

from course.tools.learner.draw import COLORS, Sheet, light
from course.tools.learner.lessons import diagram, front

L = "16_flash_attention_triton"

front(L, level="optional", part="Beyond the core", lessons=("05_self_attention", "06_multi_head_attention",
                                                              "12_efficient_attention"),
      needs="lesson 12's online softmax and grouped-query heads (this lesson turns them into one kernel); the "
            "gradient of a softmax; pointers and offsets into a contiguous array (the lesson explains Triton from "
            "its first kernel); Linux x86-64 with `triton` installed (on macOS or Windows, a Linux machine or "
            "Colab), no GPU needed",
      objectives=[
          "Write a Triton kernel that computes attention one (query tile, key tile) pair at a time with an online "
          "softmax, and stores each row's log-sum-exp, equal to `F.scaled_dot_product_attention`.",
          "Handle a ragged last tile and the causal mask with masked loads and −∞ scores, and skip the key tiles "
          "wholly in a query tile's future.",
          "Write the backward pass that recomputes the weights tile by tile from q, k and the log-sum-exp, with "
          "every gradient written by exactly one program, grouped-query heads included.",
          "Wrap both passes in a `torch.autograd.Function` whose gradients equal PyTorch's.",
          "Explain why FlashAttention's memory grows like T and not T², and count the tiles a causal launch visits.",
      ],
      standard_minutes=0.6,
      runs_long="nothing long: Triton's interpreter runs every tile in NumPy, a few milliseconds each, and the "
                "standard profile's experiments take about half a minute. The GPU section runs only on a CUDA GPU.")


# -- helpers ---------------------------------------------------------------------------------------------

def _frame(s: Sheet, x, y, w, h, color="ink", lw=2.0, dashed=False):
    s.ax.add_patch(Rectangle((x, y), w, h, fill=False, edgecolor=COLORS.get(color, color), linewidth=lw,
                             linestyle="--" if dashed else "-"))


def _bracket(s: Sheet, x, y0, y1, label, *, color="soft", size=8, side="left"):
    """A vertical bracket from y0 to y1 at x, with a label beside it."""
    d = -0.15 if side == "left" else 0.15
    s.line([x - d, x, x, x - d], [y0, y0, y1, y1], color=color, lw=1.0)
    s.text(x + (-0.2 if side == "left" else 0.2), (y0 + y1) / 2, label, size=size, color=color,
           ha="right" if side == "left" else "left")


# -- 1. the forward's tiling ---------------------------------------------------------------------------

@diagram(L, "l16-forward-tiling", alt="""The forward kernel's tiling for T = 8 positions, BLOCK_M = 4 query rows per
program and BLOCK_N = 2 keys per tile. On the left, q (T by d_k, blue) is cut into two row blocks, one program each;
program i = 1 owns rows 4 to 7. Across the top, k transposed (d_k by T, orange) and v (green) are cut into four key
tiles j = 0 to 3. The T by T score matrix in the middle is drawn only as an outline: it never exists. Program 1's row
of tiles is shown: tiles 0 and 1 already done (light purple), tile 2 being computed (dark purple, one BLOCK_M by
BLOCK_N score tile S), tile 3 still to come. On the right, what the program keeps on chip for its four rows while the
key tiles stream past: the running max m (BLOCK_M), the running sum l (BLOCK_M) and the accumulator acc (BLOCK_M by
d_v), updated per tile by m' = max(m, rowmax S), P = exp(S - m'), l = exp(m - m') l + rowsum P, acc = exp(m - m') acc
+ P V_j. After the last tile it writes its rows of the output, acc / l (red), and of the log-sum-exp L = m + log l:
T numbers per head instead of T squared.""")
def forward_tiling():
    s = Sheet(30, 12.6, title="The forward: one program per query tile, key tiles streaming past, "
                              "three running statistics per row")
    T, BM, BN, c = 8, 4, 2, 0.62
    x0, y0 = 6.2, 1.6                                # bottom left of the (T, T) score area
    top = y0 + T * c
    # q on the left, cut into row blocks
    qx = x0 - 3 * c - 0.7
    for r in range(T):
        for d in range(3):
            face = light("q", 0.2) if r >= BM else light("q", 0.65)
            s.cell(qx + d * c, y0 + (T - 1 - r) * c, c, c, face, edge="white")
    _frame(s, qx, y0, 3 * c, T * c, color=COLORS["q"], lw=1.4)
    _frame(s, qx, y0, 3 * c, BM * c, color=COLORS["q"], lw=2.6)
    s.text(qx + 1.5 * c, top + 0.35, "q", size=11, weight="bold", color="q")
    s.text(qx + 1.5 * c, y0 - 0.35, "(T, $d_k$)", size=9, color="soft")
    _bracket(s, qx - 0.25, y0 + BM * c + 0.05, top, "program 0\n(rows 0-3)", size=8)
    _bracket(s, qx - 0.25, y0, y0 + BM * c - 0.05, "program 1\n(rows 4-7:\nBLOCK_M rows)", size=8, color="q")
    # k^T and v^T across the top, cut into key tiles
    ky = top + 0.55
    for strip, (col, name, size_) in enumerate((("k", "$k^{\\top}$", "$d_k$"), ("v", "$v^{\\top}$", "$d_v$"))):
        yy = ky + strip * (3 * c + 0.25)
        for j in range(T):
            for d in range(3):
                s.cell(x0 + j * c, yy + d * c, c, c, light(col, 0.45), edge="white")
        for t in range(T // BN):
            _frame(s, x0 + t * BN * c, yy, BN * c, 3 * c, color=COLORS[col], lw=1.4)
        s.text(x0 - 0.25, yy + 1.5 * c, f"{name} ({size_}, T)", size=9, color=col, ha="right")
    yy = ky + 2 * (3 * c + 0.25)
    for t in range(T // BN):
        s.text(x0 + (t + 0.5) * BN * c, yy + 0.1, f"tile j = {t}", size=8, color="soft")
    s.text(x0 + T * c + 0.3, ky + 4.4, "keys and values, BLOCK_N per tile:", size=9, color="soft", ha="left")
    s.text(x0 + T * c + 0.3, ky + 3.95, "each program loads them one tile at a time", size=9, color="soft", ha="left")
    # the (T, T) scores: only an outline; program 1's row of tiles
    _frame(s, x0, y0, T * c, T * c, color="soft", lw=1.0, dashed=True)
    for t in range(T // BN):
        face = light("w", 0.55) if t < 2 else (COLORS["w"] if t == 2 else COLORS["white"])
        s.cell(x0 + t * BN * c, y0, BN * c, BM * c, face, edge=COLORS["w"], lw=1.2,
              text={0: "done", 1: "done", 2: "S", 3: "next"}[t], color="white" if t == 2 else "ink", size=9)
    s.text(x0 + T * c / 2, y0 + BM * c + 1.25, "the (T, T) scores: never stored,", size=9, color="soft")
    s.text(x0 + T * c / 2, y0 + BM * c + 0.8, "not even one row of them", size=9, color="soft")
    s.text(x0 + 5 * c, y0 - 0.35, "S: (BLOCK_M, BLOCK_N)", size=9, color="w")
    s.arrow(x0 + 0.2, y0 - 0.85, x0 + T * c - 0.2, y0 - 0.85, color="w")
    s.text(x0 + T * c / 2, y0 - 1.2, "program 1 walks its row of tiles, j = 0, 1, 2, 3", size=8, color="soft")
    # on-chip state
    sx = x0 + T * c + 1.4
    s.box(sx - 0.3, y0 - 0.5, 10.0, 7.6, "", color="neutral", fill="#F7F7F7", lw=1.0)
    s.text(sx + 4.7, y0 + 6.6, "on chip, for program 1's BLOCK_M rows", size=10, weight="bold")
    s.grid(sx + 1.0, y0 + 3.3, BM, 1, cell=c, color="w", label="m", shape="(BLOCK_M,)")
    s.grid(sx + 3.2, y0 + 3.3, BM, 1, cell=c, color="w", label="ℓ", shape="(BLOCK_M,)")
    s.grid(sx + 5.6, y0 + 3.3, BM, 3, cell=c, color="v", label="acc", shape="(BLOCK_M, $d_v$)")
    s.text(sx + 4.7, y0 + 2.3, "start: m = −∞,  ℓ = 0,  acc = 0", size=9)
    s.text(sx + 4.7, y0 + 1.6, "per tile:  $m' = \\max(m, \\mathrm{rowmax}\\,S)$,   $P = e^{S - m'}$", size=9)
    s.text(sx + 4.7, y0 + 1.0, "$\\ell \\leftarrow e^{m - m'}\\ell + \\mathrm{rowsum}\\,P$,   "
           "$acc \\leftarrow e^{m - m'} acc + P\\,V_j$,   $m \\leftarrow m'$", size=9)
    s.text(sx + 4.7, y0 + 0.3, "($e^{m - m'} \\leq 1$ rescales what was summed under the old max)", size=8,
           color="soft")
    s.arrow(x0 + 7 * c, y0 + 0.5 * BM * c, sx - 0.35, y0 + 0.5 * BM * c + 1.2, color="w")
    # outputs
    ox = sx + 11.2
    s.text(ox + 1.0, y0 + 7.4, "written once,", size=10, weight="bold", color="out")
    s.text(ox + 1.0, y0 + 6.95, "after the last tile", size=9, color="out")
    s.grid(ox, y0 + 3.3, BM, 3, cell=c, color="out", label="out rows", shape="acc / ℓ: (BLOCK_M, $d_v$)")
    s.grid(ox + 0.6, y0 + 0.2, BM, 1, cell=c * 0.7, color="w", label="L = m + log ℓ", shape="(BLOCK_M,), float32")
    s.arrow(sx + 9.75, y0 + 4.5, ox - 0.1, y0 + 4.5, color="out")
    return s


# -- 2. the backward: stored against recomputed -------------------------------------------------------------

@diagram(L, "l16-backward-recompute", alt="""What the backward pass has and what it recomputes. Left: the forward saved
q, k and v (T by d_k each), the output O (T by d_v, red) and the log-sum-exp L (T numbers, purple) per head. The
weights P (T by T) are crossed out: they were never stored. First, D = rowsum(dO times O), T numbers per head. Middle:
inside any (query tile i, key tile j), the weights come back exactly from what was saved, S = scale q_i k_j transposed
and P = exp(S - L_i), then dV_j += P transposed dO_i, dP = dO_i V_j transposed, dS = P times (dP - D_i), dK_j += scale
dS transposed q_i and dQ_i += scale dS k_j. Right, two grids of tiles: a dK/dV program owns one key tile and walks
down its column of tiles, over every query tile and every query head of its group; a dQ program owns one query tile
and walks along its row. Each gradient is written by exactly one program, so no two programs store into the same
numbers.""")
def backward_recompute():
    s = Sheet(31, 12.4, title="The backward stores no weights: P comes back tile by tile from q, k and L")
    c = 0.42
    x0, y0 = 0.8, 2.0
    s.text(3.9, 10.9, "saved by the forward", size=10, weight="bold")
    for n, (name, col, w) in enumerate((("q", "q", 3), ("k", "k", 3), ("v", "v", 3), ("O", "out", 3))):
        s.grid(x0 + n * 1.75, y0 + 4.6, 8, w, cell=c, color=col, label=name,
               shape="(T, $d_k$)" if n < 3 else "(T, $d_v$)", size=8)
    s.grid(x0 + 7.2, y0 + 4.6, 8, 1, cell=c, color="w", label="L", shape="(T,)", size=8)
    # P crossed out
    px, py, pw = x0 + 1.2, y0 + 0.1, 8 * c
    s.cell(px, py, pw, pw, "#F2F2F2", edge=COLORS["mask"])
    s.line([px, px + pw], [py, py + pw], color="bad", lw=1.6)
    s.line([px, px + pw], [py + pw, py], color="bad", lw=1.6)
    s.text(px + pw / 2, py + pw + 0.3, "P: (T, T), never stored", size=8, color="bad")
    s.text(px + pw + 0.3, py + pw * 0.62, "first, per row:", size=8, color="soft", ha="left")
    s.text(px + pw + 0.3, py + pw * 0.32, "$D = \\mathrm{rowsum}(dO \\circ O)$", size=9, ha="left")
    s.text(px + pw + 0.3, py + pw * 0.05, "(T,): the given kernel", size=8, color="soft", ha="left")
    # middle: one tile recomputed
    mx = 11.0
    s.box(mx, y0 + 0.2, 9.2, 8.4, "", color="neutral", fill="#F7F7F7", lw=1.0)
    s.text(mx + 4.6, y0 + 8.0, "inside one (query tile i, key tile j)", size=10, weight="bold")
    lines = [("$S = \\mathrm{scale}\\; q_i\\, k_j^{\\top}$", "recomputed", "w"),
             ("$P = e^{S - L_i}$", "the exact weights", "w"),
             ("$dV_j$ += $P^{\\top} dO_i$", "", "v"),
             ("$dP = dO_i\\, V_j^{\\top}$", "", "w"),
             ("$dS = P \\circ (dP - D_i)$", "the softmax's gradient", "w"),
             ("$dK_j$ += $\\mathrm{scale}\\; dS^{\\top} q_i$", "", "k"),
             ("$dQ_i$ += $\\mathrm{scale}\\; dS\\, k_j$", "", "q")]
    for n, (formula, note, col) in enumerate(lines):
        y = y0 + 7.1 - n * 0.95
        s.text(mx + 0.5, y, formula, size=11, ha="left", color=col if col != "w" else "ink")
        if note:
            s.text(mx + 5.4, y, note, size=8, color="soft", ha="left")
    s.text(mx + 4.6, y0 + 0.55, "every tile is (BLOCK_M, BLOCK_N): nothing T × T", size=8, color="soft")
    s.arrow(x0 + 8.2, y0 + 6.2, mx - 0.1, y0 + 6.8, color="w")
    # right: who owns what
    gx, n_t, tc = 21.6, 4, 0.7
    for panel, (label, sub) in enumerate((("dK/dV program j = 2", "walks down its column"),
                                           ("dQ program i = 1", "walks along its row"))):
        bx = gx + panel * 4.6
        by = y0 + 2.6
        for i in range(n_t):
            for j in range(n_t):
                on = (j == 2) if panel == 0 else (i == 1)
                face = light("w", 0.45) if on else COLORS["white"]
                s.cell(bx + j * tc, by + (n_t - 1 - i) * tc, tc, tc, face, edge="#BBBBBB")
        if panel == 0:
            s.arrow(bx + 2.5 * tc, by + n_t * tc - 0.15, bx + 2.5 * tc, by + 0.15, color="k", lw=2)
            owns = "owns $dK_j$, $dV_j$"
            col = "k"
        else:
            s.arrow(bx + 0.15, by + 2.5 * tc, bx + n_t * tc - 0.15, by + 2.5 * tc, color="q", lw=2)
            owns = "owns $dQ_i$"
            col = "q"
        s.text(bx + n_t * tc / 2, by + n_t * tc + 0.75, label, size=9, weight="bold", color=col)
        s.text(bx + n_t * tc / 2, by + n_t * tc + 0.3, sub, size=8, color="soft")
        s.text(bx + n_t * tc / 2, by - 0.35, "key tile j →", size=8, color="soft")
        s.text(bx + n_t * tc / 2, by - 0.85, owns, size=9, color=col)
        s.text(bx - 0.3, by + n_t * tc / 2, "query tile i →", size=8, color="soft", rotation=90)
    s.text(gx + 4.2, y0 + 0.7, "each gradient has one writer: no race,", size=9, color="soft")
    s.text(gx + 4.2, y0 + 0.25, "grouped heads summed inside the dK/dV program", size=9, color="soft")
    return s


# -- 3. the causal launch: skipped tiles, and tiles that are not square ------------------------------------------

def _causal_panel(s: Sheet, x0, y0, T, BM, BN, c, title):
    n_m = -(-T // BM)
    n_n = -(-T // BN)
    for i in range(n_m * BM):
        for j in range(n_n * BN):
            ti, tj = i // BM, j // BN
            last_row = min((ti + 1) * BM, T)                # the loop ends at the program's last row
            loaded = tj * BN < last_row
            if not loaded:
                face = COLORS["white"]
            elif j >= T:
                face = "#D9D9D9"                          # a key past T: read as other=0.0, score set to -inf
            elif i >= T:
                face = "#F1EEF8"                          # a row past T: computed, never stored
            elif j <= i:
                face = light("w", 0.25)                   # allowed
            else:
                face = "#D9D9D9"                           # loaded, masked to -inf
            s.cell(x0 + j * c, y0 + (n_m * BM - 1 - i) * c, c, c, face, edge="#E6E6E6", lw=0.5)
    for ti in range(n_m + 1):
        s.line([x0, x0 + n_n * BN * c], [y0 + ti * BM * c] * 2, color="ink", lw=1.2)
    for tj in range(n_n + 1):
        s.line([x0 + tj * BN * c] * 2, [y0, y0 + n_m * BM * c], color="ink", lw=1.2)
    if n_m * BM > T:                                  # where T ends
        yT = y0 + (n_m * BM - T) * c
        s.line([x0 - 0.2, x0 + n_n * BN * c + 0.2], [yT, yT], color="bad", lw=1.4, dashed=True)
        xT = x0 + T * c
        s.line([xT, xT], [y0 - 0.2, y0 + n_m * BM * c + 0.2], color="bad", lw=1.4, dashed=True)
        s.text(xT + 0.1, y0 + n_m * BM * c + 0.45, f"T = {T}", size=8, color="bad", ha="left")
    s.text(x0 + n_n * BN * c / 2, y0 + n_m * BM * c + 1.0, title, size=10, weight="bold")
    s.text(x0 + n_n * BN * c / 2, y0 - 0.4, "key position j →", size=8, color="soft")
    s.text(x0 - 0.35, y0 + n_m * BM * c / 2, "query position i →", size=8, color="soft", rotation=90)


@diagram(L, "l16-causal-skips", alt="""Two causal launches drawn as grids of query positions (rows) by key positions
(columns), with thick lines at the tile edges. Purple cells are scores that count (key j at or before query i); grey
cells are loaded but their score is set to minus infinity (the future inside a tile that straddles the diagonal, or
a key past T); white cells belong to tiles that are never loaded; the palest cells are rows past T, computed but never
stored. Left: T = 16 with square tiles of 4, so 10 of
the 16 tile pairs are visited, n(n+1)/2 for n = 4, and the 6 above the diagonal are skipped. Right: T = 14 with
BLOCK_M = 4 and BLOCK_N = 8. The loop of each program ends at its last query row, so every program still reads a key
tile that reaches past its diagonal, and the last query tile and the last key tile reach past T = 14 (dashed red
lines): their loads are masked (mask = position < T, other = 0.0), and those scores, which would be 0, are set to
minus infinity before the running max.""")
def causal_skips():
    s = Sheet(30, 12.2, title="A causal launch: tiles wholly in the future are never loaded; "
                              "the rest of the future is masked inside a tile")
    _causal_panel(s, 2.2, 1.4, 16, 4, 4, 0.5, "square tiles: BLOCK_M = BLOCK_N = 4, T = 16")
    _causal_panel(s, 14.2, 1.4, 14, 4, 8, 0.5, "BLOCK_M = 4, BLOCK_N = 8, ragged T = 14")
    lx, ly = 24.2, 8.6
    for n, (face, label) in enumerate(((light("w", 0.25), "a score that counts (j ≤ i)"),
                                       ("#D9D9D9", "loaded, score set to −∞"),
                                       (COLORS["white"], "in a tile never loaded"),
                                       ("#F1EEF8", "a row past T: never stored"))):
        s.cell(lx, ly - n * 0.9, 0.55, 0.55, face, edge="#999999")
        s.text(lx + 0.8, ly - n * 0.9 + 0.27, label, size=8, ha="left")
    s.text(lx - 0.1, 5.0, "program i's loop stops after", size=8, ha="left", color="soft")
    s.text(lx - 0.1, 4.55, "its last row, min((i + 1) · BLOCK_M, T):", size=8, ha="left", color="soft")
    s.text(lx - 0.1, 4.1, "later tiles are skipped, not masked", size=8, ha="left", color="soft")
    s.text(lx - 0.1, 3.2, "grey past T: masked loads", size=8, ha="left", color="bad")
    s.text(lx - 0.1, 2.75, "read other = 0.0, so the", size=8, ha="left", color="bad")
    s.text(lx - 0.1, 2.3, "score would be 0: set it", size=8, ha="left", color="bad")
    s.text(lx - 0.1, 1.85, "to −∞ before the max", size=8, ha="left", color="bad")
    return s


# -- 4. why -inf before the max ------------------------------------------------------------------------------

@diagram(L, "l16-pad-before-max", alt="""One query row of a ragged last tile: three real keys with scores -300, -302
and -301, and one padded key past T, loaded as zeros, whose score is therefore 0. Top, the padded score left at 0
(and zeroed only after the exponential): the running max becomes 0, every real term exp(s - 0) underflows to 0 in
float32, l = 0 and the output is 0 / 0 = NaN. Bottom, the padded score set to minus infinity first: the max is -300,
the terms are 1, exp(-2) and exp(-1) and 0 for the pad, l is about 1.50, and the output and L = -300 + log 1.50 are
right.""")
def pad_before_max():
    s = Sheet(28, 7.2, title="Padded keys score 0, not −∞: mask before the max, or a row of very negative "
                             "scores ends in 0 / 0")
    c = 1.25
    real = [-300, -302, -301]
    for row, (label, pad, m, terms, l_text, verdict, col) in enumerate((
            ("padded score left at 0", "0", "0", ["0", "0", "0", "(1) → 0"], "ℓ = 0  →  out = 0 / 0 = NaN", "wrong",
             "bad"),
            ("padded score set to −∞ first", "−∞", "−300", ["1", "0.135", "0.368", "0"], "ℓ ≈ 1.50,  L = −300 + log 1.50",
             "right", "ok"))):
        y = 4.3 - row * 3.4
        s.text(0.4, y + c + 0.45, label, size=10, weight="bold", ha="left", color=col)
        x = 1.0
        for j, v in enumerate(real + [pad]):
            s.cell(x + j * c, y, c, c, light("w", 0.6) if j < 3 else "#D9D9D9", edge="#999999",
                  text=str(v).replace("-", "−"), size=9)
        s.text(x + 1.5 * c, y - 0.35, "real keys", size=8, color="soft")
        s.text(x + 3.5 * c, y - 0.35, "pad (past T)", size=8, color="soft")
        s.arrow(x + 4 * c + 0.2, y + c / 2, x + 4 * c + 1.3, y + c / 2, color="w")
        s.text(x + 4 * c + 2.45, y + c / 2, f"m = {m}", size=10)
        s.arrow(x + 4 * c + 3.6, y + c / 2, x + 4 * c + 4.6, y + c / 2, color="w")
        tx = x + 4 * c + 4.8
        s.text(tx + 2 * c, y + c + 0.3, "$e^{s - m}$", size=9, color="soft")
        for j, t in enumerate(terms):
            value = 0.0 if t.startswith("(") else float(t)
            s.cell(tx + j * c, y, c, c, light("w", 1 - 0.6 * value), edge="#999999", text=t, size=8)
        s.text(tx + 4 * c + 0.4, y + c / 2, l_text, size=10, ha="left", color=col)
    return s

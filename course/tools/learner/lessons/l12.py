"""Lesson 12: the online softmax tile by tile, the memory of naive against chunked attention, grouped-query heads."""

from __future__ import annotations

import math

from course.tools.learner.lessons import diagram, front
from course.tools.learner.draw import Sheet

L = "12_efficient_attention"

front(L, level="optional", part="Beyond the core", lessons=("05_self_attention", "06_multi_head_attention",
                                                              "09_language_model"),
      needs="the log-sum-exp trick of lesson 00 (subtract the maximum before exponentiating); lesson 09's KV cache "
            "helps for the last section; log-log plots; PyTorch's `F.scaled_dot_product_attention`",
      objectives=[
          "Write attention over key/value chunks with an online softmax (a running maximum, sum and output, "
          "rescaled when the maximum grows), equal to `F.scaled_dot_product_attention` and never holding the "
          "T × T matrix.",
          "Measure the time and peak memory of naive, chunked and fused attention as T grows, and fit their "
          "exponents on log-log axes.",
          "Find out which kernel SDPA runs, and what bfloat16, float16 and `torch.compile` change on your machine.",
          "Write `repeat_kv` for grouped-query attention, and measure what fewer key/value heads save in the KV "
          "cache and cost in loss.",
      ],
      standard_minutes=9.5,
      runs_long="the standard profile times three attentions up to T = 4096, compiles a block with "
                "`torch.compile` (tens of seconds, more from a cold cache; `COMPILE = False` skips it) and trains "
                "three small language models: about 9 to 10 minutes on a busy laptop CPU, under 2 minutes of CPU "
                "time.")

_S = [0.5, 2.0, -1.0, 1.0, 3.5, 0.0, 1.5, 2.5, 6.0, -2.0, 4.0, 5.0]      # the row of scores the lesson's cell uses


def _online(scores, chunk):
    m, l, out = float("-inf"), 0.0, []
    for start in range(0, len(scores), chunk):
        c = scores[start:start + chunk]
        m_new = max(m, max(c))
        factor = math.exp(m - m_new) if m != float("-inf") else 0.0
        l = factor * l + sum(math.exp(s - m_new) for s in c)
        out.append(dict(m_old=m, m=m_new, factor=factor, l=l))
        m = m_new
    return out


@diagram(L, "l12-online-softmax", alt="""One query's row of 12 scores, 0.5, 2.0, -1.0, 1.0, 3.5, 0.0, 1.5, 2.5, 6.0,
-2.0, 4.0, 5.0, processed in three tiles of 4 keys, left to right. Only the current tile's scores exist at a time;
per row the online softmax keeps three numbers: the running maximum m, the running sum l of exp(s_j - m), and the
running output acc, the sum of exp(s_j - m) v_j. Tile 1 sets m to 2.0 and l to 1.64 (nothing to rescale: m was
minus infinity). Tile 2 brings a larger score, 3.5: the old l and acc are multiplied by exp(2.0 - 3.5) = 0.22
before the new tile's terms are added, giving l = 1.90. Tile 3 brings 6.0: rescale by exp(3.5 - 6.0) = 0.08, then
l = 1.66. After the last tile the output is acc / l, exactly the softmax attention, and m + log l = 6.51 equals
the log-sum-exp of the whole row.""")
def online_softmax():
    s = Sheet(31, 12.6, title="The online softmax: keys in tiles, three running numbers per query, a rescale when "
                              "the maximum grows")
    chunk, c = 4, 0.85
    states = _online(_S, chunk)
    x0, gap = 3.9, 2.2
    # the whole row, tiles marked
    s.text(x0 - 0.3, 10.55, "scores of query i:", size=9, color="soft", ha="right")
    lo, hi = min(_S), max(_S)
    for j, v in enumerate(_S):
        x = x0 + j * c + (j // chunk) * gap
        s.grid(x, 10.1, 1, 1, cell=c, values=[[(v - lo) / (hi - lo)]], cmap="Purples", marks=[[f"{v:g}"]], size=10)
    for t in range(3):
        xt = x0 + t * (chunk * c + gap)
        s.text(xt + chunk * c / 2, 11.4, f"tile {t + 1}: keys {4 * t}..{4 * t + 3}", size=10, weight="bold")
        s.line([xt, xt + chunk * c], [9.9, 9.9], color="w", lw=2.0)
    # the state after each tile
    for t, st in enumerate(states):
        xt = x0 + t * (chunk * c + gap)
        cx = xt + chunk * c / 2
        grew = st["m_old"] != float("-inf")
        s.box(xt - 0.8, 4.1, chunk * c + 1.6, 5.2, "", color="neutral")
        s.text(cx, 8.8, "m: " + ("−∞" if not grew else f"{st['m_old']:g}") + f" → {st['m']:g}", size=10)
        if grew:
            s.text(cx, 8.05, f"rescale: $e^{{m - m'}}$ = {st['factor']:.2f}", size=9, color="out", weight="bold")
            s.text(cx, 7.45, "times the old ℓ and acc", size=8, color="out")
        else:
            s.text(cx, 8.05, "first tile: nothing to rescale", size=9, color="soft")
        s.text(cx, 6.55, f"ℓ = {st['l']:.2f}", size=10, weight="bold")
        s.text(cx, 5.85, "acc = $e^{m-m'}$ acc", size=9)
        s.text(cx, 5.3, "+ $\\sum_j e^{s_j - m'} v_j$", size=9)
        s.grid(cx - 1.0, 4.35, 1, 4, cell=0.5, color="out")
        s.text(cx + 1.15, 4.6, "acc ($d_v$)", size=7, color="soft", ha="left")
        if t < 2:
            s.arrow(xt + chunk * c + 0.85, 6.7, xt + chunk * c + gap - 0.85, 6.7, color="ink", lw=1.6)
    # after the last tile
    fx = x0 + 3 * (chunk * c + gap) - 0.3
    s.arrow(fx - 0.75, 6.7, fx + 0.2, 6.7, color="ink", lw=1.6)
    s.box(fx + 0.3, 5.6, 4.8, 2.4, "out = acc / ℓ", sub="exact: no approximation", color="out", size=12)
    lse = states[-1]["m"] + math.log(states[-1]["l"])
    s.text(fx + 2.7, 4.9, f"m + log ℓ = {lse:.2f}", size=10)
    s.text(fx + 2.7, 4.3, "= logsumexp of the whole row", size=9, color="soft")
    # what is kept
    s.text(15.5, 2.9, "kept per query row between tiles: m (1 number), ℓ (1 number), acc ($d_v$ numbers); "
                      "a tile's scores exist only while it is processed", size=10, color="soft")
    s.text(15.5, 2.1, "$m' = \\max(m, \\max_{j \\in tile} s_j)$,   $\\ell' = e^{m - m'}\\,\\ell + "
                      "\\sum_{j \\in tile} e^{s_j - m'}$,   $acc' = e^{m - m'}\\,acc + \\sum_{j \\in tile} "
                      "e^{s_j - m'}\\,v_j$", size=11)
    s.text(15.5, 1.0, "shapes for all queries at once: scores of a tile (…, $T_q$, C), m and ℓ (…, $T_q$, 1), "
                      "acc (…, $T_q$, $d_v$)", size=9, color="soft")
    return s


@diagram(L, "l12-memory", alt="""Memory of attention for one head, T queries and T keys. Top, naive attention:
q (T by Dh) times k transposed gives the scores, a full T by T matrix, and the softmax gives the weights, another
T by T matrix, before the product with v (T by Dv) gives the output (T by Dv): 2 T squared numbers in memory,
which for T = 4096 is 33.6 million numbers, 128 MiB in float32, per head. Bottom, chunked attention: the keys and
values are visited in chunks of C keys; only one chunk's scores, T by C, exist at a time, next to the running
maximum and sum (T by 1 each) and the running output (T by Dv): about 2 T C + T (Dv + 2) numbers, which for
T = 4096, C = 256 and Dv = 64 is about 2.4 million numbers, 9 MiB. The T by T matrix is never stored; memory
grows like T, and the time still like T squared, since every query still meets every key.""")
def memory():
    s = Sheet(31, 14.0, title="Naive attention stores the T × T matrix; chunked attention never does")
    # naive
    s.text(1.0, 13.0, "naive (lesson 05)", size=12, weight="bold", ha="left")
    s.grid(1.0, 8.6, 8, 2, cell=0.4, color="q", label="q", shape="(T, Dh)")
    s.arrow(2.0, 10.0, 3.4, 10.0, color="ink", label="@ kᵀ", label_dy=0.3)
    s.grid(3.6, 8.1, 12, 12, cell=0.32, color="w", label="scores", shape="(T, T)")
    s.arrow(7.6, 10.0, 8.6, 10.0, color="ink", label="softmax", label_dy=0.3)
    s.grid(8.8, 8.1, 12, 12, cell=0.32, color="w", label="weights", shape="(T, T)")
    s.arrow(12.8, 10.0, 13.8, 10.0, color="ink", label="@ v", label_dy=0.3)
    s.grid(14.0, 8.6, 8, 2, cell=0.4, color="out", label="out", shape="(T, $d_v$)")
    s.box(17.0, 9.0, 6.2, 2.6, "", color="neutral")
    s.text(20.1, 11.0, "in memory: 2 T² numbers", size=10, weight="bold")
    s.text(20.1, 10.3, "T = 4096: 33.6 M numbers", size=9)
    s.text(20.1, 9.7, "= 128 MiB in float32, per head", size=9, color="bad")
    # chunked
    s.text(1.0, 6.6, "chunked (this lesson) and fused kernels", size=12, weight="bold", ha="left")
    s.grid(1.0, 2.2, 8, 2, cell=0.4, color="q", label="q", shape="(T, Dh)")
    s.arrow(2.0, 3.6, 3.4, 3.6, color="ink", label="@ kᵀ of", label_dy=0.5)
    s.text(2.7, 3.25, "one chunk", size=8, color="soft")
    for t in range(4):                                                  # the chunks of keys, one of them live
        live = t == 1
        s.box(3.6 + t * 0.85, 1.7, 0.78, 3.84, "", color="w" if live else "neutral", dashed=not live, round_=0.02,
              lw=1.6 if live else 0.8)
    s.text(5.3, 6.0, "scores of one chunk (T, C)", size=9, weight="bold", color="w")
    s.text(5.3, 1.25, "other chunks: computed, used, freed", size=8, color="soft")
    s.arrow(7.2, 3.6, 8.6, 3.6, color="ink", label="update", label_dy=0.3)
    s.grid(8.8, 2.2, 8, 1, cell=0.4, color="neutral", label="m", shape="(T, 1)")
    s.grid(9.9, 2.2, 8, 1, cell=0.4, color="neutral", label="ℓ", shape="(T, 1)")
    s.grid(11.0, 2.2, 8, 2, cell=0.4, color="out", label="acc", shape="(T, $d_v$)")
    s.arrow(12.0, 3.6, 13.8, 3.6, color="ink", label="acc / ℓ", label_dy=0.3)
    s.grid(14.0, 2.2, 8, 2, cell=0.4, color="out", label="out", shape="(T, $d_v$)")
    s.box(17.0, 2.6, 6.2, 2.6, "", color="neutral")
    s.text(20.1, 4.6, "in memory: ≈ 2 T C + T ($d_v$ + 2)", size=10, weight="bold")
    s.text(20.1, 3.9, "T = 4096, C = 256, $d_v$ = 64: 2.4 M", size=9)
    s.text(20.1, 3.3, "≈ 9 MiB in float32, per head", size=9, color="ok")
    # the growth
    gx, gy, gw, gh = 25.0, 2.0, 5.2, 9.0
    s.line([gx, gx], [gy, gy + gh], color="ink")
    s.line([gx, gx + gw], [gy, gy], color="ink")
    Ts = [512, 1024, 2048, 4096]
    naive = [2 * T * T for T in Ts]
    chunk = [2 * T * 256 + T * 66 for T in Ts]
    top = math.log10(naive[-1] * 1.5)
    bot = math.log10(chunk[0] / 1.5)

    def ypos(v):
        return gy + gh * (math.log10(v) - bot) / (top - bot)

    xs = [gx + 0.6 + k * (gw - 1.2) / 3 for k in range(4)]
    s.line(xs, [ypos(v) for v in naive], color="w", lw=2.2)
    s.line(xs, [ypos(v) for v in chunk], color="out", lw=2.2)
    for x, T in zip(xs, Ts):
        s.text(x, gy - 0.35, str(T), size=7, color="soft")
    s.text(gx + gw / 2, gy - 0.9, "T (log scale)", size=8, color="soft")
    s.text(xs[-1] - 0.2, ypos(naive[-1]) + 0.45, "naive: × 4 per doubling", size=8, color="w", ha="right")
    s.text(xs[-1] - 0.2, ypos(chunk[-1]) + 0.45, "chunked: × 2", size=8, color="out", ha="right")
    s.text(gx + gw / 2, gy + gh + 0.7, "numbers in memory (log scale)", size=9, weight="bold")
    s.text(15.5, 0.4, "time: every query still meets every key, O(T² Dh) in both; chunking saves memory, fusion saves "
                      "trips through memory", size=9, color="soft")
    return s


@diagram(L, "l12-gqa", alt="""Three ways to pair 8 query heads with key/value heads, side by side. Multi-head
attention (MHA): 8 query heads (blue) and 8 key/value heads (orange keys, green values), one each. Grouped-query
attention (GQA) with 2 key/value heads: query heads 0 to 3 read key/value head 0 and query heads 4 to 7 read
key/value head 1, so query head h reads key/value head h // n_rep with n_rep = 4; repeat_kv copies each key/value
head n_rep times, giving 8 again, in the order 0, 0, 0, 0, 1, 1, 1, 1. Multi-query attention (MQA): all 8 query
heads read one key/value head. Below each, the KV cache per token and layer is proportional to the number of
key/value heads: 8, 2 and 1 units, a quarter and an eighth of multi-head attention's. The KV cache size is 2 times
the number of layers times n_kv_heads times Dh times T times the bytes per number.""")
def gqa():
    s = Sheet(31, 12.4, title="Grouped-query attention: several query heads share one key/value head; the cache "
                              "shrinks with the key/value heads")
    H = 8
    for n, (title, n_kv, x0) in enumerate((("MHA: 8 key/value heads", 8, 1.0), ("GQA: 2 key/value heads", 2, 11.0),
                                           ("MQA: 1 key/value head", 1, 21.0))):
        w = 1.0
        s.text(x0 + 4 * w, 11.3, title, size=11, weight="bold")
        for h in range(H):
            s.box(x0 + h * w, 8.8, w - 0.15, 1.2, f"q{h}", color="q", size=8, round_=0.05)
        rep = H // n_kv
        kv_w = H * w / n_kv
        for g in range(n_kv):
            gx = x0 + g * kv_w + (kv_w - w) / 2
            s.box(gx, 5.6, w - 0.15, 1.0, f"k{g}", color="k", size=8, round_=0.05)
            s.box(gx, 4.4, w - 0.15, 1.0, f"v{g}", color="v", size=8, round_=0.05)
            for h in range(g * rep, (g + 1) * rep):
                s.arrow(x0 + h * w + (w - 0.15) / 2, 8.75, gx + (w - 0.15) / 2, 6.65, color="soft", lw=0.9)
        if n == 1:
            s.text(x0 + 4 * w, 10.6, "query head h reads key/value head h // 4", size=9, color="soft")
        # cache bars
        bw = H * w * n_kv / H
        inside = n_kv == H
        s.box(x0, 2.3, bw, 0.8, f"cached k (B, {n_kv}, T, Dh)" if inside else "", color="k", round_=0.02, size=8)
        s.box(x0, 1.4, bw, 0.8, f"cached v (B, {n_kv}, T, Dh)" if inside else "", color="v", round_=0.02, size=8)
        if not inside:
            s.text(x0 + bw + 0.2, 2.7, f"cached k (B, {n_kv}, T, Dh)", size=8, color="k", ha="left")
            s.text(x0 + bw + 0.2, 1.8, f"cached v (B, {n_kv}, T, Dh)", size=8, color="v", ha="left")
        s.text(x0 + 4 * w, 0.85, {8: "KV cache: all 8 heads", 2: "KV cache: 1/4 of MHA's", 1: "KV cache: 1/8 of MHA's"}[n_kv],
               size=9, color="soft", weight="bold")
    s.text(15.5, 3.75, "repeat_kv(x, n_rep): (B, $H_{kv}$, T, Dh) → (B, $H_{kv}$·n_rep, T, Dh), heads 0,0,0,0,1,1,1,1 "
                      "for GQA", size=9, color="soft")
    s.text(15.5, 0.15, "cache per sequence = 2 · n_layers · n_kv_heads · Dh · T · bytes per number", size=9,
           color="soft")
    return s

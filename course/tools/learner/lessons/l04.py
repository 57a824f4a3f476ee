"""Lesson 04 (optional): a memory network's hops along a chain of facts, how many hops each question needs, and the
four controller updates of the ablation."""

from __future__ import annotations

from course.tools.learner.draw import Sheet
from course.tools.learner.lessons import diagram, front

L = "04_multi_hop_attention"

front(L, level="optional", part="Attention", lessons=("00_softmax_lookup", "03_attention_scores"),
      needs="the dot-product score and the masked softmax of lesson 03; `nn.Module`, `nn.Linear` and `nn.Embedding`; "
            "batched matrix products in PyTorch",
      objectives=[
          "Write one hop of a memory network: score the sentences against a controller, mask, softmax, read, and "
          "update the controller.",
          "Explain why a question whose answer needs a chain of n facts needs at least n hops, and check it on "
          "models with 1, 2 and 3 hops.",
          "Read per-hop attention maps to follow a chain of facts, hop by hop.",
          "Judge an ablation over seeds: which controller updates always work, which sometimes stall.",
      ],
      standard_minutes=2.25,
      runs_long="the standard profile trains three memory networks (4000 steps each) and 16 more for the ablation, "
                "about 2 minutes in all on a laptop CPU; the smoke profile takes seconds.")


# -- 1. the hops ----------------------------------------------------------------------------------------------

_SENTENCES = ["brian is a frog", "lily is gray", "brian is yellow", "greg is a frog", "<pad>"]
# illustrative weights of a trained 3-hop model on each sentence (rows) for hops 1..3 (columns); <pad> gets 0
_WEIGHTS = [[0.12, 0.62, 0.02], [0.02, 0.03, 0.01], [0.04, 0.05, 0.95], [0.82, 0.30, 0.02], [0.0, 0.0, 0.0]]


@diagram(L, "l04-memory-hops", alt="""A memory network answering "what color is greg?" in three hops. The story's
sentences (brian is a frog, lily is gray, brian is yellow, greg is a frog, and one padding slot) are encoded once
as memory keys and values, each of shape (B, N, D). The question, encoded, is the first controller q0 of shape
(B, D), the query. Each hop scores every sentence with the controller, takes a masked softmax over the N sentences
(the padding slot gets exactly 0), reads the weighted sum of the values, o, and updates the controller, q' = H q +
o. Hop 1 puts most of its weight on "greg is a frog"; with "frog" now in the controller, hop 2 finds "brian is a
frog" (and re-reads part of "greg is a frog", which also says frog); with "brian" in the controller, hop 3 reads
"brian is yellow". A linear layer on the last controller answers "yellow". The weights drawn are illustrative.""")
def memory_hops():
    s = Sheet(31, 13.4, title="Three hops along a chain: each hop's read changes the question the next hop asks")
    top, c = 10.6, 0.8                                  # y of the first sentence row, row height
    rows_y = [top - n * c for n in range(len(_SENTENCES))]
    s.text(2.3, top + 1.25, "story (N = 5 slots)", size=10, weight="bold")
    for y, text in zip(rows_y, _SENTENCES):
        s.text(4.4, y + c / 2, text, size=9, ha="right", color="soft" if text == "<pad>" else "ink")
    s.grid(4.7, rows_y[-1], len(_SENTENCES), 3, cell=c, color="k", label="keys $k_j$", shape=None)
    s.grid(7.4, rows_y[-1], len(_SENTENCES), 3, cell=c, color="v", label="values $v_j$", shape=None)
    s.text(7.0, rows_y[-1] - 0.35, "memory: (B, N, D) each", size=9, color="soft")
    s.text(7.0, rows_y[-1] - 0.8, "hop ℓ: keys from $E^{\\ell}$, values from $E^{\\ell+1}$", size=8, color="soft")
    # the hops: a column of weights each, over the sentence rows
    xs = [12.4, 17.9, 23.4]
    for h, x in enumerate(xs):
        col = [[row[h]] for row in _WEIGHTS]
        s.grid(x, rows_y[-1], len(_SENTENCES), 1, cell=c, values=col, cmap="Purples", vmax=1.0,
               label=f"hop {h + 1}: $a_j$", marks=[[f"{row[h]:.2f}"] for row in _WEIGHTS], size=9)
        best = max(range(len(_SENTENCES)), key=lambda n: _WEIGHTS[n][h])
        s.text(x + c + 0.2, rows_y[best] + c / 2, "← reads \"" + _SENTENCES[best] + "\"", size=8.5, color="w",
               ha="left")
    s.text(18.3, top + 1.9, "weights over the N sentences (B, N): masked softmax of $s_j = q \\cdot k_j$; the "
                            "padding slot gets exactly 0", size=9, color="soft")
    # the controller chain along the bottom
    y = 2.0
    s.box(0.3, y, 3.6, 1.2, "question", color="q", size=10, sub="what color is greg?")
    s.arrow(3.95, y + 0.6, 4.8, y + 0.6, color="q")
    s.box(4.9, y, 2.0, 1.2, "$q^0$", color="q", size=11, sub="(B, D)")
    last = 6.9
    for h, x in enumerate(xs):
        bx = x - 1.4
        s.arrow(last + 0.05, y + 0.6, bx - 0.05, y + 0.6, color="q")
        s.box(bx, y, 3.6, 1.2, f"hop {h + 1}", color="w", size=10, sub="$q' = H q + o$")
        s.arrow(x + c / 2, rows_y[-1] - 0.1 - (1.1 if h == 0 else 0.15), bx + 1.8, y + 1.25, color="w")
        s.box(bx + 3.9, y, 1.2, 1.2, f"$q^{h + 1}$", color="q", size=10)
        s.arrow(bx + 3.65, y + 0.6, bx + 3.85, y + 0.6, color="q")
        last = bx + 5.1
    s.arrow(6.6, 5.0, 10.9, 3.3, color="k", rad=0.15)
    s.text(5.2, 4.0, "keys and values\nreach every hop", size=8.5, color="soft")
    s.arrow(last + 0.05, y + 0.6, 28.0, y + 0.6, color="out")
    s.box(28.1, y, 2.6, 1.2, "yellow", color="out", size=11, weight="bold", sub="linear on $q^3$")
    s.text(15.5, 0.8, "o = Σ_j a_j v_j, the read: (B, D).  The controller carries the question and everything read "
                      "so far; every hop is one soft lookup.", size=9, color="soft")
    return s


# -- 2. how many hops a question needs ---------------------------------------------------------------------------

@diagram(L, "l04-chain-lengths", alt="""The four question types as chains of supporting facts. animal ("what is
brian?") and direct ("what color is brian?") need one fact, so one hop. kind ("what color is a frog?") needs two:
brian is a frog, then brian is yellow. chained ("what color is greg?") needs three: greg is a frog, brian is a frog,
brian is yellow. Each hop follows one link, because which sentence to read next depends on what the previous hop
found; a model with fewer hops than links can only guess among the colours of the story.""")
def chain_lengths():
    s = Sheet(31, 9.6, title="A question whose answer needs a chain of n facts needs at least n hops: one link per hop")
    rows = [
        ("animal", "what is brian?", ["brian is a frog"], "frog"),
        ("direct", "what color is brian?", ["brian is yellow"], "yellow"),
        ("kind", "what color is a frog?", ["brian is a frog", "brian is yellow"], "yellow"),
        ("chained", "what color is greg?", ["greg is a frog", "brian is a frog", "brian is yellow"], "yellow"),
    ]
    for r, (name, question, facts, answer) in enumerate(rows):
        y = 7.3 - r * 2.0
        s.text(0.4, y + 0.45, name, size=11, weight="bold", ha="left")
        s.box(2.6, y, 4.6, 0.9, question, color="q", size=9.5)
        x = 7.2
        for n, fact in enumerate(facts):
            s.arrow(x + 0.05, y + 0.45, x + 1.05, y + 0.45, color="w", label=f"hop {n + 1}", label_dy=0.3, size=8)
            s.box(x + 1.1, y, 4.0, 0.9, fact, color="v", size=9.5)
            x += 5.1
        s.arrow(x + 0.05, y + 0.45, x + 0.9, y + 0.45, color="out")
        s.box(x + 0.95, y, 2.0, 0.9, answer, color="out", size=10, weight="bold")
        s.text(30.7, y + 0.45, f"{len(facts)} fact{'s' if len(facts) > 1 else ''}: ≥ {len(facts)} hop"
                               f"{'s' if len(facts) > 1 else ''}", size=9.5, ha="right")
    s.text(15.5, 0.45, "Too few hops: the model cannot reach the last fact, and can only guess among the story's colours",
           size=9, color="soft")
    return s


# -- 3. the controller updates of the ablation ---------------------------------------------------------------------

@diagram(L, "l04-updates", alt="""The four ways a hop can turn its read o into the next controller, compared in
section 5. Learned H: q' = H q + o, H a learned D by D matrix started at the identity (the form you implement).
Identity: q' = q + o, the question is kept and what was read is added. Zero: q' = o, the controller forgets the
question and keeps only what it read. Rotate the read: q' = q + R o, with R a learned linear map (any D by D matrix, not only a
rotation) started at the identity, so that what was just read can be turned away from the sentence it came from.""")
def updates():
    s = Sheet(31, 7.0, title="Four controller updates: what the next hop asks with, after reading o")
    s.text(15.5, 6.35, "q, o, q': (B, D);  H, R: (D, D) learned matrices", size=9, color="soft")
    variants = [("learned H", "$q' = H\\,q + o$", "H learned, starts at I", True, "H"),
                ("identity", "$q' = q + o$", "the question is kept", True, None),
                ("zero", "$q' = o$", "the question is forgotten", False, None),
                ("rotate the read", "$q' = q + R\\,o$", "R learned, starts at I", True, "R")]
    for n, (name, formula, sub, keeps, mat) in enumerate(variants):
        x = 0.4 + n * 7.7
        s.text(x + 3.4, 5.3, name, size=11, weight="bold", color="w")
        s.box(x + 0.2, 3.0, 1.6, 1.0, "q", color="q", size=11)
        s.box(x + 0.2, 1.3, 1.6, 1.0, "o", color="v", size=11)
        if mat == "H":
            s.box(x + 2.4, 3.0, 1.2, 1.0, "H", color="neutral", size=11)
            s.arrow(x + 1.85, 3.5, x + 2.35, 3.5, color="q")
        if mat == "R":
            s.box(x + 2.4, 1.3, 1.2, 1.0, "R", color="neutral", size=11)
            s.arrow(x + 1.85, 1.8, x + 2.35, 1.8, color="v")
        s.circle(x + 4.6, 2.65, 0.38, "+", color="neutral", size=12)
        if keeps:
            s.arrow(x + (3.65 if mat == "H" else 1.85), 3.5, x + 4.3, 2.9, color="q")
        else:
            s.text(x + 3.1, 3.5, "✕ dropped", size=9, color="bad")
        s.arrow(x + (3.65 if mat == "R" else 1.85), 1.8, x + 4.3, 2.4, color="v")
        s.arrow(x + 5.0, 2.65, x + 5.8, 2.65, color="q")
        s.box(x + 5.85, 2.15, 1.3, 1.0, "q'", color="q", size=11)
        s.text(x + 3.6, 0.55, formula + ":  " + sub, size=9)
    return s

"""Planted-bug submissions and correct alternative styles for lesson 14 (induction heads).

Each variant replaces whole solution cells (by grade_id) of the reference solution; ``must_fail``
lists the test cells (by grade_id) that must lose points. An empty ``must_fail`` marks a correct
solution in another style, which must keep full marks.
"""

from planting import derived

LESSON = "14_induction_heads"


def ref(cell, *changes):
    return derived(LESSON, cell, *changes)


FORWARD_WITH_ABLATION = '''

def forward_with_ablation(model, idx, heads):
    with ablate_heads(model, heads):
        logits = model(idx)
        weights = [w.detach().clone() for w in model.attention_weights]
    return logits, weights
'''

# --------------------------------------------------------------------------------------------
# Correct solutions in other styles
# --------------------------------------------------------------------------------------------

# The model reads a flag (a set of heads to switch off), set and cleared by a class-based context manager;
# einsum everywhere; the scores by torch.diagonal; the circuits and the composition score in float64.
FLAG_MODEL = '''
class AttentionLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.heads_off = set()
        for name in ("w_q", "w_k", "w_v", "w_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=False))

    def forward(self, x):
        B, T, D = x.shape
        H, Dh = self.n_heads, self.d_head
        q = self.w_q(x).reshape(B, T, H, Dh)
        k = self.w_k(x).reshape(B, T, H, Dh)
        v = self.w_v(x).reshape(B, T, H, Dh)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / Dh ** 0.5
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device))
        weights = torch.softmax(torch.where(allowed, scores, torch.finfo(scores.dtype).min), dim=-1)
        z = torch.einsum("bhqk,bkhd->bqhd", weights, v)
        if self.heads_off:
            keep = torch.ones(H, device=x.device)
            keep[sorted(self.heads_off)] = 0.0
            z = z * keep[None, None, :, None]
        return self.w_o(z.reshape(B, T, D)), weights


class AttentionOnlyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers=2, block_size=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.layers = nn.ModuleList([AttentionLayer(d_model, n_heads) for _ in range(n_layers)])
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)
        self.attention_weights = []

    def forward(self, idx):
        x = self.embed(idx) + self.pos.weight[: idx.shape[1]]
        maps = []
        for layer in self.layers:
            out, w = layer(x)
            x = x + out
            maps.append(w)
        self.attention_weights = maps
        return self.unembed(x)
'''

FLAG_ABLATE = '''
class ablate_heads:
    """A context manager written as a class: it sets the flag the layers read, and clears it on exit."""

    def __init__(self, model, heads):
        self.model, self.heads = model, {int(k): [int(h) for h in v] for k, v in heads.items()}

    def __enter__(self):
        for i, hs in self.heads.items():
            self.model.layers[i].heads_off = set(hs)
        return self.model

    def __exit__(self, *exc):
        for i in self.heads:
            self.model.layers[i].heads_off = set()
        return False
''' + FORWARD_WITH_ABLATION

DIAGONAL_PREV = '''
def previous_token_score(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=(0, -1))
'''

DIAGONAL_INDUCTION = '''
def induction_score(weights, length):
    diag = torch.diagonal(weights, offset=-(length - 1), dim1=-2, dim2=-1)   # rows length-1 .. 2*length
    return diag[..., 2:].mean(dim=(0, -1))                                   # rows length+1 .. 2*length
'''

F64_OV = '''
def ov_circuit(model, layer, head):
    sd = {k: v.detach().double() for k, v in model.state_dict().items()}
    D = sd["embed.weight"].shape[1]
    Dh = D // model.layers[layer].n_heads
    cols = slice(head * Dh, (head + 1) * Dh)
    W_V = sd[f"layers.{layer}.w_v.weight"][cols]          # (Dh, D), nn.Linear's (out, in)
    W_O = sd[f"layers.{layer}.w_o.weight"][:, cols]       # (D, Dh)
    return torch.einsum("vd,hd,eh,ue->vu", sd["embed.weight"], W_V, W_O, sd["unembed.weight"])
'''

F64_QK = '''
def qk_circuit(model, layer, head):
    sd = {k: v.detach().double() for k, v in model.state_dict().items()}
    D = sd["embed.weight"].shape[1]
    Dh = D // model.layers[layer].n_heads
    cols = slice(head * Dh, (head + 1) * Dh)
    q = torch.einsum("vd,hd->vh", sd["embed.weight"], sd[f"layers.{layer}.w_q.weight"][cols])
    k = torch.einsum("vd,hd->vh", sd["embed.weight"], sd[f"layers.{layer}.w_k.weight"][cols])
    return torch.einsum("ah,bh->ab", q, k) / math.sqrt(Dh)
'''

F64_COMPOSITION = '''
def composition_score(w_a, w_b):
    a, b = w_a.double(), w_b.double()
    return float(torch.sqrt(((a @ b) ** 2).sum()) / (torch.sqrt((a ** 2).sum()) * torch.sqrt((b ** 2).sum())))
'''

# Loops and a forward hook on w_o that subtracts the named heads' contributions from its output.
LOOP_SEQUENCES = '''
def repeated_sequences(batch, length, vocab_size, generator=None):
    first = torch.randint(0, vocab_size - 1, (batch, length), generator=generator) + 1
    out = torch.zeros(batch, 2 * length + 1, dtype=torch.int64)
    out[:, 1:length + 1] = first
    out[:, length + 1:] = first
    return out
'''

LOOP_PREV = '''
def previous_token_score(weights):
    B, H, T, _ = weights.shape
    total = torch.zeros(H, dtype=weights.dtype)
    for t in range(1, T):
        total += weights[:, :, t, t - 1].sum(dim=0)
    return total / (B * (T - 1))
'''

LOOP_INDUCTION = '''
def induction_score(weights, length):
    scores = []
    for h in range(weights.shape[1]):
        picked = [weights[:, h, t, t - length + 1] for t in range(length + 1, 2 * length + 1)]
        scores.append(torch.stack(picked).mean())
    return torch.stack(scores)
'''

HOOK_AFTER_ABLATE = '''
@contextlib.contextmanager
def ablate_heads(model, heads):
    handles = []

    def make_hook(cols):
        def hook(module, args, output):
            z = args[0]
            return output - z[..., cols] @ module.weight[:, cols].T     # take the heads' terms back out
        return hook

    try:
        for i, hs in heads.items():
            layer = model.layers[i]
            cols = torch.cat([torch.arange(h * layer.d_head, (h + 1) * layer.d_head) for h in hs]) if hs else None
            if cols is not None:
                handles.append(layer.w_o.register_forward_hook(make_hook(cols)))
        yield
    finally:
        while handles:
            handles.pop().remove()
''' + FORWARD_WITH_ABLATION

# Edit the weights themselves: the heads' columns of w_o set to zero, put back in a finally.
EDIT_WEIGHTS_ABLATE = '''
@contextlib.contextmanager
def ablate_heads(model, heads):
    saved = {}
    try:
        with torch.no_grad():
            for i, hs in heads.items():
                w_o = model.layers[i].w_o.weight
                saved[i] = w_o.detach().clone()
                Dh = w_o.shape[1] // model.layers[i].n_heads
                for h in hs:
                    w_o[:, h * Dh:(h + 1) * Dh] = 0.0
        yield model
    finally:
        with torch.no_grad():
            for i, w in saved.items():
                model.layers[i].w_o.weight.copy_(w)
''' + FORWARD_WITH_ABLATION

LOOP_COMPOSITION = '''
def composition_score(w_a, w_b):
    prod = torch.mm(w_a, w_b)
    return (prod.norm() / w_a.norm() / w_b.norm()).item()
'''

VARIANTS = {
    # ---- bugs -----------------------------------------------------------------------------------
    "induction_offset_same_token": {
        "replace": {"induction_score": ref("induction_score", ("t - length + 1]", "t - length]"))},
        "must_fail": ["test_induction_score"],
    },
    "induction_over_both_copies": {
        "replace": {"induction_score": '''
def induction_score(weights, length):
    diag = torch.diagonal(weights, offset=-(length - 1), dim1=-2, dim2=-1)   # every row that has a t-L+1
    return diag.mean(dim=(0, -1))
'''},
        "must_fail": ["test_induction_score_second_copy_only"],
    },
    "ablate_whole_layer": {
        "replace": {"ablate_heads": ref("ablate_heads", ("            for h in switched_off:\n"
                                                         "                keep[h * Dh:(h + 1) * Dh] = 0.0",
                                                         "            if switched_off:\n                keep[:] = 0.0"))},
        "must_fail": ["test_ablate_heads_named_heads"],
    },
    "ov_wrong_order": {
        "replace": {"ov_circuit": ref("ov_circuit", ("W_V = attn.w_v.weight[s].T", "W_V = attn.w_o.weight[:, s]"),
                                      ("W_O = attn.w_o.weight[:, s].T", "W_O = attn.w_v.weight[s]"))},
        "must_fail": ["test_ov_circuit"],
    },
    "composition_unnormalised": {
        "replace": {"composition_score": ref("composition_score",
                                             ("(norm(w_a @ w_b) / (norm(w_a) * norm(w_b))).item()", "norm(w_a @ w_b).item()"))},
        "must_fail": ["test_composition_score_normalised"],
    },
    "ablate_not_restored_on_error": {
        "replace": {"ablate_heads": ref("ablate_heads", ("    try:\n", "    if True:\n"), ("    finally:\n", "    if True:\n"))},
        "must_fail": ["test_ablate_heads_restores"],
    },
    "model_scale_sqrt_d_model": {
        "replace": {"AttentionOnlyTransformer": ref("AttentionOnlyTransformer", ("/ math.sqrt(Dh)", "/ math.sqrt(D)"))},
        "must_fail": ["test_model_forward"],
    },
    "qk_scale_sqrt_d_model": {
        "replace": {"qk_circuit": ref("qk_circuit", ("/ math.sqrt(Dh)", "/ math.sqrt(model.embed.weight.shape[1])"))},
        "must_fail": ["test_qk_circuit"],
    },
    "repeated_no_start_token": {
        "replace": {"repeated_sequences": ref("repeated_sequences", ("start = torch.zeros(batch, 1, dtype=torch.long)",
                                               "start = torch.randint(1, vocab_size, (batch, 1), generator=generator)"))},
        "must_fail": ["test_repeated_sequences_layout"],
    },
    "repeated_ignores_generator": {
        "replace": {"repeated_sequences": ref("repeated_sequences", (", generator=generator)", ")"))},
        "must_fail": ["test_repeated_sequences_random"],
    },
    "model_weights_appended": {
        "replace": {"AttentionOnlyTransformer": ref("AttentionOnlyTransformer",
                                                    ("        self.attention_weights = []                                           # this call's weights only\n", ""))},
        "must_fail": ["test_model_forward"],
    },
    "model_with_bias": {
        "replace": {"AttentionOnlyTransformer": ref("AttentionOnlyTransformer", ("self.w_q = nn.Linear(d_model, d_model, bias=False)",
                                                                                 "self.w_q = nn.Linear(d_model, d_model)"))},
        "must_fail": ["test_model_structure"],
    },
    # ---- correct alternatives -------------------------------------------------------------------
    "flag_model_class_context_manager_float64": {
        "replace": {"AttentionOnlyTransformer": FLAG_MODEL, "ablate_heads": FLAG_ABLATE,
                    "previous_token_score": DIAGONAL_PREV, "induction_score": DIAGONAL_INDUCTION,
                    "ov_circuit": F64_OV, "qk_circuit": F64_QK, "composition_score": F64_COMPOSITION},
        "must_fail": [],
    },
    "loops_and_output_hook": {
        "replace": {"repeated_sequences": LOOP_SEQUENCES, "previous_token_score": LOOP_PREV,
                    "induction_score": LOOP_INDUCTION, "ablate_heads": HOOK_AFTER_ABLATE,
                    "composition_score": LOOP_COMPOSITION},
        "must_fail": [],
    },
}

VARIANTS.update({
    "ablate_by_editing_w_o": {"replace": {"ablate_heads": EDIT_WEIGHTS_ABLATE}, "must_fail": []},
    # more bugs, in EXTENDED below
    "previous_token_counts_query_0": {
        "replace": {"previous_token_score": '''
def previous_token_score(weights):
    shifted = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)           # (B, H, T-1)
    return shifted.sum(dim=-1).mean(dim=0) / weights.shape[-1]               # divided by T, not T-1
'''},
        "must_fail": ["test_previous_token_score"],
    },
    "ablate_only_the_reported_weights": {
        "replace": {"ablate_heads": '''
@contextlib.contextmanager
def ablate_heads(model, heads):
    yield model                                        # nothing switched off while the model runs
    for i, hs in heads.items():
        for h in hs:
            model.attention_weights[i][:, h] = 0.0     # only the stored weights are zeroed, afterwards
''' + FORWARD_WITH_ABLATION},
        "must_fail": ["test_ablate_heads_named_heads"],
    },
    "model_tied_unembedding": {
        "replace": {"AttentionOnlyTransformer": ref("AttentionOnlyTransformer", (
            "        self.unembed = nn.Linear(d_model, vocab_size, bias=False)\n",
            "        self.unembed = nn.Linear(d_model, vocab_size, bias=False)\n        self.unembed.weight = self.embed.weight\n"))},
        "must_fail": ["test_model_structure"],
    },
    "repeated_zero_among_tokens": {
        "replace": {"repeated_sequences": ref("repeated_sequences", ("torch.randint(1, vocab_size,", "torch.randint(0, vocab_size,"))},
        "must_fail": ["test_repeated_sequences_layout", "test_repeated_sequences_random"],
    },
})

# More variants of bugs the core bank already catches in the same cells (COURSE_PLANTED=all grades them).
EXTENDED = ["model_tied_unembedding", "previous_token_counts_query_0", "ablate_only_the_reported_weights", "repeated_zero_among_tokens"]

# Issue 42 (fairness certificate): one layer under two names agrees with every oracle that copies the
# learner's weights; the structure test sets each map's weights apart and reads them back.
VARIANTS.update({
    "layer_w_v_is_w_q": {"replace": {"AttentionOnlyTransformer": derived(
        LESSON, "AttentionOnlyTransformer", ("        self.w_v = nn.Linear(d_model, d_model, bias=False)\n",
                                             "        self.w_v = self.w_q\n"))},
        "must_fail": ["test_model_structure"], "says": {"test_model_structure": ["one and the same layer"]}},
})

"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.

The entries that switch heads off or read a head's weight matrices need the number of heads, which the
docstrings do not name as an attribute of the model: each such entry brings its own
``AttentionOnlyTransformer`` (a learner's notebook holds both), keeping H where its functions look for it.
"""

LESSON = "14_induction_heads"

_FORWARD_WITH_ABLATION = '''

def forward_with_ablation(model, idx, heads):
    """Given (nothing to write): ``model(idx)`` inside ``with ablate_heads(model, heads)``.

    Returns:
        (logits, a copy of model.attention_weights), both computed with the heads switched off.
    """
    with ablate_heads(model, heads):
        logits = model(idx)
        weights = [w.detach().clone() for w in model.attention_weights]
    return logits, weights
'''

# An attention layer class with its own n_heads, batched heads, a masked_fill causal mask.
_MODEL_BATCHED = '''
class AttentionLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = (w(x).view(B, T, H, D // H).transpose(1, 2) for w in (self.w_q, self.w_k, self.w_v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)                       # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        z = (weights @ v).transpose(1, 2).reshape(B, T, D)                          # heads side by side
        return self.w_o(z), weights


class AttentionOnlyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers=2, block_size=64):
        super().__init__()
        self.n_heads = n_heads
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.layers = nn.ModuleList([AttentionLayer(d_model, n_heads) for _ in range(n_layers)])
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)
        self.attention_weights = []

    def forward(self, idx):
        T = idx.shape[1]
        x = self.embed(idx) + self.pos(torch.arange(T, device=idx.device))
        kept = []
        for layer in self.layers:
            out, w = layer(x)
            x = x + out
            kept.append(w)
        self.attention_weights = kept
        return self.unembed(x)
'''

# No layer class: each layer an nn.ModuleDict, einsum attention, a model-level dict of heads to switch off.
_MODEL_MODULEDICT = '''
class AttentionOnlyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers=2, block_size=64):
        super().__init__()
        assert d_model % n_heads == 0
        self.d_model, self.n_heads = d_model, n_heads
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.layers = nn.ModuleList(
            nn.ModuleDict({name: nn.Linear(d_model, d_model, bias=False) for name in ("w_q", "w_k", "w_v", "w_o")})
            for _ in range(n_layers))
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)
        self.attention_weights = []
        self.heads_off = {}                          # {layer: [heads]}, read by forward (ablate_heads sets it)

    def forward(self, idx):
        B, T = idx.shape
        H, Dh = self.n_heads, self.d_model // self.n_heads
        x = self.embed(idx) + self.pos.weight[:T]
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool, device=idx.device))
        self.attention_weights = []
        for i, layer in enumerate(self.layers):
            q = layer["w_q"](x).reshape(B, T, H, Dh)
            k = layer["w_k"](x).reshape(B, T, H, Dh)
            v = layer["w_v"](x).reshape(B, T, H, Dh)
            scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / Dh ** 0.5
            weights = torch.softmax(torch.where(allowed, scores, float("-inf")), dim=-1)
            z = torch.einsum("bhqk,bkhd->bqhd", weights, v)                             # (B, T, H, Dh)
            off = self.heads_off.get(i, [])
            if len(off) > 0:
                keep = torch.ones(H, device=x.device, dtype=z.dtype)
                keep[list(off)] = 0.0
                z = z * keep[:, None]
            x = x + layer["w_o"](z.reshape(B, T, H * Dh))
            self.attention_weights.append(weights)
        return self.unembed(x)
'''

# One head at a time in a Python loop, the weights kept detached, H kept on each layer as `heads`.
_MODEL_HEAD_LOOP = '''
class AttentionLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.heads = n_heads
        self.head_dim = d_model // n_heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model, bias=False), nn.Linear(d_model, d_model, bias=False)
        self.w_v, self.w_o = nn.Linear(d_model, d_model, bias=False), nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        T = x.shape[1]
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)
        future = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=1)
        zs, ws = [], []
        for h in range(self.heads):
            s = slice(h * self.head_dim, (h + 1) * self.head_dim)
            scores = q[..., s] @ k[..., s].transpose(1, 2) * self.head_dim ** -0.5          # (B, T, T)
            scores = scores.masked_fill(future, float("-inf"))
            e = torch.exp(scores - scores.amax(-1, keepdim=True))                            # exp(-inf) = 0
            w = e / e.sum(-1, keepdim=True)
            ws.append(w)
            zs.append(w @ v[..., s])
        return self.w_o(torch.cat(zs, dim=-1)), torch.stack(ws, dim=1)


class AttentionOnlyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers=2, block_size=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.layers = nn.ModuleList()
        for _ in range(n_layers):
            self.layers.append(AttentionLayer(d_model, n_heads))
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)
        self.attention_weights = []

    def forward(self, idx):
        positions = torch.arange(idx.shape[1], device=idx.device)
        residual = self.embed(idx) + self.pos(positions)[None]
        weights = []
        for layer in self.layers:
            delta, w = layer(residual)
            residual = residual + delta
            weights.append(w.detach())
        self.attention_weights = weights
        return self.unembed(residual)
'''


# Heads switched off by a set on each layer that its forward reads; w_o applied as F.linear on its weight; the list
# of weights refilled in place at every call.
_MODEL_LAYER_FLAG = '''
class AttentionLayer(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.off = set()                                   # heads whose z is zeroed (ablate_heads fills it)
        self.w_q = nn.Linear(d_model, d_model, bias=False)
        self.w_k = nn.Linear(d_model, d_model, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        self.w_o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = (w(x).view(B, T, H, D // H).transpose(1, 2) for w in (self.w_q, self.w_k, self.w_v))
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)                       # (B, H, T, T)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        z = weights @ v                                                              # (B, H, T, Dh)
        if self.off:
            keep = torch.ones(H, 1, 1, device=x.device, dtype=z.dtype)
            keep[sorted(self.off)] = 0.0
            z = z * keep
        z = z.transpose(1, 2).reshape(B, T, D)
        return F.linear(z, self.w_o.weight), weights


class AttentionOnlyTransformer(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers=2, block_size=64):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.layers = nn.ModuleList([AttentionLayer(d_model, n_heads) for _ in range(n_layers)])
        self.unembed = nn.Linear(d_model, vocab_size, bias=False)
        self.attention_weights = []

    def forward(self, idx):
        T = idx.shape[1]
        x = self.embed(idx) + self.pos(torch.arange(T, device=idx.device))
        self.attention_weights.clear()                   # the same list, refilled: only this call's weights
        for layer in self.layers:
            out, w = layer(x)
            x = x + out
            self.attention_weights.append(w)
        return self.unembed(x)
'''

VARIANTS = {
    "repeat_pad_style": {
        "blind": True, "style": "the copy repeated with .repeat(1, 2), the start column added with F.pad",
        "replace": {"repeated_sequences": '''
def repeated_sequences(batch, length, vocab_size, generator=None):
    tokens = torch.randint(1, vocab_size, (batch, length), generator=generator)
    return F.pad(tokens.repeat(1, 2), (1, 0), value=0)
'''},
        "must_fail": [],
    },
    "preallocated_slices_style": {
        "blind": True, "style": "a preallocated zero tensor, the two copies written into slices",
        "replace": {"repeated_sequences": '''
def repeated_sequences(batch, length, vocab_size, generator=None):
    out = torch.zeros(batch, 2 * length + 1, dtype=torch.long)
    tokens = torch.randint(1, vocab_size, (batch, length), generator=generator)
    out[:, 1:length + 1] = tokens
    out[:, length + 1:] = tokens
    return out
'''},
        "must_fail": [],
    },
    "hstack_new_zeros_tile_style": {
        "blind": True, "style": "torch.hstack of new_zeros and the copy tiled twice",
        "replace": {"repeated_sequences": '''
def repeated_sequences(batch, length, vocab_size, generator=None):
    x = torch.randint(1, vocab_size, (batch, length), generator=generator, dtype=torch.int64)
    return torch.hstack([x.new_zeros(batch, 1), x.tile(1, 2)])
'''},
        "must_fail": [],
    },
    "scores_diagonal_style": {
        "blind": True, "style": "torch.diagonal at offsets -1 and -(L-1), the last L entries for the second copy",
        "replace": {"previous_token_score": '''
def previous_token_score(weights):
    d = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)       # (B, H, T-1): weights[b, h, t, t-1]
    return d.mean(dim=(0, 2))
''', "induction_score": '''
def induction_score(weights, length):
    d = torch.diagonal(weights, offset=-(length - 1), dim1=-2, dim2=-1)   # weights[b, h, t, t-L+1] for t = L-1 .. 2L
    return d[..., -length:].mean(dim=(0, 2))                             # the second copy: t = L+1 .. 2L
'''},
        "must_fail": [],
    },
    "scores_advanced_indexing_style": {
        "blind": True, "style": "advanced indexing with query and key index tensors",
        "replace": {"previous_token_score": '''
def previous_token_score(weights):
    T = weights.shape[-1]
    t = torch.arange(1, T, device=weights.device)
    return weights[:, :, t, t - 1].mean(dim=-1).mean(dim=0)
''', "induction_score": '''
def induction_score(weights, length):
    t = torch.arange(length + 1, 2 * length + 1, device=weights.device)
    picked = weights[:, :, t, t - length + 1]                 # (B, H, L)
    return picked.mean(dim=-1).mean(dim=0)
'''},
        "must_fail": [],
    },
    "scores_einsum_mask_style": {
        "blind": True, "style": "a (T, T) 0/1 mask of the wanted cells, einsum, divided by the number of cells",
        "replace": {"previous_token_score": '''
def previous_token_score(weights):
    B, H, T, _ = weights.shape
    mask = torch.diag(torch.ones(T - 1, dtype=weights.dtype, device=weights.device), diagonal=-1)   # (T, T)
    return torch.einsum("bhqk,qk->h", weights, mask) / (B * (T - 1))
''', "induction_score": '''
def induction_score(weights, length):
    B, H, T, _ = weights.shape
    mask = torch.zeros(T, T, dtype=weights.dtype, device=weights.device)
    for t in range(length + 1, 2 * length + 1):
        mask[t, t - length + 1] = 1.0
    return torch.einsum("bhqk,qk->h", weights, mask) / (B * length)
'''},
        "must_fail": [],
    },
    "layer_class_prehook_linalg_style": {
        "blind": True,
        "style": "a layer class with batched heads; ablation by forward pre-hooks on w_o; circuits by slicing and @; "
                 "torch.linalg.matrix_norm",
        "replace": {"AttentionOnlyTransformer": _MODEL_BATCHED, "ablate_heads": '''
@contextlib.contextmanager
def ablate_heads(model, heads):
    handles = []
    try:
        for layer_index, head_list in heads.items():
            layer = model.layers[layer_index]
            D = layer.w_o.in_features
            Dh = D // layer.n_heads
            keep = torch.ones(D, device=layer.w_o.weight.device, dtype=layer.w_o.weight.dtype)
            for h in head_list:
                keep[h * Dh:(h + 1) * Dh] = 0.0

            def zero_heads(module, args, keep=keep):
                return (args[0] * keep,)

            handles.append(layer.w_o.register_forward_pre_hook(zero_heads))
        yield model
    finally:
        for handle in handles:
            handle.remove()
''' + _FORWARD_WITH_ABLATION, "ov_circuit": '''
def ov_circuit(model, layer, head):
    attn = model.layers[layer]
    Dh = attn.w_v.weight.shape[0] // attn.n_heads
    cols = slice(head * Dh, (head + 1) * Dh)
    W_E = model.embed.weight                        # (V, D)
    W_V = attn.w_v.weight[cols].T                   # (D, Dh)
    W_O = attn.w_o.weight[:, cols].T                # (Dh, D)
    W_U = model.unembed.weight.T                    # (D, V)
    return W_E @ W_V @ W_O @ W_U
''', "qk_circuit": '''
def qk_circuit(model, layer, head):
    attn = model.layers[layer]
    Dh = attn.w_q.weight.shape[0] // attn.n_heads
    cols = slice(head * Dh, (head + 1) * Dh)
    W_E = model.embed.weight
    q = W_E @ attn.w_q.weight[cols].T               # (V, Dh)
    k = W_E @ attn.w_k.weight[cols].T               # (V, Dh)
    return q @ k.T / math.sqrt(Dh)
''', "composition_score": '''
def composition_score(w_a, w_b):
    num = torch.linalg.matrix_norm(w_a @ w_b)
    den = torch.linalg.matrix_norm(w_a) * torch.linalg.matrix_norm(w_b)
    return (num / den).item()
'''},
        "must_fail": [],
    },
    "moduledict_flag_einsum_style": {
        "blind": True,
        "style": "layers as nn.ModuleDict, a dict of heads the forward reads (set and cleared by ablate_heads), "
                 "circuits by einsum on (H, Dh, D) views, the norms as square roots of sums of squares in float64",
        "replace": {"AttentionOnlyTransformer": _MODEL_MODULEDICT, "ablate_heads": '''
@contextlib.contextmanager
def ablate_heads(model, heads):
    before = model.heads_off
    model.heads_off = {int(layer): list(hs) for layer, hs in heads.items()}
    try:
        yield
    finally:
        model.heads_off = before
''' + _FORWARD_WITH_ABLATION, "ov_circuit": '''
def ov_circuit(model, layer, head):
    H, D = model.n_heads, model.d_model
    Dh = D // H
    w_v = model.layers[layer]["w_v"].weight.view(H, Dh, D)[head]      # (Dh, D): rows = head's value features
    w_o = model.layers[layer]["w_o"].weight.view(D, H, Dh)[:, head]   # (D, Dh): columns = head's output features
    # row-vector convention: E (V, D) -> W_V^h = w_v.T (D, Dh) -> W_O^h = w_o.T (Dh, D) -> W_U = unembed.weight.T
    return torch.einsum("ad,ed,fe,vf->av", model.embed.weight, w_v, w_o, model.unembed.weight)
''', "qk_circuit": '''
def qk_circuit(model, layer, head):
    H, D = model.n_heads, model.d_model
    Dh = D // H
    w_q = model.layers[layer]["w_q"].weight.view(H, Dh, D)[head]
    w_k = model.layers[layer]["w_k"].weight.view(H, Dh, D)[head]
    E = model.embed.weight
    return torch.einsum("ad,ed,bf,ef->ab", E, w_q, E, w_k) / math.sqrt(Dh)
''', "composition_score": '''
def composition_score(w_a, w_b):
    a, b = w_a.double(), w_b.double()
    fro = lambda m: torch.sqrt((m * m).sum())
    return float(fro(a @ b) / (fro(a) * fro(b)))
'''},
        "must_fail": [],
    },
    "head_loop_weight_edit_class_style": {
        "blind": True,
        "style": "a per-head loop in the layer, detached weights; ablation as a class context manager that zeroes "
                 "w_o's columns and puts them back; circuits by running the embeddings through the modules; torch.norm",
        "replace": {"AttentionOnlyTransformer": _MODEL_HEAD_LOOP, "ablate_heads": '''
class ablate_heads:
    """A context manager: zero the named heads' columns of w_o on entry, restore the saved weights on exit."""

    def __init__(self, model, heads):
        self.model = model
        self.heads = {layer: list(hs) for layer, hs in heads.items()}
        self.saved = {}

    def __enter__(self):
        with torch.no_grad():
            for layer, hs in self.heads.items():
                attn = self.model.layers[layer]
                self.saved[layer] = attn.w_o.weight.detach().clone()
                for h in hs:
                    attn.w_o.weight[:, h * attn.head_dim:(h + 1) * attn.head_dim] = 0.0
        return self

    def __exit__(self, exc_type, exc, tb):
        with torch.no_grad():
            for layer, w in self.saved.items():
                self.model.layers[layer].w_o.weight.copy_(w)
        self.saved = {}
        return False
''' + _FORWARD_WITH_ABLATION, "ov_circuit": '''
@torch.no_grad()
def ov_circuit(model, layer, head):
    attn = model.layers[layer]
    Dh = attn.head_dim
    v = attn.w_v(model.embed.weight)                       # (V, D): every token's value, all heads
    z = torch.zeros_like(v)
    z[:, head * Dh:(head + 1) * Dh] = v[:, head * Dh:(head + 1) * Dh]   # only this head's output
    return model.unembed(attn.w_o(z))                      # (V, V)
''', "qk_circuit": '''
@torch.no_grad()
def qk_circuit(model, layer, head):
    attn = model.layers[layer]
    Dh = attn.head_dim
    E = model.embed.weight
    q = attn.w_q(E)[:, head * Dh:(head + 1) * Dh]
    k = attn.w_k(E)[:, head * Dh:(head + 1) * Dh]
    return torch.matmul(q, k.transpose(0, 1)) / Dh ** 0.5
''', "composition_score": '''
def composition_score(w_a, w_b):
    product = torch.norm(w_a @ w_b, p="fro")
    return (product / (torch.norm(w_a, p="fro") * torch.norm(w_b, p="fro"))).item()
'''},
        "must_fail": [],
    },
    "layer_flag_flinear_multi_dot_style": {
        "blind": True,
        "style": "a set of heads on each layer that its forward reads, w_o applied with F.linear, the weights list "
                 "refilled in place; circuits with torch.linalg.multi_dot; the norms as vector norms of flattened matrices",
        "replace": {"AttentionOnlyTransformer": _MODEL_LAYER_FLAG, "ablate_heads": """
@contextlib.contextmanager
def ablate_heads(model, heads):
    changed = []
    try:
        for layer, hs in heads.items():
            model.layers[layer].off = set(hs)
            changed.append(layer)
        yield
    finally:
        for layer in changed:
            model.layers[layer].off = set()
""" + _FORWARD_WITH_ABLATION, "ov_circuit": """
def ov_circuit(model, layer, head):
    attn = model.layers[layer]
    H = attn.n_heads
    D = attn.w_v.in_features
    Dh = D // H
    W_V = attn.w_v.weight.reshape(H, Dh, D)[head].T            # (D, Dh)
    W_O = attn.w_o.weight.reshape(D, H, Dh)[:, head].T         # (Dh, D)
    return torch.linalg.multi_dot([model.embed.weight, W_V, W_O, model.unembed.weight.T])
""", "qk_circuit": """
def qk_circuit(model, layer, head):
    attn = model.layers[layer]
    H = attn.n_heads
    D = attn.w_q.in_features
    Dh = D // H
    W_Q = attn.w_q.weight.reshape(H, Dh, D)[head].T            # (D, Dh)
    W_K = attn.w_k.weight.reshape(H, Dh, D)[head].T
    E = model.embed.weight
    return torch.linalg.multi_dot([E, W_Q, W_K.T, E.T]) / math.sqrt(Dh)
""", "composition_score": """
def composition_score(w_a, w_b):
    norm = lambda m: torch.linalg.vector_norm(m.flatten())
    return float(norm(w_a @ w_b) / (norm(w_a) * norm(w_b)))
"""},
        "must_fail": [],
    },
    "composition_trace_style": {
        "blind": True, "style": "the squared Frobenius norm as a trace, ||AB||^2 = tr(B^T A^T A B), in float64",
        "replace": {"composition_score": '''
def composition_score(w_a, w_b):
    A, Bm = w_a.to(torch.float64), w_b.to(torch.float64)
    AB = A @ Bm
    num = torch.trace(AB.T @ AB)
    den = torch.trace(A.T @ A) * torch.trace(Bm.T @ Bm)
    return math.sqrt(num.item() / den.item())
'''},
        "must_fail": [],
    },
}

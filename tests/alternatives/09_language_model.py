"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2. The entries marked ``blind: False`` were
written with the hidden tests in view (issue 42), in styles that its new checks could wrongly punish.
"""

LESSON = "09_language_model"
VARIANTS = {
    "loss_nll_class_axis_second_style": {
        "blind": True, "style": "log_softmax then nll_loss with the vocabulary as axis 1",
        "replace": {"lm_loss": '''
def lm_loss(logits, idx):
    logp = F.log_softmax(logits[:, :-1, :], dim=-1)          # (B, T-1, V)
    return F.nll_loss(logp.transpose(1, 2), idx[:, 1:])
'''},
        "must_fail": [],
    },
    "attn_by_hand_position_mask_style": {
        "blind": True, "style": "attention written out, the causal mask from positions, F.dropout",
        "replace": {"CausalSelfAttention": '''
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        assert d_model % n_heads == 0, "n_heads must divide d_model"
        self.n_heads = n_heads
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x, past_kv=None):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = (t.reshape(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        if past_kv is not None:
            k = torch.cat([past_kv[0], k], dim=2)
            v = torch.cat([past_kv[1], v], dim=2)
        T_past = k.shape[2] - T
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)             # (B, H, T, T_past + T)
        rows = torch.arange(T, device=x.device)[:, None] + T_past
        cols = torch.arange(k.shape[2], device=x.device)[None, :]
        scores = scores.masked_fill(cols > rows, float("-inf"))
        weights = F.dropout(torch.softmax(scores, dim=-1), p=self.dropout, training=self.training)
        out = (weights @ v).transpose(1, 2).reshape(B, T, D)
        out = F.dropout(self.proj(out), p=self.dropout, training=self.training)
        return out, (k, v)
'''},
        "must_fail": [],
    },
    "block_ordered_sequential_mlp_style": {
        "blind": True, "style": "the MLP an nn.Sequential with named fc / proj, dropout inside it",
        "replace": {"Block": '''
from collections import OrderedDict


class Block(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(OrderedDict(fc=nn.Linear(d_model, 4 * d_model), act=nn.GELU(),
                                             proj=nn.Linear(4 * d_model, d_model), drop=nn.Dropout(dropout)))

    def forward(self, x, past_kv=None):
        a, present = self.attn(self.ln1(x), past_kv)
        x = x + a
        x = x + self.mlp(self.ln2(x))
        return x, present
'''},
        "must_fail": [],
    },
    "block_mlp_class_functional_style": {
        "blind": True, "style": "a small MLP class, F.gelu and F.dropout",
        "replace": {"Block": '''
class _MLP(nn.Module):
    def __init__(self, d_model, dropout):
        super().__init__()
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.proj = nn.Linear(4 * d_model, d_model)
        self.p = dropout

    def forward(self, x):
        return F.dropout(self.proj(F.gelu(self.fc(x))), p=self.p, training=self.training)


class Block(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.mlp = _MLP(d_model, dropout)

    def forward(self, x, past_kv=None):
        attended, present_kv = self.attn(self.ln1(x), past_kv=past_kv)
        h = x + attended
        return h + self.mlp(self.ln2(h)), present_kv
'''},
        "must_fail": [],
    },
    "gpt_crop_or_cache_loop_style": {
        "blind": True, "style": "positions from the cached length, generate choosing crop / cache / full read each step",
        "replace": {"GPT": '''
class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, d_model=128, n_heads=4, n_layers=4, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(block_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d_model, n_heads, dropout) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, past_kv=None):
        T = idx.shape[1]
        T_past = 0 if past_kv is None else past_kv[0][0].shape[2]
        positions = torch.arange(T_past, T_past + T, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(positions))
        present = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if past_kv is None else past_kv[i])
            present.append(kv)
        return self.head(self.ln_f(x)), present

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True, generator=None):
        out, past = idx, None
        for _ in range(max_new_tokens):
            if out.shape[1] > self.block_size:
                logits, _ = self(out[:, -self.block_size:])
                past = None
            elif use_cache and past is not None:
                logits, past = self(out[:, -1:], past)
            else:
                logits, past = self(out)
            nxt = sample_next(logits[:, -1, :], temperature=temperature, top_k=top_k, generator=generator)
            out = torch.cat([out, nxt.reshape(-1, 1).to(out.dtype)], dim=1)
        return out
'''},
        "must_fail": [],
    },
    "attn_dropout_module_block_keyword_style": {
        "blind": False,
        "style": "attention weights by hand with an nn.Dropout module on them; the Block passes dropout by keyword, "
                 "its MLP an nn.ModuleDict",
        "replace": {"CausalSelfAttention": '''
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        assert d_model % n_heads == 0, "n_heads must divide d_model"
        self.n_heads = n_heads
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.weight_drop = nn.Dropout(dropout)
        self.out_drop = nn.Dropout(dropout)

    def forward(self, x, past_kv=None):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (H, D // H)).transpose(1, 2) for t in (q, k, v))
        if past_kv is not None:
            k, v = torch.cat([past_kv[0], k], dim=2), torch.cat([past_kv[1], v], dim=2)
        T_all = k.shape[2]
        allowed = torch.ones(T, T_all, dtype=torch.bool, device=x.device).tril(diagonal=T_all - T)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) * (D // H) ** -0.5
        weights = self.weight_drop(torch.softmax(torch.where(allowed, scores, float("-inf")), dim=-1))
        out = torch.einsum("bhqk,bhkd->bhqd", weights, v).transpose(1, 2).reshape(B, T, D)
        return self.out_drop(self.proj(out)), (k, v)
''',
                    "Block": '''
class Block(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.ModuleDict({"fc": nn.Linear(d_model, 4 * d_model), "proj": nn.Linear(4 * d_model, d_model)})
        self.drop = nn.Dropout(dropout)

    def forward(self, x, past_kv=None):
        a, present = self.attn(self.ln1(x), past_kv=past_kv)
        x = x + a
        h = F.gelu(self.mlp["fc"](self.ln2(x)))
        return x + self.drop(self.mlp["proj"](h)), present
'''},
        "must_fail": [],
    },
    "gpt_prefill_then_decode_apply_init_style": {
        "blind": True,
        "style": "GPT-2 init through self.apply, zip over blocks and caches; generate prefills once, then decodes one "
                 "token per step from the cache while the sequence fits, re-reading the last block_size otherwise",
        "replace": {"GPT": """
class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, d_model=128, n_heads=4, n_layers=4, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(block_size, d_model)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([Block(d_model, n_heads, dropout) for _ in range(n_layers)])
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.apply(self._init_weights)
        self.head.weight = self.tok_emb.weight                    # tied after the init: one (V, D) matrix

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def forward(self, idx, past_kv=None):
        B, T = idx.shape
        caches = [None] * len(self.blocks) if past_kv is None else list(past_kv)
        T_past = 0 if caches[0] is None else caches[0][0].size(2)
        assert T_past + T <= self.block_size, f"{T_past + T} tokens do not fit in block_size {self.block_size}"
        pos = torch.arange(T_past, T_past + T, dtype=torch.long, device=idx.device).unsqueeze(0)   # (1, T)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        present_kv = []
        for block, cache in zip(self.blocks, caches):
            x, kv = block(x, cache)
            present_kv.append(kv)
        return self.head(self.ln_f(x)), present_kv

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True, generator=None):
        if max_new_tokens <= 0:
            return idx
        logits, past = self(idx[:, -self.block_size:])              # prefill
        for step in range(max_new_tokens):
            nxt = sample_next(logits[:, -1, :], temperature=temperature, top_k=top_k, generator=generator)
            idx = torch.cat((idx, nxt.view(-1, 1)), dim=1)
            if step == max_new_tokens - 1:
                break
            if use_cache and idx.size(1) <= self.block_size:
                logits, past = self(idx[:, -1:], past)              # only the newest token, at position T_past
            else:
                logits, past = self(idx[:, -self.block_size:])      # afresh: whole sequence, or its last block_size
        return idx
"""},
        "must_fail": [],
    },
    "gpt_head_owns_weight_functional_dropout_style": {
        "blind": True,
        "style": "the embedding tied to the head's weight (the other direction), positions sliced from pos_emb.weight, "
                 "F.dropout; generate a while loop with an explicit cache-validity flag",
        "replace": {"GPT": """
class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, d_model=128, n_heads=4, n_layers=4, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.p_drop = dropout
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.tok_emb.weight = self.head.weight                      # one shared (V, D) parameter
        self.pos_emb = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList()
        for _ in range(n_layers):
            self.blocks.append(Block(d_model, n_heads, dropout))
        self.ln_f = nn.LayerNorm(d_model)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" not in name:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, past_kv=None):
        T = idx.size(1)
        start = past_kv[0][0].shape[-2] if past_kv else 0
        x = self.tok_emb(idx) + self.pos_emb.weight[start:start + T]      # (B, T, D) + (T, D)
        x = F.dropout(x, p=self.p_drop, training=self.training)
        present_kv = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, past_kv[i] if past_kv else None)
            present_kv.append(kv)
        return self.head(self.ln_f(x)), present_kv

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True, generator=None):
        seq = idx
        past, cache_ok = None, False
        while seq.shape[1] < idx.shape[1] + max_new_tokens:
            if seq.shape[1] > self.block_size:
                logits, _ = self(seq[:, -self.block_size:])
                cache_ok = False
            elif use_cache and cache_ok:
                logits, past = self(seq[:, -1:], past_kv=past)
            else:
                logits, past = self(seq)
                cache_ok = use_cache
            token = sample_next(logits[:, -1], temperature, top_k, generator)
            seq = torch.cat([seq, token[:, None].long()], dim=1)
        return seq
"""},
        "must_fail": [],
    },
}

"""Correct alternatives for the fairness certificate (``make certify``), in the planted banks' format.

Written from the student notebook alone (its text and docstrings), without reading the hidden tests:
``blind: True``. Every entry must keep full marks on seeds 0-2.
"""

LESSON = "08_transformer"
VARIANTS = {
    "loss_masked_mean_by_hand_style": {
        "blind": True, "style": "per-token cross-entropy, averaged over a float mask of the real targets",
        "replace": {"translation_loss": '''
def translation_loss(model, src, tgt, pad_id=0):
    logits = model(src, tgt[:, :-1], src != pad_id)                    # (B, T, V)
    target = tgt[:, 1:]
    nll = -torch.log_softmax(logits, dim=-1).gather(-1, target.unsqueeze(-1)).squeeze(-1)
    real = (target != pad_id).to(nll.dtype)
    return (nll * real).sum() / real.sum()
'''},
        "must_fail": [],
    },
    "loss_reshape_ignore_index_style": {
        "blind": True, "style": "F.cross_entropy on flattened logits with ignore_index",
        "replace": {"translation_loss": '''
def translation_loss(model, src, tgt, pad_id=0):
    decoder_in, expected = tgt[:, :-1], tgt[:, 1:]
    logits = model.forward(src, decoder_in, src_mask=src.ne(pad_id))
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), expected.reshape(-1), ignore_index=pad_id)
'''},
        "must_fail": [],
    },
    "greedy_finished_flags_style": {
        "blind": True, "style": "a finished flag per row, padding written with torch.where",
        "replace": {"greedy_decode": '''
@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id):
    src_mask = src != model.pad_id
    memory = model.encode(src, src_mask)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(B, dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = model.decode(ys, memory, src_mask)
        nxt = logits[:, -1, :].argmax(dim=-1)
        nxt = torch.where(done, torch.full_like(nxt, model.pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
    return ys[:, 1:]
'''},
        "must_fail": [],
    },
    "average_stack_mean_style": {
        "blind": True, "style": "torch.stack(...).mean(0), cast back to the dtype",
        "replace": {"average_checkpoints": '''
def average_checkpoints(state_dicts):
    last = state_dicts[-1]
    out = {}
    for name, value in last.items():
        if torch.is_floating_point(value):
            out[name] = torch.stack([sd[name].to(torch.float64) for sd in state_dicts]).mean(dim=0).to(value.dtype)
        else:
            out[name] = value.clone()
    return out
'''},
        "must_fail": [],
    },
    "average_running_sum_style": {
        "blind": True, "style": "a running sum into fresh tensors, divided at the end",
        "replace": {"average_checkpoints": '''
def average_checkpoints(state_dicts):
    n = len(state_dicts)
    totals = {}
    for sd in state_dicts:
        for name, value in sd.items():
            if value.is_floating_point():
                totals[name] = value.detach().clone() if name not in totals else totals[name] + value
    averaged = {}
    for name, value in state_dicts[-1].items():
        averaged[name] = (totals[name] / n).to(value.dtype) if value.is_floating_point() else value.detach().clone()
    return averaged
'''},
        "must_fail": [],
    },
    "beam_python_lists_style": {
        "blind": True, "style": "live hypotheses as Python lists, one decoder call per step on the stacked beam",
        "replace": {"beam_search": '''
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=0.6):
    src = src.reshape(1, -1)
    src_mask = src != model.pad_id
    memory = model.encode(src, src_mask)
    live = [([], 0.0)]                                   # (tokens without <bos>, log-probability)
    finished = []
    while live:
        ys = torch.tensor([[bos_id] + toks for toks, _ in live], dtype=torch.long, device=src.device)
        n = len(live)
        logp = torch.log_softmax(model.decode(ys, memory.expand(n, -1, -1), src_mask.expand(n, -1))[:, -1, :].double(), dim=-1)
        candidates = []
        for i, (toks, lp) in enumerate(live):
            for tok in range(logp.shape[-1]):
                candidates.append((lp + float(logp[i, tok]), toks + [tok]))
        candidates.sort(key=lambda c: -c[0])
        keep = candidates[:max(beam_size - len(finished), 0)]
        live = []
        for lp, toks in keep:
            if toks[-1] == eos_id or len(toks) >= max_len:
                finished.append((toks, lp))
            else:
                live.append((toks, lp))
    scored = [(toks, lp / (((5 + len(toks)) / 6) ** length_penalty)) for toks, lp in finished]
    return sorted(scored, key=lambda t: -t[1])[:beam_size]
'''},
        "must_fail": [],
    },
    "decoder_block_sublayer_helpers_style": {
        "blind": True, "style": "a helper converting each mask with course.masks, one residual helper for both layouts",
        "replace": {"DecoderBlock": '''
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.ff_dropout = nn.Dropout(dropout)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    def _torch_mask(self, mask, B, T_q, T_k):
        if mask is None:
            return None
        H = self.self_attn.num_heads
        shaped = masks.attention_mask(mask, B=B, H=H, T_q=T_q, T_k=T_k)
        if mask.dim() == 2:
            return masks.to_torch(mask)
        return masks.to_torch(shaped.expand(B, H, T_q, T_k).reshape(B * H, T_q, T_k))

    def _residual(self, x, sublayer, norm, drop):
        if self.norm_first:
            return x + drop(sublayer(norm(x)))
        return norm(x + drop(sublayer(x)))

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        B, T, _ = x.shape
        S = memory.shape[1]
        self_mask = self._torch_mask(tgt_mask, B, T, T)
        cross_mask = self._torch_mask(memory_mask, B, T, S)
        x = self._residual(x, lambda h: self.self_attn(h, h, h, attn_mask=self_mask, need_weights=False)[0],
                           self.norm1, self.dropout1)
        x = self._residual(x, lambda h: self.cross_attn(h, memory, memory, attn_mask=cross_mask, need_weights=False)[0],
                           self.norm2, self.dropout2)
        return self._residual(x, lambda h: self.linear2(self.ff_dropout(torch.relu(self.linear1(h)))),
                              self.norm3, self.dropout3)
'''},
        "must_fail": [],
    },
    "greedy_preallocated_style": {
        "blind": True, "style": "a preallocated (B, max_len) tensor of padding, trimmed at the end",
        "replace": {"greedy_decode": '''
@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id):
    src_mask = src != model.pad_id
    memory = model.encode(src, src_mask)
    B = src.shape[0]
    out = torch.full((B, max_len + 1), model.pad_id, dtype=torch.long, device=src.device)
    out[:, 0] = bos_id
    alive = torch.ones(B, dtype=torch.bool, device=src.device)
    steps = 0
    for t in range(1, max_len + 1):
        logits = model.decode(out[:, :t], memory, src_mask)
        best = logits[:, -1].argmax(-1)
        out[alive, t] = best[alive]
        alive = alive & (best != eos_id)
        steps = t
        if not alive.any():
            break
    return out[:, 1:steps + 1]
'''},
        "must_fail": [],
    },
    "transformer_helpers_style": {
        "blind": True, "style": "the sinusoids computed with exp/log, one embedding helper, masks built in decode",
        "replace": {"Transformer": '''
class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=256, n_layers=2, dropout=0.0,
                 norm_first=False, max_len=256, pad_id=0):
        super().__init__()
        self.d_model, self.pad_id, self.norm_first = d_model, pad_id, norm_first
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        for table in (self.src_embed, self.tgt_embed):
            nn.init.normal_(table.weight, mean=0.0, std=d_model ** -0.5)
        position = torch.arange(max_len, dtype=torch.float64)[:, None]
        rate = torch.exp(-math.log(10000.0) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2] = torch.sin(position * rate)
        pe[:, 1::2] = torch.cos(position * rate)[:, : d_model // 2]
        self.register_buffer("pe", pe.float())
        self.dropout = nn.Dropout(dropout)
        self.encoder_layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True, norm_first=norm_first)
            for _ in range(n_layers)])
        self.decoder_layers = nn.ModuleList([DecoderBlock(d_model, n_heads, d_ff, dropout, norm_first)
                                             for _ in range(n_layers)])
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else None
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else None
        self.generator = nn.Linear(d_model, tgt_vocab)

    def _embed(self, table, ids):
        return self.dropout(table(ids) * math.sqrt(self.d_model) + self.pe[: ids.shape[1]])

    def encode(self, src, src_mask=None):
        h = self._embed(self.src_embed, src)
        padding = None if src_mask is None else ~src_mask
        for layer in self.encoder_layers:
            h = layer(h, src_key_padding_mask=padding)
        return h if self.encoder_norm is None else self.encoder_norm(h)

    def decode(self, tgt, memory, src_mask=None):
        T = tgt.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt.device).tril()
        memory_mask = None if src_mask is None else src_mask[:, None, None, :]
        h = self._embed(self.tgt_embed, tgt)
        for layer in self.decoder_layers:
            h = layer(h, memory, tgt_mask=causal, memory_mask=memory_mask)
        if self.decoder_norm is not None:
            h = self.decoder_norm(h)
        return self.generator(h)

    def forward(self, src, tgt, src_mask=None):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)
'''},
        "must_fail": [],
    },
    # Written after reading the hidden tests (issue 42: the init, final-norm and dropout-at-zero checks): not blind.
    "transformer_list_norms_functional_dropout_style": {
        "blind": False,
        "style": "final norms from a list (None, None without norm_first), the embeddings drawn with weight.data.normal_, "
                 "embedding dropout through F.dropout, layers built in lists then wrapped, one stack loop for both sides",
        "replace": {"Transformer": '''
class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=256, n_layers=2, dropout=0.0,
                 norm_first=False, max_len=256, pad_id=0):
        super().__init__()
        self.d_model, self.pad_id, self.norm_first, self.p = d_model, pad_id, norm_first, dropout
        self.src_embed, self.tgt_embed = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
        with torch.no_grad():
            self.src_embed.weight.data.normal_(0.0, 1.0 / math.sqrt(d_model))
            self.tgt_embed.weight.data.normal_(0.0, 1.0 / math.sqrt(d_model))
        pos = torch.arange(max_len).unsqueeze(1).double()
        angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64),
                                torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        self.register_buffer("pe", torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)[:, :d_model].float())
        encoders, decoders = [], []
        for _ in range(n_layers):
            encoders.append(nn.TransformerEncoderLayer(d_model=d_model, nhead=n_heads, dim_feedforward=d_ff,
                                                       dropout=dropout, batch_first=True, norm_first=norm_first))
            decoders.append(DecoderBlock(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first))
        self.encoder_layers, self.decoder_layers = nn.ModuleList(encoders), nn.ModuleList(decoders)
        finals = [nn.LayerNorm(d_model) for _ in range(2)] if norm_first else [None, None]
        self.encoder_norm, self.decoder_norm = finals
        self.generator = nn.Linear(d_model, tgt_vocab)

    @staticmethod
    def _final(norm, x):
        return x if norm is None else norm(x)

    def _inputs(self, table, ids):
        x = table(ids) * math.sqrt(self.d_model) + self.pe[: ids.shape[1]]
        return F.dropout(x, self.p, self.training)

    def encode(self, src, src_mask=None):
        x = self._inputs(self.src_embed, src)
        pad = None if src_mask is None else src_mask.logical_not()
        for layer in self.encoder_layers:
            x = layer(x, src_key_padding_mask=pad)
        return self._final(self.encoder_norm, x)

    def decode(self, tgt, memory, src_mask=None):
        y = self._inputs(self.tgt_embed, tgt)
        T = tgt.shape[1]
        causal = torch.arange(T, device=tgt.device)[None, :] <= torch.arange(T, device=tgt.device)[:, None]
        mm = None if src_mask is None else src_mask.view(src_mask.shape[0], 1, 1, -1)
        for layer in self.decoder_layers:
            y = layer(y, memory, causal, mm)
        return self.generator(self._final(self.decoder_norm, y))

    def forward(self, src, tgt, src_mask=None):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)
'''},
        "must_fail": [],
    },
    "decoder_block_key_padding_route_style": {
        "blind": True,
        "style": "each layout written out in its own branch; a (B, 1, 1, S) memory mask passed as key_padding_mask, "
                 "other masks through to_torch_attn_mask; the inner feed-forward dropout a module named `dropout`",
        "replace": {"DecoderBlock": """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.n_heads = n_heads
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def _mask_args(self, mask, B, T_q, T_k):
        if mask is None:
            return {}
        if mask.dim() == 3:
            raise ValueError(f"a 3-D mask {tuple(mask.shape)} is ambiguous: pass (T_q, T_k), (B, 1, 1, T_k), "
                             "(B, 1, T_q, T_k) or (B, H, T_q, T_k).")
        if mask.dim() == 4 and mask.shape[1] == 1 and mask.shape[2] == 1:
            return {"key_padding_mask": ~mask[:, 0, 0, :].expand(B, T_k)}
        return {"attn_mask": to_torch_attn_mask(mask, batch_size=B, n_heads=self.n_heads, tgt_len=T_q, src_len=T_k)}

    def _sa(self, h, mask_args):
        return self.dropout1(self.self_attn(h, h, h, need_weights=False, **mask_args)[0])

    def _ca(self, h, memory, mask_args):
        return self.dropout2(self.cross_attn(h, memory, memory, need_weights=False, **mask_args)[0])

    def _ff(self, h):
        return self.dropout3(self.linear2(self.dropout(F.relu(self.linear1(h)))))

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        B, T, _ = x.shape
        S = memory.shape[1]
        self_args = self._mask_args(tgt_mask, B, T, T)
        cross_args = self._mask_args(memory_mask, B, T, S)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), self_args)
            x = x + self._ca(self.norm2(x), memory, cross_args)
            x = x + self._ff(self.norm3(x))
        else:
            x = self.norm1(x + self._sa(x, self_args))
            x = self.norm2(x + self._ca(x, memory, cross_args))
            x = self.norm3(x + self._ff(x))
        return x
"""},
        "must_fail": [],
    },
    "decoder_block_float_additive_mask_style": {
        "blind": True,
        "style": "the boolean masks turned by hand into float additive masks (0 / -inf) of shape (T, S) or (B*H, T, S), "
                 "a ModuleList of sublayer norms and dropouts indexed in a loop",
        "replace": {"DecoderBlock": """
class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.n_heads = n_heads
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.ff_drop = nn.Dropout(dropout)
        for i in (1, 2, 3):
            setattr(self, f"norm{i}", nn.LayerNorm(d_model))
            setattr(self, f"dropout{i}", nn.Dropout(dropout))

    def _additive(self, mask, B, T_q, T_k):
        if mask is None:
            return None
        if mask.dtype != torch.bool:
            raise ValueError("masks are bool, True where attention is allowed.")
        if mask.dim() == 2:
            allowed = mask
        elif mask.dim() == 4:
            allowed = mask.expand(B, self.n_heads, T_q, T_k).reshape(B * self.n_heads, T_q, T_k)
        else:
            raise ValueError(f"a mask of shape {tuple(mask.shape)} is ambiguous or wrong: pass (T_q, T_k), "
                             "(B, 1, 1, T_k), (B, 1, T_q, T_k) or (B, H, T_q, T_k).")
        return torch.zeros(allowed.shape, dtype=torch.float32, device=allowed.device).masked_fill(~allowed, float("-inf"))

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        B, T, _ = x.shape
        S = memory.shape[1]
        self_mask = self._additive(tgt_mask, B, T, T)
        cross_mask = self._additive(memory_mask, B, T, S)
        sublayers = [
            lambda h: self.self_attn(h, h, h, attn_mask=self_mask, need_weights=False)[0],
            lambda h: self.cross_attn(h, memory, memory, attn_mask=cross_mask, need_weights=False)[0],
            lambda h: self.linear2(self.ff_drop(torch.relu(self.linear1(h)))),
        ]
        for i, f in enumerate(sublayers, start=1):
            norm, drop = getattr(self, f"norm{i}"), getattr(self, f"dropout{i}")
            x = x + drop(f(norm(x))) if self.norm_first else norm(x + drop(f(x)))
        return x
"""},
        "must_fail": [],
    },
    "transformer_masks_helpers_formula_loop_style": {
        "blind": True,
        "style": "pe filled column pair by column pair from the formula, course.masks helpers for every mask, "
                 "layers appended to ModuleLists in a loop, one nn.Dropout per side",
        "replace": {"Transformer": """
class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=256, n_layers=2, dropout=0.0,
                 norm_first=False, max_len=256, pad_id=0):
        super().__init__()
        self.d_model, self.pad_id, self.norm_first = d_model, pad_id, norm_first
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        with torch.no_grad():
            self.src_embed.weight.copy_(torch.randn(src_vocab, d_model) / math.sqrt(d_model))
            self.tgt_embed.weight.copy_(torch.randn(tgt_vocab, d_model) / math.sqrt(d_model))
        pe = torch.zeros(max_len, d_model)
        p = torch.arange(max_len, dtype=torch.float64)
        for i in range(0, d_model, 2):
            w = 10000.0 ** (-i / d_model)
            pe[:, i] = torch.sin(p * w).float()
            if i + 1 < d_model:
                pe[:, i + 1] = torch.cos(p * w).float()
        self.register_buffer("pe", pe)
        self.src_dropout = nn.Dropout(dropout)
        self.tgt_dropout = nn.Dropout(dropout)
        self.encoder_layers = nn.ModuleList()
        self.decoder_layers = nn.ModuleList()
        for _ in range(n_layers):
            self.encoder_layers.append(nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True,
                                                                  norm_first=norm_first))
            self.decoder_layers.append(DecoderBlock(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first))
        if norm_first:
            self.encoder_norm = nn.LayerNorm(d_model)
            self.decoder_norm = nn.LayerNorm(d_model)
        else:
            self.encoder_norm = None
            self.decoder_norm = None
        self.generator = nn.Linear(d_model, tgt_vocab)

    def encode(self, src, src_mask=None):
        S = src.shape[1]
        h = self.src_dropout(self.src_embed(src) * math.sqrt(self.d_model) + self.pe[:S])
        pad = masks.to_torch_key_padding(src_mask)
        for layer in self.encoder_layers:
            h = layer(h, src_key_padding_mask=pad)
        if self.encoder_norm is not None:
            h = self.encoder_norm(h)
        return h

    def decode(self, tgt, memory, src_mask=None):
        T = tgt.shape[1]
        h = self.tgt_dropout(self.tgt_embed(tgt) * math.sqrt(self.d_model) + self.pe[:T])
        tgt_mask = masks.causal(T, device=tgt.device)
        memory_mask = None if src_mask is None else masks.key_padding(src_mask)
        for layer in self.decoder_layers:
            h = layer(h, memory, tgt_mask=tgt_mask, memory_mask=memory_mask)
        if self.decoder_norm is not None:
            h = self.decoder_norm(h)
        return self.generator(h)

    def forward(self, src, tgt, src_mask=None):
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, src_mask)
"""},
        "must_fail": [],
    },
    "transformer_outer_product_pe_style": {
        "blind": True,
        "style": "pe in float32 from torch.outer and an interleaving stack, one embedding dropout shared by both sides, "
                 "the final norms applied by conditional expressions, masks built with unsqueeze and tril",
        "replace": {"Transformer": """
class Transformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=64, n_heads=4, d_ff=256, n_layers=2, dropout=0.0,
                 norm_first=False, max_len=256, pad_id=0):
        super().__init__()
        self.d_model, self.pad_id, self.norm_first = d_model, pad_id, norm_first
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        nn.init.normal_(self.src_embed.weight, 0.0, 1.0 / math.sqrt(d_model))
        nn.init.normal_(self.tgt_embed.weight, 0.0, 1.0 / math.sqrt(d_model))
        half = (d_model + 1) // 2
        freqs = torch.pow(10000.0, -torch.arange(half, dtype=torch.float32) * 2.0 / d_model)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float32), freqs)        # (max_len, half)
        pe = torch.stack((angles.sin(), angles.cos()), dim=2).reshape(max_len, 2 * half)[:, :d_model]
        self.register_buffer("pe", pe.contiguous())
        self.drop = nn.Dropout(dropout)
        self.encoder_layers = nn.ModuleList(
            [nn.TransformerEncoderLayer(d_model=d_model, nhead=n_heads, dim_feedforward=d_ff, dropout=dropout,
                                        batch_first=True, norm_first=norm_first) for _ in range(n_layers)])
        self.decoder_layers = nn.ModuleList(
            [DecoderBlock(d_model, n_heads, d_ff, dropout, norm_first) for _ in range(n_layers)])
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else None
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else None
        self.generator = nn.Linear(d_model, tgt_vocab)

    def _embed(self, ids, table):
        x = table(ids) * self.d_model ** 0.5
        return self.drop(x + self.pe[: ids.size(1)].unsqueeze(0))

    def encode(self, src, src_mask=None):
        x = self._embed(src, self.src_embed)
        kpm = src_mask.logical_not() if src_mask is not None else None
        for layer in self.encoder_layers:
            x = layer(x, src_key_padding_mask=kpm)
        return self.encoder_norm(x) if self.encoder_norm is not None else x

    def decode(self, tgt, memory, src_mask=None):
        T = tgt.size(1)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=tgt.device))
        mem_mask = src_mask.unsqueeze(1).unsqueeze(2) if src_mask is not None else None
        y = self._embed(tgt, self.tgt_embed)
        for layer in self.decoder_layers:
            y = layer(y, memory, tgt_mask=causal, memory_mask=mem_mask)
        y = self.decoder_norm(y) if self.decoder_norm is not None else y
        return self.generator(y)

    def forward(self, src, tgt, src_mask=None):
        return self.decode(tgt, self.encode(src, src_mask), src_mask)
"""},
        "must_fail": [],
    },
}

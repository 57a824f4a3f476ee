"""Planted-bug submissions and correct alternative styles for lesson 09 (the GPT language model).

Each variant replaces whole solution cells (by grade_id) of the reference solution; ``must_fail``
lists the test cells (by grade_id) that must lose points. An empty ``must_fail`` marks a correct
solution in another style, which must keep full marks.
"""

LESSON = "09_language_model"

# --------------------------------------------------------------------------------------------
# lm_loss
# --------------------------------------------------------------------------------------------

LOSS_NOT_SHIFTED = '''
def lm_loss(logits, idx):
    B, T, V = logits.shape
    return F.cross_entropy(logits.reshape(-1, V), idx.reshape(-1))      # predicts the current token
'''

LOSS_ROLLED = '''
def lm_loss(logits, idx):
    B, T, V = logits.shape
    targets = torch.roll(idx, shifts=-1, dims=1)                          # the last position "predicts" idx[:, 0]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
'''

LOSS_SUM = '''
def lm_loss(logits, idx):
    B, T, V = logits.shape
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), idx[:, 1:].reshape(-1), reduction="sum")
'''

LOSS_GATHER_STYLE = '''
def lm_loss(logits, idx):
    logp = torch.log_softmax(logits[:, :-1], dim=-1)                      # (B, T-1, V)
    picked = logp.gather(-1, idx[:, 1:].unsqueeze(-1)).squeeze(-1)       # (B, T-1)
    return -picked.mean()
'''

LOSS_LOOP_STYLE = '''
def lm_loss(logits, idx):
    total, n = 0.0, 0
    for t in range(idx.shape[1] - 1):
        total = total + F.cross_entropy(logits[:, t], idx[:, t + 1], reduction="sum")
        n += idx.shape[0]
    return total / n
'''

# --------------------------------------------------------------------------------------------
# sample_next
# --------------------------------------------------------------------------------------------

SAMPLE_TEMPERATURE_MULTIPLIES = '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    logits = logits * temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
'''

SAMPLE_TOPK_K_MINUS_1 = '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits <= kth, float("-inf"))      # also drops the k-th: keeps k - 1
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
'''

SAMPLE_IGNORES_GENERATOR = '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1).squeeze(-1)  # the global random state
'''

SAMPLE_ARGMAX = '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    return logits.argmax(dim=-1)                                          # never samples
'''

SAMPLE_SORT_STYLE = '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    z = logits / temperature
    if top_k is not None:
        order = torch.sort(z, dim=-1, descending=True).indices           # top-k through a sort
        drop = order[:, top_k:]
        z = z.scatter(-1, drop, float("-inf"))
    probs = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    probs = probs / probs.sum(dim=-1, keepdim=True)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]
'''

SAMPLE_GUMBEL_STYLE = '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        values, _ = torch.topk(z, top_k, dim=-1)
        z = torch.where(z >= values[:, -1:], z, torch.full_like(z, float("-inf")))
    u = torch.rand(z.shape, generator=generator, device=z.device).clamp_min(1e-20)
    return (z - torch.log(-torch.log(u))).argmax(dim=-1)                  # the Gumbel-max trick
'''

SAMPLE_TOPK_RAISES_ABOVE_V = '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]           # raises when top_k > V
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
'''

SAMPLE_UNSTABLE_SOFTMAX = '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    logits = logits / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    e = logits.exp()                                                      # exp(1000) = inf: nan probabilities
    return torch.multinomial(e / e.sum(-1, keepdim=True), 1, generator=generator).squeeze(-1)
'''

SAMPLE_TOPK_CLAMPED_STYLE = '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    z = logits / temperature
    if top_k is not None:
        k = min(top_k, z.shape[-1])                                       # top_k > V: keep all V
        vals, ids = torch.topk(z, k, dim=-1)
        z = torch.full_like(z, float("-inf")).scatter(-1, ids, vals)
    return torch.multinomial(torch.softmax(z, dim=-1), 1, generator=generator).view(-1)
'''

# --------------------------------------------------------------------------------------------
# CausalSelfAttention
# --------------------------------------------------------------------------------------------

ATTN_TEMPLATE = '''
class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x, past_kv=None):
        B, T, D = x.shape
        H = self.n_heads
        q, k, v = self.qkv(x).split(D, dim=-1)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
        if past_kv is not None:
            k = torch.cat([past_kv[0], k], dim=2)
            v = torch.cat([past_kv[1], v], dim=2)
        p = self.dropout if self.training else 0.0
{attend}
        out = out.transpose(1, 2).reshape(B, T, D)
        return self.resid_drop(self.proj(out)), (k, v)
'''

ATTN_NO_CAUSAL_MASK = ATTN_TEMPLATE.format(attend='''\
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=p)         # sees the future''')

ATTN_IS_CAUSAL_WITH_CACHE = ATTN_TEMPLATE.format(attend='''\
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)   # top-left triangle: hides the cache''')

ATTN_HANDWRITTEN_STYLE = ATTN_TEMPLATE.format(attend='''\
        T_k = k.shape[2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)                       # (B, H, T, T_k)
        allowed = torch.ones(T, T_k, dtype=torch.bool, device=x.device).tril(diagonal=T_k - T)
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        weights = F.dropout(weights, p)
        out = weights @ v''')

ATTN_ALWAYS_MASK_STYLE = ATTN_TEMPLATE.format(attend='''\
        T_past = k.shape[2] - T
        i = torch.arange(T, device=x.device)[:, None] + T_past                    # absolute query positions
        j = torch.arange(T_past + T, device=x.device)[None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=j <= i, dropout_p=p)''')

ATTN_NO_WEIGHT_DROPOUT = ATTN_TEMPLATE.format(attend='''\
        T_past = k.shape[2] - T
        i = torch.arange(T, device=x.device)[:, None] + T_past
        j = torch.arange(T_past + T, device=x.device)[None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=j <= i)            # dropout_p forgotten''')

ATTN_NO_OUTPUT_DROPOUT = ATTN_ALWAYS_MASK_STYLE.replace("return self.resid_drop(self.proj(out)), (k, v)",
                                                       "return self.proj(out), (k, v)")          # no dropout after proj

# --------------------------------------------------------------------------------------------
# Block
# --------------------------------------------------------------------------------------------

BLOCK_TEMPLATE = '''
class Block(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_heads, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Module()
        self.mlp.fc = nn.Linear(d_model, 4 * d_model)
        self.mlp.proj = nn.Linear(4 * d_model, d_model)
        self.mlp_drop = nn.Dropout(dropout)

    def forward(self, x, past_kv=None):
        a, present = self.attn(self.ln1(x), past_kv)
        x = x + a
{mlp}
        return x, present
'''

BLOCK_NO_MLP_DROPOUT = BLOCK_TEMPLATE.format(mlp="        x = x + self.mlp.proj(F.gelu(self.mlp.fc(self.ln2(x))))")
BLOCK_FUNCTIONAL_DROPOUT_STYLE = BLOCK_TEMPLATE.format(
    mlp="        x = x + F.dropout(self.mlp.proj(F.gelu(self.mlp.fc(self.ln2(x)))), self.attn.dropout, self.training)")

# --------------------------------------------------------------------------------------------
# GPT
# --------------------------------------------------------------------------------------------

GPT_TEMPLATE = '''
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
{tie}

    def forward(self, idx, past_kv=None):
        B, T = idx.shape
        T_past = 0 if past_kv is None else past_kv[0][0].shape[2]
{positions}
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        present = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if past_kv is None else past_kv[i])
            present.append(kv)
        return self.head(self.ln_f(x)), present

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True, generator=None):
{generate}
'''

TIE = "        self.head.weight = self.tok_emb.weight"
POS_OK = "        pos = torch.arange(T_past, T_past + T, device=idx.device)"
GEN_OK = '''\
        past = None
        for _ in range(max_new_tokens):
            if use_cache and past is not None and idx.shape[1] <= self.block_size:
                logits, past = self(idx[:, -1:], past)
            else:
                logits, past = self(idx[:, -self.block_size:])
                if idx.shape[1] >= self.block_size:
                    past = None
            nxt = sample_next(logits[:, -1], temperature, top_k, generator)
            idx = torch.cat([idx, nxt[:, None]], dim=1)
        return idx'''

GPT_POSITIONS_FROM_ZERO = GPT_TEMPLATE.format(tie=TIE, generate=GEN_OK, positions='''\
        pos = torch.arange(T, device=idx.device)                    # the cache is appended to, but positions restart at 0''')

GPT_UNTIED_HEAD = GPT_TEMPLATE.format(tie="", generate=GEN_OK, positions=POS_OK)

GPT_GENERATE_NO_CROP = GPT_TEMPLATE.format(tie=TIE, positions=POS_OK, generate='''\
        past = None
        for _ in range(max_new_tokens):
            if use_cache and past is not None:
                logits, past = self(idx[:, -1:], past)            # keeps extending the cache past block_size
            else:
                logits, past = self(idx)                          # and never crops the sequence
            nxt = sample_next(logits[:, -1], temperature, top_k, generator)
            idx = torch.cat([idx, nxt[:, None]], dim=1)
        return idx''')

GPT_GENERATE_RECOMPUTE_STYLE = GPT_TEMPLATE.format(tie=TIE, positions=POS_OK, generate='''\
        cache, n_cached = None, 0
        for _ in range(max_new_tokens):
            window = idx[:, -self.block_size:]
            if not use_cache or cache is None or idx.shape[1] > self.block_size:
                logits, cache = self(window)                      # (re)fill the cache from the window
            else:
                logits, cache = self(idx[:, n_cached:], cache)    # only what the cache has not seen
            n_cached = idx.shape[1]
            nxt = sample_next(logits[:, -1], temperature=temperature, top_k=top_k, generator=generator)
            idx = torch.cat([idx, nxt.view(-1, 1)], dim=1)
        return idx''')

GEN_ROLLING_CACHE = '''\
        past = None
        for _ in range(max_new_tokens):
            if use_cache and past is not None:
                if past[0][0].shape[2] >= self.block_size:             # a rolling cache: drop the oldest key/value
                    past = [(k[:, :, 1:], v[:, :, 1:]) for k, v in past]
                logits, past = self(idx[:, -1:], past)
            else:
                logits, past = self(idx[:, -self.block_size:])
            nxt = sample_next(logits[:, -1], temperature, top_k, generator)
            idx = torch.cat([idx, nxt[:, None]], dim=1)
        return idx'''

GPT_GENERATE_ROLLING_CACHE = GPT_TEMPLATE.format(tie=TIE, positions=POS_OK, generate=GEN_ROLLING_CACHE)

GPT_ONE_SHARED_BLOCK = GPT_TEMPLATE.format(tie=TIE, positions=POS_OK, generate=GEN_OK).replace(
    "nn.ModuleList(Block(d_model, n_heads, dropout) for _ in range(n_layers))",
    "nn.ModuleList([Block(d_model, n_heads, dropout)] * n_layers)")      # one block, used n_layers times
assert "] * n_layers" in GPT_ONE_SHARED_BLOCK

GPT_NO_EMBEDDING_DROPOUT = GPT_TEMPLATE.format(tie=TIE, positions=POS_OK, generate=GEN_OK).replace(
    "x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))", "x = self.tok_emb(idx) + self.pos_emb(pos)")

VARIANTS = {
    # lm_loss
    "loss_targets_not_shifted": {"replace": {"lm_loss": LOSS_NOT_SHIFTED}, "must_fail": ["test_lm_loss_shift"]},
    "loss_targets_rolled": {"replace": {"lm_loss": LOSS_ROLLED}, "must_fail": ["test_lm_loss_shift"]},
    "loss_summed": {"replace": {"lm_loss": LOSS_SUM}, "must_fail": ["test_lm_loss_mean"]},
    "loss_log_softmax_gather_style": {"replace": {"lm_loss": LOSS_GATHER_STYLE}, "must_fail": []},
    "loss_loop_style": {"replace": {"lm_loss": LOSS_LOOP_STYLE}, "must_fail": []},
    # sample_next
    "sample_temperature_multiplies": {"replace": {"sample_next": SAMPLE_TEMPERATURE_MULTIPLIES},
                                      "must_fail": ["test_sample_next_temperature"]},
    "sample_top_k_keeps_k_minus_1": {"replace": {"sample_next": SAMPLE_TOPK_K_MINUS_1},
                                     "must_fail": ["test_sample_next_top_k"]},
    "sample_ignores_generator": {"replace": {"sample_next": SAMPLE_IGNORES_GENERATOR},
                                 "must_fail": ["test_sample_next_seeded"]},
    "sample_always_argmax": {"replace": {"sample_next": SAMPLE_ARGMAX},
                             "must_fail": ["test_sample_next_seeded", "test_sample_next_temperature", "test_sample_next_top_k"]},
    "sample_top_k_by_sort_style": {"replace": {"sample_next": SAMPLE_SORT_STYLE}, "must_fail": []},
    "sample_gumbel_max_style": {"replace": {"sample_next": SAMPLE_GUMBEL_STYLE}, "must_fail": []},
    "sample_top_k_above_vocabulary_raises": {"replace": {"sample_next": SAMPLE_TOPK_RAISES_ABOVE_V},
                                             "must_fail": ["test_sample_next_top_k"]},
    "sample_unstable_softmax": {"replace": {"sample_next": SAMPLE_UNSTABLE_SOFTMAX},
                                "must_fail": ["test_sample_next_temperature"]},
    "sample_top_k_clamped_style": {"replace": {"sample_next": SAMPLE_TOPK_CLAMPED_STYLE}, "must_fail": []},
    # CausalSelfAttention
    "attn_no_causal_mask": {"replace": {"CausalSelfAttention": ATTN_NO_CAUSAL_MASK},
                            "must_fail": ["test_causal_self_attention_matches_torch", "test_gpt_causal",
                                          "test_gpt_matches_gpt2"]},
    "attn_is_causal_even_with_cache": {"replace": {"CausalSelfAttention": ATTN_IS_CAUSAL_WITH_CACHE},
                                       "must_fail": ["test_causal_self_attention_cache", "test_gpt_kv_cache_forward",
                                                     "test_gpt_generate_greedy_cache"]},
    "attn_handwritten_masked_style": {"replace": {"CausalSelfAttention": ATTN_HANDWRITTEN_STYLE}, "must_fail": []},
    "attn_explicit_mask_style": {"replace": {"CausalSelfAttention": ATTN_ALWAYS_MASK_STYLE}, "must_fail": []},
    "attn_no_dropout_on_weights": {"replace": {"CausalSelfAttention": ATTN_NO_WEIGHT_DROPOUT}, "must_fail": ["test_gpt_dropout"]},
    "attn_no_dropout_after_proj": {"replace": {"CausalSelfAttention": ATTN_NO_OUTPUT_DROPOUT}, "must_fail": ["test_gpt_dropout"]},
    # Block
    "block_no_dropout_after_mlp": {"replace": {"Block": BLOCK_NO_MLP_DROPOUT}, "must_fail": ["test_gpt_dropout"]},
    "block_functional_dropout_style": {"replace": {"Block": BLOCK_FUNCTIONAL_DROPOUT_STYLE}, "must_fail": []},
    # GPT
    "gpt_cache_positions_from_zero": {"replace": {"GPT": GPT_POSITIONS_FROM_ZERO},
                                      "must_fail": ["test_gpt_kv_cache_forward", "test_gpt_generate_greedy_cache",
                                                    "test_gpt_generate_sampled_cache"]},
    "gpt_untied_head": {"replace": {"GPT": GPT_UNTIED_HEAD}, "must_fail": ["test_gpt_structure"]},
    "gpt_generate_ignores_block_size": {"replace": {"GPT": GPT_GENERATE_NO_CROP}, "must_fail": ["test_gpt_generate_long"]},
    "gpt_generate_chunked_cache_style": {"replace": {"GPT": GPT_GENERATE_RECOMPUTE_STYLE}, "must_fail": []},
    "gpt_generate_rolling_cache": {"replace": {"GPT": GPT_GENERATE_ROLLING_CACHE}, "must_fail": ["test_gpt_generate_long"]},
    "gpt_one_shared_block": {"replace": {"GPT": GPT_ONE_SHARED_BLOCK}, "must_fail": ["test_gpt_structure"]},
    "gpt_no_embedding_dropout": {"replace": {"GPT": GPT_NO_EMBEDDING_DROPOUT}, "must_fail": ["test_gpt_dropout"]},
}

# ---------------------------------------------------------------------------------------- issue 42
# Found by a second learner: the text said "draw with torch.multinomial" while any sampler fed only by the
# given generator is accepted (the text now says the rule), and the dropout hint named an SDPA argument that
# an answer computing its own weights never calls (the hint now names both ways).
SAMPLE_INVERSE_CDF_STYLE = '''
def sample_next(logits, temperature=1.0, top_k=None, generator=None):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < torch.topk(z, top_k, dim=-1).values[:, -1:], float("-inf"))
    cdf = torch.softmax(z, dim=-1).cumsum(dim=-1)                          # (B, V)
    u = torch.rand(z.shape[0], 1, generator=generator, device=z.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u).squeeze(-1).clamp(max=z.shape[-1] - 1)   # inverse CDF, one uniform per row
'''

ATTN_HANDWRITTEN_NO_WEIGHT_DROPOUT = ATTN_HANDWRITTEN_STYLE.replace("        weights = F.dropout(weights, p)\n", "")
assert ATTN_HANDWRITTEN_NO_WEIGHT_DROPOUT != ATTN_HANDWRITTEN_STYLE

VARIANTS.update({
    "sample_inverse_cdf_style": {"replace": {"sample_next": SAMPLE_INVERSE_CDF_STYLE}, "must_fail": []},
    "attn_handwritten_no_weight_dropout": {"replace": {"CausalSelfAttention": ATTN_HANDWRITTEN_NO_WEIGHT_DROPOUT},
                                           "must_fail": ["test_gpt_dropout"],
                                           "says": {"test_gpt_dropout": ["on the softmax weights"]}},
})

# ---------------------------------------------------------------------------------------- issue 42 (certificate)
# A survivor of the fairness certificate: the Block builds its attention without the dropout (the MLP's dropout
# still makes training differ from eval, so only a probe of the Block's own attention sees it).
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
from planting import derived as _derived  # noqa: E402

VARIANTS["block_attention_without_dropout"] = {
    "replace": {"Block": _derived(LESSON, "Block", ("CausalSelfAttention(d_model, n_heads, dropout)",
                                                    "CausalSelfAttention(d_model, n_heads)"))},
    "must_fail": ["test_gpt_dropout"],
    "says": {"test_gpt_dropout": ["Block's attention"]},
}

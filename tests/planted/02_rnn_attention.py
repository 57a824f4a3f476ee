"""Planted bugs and correct alternative styles for lesson 02 (see CONTRIBUTING.md)."""

LESSON = "02_rnn_attention"

# The reference layout (W on [s || h], v) with the forward body replaced; shared by several bugs.
_INIT = '''
class AdditiveAttention(nn.Module):
    def __init__(self, d_query, d_key, d_hidden):
        super().__init__()
        self.W = nn.Linear(d_query + d_key, d_hidden)
        self.v = nn.Linear(d_hidden, 1, bias=False)
'''

VARIANTS = {
    # The classic: the mask is never used, so padding gets weight and changes the context.
    "attention_ignores_padding_mask": {
        "replace": {"AdditiveAttention": _INIT + '''
    def forward(self, query, keys, values, mask):
        B, S, _ = keys.shape
        s = query.unsqueeze(1).expand(B, S, query.shape[-1])
        scores = self.v(torch.tanh(self.W(torch.cat([s, keys], dim=-1)))).squeeze(-1)
        weights = torch.softmax(scores, dim=-1)
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1), weights
'''},
        "must_fail": ["test_additive_attention_padding", "test_additive_attention_formula"],
    },
    # The mask read as lengths (its True count), as if padding were always at the end of a row.
    "attention_mask_as_lengths": {
        "replace": {"AdditiveAttention": _INIT + '''
    def forward(self, query, keys, values, mask):
        B, S, _ = keys.shape
        s = query.unsqueeze(1).expand(B, S, query.shape[-1])
        scores = self.v(torch.tanh(self.W(torch.cat([s, keys], dim=-1)))).squeeze(-1)
        real = torch.arange(S) < mask.sum(dim=-1, keepdim=True)
        weights = torch.softmax(scores.masked_fill(~real, float("-inf")), dim=-1)
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1), weights
'''},
        "must_fail": ["test_additive_attention_padding"],
    },
    # [h || s] against weights documented as acting on [s || h]: runs, trains, and is wrong.
    "attention_concat_wrong_order": {
        "replace": {"AdditiveAttention": '''
class AdditiveAttention(nn.Module):
    def __init__(self, d_query, d_key, d_hidden):
        super().__init__()
        self.W = nn.Linear(d_key + d_query, d_hidden)
        self.v = nn.Linear(d_hidden, 1, bias=False)

    def forward(self, query, keys, values, mask):
        B, S, _ = keys.shape
        s = query.unsqueeze(1).expand(B, S, query.shape[-1])
        scores = self.v(torch.tanh(self.W(torch.cat([keys, s], dim=-1)))).squeeze(-1)
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1), weights
'''},
        "must_fail": ["test_additive_attention_formula"],
    },
    # exp() without subtracting the maximum: overflows once the scores reach ~90.
    "attention_naive_softmax": {
        "replace": {"AdditiveAttention": _INIT + '''
    def forward(self, query, keys, values, mask):
        B, S, _ = keys.shape
        s = query.unsqueeze(1).expand(B, S, query.shape[-1])
        scores = self.v(torch.tanh(self.W(torch.cat([s, keys], dim=-1)))).squeeze(-1)
        e = scores.exp() * mask
        weights = e / e.sum(dim=-1, keepdim=True)
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1), weights
'''},
        "must_fail": ["test_additive_attention_stability"],
    },
    # softmax over the batch axis instead of the source positions.
    "attention_softmax_wrong_axis": {
        "replace": {"AdditiveAttention": _INIT + '''
    def forward(self, query, keys, values, mask):
        B, S, _ = keys.shape
        s = query.unsqueeze(1).expand(B, S, query.shape[-1])
        scores = self.v(torch.tanh(self.W(torch.cat([s, keys], dim=-1)))).squeeze(-1)
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=0)
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1), weights
'''},
        "must_fail": ["test_additive_attention_weights_sum_to_one", "test_additive_attention_formula"],
    },
    # The weighted sum is taken over the keys instead of the values (same shape when Dv = Dk).
    "attention_context_from_keys": {
        "replace": {"AdditiveAttention": _INIT + '''
    def forward(self, query, keys, values, mask):
        B, S, _ = keys.shape
        s = query.unsqueeze(1).expand(B, S, query.shape[-1])
        scores = self.v(torch.tanh(self.W(torch.cat([s, keys], dim=-1)))).squeeze(-1)
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.bmm(weights.unsqueeze(1), keys).squeeze(1), weights
'''},
        "must_fail": ["test_additive_attention_shapes", "test_additive_attention_formula"],
    },
    # The decoder forgets to pass the source mask on: padding leaks into the context.
    "decode_step_drops_mask": {
        "replace": {"decode_step": '''
def decode_step(decoder, y_prev, s_prev, states, mask):
    e = decoder.embedding(y_prev)
    context, weights = decoder.attention(s_prev, states, states, torch.ones_like(mask))
    s = decoder.cell(torch.cat([e, context], dim=-1), s_prev)
    logits = decoder.out(torch.cat([s, context, e], dim=-1))
    return logits, s, weights
'''},
        "must_fail": ["test_decode_step_attention_call", "test_decode_step_matches_decoder"],
    },
    # The GRU input concatenated as [c || e] (same width, so it runs): wrong against the cell's weights.
    "decode_step_input_order": {
        "replace": {"decode_step": '''
def decode_step(decoder, y_prev, s_prev, states, mask):
    e = decoder.embedding(y_prev)
    context, weights = decoder.attention(s_prev, states, states, mask)
    s = decoder.cell(torch.cat([context, e], dim=-1), s_prev)
    logits = decoder.out(torch.cat([s, context, e], dim=-1))
    return logits, s, weights
'''},
        "must_fail": ["test_decode_step_matches_decoder"],
    },
    # A delegating answer: the package's own decoder step (the Luong step, the only attention step it has).
    "decode_step_delegates_to_package": {
        "replace": {"decode_step": '''
from course.models.seq2seq import LuongDecoder

def decode_step(decoder, y_prev, s_prev, states, mask):
    return LuongDecoder.step(decoder, y_prev, s_prev, states, mask)
'''},
        "must_fail": ["test_decode_step_shapes", "test_decode_step_attention_call", "test_decode_step_matches_decoder"],
    },
    "decode_step_calls_decoder_step": {
        "replace": {"decode_step": '''
def decode_step(decoder, y_prev, s_prev, states, mask):
    return decoder.step(y_prev, s_prev, states, mask)
'''},
        "must_fail": ["test_decode_step_shapes", "test_decode_step_attention_call", "test_decode_step_matches_decoder"],
    },
    # Correct, parameters named otherwise: one bias-free map per input, the bias its own vector, v a raw vector.
    "renamed_parameters_style": {
        "replace": {"AdditiveAttention": '''
class AdditiveAttention(nn.Module):
    def __init__(self, d_query, d_key, d_hidden):
        super().__init__()
        self.from_decoder = nn.Linear(d_query, d_hidden, bias=False)
        self.from_encoder = nn.Linear(d_key, d_hidden, bias=False)
        self.offset = nn.Parameter(torch.zeros(d_hidden))
        self.energy = nn.Parameter(torch.randn(d_hidden) / d_hidden ** 0.5)

    def forward(self, query, keys, values, mask):
        hidden = torch.tanh(self.from_decoder(query).unsqueeze(1) + self.from_encoder(keys) + self.offset)
        scores = (hidden * self.energy).sum(-1).masked_fill(~mask, float("-inf"))   # (B, S)
        weights = torch.exp(scores - torch.logsumexp(scores, dim=-1, keepdim=True))
        return (weights.unsqueeze(-1) * values).sum(1), weights
'''},
        "must_fail": [],
    },
    # Correct, another style: W split into W_s s + W_h h (W_h h precomputed per key), einsum and torch.where.
    "split_weights_einsum_style": {
        "replace": {
            "AdditiveAttention": '''
class AdditiveAttention(nn.Module):
    def __init__(self, d_query, d_key, d_hidden):
        super().__init__()
        self.W_s = nn.Linear(d_query, d_hidden)                 # acts on the decoder state
        self.W_h = nn.Linear(d_key, d_hidden, bias=False)       # acts on each encoder state
        self.v = nn.Parameter(torch.randn(d_hidden) / d_hidden ** 0.5)

    def forward(self, query, keys, values, mask):
        hidden = torch.tanh(self.W_s(query)[:, None, :] + self.W_h(keys))   # (B, S, d_hidden)
        scores = torch.einsum("bsh,h->bs", hidden, self.v)
        scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
        scores = scores - scores.amax(dim=-1, keepdim=True)
        e = torch.where(mask, scores.exp(), torch.zeros_like(scores))
        weights = e / e.sum(dim=-1, keepdim=True)
        return torch.einsum("bs,bsv->bv", weights, values), weights
''',
            "decode_step": '''
def decode_step(decoder, y_prev, s_prev, states, mask):
    embedded = decoder.embedding.weight[y_prev]                 # same as decoder.embedding(y_prev)
    context, weights = decoder.attention(s_prev, states, states, mask)
    new_state = decoder.cell(torch.cat((embedded, context), 1), s_prev)
    features = torch.cat((new_state, context, embedded), 1)
    logits = features @ decoder.out.weight.T + decoder.out.bias
    return logits, new_state, weights
''',
        },
        "must_fail": [],
    },
    # Correct, another style: a loop over source positions, and a raw-parameter W used as x @ W.
    "loop_style": {
        "replace": {"AdditiveAttention": '''
import math

class AdditiveAttention(nn.Module):
    def __init__(self, d_query, d_key, d_hidden):
        super().__init__()
        bound = 1 / math.sqrt(d_query + d_key)
        self.W = nn.Parameter(torch.empty(d_query + d_key, d_hidden).uniform_(-bound, bound))  # x @ W
        self.b = nn.Parameter(torch.zeros(d_hidden))
        self.v = nn.Linear(d_hidden, 1)                         # its bias shifts all scores: harmless

    def forward(self, query, keys, values, mask):
        B, S, _ = keys.shape
        columns = []
        for i in range(S):
            pair = torch.cat([query, keys[:, i]], dim=-1)       # (B, Dq + Dk): [s || h_i]
            columns.append(self.v(torch.tanh(pair @ self.W + self.b)).squeeze(-1))
        scores = torch.stack(columns, dim=1).masked_fill(~mask, -torch.inf)
        weights = scores.softmax(dim=1)
        context = sum(weights[:, i, None] * values[:, i] for i in range(S))
        return context, weights
'''},
        "must_fail": [],
    },
}

# ---------------------------------------------------------------------------------------- issue 42
# A buffer is not a parameter: tests that randomise, fill or scale "every parameter" took every floating-point
# entry of the state_dict, and turned this fill value into 0 (or +inf), losing 4 points.
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
from planting import derived as _derived  # noqa: E402

VARIANTS.update({
    "additive_fill_buffer_style": {"replace": {"AdditiveAttention": _derived(LESSON, "AdditiveAttention",
        ("self.v = nn.Linear(d_hidden, 1, bias=False)       # one score per (query, key) pair\n",
         "self.v = nn.Linear(d_hidden, 1, bias=False)       # one score per (query, key) pair\n"
         "        self.register_buffer(\"fill\", torch.tensor(float(\"-inf\")))   # the score of padding\n"),
        ('scores.masked_fill(~mask, float("-inf"))', "scores.masked_fill(~mask, self.fill)"))}, "must_fail": []},
})

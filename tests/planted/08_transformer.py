"""Planted-bug submissions and correct alternative styles for lesson 08 (the Transformer).

Each variant replaces whole solution cells (by grade_id) of the reference solution; ``must_fail``
lists the test cells (by grade_id) that must lose points. An empty ``must_fail`` marks a correct
solution in another style, which must keep full marks.
"""

LESSON = "08_transformer"


AVERAGE_ONLY_WEIGHTS__AVERAGE_CHECKPOINTS = '''
def average_checkpoints(state_dicts):
    out = dict(state_dicts[-1])
    for key in out:
        if key.endswith("weight"):                        # forgets biases and buffers
            out[key] = sum(sd[key] for sd in state_dicts) / len(state_dicts)
    return out
'''


DECODER_HAND_WRITTEN_ATTENTION_STYLE__DECODERBLOCK = '''
class HeadsAttention(nn.Module):
    """Multi-head attention written out (lesson 06 style): w_q, w_k, w_v, w_o; masks True = allowed."""

    def __init__(self, d_model, n_heads, dropout=0.0):
        super().__init__()
        self.num_heads, self.d_head = n_heads, d_model // n_heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, mask=None):
        B, Tq, D = q.shape
        Tk = k.shape[1]
        split = lambda t, T: t.view(B, T, self.num_heads, self.d_head).transpose(1, 2)
        q, k, v = split(self.w_q(q), Tq), split(self.w_k(k), Tk), split(self.w_v(v), Tk)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = self.dropout(torch.softmax(scores, dim=-1))
        out = torch.einsum("bhqk,bhkd->bhqd", weights, v).transpose(1, 2).reshape(B, Tq, D)
        return self.w_o(out)


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = HeadsAttention(d_model, n_heads, dropout)
        self.cross_attn = HeadsAttention(d_model, n_heads, dropout)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(d_model), nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, tgt_mask=None, memory_mask=None):
        B, T, _ = x.shape
        S, H = memory.shape[1], self.self_attn.num_heads
        tgt_mask = masks.attention_mask(tgt_mask, B=B, H=H, T_q=T, T_k=T)
        memory_mask = masks.attention_mask(memory_mask, B=B, H=H, T_q=T, T_k=S)
        sa = lambda h: self.dropout1(self.self_attn(h, h, h, tgt_mask))
        ca = lambda h: self.dropout2(self.cross_attn(h, memory, memory, memory_mask))
        ff = lambda h: self.dropout3(self.linear2(self.dropout(torch.relu(self.linear1(h)))))
        for f, norm in ((sa, self.norm1), (ca, self.norm2), (ff, self.norm3)):
            x = x + f(norm(x)) if self.norm_first else norm(x + f(x))
        return x
'''

GREEDY_ONE_SENTENCE_AT_A_TIME_STYLE__GREEDY_DECODE = '''
@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id):
    rows = []
    for sentence in src:
        sentence = sentence[sentence != model.pad_id][None]              # (1, S) without padding
        memory = model.encode(sentence, torch.ones_like(sentence, dtype=torch.bool))
        ys = [bos_id]
        while len(ys) <= max_len and ys[-1] != eos_id:
            logits = model.decode(torch.tensor([ys]), memory, torch.ones_like(sentence, dtype=torch.bool))
            ys.append(int(logits[0, -1].argmax()))
        rows.append(ys[1:])
    width = max(len(r) for r in rows)
    return torch.tensor([r + [model.pad_id] * (width - len(r)) for r in rows])
'''

BEAM_HEAP_LOOP_STYLE__BEAM_SEARCH = '''
import heapq


@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=0.6):
    src = src.view(1, -1)
    mask = src != model.pad_id
    memory = model.encode(src, mask)
    beam, finished = [(0.0, [])], []
    for step in range(max_len):
        candidates = []
        for logp, tokens in beam:
            logits = model.decode(torch.tensor([[bos_id] + tokens]), memory, mask)[0, -1]
            for tok, lp in enumerate(torch.log_softmax(logits, -1).tolist()):
                candidates.append((logp + lp, tokens + [tok]))
        beam = []
        for logp, tokens in heapq.nlargest(beam_size - len(finished), candidates, key=lambda c: c[0]):
            if tokens[-1] == eos_id or len(tokens) == max_len:
                finished.append((tokens, logp / ((5 + len(tokens)) / 6) ** length_penalty))
            else:
                beam.append((logp, tokens))
        if not beam:
            break
    finished.sort(key=lambda h: h[1], reverse=True)
    return finished
'''

AVERAGE_LOOP_STYLE__AVERAGE_CHECKPOINTS = '''
def average_checkpoints(state_dicts):
    n = len(state_dicts)
    out = {k: (v.clone() if not v.is_floating_point() else torch.zeros_like(v)) for k, v in state_dicts[-1].items()}
    for sd in state_dicts:
        for k, v in sd.items():
            if v.is_floating_point():
                out[k] += v / n
    return out
'''

LOSS_FLATTEN_BY_MASK_STYLE__TRANSLATION_LOSS = '''
def translation_loss(model, src, tgt, pad_id=0):
    inputs, targets = tgt[:, :-1], tgt[:, 1:]
    logp = torch.log_softmax(model(src, inputs, src != pad_id), dim=-1)           # (B, T, V)
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)                   # (B, T)
    real = targets != pad_id
    return -(picked * real).sum() / real.sum()
'''

# Other beam bookkeepings (valid searches, not the one section 5 asks for; they can return better-scoring
# sentences, and the tests name the rule they break).
BEAM_KEEPS_K_LIVE__BEAM_SEARCH = '''
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=0.6):
    src = src.reshape(1, -1)
    mask = src != model.pad_id
    memory = model.encode(src, mask)
    lp = lambda n: ((5 + n) / 6) ** length_penalty
    live, finished = [([], 0.0)], []
    for step in range(1, max_len + 1):
        cands = []
        for tokens, logp in live:
            logits = model.decode(torch.tensor([[bos_id] + tokens]), memory, mask)[0, -1]
            for tok, l in enumerate(torch.log_softmax(logits, -1).tolist()):
                cands.append((tokens + [tok], logp + l))
        cands.sort(key=lambda c: -c[1])
        live = []
        for tokens, logp in cands:                      # k LIVE hypotheses: finished ones do not take a place
            if tokens[-1] == eos_id or step == max_len:
                finished.append((tokens, logp / lp(len(tokens))))
            else:
                live.append((tokens, logp))
            if len(live) == beam_size:
                break
        if not live:
            break
    return sorted(finished, key=lambda h: -h[1])[:beam_size]
'''

BEAM_HUGGING_FACE_STOPS_AT_K_FINISHED__BEAM_SEARCH = '''
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=0.6):
    src = src.reshape(1, -1)
    mask = src != model.pad_id
    memory = model.encode(src, mask)
    lp = lambda n: ((5 + n) / 6) ** length_penalty
    live, finished = [([], 0.0)], []
    for step in range(1, max_len + 1):
        cands = []
        for tokens, logp in live:
            logits = model.decode(torch.tensor([[bos_id] + tokens]), memory, mask)[0, -1]
            for tok, l in enumerate(torch.log_softmax(logits, -1).tolist()):
                cands.append((tokens + [tok], logp + l))
        cands.sort(key=lambda c: -c[1])
        live = []
        for tokens, logp in cands[:2 * beam_size]:      # Hugging Face: 2k candidates, k live, stop once k finished
            if tokens[-1] == eos_id or step == max_len:
                finished.append((tokens, logp / lp(len(tokens))))
            else:
                live.append((tokens, logp))
            if len(live) == beam_size:
                break
        if len(finished) >= beam_size or not live:
            break
    return sorted(finished, key=lambda h: -h[1])[:beam_size]
'''

# Writes the means into the last checkpoint's own dict (rebinding its entries): the input changes, though no
# tensor is changed in place. Under grading the dicts are copies, so the judge asks the sandbox (red team, F2).
AVERAGE_REBINDS_LAST__AVERAGE_CHECKPOINTS = '''
def average_checkpoints(state_dicts):
    out = state_dicts[-1]                  # the last checkpoint: its integer counter is the one to keep
    for key in list(out):
        if torch.is_floating_point(out[key]):
            out[key] = torch.stack([sd[key].double() for sd in state_dicts]).mean(dim=0).to(out[key].dtype)
    return out
'''

# Right values, computed only when the result is read, into the last checkpoint's own dict (a red
# team's: under grading it once kept full marks, as the change came after the call).
AVERAGE_DEFERRED_WRITE__AVERAGE_CHECKPOINTS = '''
class _Averaged:
    def __init__(self, state_dicts):
        self.state_dicts = list(state_dicts)
        self.done = {}

    def __iter__(self):
        return iter(self.state_dicts[-1])

    def keys(self):
        return self.state_dicts[-1].keys()

    def __getitem__(self, key):
        if key not in self.done:
            last = self.state_dicts[-1]
            if torch.is_floating_point(last[key]):
                last[key] = torch.stack([sd[key].double() for sd in self.state_dicts]).mean(dim=0).to(last[key].dtype)
            self.done[key] = last[key]
        return self.done[key]


def average_checkpoints(state_dicts):
    return _Averaged(state_dicts)
'''

AVERAGE_IN_PLACE__AVERAGE_CHECKPOINTS = '''
def average_checkpoints(state_dicts):
    out = state_dicts[0]                                   # sums into the first checkpoint's own tensors
    for sd in state_dicts[1:]:
        for k, v in sd.items():
            if v.is_floating_point():
                out[k] += v
            else:
                out[k] = v
    for k, v in out.items():
        if v.is_floating_point():
            v /= len(state_dicts)
    return {k: v.clone() for k, v in out.items()}
'''


# --------------------------------------------------------------------------------------------
# one layer shared by the whole stack: derived from the reference solution by a one-line change
# --------------------------------------------------------------------------------------------
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))
import planting as _planting  # noqa: E402
from planting import solution_sources as _solution_sources  # noqa: E402


def _derived(cell, *changes):
    return _planting.derived(LESSON, cell, *changes)


# Planted bugs that are one or two lines of the reference, derived from it.
DECODER_SELF_ATTENTION_NOT_CAUSAL__DECODERBLOCK = _derived(
    'DecoderBlock', ('self_attn(h, h, h, attn_mask=self_mask,', 'self_attn(h, h, h,'))
CROSS_ATTENTION_Q_AND_KV_SWAPPED__DECODERBLOCK = _derived(
    'DecoderBlock', ('cross_attn(h, memory, memory,', 'cross_attn(memory, h, h,'))
CROSS_ATTENTION_IGNORES_SOURCE_PADDING__DECODERBLOCK = _derived(
    'DecoderBlock', ('cross_attn(h, memory, memory, attn_mask=cross_mask,', 'cross_attn(h, memory, memory,'))
DECODER_NORMS_IN_WRONG_ORDER__DECODERBLOCK = _derived(
    'DecoderBlock', ('x = self.norm2(x + cross_block(x))\n            x = self.norm3(x + ff_block(x))',
                     'x = self.norm3(x + cross_block(x))\n            x = self.norm2(x + ff_block(x))'))
LOSS_TARGETS_NOT_SHIFTED__TRANSLATION_LOSS = _derived('translation_loss', ('targets = tgt[:, 1:]', 'targets = tgt[:, :-1]'))
LOSS_COUNTS_PADDING__TRANSLATION_LOSS = _derived('translation_loss', ('targets.flatten(), ignore_index=pad_id)', 'targets.flatten())'))
GREEDY_IGNORES_SOURCE_PADDING__GREEDY_DECODE = _derived(
    'greedy_decode', ('memory = model.encode(src, src_mask)', 'memory = model.encode(src)'),
    ('logits = model.decode(ys, memory, src_mask)', 'logits = model.decode(ys, memory)'))
BEAM_DOES_NOT_FINISH_AT_EOS__BEAM_SEARCH = _derived('beam_search', ('if tok == eos_id or step == max_len:', 'if step == max_len:'))
BEAM_LENGTH_PENALTY_MULTIPLIES__BEAM_SEARCH = _derived('beam_search', ('logp / lp(len(tokens))', 'logp * lp(len(tokens))'))
AVERAGE_SUMS__AVERAGE_CHECKPOINTS = _derived(
    'average_checkpoints', ('torch.stack([sd[key].double() for sd in state_dicts]).mean(dim=0).to(last.dtype)',
                            'torch.stack([sd[key] for sd in state_dicts]).sum(dim=0)     # the sum, not the mean'))
DECODER_DROPOUT_BEFORE_NORM__DECODERBLOCK = _derived(
    'DecoderBlock',
    ('x = x + self_block(self.norm1(x))',
     'h = self.norm1(self.dropout1(x))                   # dropout before the norm, on the input\n'
     '            x = x + self.self_attn(h, h, h, attn_mask=self_mask, need_weights=False)[0]'),
    ('x = self.norm1(x + self_block(x))',
     'x = self.norm1(self.dropout1(x + self.self_attn(x, x, x, attn_mask=self_mask, need_weights=False)[0]))'))


def _shared_stack(cell, old, new):
    src = _solution_sources(LESSON)[cell]
    assert src.count(old) == 1, f"{LESSON}: the reference {cell} changed; update the shared-stack variant"
    return src.replace(old, new)

TRANSFORMER_ONE_SHARED_ENCODER_LAYER__TRANSFORMER = _shared_stack('Transformer', '            for _ in range(n_layers)])\n        self.decoder_layers',
    '            ] * n_layers)  # ONE layer in every place\n        self.decoder_layers')


VARIANTS = {
    'transformer_one_shared_encoder_layer': {"replace": {'Transformer': TRANSFORMER_ONE_SHARED_ENCODER_LAYER__TRANSFORMER}, "must_fail": ['test_transformer_structure']},
    "decoder_self_attention_not_causal": {"replace": {"DecoderBlock": DECODER_SELF_ATTENTION_NOT_CAUSAL__DECODERBLOCK}, "must_fail": ['test_decoder_block_causal', 'test_decoder_block_matches_torch_post_norm', 'test_decoder_block_matches_torch_pre_norm']},
    "cross_attention_q_and_kv_swapped": {"replace": {"DecoderBlock": CROSS_ATTENTION_Q_AND_KV_SWAPPED__DECODERBLOCK}, "must_fail": ['test_decoder_block_cross_attention', 'test_decoder_block_matches_torch_post_norm']},
    "cross_attention_ignores_source_padding": {"replace": {"DecoderBlock": CROSS_ATTENTION_IGNORES_SOURCE_PADDING__DECODERBLOCK}, "must_fail": ['test_decoder_block_source_padding']},
    "decoder_norms_in_wrong_order": {"replace": {"DecoderBlock": DECODER_NORMS_IN_WRONG_ORDER__DECODERBLOCK}, "must_fail": ['test_decoder_block_matches_torch_post_norm']},
    "transformer_without_causal_mask": {"replace": {"Transformer": _derived('Transformer', ('y = layer(y, memory, tgt_mask=causal, memory_mask=memory_mask)', 'y = layer(y, memory, memory_mask=memory_mask)'))}, "must_fail": ['test_transformer_causal', 'test_transformer_matches_torch']},
    "transformer_decoder_ignores_source_padding": {"replace": {"Transformer": _derived('Transformer', ('y = layer(y, memory, tgt_mask=causal, memory_mask=memory_mask)', 'y = layer(y, memory, tgt_mask=causal)'))}, "must_fail": ['test_transformer_source_padding', 'test_transformer_matches_torch']},
    "transformer_embeddings_not_scaled": {"replace": {"Transformer": _derived('Transformer', ('self.src_embed(src) * math.sqrt(self.d_model)', 'self.src_embed(src)'), ('self.tgt_embed(tgt) * math.sqrt(self.d_model)', 'self.tgt_embed(tgt)'))}, "must_fail": ['test_transformer_matches_torch']},
    "loss_targets_not_shifted": {"replace": {"translation_loss": LOSS_TARGETS_NOT_SHIFTED__TRANSLATION_LOSS}, "must_fail": ['test_translation_loss_shift']},
    "loss_counts_padding": {"replace": {"translation_loss": LOSS_COUNTS_PADDING__TRANSLATION_LOSS}, "must_fail": ['test_translation_loss_padding']},
    "greedy_ignores_source_padding": {"replace": {"greedy_decode": GREEDY_IGNORES_SOURCE_PADDING__GREEDY_DECODE}, "must_fail": ['test_greedy_decode_batch']},
    "beam_does_not_finish_at_eos": {"replace": {"beam_search": BEAM_DOES_NOT_FINISH_AT_EOS__BEAM_SEARCH}, "must_fail": ['test_beam_search_finishes_at_eos']},
    "beam_length_penalty_multiplies": {"replace": {"beam_search": BEAM_LENGTH_PENALTY_MULTIPLIES__BEAM_SEARCH}, "must_fail": ['test_beam_search_length_penalty']},
    "average_only_weights": {"replace": {"average_checkpoints": AVERAGE_ONLY_WEIGHTS__AVERAGE_CHECKPOINTS}, "must_fail": ['test_average_checkpoints_every_tensor', 'test_average_checkpoints_mean']},
    "average_sums": {"replace": {"average_checkpoints": AVERAGE_SUMS__AVERAGE_CHECKPOINTS}, "must_fail": ['test_average_checkpoints_mean', 'test_average_checkpoints_every_tensor']},
    "decoder_dropout_before_norm": {"replace": {"DecoderBlock": DECODER_DROPOUT_BEFORE_NORM__DECODERBLOCK}, "must_fail": ['test_decoder_block_dropout']},
    "beam_keeps_k_live": {"replace": {"beam_search": BEAM_KEEPS_K_LIVE__BEAM_SEARCH}, "must_fail": ['test_beam_search_finishes_at_eos']},
    "beam_hugging_face_stops_at_k_finished": {"replace": {"beam_search": BEAM_HUGGING_FACE_STOPS_AT_K_FINISHED__BEAM_SEARCH}, "must_fail": ['test_beam_search_finishes_at_eos', 'test_beam_search_length_penalty']},
    "average_in_place": {"replace": {"average_checkpoints": AVERAGE_IN_PLACE__AVERAGE_CHECKPOINTS}, "must_fail": ['test_average_checkpoints_mean']},
    "average_rebinds_last": {"replace": {"average_checkpoints": AVERAGE_REBINDS_LAST__AVERAGE_CHECKPOINTS}, "must_fail": ['test_average_checkpoints_mean']},
    "average_deferred_write": {"replace": {"average_checkpoints": AVERAGE_DEFERRED_WRITE__AVERAGE_CHECKPOINTS}, "must_fail": ['test_average_checkpoints_mean']},
    "decoder_hand_written_attention_style": {"replace": {"DecoderBlock": DECODER_HAND_WRITTEN_ATTENTION_STYLE__DECODERBLOCK}, "must_fail": []},
    "greedy_one_sentence_at_a_time_style": {"replace": {"greedy_decode": GREEDY_ONE_SENTENCE_AT_A_TIME_STYLE__GREEDY_DECODE}, "must_fail": []},
    "beam_heap_loop_style": {"replace": {"beam_search": BEAM_HEAP_LOOP_STYLE__BEAM_SEARCH}, "must_fail": []},
    "average_loop_style": {"replace": {"average_checkpoints": AVERAGE_LOOP_STYLE__AVERAGE_CHECKPOINTS}, "must_fail": []},
    "loss_flatten_by_mask_style": {"replace": {"translation_loss": LOSS_FLATTEN_BY_MASK_STYLE__TRANSLATION_LOSS}, "must_fail": []},
}


# Blind spots found by the careful-grader audit (/tmp/cg/REPORT.md): each must lose points where named.
AUDIT_TRANSFORMER_IGNORES_DROPOUT = _derived('Transformer', ('self.dropout = nn.Dropout(dropout)', 'self.dropout = nn.Identity()'), ('nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout,', 'nn.TransformerEncoderLayer(d_model, n_heads, d_ff, 0.0,'), ('DecoderBlock(d_model, n_heads, d_ff, dropout, norm_first', 'DecoderBlock(d_model, n_heads, d_ff, 0.0, norm_first'))

AUDIT_DECODER_NO_ATTENTION_WEIGHT_DROPOUT = _derived('DecoderBlock', ('n_heads, dropout=dropout, batch_first=True)', 'n_heads, batch_first=True)'))

AUDIT_DECODER_NO_FFN_INNER_DROPOUT = _derived('DecoderBlock', ('self.linear2(self.dropout(F.relu(self.linear1(h))))', 'self.linear2(F.relu(self.linear1(h)))'))

AUDIT_BEAM_NO_SRC_MASK = _derived('beam_search', ('    src_mask = src != model.pad_id\n', '    src_mask = torch.ones_like(src, dtype=torch.bool)\n'))

AUDIT_BEAM_UNSQUEEZE_ONLY_1D = _derived('beam_search', ('    src = src.reshape(1, -1)', '    src = src.unsqueeze(0)'))

AUDIT_GREEDY_PAD_HARDCODED_0 = _derived('greedy_decode', ('src_mask = src != model.pad_id', 'src_mask = src != 0'), ('torch.full_like(nxt, model.pad_id)', 'torch.zeros_like(nxt)'))

VARIANTS.update({
    "transformer_ignores_dropout": {"replace": {"Transformer": AUDIT_TRANSFORMER_IGNORES_DROPOUT}, "must_fail": ['test_transformer_dropout']},
    "decoder_no_attention_weight_dropout": {"replace": {"DecoderBlock": AUDIT_DECODER_NO_ATTENTION_WEIGHT_DROPOUT}, "must_fail": ['test_decoder_block_dropout']},
    "decoder_no_ffn_inner_dropout": {"replace": {"DecoderBlock": AUDIT_DECODER_NO_FFN_INNER_DROPOUT}, "must_fail": ['test_decoder_block_dropout']},
    "beam_ignores_source_padding": {"replace": {"beam_search": AUDIT_BEAM_NO_SRC_MASK}, "must_fail": ['test_beam_search_source']},
    "beam_breaks_on_1_by_s_source": {"replace": {"beam_search": AUDIT_BEAM_UNSQUEEZE_ONLY_1D}, "must_fail": ['test_beam_search_source']},
    "greedy_pad_id_hardcoded_0": {"replace": {"greedy_decode": AUDIT_GREEDY_PAD_HARDCODED_0}, "must_fail": ['test_greedy_decode_batch']},
})
EXTENDED = ['decoder_no_ffn_inner_dropout', 'beam_breaks_on_1_by_s_source']

# ---------------------------------------------------------------------------------------- issue 42
# Found by strangers. A fixed-width beam feeds padding to the decoder (its finished rows), so the table
# model must accept pad_id as a target token even where pad_id is past its vocabulary (it raised IndexError).
STRANGER_BEAM_FIXED_WIDTH_STYLE = '''
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=0.6):
    # A fixed-width beam, as batched decoders keep it: k rows throughout; the rows of finished (or never
    # used) places hold padding and a log-probability of -inf, so they are fed to the decoder but never chosen.
    src = src.reshape(1, -1)
    src_mask = src != model.pad_id
    memory = model.encode(src, src_mask)
    k = beam_size
    ys = torch.full((k, 1), bos_id, dtype=torch.long, device=src.device)
    logp = torch.full((k,), float("-inf"), device=src.device)
    logp[0] = 0.0                                                   # one live hypothesis: <bos>
    finished = []
    for step in range(1, max_len + 1):
        if not torch.isfinite(logp).any():
            break
        logits = model.decode(ys, memory.expand(k, -1, -1), src_mask.expand(k, -1))[:, -1]   # (k, V)
        cand = logp[:, None] + torch.log_softmax(logits.float(), dim=-1)                     # dead rows: -inf
        V = cand.shape[-1]
        n = min(k - len(finished), int(torch.isfinite(cand).sum()))
        top, idx = cand.flatten().topk(n)
        new_ys = torch.full((k, step + 1), model.pad_id, dtype=torch.long, device=src.device)
        new_logp = torch.full((k,), float("-inf"), device=src.device)
        row = 0
        for value, i in zip(top.tolist(), idx.tolist()):
            p, tok = divmod(i, V)
            tokens = ys[p, 1:].tolist() + [tok]
            if tok == eos_id or step == max_len:
                finished.append((tokens, value / ((5 + len(tokens)) / 6) ** length_penalty))
            else:
                new_ys[row, :step] = ys[p]
                new_ys[row, step] = tok
                new_logp[row] = value
                row += 1
        ys, logp = new_ys, new_logp
    return sorted(finished, key=lambda h: -h[1])[:beam_size]
'''

# The most likely beam mistake: beam_size LIVE hypotheses, every finished one returned. Its first failure was
# only "returned 7 hypotheses; beam_size is 3": the message must say which rule of section 5 it breaks.
STRANGER_BEAM_KEEPS_K_LIVE_UNTRUNCATED = '''
@torch.no_grad()
def beam_search(model, src, beam_size, max_len, bos_id, eos_id, length_penalty=0.6):
    src = src.reshape(1, -1)
    mask = src != model.pad_id
    memory = model.encode(src, mask)
    live, finished = [([], 0.0)], []
    for step in range(1, max_len + 1):
        cands = []
        for tokens, logp in live:
            logits = model.decode(torch.tensor([[bos_id] + tokens]), memory, mask)[0, -1]
            for tok, l in enumerate(torch.log_softmax(logits, -1).tolist()):
                cands.append((tokens + [tok], logp + l))
        cands.sort(key=lambda c: -c[1])
        live = []
        for tokens, logp in cands[:beam_size]:
            if tokens[-1] == eos_id or step == max_len:
                finished.append((tokens, logp / ((5 + len(tokens)) / 6) ** length_penalty))
            else:
                live.append((tokens, logp))
        if not live:
            break
    return sorted(finished, key=lambda h: -h[1])
'''

VARIANTS.update({
    "beam_fixed_width_padded_style": {"replace": {"beam_search": STRANGER_BEAM_FIXED_WIDTH_STYLE}, "must_fail": []},
    "beam_keeps_k_live_untruncated": {"replace": {"beam_search": STRANGER_BEAM_KEEPS_K_LIVE_UNTRUNCATED},
                                      "must_fail": ["test_beam_search_length_penalty", "test_beam_search_finishes_at_eos"],
                                      "says": {"test_beam_search_length_penalty": ["not refilled", "LIVE"],
                                               "test_beam_search_finishes_at_eos": ["not refilled"]}},
})

# ---------------------------------------------------------------------------------------- issue 42, certificate
# Survivors of the fairness certificate: one-line mutants of the reference that kept full marks.
_ENC = 'nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True, norm_first=norm_first)'
_ENORM = 'self.encoder_norm = nn.LayerNorm(d_model) if norm_first else None'
_DNORM = 'self.decoder_norm = nn.LayerNorm(d_model) if norm_first else None'
_INIT = 'nn.init.normal_(embed.weight, std=d_model ** -0.5)'

VARIANTS.update({
    # the encoder layers keep PyTorch's own dropout (0.1), whatever the model's
    "encoder_layers_default_dropout": {
        "replace": {"Transformer": _derived('Transformer', (_ENC, _ENC.replace('d_ff, dropout, ', 'd_ff, ')))},
        "must_fail": ["test_transformer_dropout"], "says": {"test_transformer_dropout": ["dropout=0.0", "0.1"]}},
    # the decoder blocks keep DecoderBlock's default (0.0): no dropout inside the decoder at all
    "decoder_layers_default_dropout": {
        "replace": {"Transformer": _derived('Transformer', ('DecoderBlock(d_model, n_heads, d_ff, dropout, norm_first',
                                                            'DecoderBlock(d_model, n_heads, d_ff, norm_first'))},
        "must_fail": ["test_transformer_dropout"]},
    "encoder_norm_in_post_norm": {"replace": {"Transformer": _derived('Transformer', (_ENORM, _ENORM.replace('if norm_first', 'if (norm_first) or True')))},
                                  "must_fail": ["test_transformer_structure"], "says": {"test_transformer_structure": ["encoder_norm"]}},
    "decoder_norm_in_post_norm": {"replace": {"Transformer": _derived('Transformer', (_DNORM, _DNORM.replace('if norm_first', 'if (norm_first) or True')))},
                                  "must_fail": ["test_transformer_structure"], "says": {"test_transformer_structure": ["decoder_norm"]}},
    "no_encoder_norm_in_pre_norm": {"replace": {"Transformer": _derived('Transformer', (_ENORM, _ENORM.replace('if norm_first', 'if (norm_first) and False')))},
                                    "must_fail": ["test_transformer_structure"], "says": {"test_transformer_structure": ["encoder stack"]}},
    "no_decoder_norm_in_pre_norm": {"replace": {"Transformer": _derived('Transformer', (_DNORM, _DNORM.replace('if norm_first', 'if (norm_first) and False')))},
                                    "must_fail": ["test_transformer_structure"], "says": {"test_transformer_structure": ["decoder stack"]}},
    # the embeddings' initialisation: nn.Embedding's own N(0, 1), and three wrong scales
    "embeddings_default_init": {"replace": {"Transformer": _derived('Transformer', (_INIT, 'pass                                                # nn.Embedding: N(0, 1)'))},
                                "must_fail": ["test_transformer_structure"], "says": {"test_transformer_structure": ["N(0, 1/d_model)"]}},
    "embeddings_init_std_1": {"replace": {"Transformer": _derived('Transformer', (_INIT, 'nn.init.normal_(embed.weight, std=1.0)'))},
                              "must_fail": ["test_transformer_structure"]},
    "embeddings_init_std_d_to_minus_1_5": {"replace": {"Transformer": _derived('Transformer', (_INIT, 'nn.init.normal_(embed.weight, std=d_model ** -1.5)'))},
                                           "must_fail": ["test_transformer_structure"]},
    "embeddings_init_std_sqrt_d": {"replace": {"Transformer": _derived('Transformer', (_INIT, 'nn.init.normal_(embed.weight, std=d_model ** 0.5)'))},
                                   "must_fail": ["test_transformer_structure"]},
})

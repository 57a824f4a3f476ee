"""Unit tests for the GRU encoder-decoder of course/seq2seq.py (lesson 02 builds it, lesson 03 reuses it)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course.models import seq2seq as s2s
from course.data import translation as tr


class DotAttention(nn.Module):
    """A minimal attention for the tests (not lesson 02's answer): dot score after a projection."""

    def __init__(self, d_query, d_key):
        super().__init__()
        self.proj = nn.Linear(d_query, d_key, bias=False)

    def forward(self, query, keys, values, mask):
        scores = torch.einsum("bk,bsk->bs", self.proj(query), keys)        # (B, S)
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.einsum("bs,bsv->bv", weights, values), weights


D_EMB, D_HIDDEN = 8, 12


@pytest.fixture(scope="module")
def data():
    return tr.make_translation_data(n_train=400, n_val=23, n_test=46, seed=1)


def _model(data, attention=True, seed=0):
    """With attention: the package's Luong decoder (the package holds no Bahdanau step: lesson 02's answer)."""
    torch.manual_seed(seed)
    att = DotAttention(D_HIDDEN, s2s.Seq2Seq.encoder_size(D_HIDDEN)) if attention else None
    return s2s.Seq2Seq(len(data.src_vocab), len(data.tgt_vocab), D_EMB, D_HIDDEN, att, luong=attention).eval()


def test_encoder_shapes_and_padding_invariance(data):
    enc = s2s.Encoder(len(data.src_vocab), D_EMB, D_HIDDEN).eval()
    b = data.batch(data.test[:4])
    states, final = enc(b.src, b.src_mask)
    B, S = b.src.shape
    assert states.shape == (B, S, 2 * D_HIDDEN) and final.shape == (B, 2 * D_HIDDEN)
    assert enc.d_out == 2 * D_HIDDEN
    assert (states[~b.src_mask] == 0).all(), "padded positions of the encoder states are zero"
    # extra padding changes nothing on real positions, nor the final summary
    src = torch.cat([b.src, torch.zeros(B, 3, dtype=torch.long)], dim=1)
    mask = torch.cat([b.src_mask, torch.zeros(B, 3, dtype=torch.bool)], dim=1)
    states2, final2 = enc(src, mask)
    torch.testing.assert_close(states2[:, :S], states)
    torch.testing.assert_close(final2, final)


@pytest.mark.parametrize("attention", [False, True])
def test_forward_shapes_and_gradients(data, attention):
    model = _model(data, attention).train()
    b = data.batch(data.train[:5])
    logits = model(b.src, b.src_mask, b.tgt_in)
    assert logits.shape == (*b.tgt_in.shape, len(data.tgt_vocab))
    assert torch.isfinite(logits).all()
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=0)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} gets no gradient"
        assert torch.isfinite(p.grad).all()
    _, w = model(b.src, b.src_mask, b.tgt_in, return_weights=True)
    if attention:
        assert w.shape == (*b.tgt_in.shape, b.src.shape[1])
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:2]))
        assert (w.masked_select(~b.src_mask[:, None, :].expand_as(w)) == 0).all()
    else:
        assert w is None


@pytest.mark.parametrize("attention", [False, True])
def test_a_sentence_does_not_depend_on_its_batch(data, attention):
    model = _model(data, attention)
    pairs = data.test[:6]
    b = data.batch(pairs)
    alone = data.batch(pairs[2:3])
    with torch.no_grad():
        full = model(b.src, b.src_mask, b.tgt_in)
        one = model(alone.src, alone.src_mask, alone.tgt_in)
    T = alone.tgt_in.shape[1]
    torch.testing.assert_close(full[2:3, :T], one, atol=1e-5, rtol=1e-5)


def test_attention_module_is_called_with_the_documented_shapes(data):
    calls = []

    class Spy(DotAttention):
        def forward(self, query, keys, values, mask):
            calls.append((query.shape, keys.shape, values.shape, mask.shape, mask.dtype))
            return super().forward(query, keys, values, mask)

    model = s2s.Seq2Seq(len(data.src_vocab), len(data.tgt_vocab), D_EMB, D_HIDDEN,
                        Spy(D_HIDDEN, 2 * D_HIDDEN), luong=True)
    b = data.batch(data.test[:3])
    model(b.src, b.src_mask, b.tgt_in)
    B, S = b.src.shape
    assert len(calls) == b.tgt_in.shape[1]
    assert calls[0] == ((B, D_HIDDEN), (B, S, 2 * D_HIDDEN), (B, S, 2 * D_HIDDEN), (B, S), torch.bool)


def test_luong_step_attends_with_the_new_state():
    """LuongDecoder: s_m = GRU(e_m, s_{m-1}) first, then the query is s_m; the output reads [s_m || c_m]."""
    torch.manual_seed(0)
    dec = s2s.LuongDecoder(11, D_EMB, D_HIDDEN, 2 * D_HIDDEN, DotAttention(D_HIDDEN, 2 * D_HIDDEN)).eval()
    assert dec.cell.input_size == D_EMB and dec.out.in_features == D_HIDDEN + 2 * D_HIDDEN
    g = torch.Generator().manual_seed(1)
    y, s_prev, states = torch.tensor([1, 4, 7]), torch.randn(3, D_HIDDEN, generator=g), torch.randn(3, 5, 2 * D_HIDDEN, generator=g)
    mask = torch.arange(5) < torch.tensor([5, 2, 4])[:, None]
    with torch.no_grad():
        logits, s, weights = dec.step(y, s_prev, states, mask)
        gru = nn.GRUCell(D_EMB, D_HIDDEN)
        gru.load_state_dict(dec.cell.state_dict())
        want_s = gru(dec.embedding.weight[y], s_prev)
        want_c, want_w = dec.attention(want_s, states, states, mask)
        want_logits = torch.cat([want_s, want_c], -1) @ dec.out.weight.T + dec.out.bias
    torch.testing.assert_close(s, want_s)
    torch.testing.assert_close(weights, want_w)
    torch.testing.assert_close(logits, want_logits)


def test_seq2seq_arguments_say_what_to_pass():
    att = DotAttention(4, 8)
    with pytest.raises(TypeError, match="step=decode_step.*luong=True"):
        s2s.Seq2Seq(9, 11, 3, 4, att)
    with pytest.raises(ValueError, match="leave step= out"):
        s2s.Seq2Seq(9, 11, 3, 4, att, step=lambda *a: None, luong=True)
    with pytest.raises(ValueError, match="attention="):
        s2s.Seq2Seq(9, 11, 3, 4, luong=True)


@pytest.mark.parametrize("attention", [False, True])
def test_translate_greedy(data, attention):
    model = _model(data, attention)
    b = data.batch(data.test[:7])
    v = data.tgt_vocab
    tokens, w = model.translate(b.src, b.src_mask, 9, v.bos_id, v.eos_id)
    assert tokens.shape[0] == 7 and tokens.shape[1] <= 9 and tokens.dtype == torch.long
    for row in tokens.tolist():                                            # padding only after <eos>
        if v.eos_id in row:
            k = row.index(v.eos_id)
            assert all(t == v.pad_id for t in row[k + 1:])
    if attention:
        assert w.shape == (7, tokens.shape[1], b.src.shape[1])
    else:
        assert w is None
    # greedy decoding is the argmax of teacher forcing on its own output
    tgt_in = torch.cat([torch.full((7, 1), v.bos_id), tokens[:, :-1]], dim=1)
    with torch.no_grad():
        logits = model(b.src, b.src_mask, tgt_in)
    first = logits[:, 0].argmax(-1)
    assert torch.equal(first, tokens[:, 0])


def test_training_lowers_the_loss_and_evaluate_reports_buckets(data):
    model = _model(data, attention=True)
    hist = s2s.train_translator(model, data, steps=25, batch_size=16, lr=1e-2, device="cpu", desc="test")
    assert len(hist.losses) == 25
    assert sum(hist.losses[-5:]) / 5 < sum(hist.losses[:5]) / 5
    res = s2s.evaluate(model, data, "test")
    for key in ("exact_match", "token_accuracy", "bleu"):
        assert 0.0 <= res[key] <= 1.0
    assert list(res["by_length"]) == ["3-8", "9-15", "16+"]
    assert sum(v["n"] for v in res["by_length"].values()) == len(data.test) == res["n"]
    assert len(res["hypotheses"]) == len(data.test)


def test_evaluate_scores_a_perfect_translator_as_perfect(data):
    class Oracle(nn.Module):
        """Returns the reference translations (looked up by source sentence)."""

        def __init__(self):
            super().__init__()
            self.dummy = nn.Parameter(torch.zeros(1))

        def translate(self, src, src_mask, max_len, bos_id, eos_id, pad_id=0):
            rows = []
            for ids in src.tolist():
                words = tuple(data.src_vocab.decode(ids))
                pair = next(p for p in data.test if p.src == words)
                rows.append(data.tgt_vocab.encode(pair.tgt, eos=True))
            return tr.pad(rows), None

    res = s2s.evaluate(Oracle(), data, data.test[:20], batch_size=8)
    assert res["exact_match"] == 1.0 and res["token_accuracy"] == 1.0
    assert res["bleu"] == pytest.approx(1.0)


def test_length_bucket():
    assert [s2s.length_bucket(n) for n in (3, 8, 9, 15, 16, 25)] == ["3-8", "3-8", "9-15", "9-15", "16+", "16+"]
    assert s2s.length_bucket(12, edges=(10,)) == "11+"

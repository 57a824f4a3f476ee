"""Unit tests for lesson 02's test helpers (course/checks_02.py) and hidden-test oracles (course/tools/references/refs_02.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course import checks_02
from course.models import seq2seq as s2s
from course.tools.references import refs_02


def _modules_step(dec, y, s_prev, states, mask):
    """Bahdanau's step through the decoder's own PyTorch modules (nn.Embedding, nn.GRUCell, nn.Linear)."""
    e = dec.embedding(y)
    context, weights = dec.attention(s_prev, states, states, mask)
    s = dec.cell(torch.cat([e, context], -1), s_prev)
    return dec.out(torch.cat([s, context, e], -1)), s, weights


def _step_inputs():
    g = torch.Generator().manual_seed(1)
    y, s_prev, states = torch.tensor([1, 4, 7]), torch.randn(3, 6, generator=g), torch.randn(3, 4, 8, generator=g)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    return y, s_prev, states, mask


def test_reference_step_equals_the_gru_cell_step():
    dec = checks_02.decoder(13, 5, 6, 8, seed=0)
    y, s_prev, states, mask = _step_inputs()
    with torch.no_grad():
        want = _modules_step(dec, y, s_prev, states, mask)
    got = refs_02.reference_step(dec, y, s_prev, states, mask)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.float(), b, atol=1e-5, rtol=1e-5)


def test_transparent_decoder_can_be_read_by_hand():
    dec = checks_02.transparent_decoder(24, 5, 6, 8, seed=0)
    y, s_prev, states, mask = _step_inputs()
    with torch.no_grad():
        logits, s, weights = _modules_step(dec, y, s_prev, states, mask)
    torch.testing.assert_close(s, s_prev / 2)
    context = torch.einsum("bs,bsk->bk", weights, states)
    torch.testing.assert_close(logits[:, :19], torch.cat([s_prev / 2, context, dec.embedding.weight[y]], -1))
    assert (logits[:, 19:] == 0).all()
    with pytest.raises(ValueError):
        checks_02.transparent_decoder(11, 5, 6, 8, seed=0)


def test_fill_zero_makes_the_additive_weights_uniform():
    torch.manual_seed(0)
    att = _Additive(6, 10, 7, split=True)
    checks_02.fill(att, 0.0)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    _, w = att(torch.randn(2, 6), torch.randn(2, 3, 10), torch.randn(2, 3, 2), mask)
    torch.testing.assert_close(w, mask / mask.sum(-1, keepdim=True))


def test_no_answer_left_in_the_shipped_helpers():
    for name in ("reference_step", "additive_candidates", "check_additive"):
        assert not hasattr(checks_02, name), f"course/checks_02.py ships {name}, an answer: keep it in refs_02"
    assert not hasattr(s2s, "_attention_step")


class _Additive(nn.Module):
    def __init__(self, d_q, d_k, d_h, split=False):
        super().__init__()
        self.split = split
        if split:
            self.a, self.b = nn.Linear(d_q, d_h), nn.Linear(d_k, d_h, bias=False)
            self.energy = nn.Parameter(torch.randn(d_h))
        else:
            self.W, self.v = nn.Linear(d_q + d_k, d_h), nn.Linear(d_h, 1, bias=False)

    def forward(self, query, keys, values, mask):
        B, S, _ = keys.shape
        if self.split:
            scores = torch.tanh(self.a(query)[:, None] + self.b(keys)) @ self.energy
        else:
            scores = self.v(torch.tanh(self.W(torch.cat([query[:, None].expand(B, S, -1), keys], -1)))).squeeze(-1)
        w = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
        return torch.einsum("bs,bsv->bv", w, values), w


@pytest.mark.parametrize("split", [False, True])
def test_check_additive_accepts_either_layout_and_any_names(split):
    torch.manual_seed(0)
    att = _Additive(6, 10, 7, split)
    q, k, v = torch.randn(3, 6), torch.randn(3, 5, 10), torch.randn(3, 5, 2)
    mask = torch.arange(5) < torch.tensor([5, 2, 4])[:, None]
    refs_02.check_additive(att, q, k, v, mask, 7, "for the test")


def test_check_additive_rejects_a_dot_score():
    class Dot(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Linear(6, 10)

        def forward(self, query, keys, values, mask):
            w = torch.softmax(torch.einsum("bk,bsk->bs", self.W(query), keys), -1)
            return torch.einsum("bs,bsv->bv", w, values), w

    with pytest.raises(AssertionError):
        refs_02.check_additive(Dot(), torch.randn(2, 6), torch.randn(2, 4, 10), torch.randn(2, 4, 3),
                                 torch.ones(2, 4, dtype=torch.bool), 7, "for the test")


def test_seq2seq_runs_a_plugged_step():
    calls = []

    def step(decoder, y, s, states, mask):
        calls.append(y.shape)
        return _modules_step(decoder, y, s, states, mask)

    torch.manual_seed(0)
    model = s2s.Seq2Seq(9, 11, 4, 6, attention=checks_02.ProbeAttention(6, 12), step=step).eval()
    src, mask, tgt = torch.randint(3, 9, (2, 5)), torch.ones(2, 5, dtype=torch.bool), torch.randint(3, 11, (2, 4))
    logits = model(src, mask, tgt)
    assert logits.shape == (2, 4, 11) and len(calls) == 4
    assert not hasattr(model.decoder, "step"), "the package Decoder has no step to delegate to"


def test_seq2seq_with_attention_asks_for_a_step():
    with pytest.raises(TypeError, match="step=decode_step"):
        s2s.Seq2Seq(9, 11, 4, 6, attention=checks_02.ProbeAttention(6, 12))

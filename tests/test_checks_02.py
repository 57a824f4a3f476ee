"""Unit tests for lesson 02's test helpers (course/checks_02.py): the explicit references are right."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course import checks_02
from course.models import seq2seq as s2s


def test_reference_step_equals_the_gru_cell_step():
    dec = checks_02.decoder(13, 5, 6, 8, seed=0)
    g = torch.Generator().manual_seed(1)
    y, s_prev, states = torch.tensor([1, 4, 7]), torch.randn(3, 6, generator=g), torch.randn(3, 4, 8, generator=g)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
    with torch.no_grad():
        want = s2s._attention_step(dec, y, s_prev, states, mask)
    got = checks_02.reference_step(dec, y, s_prev, states, mask)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.float(), b, atol=1e-5, rtol=1e-5)


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
    checks_02.check_additive(att, q, k, v, mask, 7, "for the test")


def test_check_additive_rejects_a_dot_score():
    class Dot(nn.Module):
        def __init__(self):
            super().__init__()
            self.W = nn.Linear(6, 10)

        def forward(self, query, keys, values, mask):
            w = torch.softmax(torch.einsum("bk,bsk->bs", self.W(query), keys), -1)
            return torch.einsum("bs,bsv->bv", w, values), w

    with pytest.raises(AssertionError):
        checks_02.check_additive(Dot(), torch.randn(2, 6), torch.randn(2, 4, 10), torch.randn(2, 4, 3),
                                 torch.ones(2, 4, dtype=torch.bool), 7, "for the test")


def test_seq2seq_runs_a_plugged_step():
    calls = []

    def step(decoder, y, s, states, mask):
        calls.append(y.shape)
        return s2s._attention_step(decoder, y, s, states, mask)

    torch.manual_seed(0)
    model = s2s.Seq2Seq(9, 11, 4, 6, attention=checks_02.ProbeAttention(6, 12), step=step).eval()
    src, mask, tgt = torch.randint(3, 9, (2, 5)), torch.ones(2, 5, dtype=torch.bool), torch.randint(3, 11, (2, 4))
    logits = model(src, mask, tgt)
    assert logits.shape == (2, 4, 11) and len(calls) == 4
    assert not hasattr(model.decoder, "step"), "the package Decoder has no step to delegate to"

"""Unit tests for the test helpers of lessons 04 and 05 (course/checks_04.py, course/checks_05.py) and for lesson 05's
hidden-test oracle (course/tools/references/refs_05.py)."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course import checks_04, checks_05
from course.tools.references import refs_05


def test_reference_attention_equals_pytorch_where_every_query_sees_a_key():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 3, 7, 8, generator=g), torch.randn(2, 3, 7, 4, generator=g)
    mask = torch.rand(2, 3, 5, 7, generator=g) < 0.5
    mask[..., 0] = True
    out, weights = refs_05.reference_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, refs_05.pytorch_weights(q, k, mask), atol=1e-5, rtol=1e-5)


def test_reference_attention_gives_zeros_on_fully_masked_rows():
    q, k, v = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5, 2)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    out, weights = refs_05.reference_attention(q, k, v, mask)
    assert torch.equal(weights[1], torch.zeros(5)) and torch.equal(out[1], torch.zeros(2))
    assert torch.allclose(weights.sum(-1), torch.tensor([1.0, 0.0, 1.0]))


def test_reference_attention_reads_a_2d_mask_as_tq_tk_when_batch_equals_t():
    T = 4
    q = k = torch.randn(T, T, 8)
    _, weights = refs_05.reference_attention(q, k, torch.randn(T, T, 2), torch.ones(T, T, dtype=torch.bool).tril())
    assert torch.equal(weights.triu(1), torch.zeros(T, T, T))


def test_scale_hint_names_the_wrong_scale():
    q, k, v = torch.randn(1, 3, 16), torch.randn(1, 4, 16), torch.randn(1, 4, 5)
    assert "not scaled" in checks_05.scale_hint(torch.softmax(q @ k.transpose(-2, -1), -1), q, k, v)
    assert "sqrt(d_k)" in checks_05.scale_hint(torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(16), -1), q, k, v)


class _Hop(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.H = nn.Linear(d_model, d_model, bias=False)

    def forward(self, controller, keys, values, mask):
        w = torch.softmax((keys @ controller[:, :, None]).squeeze(-1).masked_fill(~mask, -math.inf), -1)
        return self.H(controller) + (w[:, None] @ values).squeeze(1), w


def test_make_hop_sets_H_and_forward_checks_the_pair():
    hop = checks_04.make_hop(_Hop, 3, 2 * torch.eye(3))
    assert torch.equal(hop.H.weight, 2 * torch.eye(3))
    new, w = checks_04.forward(hop, torch.ones(1, 3), torch.zeros(1, 2, 3), torch.zeros(1, 2, 3), torch.ones(1, 2, dtype=torch.bool))
    assert torch.allclose(new, 2 * torch.ones(1, 3)) and torch.allclose(w, torch.full((1, 2), 0.5))


def test_make_hop_explains_a_missing_H():
    with pytest.raises(AssertionError, match="self.H"):
        checks_04.make_hop(lambda d: nn.Identity(), 3)

"""Unit tests for course.oracles.attention (weight copying and the mask-convention flip).

The module under test is checked against a small reference multi-head attention written here, in
the test, so that the oracle is trusted independently of any lesson's graded answer.
"""

import math

import pytest
import torch
from torch import nn

from course.oracles.attention import (
    rows_with_a_key,
    to_torch_attn_mask,
    to_torch_key_padding_mask,
    to_torch_mha,
    torch_mha_forward,
)


class RefMHA(nn.Module):
    """Textbook multi-head attention with the course's API and mask convention (True = allowed)."""

    def __init__(self, d_model, n_heads, dropout=0.0, bias=True):
        super().__init__()
        self.n_heads, self.d_head, self.dropout = n_heads, d_model // n_heads, dropout
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        B, Tq, D = query.shape
        Tk = key.shape[1]
        H, Dh = self.n_heads, self.d_head
        q = self.w_q(query).view(B, Tq, H, Dh).transpose(1, 2)  # (B, H, Tq, Dh)
        k = self.w_k(key).view(B, Tk, H, Dh).transpose(1, 2)  # (B, H, Tk, Dh)
        v = self.w_v(value).view(B, Tk, H, Dh).transpose(1, 2)  # (B, H, Tk, Dh)
        scores = q @ k.transpose(-2, -1) / math.sqrt(Dh)  # (B, H, Tq, Tk)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
        out = (weights @ v).transpose(1, 2).reshape(B, Tq, D)  # (B, Tq, D)
        return self.w_o(out), weights


def _inputs(B, Tq, Tk, D, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, Tq, D, generator=g), torch.randn(B, Tk, D, generator=g), torch.randn(B, Tk, D, generator=g))


@pytest.mark.parametrize("B,Tq,Tk,D,H,bias", [(2, 5, 5, 16, 4, True), (3, 4, 7, 12, 3, False), (1, 1, 6, 8, 8, True)])
def test_copied_weights_give_the_same_output(B, Tq, Tk, D, H, bias):
    torch.manual_seed(0)
    ours = RefMHA(D, H, bias=bias).eval()
    q, k, v = _inputs(B, Tq, Tk, D)
    out, w = ours(q, k, v)
    ref_out, ref_w = torch_mha_forward(ours, q, k, v)
    torch.testing.assert_close(ref_out, out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ref_w, w, atol=1e-6, rtol=1e-5)


def test_copy_is_independent_and_keeps_settings():
    ours = RefMHA(8, 2, dropout=0.25, bias=False)
    ref = to_torch_mha(ours)
    assert isinstance(ref, nn.MultiheadAttention) and ref.batch_first
    assert ref.num_heads == 2 and ref.dropout == 0.25 and ref.in_proj_bias is None and ref.training
    with torch.no_grad():
        ours.w_q.weight.zero_()
    assert ref.in_proj_weight[:8].abs().sum() > 0
    assert not to_torch_mha(ours.eval()).training


def test_attn_mask_flips_the_convention_2d():
    allowed = torch.tril(torch.ones(4, 4, dtype=torch.bool))
    flipped = to_torch_attn_mask(allowed)
    assert flipped.shape == (4, 4)
    assert torch.equal(flipped, ~allowed)
    assert flipped[0, 1] and not flipped[1, 0]  # query 0 may not see key 1 (the future)


@pytest.mark.parametrize("shape", [(2, 1, 1, 6), (2, 1, 3, 6), (2, 4, 3, 6)])
def test_attn_mask_4d_is_expanded_and_flipped(shape):
    g = torch.Generator().manual_seed(1)
    allowed = torch.rand(shape, generator=g) > 0.3
    allowed[..., 0] = True
    flipped = to_torch_attn_mask(allowed, batch_size=2, n_heads=4, tgt_len=3, src_len=6)
    assert flipped.shape == (8, 3, 6)
    assert torch.equal(flipped.view(2, 4, 3, 6), ~allowed.expand(2, 4, 3, 6))


def test_attn_mask_rejects_ambiguous_or_float_masks():
    with pytest.raises(ValueError, match="mask\\[:, None, None, :\\]"):
        to_torch_attn_mask(torch.ones(2, 3, 4, dtype=torch.bool))
    with pytest.raises(TypeError):
        to_torch_attn_mask(torch.zeros(3, 3))
    with pytest.raises(ValueError):
        to_torch_attn_mask(torch.ones(1, 1, 3, 3, dtype=torch.bool))


def test_key_padding_mask_flips():
    real = torch.tensor([[True, True, False], [True, False, False]])
    assert torch.equal(to_torch_key_padding_mask(real), ~real)


@pytest.mark.parametrize("mask_kind", ["causal", "padding", "per_example", "per_head"])
def test_masked_outputs_match_reference(mask_kind):
    torch.manual_seed(3)
    B, Tq, Tk, D, H = 3, 5, 5, 16, 4
    ours = RefMHA(D, H).eval()
    q, k, v = _inputs(B, Tq, Tk, D, seed=3)
    g = torch.Generator().manual_seed(4)
    if mask_kind == "causal":
        mask = torch.tril(torch.ones(Tq, Tk, dtype=torch.bool))
    elif mask_kind == "padding":
        mask = (torch.arange(Tk) < torch.tensor([5, 3, 1])[:, None])[:, None, None, :]  # (B, 1, 1, Tk)
    elif mask_kind == "per_example":
        mask = torch.rand(B, 1, Tq, Tk, generator=g) > 0.4
        mask[..., 2] = True
    else:
        mask = torch.rand(B, H, Tq, Tk, generator=g) > 0.4
        mask[..., 0] = True
    out, w = ours(q, k, v, mask)
    ref_out, ref_w = torch_mha_forward(ours, q, k, v, mask)
    torch.testing.assert_close(ref_out, out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ref_w, w, atol=1e-6, rtol=1e-5)
    # the flip really happened: PyTorch's weights are zero exactly where ours forbid attention
    assert (ref_w.masked_select(~mask.expand_as(ref_w)) == 0).all()


def test_rows_with_a_key_marks_fully_masked_rows():
    mask = torch.ones(2, 1, 3, 4, dtype=torch.bool)
    mask[1, 0, 2] = False
    rows = rows_with_a_key(mask, 2, 3, 3, 4)
    assert rows.shape == (2, 3, 3) and rows.sum() == 15 and not rows[1, :, 2].any()
    assert rows_with_a_key(None, 2, 3, 3, 4).all()


def test_needs_n_heads_and_matching_biases():
    class NoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(4, 4) for _ in range(4))

    with pytest.raises(AttributeError):
        to_torch_mha(NoHeads())
    assert to_torch_mha(NoHeads(), n_heads=2).num_heads == 2
    m = RefMHA(4, 2)
    m.w_o = nn.Linear(4, 4, bias=False)
    with pytest.raises(ValueError):
        to_torch_mha(m)


class AliasedMHA(RefMHA):
    """The four layers in a ModuleList; w_q, w_k, w_v, w_o are read-only aliases (properties)."""

    def __init__(self, d_model, n_heads, bias=True):
        nn.Module.__init__(self)
        self.n_heads, self.d_head, self.dropout = n_heads, d_model // n_heads, 0.0
        self.proj = nn.ModuleList(nn.Linear(d_model, d_model, bias=bias) for _ in range(4))

    w_q = property(lambda self: self.proj[0])
    w_k = property(lambda self: self.proj[1])
    w_v = property(lambda self: self.proj[2])
    w_o = property(lambda self: self.proj[3])


def _weight_normed(d_model, n_heads):
    m = RefMHA(d_model, n_heads)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        nn.utils.parametrizations.weight_norm(getattr(m, name))
    return m


@pytest.mark.parametrize("make", [lambda: AliasedMHA(16, 4), lambda: AliasedMHA(12, 3, bias=False),
                                  lambda: _weight_normed(16, 4)], ids=["property-aliases", "aliases-no-bias", "weight-norm"])
def test_layers_not_registered_under_their_names_still_convert(make):
    """The oracle reads one state_dict(); a correct module whose w_q..w_o are not registered under those
    names (properties over a list, a parametrized Linear) is read by attribute instead."""
    torch.manual_seed(1)
    ours = make().eval()
    q, k, v = _inputs(2, 5, 5, ours.n_heads * ours.d_head)
    torch.testing.assert_close(to_torch_mha(ours)(q, k, v, average_attn_weights=False)[0], ours(q, k, v)[0],
                               atol=1e-5, rtol=1e-5)

"""Unit tests for course.oracles.transformer (copying an encoder block into nn.TransformerEncoderLayer).

The oracle is checked against a small reference block written here, in the test, so that it is
trusted independently of lesson 07's graded answer.
"""

import math

import pytest
import torch
from torch import nn

from course.oracles.transformer import (
    encoder_layer_state_dict,
    load_torch_encoder_layer,
    to_torch_encoder_layer,
    with_torch_norms,
)


class RefFeedForward(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class RefLayerNorm(nn.Module):
    """Layer norm from its formula, with a non-default name so that with_torch_norms has work to do."""

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight, self.bias = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias


class RefBlock(nn.Module):
    """An encoder block with the course's names and mask convention (True = allowed)."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=False, eps=1e-5):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.ff = RefFeedForward(d_model, d_ff)
        self.norm1, self.norm2 = RefLayerNorm(d_model, eps), RefLayerNorm(d_model, eps)

    def attend(self, h, mask):
        kpm = ~mask if mask is not None and mask.shape == h.shape[:2] else None
        am = ~mask if mask is not None and kpm is None else None
        return self.self_attn(h, h, h, key_padding_mask=kpm, attn_mask=am, need_weights=False)[0]

    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.attend(self.norm1(x), mask)
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.attend(x, mask))
        return self.norm2(x + self.ff(x))


class RefMHA(nn.Module):
    """Lesson 06's naming (w_q, w_k, w_v, w_o), to check the oracle packs them into in_proj_*."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, x):
        B, T, D = x.shape
        H, Dh = self.n_heads, self.d_head
        q, k, v = (w(x).view(B, T, H, Dh).transpose(1, 2) for w in (self.w_q, self.w_k, self.w_v))  # (B, H, T, Dh)
        weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(Dh), dim=-1)               # (B, H, T, T)
        return self.w_o((weights @ v).transpose(1, 2).reshape(B, T, D))                         # (B, T, D)


class RefBlockOwnMHA(RefBlock):
    def __init__(self, d_model, n_heads, d_ff, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, norm_first)
        self.self_attn = RefMHA(d_model, n_heads)

    def attend(self, h, mask):
        assert mask is None
        return self.self_attn(h)


def _randomise(block, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return block


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("D,H,d_ff,B,T", [(16, 4, 32, 2, 5), (24, 3, 96, 1, 1), (8, 1, 16, 3, 9)])
def test_copied_block_equals_torch_layer(norm_first, D, H, d_ff, B, T):
    torch.manual_seed(0)
    ours = _randomise(RefBlock(D, H, d_ff, norm_first), 1).eval()
    theirs = to_torch_encoder_layer(ours)
    assert isinstance(theirs, nn.TransformerEncoderLayer)
    assert theirs.norm_first is norm_first and theirs.self_attn.batch_first
    x = torch.randn(B, T, D)
    torch.testing.assert_close(theirs(x), ours(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_masks_after_the_flip(norm_first):
    torch.manual_seed(2)
    ours = _randomise(RefBlock(16, 4, 32, norm_first), 3).eval()
    theirs = to_torch_encoder_layer(ours)
    x = torch.randn(3, 6, 16)
    real = torch.arange(6) < torch.tensor([6, 2, 4]).unsqueeze(1)
    torch.testing.assert_close(theirs(x, src_key_padding_mask=~real), ours(x, real), atol=1e-5, rtol=1e-5)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    torch.testing.assert_close(theirs(x, src_mask=~causal), ours(x, causal), atol=1e-5, rtol=1e-5)


def test_lesson_06_attention_is_packed_into_in_proj():
    torch.manual_seed(4)
    ours = _randomise(RefBlockOwnMHA(16, 4, 32, norm_first=True), 5).eval()
    theirs = to_torch_encoder_layer(ours)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(theirs(x), ours(x), atol=1e-5, rtol=1e-5)


def test_settings_are_read_from_the_block():
    ours = RefBlock(16, 2, 40, norm_first=True, eps=1e-3)
    theirs = to_torch_encoder_layer(ours)
    assert theirs.self_attn.num_heads == 2
    assert theirs.linear1.out_features == 40
    assert theirs.norm1.eps == 1e-3 and theirs.norm_first
    assert to_torch_encoder_layer(ours, norm_first=False).norm_first is False
    assert set(encoder_layer_state_dict(ours)) == set(nn.TransformerEncoderLayer(16, 2, 40).state_dict())


def test_copy_is_independent_and_keeps_mode():
    ours = RefBlock(8, 2, 16).train()
    theirs = to_torch_encoder_layer(ours)
    assert theirs.training
    with torch.no_grad():
        ours.ff.linear1.weight.zero_()
    assert theirs.linear1.weight.abs().sum() > 0


def test_load_torch_layer_round_trip():
    torch.manual_seed(6)
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True, norm_first=False).eval()
    _randomise(layer, 7)
    ours = load_torch_encoder_layer(RefBlock(16, 4, 32).eval(), layer)
    x = torch.randn(2, 4, 16)
    torch.testing.assert_close(ours(x), layer(x), atol=1e-5, rtol=1e-5)


def test_with_torch_norms_swaps_in_pytorch_layernorm():
    torch.manual_seed(8)
    ours = _randomise(RefBlock(16, 4, 32), 9).eval()
    swapped = with_torch_norms(ours)
    assert isinstance(swapped.norm1, nn.LayerNorm) and isinstance(swapped.norm2, nn.LayerNorm)
    assert isinstance(ours.norm1, RefLayerNorm), "the original block must be left untouched"
    torch.testing.assert_close(swapped.norm2.weight, ours.norm2.weight)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(swapped(x), ours(x), atol=1e-5, rtol=1e-5)


def test_missing_names_give_a_readable_message():
    class Wrong(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm_first = False
            self.attention = nn.MultiheadAttention(8, 2, batch_first=True)

    with pytest.raises(AssertionError, match="self_attn"):
        to_torch_encoder_layer(Wrong())

    block = RefBlock(8, 2, 16)
    del block.norm_first
    with pytest.raises(AssertionError, match="norm_first"):
        to_torch_encoder_layer(block)


# -- lesson 08: the decoder layer and the whole nn.Transformer --------------------------------------------

from course.oracles.transformer import decoder_layer_state_dict, to_torch_decoder_layer, to_torch_transformer  # noqa: E402


class RefDecoderBlock(nn.Module):
    """A decoder block written here from the paper's equations, with the course's names and masks (True = allowed)."""

    def __init__(self, d_model, n_heads, d_ff, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norm1, self.norm2, self.norm3 = (RefLayerNorm(d_model) for _ in range(3))

    def forward(self, x, memory, causal=None, src_real=None):
        sa = lambda h: self.self_attn(h, h, h, attn_mask=None if causal is None else ~causal, need_weights=False)[0]
        ca = lambda h: self.cross_attn(h, memory, memory, key_padding_mask=None if src_real is None else ~src_real,
                                       need_weights=False)[0]
        ff = lambda h: self.linear2(torch.relu(self.linear1(h)))
        for f, norm in ((sa, self.norm1), (ca, self.norm2), (ff, self.norm3)):
            x = x + f(norm(x)) if self.norm_first else norm(x + f(x))
        return x


class RefTranslator(nn.Module):
    """Embeddings x sqrt(D) + sinusoids, PyTorch's encoder layers, RefDecoderBlocks, final norms with pre-norm."""

    def __init__(self, src_vocab, tgt_vocab, d_model, n_heads, d_ff, n_layers, norm_first, max_len=32):
        super().__init__()
        self.norm_first = norm_first
        self.src_embed, self.tgt_embed = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
        p = torch.arange(max_len, dtype=torch.float64)[:, None]
        w = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        pe = torch.zeros(max_len, d_model, dtype=torch.float64)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(p * w), torch.cos(p * w)
        self.register_buffer("pe", pe.float())
        self.encoder_layers = nn.ModuleList(nn.TransformerEncoderLayer(d_model, n_heads, d_ff, 0.0, batch_first=True,
                                                                       norm_first=norm_first) for _ in range(n_layers))
        self.decoder_layers = nn.ModuleList(RefDecoderBlock(d_model, n_heads, d_ff, norm_first) for _ in range(n_layers))
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else None
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else None
        self.generator = nn.Linear(d_model, tgt_vocab)

    def forward(self, src, tgt, src_real):
        D = self.pe.shape[1]
        x = self.src_embed(src) * math.sqrt(D) + self.pe[: src.shape[1]]
        for layer in self.encoder_layers:
            x = layer(x, src_key_padding_mask=~src_real)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        y = self.tgt_embed(tgt) * math.sqrt(D) + self.pe[: tgt.shape[1]]
        causal = torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool).tril()
        for layer in self.decoder_layers:
            y = layer(y, x, causal, src_real)
        if self.decoder_norm is not None:
            y = self.decoder_norm(y)
        return self.generator(y)


@pytest.mark.parametrize("norm_first", [False, True])
def test_copied_decoder_block_equals_torch_layer(norm_first):
    torch.manual_seed(10)
    ours = _randomise(RefDecoderBlock(16, 4, 32, norm_first), 11).eval()
    theirs = to_torch_decoder_layer(ours)
    assert isinstance(theirs, nn.TransformerDecoderLayer) and theirs.norm_first is norm_first
    assert set(decoder_layer_state_dict(ours)) == set(nn.TransformerDecoderLayer(16, 4, 32).state_dict())
    x, memory = torch.randn(3, 5, 16), torch.randn(3, 7, 16)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    real = torch.arange(7) < torch.tensor([7, 3, 5]).unsqueeze(1)
    torch.testing.assert_close(theirs(x, memory, tgt_mask=~causal, memory_key_padding_mask=~real),
                               ours(x, memory, causal, real), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_copied_model_equals_nn_transformer(norm_first):
    torch.manual_seed(12)
    ours = _randomise(RefTranslator(11, 13, 16, 4, 32, 2, norm_first), 13).eval()
    theirs = to_torch_transformer(ours)
    assert isinstance(theirs.transformer, nn.Transformer)
    assert (theirs.transformer.encoder.norm is None) is (not norm_first)
    real = torch.arange(6) < torch.tensor([6, 2]).unsqueeze(1)
    src = torch.randint(1, 11, (2, 6)).masked_fill(~real, 0)
    tgt = torch.randint(1, 13, (2, 5))
    torch.testing.assert_close(theirs(src, tgt, real), ours(src, tgt, real), atol=1e-5, rtol=1e-5)
    with torch.no_grad():                                   # a copy: changing ours leaves theirs alone
        ours.decoder_layers[0].linear1.weight.zero_()
    assert theirs.transformer.decoder.layers[0].linear1.weight.abs().sum() > 0


def test_decoder_bridge_names_the_missing_piece():
    block = RefDecoderBlock(8, 2, 16)
    del block.cross_attn
    with pytest.raises(AssertionError, match="cross_attn"):
        to_torch_decoder_layer(block)


class AliasedCrossDecoderBlock(RefDecoderBlock):
    """The cross-attention registered as ``src_attn``; ``cross_attn`` is a property alias of it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.src_attn = self._modules.pop("cross_attn")

    cross_attn = property(lambda self: self.src_attn)


def test_a_cross_attention_alias_still_converts():
    """The oracle reads the block's state_dict() once; an attention whose documented name is an alias of
    a sub-module registered under another name is read by itself."""
    torch.manual_seed(12)
    ours = _randomise(AliasedCrossDecoderBlock(16, 4, 32, True), 13).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    torch.testing.assert_close(to_torch_decoder_layer(ours).eval()(x, memory), ours(x, memory), atol=1e-5, rtol=1e-5)

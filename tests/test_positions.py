"""Unit tests for lesson 13's package code: the experiment's model (course/models/positional_gpt.py), the bridge
to transformers' LlamaAttention (course/oracles/llama.py), the test helpers (course/checks_13.py) and the
instructor-side references (course/tools/references/refs_13.py).

The rotation and the ALiBi bias these tests need are written here, in the test (the package holds no answer).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course import checks_13
from course.data.corpus import CharCorpus
from course.models.positional_gpt import SCHEMES, PositionalGPT, loss_per_position, train
from course.oracles.llama import llama_attention_forward, to_llama_attention
from course.tools.references import refs_13

transformers = pytest.importorskip("transformers")


def rotate(x, positions, base=10000.0):
    """Half-split RoPE, written the way transformers does (rotate_half), for (T,) positions."""
    d = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.as_tensor(positions, dtype=torch.float64)[:, None] * inv           # (T, d/2)
    cos, sin = torch.cat([ang, ang], -1).cos().to(x.dtype), torch.cat([ang, ang], -1).sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def alibi(n_heads, T_q, T_k):
    """ALiBi written entry by entry (the lesson's layout)."""
    out = torch.full((n_heads, T_q, T_k), float("-inf"))
    for h in range(n_heads):
        for i in range(T_q):
            p = i + T_k - T_q
            for j in range(p + 1):
                out[h, i, j] = -(2.0 ** (-8.0 * (h + 1) / n_heads)) * (p - j)
    return out


def table(n, d):
    return 0.02 * torch.randn(n, d, generator=torch.Generator().manual_seed(n))


PARTS = {"learned": {}, "sinusoidal": {"table": table}, "rope": {"rotate": rotate}, "alibi": {"bias": alibi}, "none": {}}


class Attention(nn.Module):
    """A rotary attention with the lesson's names, written with rotate_half (the oracle's subject)."""

    def __init__(self, d_model, n_heads, base=10000.0, bias=False):
        super().__init__()
        self.n_heads, self.base = n_heads, base
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model, bias=bias) for _ in range(4))

    def forward(self, x, positions=None, causal=True):
        B, T, D = x.shape
        H = self.n_heads
        positions = torch.arange(T) if positions is None else positions
        q, k, v = (w(x).view(B, T, H, D // H).transpose(1, 2) for w in (self.w_q, self.w_k, self.w_v))
        q, k = rotate(q, positions, self.base), rotate(k, positions, self.base)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return self.w_o(out.transpose(1, 2).reshape(B, T, D))


@pytest.mark.parametrize("bias,base", [(False, 10000.0), (True, 500.0)])
def test_llama_bridge_computes_rotary_attention(bias, base):
    torch.manual_seed(0)
    attn = Attention(32, 4, base, bias).eval()
    x = torch.randn(2, 9, 32)
    llama = to_llama_attention(attn.state_dict(), 4, base=base)
    with torch.no_grad():
        torch.testing.assert_close(llama_attention_forward(llama, x), attn(x), atol=1e-5, rtol=0)
        p = torch.tensor([0, 2, 3, 9, 10, 11, 30, 31, 40])
        torch.testing.assert_close(llama_attention_forward(llama, x, p), attn(x, p), atol=1e-5, rtol=0)
        torch.testing.assert_close(llama_attention_forward(llama, x, causal=False), attn(x, causal=False), atol=1e-5, rtol=0)
    assert llama.q_proj.bias is not None if bias else llama.q_proj.bias is None


def test_llama_bridge_names_what_is_missing():
    with pytest.raises(AssertionError, match="w_k.weight"):
        to_llama_attention({"w_q.weight": torch.zeros(8, 8)}, 2)
    half = {f"{n}.weight": torch.zeros(8, 8) for n in ("w_q", "w_k", "w_v", "w_o")} | {"w_q.bias": torch.zeros(8)}
    with pytest.raises(AssertionError, match="bias on some"):
        to_llama_attention(half, 2)


def test_references_agree_with_transformers_and_bloom():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    x = torch.randn(2, 3, 7, 16, dtype=torch.float64)
    p = torch.tensor([3, 0, 9, 100, 4, 5, 6])
    inv = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    emb = torch.cat([p[:, None] * inv] * 2, -1)[None]                    # (1, T, Dh)
    want, _ = apply_rotary_pos_emb(x, x, emb.cos(), emb.sin())
    torch.testing.assert_close(refs_13.reference_rope(x, p), want, atol=1e-12, rtol=0)
    rows = torch.randint(0, 50, (2, 7))
    torch.testing.assert_close(refs_13.reference_rope(x, rows)[1], refs_13.reference_rope(x[1], rows[1]), atol=1e-12, rtol=0)
    for H, T_q, T_k in [(8, 5, 5), (4, 2, 6), (1, 3, 3)]:
        torch.testing.assert_close(refs_13.bloom_alibi(H, T_q, T_k), alibi(H, T_q, T_k), atol=1e-6, rtol=1e-6)
    q, k = torch.randn(5, 8), torch.randn(5, 8)
    m, n = torch.tensor([0, 4, 9, 2, 30]), torch.tensor([3, 4, 1, 20, 31])
    score = (rotate(q.double(), m) * rotate(k.double(), n)).sum(-1)
    torch.testing.assert_close(refs_13.reference_score(q, k, n - m), score, atol=1e-10, rtol=0)


def test_checks_helpers_turn_errors_into_the_rule():
    def broken(x, positions, base=10000.0):
        raise RuntimeError("size mismatch")

    with pytest.raises(AssertionError, match="positions of shape"):
        checks_13.rope(broken, torch.zeros(2, 3, 4), torch.zeros(2, 3))
    rows = checks_13.rotated_unit_vectors(rotate, 4, 1)
    torch.testing.assert_close(rows[0], torch.tensor([math.cos(1.0), 0.0, math.sin(1.0), 0.0]))
    assert checks_13.allowed(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]


def corpus():
    return CharCorpus("def f(x):\n    return x + 1\n" * 200)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_model_is_causal_and_takes_positions(scheme):
    c = corpus()
    torch.manual_seed(0)
    model = PositionalGPT(c.vocab_size, scheme, block_size=16, d_model=16, n_heads=2, n_layers=2, **PARTS[scheme]).eval()
    idx = torch.randint(0, c.vocab_size, (2, 12))
    with torch.no_grad():
        logits = model(idx)
        assert logits.shape == (2, 12, c.vocab_size)
        changed = idx.clone()
        changed[:, 8:] = (changed[:, 8:] + 1) % c.vocab_size
        torch.testing.assert_close(model(changed)[:, :8], logits[:, :8], atol=1e-5, rtol=0)
        moved = model(idx, positions=torch.arange(3, 15))
    if scheme in ("learned", "sinusoidal"):
        assert not torch.allclose(moved, logits, atol=1e-4)           # absolute positions: a shift changes the logits
    else:
        torch.testing.assert_close(moved, logits, atol=1e-4, rtol=0)  # relative or none: a shift changes nothing


def test_learned_table_refuses_longer_sequences():
    model = PositionalGPT(10, "learned", block_size=8, d_model=8, n_heads=2, n_layers=1)
    with pytest.raises(IndexError, match="8 rows"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="rotate"):
        PositionalGPT(10, "rope", block_size=8)


def test_rope_base_can_change_after_training():
    torch.manual_seed(0)
    model = PositionalGPT(10, "rope", block_size=8, d_model=16, n_heads=2, n_layers=1, rotate=rotate).eval()
    idx = torch.randint(0, 10, (1, 20))
    with torch.no_grad():
        for p in model.parameters():              # weights large enough for the scores to matter
            p.normal_(0.0, 0.5)
        before = model(idx)
        model.rope_base = 40000.0
        assert not torch.allclose(model(idx), before, atol=1e-5)


def test_training_lowers_the_loss_and_the_curve_has_one_value_per_position():
    c = corpus()
    torch.manual_seed(0)
    model = PositionalGPT(c.vocab_size, "alibi", block_size=16, d_model=16, n_heads=2, n_layers=1, bias=alibi)
    losses = train(model, c, steps=60, batch_size=8, block_size=16, lr=1e-2, warmup=5, generator=torch.Generator().manual_seed(1))
    assert len(losses) == 60 and sum(losses[-10:]) / 10 < losses[0] - 0.5
    windows = torch.stack([c.val[s:s + 25] for s in range(0, 40, 10)])
    curve = loss_per_position(model, windows, batch_size=3)
    assert curve.shape == (24,) and torch.isfinite(curve).all()

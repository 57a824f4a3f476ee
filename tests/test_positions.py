"""Unit tests for lesson 13's package code: the experiment's tools (course/positions.py), the bridge to
transformers' LlamaAttention (course/oracles/llama.py), the test helpers (course/checks_13.py) and the
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
from course.positions import loss_per_position, train_windows
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


class TinyLM(nn.Module):
    """Embedding, one causal rotary attention layer (written in this test), a head."""

    def __init__(self, vocab_size, d_model=16):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.attn = Attention(d_model, 2)
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, idx, positions=None):
        x = self.emb(idx)
        return self.head(x + self.attn(x, positions))


def test_training_lowers_the_loss_and_the_curve_has_one_value_per_position():
    c = corpus()
    torch.manual_seed(0)
    model = TinyLM(c.vocab_size)
    losses = train_windows(model, c, steps=60, batch_size=8, block_size=16, lr=1e-2, warmup=5,
                           generator=torch.Generator().manual_seed(1))
    assert len(losses) == 60 and sum(losses[-10:]) / 10 < losses[0] - 0.5
    assert not model.training
    windows = torch.stack([c.val[s:s + 25] for s in range(0, 40, 10)])
    curve = loss_per_position(model, windows, batch_size=3)
    assert curve.shape == (24,) and torch.isfinite(curve).all()
    by_hand = F.cross_entropy(model(windows[:, :-1]).transpose(1, 2), windows[:, 1:], reduction="none").mean(0)
    torch.testing.assert_close(curve, by_hand.detach(), atol=1e-5, rtol=0)
    shifted = loss_per_position(model, windows, positions=torch.arange(100, 124))    # keyword arguments reach forward
    torch.testing.assert_close(shifted, curve, atol=1e-4, rtol=0)                     # rotary: a shift changes nothing


def test_same_generator_same_windows():
    c = corpus()
    seen = []

    class Spy(TinyLM):
        def forward(self, idx, positions=None):
            seen.append(idx.clone())
            return super().forward(idx, positions)

    for _ in range(2):
        torch.manual_seed(0)
        train_windows(Spy(c.vocab_size), c, steps=3, batch_size=4, block_size=8, lr=1e-3, warmup=1,
                      generator=torch.Generator().manual_seed(7))
    assert all(torch.equal(a, b) for a, b in zip(seen[:3], seen[3:]))

"""Lesson 14's helpers: the test-cell fixtures (course.checks_14), the hidden tests' float64 references
(course/tools/references/refs_14.py) and lesson 09's training function that the lesson reuses
(course.train_lm.train). Seeded, small, a few seconds in all."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

from course import checks_14
from course.tools.references import refs_14


class _Layer(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.n_heads = h
        for name in ("w_q", "w_k", "w_v", "w_o"):
            setattr(self, name, nn.Linear(d, d, bias=False))


class _Model(nn.Module):
    """Only the parameter layout of the lesson's model (the references read state dicts)."""

    def __init__(self, V=11, D=12, H=3, n_layers=2, P=9):
        super().__init__()
        self.embed, self.pos = nn.Embedding(V, D), nn.Embedding(P, D)
        self.layers = nn.ModuleList(_Layer(D, H) for _ in range(n_layers))
        self.unembed = nn.Linear(D, V, bias=False)


def _state(seed=0, **kw):
    torch.manual_seed(seed)
    return _Model(**kw).state_dict()


def test_pattern_puts_each_row_where_asked():
    w = checks_14.pattern(2, 2, 3, lambda h, t: max(t - 1, 0) if h == 0 else None)
    assert w.shape == (2, 2, 7, 7)
    assert torch.allclose(w.sum(-1), torch.ones(2, 2, 7))
    assert torch.equal(w[0, 0, 4], torch.eye(7)[3])
    assert torch.allclose(w[1, 1, 3, :4], torch.full((4,), 0.25)) and w[1, 1, 3, 4:].abs().sum() == 0


def test_random_weights_are_causal_rows_summing_to_one():
    w = checks_14.random_weights(3, 4, 9, torch.Generator().manual_seed(0))
    assert torch.allclose(w.sum(-1), torch.ones(3, 4, 9))
    assert w.triu(1).abs().sum() == 0


def test_reference_scores_on_known_patterns():
    L = 4
    w = checks_14.pattern(1, 3, L, lambda h, t: [max(t - 1, 0), t - L + 1 if t > L else 0, t - L if t > L else 0][h])
    assert torch.allclose(refs_14.reference_previous_token_score(w)[0], torch.tensor(1.0, dtype=torch.float64))
    assert torch.allclose(refs_14.reference_induction_score(w, L), torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))


def test_reference_forward_is_attention_written_out():
    """The reference equals nn.MultiheadAttention (no bias, causal) layer by layer, without MLP or norm."""
    state = _state(V=11, D=12, H=3)
    idx = torch.randint(0, 11, (2, 7), generator=torch.Generator().manual_seed(1))
    logits, maps = refs_14.reference_forward(state, idx, 3)
    x = state["embed.weight"][idx] + state["pos.weight"][:7]
    for i in range(2):
        mha = nn.MultiheadAttention(12, 3, bias=False, batch_first=True)
        w = torch.cat([state[f"layers.{i}.w_{n}.weight"] for n in "qkv"])
        mha.load_state_dict({"in_proj_weight": w, "out_proj.weight": state[f"layers.{i}.w_o.weight"]})
        out, weights = mha(x, x, x, attn_mask=torch.ones(7, 7, dtype=torch.bool).triu(1), average_attn_weights=False)
        assert torch.allclose(weights.double(), maps[i], atol=1e-5)
        x = x + out
    assert torch.allclose((x @ state["unembed.weight"].T).double(), logits, atol=1e-4)


def test_reference_ablation_equals_zeroed_output_columns():
    """Switching head h of layer i off = zeroing its columns of w_o (the head's output never arrives)."""
    state = _state(V=11, D=12, H=3)
    idx = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(2))
    ablated, maps = refs_14.reference_forward(state, idx, 3, ablate={0: [2], 1: [0, 1]})
    cut = dict(state)
    cut["layers.0.w_o.weight"] = state["layers.0.w_o.weight"].clone()
    cut["layers.0.w_o.weight"][:, 8:12] = 0
    cut["layers.1.w_o.weight"] = state["layers.1.w_o.weight"].clone()
    cut["layers.1.w_o.weight"][:, 0:8] = 0
    want, want_maps = refs_14.reference_forward(cut, idx, 3)
    assert torch.allclose(ablated, want) and torch.allclose(maps[1], want_maps[1])
    full, full_maps = refs_14.reference_forward(state, idx, 3)
    assert not torch.allclose(full_maps[1], maps[1])          # layer 1 reads what layer 0's head 2 wrote


def test_reference_circuits_match_their_formulas():
    state = _state(V=11, D=12, H=3)
    Dh = 4
    s = slice(Dh, 2 * Dh)                                   # head 1
    E, U = state["embed.weight"].double(), state["unembed.weight"].double()
    w = {n: state[f"layers.1.w_{n}.weight"].double() for n in "qkvo"}
    ov = refs_14.reference_ov_circuit(state, 1, 1, 3)
    assert torch.allclose(ov, E @ w["v"][s].T @ w["o"][:, s].T @ U.T)
    # the OV circuit is what head 1 adds to the logits when it attends to a position holding one token
    qk = refs_14.reference_qk_circuit(state, 1, 1, 3)
    assert torch.allclose(qk, (E @ w["q"][s].T) @ (E @ w["k"][s].T).T / 2.0)
    a, b = torch.randn(5, 5, dtype=torch.float64), torch.randn(5, 5, dtype=torch.float64)
    score = refs_14.reference_composition_score(a, b)
    assert 0 < score < 1 and math.isclose(score, refs_14.reference_composition_score(7 * a, b / 3))


@pytest.mark.slow
def test_train_lm_train_returns_a_model_whose_heads_can_be_read():
    """course.train_lm.train (lesson 09's GPT, reused by lesson 14): a few steps on a small corpus, then the
    same weights in an eager GPT2LMHeadModel give the attention weights, rows summing to one."""
    from transformers import GPT2LMHeadModel

    from course import train_lm
    from course.data.corpus import load_corpus
    from course.oracles.gpt2 import gpt2_config

    corpus = load_corpus(max_chars=20_000)
    cfg = dict(train_lm.PROFILES["smoke"], steps=3)
    model, hist = train_lm.train(corpus, cfg, seed=0, amp=False)
    assert len(hist.losses) == 3 and all(math.isfinite(x) for x in hist.losses)
    again, _ = train_lm.train(corpus, cfg, seed=0, amp=False)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), again.parameters()))     # seeded
    reader = GPT2LMHeadModel(gpt2_config(corpus.vocab_size, cfg["block"], cfg["d_model"], cfg["n_heads"], cfg["n_layers"],
                                         attn_implementation="eager")).eval()
    reader.load_state_dict(model.state_dict())
    x = corpus.batch("val", 2, cfg["block"], torch.Generator().manual_seed(0))[0]
    with torch.no_grad():
        out = reader(input_ids=x, output_attentions=True)
        assert torch.allclose(out.logits, model.eval()(input_ids=x).logits, atol=1e-5)
    assert len(out.attentions) == cfg["n_layers"]
    assert out.attentions[0].shape == (2, cfg["n_heads"], cfg["block"], cfg["block"])
    assert torch.allclose(out.attentions[0].sum(-1), torch.ones(2, cfg["n_heads"], cfg["block"]), atol=1e-5)

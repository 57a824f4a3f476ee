"""Unit tests for lesson 09's bridge to transformers (course/oracles/gpt2.py) and its test helpers (course/checks_09.py).

The bridge is checked by a round trip: a GPT2LMHeadModel's weights, renamed to the lesson's names (the inverse
of the documented mapping), copied back by ``to_gpt2``, give the same logits.
"""

from __future__ import annotations

import pytest
import torch

from course import checks_09
from course.oracles.gpt2 import gpt2_config, gpt2_logits, gpt2_state_dict, to_gpt2

transformers = pytest.importorskip("transformers")

PAIRS = [("ln1", "ln_1", False), ("attn.qkv", "attn.c_attn", True), ("attn.proj", "attn.c_proj", True),
         ("ln2", "ln_2", False), ("mlp.fc", "mlp.c_fc", True), ("mlp.proj", "mlp.c_proj", True)]


class Named(torch.nn.Module):
    """Something with the lesson's state_dict names (a bag of tensors)."""

    def __init__(self, tensors):
        super().__init__()
        self._t = dict(tensors)

    def state_dict(self, *args, **kwargs):
        return dict(self._t)


def lesson_names(hf, n_layers):
    sd = hf.state_dict()
    out = {"tok_emb.weight": sd["transformer.wte.weight"], "pos_emb.weight": sd["transformer.wpe.weight"],
           "head.weight": sd["lm_head.weight"], "ln_f.weight": sd["transformer.ln_f.weight"],
           "ln_f.bias": sd["transformer.ln_f.bias"]}
    for i in range(n_layers):
        for ours, theirs, conv in PAIRS:
            w = sd[f"transformer.h.{i}.{theirs}.weight"]
            out[f"blocks.{i}.{ours}.weight"] = w.t() if conv else w
            out[f"blocks.{i}.{ours}.bias"] = sd[f"transformer.h.{i}.{theirs}.bias"]
    return out


def test_round_trip_gives_the_same_logits():
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(gpt2_config(13, 16, 24, 3, 2)).eval()
    ours = to_gpt2(Named(lesson_names(hf, 2)), n_heads=3)
    idx = torch.randint(0, 13, (2, 11))
    torch.testing.assert_close(gpt2_logits(ours, idx), gpt2_logits(hf, idx), atol=1e-6, rtol=0)
    _, sizes = gpt2_state_dict(lesson_names(hf, 2))
    assert sizes == dict(vocab_size=13, block_size=16, d_model=24, n_layers=2)


def test_missing_names_are_reported():
    with pytest.raises(AssertionError, match="tok_emb"):
        gpt2_state_dict({"pos_emb.weight": torch.zeros(4, 8)})


def test_expected_parameters_matches_gpt2():
    hf = transformers.GPT2LMHeadModel(gpt2_config(11, 16, 16, 2, 3))
    assert checks_09.expected_parameters(11, 16, 16, 3) == sum(p.numel() for p in hf.parameters())


def test_sample_frequencies_and_check():
    def multinomial(logits, generator=None, temperature=1.0):
        return torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator).squeeze(-1)

    logits = torch.tensor([[1.0, 0.0, -1.0], [0.0, 0.0, 0.0]])
    freq = checks_09.sample_frequencies(multinomial, logits, 20_000, seed=0, temperature=2.0)
    checks_09.check_frequencies(freq, torch.softmax(logits / 2.0, -1), "multinomial")
    with pytest.raises(AssertionError, match="never"):
        checks_09.check_frequencies(freq, torch.tensor([[1.0, 0.0, 0.0], [1 / 3] * 3]), "multinomial")

"""Issue 42, found by strangers: what the checks count and say. Each test failed before its fix.

- Buffers are not parameters: tests that count, randomise, fill or probe "every parameter" read
  ``named_parameters()``; a buffer (``position_ids``, a causal mask named ``bias``, a fill value) keeps its value.
- A message fits the exercise it is in: no softmax advice where no softmax is; a raw PyTorch error from the
  learner's code becomes a failure that names the call and the rule; a name missing from ``state_dict()``
  while the module has it as an attribute (a property) says why.
- Test doubles accept what real models accept: the table model takes its padding id as a target token.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course import checks, checks_08, checks_10
from course.tools.references import refs_08


class WithBuffers(nn.Module):
    """A small attention-like module with the buffers a correct learner may register."""

    def __init__(self):
        super().__init__()
        self.w = nn.Linear(4, 4)
        self.register_buffer("bias", torch.ones(4, 4).tril())            # nanoGPT's causal mask is called `bias`
        self.register_buffer("position_ids", torch.arange(4)[None])     # as transformers registers it
        self.register_buffer("fill", torch.tensor(float("-inf")))

    def forward(self, x):                                              # (B, 4, 4)
        scores = self.w(x) @ x.transpose(-2, -1)
        return torch.softmax(scores.masked_fill(self.bias == 0, self.fill), dim=-1) @ x


def test_parameter_names_and_state_leave_buffers_out():
    m = WithBuffers()
    assert checks.parameter_names(m) == ["w.weight", "w.bias"]
    assert list(checks.parameter_state(m)) == ["w.weight", "w.bias"]


def test_set_random_params_leaves_a_buffer_named_bias_alone():
    m = WithBuffers()
    checks.set_random_params(m, torch.Generator().manual_seed(0), "WithBuffers")
    assert torch.equal(m.bias, torch.ones(4, 4).tril())


def test_check_parameters_used_ignores_buffers():
    """A buffer the output does not depend on in a way noise changes (a -inf fill) is not an unused parameter."""
    m = WithBuffers()
    x = torch.randn(2, 4, 4, generator=torch.Generator().manual_seed(1))
    checks.check_parameters_used(m, lambda mod: mod(x), "WithBuffers")


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        shared = torch.ones(3, 3).tril()
        self.layers = nn.ModuleList(nn.Linear(3, 3) for _ in range(2))
        for layer in self.layers:
            layer.register_buffer("mask", shared)                      # one mask shared by every layer: fine


def test_check_independent_layers_accepts_a_shared_buffer():
    checks.check_independent_layers(Stack(), "layers", "Stack")


class Exposed(nn.Module):
    """The contract's layer exposed through a property, kept under another name."""

    def __init__(self):
        super().__init__()
        self.proj = nn.ModuleDict({"q": nn.Linear(2, 2)})

    @property
    def w_q(self):
        return self.proj["q"]


def test_set_params_says_why_a_property_is_not_a_parameter_name():
    with pytest.raises(AssertionError, match="not registered under that name"):
        checks.set_params(Exposed(), {"w_q.weight": torch.zeros(2, 2)}, "your module")


def test_call_names_the_call_and_the_rule_for_a_raw_pytorch_error():
    def dot_score(q, k):
        return q @ k.permute(2, 1, 0)                                  # what k.T does to a 3-D k
    with pytest.raises(AssertionError) as err:
        checks.call(dot_score, torch.randn(3, 5, 4), torch.randn(3, 6, 4), hint="Transpose only the last two dimensions.")
    assert str(err.value).startswith("dot_score raised RuntimeError: ") and str(err.value).endswith(
        "Transpose only the last two dimensions.")


def test_call_lets_other_exceptions_through():
    class GraderError(Exception):                                      # not one of Python's own kinds
        pass

    def stopped():
        raise GraderError("the sandbox stopped")

    def undefined():
        return name_that_does_not_exist  # noqa: F821

    with pytest.raises(GraderError):
        checks.call(stopped)
    with pytest.raises(NameError):
        checks.call(undefined)


def test_check_finite_gives_the_hint_of_its_exercise():
    bad = torch.tensor([0.0, float("nan")])
    with pytest.raises(AssertionError) as err:
        checks.check_finite(bad, "cosine_score", hint="divide by max(norm, eps)")
    assert "exp()" not in str(err.value) and str(err.value).endswith("divide by max(norm, eps)")
    with pytest.raises(AssertionError, match="subtract the maximum"):
        checks.check_finite(bad, "a softmax")                          # the default speaks of a softmax


def test_table_model_takes_its_padding_id_as_a_target_token():
    """A fixed-width beam feeds finished rows of padding to the decoder, as a real model allows."""
    model = checks_08.TableModel.random(15, pad_id=5)                  # V = 5 tokens, padding id 5
    src = torch.tensor([[3, 4, 5]])
    mask = src != model.pad_id
    logp = model.decode(torch.tensor([[1, 3, 5, 5]]), model.encode(src, mask), mask)
    assert logp.shape == (1, 4, 6) and bool(torch.isfinite(logp).all())
    assert float(logp[0, :, 5].exp().max()) < 1e-6                      # padding is never a likely output
    best = refs_08.beam(model, torch.tensor([3, 4]), 3, 6, 0.6)
    assert all(5 not in tokens for tokens, _ in best)


def test_table_model_is_unchanged_when_padding_is_in_its_vocabulary():
    for pad in (0, 4):
        a, b = checks_08.TableModel.random(3, pad_id=pad), checks_08.TableModel.random(3, pad_id=pad)
        assert a.table.shape == (6, 5, 5) and torch.equal(a.table, b.table)


def test_check_hypotheses_explains_too_many_hypotheses():
    with pytest.raises(AssertionError, match="not refilled"):
        checks_08.check_hypotheses([([2], -1.0)] * 5, "beam_search(beam_size=3)", max_len=4, beam_size=3)


def test_bert_parameter_count_ignores_buffers_and_names_what_differs():
    hf = checks_10.hf_bert(20, 8, 2, 16, 1, 10, seed=0)

    class Ours(nn.Module):
        """The lesson's parameter names (built from transformers' weights), a position_ids buffer, and maybe
        an untied MLM output layer."""

        def __init__(self, extra=False):
            super().__init__()
            for name, p in checks_10.bridge.from_hf_state(hf.state_dict()).items():
                owner = self
                *path, leaf = name.split(".")
                for part in path:
                    if not hasattr(owner, part):
                        owner.add_module(part, nn.Module())
                    owner = getattr(owner, part)
                owner.register_parameter(leaf, nn.Parameter(p.clone()))
            self.embeddings.register_buffer("position_ids", torch.arange(10)[None])
            if extra:
                self.decoder = nn.Linear(8, 20, bias=False)             # an untied MLM output layer

    checks_10.check_parameter_count(Ours(), hf)
    with pytest.raises(AssertionError, match="weight tying") as err:
        checks_10.check_parameter_count(Ours(extra=True), hf)
    assert "decoder.weight" in str(err.value) and "position_ids" not in str(err.value)


def test_rows_sum_message_names_a_mask_applied_after_the_softmax():
    """Weights zeroed after the softmax sum to less than 1: the message named only the softmax's axis."""
    scores, mask = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[True, True, False]])
    weights = torch.softmax(scores, dim=-1) * mask
    with pytest.raises(AssertionError, match="zeroing them after the softmax"):
        checks.check_rows_sum_to_one(weights, "weights")

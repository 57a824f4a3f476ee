"""checks.set_params and checks.randomise_weights: the values a test gives a learner's module are the
module's afterwards, tied weights stay tied, and a module that ignores what it is given is caught."""

import pytest
import torch
from torch import nn

from course import checks


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(7, 4)
        self.norm = nn.LayerNorm(4)
        self.generator = nn.Linear(4, 7, bias=False)
        self.generator.weight = self.embed.weight              # one tensor under two names
        self.register_buffer("pe", torch.arange(8.0))

    def forward(self, x):
        return self.generator(self.norm(self.embed(x)))


def test_randomise_weights_chooses_every_weight_keeps_ties_and_buffers():
    m = Tied()
    before = {k: v.clone() for k, v in m.state_dict().items()}
    checks.randomise_weights(m, torch.Generator().manual_seed(0), "Tied")
    after = m.state_dict()
    assert m.generator.weight is m.embed.weight
    assert torch.equal(after["pe"], before["pe"])                               # a buffer keeps its values
    for k in ("embed.weight", "norm.weight", "norm.bias"):
        assert not torch.equal(after[k], before[k]), k
    assert abs(after["norm.weight"].mean().item() - 1.0) < 0.5                   # a norm's gain stays near 1


class IgnoresLoading(nn.Linear):
    def load_state_dict(self, state_dict, strict=True, assign=False):           # keeps its own weights
        return nn.modules.module._IncompatibleKeys([], [])


def test_set_params_refuses_a_module_that_does_not_keep_what_it_is_given():
    m = IgnoresLoading(3, 2)
    with pytest.raises(AssertionError, match="does not hold the values the test gave it"):
        checks.set_params(m, {"weight": torch.ones(2, 3)}, "your layer")


def test_set_params_keeps_what_it_sets():
    m = nn.Linear(3, 2)
    checks.set_params(m, {"weight": torch.ones(2, 3)}, "your layer")
    assert torch.equal(m.weight, torch.ones(2, 3))


def test_randomise_weights_reaches_a_parametrization_and_keeps_the_output_its_own():
    m = nn.Linear(4, 3, bias=False)
    nn.utils.parametrizations.weight_norm(m)
    before = m.weight.detach().clone()
    checks.randomise_weights(m, torch.Generator().manual_seed(1), "weight-normed")
    assert not torch.equal(m.weight.detach(), before)


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.w_q = nn.Linear(4, 4)
        nn.utils.parametrizations.weight_norm(self.w_q)


def test_set_params_sets_a_tensor_under_a_parametrization_by_its_plain_name():
    """``w_q.weight`` of a weight-normed nn.Linear lives as two originals: set by name, it reads back."""
    m = Holder()
    w = torch.randn(4, 4, generator=torch.Generator().manual_seed(3))
    assert "w_q.weight" not in m.state_dict() and checks.has_param(m.state_dict(), "w_q.weight")
    checks.set_params(m, {"w_q.weight": w, "w_q.bias": torch.zeros(4)}, "your module")
    assert torch.allclose(m.w_q.weight, w, atol=1e-6) and torch.equal(m.w_q.bias, torch.zeros(4))
    assert not checks.has_param(m.state_dict(), "w_k.weight")


class ParametrizationIgnoresAssignment(nn.Module):
    def forward(self, w):
        return torch.zeros_like(w)              # whatever it is given, the weight reads as zeros

    def right_inverse(self, w):
        return w


def test_set_params_refuses_a_parametrization_that_does_not_keep_what_it_is_given():
    m = Holder()
    m.w_k = nn.Linear(4, 4)
    nn.utils.parametrize.register_parametrization(m.w_k, "weight", ParametrizationIgnoresAssignment())
    with pytest.raises(AssertionError, match="does not hold the values the test gave it"):
        checks.set_params(m, {"w_k.weight": torch.ones(4, 4)}, "your module")

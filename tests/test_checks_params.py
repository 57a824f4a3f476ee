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

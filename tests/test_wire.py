"""The worker -> judge wire: every tensor a learner's function may return comes back equal."""

import pytest
import torch

from course.tools.wire import decode_data, encode_data


def _round_trip(value):
    return decode_data(encode_data(value, lambda obj: pytest.fail(f"{obj!r} is data, not a handle")),
                       lambda hid, info: pytest.fail("no handle expected"))


@pytest.mark.parametrize("tensor", [
    torch.tensor(2.5),                                  # a scalar loss (0-dim)
    torch.tensor(True),
    torch.tensor(7, dtype=torch.int64),
    torch.zeros(0, 3),
    torch.arange(12.0).reshape(3, 4).t(),               # not contiguous
    torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16),
    torch.tensor([[True, False], [False, True]]),
], ids=["0-dim float", "0-dim bool", "0-dim int", "empty", "transposed", "bf16", "bool"])
def test_tensors_come_back_equal(tensor):
    back = _round_trip(tensor)
    assert back.dtype == tensor.dtype and back.shape == tensor.shape
    assert torch.equal(back, tensor)


def test_containers_of_scalars_come_back():
    back = _round_trip({"loss": torch.tensor(0.25), "steps": (1, 2.0, None)})
    assert torch.equal(back["loss"], torch.tensor(0.25)) and back["steps"] == (1, 2.0, None)

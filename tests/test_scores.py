"""Unit tests for course/scores.py (lesson 03's task generator and attention statistics)."""

import math

import torch

from course.scores import attention_entropy, key_matching_batch, softmax_jacobian_norm


def test_key_matching_batch_shapes_and_types():
    q, keys, labels, mask, target = key_matching_batch(5, 7, 4, 3, generator=torch.Generator().manual_seed(0))
    assert q.shape == (5, 4) and keys.shape == (5, 7, 4)
    assert labels.shape == (5, 7) and labels.dtype == torch.long
    assert mask.shape == (5, 7) and mask.dtype == torch.bool and bool(mask.all())
    assert target.shape == (5,) and target.dtype == torch.long
    assert int(labels.min()) >= 0 and int(labels.max()) < 3


def test_key_matching_batch_is_seeded():
    a = key_matching_batch(4, 6, 3, 5, min_keys=2, generator=torch.Generator().manual_seed(3))
    b = key_matching_batch(4, 6, 3, 5, min_keys=2, generator=torch.Generator().manual_seed(3))
    c = key_matching_batch(4, 6, 3, 5, min_keys=2, generator=torch.Generator().manual_seed(4))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])


def test_key_matching_query_comes_from_a_real_key_with_that_label():
    g = torch.Generator().manual_seed(1)
    q, keys, labels, mask, target = key_matching_batch(64, 10, 32, 4, noise=0.0, min_keys=3, generator=g)
    lengths = mask.sum(1)
    assert int(lengths.min()) >= 3 and int(lengths.max()) <= 10
    # padding comes after the real keys and is zero
    assert torch.equal(mask, torch.arange(10)[None] < lengths[:, None])
    assert float(keys[~mask].abs().sum()) == 0.0
    # without noise, the query equals one real key, and the target is that key's label
    dist = (keys - q[:, None]).norm(dim=-1).masked_fill(~mask, math.inf)      # (B, S)
    index = dist.argmin(1)
    assert float(dist.min(1).values.max()) < 1e-6
    assert torch.equal(labels[torch.arange(64), index], target)


def test_attention_entropy_extremes_and_zeros():
    uniform = torch.full((3, 8), 1 / 8)
    assert torch.allclose(attention_entropy(uniform), torch.full((3,), math.log(8)))
    one_hot = torch.zeros(2, 5)
    one_hot[:, 2] = 1
    assert torch.equal(attention_entropy(one_hot), torch.zeros(2))
    w = torch.tensor([[0.5, 0.5, 0.0, 0.0]])                                  # masked positions: exact zeros
    out = attention_entropy(w)
    assert torch.isfinite(out).all() and abs(float(out) - math.log(2)) < 1e-6
    assert attention_entropy(torch.full((2, 3, 4), 0.25), dim=1).shape == (2, 4)


def test_softmax_jacobian_norm_matches_autograd():
    g = torch.Generator().manual_seed(2)
    s = torch.randn(4, 6, generator=g, dtype=torch.float64)
    expected = torch.stack([torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), row).norm() for row in s])
    assert torch.allclose(softmax_jacobian_norm(s), expected, atol=1e-10)


def test_softmax_jacobian_vanishes_when_saturated():
    flat = softmax_jacobian_norm(torch.zeros(1, 4))
    sharp = softmax_jacobian_norm(torch.tensor([[100.0, 0.0, 0.0, 0.0]]))
    assert float(flat) > 0.4 and float(sharp) < 1e-20
    assert softmax_jacobian_norm(torch.zeros(2, 3, 5)).shape == (2, 3)

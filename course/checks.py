"""Checks that test cells call: each failure speaks to the learner about their own tensor.

Every function raises ``AssertionError`` with a message in the learner's terms ("row 3 of your
weights sums to 0.71; every row should sum to 1") and returns nothing on success. They print
nothing, and never write to stderr: nbgrader scores a test cell that writes to stderr as failed.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

import torch

__all__ = [
    "check",
    "check_type",
    "check_shape",
    "check_finite",
    "check_close",
    "check_rows_sum_to_one",
    "check_zero_where",
    "check_gradients",
    "call",
]


def _fmt_index(idx) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def check(condition: bool, message: str) -> None:
    """Fail with ``message`` unless ``condition`` holds."""
    if not bool(condition):
        raise AssertionError(message)


def call(fn: Callable, *args, what: str | None = None, **kwargs):
    """Call the learner's ``fn``; a missing implementation becomes a readable failure."""
    name = what or getattr(fn, "__name__", "your function")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise AssertionError(f"{name} is not implemented yet: replace `raise NotImplementedError()` with your code.") from None


def check_type(value, kind, what: str) -> None:
    check(isinstance(value, kind), f"{what} should be a {getattr(kind, '__name__', kind)}, but it is a {type(value).__name__}.")


def check_shape(tensor, expected: Iterable[int], what: str) -> None:
    """Check a tensor's shape, naming the tensor and both shapes."""
    check_type(tensor, torch.Tensor, what)
    expected = tuple(int(s) for s in expected)
    got = tuple(tensor.shape)
    check(got == expected, f"{what} has shape {got}; it should have shape {expected}.")


def check_finite(tensor: torch.Tensor, what: str) -> None:
    """No NaN or infinity anywhere; the message names the first bad position."""
    check_type(tensor, torch.Tensor, what)
    bad = ~torch.isfinite(tensor)
    if bad.any():
        idx = bad.nonzero()[0].tolist()
        value = tensor[tuple(idx)].item()
        raise AssertionError(
            f"{what} contains {value} at position {_fmt_index(idx)} ({int(bad.sum())} non-finite "
            "values in all). Large inputs overflow exp(); subtract the maximum first, and make "
            "sure no row is divided by zero."
        )


def check_close(actual, expected, what: str, *, atol: float = 1e-5, rtol: float = 1e-5, hint: str = "") -> None:
    """Compare the learner's tensor with the expected one, element by element.

    The message gives the shape, the worst position, both values there, and an optional hint.
    """
    expected = torch.as_tensor(expected)
    if not isinstance(actual, torch.Tensor):
        try:
            actual = torch.as_tensor(actual)
        except Exception:  # noqa: BLE001 - any unconvertible value is a wrong answer
            raise AssertionError(f"{what} should be a tensor, but it is a {type(actual).__name__}.") from None
    check_shape(actual, expected.shape, what)
    actual = actual.detach().to("cpu", torch.float64)
    expected = expected.detach().to("cpu", torch.float64)
    nan_a, nan_e = torch.isnan(actual), torch.isnan(expected)
    if (nan_a != nan_e).any():
        idx = (nan_a != nan_e).nonzero()[0].tolist()
        raise AssertionError(
            f"{what} is {actual[tuple(idx)].item()} at position {_fmt_index(idx)}, where "
            f"{expected[tuple(idx)].item()} was expected. {hint}".strip()
        )
    a = torch.where(nan_a, torch.zeros_like(actual), actual)
    e = torch.where(nan_e, torch.zeros_like(expected), expected)
    same_inf = torch.isinf(a) & torch.isinf(e) & (a == e)
    a = torch.where(same_inf, torch.zeros_like(a), a)
    e = torch.where(same_inf, torch.zeros_like(e), e)
    err = (a - e).abs() - (atol + rtol * e.abs())
    if (err > 0).any() or torch.isnan(err).any():
        flat = torch.nan_to_num(err, nan=math.inf).flatten()
        pos = int(flat.argmax())
        idx = list(torch.unravel_index(torch.tensor(pos), tuple(a.shape))) if a.dim() else []
        got = actual[tuple(idx)].item() if idx else actual.item()
        want = expected[tuple(idx)].item() if idx else expected.item()
        where = f" at position {_fmt_index(idx)}" if idx else ""
        n_bad = int((err > 0).sum())
        raise AssertionError(
            f"{what} is {got:.6g}{where}, but {want:.6g} was expected "
            f"({n_bad} of {a.numel()} values differ by more than atol={atol:g}, rtol={rtol:g}). {hint}".strip()
        )


def check_rows_sum_to_one(weights: torch.Tensor, what: str, *, dim: int = -1, atol: float = 1e-5, allow_zero_rows: bool = False) -> None:
    """Attention weights are a distribution along ``dim``: non-negative and summing to 1."""
    check_finite(weights, what)
    check(bool((weights >= -atol).all()), f"{what} has a negative entry ({weights.min().item():.4g}); weights come out of a softmax and are never negative.")
    sums = weights.sum(dim=dim)
    ok = (sums - 1).abs() <= atol
    if allow_zero_rows:
        ok = ok | (sums.abs() <= atol)
    if not bool(ok.all()):
        idx = (~ok).nonzero()[0].tolist()
        raise AssertionError(
            f"row {_fmt_index(idx)} of {what} sums to {sums[tuple(idx)].item():.4g}; every row should "
            f"sum to 1 along dim={dim}. Is the softmax taken over the right axis?"
        )


def check_zero_where(weights: torch.Tensor, forbidden: torch.Tensor, what: str, *, atol: float = 1e-7, why: str = "") -> None:
    """Weights must be (numerically) zero wherever ``forbidden`` is True (padding, the future)."""
    check_finite(weights, what)
    forbidden = forbidden.expand_as(weights).to(weights.device)
    leaked = weights.abs() * forbidden
    if bool((leaked > atol).any()):
        idx = (leaked > atol).nonzero()[0].tolist()
        total = leaked.sum(dim=-1)
        raise AssertionError(
            f"{what} puts weight {weights[tuple(idx)].item():.4g} at position {_fmt_index(idx)}, which "
            f"should get none{(' (' + why + ')') if why else ''}; the largest total leak in one row is "
            f"{total.max().item():.4g}, it should be 0."
        )


def check_gradients(module: torch.nn.Module, loss: torch.Tensor, what: str) -> None:
    """After ``loss.backward()``, every parameter of ``module`` gets a finite, non-None gradient."""
    check(isinstance(loss, torch.Tensor) and loss.requires_grad,
          f"the output of {what} is not connected to its parameters (no gradient can flow back): "
          "was it computed under torch.no_grad(), detached, or rebuilt from plain numbers?")
    loss.backward()
    for name, p in module.named_parameters():
        check(p.grad is not None, f"parameter {name!r} of {what} received no gradient: is it used in forward?")
        check_finite(p.grad, f"the gradient of {what}.{name}")

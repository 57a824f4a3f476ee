"""Checks that test cells call: each failure speaks to the learner about their own tensor.

Every function raises ``AssertionError`` with a message in the learner's terms ("row 3 of your
weights sums to 0.71; every row should sum to 1") and returns nothing on success. They print
nothing, and never write to stderr: nbgrader scores a test cell that writes to stderr as failed.
"""

from __future__ import annotations

import ast
import contextlib
import contextvars
import dataclasses
import typing
import inspect
import math
import re
import sys
from typing import Callable, Iterable

import torch

__all__ = [
    "check",
    "check_type",
    "check_shape",
    "check_finite",
    "SOFTMAX_OVERFLOW",
    "NO_ALLOWED_KEY",
    "check_close",
    "explain",
    "check_rows_sum_to_one",
    "check_zero_where",
    "check_gradients",
    "call",
    "forbid",
    "set_params",
    "set_random_params",
    "parameter_names",
    "unregistered_hint",
    "parameter_state",
    "check_parameters_used",
    "check_independent_layers",
    "uniform_attention_values",
    "attention_parameters",
    "constant_hidden_values",
    "zero_values",
    "check_dropout_inside",
    "GradingHooks",
    "graded_by",
]


def _fmt_index(idx) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def check(condition: bool, message: str) -> None:
    """Fail with ``message`` unless ``condition`` holds."""
    if not bool(condition):
        raise AssertionError(message)


def call(fn: Callable, *args, what: str | None = None, hint: str = "", **kwargs):
    """Call the learner's ``fn``; a missing implementation, or an error its code raises, becomes a readable failure.

    An error of Python's own kinds (PyTorch's shape errors are ``RuntimeError``s) is reported as a failure
    that names the call, the error, and ``hint``: the rule of the exercise that such an error usually means
    was broken ("transpose only the last two dimensions of k"). Other exceptions (the grader's own, such as a
    time limit) pass through unchanged, and so does a ``NameError`` (the grader says which cell to run).
    """
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        name = what or getattr(fn, "__name__", "your function")     # only now: under grading, a read is a round trip
        raise AssertionError(f"{name} is not implemented yet: replace the `raise NotImplementedError(...)` line with your code.") from None
    except (AssertionError, NameError):
        raise
    except Exception as exc:  # noqa: BLE001 - only Python's own error kinds are the learner's to read
        if type(exc).__module__ != "builtins":
            raise
        name = what or getattr(fn, "__name__", "your function")
        text = str(exc).strip()
        failure = AssertionError(f"{name} raised {type(exc).__name__}{': ' + text if text else ''}"
                                 f"{'' if text.endswith('.') or not text else '.'}{' ' + hint if hint else ''}")
        failure.course_context = True      # the grader adds what the test cell checks (course/grading/judge/explain.py)
        raise failure from None


def check_type(value, kind, what: str) -> None:
    check(isinstance(value, kind), f"{what} should be a {getattr(kind, '__name__', kind)}, but it is a {type(value).__name__}.")


def check_shape(tensor, expected: Iterable[int], what: str) -> None:
    """Check a tensor's shape, naming the tensor and both shapes."""
    check_type(tensor, torch.Tensor, what)
    expected = tuple(int(s) for s in expected)
    got = tuple(tensor.shape)
    check(got == expected, f"{what} has shape {got}; it should have shape {expected}.")


SOFTMAX_OVERFLOW = ("Large inputs overflow exp(); subtract the maximum first, and make sure no row is divided by "
                    "zero.")
NO_ALLOWED_KEY = ("A row with no allowed position is all -inf before the softmax, and its softmax is 0/0 = nan (with "
                  "the dtype's minimum instead of -inf it is uniform): give such a row zero weights after the softmax "
                  "(for example weights * mask, or masked_fill where the mask is False).")


def check_finite(tensor: torch.Tensor, what: str, *, hint: str = SOFTMAX_OVERFLOW) -> None:
    """No NaN or infinity anywhere; the message names the first bad position and gives ``hint``.

    The default hint is about a softmax (exp() overflowing); pass the likely cause where it is another one
    (a division by a zero norm, a row with no allowed key: :data:`NO_ALLOWED_KEY`)."""
    check_type(tensor, torch.Tensor, what)
    bad = ~torch.isfinite(tensor)
    if bad.any():
        idx = bad.nonzero()[0].tolist()
        value = tensor[tuple(idx)].item()
        raise AssertionError(
            f"{what} contains {value} at position {_fmt_index(idx)} ({int(bad.sum())} non-finite "
            f"values in all). {hint}".strip()
        )


class explain:
    """A hint that looks before it speaks, for :func:`check_close`: called only when the check has failed, it runs
    each control in turn (a function of no arguments that returns a sentence when what it checks is wrong, None when
    it holds) and gives the first sentence found, or ``hint`` when every control holds. One slip can fail several
    cells; a control lets a cell say that a more basic rule, checked by another cell, is already broken on its
    inputs, instead of naming its own rule as the cause. A control that raises is skipped."""

    def __init__(self, hint: str, *controls):
        self.hint, self.controls = hint, controls

    def __call__(self) -> str:
        for control in self.controls:
            try:
                said = control()
            except Exception:  # noqa: BLE001 - a control that fails says nothing; the cell's own hint stands
                continue
            if said:
                return str(said)
        return self.hint


def check_close(actual, expected, what: str, *, atol: float = 1e-5, rtol: float = 1e-5, hint="") -> None:
    """Compare the learner's tensor with the expected one, element by element.

    The message gives the shape, the worst position, both values there, and an optional hint: a string, or an
    :class:`explain`, which is asked only when the comparison fails.
    """
    if isinstance(hint, explain):
        try:
            return check_close(actual, expected, what, atol=atol, rtol=rtol)
        except AssertionError:
            return check_close(actual, expected, what, atol=atol, rtol=rtol, hint=hint())
    try:
        expected = torch.as_tensor(expected)
    except Exception:  # noqa: BLE001 - a test may compare two answers of the learner's: either can be wrong
        raise AssertionError(f"{what} cannot be compared: the value it is compared with (also your code's) is a "
                             f"{type(expected).__name__}, not a tensor.") from None
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


ROWS_SUM_HINT = ("Is the softmax taken over the right axis, and are masked positions removed before it (zeroing them "
                 "after the softmax leaves the other weights summing to less than 1)?")


def check_rows_sum_to_one(weights: torch.Tensor, what: str, *, dim: int = -1, atol: float = 1e-5, allow_zero_rows: bool = False,
                          hint: str = ROWS_SUM_HINT) -> None:
    """Attention weights are a distribution along ``dim``: non-negative and summing to 1. ``hint`` follows the
    message (by default the two usual causes: the softmax's axis, a mask applied after the softmax)."""
    check_finite(weights, what)
    check(bool((weights >= -atol).all()),
          f"{what} has a negative entry ({weights.min().item():.4g}); weights come out of a softmax and are never negative.")
    sums = weights.sum(dim=dim)
    ok = (sums - 1).abs() <= atol
    if allow_zero_rows:
        ok = ok | (sums.abs() <= atol)
    if not bool(ok.all()):
        idx = (~ok).nonzero()[0].tolist()
        raise AssertionError(
            f"row {_fmt_index(idx)} of {what} sums to {sums[tuple(idx)].item():.4g}; every row should "
            f"sum to 1 along dim={dim}. {hint}".strip()
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
        check_finite(p.grad, f"the gradient of {what}.{name}", hint="Is there a nan or an infinity in the output?")


# -- rules that hold under grading too --------------------------------------------------------------
#
# When `course grade` grades a notebook, test cells run in a trusted judge process and the learner's
# names (functions, classes, the objects they return) are stand-ins that call into a sandbox. What
# comes back is always a copy: tensors by value, never an autograd graph. These helpers are written
# so the same test cell works in the learner's kernel and under the judge.

@dataclasses.dataclass(frozen=True)
class GradingHooks:
    """What the grading judge plugs into these checks while it runs a submission's test cells (and only
    then, through :func:`graded_by`): ``forbid(names, why, limit)`` returns a context manager that blocks
    the forbidden calls inside the sandbox, where the learner's code runs; ``tampering`` lists what in
    the notebook reaches around that check (each test that uses :func:`forbid` then fails)."""

    forbid: typing.Callable
    tampering: tuple[str, ...] = ()


_GRADING: contextvars.ContextVar[GradingHooks | None] = contextvars.ContextVar("course_grading_hooks", default=None)


@contextlib.contextmanager
def graded_by(hooks: GradingHooks):
    """Inside this block, :func:`forbid` uses the grading judge's ``hooks`` (see :class:`GradingHooks`)."""
    token = _GRADING.set(hooks)
    try:
        yield
    finally:
        _GRADING.reset(token)


_SEEING_IN_PLACE = [0]   # how many `seeing_in_place_changes` blocks are open (read by the grading judge)


@contextlib.contextmanager
def seeing_in_place_changes():
    """Inside this block, a change the learner's code makes to the tensors a test passes it reaches the
    test's own tensors, so that a test can check "does not modify its inputs".

    In the learner's kernel the tensors are shared anyway and this changes nothing. Under grading the
    learner's code works on copies in a sandbox, and by default what it does to them is thrown away:
    a test's reference, computed after the call from the test's own tensors, cannot be bent by a
    function that edits its arguments. Only a test that checks the inputs opens this block.
    """
    _SEEING_IN_PLACE[0] += 1
    try:
        yield
    finally:
        _SEEING_IN_PLACE[0] -= 1


def in_place_changes_seen() -> bool:
    """Whether a :func:`seeing_in_place_changes` block is open (the judge copies changes back only then)."""
    return _SEEING_IN_PLACE[0] > 0


def _forbidden_in_source(source: str, names: tuple[str, ...]) -> list[str]:
    """Uses of ``.name`` (attribute access) or ``from x import name`` in ``source``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f".{node.attr} (line {node.lineno})")
        elif isinstance(node, ast.ImportFrom) and any(a.name in names for a in node.names):
            found.append(f"from {node.module} import ... (line {node.lineno})")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
            found.append(f"the string {node.value!r} (line {node.lineno})")
    return found


def source_of(fn) -> str:
    src = getattr(fn, "__course_source__", None)      # set by the grading judge on the learner's names
    if src is not None:
        return src
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def forbidden_targets(names: tuple[str, ...]):
    """Every (owner, attribute) in torch's public namespaces whose attribute is one of ``names``."""
    import torch.nn.functional as F

    owners = [torch, torch.Tensor, F, torch.special, torch.linalg, torch.nn]
    out = []
    for owner in owners:
        for name in names:
            for attr in (name, "_" + name):
                if attr in getattr(owner, "__dict__", {}) or hasattr(owner, attr):
                    out.append((owner, attr))
    return out


@contextlib.contextmanager
def forbid(fn, *names: str, why: str, limit: int | None = None, work: int | None = None):
    """Fail if the learner's ``fn`` uses a library shortcut the exercise forbids.

    Three checks: the source of ``fn`` may not mention ``.name`` for any forbidden name (read with
    ``ast``, so comments do not count); while the block runs, every ``torch`` function, tensor method
    or ``torch.nn.functional`` function of that name raises; and below the names, every call of those
    functions and of the PyTorch kernels behind them (``aten::_softmax``, the fused attention kernels)
    fails, whatever name reached them (an alias, ``torch.ops.aten``, ``getattr``; see
    :mod:`course.forbidden`). With ``limit``, any tensor with more than ``limit`` elements produced while
    the block runs fails too (measured at the dispatcher: no tensor subclass hides it). With
    :data:`course.forbidden.TRITON` among the names and ``work``, the block must launch a Triton kernel and
    PyTorch may compute at most ``work`` values outside Triton's launches. Under grading, a
    notebook that reaches around these checks (``torch._C``, ``torch.ops``, PyTorch's mode stack, the
    grader's modules, ``exec``) fails every test that uses them. Use it around the calls::

        with checks.forbid(softmax, "softmax", "log_softmax", why="write the softmax yourself"):
            out = checks.call(softmax, x)
    """
    from course import forbidden

    hooks = _GRADING.get()
    if hooks is not None and hooks.tampering:
        raise AssertionError(f"your notebook reaches around the check of forbidden calls ({'; '.join(hooks.tampering[:3])}): "
                             f"this exercise asks you to {why}, and tests that check it fail for a notebook that does this.")
    found = _forbidden_in_source(source_of(fn), names)
    if found:
        raise AssertionError(f"{getattr(fn, '__name__', 'your code')} uses {', '.join(found[:3])}: this exercise asks "
                             f"you to {why}, without calling {' or '.join(names)}.")
    if hooks is not None:                            # under grading: block them inside the sandbox
        with hooks.forbid(names, why, limit, work):
            yield
        return
    label = getattr(fn, "__name__", "your code")     # read only here: under grading, a read is a round trip
    called: list[str] = []
    saved = []

    def blocker(qual):
        def blocked(*args, **kwargs):
            called.append(f"{label} called {qual}: this exercise asks you to {why}.")
            raise AssertionError(f"{qual} was called: this exercise asks you to {why}.")
        return blocked

    for owner, attr in forbidden_targets(names):
        try:
            saved.append((owner, attr, owner.__dict__[attr] if attr in owner.__dict__ else getattr(owner, attr)))
            setattr(owner, attr, blocker(f"{getattr(owner, '__name__', 'torch')}.{attr}"))
        except (AttributeError, TypeError):
            continue
    guard = forbidden.Guard(names, why, limit, work)
    # the learner's own softmax, or a size limit: the data must also stay in PyTorch (as under grading)
    hook = forbidden.hook_for(guard)
    error = None
    try:
        with guard:
            previous = sys.getprofile()
            if hook is not None:
                sys.setprofile(hook)
            try:
                yield
            finally:
                if hook is not None:
                    sys.setprofile(previous)
    except Exception as exc:  # noqa: BLE001 - a recorded violation is the verdict, whatever the code did next
        error = exc
    finally:
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)
    problems = called + guard.violations
    if problems:
        raise AssertionError(problems[0])
    if error is not None:
        raise error


def set_params(module, values: dict, what: str = "your module") -> None:
    """Give the learner's ``module`` these parameter values (names as in ``state_dict()``).

    Works the same on a module in the kernel and on the judge's stand-in for one: values travel as
    a (partial) ``load_state_dict``, never as in-place edits of a returned copy.
    """
    state = call(module.state_dict, what=f"{what}.state_dict")
    # A tensor under a parametrization (``weight_norm`` on an nn.Linear) is kept as its originals
    # (``w_q.parametrizations.weight.original0`` ...); it is set by assigning the tensor, which PyTorch
    # turns into originals (``right_inverse``), and it must read back as what was given.
    derived = {k: values[k] for k in values if k not in state and _parametrized(state, k)}
    values = {k: v for k, v in values.items() if k not in derived}
    for k, v in derived.items():
        path, leaf = k.rsplit(".", 1)
        owner = module
        for part in path.split("."):
            owner = getattr(owner, part)
        v = torch.as_tensor(v)
        setattr(owner, leaf, v.clone())
        got = getattr(owner, leaf)
        check(isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(v.shape)
              and torch.allclose(got.detach().cpu().to(v.dtype), v, atol=1e-5, rtol=1e-4),
              f"{what}.{k} (under a parametrization) does not hold the values the test gave it.")
    missing = [k for k in values if k not in state]
    if missing:
        check(False, f"{what} has no parameter called {missing[0]!r}; its state_dict holds: {', '.join(state) or 'nothing'}. "
                     + unregistered_hint(module, missing[0]))
    if not values:
        return
    for k, v in values.items():
        check(tuple(state[k].shape) == tuple(torch.as_tensor(v).shape),
              f"{what}.{k} has shape {tuple(state[k].shape)}; it should have shape {tuple(torch.as_tensor(v).shape)}.")
    # clones: the test keeps its own values, whatever the learner's load_state_dict does to what it receives
    sent = {k: torch.as_tensor(v, dtype=state[k].dtype) for k, v in values.items()}
    module.load_state_dict({k: v.clone() for k, v in sent.items()}, strict=False)
    # The values must be the module's now: a test that builds its reference from them would otherwise
    # compare the learner's module with itself. (Two names of one tensor, e.g. tied weights, keep the last.)
    after = call(module.state_dict, what=f"{what}.state_dict")
    for k, v in sent.items():
        got = after.get(k) if isinstance(after, dict) else None
        held = isinstance(got, torch.Tensor) and tuple(got.shape) == tuple(v.shape)
        got = got.detach().to("cpu", v.dtype) if held else None
        # Two names of one tensor (tied weights) hold the value sent last to either of them.
        check(held and any(tuple(w.shape) == tuple(v.shape) and torch.equal(got, w.cpu()) for w in sent.values()),
              f"{what}.{k} does not hold the values the test gave it through load_state_dict: leave "
              "load_state_dict and state_dict as nn.Module defines them, and keep every parameter in the module "
              "(not a copy made in __init__).")


def _parametrized(state, name: str) -> bool:
    """Is ``name`` (``w_q.weight``) a tensor that a parametrization computes from originals in ``state``?"""
    if "." not in name:
        return False
    path, leaf = name.rsplit(".", 1)
    return any(k.startswith(f"{path}.parametrizations.{leaf}.original") for k in state)


def unregistered_hint(module, name: str) -> str:
    """Why ``name`` (``w_q.weight``) may be missing from ``module.state_dict()`` while the module has it as an
    attribute: a property, or another name for a layer registered elsewhere. The tests read and set parameters
    by their ``state_dict`` names, so the docstring's names must be registered submodules and parameters."""
    path = name.split(".")
    owner = module
    try:
        for part in path[:-1] or path:
            owner = getattr(owner, part)
    except Exception:  # noqa: BLE001 - no such attribute: nothing more to say
        return ""
    shown = ".".join(path[:-1] or path)
    return (f"It has an attribute `{shown}`, but the parameters are not registered under that name (a property, or "
            f"another name for a layer kept elsewhere?): the names in the docstring are those of registered "
            f"submodules and parameters, the names state_dict() shows. Assign the layer in __init__ "
            f"(self.{shown} = nn.Linear(...)) and use it under that name.")


def parameter_names(module, what: str = "your module") -> list[str]:
    """The ``state_dict()`` names of ``module``'s parameters (``named_parameters``; a tied tensor under every
    name it has, the originals of a parametrization included), buffers left out.

    Tests that count, randomise or probe "every parameter" use these names: a buffer (``position_ids``, a
    causal mask, a constant) is not a parameter the contract names, and a correct module may register any.
    """
    params = call(module.named_parameters, remove_duplicate=False, what=f"{what}.named_parameters")
    try:
        params = params if isinstance(params, list) else list(params)     # a generator in the notebook
    except TypeError:
        params = []
    return [item[0] for item in params
            if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)]


def parameter_state(module, what: str = "your module") -> dict:
    """``module.state_dict()`` restricted to its parameters (see :func:`parameter_names`): no buffers."""
    state = call(module.state_dict, what=f"{what}.state_dict")
    names = set(parameter_names(module, what))
    return {k: v for k, v in state.items() if k in names}


def has_param(state, name: str) -> bool:
    """``name`` (``w_q.weight``) is in the state dict ``state``, as itself or as a parametrization's originals."""
    return name in state or _parametrized(state, name)


def randomise_weights(module, generator: torch.Generator, what: str = "your module") -> None:
    """Give every floating-point parameter of ``module`` (``named_parameters()``: a tied tensor once, the
    originals of a parametrization included) new random values drawn from ``generator``, through
    :func:`set_params`: a matrix N(0, 1/fan_in); a norm's gain (a ``weight`` under a name holding ``norm``)
    1 + 0.3 N(0, 1); any other vector 0.3 N(0, 1). Buffers (a position table) keep theirs.

    A test that compares the learner's module with PyTorch's layer holding a copy of its weights must
    choose those weights itself: a module whose output ignores its weights (zero output projections,
    returning zeros) agrees with an oracle built from the zeros it was initialised with.
    """
    params = call(module.named_parameters, what=f"{what}.named_parameters")
    try:
        params = params if isinstance(params, list) else list(params)     # a generator in the notebook
    except TypeError:
        params = []
    values = {}
    for item in params:
        name, p = item if isinstance(item, (tuple, list)) and len(item) == 2 else (None, None)
        if not (isinstance(name, str) and isinstance(p, torch.Tensor) and p.is_floating_point() and p.numel()):
            continue
        shape = tuple(p.shape)
        z = torch.randn(shape, generator=generator)
        if len(shape) >= 2:
            values[name] = z / math.sqrt(max(1, math.prod(shape[1:])))
        elif name.endswith("weight") and "norm" in name.rsplit(".", 1)[0].lower():
            values[name] = 1.0 + 0.3 * z
        else:
            values[name] = 0.3 * z
    check(values, f"{what} has no floating-point parameter (named_parameters() is empty).")
    set_params(module, values, what)


def set_random_params(module, generator: torch.Generator, what: str = "your module", *,
                      endswith: Iterable[str] = ("bias",), scale: float = 0.5) -> None:
    """Give every floating-point parameter of ``module`` (buffers left alone) whose name ends with one of ``endswith``
    random values (``scale * N(0, 1)``, drawn from ``generator``), through :func:`set_params`.

    Fresh biases are often zero (``nn.MultiheadAttention``, ``nn.LayerNorm``): a probe run on them cannot
    tell ``f(0)`` from ``0``, so dropout in the wrong place, or a missing bias, goes unseen.
    """
    state = parameter_state(module, what)              # a buffer named `bias` (a causal mask) is not a bias
    ends = tuple(endswith)
    values = {k: scale * torch.randn(v.shape, generator=generator) for k, v in state.items()
              if v.is_floating_point() and k.endswith(ends)}
    check(values, f"{what} has no parameter whose name ends with {' or '.join(ends)}.")
    set_params(module, values, what)


def check_distinct_layers(module, names: Iterable[str], what: str) -> None:
    """The layers ``names`` of ``module`` (each with a ``weight``) are distinct: each, given values of its own,
    reads them back.

    One layer under two names (``self.w_k = self.w_q``) agrees with every oracle that copies the learner's
    weights (the copies are alike), so it is probed directly: the weights are set to different matrices at
    once (through :func:`set_params`; two names of one tensor keep the last value sent), then each is read
    back through its attribute (``module.w_q.weight``).
    """
    names = tuple(names)
    g = torch.Generator().manual_seed(42)
    values = {name: torch.randn(tuple(getattr(module, name).weight.shape), generator=g) for name in names}
    set_params(module, {f"{name}.weight": v for name, v in values.items()}, what)
    for name in names:
        got = getattr(module, name).weight.detach().to("cpu", torch.float32)
        if got.shape == values[name].shape and torch.allclose(got, values[name], atol=1e-5, rtol=1e-4):
            continue
        same = [other for other in names if other != name and got.shape == values[other].shape
                and torch.allclose(got, values[other], atol=1e-5, rtol=1e-4)]
        check(not same, f"{name} and {same[0] if same else ''} of {what} are one and the same layer: setting "
                        f"{same[0] if same else ''}.weight changed {name}.weight too. {', '.join(names)} should be "
                        f"{len(names)} distinct layers (a new nn.Linear for each), not one layer under two names.")
        check(False, f"{what}.{name}.weight does not hold the values the test gave it.")


def check_independent_layers(module, stack: str, what: str, *, seed: int = 0) -> None:
    """Each layer of the stack ``module.<stack>`` (an ``nn.ModuleList`` or ``nn.Sequential``) holds
    parameters of its own.

    ``[layer] * n`` puts ONE layer in n places: every comparison with an oracle that copies the weights
    layer by layer still agrees, since the copies are all alike. The probe: give layer 0's floating-point
    parameters (not its buffers) new values (through :func:`set_params`); no other layer may change with them. The module's
    own values are put back afterwards.
    """
    state = call(module.state_dict, what=f"{what}.state_dict")
    params = set(parameter_names(module, what))          # a buffer the layers share (a mask, a table) is fine
    pattern = re.compile(rf"^{re.escape(stack)}\.(\d+)\.(.+)$")
    layers: dict[int, dict[str, str]] = {}
    for key, value in state.items():
        found = pattern.match(key)
        if found and key in params and value.is_floating_point():
            layers.setdefault(int(found.group(1)), {})[found.group(2)] = key
    check(len(layers) >= 2, f"{what}.{stack} should hold several layers with parameters; its state_dict has "
                            f"{len(layers)}.")
    first = min(layers)
    g = torch.Generator().manual_seed(seed)
    values = {key: 3.0 + torch.randn(state[key].shape, generator=g) for key in layers[first].values()}
    try:
        set_params(module, values, what)
        after = call(module.state_dict, what=f"{what}.state_dict")
        for index in sorted(layers):
            if index == first:
                continue
            moved = [rest for rest, key in layers[index].items()
                     if rest in layers[first] and torch.equal(after[key], values[layers[first][rest]])]
            check(not moved, f"{what}.{stack}.{index}.{moved[0] if moved else ''} changed when only {stack}.{first}'s "
                             f"parameters were set: your layers share one set of parameters. Build each layer "
                             f"separately (nn.ModuleList(Layer(...) for _ in range(n_layers))); [layer] * n_layers is "
                             f"ONE layer used n_layers times.")
    finally:
        set_params(module, {key: state[key] for key in values}, what)


def check_parameters_used(module, run: Callable, what: str, *, names: Iterable[str] | None = None,
                          scale: float = 0.5) -> None:
    """Every parameter of ``module`` (buffers left out; or those in ``names``) changes the output of ``run(module)``.

    Pass ``names``: the parameters the exercise's contract names. A learner may add a harmless parameter
    (a bias that a softmax cancels, an extra scale); the contract, not their design, says what must be used.

    The behavioural form of "every parameter gets a gradient": each parameter in turn is nudged by
    random noise and the output must move. It needs no autograd, so it holds under grading too.
    """
    state = {k: v.clone() for k, v in call(module.state_dict, what=f"{what}.state_dict").items()}
    wanted = set(parameter_names(module, what)) if names is None else set(names)    # buffers are not parameters
    floats = [k for k, v in state.items() if v.is_floating_point() and k in wanted]
    check(floats, f"{what} has no parameters: its layers should be learned (nn.Linear, nn.Parameter).")
    base = torch.as_tensor(run(module)).detach().double()
    g = torch.Generator().manual_seed(1234)
    try:
        for k in floats:
            nudged = state[k] + scale * torch.randn(state[k].shape, generator=g, dtype=state[k].dtype)
            module.load_state_dict({k: nudged}, strict=False)
            moved = torch.as_tensor(run(module)).detach().double()
            module.load_state_dict({k: state[k]}, strict=False)
            # a margin above float32 rounding: a parameter the output ignores (a bias a softmax cancels)
            # still moves it by ~1e-7, and must not count as used
            check(moved.shape == base.shape and not torch.allclose(moved, base, atol=1e-5, rtol=1e-5),
                  f"changing {what}.{k} does not change the output: is it used in forward?")
    finally:
        module.load_state_dict(state, strict=False)


# --- Probes that make each dropout site observable ------------------------------------------------------------
#
# A dropout on a sublayer's OUTPUT zeroes entries and scales the others by one constant 1 / (1 - p). A dropout
# INSIDE the sublayer (on the attention weights, on the feed-forward's hidden units) changes the sublayer's
# output by a different factor at every position. The probes below set a learner's weights (through
# set_params) so that, without the inner dropout, the sublayer adds the SAME vector at every position: then
# every non-zero entry of (output - input) in a feature column has one value, whatever the output dropout
# did, and an inner dropout shows as values that differ down the column. Nothing depends on how the dropout
# is written (nn.Dropout, F.dropout, nn.MultiheadAttention's or scaled_dot_product_attention's dropout_p) nor
# on the order in which the random masks are drawn.

def uniform_attention_values(state: dict, in_weight: str, in_bias: str, out_weight: str, out_bias: str,
                             generator: torch.Generator, *, q_k_v: tuple | None = None) -> dict:
    """Parameter values that make an attention sublayer add one fixed vector at every position (without
    dropout on its weights): q = k = 0 (every score 0, uniform weights, rows summing to 1), v = the same
    random vector for every token, a random output projection without bias.

    ``in_weight``/``in_bias`` name a fused (3D, D) projection ``[q | k | v]``; with ``q_k_v`` = three
    (weight, bias) name pairs (separate projections) they are ignored.
    """
    D = state[out_weight].shape[0]
    values = {out_weight: torch.randn(D, D, generator=generator) / math.sqrt(D), out_bias: torch.zeros(D)}
    v_bias = 1.0 + torch.randn(D, generator=generator)
    if q_k_v is None:
        values[in_weight] = torch.zeros(state[in_weight].shape)
        values[in_bias] = torch.cat([torch.zeros(2 * D), v_bias])
    else:
        for (w, b), bias in zip(q_k_v, (torch.zeros(D), torch.zeros(D), v_bias)):
            values[w], values[b] = torch.zeros(state[w].shape), bias
    return values


def attention_parameters(state: dict, prefix: str, what: str) -> tuple:
    """The names of an attention sublayer's parameters under ``prefix`` in the learner's ``state``:
    ``(in_weight, in_bias, out_weight, out_bias, q_k_v)`` for ``nn.MultiheadAttention`` (a fused
    ``in_proj``, ``q_k_v`` None) or for lesson 06's layout (``w_q``, ``w_k``, ``w_v``, ``w_o``: ``q_k_v`` the
    three (weight, bias) pairs)."""
    if f"{prefix}.in_proj_weight" in state and f"{prefix}.in_proj_bias" in state:
        return (f"{prefix}.in_proj_weight", f"{prefix}.in_proj_bias", f"{prefix}.out_proj.weight",
                f"{prefix}.out_proj.bias", None)
    separate = [(f"{prefix}.{w}.weight", f"{prefix}.{w}.bias") for w in ("w_q", "w_k", "w_v")]
    if all(n in state for pair in separate + [(f"{prefix}.w_o.weight", f"{prefix}.w_o.bias")] for n in pair):
        return (None, None, f"{prefix}.w_o.weight", f"{prefix}.w_o.bias", tuple(separate))
    check(False, f"{what} has no attention parameters under {prefix!r}: build it as nn.MultiheadAttention(...) "
                 "(in_proj_weight, out_proj) as the docstring says, or with w_q, w_k, w_v, w_o (all with biases).")


def constant_hidden_values(state: dict, w1: str, b1: str, w2: str, b2: str, generator: torch.Generator) -> dict:
    """Parameter values that make a feed-forward network ``w2 @ act(w1 @ x + b1) + b2`` add one fixed vector
    at every position (without dropout on its hidden units): w1 = 0, b1 positive (ReLU and GELU keep it),
    w2 random, b2 = 0."""
    d_hidden = state[b1].shape[0]
    D = state[b2].shape[0]
    return {w1: torch.zeros(state[w1].shape), b1: 0.5 + torch.rand(d_hidden, generator=generator),
            w2: torch.randn(D, d_hidden, generator=generator) / math.sqrt(d_hidden), b2: torch.zeros(D)}


def zero_values(state: dict, *names: str) -> dict:
    """Zeros for each named parameter (an output projection set to zero silences its sublayer)."""
    return {n: torch.zeros(state[n].shape) for n in names}


def check_dropout_inside(delta: torch.Tensor, what: str, site: str, *, hint: str = "") -> None:
    """``delta`` (..., D) is what a sublayer probed with the values above added in training mode. Without a
    dropout at ``site`` every non-zero entry of a feature column has the same value; with it, they differ."""
    delta = delta.detach().reshape(-1, delta.shape[-1]).double()
    live = delta.abs() > 1e-6
    check(bool(live.any()), f"{what}: the sublayer added nothing at any position in training mode; with dropout "
                            f"strictly between 0 and 1 most of its output should survive.")
    big, small = delta.masked_fill(~live, -math.inf).amax(0), delta.masked_fill(~live, math.inf).amin(0)
    seen = live.any(0)
    spread = ((big - small)[seen] / delta.abs().amax(0)[seen]).max().item()
    check(spread > 0.05, f"{what}: with weights that make the sublayer add the same vector at every position, every "
                         f"surviving entry of a feature column has the same value in training mode (largest spread "
                         f"{spread:.1e}), so nothing varies {site}: the dropout {site} is missing (or inactive). "
                         + (hint or "Apply it there in training mode, as the docstring says."))

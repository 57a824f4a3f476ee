"""Test helpers for lesson 16 (FlashAttention in Triton), shared by its test cells.

Nothing here computes a graded answer. The oracles are PyTorch's: ``F.scaled_dot_product_attention``
in float64 (its gradients by autograd) and ``torch.logsumexp`` of the explicit scores, each grouped-query
head reading its key/value head through ``repeat_interleave``.

Every call into the learner's functions goes through :func:`checks.forbid` with :data:`SHORTCUTS` and
:data:`course.forbidden.TRITON`: PyTorch's fused attention, softmax and matrix products are refused
(the kernels compute with ``tl.dot``), the data may leave PyTorch only where Triton's interpreter moves
it, and with ``limit`` no PyTorch tensor and no block of a kernel may be as large as the matrix of
scores. The work must be the kernels': each call launches at least one, and PyTorch may compute at most
:data:`WORK_PER_INPUT` values per value of the call's tensor inputs around the launches. NumPy's
floating-point warnings are silenced around the call (Triton's interpreter computes in
NumPy; ``exp`` of a huge masked score warns "overflow" on stderr, and a correct kernel must never lose
a point to that).
"""

from __future__ import annotations

import contextlib
import math
import warnings

import torch
import torch.nn.functional as F

from course import checks
from course.forbidden import TRITON

__all__ = ["SHORTCUTS", "WHY", "random_qkv", "reference", "reference_grads", "forward", "backward",
           "attention", "gradients", "poison_rows", "not_implemented", "inputs_have", "forward_differs_too",
           "autograd_control"]

SHORTCUTS = ("scaled_dot_product_attention", "multi_head_attention_forward", "softmax", "log_softmax",
             "matmul", "einsum")
WHY = ("compute attention in your Triton kernels (score tiles with tl.dot, an online softmax), not with "
       "PyTorch's fused attention, softmax or matrix products")


@contextlib.contextmanager
def _quiet_numpy():
    """No floating-point warning from NumPy (Triton's interpreter) reaches stderr while the block runs."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        yield
        return
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def not_implemented(exc: BaseException) -> bool:
    """Whether ``exc`` is (or wraps, as Triton's interpreter does) a ``NotImplementedError``."""
    return isinstance(exc, NotImplementedError) or "NotImplementedError" in f"{type(exc).__name__}: {exc}"


# What PyTorch may compute around the kernels' launches, in values, per value of the call's tensor inputs. The
# reference, the alternatives and the correct planted variants use at most 1.7 (outputs, per-head buffers, D);
# attention computed in PyTorch around kernels that do nothing uses 22 or more at T = 17, 40 at T = 48.
WORK_PER_INPUT = 8


def _run(fn, args, kwargs, what: str, limit):
    """``fn(*args, **kwargs)`` under the lesson's forbidden-call check; errors in the learner's terms."""
    inputs = sum(a.numel() for a in args if isinstance(a, torch.Tensor))
    with _quiet_numpy(), checks.forbid(fn, *SHORTCUTS, TRITON, why=WHY, limit=limit, work=WORK_PER_INPUT * inputs):
        try:
            return fn(*args, **kwargs)
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - turned into a sentence about the learner's function
            if not_implemented(exc):
                raise AssertionError(f"{what} is not implemented yet: replace the `raise NotImplementedError(...)` "
                                     "lines (in the function and in its kernels) with your code.") from None
            text = str(exc).strip().splitlines()[-1][:400] if str(exc).strip() else ""
            raise AssertionError(f"{what} raised {type(exc).__name__}: {text}") from None


def random_qkv(B, H, Hkv, T, Dh, *, seed=0, scale=1.0, dtype=torch.float32):
    """Seeded ``q (B, H, T, Dh)``, ``k, v (B, Hkv, T, Dh)`` and an upstream gradient ``dout (B, H, T, Dh)``;
    ``scale`` multiplies q."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, Dh, generator=g, dtype=dtype) * scale
    k = torch.randn(B, Hkv, T, Dh, generator=g, dtype=dtype)
    v = torch.randn(B, Hkv, T, Dh, generator=g, dtype=dtype)
    dout = torch.randn(B, H, T, Dh, generator=g, dtype=dtype)
    return q, k, v, dout


def _grouped(q, k, v):
    group = q.shape[1] // k.shape[1]
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


def reference(q, k, v, causal=False):
    """``(out, lse)`` in float64: SDPA's output and the natural log-sum-exp of each row's scaled scores."""
    q, k, v = (x.double() for x in (q, k, v))
    kk, vv = _grouped(q, k, v)
    out = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)
    scores = (q @ kk.transpose(-2, -1)) / math.sqrt(q.shape[-1])         # (B, H, T, Dh) x (B, H, Dh, T) -> (B, H, T, T)
    if causal:
        T = q.shape[-2]
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return out, torch.logsumexp(scores, dim=-1)


def reference_grads(q, k, v, dout, causal=False):
    """``(dq, dk, dv)`` in float64: autograd through SDPA of the gradient ``dout`` of the output."""
    q, k, v = (x.detach().double().requires_grad_(True) for x in (q, k, v))
    kk, vv = _grouped(q, k, v)
    out = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)
    return torch.autograd.grad(out, (q, k, v), dout.double())


def forward(fn, q, k, v, causal=False, block_m=16, block_n=16, *, limit=None):
    """The learner's ``flash_attention_forward``: returns ``(out, lse)``, checked to be two tensors."""
    what = f"flash_attention_forward(causal={causal}, block_m={block_m}, block_n={block_n})"
    res = _run(fn, (q, k, v), dict(causal=causal, block_m=block_m, block_n=block_n), what, limit)
    checks.check(isinstance(res, (tuple, list)) and len(res) == 2,
                 f"{what} should return a pair (out, lse), but it returned {type(res).__name__}.")
    out, lse = res
    checks.check_shape(out, tuple(q.shape), f"the output of {what}")
    checks.check_shape(lse, tuple(q.shape[:3]), f"the log-sum-exp of {what}")
    return out, lse


def backward(fn, q, k, v, out, lse, dout, causal=False, block_m=16, block_n=16, *, limit=None):
    """The learner's ``flash_attention_backward``: returns ``(dq, dk, dv)`` with the inputs' shapes."""
    what = f"flash_attention_backward(causal={causal}, block_m={block_m}, block_n={block_n})"
    res = _run(fn, (q, k, v, out.float(), lse.float(), dout),
               dict(causal=causal, block_m=block_m, block_n=block_n), what, limit)
    checks.check(isinstance(res, (tuple, list)) and len(res) == 3,
                 f"{what} should return (dq, dk, dv), but it returned {type(res).__name__}.")
    for name, got, like in zip(("dq", "dk", "dv"), res, (q, k, v)):
        checks.check_shape(got, tuple(like.shape), f"{name} from {what}")
    return tuple(res)


def attention(fn, q, k, v, causal=False, block_m=16, block_n=16, *, limit=None):
    """The learner's ``flash_attention`` (its output)."""
    what = f"flash_attention(causal={causal}, block_m={block_m}, block_n={block_n})"
    out = _run(fn, (q, k, v), dict(causal=causal, block_m=block_m, block_n=block_n), what, limit)
    checks.check_shape(out, tuple(q.shape), f"the output of {what}")
    return out


def gradients(fn, q, k, v, dout, causal=False, block_m=16, block_n=16, *, limit=None):
    """``attention_gradients`` of the notebook: (dq, dk, dv) by autograd through the learner's Function."""
    what = f"autograd through flash_attention(causal={causal}, block_m={block_m}, block_n={block_n})"
    res = _run(fn, (q, k, v, dout), dict(causal=causal, block_m=block_m, block_n=block_n), what, limit)
    checks.check(isinstance(res, (tuple, list)) and len(res) == 3, f"{what} should give (dq, dk, dv).")
    for name, got, like in zip(("dq", "dk", "dv"), res, (q, k, v)):
        checks.check(got is not None, f"{what}: {name} is None; FlashAttention.backward must return a gradient "
                                      "for q, k and v (and None for causal, block_m and block_n).")
        checks.check_shape(got, tuple(like.shape), f"{name} from {what}")
    return tuple(res)


def poison_rows(x, start, stop, value=float("nan")):
    """A copy of ``x (B, H, T, ...)`` whose positions ``start:stop`` along T hold ``value``."""
    x = x.clone()
    x[:, :, start:stop] = value
    return x


# Controls for :class:`course.checks.explain`: a cell that adds one condition to the forward or backward (float16,
# strided views, autograd) first asks whether the plain case on the same inputs is right; when it is not, its
# message says so and names what else these inputs have (grouped heads, the causal mask, a ragged tile), instead of
# blaming the condition it adds. Each control returns a sentence, or None when the plain case holds.

def inputs_have(q, k, causal: bool, block_m: int = 16, block_n: int = 16) -> str:
    """What these inputs have that a test of its own checks: ``"H = 4 query heads for Hkv = 2 key/value heads
    (test_forward_gqa checks that case), the causal mask (...)"``."""
    B, H, Hkv, T = q.shape[0], q.shape[1], k.shape[1], q.shape[2]
    parts = []
    if B > 1:
        parts.append(f"B = {B} sequences, each reading its own keys and values (key/value head b * Hkv + "
                     "h // (H // Hkv) in memory)")
    if H != Hkv:
        parts.append(f"H = {H} query heads for Hkv = {Hkv} key/value heads (grouped heads: test_forward_gqa and "
                     "test_backward_gqa check them)")
    if causal:
        parts.append("the causal mask (test_forward_causal and test_backward_causal)")
    if T % block_m or T % block_n:
        parts.append(f"T = {T}, not a multiple of the tiles {block_m} x {block_n} (a ragged last tile)")
    return "; ".join(parts) if parts else "nothing else a test of its own checks"


def _differ(got, want, atol: float) -> int:
    got, want = torch.as_tensor(got).detach().double(), torch.as_tensor(want).detach().double()
    if got.shape != want.shape:
        return want.numel()
    return int((~torch.isclose(got, want, atol=atol, rtol=1e-5, equal_nan=False)).sum())


def forward_differs_too(fn, q, k, v, causal=False, block_m=16, block_n=16, *, plain: str, adds: str,
                        atol: float = 1e-5) -> str | None:
    """None when ``fn``'s output on ``q, k, v`` (the plain case: float32, contiguous, the output itself) equals the
    reference; otherwise that it differs there too, so ``adds`` (what the failing cell adds) is not what is wrong."""
    out, _ = forward(fn, q, k, v, causal, block_m, block_n)
    n = _differ(out, reference(q, k, v, causal)[0], atol)
    if not n:
        return None
    return (f"flash_attention_forward's output differs {plain} too ({n} of {out.numel()} values), so {adds} is not "
            f"what is wrong here. These inputs have {inputs_have(q, k, causal, block_m, block_n)}.")


def autograd_control(forward_fn, backward_fn, q, k, v, dout, causal=False, block_m=16, block_n=16) -> str | None:
    """For a failing gradient through ``flash_attention``: None when the learner's forward and backward are right on
    these inputs called directly (so the autograd wrapper is what is wrong); otherwise which of the two is not."""
    have = inputs_have(q, k, causal, block_m, block_n)
    out, lse = forward(forward_fn, q, k, v, causal, block_m, block_n)
    want_out, want_lse = reference(q, k, v, causal)
    n = _differ(out, want_out, 1e-5) + _differ(lse, want_lse, 1e-4)
    if n:
        return (f"flash_attention_forward called directly on these inputs differs already ({n} values of out and "
                f"lse), and the gradients follow from them: fix the forward first. These inputs have {have}.")
    grads = backward(backward_fn, q, k, v, out, lse, dout, causal, block_m, block_n)
    wrong = [name for name, g, r in zip(("dq", "dk", "dv"), grads, reference_grads(q, k, v, dout, causal))
             if _differ(g, r, 1e-4)]
    if wrong:
        return (f"flash_attention_backward called directly on these inputs gives wrong {', '.join(wrong)} too, so the "
                f"backward kernels are what is wrong here, not the autograd wrapper. These inputs have {have}.")
    return None

"""Test helpers for lesson 12 (efficient attention), shared by its test cells.

Nothing here computes a graded answer. Tests compare the learner's ``chunked_attention`` with
``F.scaled_dot_product_attention`` (an independent PyTorch oracle) or with the explicit float64
reference kept on the instructor's side (``course/tools/references/refs_12.py``).

:func:`run_chunked` enforces what the exercise forbids, with ``checks.forbid``: PyTorch's fused
attention is blocked (the point is to write the online softmax, not to call the kernel), and with
``limit`` no tensor as large as (half) the whole ``T_q x T_k`` score matrix may be produced. Both are
watched at PyTorch's dispatcher (:mod:`course.forbidden`), in the learner's kernel and inside the
grading sandbox alike: an alias of the fused function, a call through ``torch.ops``, or a tensor
subclass unwrapped with ``as_subclass`` are all seen. :class:`Watched` (a tensor that checks the size
of every tensor computed from it, by ``__torch_function__``) is the older, name-level form of the size
check, kept for experiments; the tests no longer rely on it.
"""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from course import checks

__all__ = ["FUSED", "WHY", "Watched", "watched", "run_chunked", "random_qkv"]

FUSED = ("scaled_dot_product_attention", "multi_head_attention_forward")
WHY = ("compute attention one key/value chunk at a time with an online softmax, instead of calling "
       "PyTorch's fused attention")


class Watched(torch.Tensor):
    """A tensor that refuses to produce large intermediates.

    Every tensor computed from a ``Watched`` tensor is ``Watched`` too and carries the same
    ``_course_limit`` (a number of elements). An operation whose result has more elements than the
    limit raises ``AssertionError`` naming the operation and the shape.
    """

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        limit = None
        for x in pytree.tree_leaves((args, kwargs)):
            if isinstance(x, Watched):
                limit = x.__dict__.get("_course_limit", limit)
                if limit is not None:
                    break
        out = super().__torch_function__(func, types, args, kwargs)
        if limit is None:
            return out
        with torch._C.DisableTorchFunctionSubclass():
            for t in pytree.tree_leaves(out):
                if not isinstance(t, torch.Tensor):
                    continue
                if t.numel() > limit:
                    name = getattr(func, "__name__", str(func))
                    raise AssertionError(
                        f"your chunked_attention built a tensor of shape {tuple(t.shape)} ({t.numel()} values, from "
                        f"{name}): that is as large as the whole T_q x T_k matrix of scores (the test allows at most "
                        f"{limit}). Work on one key/value chunk at a time: each chunk's scores are (..., T_q, "
                        "chunk_size), and only the running max, running sum and running output survive from one "
                        "chunk to the next.")
                if isinstance(t, Watched):
                    t.__dict__["_course_limit"] = limit
        return out


def watched(x: torch.Tensor, limit: int) -> Watched:
    """``x`` as a :class:`Watched` tensor whose descendants may hold at most ``limit`` elements."""
    w = x.detach().clone().as_subclass(Watched)
    w.__dict__["_course_limit"] = int(limit)
    return w


def run_chunked(fn, q, k, v, chunk_size, causal=False, *, limit=None):
    """The learner's ``fn(q, k, v, chunk_size, causal=causal)`` with PyTorch's fused attention forbidden.

    With ``limit``, no tensor with more than ``limit`` elements may be produced while ``fn`` runs. Both
    rules are enforced at PyTorch's dispatcher (:func:`course.checks.forbid`, :mod:`course.forbidden`):
    every kernel that runs is seen, whatever name called it and whatever tensor subclass (or plain
    tensor) the code works on. Returns the output as a plain tensor.
    """
    with checks.forbid(fn, *FUSED, why=WHY, limit=limit):
        out = checks.call(fn, q, k, v, chunk_size, causal=causal, what="chunked_attention")
    checks.check_type(out, torch.Tensor, f"chunked_attention(q, k, v, {chunk_size}, causal={causal})")
    return out.as_subclass(torch.Tensor) if isinstance(out, Watched) else out


def random_qkv(*shape_q, T_k=None, d_v=None, scale=1.0, seed=0, dtype=torch.float32):
    """Seeded ``q (..., T_q, Dh)``, ``k (..., T_k, Dh)``, ``v (..., T_k, Dv)``; ``scale`` multiplies q."""
    g = torch.Generator().manual_seed(seed)
    *lead, T_q, d = shape_q
    T_k = T_q if T_k is None else T_k
    d_v = d if d_v is None else d_v
    q = torch.randn(*lead, T_q, d, generator=g, dtype=dtype) * scale
    k = torch.randn(*lead, T_k, d, generator=g, dtype=dtype)
    v = torch.randn(*lead, T_k, d_v, generator=g, dtype=dtype)
    return q, k, v

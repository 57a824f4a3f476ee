"""The two PyTorch modes a guard enters: a function mode that sees every torch function by the function object
itself, and a dispatch mode that sees every ATen kernel that runs (and measures what it makes)."""

from __future__ import annotations

import sys

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from course.forbidden.paths import OWN_FILES, triton_frame
from course.forbidden.tables import TRITON
from course.forbidden.violations import Kind, Violation


def _size_message(shape, numel, op, limit):
    return (f"your code built a tensor of shape {tuple(shape)} ({numel} values, from {op}): that is as large as the "
            f"whole T_q x T_k matrix of scores (the test allows at most {limit}). Work on one key/value chunk at a "
            "time: each chunk's scores are (..., T_q, chunk_size), and only the running max, running sum and "
            "running output survive from one chunk to the next.")


class FunctionsMode(TorchFunctionMode):
    def __init__(self, guard):
        super().__init__()
        self.guard = guard

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.guard.names:
            self.guard.refuse(f"{_qualname(func)} (under whatever name your code holds it)")
        return func(*args, **(kwargs or {}))


_BUILT_IN = frozenset({"aten", "prim", "prims"})      # PyTorch's own operators; any other namespace is a library's


class KernelsMode(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch (2.5+) wraps a mode's __torch_dispatch__ in torch._dynamo.disable unless told not to,
        # and that import (some 800 modules, sympy included: about 2 s of CPU) happens on the mode's first
        # kernel, i.e. in every grading sandbox and in a learner's first check. Nothing here is compiled.
        return False

    def __init__(self, guard):
        super().__init__()
        self.guard = guard

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        g = self.guard
        namespace, _, name = func._schema.name.rpartition("::")
        if namespace not in _BUILT_IN:
            # An operator the learner's code defined (torch.library): its body runs below this mode, where no
            # check sees what it calls (a fused softmax, a T x T matrix).
            g.refuse(f"an operator defined by your code ({func._schema.name}), whose body this check cannot see",
                     Kind.OWN_OPERATOR)
        if name in g.kernels and name in g.direct:
            g.refuse(f"PyTorch's kernel aten::{name} (whatever name reached it)")
        if name in g.kernels:            # the same work under another kernel's name: reported for a look too
            g.refuse(f"PyTorch's kernel aten::{name}, which computes what {' or '.join(sorted(g.names - {TRITON}))} "
                     "computes under another name", Kind.OTHER_NAME)
        out = func(*args, **(kwargs or {}))
        if g.work is not None and not getattr(func, "is_view", False) and not _by_triton():
            g.outside += sum(t.numel() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
            if g.outside > g.work:
                msg = (f"your code computed {g.outside} values with PyTorch outside your Triton kernels (aten::{name} "
                       f"and the kernels before it; the test allows {g.work}, a few times the size of the inputs): "
                       "the attention itself (scores, the online softmax, the weighted sum of values, the gradients) "
                       "is computed inside your @triton.jit kernels, and the function that launches them only "
                       f"allocates, converts and launches. This exercise asks you to {g.why}.")
                g.violations.append(Violation(Kind.WORK, msg))
                raise AssertionError(msg)
        if g.limit is not None:
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.numel() > g.limit and not (g.triton and _by_triton()):
                    msg = _size_message(t.shape, t.numel(), f"aten::{name}", g.limit)
                    g.violations.append(Violation(Kind.SIZE, msg))
                    raise AssertionError(msg)
            if not g.triton and not getattr(func, "is_view", False):
                _hold(g, out, name)
        return out


def _hold(g, out, name: str) -> None:
    """Count the storages ``out`` brings into the guard's ``held`` set (alive until PyTorch frees them: a storage's
    Python object lives as long as the storage) and fail once they hold more than ``limit`` values together."""
    import weakref

    for key in [k for k, (ref, _) in g.held.items() if ref() is None]:      # first: a freed storage's id is reused
        del g.held[key]
    for t in pytree.tree_leaves(out):
        if not isinstance(t, torch.Tensor) or t.is_meta or t.is_sparse:
            continue
        s = t.untyped_storage()
        if id(s) not in g.held and s.nbytes():
            g.held[id(s)] = (weakref.ref(s), s.nbytes() // max(1, t.element_size()))
    total = sum(n for _, n in g.held.values())
    if total > g.limit:
        msg = (f"your code held {total} values at once in tensors it made (aten::{name} and the ones still alive "
               f"before it): that is as much as the whole T_q x T_k matrix of scores, kept in pieces (the test allows "
               f"at most {g.limit} at once). Keep only the running max, running sum and running output from one key/value "
               "chunk to the next; each chunk's scores are dropped once they are added in.")
        g.violations.append(Violation(Kind.HELD, msg))
        raise AssertionError(msg)


def _by_triton() -> bool:
    """Whether the kernel running now was called by Triton's own code (its interpreter copies the arguments'
    storages in and out of a launch, as bytes): the nearest frame outside PyTorch and this module is Triton's.
    Asked about a tensor over the size limit, and about every kernel under a guard with ``work``."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename in OWN_FILES or
                                 (frame.f_globals.get("__name__", "") or "").split(".")[0] == "torch"):
        frame = frame.f_back
    return frame is not None and triton_frame(frame)


def _qualname(func) -> str:
    from torch.overrides import resolve_name

    try:
        name = resolve_name(func)
    except Exception:  # noqa: BLE001
        name = None
    if name:
        return name
    qual = str(getattr(func, "__qualname__", getattr(func, "__name__", "?")))
    for private, public in (("_VariableFunctionsClass.", "torch."), ("TensorBase.", "torch.Tensor."),
                            ("_TensorBase.", "torch.Tensor.")):
        if qual.startswith(private):
            return public + qual[len(private):]
    return f"{getattr(func, '__module__', None) or 'torch'}.{qual}"

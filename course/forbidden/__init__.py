"""Forbidden library shortcuts, enforced where PyTorch runs them, whatever name reached them.

An exercise that says "write the softmax yourself" or "do not call PyTorch's fused attention" is
checked by :func:`course.checks.forbid`. Blocking names (``torch.softmax = blocked``) misses an alias
taken earlier (``_f = torch.softmax``), ``torch.ops.aten._softmax`` and ``getattr(torch, "soft" +
"max")``. So while the learner's code runs, :class:`Guard` also watches two levels below the names:

* a ``TorchFunctionMode`` sees every call of a ``torch`` function or tensor method by the function
  object itself (``torch.softmax``, ``Tensor.softmax``, ``F.scaled_dot_product_attention``), under
  whatever name the learner's code holds it;
* a ``TorchDispatchMode`` sees every ATen kernel that runs (``aten::_softmax``,
  ``aten::_scaled_dot_product_flash_attention_for_cpu``...), so ``torch.ops.aten._softmax`` is caught
  too. It also measures the largest tensor any kernel produced: "no tensor as large as the whole
  ``T_q x T_k`` matrix" holds whatever tensor subclass the learner's code unwraps to.

Both run in the learner's process, so a learner's code could switch them off; grading also reads the
notebook for that (:func:`tampering`) and fails the test of a notebook caught trying.

**Triton's interpreter** (lesson 16). A check of "your own softmax" or of a size limit also refuses a call
whose data leaves PyTorch (:class:`OutsidePyTorch`), and that is what Triton's interpreter does: with
``TRITON_INTERPRET=1`` a kernel runs in NumPy on the tensors' raw memory. Naming :data:`TRITON` among the
forbidden names (``checks.forbid(fn, "softmax", ..., TRITON, ...)``) lets data move where Triton's own
code moves it, and nowhere else:

* NumPy (or a tensor's raw memory) used by a frame of Triton's installed package is Triton's work; the
  same use by the learner's code (a kernel body that calls ``np.exp``, a launcher that calls
  ``q.numpy()``) is refused as before;
* ``tl.softmax`` is refused when ``"softmax"`` is forbidden (a kernel writes its own online softmax);
* with ``limit``, no block a kernel computes (every array of Triton's interpreter: loads, products,
  reductions) may hold more than ``limit`` values, as no PyTorch tensor may.

Nothing changes for a guard without :data:`TRITON` (lessons 00 and 12).

The package, one concept a module: ``tables`` (what each name reaches), ``modes`` (PyTorch's function and dispatch
modes), ``guard`` (:class:`Guard`), ``leaving`` (data leaving PyTorch, forbidden modules' code), ``triton`` (lesson
16's watch), ``paths`` (whose code a frame runs), ``violations`` (what a check found, typed). What the judge reads
in a notebook about these checks is the grader's (``course.grading.judge.reading``), not the learner's.
"""

from __future__ import annotations

from course.forbidden import guard, leaving, modes, paths, tables, triton
from course.forbidden.guard import Guard, other_threads, tasks_created
from course.forbidden.leaving import InModules, OutsidePyTorch, hook_for
from course.forbidden.tables import (ATEN_NAMES, DIRECT, FAMILIES, FAMILY_OF, MODULE_OF, PATTERN_OF, KERNELS, TRITON,
                                     family, kernels_for, modules_for)

__all__ = ["KERNELS", "TRITON", "Guard", "family", "kernels_for", "modules_for", "hook_for", "OutsidePyTorch",
           "InModules", "tasks_created", "other_threads", "integrity_pieces", "MODULES"]

# Every module the checks run on, for the integrity check (the grading worker holds what they held at start).
MODULES = (tables, paths, modes, leaving, triton, guard)
# The frozen tables the checks read (taken at import; held by identity).
_FROZEN = ("DIRECT", "FAMILY_OF", "PATTERN_OF", "MODULE_OF", "ATEN_NAMES")


def integrity_pieces() -> dict:
    """Every piece the check of forbidden calls runs on, by name: in each module of :data:`MODULES`, every function
    and class it holds (defined here, or taken from another module of the package) and each method of those classes,
    and the frozen tables the checks read. The grading worker takes them, with their code, before any learner's code
    runs, and compares them at each check (a notebook that replaced one, or swapped its ``__code__``, fails the tests
    that use the check and is reported)."""
    import types

    pieces = {f"course.forbidden.tables.{name}": getattr(tables, name) for name in _FROZEN}
    for module in MODULES:
        for name, obj in list(vars(module).items()):
            home = getattr(obj, "__module__", None) or ""
            if not home.startswith("course.forbidden"):
                continue
            if isinstance(obj, types.FunctionType):
                pieces[f"{module.__name__}.{name}"] = obj
            elif isinstance(obj, type):
                pieces[f"{module.__name__}.{name}"] = obj
                for attr, member in list(vars(obj).items()):
                    member = getattr(member, "__func__", member)          # staticmethod, classmethod
                    if isinstance(member, types.FunctionType):
                        pieces[f"{module.__name__}.{name}.{attr}"] = member
    return pieces


_ = (ATEN_NAMES, DIRECT, FAMILIES, FAMILY_OF, MODULE_OF, PATTERN_OF, leaving, modes, paths, triton)  # re-exported

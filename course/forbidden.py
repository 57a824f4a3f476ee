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
"""

from __future__ import annotations

import ast

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils import _pytree as pytree

__all__ = ["KERNELS", "Guard", "kernels_for", "tampering", "aliases"]

# Python-level name -> the ATen kernels behind it (the names after ``aten::``). ``_safe_softmax`` is
# what SDPA's math path runs (a softmax that gives 0 to fully masked rows); nothing else in PyTorch's
# Python API reaches it.
_SDPA = ("scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
         "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
         "_scaled_dot_product_attention_math_for_mps", "_fused_sdp_choice", "_flash_attention_forward",
         "_efficient_attention_forward", "_cudnn_attention_forward", "_safe_softmax")
KERNELS = {
    "softmax": ("softmax", "_softmax", "_safe_softmax", "special_softmax"),
    "log_softmax": ("log_softmax", "_log_softmax", "special_log_softmax"),
    "scaled_dot_product_attention": _SDPA,
    "multi_head_attention_forward": _SDPA + ("_native_multi_head_attention",),
    "MultiheadAttention": _SDPA + ("_native_multi_head_attention",),
}


def kernels_for(names) -> frozenset[str]:
    """The ATen kernels behind these Python names (names without a known kernel add nothing)."""
    out: set[str] = set()
    for name in names:
        out.update(KERNELS.get(str(name).lstrip("_"), ()))
        out.update(KERNELS.get(str(name), ()))
    return frozenset(out)


def _size_message(shape, numel, op, limit):
    return (f"your code built a tensor of shape {tuple(shape)} ({numel} values, from {op}): that is as large as the "
            f"whole T_q x T_k matrix of scores (the test allows at most {limit}). Work on one key/value chunk at a "
            "time: each chunk's scores are (..., T_q, chunk_size), and only the running max, running sum and "
            "running output survive from one chunk to the next.")


class _Functions(TorchFunctionMode):
    def __init__(self, guard):
        super().__init__()
        self.guard = guard

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.guard.names:
            self.guard.refuse(f"{_qualname(func)} (under whatever name your code holds it)")
        return func(*args, **(kwargs or {}))


_BUILT_IN = frozenset({"aten", "prim", "prims"})      # PyTorch's own operators; any other namespace is a library's


class _Kernels(TorchDispatchMode):
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
            g.refuse(f"an operator defined by your code ({func._schema.name}), whose body this check cannot see")
        if name in g.kernels:
            g.refuse(f"PyTorch's kernel aten::{name} (whatever name reached it)")
        out = func(*args, **(kwargs or {}))
        if g.limit is not None:
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.numel() > g.limit:
                    msg = _size_message(t.shape, t.numel(), f"aten::{name}", g.limit)
                    g.violations.append(msg)
                    raise AssertionError(msg)
        return out


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


def tasks_created() -> int | None:
    """The last PID (of a process or a thread) created in this PID namespace, when that namespace is the
    grader's sandbox (its PID 1 is the sandbox's zygote); None elsewhere (the learner's own kernel, or a
    grader run without a sandbox), where other processes of the machine move it too."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            if b"--zygote=" not in f.read():
                return None
        with open("/proc/sys/kernel/ns_last_pid") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


class Guard:
    """A context that fails every call of the forbidden ``names`` (and their kernels), and any tensor
    above ``limit`` elements. ``violations`` lists what happened, as sentences for the learner.

    PyTorch's modes watch only the thread that entered them, so under grading the guard also fails a
    call that started a thread or a process (a new PID in the sandbox's namespace) while it was on."""

    def __init__(self, names, why: str, limit: int | None = None):
        self.names = frozenset(str(n) for n in names)
        self.kernels = kernels_for(self.names)
        self.why = why
        self.limit = None if limit is None else int(limit)
        self.violations: list[str] = []
        self._modes = (_Functions(self), _Kernels(self))
        self._tasks = None
        # A check of "your own softmax" or of a size limit sees only PyTorch's operations: there the
        # learner's calls must also keep their data in PyTorch (see :class:`OutsidePyTorch`).
        self.closed = self.limit is not None or bool(self.names & {"softmax", "log_softmax"})

    def refuse(self, what: str):
        msg = f"your code called {what}: this exercise asks you to {self.why}."
        self.violations.append(msg)
        raise AssertionError(msg)

    def __enter__(self):
        self._tasks = tasks_created()
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc):
        functions, kernels = self._modes
        if self._tasks is not None and tasks_created() != self._tasks:
            self.violations.append("your code started a thread or a process while the check of forbidden calls was "
                                   "on: the check watches the thread that calls your function, so the exercise's "
                                   f"functions must do their work in that thread. This exercise asks you to {self.why}.")
        stack = _get_current_dispatch_mode_stack()
        if not stack or stack[-1] is not kernels:
            self.violations.append("the check of forbidden calls was switched off or covered while your code ran "
                                   "(the dispatch mode it installs was removed or another one was left on top): "
                                   f"this exercise asks you to {self.why}.")
            from torch.utils._python_dispatch import _pop_mode
            while _get_current_dispatch_mode_stack() and kernels in _get_current_dispatch_mode_stack():
                _pop_mode()
        else:
            kernels.__exit__(None, None, None)
        try:
            functions.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - the stack was tampered with
            self.violations.append("the check of forbidden calls (its function mode) was removed while your code ran.")
        return False


# Libraries that compute on their own arrays, where no PyTorch mode looks, and the ways out of a tensor.
_OUTSIDE = ("numpy", "scipy", "sklearn", "pandas", "jax", "jaxlib", "numba", "cupy", "tensorflow", "mlx")
_LEAVING = {"Tensor.numpy", "Tensor.__array__", "Tensor.__dlpack__", "Tensor.untyped_storage", "Tensor.storage",
            "Tensor._typed_storage", "Tensor.data_ptr", "_VariableFunctionsClass.from_numpy",
            "_VariableFunctionsClass.from_dlpack", "_VariableFunctionsClass.frombuffer"}


class OutsidePyTorch:
    """A ``sys.setprofile`` hook for one learner call under a closed :class:`Guard`: it records a violation
    when the call takes a tensor's data out of PyTorch (``Tensor.numpy``, ``np.asarray``, DLPack, raw
    storage) or runs NumPy, SciPy and the like, where neither the forbidden-kernel check nor the size
    limit can see (``scipy.special.softmax``, a T x T matrix built in NumPy). Pure Python on numbers
    (``tolist``, ``math.exp``) is the learner's own work and is left alone, except ``tolist`` under a
    size limit."""

    def __init__(self, guard: Guard):
        import sys

        self.guard = guard
        # the frames that were running when the check began: the learner's calls run below them
        frame, outer = sys._getframe(1), []
        while frame is not None:
            outer.append(frame)
            frame = frame.f_back
        self.outer = frozenset(map(id, outer))
        self._keep = outer                 # (their ids stay theirs while the hook lives)
        self.seen = False

    def __call__(self, frame, event, arg):
        if self.seen:
            return
        what = None
        if event == "c_call":
            qual, module = getattr(arg, "__qualname__", "") or "", getattr(arg, "__module__", None) or ""
            # under a size limit, a whole matrix as Python lists would be as unseen as one in NumPy
            if qual in _LEAVING or module.split(".")[0] in _OUTSIDE or (qual == "Tensor.tolist" and self.guard.limit):
                what = f"{module + '.' if module else ''}{qual}"
        elif event == "call":
            module = frame.f_globals.get("__name__", "") or ""
            if module.split(".")[0] in _OUTSIDE:
                what = f"{module}.{frame.f_code.co_name}"
        if what and not _installed_module_loading(frame, self.outer):
            self.seen = True
            self.guard.violations.append(
                f"your code took its data out of PyTorch ({what}) inside a checked call: the check sees only "
                f"PyTorch's operations, so this exercise's functions compute with them (not NumPy or SciPy). "
                f"This exercise asks you to {self.guard.why}.")


def _installed_prefixes() -> tuple[str, ...]:
    """Where installed Python code lives here: the standard library, every site-packages (Debian's
    dist-packages too) and the folder PyTorch itself was loaded from."""
    import os
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    try:
        found.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - some virtualenvs' site module
        pass
    found.add(os.path.dirname(os.path.dirname(torch.__file__)))
    return tuple(sorted(os.path.join(p, "") for p in found if p))


_INSTALLED = _installed_prefixes()


def _installed_module_loading(frame, outer=frozenset()) -> bool:
    """Whether ``frame`` runs under the top level of an installed module imported since the check began
    (below the ``outer`` frames; PyTorch loads parts of itself lazily, and those touch NumPy): not the
    learner's work. A module the learner wrote (in the working folder) counts as the learner's."""
    while frame is not None and id(frame) not in outer:
        code = frame.f_code
        if code.co_name == "<module>" and code.co_filename.startswith(_INSTALLED):
            return True
        frame = frame.f_back
    return False


def other_threads() -> bool:
    """Whether this process runs a thread besides the calling one (read from /proc; False where unknown)."""
    import os

    try:
        return len(os.listdir("/proc/self/task")) > 1
    except OSError:
        return False


# -- reading the notebook -------------------------------------------------------------------------

# Names whose use in a learner's code can only serve to switch the checks off or to reach a kernel by
# another road: PyTorch's mode stacks and dispatcher internals, the grader's own modules, dynamic
# code. Honest solutions of the course's exercises never need them.
_TAMPER_ATTRS = {"_C", "ops", "_pop_mode", "_push_mode", "_disable_current_modes", "_python_dispatch", "_get_current_dispatch_mode_stack",
                 "TorchDispatchMode", "TorchFunctionMode", "__torch_dispatch__", "__torch_function__", "DispatchKey",
                 "DisableTorchFunction", "DisableTorchFunctionSubclass", "_DisableTorchDispatch", "as_subclass",
                 "_targets", "forbidden_targets", "_GRADING", "GradingHooks", "graded_by", "Guard", "forbidden", "Worker",
                 "_disabled_torch_function_impl", "_set_torch_function_mode", "setprofile", "settrace",
                 "getprofile", "setprofile_all_threads", "settrace_all_threads",
                 # operators and kernels of one's own run below the modes
                 "library", "custom_op", "Library"}
_TAMPER_MODULES = ("torch._C", "torch.ops", "torch.utils._python_dispatch", "torch.overrides", "course.tools", "course.grading",
                   "course.forbidden", "importlib", "ctypes", "torch.library", "__main__",
                   # work in another thread or process, where the checks' modes do not look
                   "threading", "_thread", "concurrent", "multiprocessing", "torch.multiprocessing")
_TORCHISH = {"torch", "F", "nn", "functional", "Tensor", "special", "linalg"}
_DYNAMIC = {"eval", "exec", "compile", "__import__"}


def _cells(nb, skip_sources=(), skip_ids=()):
    skip_sources, skip_ids = set(skip_sources), set(skip_ids)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        if cell.source in skip_sources or cell.get("id") in skip_ids:
            continue
        try:
            yield i, ast.parse(cell.source)
        except (RecursionError, MemoryError, ValueError):    # Python cannot compile it either: it runs nothing
            continue
        except SyntaxError:
            try:
                from IPython.core.inputtransformer2 import TransformerManager
                yield i, ast.parse(TransformerManager().transform_cell(cell.source))
            except Exception:  # noqa: BLE001 - a cell that does not parse runs nothing either
                continue


def given_cells(source_nb) -> tuple[set[str], set[str]]:
    """Sources and ids of the lesson's own cells a learner does not write (given code, experiments)."""
    sources, ids = set(), set()
    for cell in source_nb.cells:
        meta = cell.get("metadata", {})
        if cell.cell_type != "code" or meta.get("nbgrader", {}).get("solution"):
            continue
        sources.add(cell.source)
        if "experiment" in meta.get("tags", []):
            ids.add(cell.get("id"))
    return sources, ids


def tampering(nb, source_nb=None) -> list[str]:
    """What in the learner's cells reaches below or around the checks of forbidden calls.

    Looks at solution cells and cells the learner added or changed (not the lesson's given cells nor
    its tests): PyTorch's dispatcher and mode internals (``torch._C``, ``torch.ops``, ``_pop_mode``,
    ``__torch_dispatch__``, ``as_subclass``...), operators of the learner's own (``torch.library``,
    ``custom_op``), the grader's modules and ``__main__`` (the grading worker), ``sys.modules``, dynamic
    code (``eval``, ``exec``, ``__import__``, ``importlib``) and ``getattr`` on torch with a computed name.
    """
    sources, ids = given_cells(source_nb) if source_nb is not None else (set(), set())
    found = []
    for i, tree in _cells(nb, sources, ids):
        torchish = set(_TORCHISH)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                torchish |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "torch"}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
                torchish |= {a.asname or a.name for a in node.names}
        for node in ast.walk(tree):
            line = getattr(node, "lineno", "?")
            if isinstance(node, ast.Attribute) and node.attr in _TAMPER_ATTRS:
                found.append(f"cell {i} line {line}: .{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name) \
                    and node.value.id == "sys":
                found.append(f"cell {i} line {line}: sys.modules")
            elif isinstance(node, ast.Name) and node.id in _DYNAMIC | {"importlib", "TorchDispatchMode", "TorchFunctionMode"}:
                found.append(f"cell {i} line {line}: {node.id}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                mods += [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module else []
                for m in mods:
                    if any(m == t or m.startswith(t + ".") for t in _TAMPER_MODULES) or m.split(".")[-1] in _TAMPER_ATTRS:
                        found.append(f"cell {i} line {line}: import {m}")
                        break
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "setattr", "delattr") and len(node.args) >= 2:
                obj, attr = node.args[0], node.args[1]
                root = obj
                while isinstance(root, ast.Attribute):
                    root = root.value
                on_torch = isinstance(root, ast.Name) and root.id in torchish
                literal = isinstance(attr, ast.Constant) and isinstance(attr.value, str)
                if on_torch and (not literal or attr.value in _TAMPER_ATTRS or node.func.id != "getattr"):
                    found.append(f"cell {i} line {line}: {node.func.id}({ast.unparse(obj)}, {ast.unparse(attr)})")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value in _TAMPER_ATTRS - {"ops", "forbidden", "Guard", "library"}):
                found.append(f"cell {i} line {line}: the string {node.value!r}")
    return list(dict.fromkeys(found))


def aliases(nb, names, source_nb=None) -> list[str]:
    """Forbidden functions taken as values (``_f = torch.softmax``) rather than called where they are
    named, in the learner's cells: a way around a check by name, worth a human look."""
    names = set(names)
    sources, ids = given_cells(source_nb) if source_nb is not None else (set(), set())
    found = []
    for i, tree in _cells(nb, sources, ids):
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in names and id(node) not in called:
                found.append(f"cell {i} line {node.lineno}: takes {ast.unparse(node)} as a value (an alias of a "
                             "forbidden function)")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and \
                    len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names:
                found.append(f"cell {i} line {node.lineno}: takes {ast.unparse(node)} (a forbidden function by "
                             "its name)")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch" and \
                    any(a.name in names for a in node.names):
                found.append(f"cell {i} line {node.lineno}: imports a forbidden function by name")
    return list(dict.fromkeys(found))


def lesson_names(source_nb) -> set[str]:
    """The names a lesson's tests forbid: string arguments of ``forbid(...)`` in its test cells, and the
    ``*SHORTCUTS`` / ``FUSED`` tuples of the ``course.checks_NN`` helpers those cells call."""
    import importlib

    names: set[str] = set()
    for cell in source_nb.cells:
        if cell.cell_type != "code" or not cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "forbid") or (isinstance(func, ast.Name) and func.id == "forbid"):
                names |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id.startswith("checks_"):
                try:
                    mod = importlib.import_module(f"course.{func.value.id}")
                except ImportError:
                    continue
                for key, value in vars(mod).items():
                    if (key == "FUSED" or key.endswith("SHORTCUTS")) and isinstance(value, tuple):
                        names |= {v for v in value if isinstance(v, str)}
    return names


def integrity_pieces() -> dict:
    """The pieces the check of forbidden calls runs on, by name (this module's and ``course.checks``'s):
    the grading worker takes them before any learner's code runs and compares them after each check, so
    a notebook that replaced one is reported and fails the tests that use the check."""
    from course import checks

    return {"course.forbidden.Guard.__enter__": Guard.__dict__.get("__enter__"),
            "course.forbidden.Guard.__exit__": Guard.__dict__.get("__exit__"),
            "course.forbidden.Guard.refuse": Guard.__dict__.get("refuse"),
            "course.forbidden._Kernels.__torch_dispatch__": _Kernels.__dict__.get("__torch_dispatch__"),
            "course.forbidden._Functions.__torch_function__": _Functions.__dict__.get("__torch_function__"),
            "course.checks.forbidden_targets": checks.__dict__.get("forbidden_targets"),
            "course.forbidden.Guard": globals().get("Guard"),
            "course.forbidden.OutsidePyTorch": globals().get("OutsidePyTorch"),
            "course.forbidden.OutsidePyTorch.__call__": OutsidePyTorch.__dict__.get("__call__"),
            "course.forbidden.other_threads": globals().get("other_threads"),
            "course.forbidden.tasks_created": globals().get("tasks_created"),
            "course.forbidden.integrity_pieces": globals().get("integrity_pieces")}

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
"""

from __future__ import annotations

import ast
import sys

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack
from torch.utils import _pytree as pytree

__all__ = ["KERNELS", "TRITON", "Guard", "family", "kernels_for", "tampering", "aliases"]

# A pseudo-name: among a guard's forbidden names it lets Triton's interpreter move data (see above). Not an
# identifier, so no attribute, import or string of a learner's code matches it by accident.
TRITON = "<triton interpreter>"

# Python-level name -> the ATen kernels behind it (the names after ``aten::``). ``_safe_softmax`` is
# what SDPA's math path runs (a softmax that gives 0 to fully masked rows); nothing else in PyTorch's
# Python API reaches it.
_SDPA = ("scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
         "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
         "_scaled_dot_product_attention_math_for_mps", "_fused_sdp_choice", "_flash_attention_forward",
         "_efficient_attention_forward", "_cudnn_attention_forward", "_safe_softmax")
# PyTorch's matrix products, as the dispatcher sees them (``@``, ``torch.matmul`` and ``einsum`` arrive
# decomposed into these).
_MATMUL = ("mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "linear",
           "_addmm_activation", "einsum", "tensordot")
KERNELS = {
    "softmax": ("softmax", "_softmax", "_safe_softmax", "special_softmax"),
    "matmul": _MATMUL,
    "einsum": _MATMUL,
    "log_softmax": ("log_softmax", "_log_softmax", "special_log_softmax"),
    "scaled_dot_product_attention": _SDPA,
    "multi_head_attention_forward": _SDPA + ("_native_multi_head_attention",),
    "MultiheadAttention": _SDPA + ("_native_multi_head_attention",),
}

# The lists above name the kernels a Python name reaches; PyTorch has other kernels that compute the same
# thing under other names (``torch._masked_softmax``, the sparse softmax, the fused attention kernels, each
# with a softmax inside, ``conv3d`` or ``torch.convolution`` for a ``conv2d``, ``_transformer_encoder_layer_fwd``
# for a whole encoder layer). So each forbidden name also refuses its *families*: every ATen kernel
# registered in this PyTorch whose name matches the family's pattern, read from the dispatcher's own list.
_FAMILY_PATTERNS = {
    "softmax": r"softmax",
    "attention": r"attention|_sdp_|transformer_encoder_layer",
    "transformer_layer": r"transformer_encoder_layer",
    "convolution": r"conv(?!ert)|convolution",
    "matmul": (r"(^|_)(mm|bmm|mv|addmm|addmv|addbmm|baddbmm|addr|dot|vdot|matmul|linear|bilinear|trilinear|einsum|"
               r"tensordot|kron|inner|outer|ger|chain_matmul|multi_dot|int_mm|grouped_mm|cdist|euclidean_dist)(_|$)|"
               r"pack_mm|linear_combination|cdist"),
}
_FAMILIES = {
    "softmax": ("softmax", "attention"),
    "log_softmax": ("softmax", "attention"),
    "scaled_dot_product_attention": ("attention",),
    "multi_head_attention_forward": ("attention",),
    "MultiheadAttention": ("attention",),
    # an encoder layer's own kernel only: the learner's block may use nn.MultiheadAttention (its fused path)
    "TransformerEncoderLayer": ("transformer_layer",),
    "TransformerEncoder": ("transformer_layer",),
    "conv1d": ("convolution",), "conv2d": ("convolution",), "conv3d": ("convolution",), "Conv2d": ("convolution",),
    # a convolution is a matrix product too, and so is every fused attention kernel
    "matmul": ("matmul", "convolution", "attention"),
    "einsum": ("matmul", "convolution", "attention"),
}

# Names that are not PyTorch's: the Python modules whose code they run. While a check forbids one, no function
# of those modules may run, whatever name or helper reached it (lesson 10: transformers' BERT, and the course's
# own bridge to it, which its tests use as their oracle).
_MODULES = {
    **{name: ("transformers.models.bert",) for name in ("BertModel", "BertForPreTraining", "BertLayer", "BertEncoder")},
    **{name: ("course.oracles.bert",) for name in ("to_hf_model", "to_hf_pretraining", "hf_forward", "hf_outputs")},
}


def _frozen(table: dict) -> tuple:
    return tuple(sorted((k, tuple(v) if isinstance(v, (tuple, list)) else v) for k, v in table.items()))


def _read_aten() -> frozenset[str]:
    try:
        names = torch._C._dispatch_get_all_op_names()
    except (AttributeError, RuntimeError):              # an older PyTorch: the lists above are what we know
        names = ()
    return frozenset(n.split("::", 1)[1].split(".")[0] for n in names if n.startswith("aten::"))


# What the checks read: frozen copies, taken when this module is imported (before any learner's code runs; the
# grading worker holds them by identity, see integrity_pieces), so a notebook that edits KERNELS or the tables
# above changes nothing the checks see.
_DIRECT, _FAMILY_OF, _PATTERN_OF, _MODULE_OF = (_frozen(t) for t in (KERNELS, _FAMILIES, _FAMILY_PATTERNS, _MODULES))
_ATEN_NAMES = _read_aten()          # every ATen kernel name this PyTorch registers


def modules_for(names) -> tuple[str, ...]:
    """The Python modules (prefixes of ``__name__``) whose code these forbidden names run."""
    table = dict(_MODULE_OF)
    return tuple(sorted({m for name in names for m in table.get(str(name), ())}))


def family(name: str) -> frozenset[str]:
    """The ATen kernels of one family of :data:`_FAMILY_PATTERNS` (``"softmax"``, ``"attention"``...)."""
    import re

    pattern = re.compile(dict(_PATTERN_OF)[name])
    return frozenset(n for n in _ATEN_NAMES if pattern.search(n) and not n.lstrip("_").startswith("upsample"))


def kernels_for(names, *, families: bool = True) -> frozenset[str]:
    """The ATen kernels behind these Python names and (``families``) every kernel of their families (names
    without a known kernel add nothing)."""
    direct, of = dict(_DIRECT), dict(_FAMILY_OF)
    out: set[str] = set()
    for name in names:
        for key in {str(name), str(name).lstrip("_")}:
            out.update(direct.get(key, ()))
            for fam in of.get(key, ()) if families else ():
                out.update(family(fam))
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
        if name in g.kernels and name in g.direct:
            g.refuse(f"PyTorch's kernel aten::{name} (whatever name reached it)")
        if name in g.kernels:            # the same work under another kernel's name: reported for a look too
            g.refuse(f"PyTorch's kernel aten::{name}, which computes what {' or '.join(sorted(g.names - {TRITON}))} "
                     "computes under another name")
        out = func(*args, **(kwargs or {}))
        if g.work is not None and not getattr(func, "is_view", False) and not _by_triton():
            g.outside += sum(t.numel() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor))
            if g.outside > g.work:
                msg = (f"your code computed {g.outside} values with PyTorch outside your Triton kernels (aten::{name} "
                       f"and the kernels before it; the test allows {g.work}, a few times the size of the inputs): "
                       "the attention itself (scores, the online softmax, the weighted sum of values, the gradients) "
                       "is computed inside your @triton.jit kernels, and the function that launches them only "
                       f"allocates, converts and launches. This exercise asks you to {g.why}.")
                g.violations.append(msg)
                raise AssertionError(msg)
        if g.limit is not None:
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.numel() > g.limit and not (g.triton and _by_triton()):
                    msg = _size_message(t.shape, t.numel(), f"aten::{name}", g.limit)
                    g.violations.append(msg)
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
        g.violations.append(msg)
        raise AssertionError(msg)


def _by_triton() -> bool:
    """Whether the kernel running now was called by Triton's own code (its interpreter copies the arguments'
    storages in and out of a launch, as bytes): the nearest frame outside PyTorch and this module is Triton's.
    Asked about a tensor over the size limit, and about every kernel under a guard with ``work``."""
    frame = sys._getframe(2)
    here = __file__
    while frame is not None and (frame.f_code.co_filename == here or
                                 (frame.f_globals.get("__name__", "") or "").split(".")[0] == "torch"):
        frame = frame.f_back
    return frame is not None and _triton_frame(frame)


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
    call that started a thread or a process (a new PID in the sandbox's namespace) while it was on.

    With :data:`TRITON` and ``work`` (lesson 16: "compute attention in your Triton kernels"), the work must
    happen in kernels: the call must launch at least one, and PyTorch's kernels run by the learner's code
    (not by Triton's interpreter) may produce at most ``work`` values in all, views aside. A launcher
    allocates, converts and launches, a few times the size of its inputs; attention computed with PyTorch
    around kernels that do nothing (a score tile as ``(q[:, None] * k[None]).sum(-1)``, no matrix product
    named) grows with T x T and is refused."""

    def __init__(self, names, why: str, limit: int | None = None, work: int | None = None):
        self.names = frozenset(str(n) for n in names)
        self.kernels = kernels_for(self.names)
        self.direct = kernels_for(self.names, families=False)     # what the names themselves reach
        self.modules = modules_for(self.names)                     # Python modules whose code may not run
        self.why = why
        self.limit = None if limit is None else int(limit)
        # With TRITON: how many values PyTorch may compute outside Triton's launches (allocations, copies, the
        # launchers' own arithmetic), in all; what it computed so far, and how many kernels were launched.
        self.work = None if work is None else int(work)
        self.outside = 0
        self.launches = 0
        # With a limit (and no Triton): the storages the call's kernels made that are still alive, {id: (weak
        # reference, values)}: the whole matrix kept as many pieces (a list of every chunk's scores) is as large.
        self.held: dict = {}
        self.violations: list[str] = []
        self._modes = (_Functions(self), _Kernels(self))
        self._tasks = None
        # A check of "your own softmax" or of a size limit sees only PyTorch's operations: there the
        # learner's calls must also keep their data in PyTorch (see :class:`OutsidePyTorch`).
        self.triton = TRITON in self.names        # ... except where Triton's interpreter moves it
        self.closed = self.limit is not None or bool(self.names & {"softmax", "log_softmax"}) or self.triton
        self._triton_watch = None

    def refuse(self, what: str):
        msg = f"your code called {what}: this exercise asks you to {self.why}."
        self.violations.append(msg)
        raise AssertionError(msg)

    def __enter__(self):
        self._tasks = tasks_created()
        if self.triton:
            self._triton_watch = _TritonWatch(self)
            self._triton_watch.start()
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc):
        functions, kernels = self._modes
        if self._triton_watch is not None:
            # Triton's interpreter was there to watch each launch (compiled for a GPU, launches do not pass through it)
            import os

            watching = self._triton_watch.launch is not None and \
                os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
            self._triton_watch.stop()
            self._triton_watch = None
            if watching and self.work is not None and not self.launches and not self.violations:
                self.violations.append("your code launched no Triton kernel: in this exercise the attention is computed "
                                       "inside your @triton.jit kernels, launched as kernel[grid](...) by the function "
                                       f"under test. This exercise asks you to {self.why}.")
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


def _triton_dir() -> str | None:
    """The folder of the installed ``triton`` package (with a trailing separator), found without importing
    it; None where it is not installed."""
    import importlib.util
    import os

    module = sys.modules.get("triton")
    origin = getattr(module, "__file__", None)
    if origin is None:
        try:
            spec = importlib.util.find_spec("triton")
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None)
    return os.path.join(os.path.dirname(origin), "") if origin else None


def _triton_frame(frame) -> bool:
    """Whether ``frame`` runs code of Triton's installed package (its interpreter, its language)."""
    folder = _TRITON_DIR[0] if _TRITON_DIR else None
    return bool(folder) and frame.f_code.co_filename.startswith(folder)


_TRITON_DIR: list = []          # filled by _TritonWatch.start: [folder or None]


class _TritonWatch:
    """While a :data:`TRITON` guard is on: every array Triton's interpreter makes (a ``TensorHandle``) is
    measured against the guard's ``limit``, as the dispatcher measures PyTorch's tensors. Triton is
    imported here, before PyTorch's modes are entered, if the learner's code has not imported it yet."""

    def __init__(self, guard):
        self.guard = guard
        self.saved = None
        self.launch = None

    def start(self):
        if not _TRITON_DIR:
            _TRITON_DIR.append(_triton_dir())
        if _TRITON_DIR[0] is None:
            return
        try:
            from triton.runtime import interpreter
        except Exception:  # noqa: BLE001 - no Triton here (macOS): the learner's code cannot launch a kernel either
            return
        guard = self.guard
        executor = interpreter.GridExecutor
        launch = executor.__dict__["__call__"]

        def watched_launch(self_, *args, _launch=launch, **kwargs):
            # A launch runs the kernel's Python code millions of times (one NumPy operation per Triton one):
            # under the profile hook of OutsidePyTorch that costs 5x. So what a launch runs of the learner's
            # is read instead (the kernel, the @jit functions it calls, a grid function), and the hook is
            # paused for the launch: every name they use must be Triton's, numbers, tensors or math.
            guard.launches += 1
            problems = _launch_problems(self_)
            if problems:
                msg = (f"your kernel {problems[0]}: inside a kernel, compute with Triton (tl.*) only; NumPy, a "
                       f"tensor's raw data and tl.softmax are not the kernel's work. This exercise asks you to {guard.why}.")
                guard.violations.append(msg)
                raise AssertionError(msg)
            hook = sys.getprofile()
            paused = isinstance(hook, OutsidePyTorch) and hook.guard is guard
            if paused:
                sys.setprofile(None)
            try:
                return _launch(self_, *args, **kwargs)
            finally:
                if paused:
                    sys.setprofile(hook)

        executor.__call__ = watched_launch
        self.launch = (executor, launch)
        if self.guard.limit is None:
            return
        handle = interpreter.TensorHandle
        original = handle.__dict__.get("__post_init__")
        guard, limit = self.guard, self.guard.limit

        def measured(self_, _original=original):
            if _original is not None:
                _original(self_)
            size = getattr(getattr(self_, "data", None), "size", 0)
            if isinstance(size, int) and size > limit:
                shape = tuple(getattr(self_.data, "shape", ()))
                msg = (f"your kernel built a block of shape {shape} ({size} values): that is as large as the whole "
                       f"T x T matrix of scores (the test allows at most {limit}). A kernel works on tiles of "
                       "block_m x block_n scores; only the running max, sum and output (block_m rows each) survive "
                       f"from one key tile to the next. This exercise asks you to {guard.why}.")
                guard.violations.append(msg)
                raise AssertionError(msg)

        handle.__post_init__ = measured
        self.saved = (handle, original)

    def stop(self):
        if self.launch is not None:
            executor, launch = self.launch
            executor.__call__ = launch
            self.launch = None
        if self.saved is None:
            return
        handle, original = self.saved
        if original is None:
            del handle.__post_init__
        else:
            handle.__post_init__ = original
        self.saved = None


# Names a kernel (or a grid function) of the learner may not use: the ways out of a tensor and into NumPy,
# the interpreter's own arrays behind Triton's blocks, and Triton's softmax of one tile.
_KERNEL_NAMES = {"numpy", "__array__", "__dlpack__", "data_ptr", "untyped_storage", "storage", "_typed_storage",
                 "tolist", "from_numpy", "frombuffer", "from_dlpack", "handle", "softmax", "__code__", "__globals__",
                 "__module__", "setprofile", "settrace", "_getframe",
                 # names computed at run time would get around this reading
                 "getattr", "__getattribute__", "__dict__", "vars", "globals", "locals", "eval", "exec", "compile",
                 "__import__"}
_KERNEL_MODULES = ("triton", "math", "torch", "builtins")     # modules a kernel may name


def _codes(code):
    yield code
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            yield from _codes(const)


def _launch_problems(executor) -> list[str]:
    """What a Triton launch would run of the learner's that reaches outside Triton: the kernel, the
    ``@triton.jit`` functions it names, the grid function, pre-run hooks (read, not run)."""
    problems: list[str] = []
    if getattr(executor, "pre_run_hooks", None):
        problems.append("has a pre-run hook (a function of yours that the launch runs unwatched)")
    seen: set = set()
    _read_function(executor.fn, problems, seen)
    if callable(executor.grid):
        _read_function(executor.grid, problems, seen)
    return problems


def _read_function(fn, problems, seen, depth=0):
    import builtins

    fn = getattr(fn, "fn", fn)                     # a JITFunction / InterpretedFunction: its Python function
    code = getattr(fn, "__code__", None)
    if code is None or id(code) in seen or depth > 20 or _triton_file(code.co_filename):
        return
    seen.add(id(code))
    names: set[str] = set()
    for c in _codes(code):
        names.update(c.co_names)
    bad = sorted(names & _KERNEL_NAMES)
    if bad:
        problems.append(f"uses the name {bad[0]!r}" if bad[0] != "softmax" else "calls tl.softmax")
    scope = dict(getattr(fn, "__globals__", {}) or {})
    for name, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            scope[name] = cell.cell_contents
        except ValueError:
            continue
    for name in sorted(names | set(code.co_freevars)):
        if name not in scope or hasattr(builtins, name) and scope[name] is getattr(builtins, name):
            continue
        _read_value(name, scope[name], problems, seen, depth)


def _read_value(name, value, problems, seen, depth):
    import types

    if isinstance(value, types.ModuleType):
        if value.__name__.split(".")[0] not in _KERNEL_MODULES:
            problems.append(f"names the module {value.__name__} ({name})")
        return
    inner = getattr(value, "fn", None)                          # a @triton.jit function: read its body
    if inner is not None and hasattr(inner, "__code__"):
        _read_function(inner, problems, seen, depth + 1)
        return
    module = (getattr(value, "__module__", None) or type(value).__module__ or "").split(".")[0]
    if module in _OUTSIDE:
        problems.append(f"names {name}, from {module}")
    elif callable(value) and not isinstance(value, type) and module not in ("triton", "torch", "builtins"):
        _read_function(value, problems, seen, depth + 1)       # a function of the learner's: read it too


def _triton_file(filename: str) -> bool:
    folder = _TRITON_DIR[0] if _TRITON_DIR else None
    return bool(folder) and filename.startswith(folder)


# Libraries that compute on their own arrays, where no PyTorch mode looks, and the ways out of a tensor.
_OUTSIDE = ("numpy", "scipy", "sklearn", "pandas", "jax", "jaxlib", "numba", "cupy", "tensorflow", "mlx")
_LEAVING = {"Tensor.numpy", "Tensor.__array__", "Tensor.__dlpack__", "Tensor.untyped_storage", "Tensor.storage",
            "Tensor._typed_storage", "Tensor.data_ptr", "_VariableFunctionsClass.from_numpy",
            "_VariableFunctionsClass.from_dlpack", "_VariableFunctionsClass.frombuffer"}


_TRITON_CODE, _PASSING_CODE, _LEARNER_CODE = 1, 2, 3      # who a frame's code belongs to (triton mode)


class InModules:
    """A ``sys.setprofile`` hook for one learner call under a :class:`Guard` with ``modules``: it records a violation
    when a function of one of those modules runs, however the learner's code reached it (a helper in another cell,
    an alias, a subclass of the forbidden class)."""

    def __init__(self, guard: Guard):
        self.guard = guard
        self.seen = False

    def __call__(self, frame, event, arg):
        if self.seen or event != "call":
            return
        module = frame.f_globals.get("__name__", "") or ""
        if module.startswith(self.guard.modules):
            self.seen = True
            self.guard.violations.append(
                f"your code ran {module}.{frame.f_code.co_name} (through whatever name or helper reached it): this "
                f"exercise asks you to {self.guard.why}.")


def hook_for(guard: Guard):
    """The profile hook a call under ``guard`` runs with, or None: the data must stay in PyTorch (a closed
    guard), or the code of forbidden modules may not run."""
    if guard.closed:
        return OutsidePyTorch(guard)
    return InModules(guard) if guard.modules else None


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
        # under a TRITON guard: the folder of Triton's package, whose frames may move data (else None)
        self.triton = (_TRITON_DIR[0] if _TRITON_DIR else _triton_dir()) if getattr(guard, "triton", False) else None
        self.kinds: dict = {}

    def _classify(self, code) -> int:
        name = code.co_filename
        if name.startswith(self.triton):
            kind = _TRITON_CODE
        elif name == __file__ or name.startswith(_INSTALLED):
            kind = _PASSING_CODE
        else:
            kind = _LEARNER_CODE
        self.kinds[code] = kind
        return kind

    def __call__(self, frame, event, arg):
        if self.seen or event == "return" or event == "c_return":
            return
        if frame.f_code.co_filename == __file__:          # this check's own reading of storages (_hold)
            return
        if self.triton:
            # Under Triton's interpreter a kernel makes millions of calls: who is responsible for this one is
            # read from each frame's code, classified once (Triton's, passing through, or the learner's).
            kinds, code = self.kinds, frame.f_code
            kind = kinds.get(code) or self._classify(code)
            if kind == _TRITON_CODE:
                if event == "call" and code.co_name == "softmax" and "softmax" in self.guard.names:
                    self.seen = True
                    self.guard.violations.append(
                        f"your kernel called tl.softmax: this exercise asks you to {self.guard.why}. Each key tile "
                        "updates the running max and sum (an online softmax); a softmax of one tile is not the "
                        "softmax of the row.")
                return
            if kind == _PASSING_CODE or event == "call":
                # NumPy, PyTorch or the standard library at work: for whom? (a call: who called it)
                up = frame.f_back if kind == _LEARNER_CODE else frame
                while up is not None:
                    k = kinds.get(up.f_code) or self._classify(up.f_code)
                    if k != _PASSING_CODE:
                        break
                    up = up.f_back
                if up is not None and k == _TRITON_CODE:
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
        if what and self.triton and _moved_by_triton(frame, event):
            return
        if what and not _installed_module_loading(frame, self.outer):
            self.seen = True
            self.guard.violations.append(
                f"your code took its data out of PyTorch ({what}) inside a checked call: the check sees only "
                f"PyTorch's operations, so this exercise's functions compute with them (not NumPy or SciPy). "
                f"This exercise asks you to {self.guard.why}.")


def _moved_by_triton(frame, event) -> bool:
    """Whether Triton's own code is what reaches NumPy or a tensor's memory here: the nearest frame outside
    NumPy, PyTorch and this module's modes (the caller, for a call into one of them) belongs to Triton's package. A learner's
    kernel body runs below Triton's interpreter too, but its own frame is the nearest one when it calls NumPy."""
    start = frame if event == "c_call" else frame.f_back
    while start is not None and (start.f_code.co_filename == __file__ or
                                 (start.f_globals.get("__name__", "") or "").split(".")[0] in _PASSING):
        start = start.f_back
    return start is not None and _triton_frame(start)


_PASSING = _OUTSIDE + ("torch",)     # what stands between Triton's code and the data: NumPy, PyTorch's wrappers


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
                   "course.forbidden", "ctypes", "torch.library", "__main__")
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
    """What in the learner's cells reaches below or around the checks of forbidden calls: the evidence that
    fails every test using those checks.

    Looks at solution cells and cells the learner added or changed (not the lesson's given cells nor
    its tests): PyTorch's dispatcher and mode internals (``torch._C``, ``torch.ops``, ``_pop_mode``,
    ``__torch_dispatch__``, ``as_subclass``...), operators of the learner's own (``torch.library``,
    ``custom_op``), the grader's modules and ``__main__`` (the grading worker), ``ctypes``, and ``getattr``
    on torch with a computed name. Means that ordinary notebooks use too (``sys.modules``, ``importlib``,
    ``eval``, threads and processes) are :func:`means`: reported for a look, never punished; what they could
    reach is checked at run time (the check's own pieces, new threads and processes while it is on).
    """
    return _read(nb, source_nb)[0]


def means(nb, source_nb=None) -> list[str]:
    """Means of reaching around the checks that honest notebooks use too (``"google.colab" in sys.modules``,
    ``importlib.reload``, ``eval`` of a typed expression, ``multiprocessing.cpu_count()``): reported for a
    human to look at, never punished. The harmless idioms are not reported at all."""
    return _read(nb, source_nb)[1]


_MEANS_MODULES = ("importlib", "threading", "_thread", "concurrent", "multiprocessing", "torch.multiprocessing")
_HARMLESS = {"multiprocessing": {"cpu_count"}, "importlib": {"reload"}}


def _read(nb, source_nb=None) -> tuple[list[str], list[str]]:
    """(:func:`tampering`, :func:`means`) of ``nb``."""
    sources, ids = given_cells(source_nb) if source_nb is not None else (set(), set())
    found, seen = [], []
    for i, tree in _cells(nb, sources, ids):
        torchish = set(_TORCHISH)
        harmless: set[int] = set()              # nodes of the harmless idioms
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                torchish |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "torch"}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
                torchish |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Compare) and all(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops):
                harmless |= {id(c) for c in node.comparators}        # "google.colab" in sys.modules
        uses: dict[str, set[str]] = {}         # module alias -> the attributes the cell reads of it
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                uses.setdefault(node.value.id, set()).add(node.attr)
        for node in ast.walk(tree):
            line = getattr(node, "lineno", "?")
            if isinstance(node, ast.Attribute) and node.attr in _TAMPER_ATTRS:
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if node.attr == "library" and not (isinstance(root, ast.Name) and root.id in torchish):
                    continue                                         # plt.style.library, not torch.library
                found.append(f"cell {i} line {line}: .{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name) \
                    and node.value.id == "sys":
                if id(node) not in harmless:
                    seen.append(f"cell {i} line {line}: sys.modules")
            elif isinstance(node, ast.Name) and node.id in _DYNAMIC:
                seen.append(f"cell {i} line {line}: {node.id}")
            elif isinstance(node, ast.Name) and node.id in ("TorchDispatchMode", "TorchFunctionMode"):
                found.append(f"cell {i} line {line}: {node.id}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                mods += [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module else []
                for m in mods:
                    if any(m == t or m.startswith(t + ".") for t in _MEANS_MODULES):
                        top = m.split(".")[0]
                        alias = next((a.asname or a.name for a in node.names if a.name == top), None) \
                            if isinstance(node, ast.Import) else None
                        if not (alias and top in _HARMLESS and uses.get(alias, set()) <= _HARMLESS[top]):
                            seen.append(f"cell {i} line {line}: import {m}")
                        break
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
    return list(dict.fromkeys(found)), list(dict.fromkeys(seen))


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
    """Every piece the check of forbidden calls runs on, by name: each function and class of this module (and
    each method of those classes), the frozen tables the checks read, and ``course.checks.forbidden_targets``. The
    grading worker takes them, with their code, before any learner's code runs, and compares them at each check (a
    notebook that replaced one, or swapped its ``__code__``, fails the tests that use the check and is reported)."""
    import types

    from course import checks

    pieces = {"course.checks.forbidden_targets": checks.__dict__.get("forbidden_targets")}
    for name in ("_DIRECT", "_FAMILY_OF", "_PATTERN_OF", "_MODULE_OF", "_ATEN_NAMES"):      # the frozen tables
        pieces[f"course.forbidden.{name}"] = globals().get(name)
    for name, obj in list(globals().items()):
        if isinstance(obj, types.FunctionType) and obj.__module__ == __name__:
            pieces[f"course.forbidden.{name}"] = obj
        elif isinstance(obj, type) and obj.__module__ == __name__:
            pieces[f"course.forbidden.{name}"] = obj
            for attr, member in list(vars(obj).items()):
                member = getattr(member, "__func__", member)          # staticmethod, classmethod
                if isinstance(member, types.FunctionType):
                    pieces[f"course.forbidden.{name}.{attr}"] = member
    return pieces

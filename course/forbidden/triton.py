"""Lesson 16's Triton watch: every launch's kernel code read before it runs, every block Triton's interpreter makes
measured against the guard's limit."""

from __future__ import annotations

import sys

from course.forbidden.leaving import OUTSIDE, OutsidePyTorch
from course.forbidden.paths import TRITON_DIR, triton_dir, triton_file
from course.forbidden.violations import Kind, Violation


class TritonWatch:
    """While a :data:`TRITON` guard is on: every array Triton's interpreter makes (a ``TensorHandle``) is
    measured against the guard's ``limit``, as the dispatcher measures PyTorch's tensors. Triton is
    imported here, before PyTorch's modes are entered, if the learner's code has not imported it yet."""

    def __init__(self, guard):
        self.guard = guard
        self.saved = None
        self.launch = None

    def start(self):
        if not TRITON_DIR:
            TRITON_DIR.append(triton_dir())
        if TRITON_DIR[0] is None:
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
                guard.violations.append(Violation(Kind.KERNEL_CODE, msg))
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
                guard.violations.append(Violation(Kind.SIZE, msg))
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
    if code is None or id(code) in seen or depth > 20 or triton_file(code.co_filename):
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
    if module in OUTSIDE:
        problems.append(f"names {name}, from {module}")
    elif callable(value) and not isinstance(value, type) and module not in ("triton", "torch", "builtins"):
        _read_function(value, problems, seen, depth + 1)       # a function of the learner's: read it too

"""The guard: a context that fails every call of the forbidden names and their kernels while the learner's code
runs, and says what happened (:attr:`Guard.violations`)."""

from __future__ import annotations

from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from course.forbidden.modes import FunctionsMode, KernelsMode
from course.forbidden.tables import TRITON, kernels_for, modules_for
from course.forbidden.triton import TritonWatch
from course.forbidden.violations import Kind, Violation


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
    above ``limit`` elements. ``violations`` lists what happened: :class:`Violation` values, sentences for the
    learner with their kind.

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
        self._modes = (FunctionsMode(self), KernelsMode(self))
        self._tasks = None
        # A check of "your own softmax" or of a size limit sees only PyTorch's operations: there the
        # learner's calls must also keep their data in PyTorch (see :class:`OutsidePyTorch`).
        self.triton = TRITON in self.names        # ... except where Triton's interpreter moves it
        self.closed = self.limit is not None or bool(self.names & {"softmax", "log_softmax"}) or self.triton
        self._triton_watch = None

    def refuse(self, what: str, kind: Kind = Kind.CALLED):
        msg = Violation(kind, f"your code called {what}: this exercise asks you to {self.why}.")
        self.violations.append(msg)
        raise AssertionError(msg)

    def __enter__(self):
        self._tasks = tasks_created()
        if self.triton:
            self._triton_watch = TritonWatch(self)
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
                self.violations.append(Violation(
                    Kind.NO_LAUNCH, "your code launched no Triton kernel: in this exercise the attention is computed "
                                       "inside your @triton.jit kernels, launched as kernel[grid](...) by the function "
                                       f"under test. This exercise asks you to {self.why}."))
        if self._tasks is not None and tasks_created() != self._tasks:
            self.violations.append(Violation(Kind.THREAD, "your code started a thread or a process while the check of forbidden calls was "
                                   "on: the check watches the thread that calls your function, so the exercise's "
                                   f"functions must do their work in that thread. This exercise asks you to {self.why}."))
        stack = _get_current_dispatch_mode_stack()
        if not stack or stack[-1] is not kernels:
            self.violations.append(Violation(
                Kind.SWITCHED_OFF, "the check of forbidden calls was switched off or covered while your code ran "
                                   "(the dispatch mode it installs was removed or another one was left on top): "
                                   f"this exercise asks you to {self.why}."))
            from torch.utils._python_dispatch import _pop_mode
            while _get_current_dispatch_mode_stack() and kernels in _get_current_dispatch_mode_stack():
                _pop_mode()
        else:
            kernels.__exit__(None, None, None)
        try:
            functions.__exit__(None, None, None)
        except Exception:  # noqa: BLE001 - the stack was tampered with
            self.violations.append(Violation(Kind.SWITCHED_OFF, "the check of forbidden calls (its function mode) was removed "
                                             "while your code ran."))
        return False


def other_threads() -> bool:
    """Whether this process runs a thread besides the calling one (read from /proc; False where unknown)."""
    import os

    try:
        return len(os.listdir("/proc/self/task")) > 1
    except OSError:
        return False

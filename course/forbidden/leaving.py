"""The checks that see what the modes cannot: a call's data taken out of PyTorch (NumPy, SciPy, raw storage), and the
code of a forbidden module running, as ``sys.setprofile`` hooks around one learner call."""

from __future__ import annotations

from course.forbidden.violations import Kind, Violation
from course.forbidden.paths import INSTALLED, TRITON_DIR, OWN_FILES, installed_module_loading, triton_dir, triton_frame


# Libraries that compute on their own arrays, where no PyTorch mode looks, and the ways out of a tensor.
OUTSIDE = ("numpy", "scipy", "sklearn", "pandas", "jax", "jaxlib", "numba", "cupy", "tensorflow", "mlx")
_LEAVING = {"Tensor.numpy", "Tensor.__array__", "Tensor.__dlpack__", "Tensor.untyped_storage", "Tensor.storage",
            "Tensor._typed_storage", "Tensor.data_ptr", "_VariableFunctionsClass.from_numpy",
            "_VariableFunctionsClass.from_dlpack", "_VariableFunctionsClass.frombuffer"}


_TRITON_CODE, _PASSING_CODE, _LEARNER_CODE = 1, 2, 3      # who a frame's code belongs to (triton mode)


class InModules:
    """A ``sys.setprofile`` hook for one learner call under a :class:`Guard` with ``modules``: it records a violation
    when a function of one of those modules runs, however the learner's code reached it (a helper in another cell,
    an alias, a subclass of the forbidden class)."""

    def __init__(self, guard):            # a course.forbidden.guard.Guard
        self.guard = guard
        self.seen = False

    def __call__(self, frame, event, arg):
        if self.seen or event != "call":
            return
        module = frame.f_globals.get("__name__", "") or ""
        if module.startswith(self.guard.modules):
            self.seen = True
            self.guard.violations.append(Violation(
                Kind.MODULE, f"your code ran {module}.{frame.f_code.co_name} (through whatever name or helper reached it): "
                f"this exercise asks you to {self.guard.why}."))


def hook_for(guard):                              # a course.forbidden.guard.Guard
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

    def __init__(self, guard):            # a course.forbidden.guard.Guard
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
        self.triton = (TRITON_DIR[0] if TRITON_DIR else triton_dir()) if getattr(guard, "triton", False) else None
        self.kinds: dict = {}

    def _classify(self, code) -> int:
        name = code.co_filename
        if name.startswith(self.triton):
            kind = _TRITON_CODE
        elif name in OWN_FILES or name.startswith(INSTALLED):
            kind = _PASSING_CODE
        else:
            kind = _LEARNER_CODE
        self.kinds[code] = kind
        return kind

    def __call__(self, frame, event, arg):
        if self.seen or event == "return" or event == "c_return":
            return
        if frame.f_code.co_filename in OWN_FILES:         # this check's own reading of storages (_hold)
            return
        if self.triton:
            # Under Triton's interpreter a kernel makes millions of calls: who is responsible for this one is
            # read from each frame's code, classified once (Triton's, passing through, or the learner's).
            kinds, code = self.kinds, frame.f_code
            kind = kinds.get(code) or self._classify(code)
            if kind == _TRITON_CODE:
                if event == "call" and code.co_name == "softmax" and "softmax" in self.guard.names:
                    self.seen = True
                    self.guard.violations.append(Violation(
                        Kind.KERNEL_CODE, f"your kernel called tl.softmax: this exercise asks you to {self.guard.why}. "
                        "Each key tile updates the running max and sum (an online softmax); a softmax of one tile is "
                        "not the softmax of the row."))
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
            if qual in _LEAVING or module.split(".")[0] in OUTSIDE or (qual == "Tensor.tolist" and self.guard.limit):
                what = f"{module + '.' if module else ''}{qual}"
        elif event == "call":
            module = frame.f_globals.get("__name__", "") or ""
            if module.split(".")[0] in OUTSIDE:
                what = f"{module}.{frame.f_code.co_name}"
        if what and self.triton and _moved_by_triton(frame, event):
            return
        if what and not installed_module_loading(frame, self.outer):
            self.seen = True
            self.guard.violations.append(Violation(
                Kind.DATA_LEFT, f"your code took its data out of PyTorch ({what}) inside a checked call: the check sees "
                f"only PyTorch's operations, so this exercise's functions compute with them (not NumPy or SciPy). "
                f"This exercise asks you to {self.guard.why}."))


def _moved_by_triton(frame, event) -> bool:
    """Whether Triton's own code is what reaches NumPy or a tensor's memory here: the nearest frame outside
    NumPy, PyTorch and this module's modes (the caller, for a call into one of them) belongs to Triton's package. A learner's
    kernel body runs below Triton's interpreter too, but its own frame is the nearest one when it calls NumPy."""
    start = frame if event == "c_call" else frame.f_back
    while start is not None and (start.f_code.co_filename in OWN_FILES or
                                 (start.f_globals.get("__name__", "") or "").split(".")[0] in _PASSING):
        start = start.f_back
    return start is not None and triton_frame(start)


_PASSING = OUTSIDE + ("torch",)     # what stands between Triton's code and the data: NumPy, PyTorch's wrappers

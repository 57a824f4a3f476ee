"""How a submission's run can fail, as the judge sees it: the learner's exception (rebuilt as a builtin one of
the same type where possible), or the worker gone (dead, stalled, out of protocol, out of time)."""

from __future__ import annotations

import builtins

class RemoteError(Exception):
    """An exception raised by the student's code in the sandbox (its type name and message)."""


class WorkerGone(Exception):
    """The worker died, broke the protocol, or ran past its time limit."""

    def __init__(self, message: str, *, timeout: bool = False):
        super().__init__(message)
        self.timeout = timeout


class Exhausted(WorkerGone):
    """The learner's code stopped its worker more than ``MAX_RESTARTS`` times in one notebook (it died,
    ran out of time, or was killed by a process the learner left running): the learner's doing, not the
    grader's, so the remaining cells score 0 and the verdict is ``kernel-died``, never ``grader-error``."""


class NotebookLimit(Exhausted):
    """The notebook's whole time (``--notebook-timeout``) ran out, at a restart or between cells: the remaining
    cells score 0 and the verdict is ``timeout`` (the learner's, like :class:`Exhausted`)."""

    def __init__(self, message: str):
        super().__init__(message, timeout=True)


class NoFork(RemoteError):
    """The worker could not fork the tests' process (its reply's ``refusal``: the learner's code holds every process
    it may start)."""


class ProcessLimit(WorkerGone):
    """The test's fork could not start: the learner's code holds every process and thread its sandbox may
    have. A restart would replay the same cells into the same state, so the notebook ends here."""


# What the learner sees of their own exception raised after hidden inputs reached their code: its type, never its
# text (which their code writes, and could repeat the hidden inputs). run.py adds where it happened and what the
# cell checks (see ``explained``), so that the failure still says which property broke.
WITHHELD = "raised by your code after a hidden check's inputs reached it (its message is not shown: it could repeat them)"

BUILTIN_ERRORS = {n: getattr(builtins, n) for n in dir(builtins)
                   if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), Exception)}


def rebuild_error(info) -> Exception:
    """The student's exception as a local one of the same builtin type (else RemoteError)."""
    name = str(info.get("type", "Error"))[:60] if isinstance(info, dict) else "Error"
    message = str(info.get("message", ""))[:2000] if isinstance(info, dict) else str(info)[:2000]
    cls = BUILTIN_ERRORS.get(name)
    if cls is not None and cls not in (SystemExit, KeyboardInterrupt):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001
            pass
    return RemoteError(f"{name}: {message}" if message else name)

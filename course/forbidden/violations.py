"""What a check of forbidden calls found, typed: a :class:`Violation` is the sentence the learner reads (it is a
``str``) and its :class:`Kind`. Whether a notebook went *around* the check (reported ``suspicious``), as opposed
to calling a forbidden function, is decided from the kind, never from the sentence's wording (:data:`EVASIONS`).
Between the sandbox and the judge a violation travels as ``{"kind": ..., "text": ...}``."""

from __future__ import annotations

from enum import Enum

__all__ = ["Kind", "Violation", "EVASIONS"]


class Kind(str, Enum):
    """What kind of thing a check found."""

    CALLED = "called"                  # a forbidden function, or one of its kernels, was called
    SIZE = "size"                      # a tensor (or a Triton block) as large as the whole matrix the check forbids
    HELD = "held"                      # tensors held together as large as that matrix
    WORK = "work"                      # PyTorch computed too much outside the Triton kernels
    NO_LAUNCH = "no-launch"            # no Triton kernel was launched where one must do the work
    KERNEL_CODE = "kernel-code"        # a kernel names what it may not (NumPy, raw data, tl.softmax)
    OTHER_NAME = "other-name"          # a kernel computing the forbidden thing under another name
    OWN_OPERATOR = "own-operator"      # an operator the learner's code defined, whose body the check cannot see
    MODULE = "module"                  # the code of a forbidden module ran, through whatever reached it
    DATA_LEFT = "data-left"            # the call's data left PyTorch (NumPy, SciPy, raw storage)
    THREAD = "thread"                  # a thread or a process started while the check was on
    OTHER_THREAD = "other-thread"      # another thread of the learner's ran when a checked call started
    SWITCHED_OFF = "switched-off"      # one of the check's modes or hooks was removed or covered
    REPLACED = "replaced"              # a piece of the check was replaced
    WOKE = "woke"                      # the process the tests had stopped was woken
    NATIVE = "native"                  # the notebook runs native code of its own
    UNREADABLE = "unreadable"          # what the sandbox said is not a violation the judge knows


# Kinds that mean the learner's code went around the check (a notebook reported `suspicious`), not only that it
# called a forbidden function.
EVASIONS = frozenset({Kind.OTHER_NAME, Kind.OWN_OPERATOR, Kind.MODULE, Kind.DATA_LEFT, Kind.THREAD,
                      Kind.OTHER_THREAD, Kind.SWITCHED_OFF, Kind.REPLACED, Kind.WOKE, Kind.NATIVE})


class Violation(str):
    """A sentence for the learner, with its :class:`Kind` (``.kind``)."""

    def __new__(cls, kind: Kind | str, text: str):
        self = super().__new__(cls, text)
        self.kind = Kind(kind)
        return self

    @property
    def text(self) -> str:
        return str.__str__(self)

    @property
    def evasion(self) -> bool:
        return self.kind in EVASIONS

    def to_wire(self) -> dict:
        return {"kind": self.kind.value, "text": self.text}

    @classmethod
    def from_wire(cls, data, *, limit: int = 2000) -> "Violation":
        """A violation as the sandbox sent it, checked: a known kind and a string, else :attr:`Kind.UNREADABLE`."""
        if isinstance(data, dict) and type(data.get("text")) is str and data.get("kind") in {k.value for k in Kind}:
            return cls(data["kind"], data["text"][:limit])
        return cls(Kind.UNREADABLE, "the sandbox reported a violation in a form the grader does not know")

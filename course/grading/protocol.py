"""The contracts between the grading processes, typed, in one place.

Four protocols carry a submission through grading:

1. **grader -> judge** (this module): one :class:`Spec` per submission, one :class:`Reply` back, each a
   JSON line on the judge's stdin and result channel (:mod:`course.grading.pool`; the Dask executor
   sends the same objects). A reply is validated as it is decoded (:meth:`Reply.decode`): a wrong type
   is a :class:`ProtocolError`, never a silently different grade. The submission's :class:`Status`
   is decided from the reply's typed fields (:meth:`Reply.status`), never from the wording of a message.
2. **grader -> the judges' fork server** (:mod:`course.grading.judge.__main__`): :data:`FORK` with two
   descriptors, answered by :data:`FORKED` with the judge's pid and a pidfd.
3. **judge -> the sandbox's PID 1** (:mod:`course.grading.sandboxed.zygote`) and 4. **judge -> worker**
   (:mod:`course.grading.sandboxed.wire`): declared in ``sandboxed/wire.py`` (``ZygoteOp``,
   ``ZygoteEvent``, ``WorkerOp``), since the code in the sandbox imports nothing else of the grader.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from enum import Enum

__all__ = ["Status", "STATUSES", "OK_STATUSES", "EventKind", "Event", "CellVerdict", "Spec", "Reply", "ProtocolError",
           "FORK", "FORKED"]


class Status(str, Enum):
    """What became of one submission (``grades.csv``'s last column)."""

    GRADED = "graded"
    TIMEOUT = "timeout"
    TEST_CELLS_DELETED = "test-cells-deleted"
    KERNEL_DIED = "kernel-died"
    SUSPICIOUS = "suspicious"
    INVALID_NOTEBOOK = "invalid-notebook"
    MISSING_NOTEBOOK = "missing-notebook"
    UNKNOWN_LESSON = "unknown-lesson"
    GRADER_ERROR = "grader-error"

    def __str__(self) -> str:
        return self.value


STATUSES = {
    Status.GRADED.value: "graded normally",
    Status.TIMEOUT.value: "a cell ran past --timeout and was stopped; the rest of the notebook was still graded",
    Status.TEST_CELLS_DELETED.value: "the student deleted test cells: those score 0, the rest are graded",
    Status.KERNEL_DIED.value: "the student's process died (os._exit, a crash, out of memory); restarted, the rest graded",
    Status.SUSPICIOUS.value: "graded, but the code tampers with grading or reaches outside: look at it by hand",
    Status.INVALID_NOTEBOOK.value: "not a readable notebook (truncated JSON, a link, a pipe or device, over a size "
                                   "cap): 0 points, never read through a link",
    Status.MISSING_NOTEBOOK.value: "no notebook in the lesson folder: 0 points",
    Status.UNKNOWN_LESSON.value: "a folder that is not a lesson of this course",
    Status.GRADER_ERROR.value: "the grader itself failed on this submission (a bug: please report it): 0 points",
}
OK_STATUSES = (Status.GRADED.value,)


class ProtocolError(ValueError):
    """A message that does not follow its contract (a bug, or a process that is not what it claims)."""


class EventKind(str, Enum):
    """What happened to a submission's run, as the judge saw it."""

    TIMEOUT = "timeout"      # a cell, a replayed cell or a test ran past its limit (the learner's)
    DIED = "died"            # the learner's process died, or held every process it may start (the learner's)
    SANDBOX = "sandbox"      # the grader's sandbox failed: grader-error, graded again by the next run


@dataclass(frozen=True)
class Event:
    """One event of a run: its kind, and the sentence the instructor reads (``"timeout: cell 5"``)."""

    kind: EventKind
    text: str

    def to_json(self) -> dict:
        return {"kind": self.kind.value, "text": self.text}

    @classmethod
    def from_json(cls, data) -> "Event":
        if not (isinstance(data, dict) and isinstance(data.get("text"), str)):
            raise ProtocolError(f"an event is {{kind, text}}, not {data!r:.200}")
        try:
            return cls(EventKind(data.get("kind")), data["text"])
        except ValueError:
            raise ProtocolError(f"unknown event kind {data.get('kind')!r:.60}") from None


@dataclass(frozen=True)
class CellVerdict:
    """One test cell's verdict, decided by the judge."""

    grade_id: str
    points: float
    max_points: float
    passed: bool
    message: str
    deleted: bool = False

    @classmethod
    def from_json(cls, data) -> "CellVerdict":
        if not isinstance(data, dict):
            raise ProtocolError(f"a cell verdict is an object, not {type(data).__name__}")
        try:
            verdict = cls(grade_id=data["grade_id"], points=float(data["points"]), max_points=float(data["max_points"]),
                          passed=data["passed"], message=data["message"], deleted=data.get("deleted", False))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"a malformed cell verdict ({type(exc).__name__}: {exc})") from None
        if not (isinstance(verdict.grade_id, str) and isinstance(verdict.message, str) and
                type(verdict.passed) is bool and type(verdict.deleted) is bool):
            raise ProtocolError("a cell verdict with fields of the wrong types")
        return verdict


@dataclass
class Spec:
    """The grader's request to a judge: grade one notebook.

    Args:
        notebook: the submission, as intake wrote it (sanitised against the release) into the batch's
            scratch folder.
        source: the lesson's instructor notebook (the workspace's ``source/``: its test cells, hidden
            tests included, are the ones that run).
        release: the lesson's released notebook (what learners got): the feedback page's visible tests.
        timeout: seconds per cell (``--timeout``); ``notebook_timeout``: seconds for the whole notebook.
        scratch_base: where the judge's sandboxes keep their host-side folders.
        sandbox: False only with ``--unsafe-no-sandbox``.
        limits: :class:`course.grading.sandbox.Limits` as a dict (memory, processes, CPU...).
        files: the lesson's data files, copied into the sandbox's working folder.
        submission: ``student/lesson``, for messages.
        warm: modules the warm sandbox imports before any submission (the lessons' imports).
        only_cells: grade these test cells only (the course's own tests of its tests); None: every cell.
    """

    notebook: str
    source: str
    release: str = ""
    timeout: int = 60
    notebook_timeout: int = 600
    scratch_base: str = ""
    sandbox: bool = True
    limits: dict = field(default_factory=dict)
    files: list = field(default_factory=list)
    submission: str = ""
    warm: list = field(default_factory=list)
    only_cells: list | None = None

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, line: str | dict) -> "Spec":
        data = json.loads(line) if isinstance(line, str) else line
        if not isinstance(data, dict):
            raise ProtocolError("a spec is a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ProtocolError(f"a spec with unknown keys {sorted(unknown)}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ProtocolError(f"a malformed spec ({exc})") from None


@dataclass
class Reply:
    """A judge's answer for one notebook: the verdicts, what happened, the pages; or ``error`` when the
    judge itself failed (the submission is then a grader-error)."""

    cells: list[CellVerdict] = field(default_factory=list)
    outputs: dict = field(default_factory=dict)       # cell index (str) -> {"output": str, "error": {type, message}}
    events: list[Event] = field(default_factory=list)
    suspicious: list[str] = field(default_factory=list)
    phases: dict = field(default_factory=dict)        # seconds spent: start, cells, tests, feedback
    seconds: float = 0.0
    autograded: str | None = None                     # the notebook as graded, for the instructor (JSON text)
    feedback_html: str | None = None                  # the feedback page, for the learner
    feedback_error: str | None = None                 # why no page was written
    judge_exits: bool = False                         # the judge's watchdog ended it: start a fresh one
    error: str | None = None                          # the judge failed on this submission

    def to_json(self) -> dict:
        data = asdict(self)
        data["events"] = [e.to_json() for e in self.events]
        return data

    def encode(self) -> str:
        return json.dumps(self.to_json())

    @classmethod
    def decode(cls, line: str | dict) -> "Reply":
        """A reply as the judge sent it, checked field by field (:class:`ProtocolError` if anything is off)."""
        try:
            data = json.loads(line) if isinstance(line, str) else line
        except ValueError as exc:
            raise ProtocolError(f"a reply that is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ProtocolError("a reply is a JSON object")
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ProtocolError(f"a reply with unknown keys {sorted(unknown)}")
        reply = cls()
        if data.get("error") is not None:
            reply.error = str(data["error"])
            return reply
        for name, kind in (("cells", list), ("outputs", dict), ("events", list), ("suspicious", list),
                           ("phases", dict)):
            value = data.get(name, kind())
            if not isinstance(value, kind):
                raise ProtocolError(f"a reply's {name} is a {kind.__name__}")
        reply.cells = [CellVerdict.from_json(c) for c in data.get("cells", [])]
        reply.outputs = data.get("outputs", {})
        reply.events = [Event.from_json(e) for e in data.get("events", [])]
        reply.suspicious = [str(s) for s in data.get("suspicious", [])]
        reply.phases = {str(k): float(v) for k, v in data.get("phases", {}).items()}
        reply.seconds = float(data.get("seconds", 0.0))
        for name in ("autograded", "feedback_html", "feedback_error"):
            value = data.get(name)
            if value is not None and not isinstance(value, str):
                raise ProtocolError(f"a reply's {name} is text")
            setattr(reply, name, value)
        reply.judge_exits = data.get("judge_exits", False) is True
        return reply

    def of_kind(self, kind: EventKind) -> list[str]:
        return [e.text for e in self.events if e.kind is kind]

    def status(self) -> Status:
        """The submission's status, from the typed fields alone."""
        if self.error is not None or self.of_kind(EventKind.SANDBOX):
            return Status.GRADER_ERROR
        if self.suspicious:
            return Status.SUSPICIOUS
        if self.of_kind(EventKind.DIED):
            return Status.KERNEL_DIED
        if self.of_kind(EventKind.TIMEOUT):
            return Status.TIMEOUT
        if any(c.deleted for c in self.cells):
            return Status.TEST_CELLS_DELETED
        return Status.GRADED


# The fork server's messages (protocol 2): the grader sends {"op": FORK, "slot": k} with two descriptors
# (the judge's stdin and stdout); the server answers {"ev": FORKED, "pid": ..., "slot": k} with a pidfd.
FORK = "fork"
FORKED = "forked"

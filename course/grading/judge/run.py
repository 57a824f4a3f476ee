"""Grading one submission: the learner's cells run in the sandbox, each test cell's trusted code runs here
with the learner's names as stand-ins, and the verdicts are decided here."""

from __future__ import annotations

import contextlib
import builtins
import random
import time
import weakref
from pathlib import Path

import nbformat
import torch

from course import checks
from course.grading import sandbox
from course.grading.feedback import graded_notebook, render_feedback
from course.grading.judge.explain import explained
from course.grading.judge.errors import BUILTIN_ERRORS, Exhausted, NoFork, NotebookLimit, ProcessLimit, RemoteError, WorkerGone
from course.grading.judge.lesson import compiled, free_names, lesson_notebook, memoised, solution_sources, trusted_context
from course.grading.judge.remote import Remote
from course.grading.judge import reading
from course.grading.sandboxed.wire import WorkerOp
from course.forbidden.violations import Kind, Violation
from course.grading.judge.scrutiny import forbidden_aliases, suspicious
from course.grading.judge.session import MISSING, Session
from course.grading.judge.watchdog import NOT_ASKED, WATCHDOG, verdicts_of
from course.grading.protocol import CellVerdict, Event, EventKind, Reply, Spec

MAX_RESTARTS = 6


class _ForbidHook:
    def __init__(self, session_ref):
        self.session_ref = session_ref

    def __call__(self, names, why, limit=None, work=None):

        @contextlib.contextmanager
        def hook():
            s = self.session_ref()
            s.forbid(names, why, limit, work)
            _, first = s.census()          # nothing but the function under test runs from here
            error = None
            try:
                yield
            except BaseException as exc:  # noqa: BLE001
                error = exc
            started, last = s.census() if s.proc is not None and s.proc.poll() is None else (0, first)
            called = s.unforbid() if s.proc is not None and s.proc.poll() is None else []
            seen = []                      # what the judge itself saw (the sandbox's PID 1 told it), before the worker's word
            if started or last != first:   # the sandbox's PID 1 saw a process or a thread start meanwhile
                seen.append(Violation(Kind.THREAD, f"your code started a thread or a process while the check of forbidden "
                                      f"calls was on (seen by the sandbox itself): this exercise asks you to {why}, in the "
                                      "process that calls your function."))
            if s.native:                   # machine code of the notebook's own: below every check (PID 1 saw it)
                seen.insert(0, Violation(Kind.NATIVE, f"your notebook runs native code it compiled or wrote itself "
                                         f"({s.native[0]}): machine code runs below the check of forbidden calls, which sees "
                                         "Python and PyTorch's operators only, so the tests that check this exercise's rule "
                                         f"fail for a notebook that loads it. This exercise asks you to {why}."))
            if s.worker_woke:              # the tests' fork woke the stopped learner's process
                seen.insert(0, Violation(Kind.WOKE, f"your code woke the process the tests had stopped (its own threads "
                                         f"could work for the function under test): this exercise asks you to {why}, in "
                                         "the process that calls your function."))
            called = seen + called
            if called:
                evasions = [c.text[:300] for c in called if c.evasion]
                if evasions and len(s.lies) < 5:        # reaching around the check, not a plain forbidden call
                    s.lies.append(f"went around the check of forbidden calls: {evasions[0]}")
                raise AssertionError(called[0].text[:2000])
            if error is not None:
                raise error
        return hook()


def _message(exc: BaseException, timeout: int) -> str:
    if isinstance(exc, WorkerGone):
        if exc.timeout:
            return f"this cell ran past the time limit ({timeout} s) and was stopped (an infinite loop, or very slow code?)"
        return str(exc)
    if isinstance(exc, NameError) and not getattr(exc, "from_learner", False):     # the test cell's own lookup
        return f"{exc}: run (or fix) the cell that defines it"
    if isinstance(exc, AssertionError):
        text = str(exc).strip()
        return f"AssertionError: {text}" if text else "AssertionError (a check failed without a message)"
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text and not isinstance(exc, RemoteError) else (text or name)


class _Outputs:
    """What the feedback page shows of the learner's cells: checked data, capped per cell and per
    notebook. Cells that ran after a test cell show no output and only a builtin error's name: a
    submission that defeats the test's fork could have kept the test's hidden inputs and would print
    them there."""

    PER_CELL = 21_000           # the worker keeps 20 000 characters and says how many more there were
    PER_NOTEBOOK = 200_000

    def __init__(self):
        self.left = self.PER_NOTEBOOK

    def take(self, reply, *, after_a_test: bool) -> dict:
        if not isinstance(reply, dict):
            return {}
        out = reply.get("output") if isinstance(reply.get("output"), str) else ""
        err = reply.get("error") if isinstance(reply.get("error"), dict) else None
        error = None
        if err is not None:
            name = str(err.get("type", "Error"))
            name = name if name.isidentifier() and len(name) <= 60 else "Error"
            error = {"type": name, "message": _cap(err.get("message", ""), 2000)}
            if after_a_test:
                error = {"type": name if name in BUILTIN_ERRORS else "Error",
                         "message": "(the message is not shown: this cell ran after a test cell)"}
        if after_a_test:
            note = "[output not shown: this cell ran after a test cell, and only outputs of cells before the first " \
                   "test reach this page]" if out else ""
            return {"output": note, "error": error}
        text = _cap(out, self.PER_CELL)
        if len(text) > self.left:
            text = text[:max(0, self.left)] + "\n... [this notebook's output is over the page's limit; the rest is not kept]"
        self.left -= len(text)
        if error is not None:
            self.left -= len(error["message"])
            if self.left < 0:
                error["message"] = "(not kept: over the page's limit)"
        return {"output": text, "error": error}


def grade_submission(spec: Spec | dict) -> Reply:
    """Grade one notebook (:class:`course.grading.protocol.Spec`); the verdicts, events and pages as a
    :class:`course.grading.protocol.Reply`."""
    return SubmissionRun(spec if isinstance(spec, Spec) else Spec.decode(spec)).run()


class SubmissionRun:
    """One submission, walked cell by cell: the learner's cells run in the sandbox's worker, each test cell's
    trusted code runs here (:func:`run_test`), in a fork of the worker made before a run of test cells
    (:func:`fork_for_tests`). A cell that times out or kills the worker restarts it, replaying the cells so
    far; past ``MAX_RESTARTS`` the notebook ends there (the learner's doing)."""

    def __init__(self, spec: Spec):
        self.t0 = time.perf_counter()
        self.spec = spec
        self.nb = nbformat.read(spec.notebook, as_version=4)
        self.source, self.memo = lesson_notebook(spec.source)
        self.timeout = int(spec.timeout)
        # One deadline for the whole notebook (--notebook-timeout), which every cell, test, restart, replay,
        # fork and watchdog below respects: the notebook ends within it plus one cell's limit at most.
        self.notebook_timeout = int(spec.notebook_timeout)
        self.total_deadline = time.monotonic() + self.notebook_timeout
        self.tests = {c.metadata.nbgrader.grade_id: c for c in self.source.cells
                      if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")}
        experiments = [c for c in self.source.cells if "experiment" in c.get("metadata", {}).get("tags", [])]
        # An experiment cell is known by its id, or by its source where a notebook has no ids (nbformat 4.4,
        # as Colab and older Jupyter save it: every experiment then ran, 57 s for lesson 12 instead of 1.5).
        self.experiments = {c.get("id") for c in experiments if c.get("id")}
        self.experiment_sources = {c.source for c in experiments}
        self.context = memoised(self.memo, "context", lambda: trusted_context(self.source))
        self.defined_by_student = solution_sources(self.nb)
        self.session = Session(Path(spec.scratch_base), use_sandbox=bool(spec.sandbox), limits=sandbox.Limits(**spec.limits))
        self.session.until, self.session.hard_until = self.total_deadline, self.total_deadline + self.timeout
        self.session.files = list(spec.files)
        self.session.warm = [str(m) for m in spec.warm]
        self.outputs: dict[int, dict] = {}
        self.results: dict[str, dict] = {}
        self.executed: list[tuple[int, str]] = []      # the learner's cells so far, replayed after a restart
        self.events: list[Event] = []
        self.pasted: list[str] = []
        self.tested = False                            # a test cell has run: later outputs are not shown
        self.only = set(spec.only_cells) if spec.only_cells is not None else None
        self.fork = None                               # while test cells run: the stand-ins made before the fork
        self.shown = _Outputs()
        self.restarts = 0
        self.dead = False
        self.phase = {"start": 0.0, "cells": 0.0, "tests": 0.0}

    def run(self) -> Reply:

        hooks = checks.GradingHooks(forbid=_ForbidHook(weakref.ref(self.session)),
                                    tampering=tuple(reading.tampering(self.nb, self.source)))
        try:
            with checks.graded_by(hooks):     # reaching around forbid() fails the tests that use it
                self._walk()
        except WorkerGone as exc:
            self.events.append(Event(EventKind.SANDBOX, f"sandbox: {exc}"))
        finally:
            self.session.stop(graceful=True)
            self.session.close()
        return self._reply(list(hooks.tampering))

    def _walk(self) -> None:
        s0 = time.perf_counter()
        self.session.start()
        self.phase["start"] += time.perf_counter() - s0
        for idx, cell in enumerate(self.nb.cells):
            if cell.cell_type != "code" or self.dead:
                continue
            if self._out_of_time(f"cell {idx}"):
                return
            meta = cell.get("metadata", {}).get("nbgrader", {})
            gid = meta.get("grade_id")
            if gid in self.tests:
                self._test_cell(idx, gid)
            elif not (meta.get("grade") or cell.get("id") in self.experiments or cell.source in self.experiment_sources):
                self._learner_cell(idx, cell.source)

    def _test_cell(self, idx: int, gid: str) -> None:
        results = self.results
        if gid in results:                    # a test cell pasted again: one verdict per test, its first
            self.pasted.append(f"cell {idx}: test cell {gid} pasted again (ignored)")
            return
        if self.only is not None and gid not in self.only:
            results[gid] = {"passed": False, "message": NOT_ASKED, "restart": None}
            return
        self.tested = True
        c0 = time.perf_counter()
        # Tests always talk to a fork of the worker, even after its last cell: the worker is then stopped, and
        # the fork has one thread (a learner's OpenMP team or tqdm's monitor thread stay in the worker).
        if self.fork is None:
            try:
                self.fork = fork_for_tests(self.session, self.timeout, self.total_deadline)
            except ProcessLimit as exc:
                results[gid] = {"passed": False, "message": str(exc), "restart": None}
                self.events.append(Event(EventKind.DIED, f"died: process limit reached (cell {idx}); the notebook "
                                                         "was stopped there"))
                self.dead = True
                return
            except WorkerGone as exc:
                results[gid] = {"passed": False, "message": _message(exc, self.timeout),
                                "restart": "timeout" if exc.timeout else "died"}
        if gid not in results:
            if WATCHDOG.out is not None:      # the judge's own work in this cell: bounded too
                WATCHDOG.arm(min(time.monotonic() + self.timeout * 1.5 + 2, self.total_deadline + 2), gid, self.timeout,
                             self.tests, results, self.nb)
            try:
                results[gid] = run_test(self.session, self.tests[gid], self.context, self.defined_by_student,
                                        self.timeout, self.total_deadline)
            finally:
                WATCHDOG.disarm()
        self.phase["tests"] += time.perf_counter() - c0
        restart = results[gid].get("restart")
        if restart:
            self.fork = None
            self.events.append(Event(EventKind.TIMEOUT if restart == "timeout" else EventKind.DIED, restart))
            self.dead = not self._restart_or_stop()

    def _learner_cell(self, idx: int, source: str) -> None:
        c0 = time.perf_counter()
        session = self.session
        try:
            if self.fork is not None:
                self.fork, known = None, self.fork
                end_tests(session, known, self.timeout, self.total_deadline)
            session.deadline = min(time.monotonic() + self.timeout, self.total_deadline)
            reply = session.request(WorkerOp.CELL, source=source, index=idx)
            self.outputs[idx] = self.shown.take(reply, after_a_test=self.tested)
            self.executed.append((idx, source))
        except WorkerGone as exc:
            what = "timeout" if exc.timeout else "died"
            self.outputs[idx] = {"output": "", "error": {"type": "CellTimeoutError" if exc.timeout else "DeadKernel",
                                                         "message": _message(exc, self.timeout)}}
            self.events.append(Event(EventKind.TIMEOUT if exc.timeout else EventKind.DIED, f"{what}: cell {idx}"))
            self.dead = not self._restart_or_stop()
        finally:
            session.deadline = None
            self.phase["cells"] += time.perf_counter() - c0

    def _restart(self) -> None:
        """A fresh worker with the learner's cells so far replayed. A sandbox that fails to start raises
        WorkerGone (the grader's failure); a replayed cell that dies again counts as one more stop, and
        more than MAX_RESTARTS stops raise Exhausted (the learner's)."""
        session = self.session
        while True:
            session.stop(graceful=False)
            self.restarts += 1
            if self.restarts > MAX_RESTARTS:
                raise Exhausted(f"the notebook was stopped {self.restarts} times (it died or ran out of time again "
                                "after each restart); the remaining cells were not graded")
            if time.monotonic() >= self.total_deadline:
                raise NotebookLimit(self._limit_text())
            s0 = time.perf_counter()
            try:
                session.start(until=self.total_deadline)
            except WorkerGone:
                if time.monotonic() >= self.total_deadline:      # the notebook's time ran out while it restarted
                    raise NotebookLimit(self._limit_text()) from None
                raise
            self.phase["start"] += time.perf_counter() - s0
            try:
                for idx, src in self.executed:
                    session.deadline = min(time.monotonic() + self.timeout, self.total_deadline)
                    try:
                        session.request(WorkerOp.CELL, source=src, index=idx)
                    finally:
                        session.deadline = None
            except WorkerGone as exc:
                self.events.append(Event(EventKind.TIMEOUT if exc.timeout else EventKind.DIED,
                                         f"{'timeout' if exc.timeout else 'died'}: replaying cell {idx}"))
                continue
            return

    def _limit_text(self) -> str:
        return (f"the notebook ran past its time limit ({self.notebook_timeout} s for the whole notebook); the "
                "remaining cells were not graded")

    def _out_of_time(self, where: str) -> bool:
        """Past the notebook's deadline: the notebook ends here (its remaining tests score 0, "not graded")."""
        if time.monotonic() < self.total_deadline:
            return False
        self.events.append(Event(EventKind.TIMEOUT, f"timeout: {self._limit_text()} (at {where})"))
        self.dead = True
        return True

    def _restart_or_stop(self) -> bool:
        """:meth:`_restart`; False when the notebook ends here (the event says whose failure it was)."""
        try:
            self._restart()
            return True
        except NotebookLimit as exc:
            self.events.append(Event(EventKind.TIMEOUT, f"timeout: {exc}"))
        except Exhausted as exc:
            self.events.append(Event(EventKind.DIED, f"died too often: {exc}"))
        except WorkerGone as exc:
            self.events.append(Event(EventKind.SANDBOX, f"sandbox: {exc}"))
        return False

    def _reply(self, tampering: list[str]) -> Reply:
        session, nb, source = self.session, self.nb, self.source
        if session.left_behind > 2000:
            self.pasted.append(f"left {session.left_behind} files and folders in the sandbox (removed)")
        if session.left_running:
            self.pasted.append(f"left {session.left_running} process(es) running when its tests began (ended then: "
                               "tests call a submission's functions in one process, with nothing else running)")
        if session.woke_count:
            self.pasted.append("woke the process the tests had stopped (SIGCONT from the tests' fork)")
        if session.started_in_tests:
            self.pasted.append(f"started {session.started_in_tests} process(es) while its tests ran (each ended "
                               "before the next test or check)")

        found = list(dict.fromkeys(self.pasted + session.lies + suspicious(nb, source) + tampering +
                                   reading.means(nb, source) +
                                   forbidden_aliases(nb, source, self.memo)))
        reply = Reply(cells=[CellVerdict(**c) for c in verdicts_of(self.tests, self.results, nb)],
                      outputs={str(k): v for k, v in self.outputs.items()}, events=self.events[:50],
                      suspicious=found[:50], phases={k: round(v, 3) for k, v in self.phase.items()})
        if self.spec.release:
            # The pages are rendered here, in parallel judge processes, not in the grader's one process.
            f0 = time.perf_counter()
            release, _ = lesson_notebook(self.spec.release)
            judged = reply.to_json()
            try:
                reply.autograded = nbformat.writes(graded_notebook(nb, source, release, judged, for_student=False))
                reply.feedback_html = render_feedback(graded_notebook(nb, source, release, judged, for_student=True))
            except Exception as exc:  # noqa: BLE001 - feedback is a courtesy; never lose the grade over it
                reply.feedback_error = f"{type(exc).__name__}: {exc}"
            reply.phases["feedback"] = round(time.perf_counter() - f0, 3)
        reply.seconds = round(time.perf_counter() - self.t0, 3)
        reply.phases["judge"] = reply.seconds    # the notebook's whole time in its judge: what --notebook-timeout bounds
        return reply


def _hidden_block_lines(src: str) -> set[int]:
    """Line numbers (1-based) between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``."""
    lines, inside = set(), False
    for number, line in enumerate(src.splitlines(), 1):
        if "### BEGIN HIDDEN TESTS" in line:
            inside = True
        elif "### END HIDDEN TESTS" in line:
            inside = False
        elif inside:
            lines.add(number)
    return lines


def run_test(session: Session, cell, context: dict, student_defs: dict, timeout: int, total_deadline: float) -> dict:
    """Run one test cell's trusted code here, the learner's names as stand-ins. Returns its verdict.
    (It talks to a fork of the worker, made by :func:`fork_for_tests` before it.)"""
    src = cell.source
    ns = dict(context)
    ns.update(session.test_defs)
    torch.manual_seed(0)
    random.seed(0)
    try:
        # optional: NumPy's seed, where NumPy is installed
        import numpy as np
        np.random.seed(0)
    except ImportError:  # pragma: no cover
        pass
    session.deadline = min(time.monotonic() + timeout, total_deadline)
    filename = f"<test {cell.metadata.nbgrader.grade_id}>"
    try:
        session.census()                 # whatever an earlier test's calls started ends before this test
    except WorkerGone as exc:
        session.deadline = None
        return {"passed": False, "message": _cap(_message(exc, timeout), 3000), "restart": "died"}
    session.hidden_lines = (filename, _hidden_block_lines(src))
    session.timed_out_in = None
    session.ran_triton = False
    injected: list[str] = []
    before: dict = {}                    # the names taken from the notebook, as the cell began
    try:
        for name in free_names(src):
            if name in ns or hasattr(builtins, name):
                continue
            value = session.request(WorkerOp.GLOBAL, name=name)
            if value is MISSING:
                continue
            if isinstance(value, Remote) or type(value) is Remote:
                if name in student_defs:
                    object.__getattribute__(value, "_r_extra")["__course_source__"] = student_defs[name]
            ns[name] = value
            injected.append(name)
        before = {k: ns[k] for k in injected}
        code = compiled(src, filename)
        with torch.random.fork_rng(devices=[]):
            exec(code, ns)
        passed, message, restart = True, "", None
    except WorkerGone as exc:
        passed, restart = False, "timeout" if exc.timeout else "died"
        running = _running(session, ns, injected) if exc.timeout else None
        message = (f"this cell ran past the time limit ({timeout} s) while your {running} was running, and was "
                   f"stopped: does a loop in your {running} never end (a condition that never becomes false, a "
                   "counter never advanced), or is it very slow?" if running else _message(exc, timeout))
        message += _threads_hint(session) if exc.timeout else ""
        message += _triton_hint(session)
    except BaseException as exc:  # noqa: BLE001 - any exception is a failed test
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not isinstance(exc, SystemExit):
            raise
        passed, restart = False, None
        message = explained(exc, _message(exc, timeout), src=src, filename=filename, hidden=session.hidden_lines[1])
    session.deadline = None
    session.hidden_lines = None
    # Names the test cell defined stay for later test cells (like a notebook); stand-ins do not (they
    # live in the test's fork).
    keep = session.test_defs
    for k, v in ns.items():
        if k in context or k.startswith("__"):
            continue
        if k in injected and before_same(ns, k, before):
            continue
        if isinstance(v, Remote) or type(v) is Remote:
            continue
        keep[k] = v
    session.test_defs = keep
    return {"passed": passed, "message": _cap(message, 3000), "restart": restart}


def _running(session: Session, ns: dict, injected: list) -> str | None:
    """Which of the learner's names the test was calling when it ran out of time: a function or class the cell
    took from the notebook, or an object of such a class (by the class's name). Only those public names are
    ever shown: an object's own description comes from the learner's process and could carry anything."""
    op, hid = session.timed_out_in or (None, None)
    if op != WorkerOp.CALL or hid is None:
        return None
    for name in injected:
        value = ns.get(name)
        if (isinstance(value, Remote) or type(value) is Remote) and object.__getattribute__(value, "_r_id") == hid:
            return name
    proxy = session.proxies.get(hid)
    info = object.__getattribute__(proxy, "_r_info") if proxy is not None else {}
    mro = info.get("mro") if isinstance(info, dict) else None
    cls = str(mro[0][1]) if mro else ""
    return f"{cls} object" if cls in injected else None


def fork_for_tests(session: Session, timeout: int, total_deadline: float = float("inf")) -> set:
    """Before a run of test cells: the worker forks, and the tests talk to the fork, which ends
    before the learner's next cell runs. What the tests send (hidden inputs included) does not survive
    into later cells. Returns the stand-ins that existed before."""
    session.deadline = min(time.monotonic() + timeout, total_deadline)
    try:
        if session.request(WorkerOp.TEST_BEGIN) != "forked":
            raise WorkerGone("the sandbox broke the grading protocol (no fork for the tests)")
    except NoFork:
        # Believed only to the claimant's cost: it ends this notebook's grading, nobody else's.
        raise ProcessLimit(f"your code holds every process and thread it may start (the limit is "
                           f"{session.limits.processes}), so the tests could not start (each runs in a process of "
                           "its own); the rest of the notebook was not graded. End the threads and processes your "
                           "code starts.") from None
    except RemoteError:
        raise WorkerGone("the sandbox broke the grading protocol (no fork for the tests)") from None
    finally:
        session.deadline = None
    said = session.last_reply
    session.fence(said.pid or 0)                                       # the fork's word, checked by PID 1
    threads = said.threads or 0                                        # the worker's word: a hint, nothing more
    session.fork_threads = threads if 0 < threads < 100_000 else 0
    return set(session.proxies)


def _triton_hint(session) -> str:
    """Why a test of Triton kernels may hang or crash besides a loop: the interpreter does not stop a load or a
    store outside its tensor (a missing mask), which can overwrite the process's memory."""
    if not session.ran_triton:
        return ""
    return (" Your Triton kernels were running: under Triton's interpreter, a tl.load or tl.store that reaches past "
            "its tensor (a missing mask, an offset computed past T or past the last head) is not stopped, and can "
            "corrupt memory so that the process hangs or dies. Check that every load and store has the mask of its "
            "rows (and keys) < T.")


def _threads_hint(session) -> str:
    """Why a test may time out where the notebook does not: the threads the learner's code had started."""
    n = session.fork_threads
    if not n:
        return ""
    return (f" Your code had started {n} thread{'s' if n > 1 else ''} before these tests (a thread pool, an event "
            "loop's executor, a background worker...). Tests call your functions in a copy of your process made "
            "by fork, which has none of those threads, so work handed to them never ends there: start such "
            "threads inside the function that uses them, or do the work without them.")


def end_tests(session: Session, known: set, timeout: int, total_deadline: float = float("inf")) -> None:
    session.deadline = min(time.monotonic() + timeout, total_deadline)
    try:
        if session.request(WorkerOp.TEST_END) != "ended":
            raise WorkerGone("the sandbox broke the grading protocol (the tests' fork did not end)")
        session.resume()
    finally:
        session.deadline = None
        session.proxies = {k: v for k, v in session.proxies.items() if k in known}


def _cap(text, n: int) -> str:
    text = str(text)
    return text if len(text) <= n else text[:n] + f" ... [{len(text) - n} more characters]"


def before_same(ns, k, before) -> bool:
    return k in before and ns.get(k) is before[k]

"""``course grade``: grade a folder of submissions, isolated, in parallel, with verdicts out of reach.

Layout in: ``SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb`` (nbgrader's ``submitted/``).
Layout out (``--out DIR``, an nbgrader course root)::

    grades.csv      student, lesson, score, max_score, status       (rewritten as results come, and at the end)
    results.json    every test cell: grade_id, points, max_points, passed, message; status, detail
    feedback/<student>/<lesson>/<lesson>.html   the student's code, outputs and test messages, no hidden test
    autograded/<student>/<lesson>/<lesson>.ipynb the notebook as graded (for the instructor, formgrader)
    submitted/<student>/<lesson>/<lesson>.ipynb  a copy of each readable submission (the formgrader counts them)
    gradebook.db, source/, release/             nbgrader's own state; scores go into its gradebook

How a submission is graded (see :mod:`course.grading.judge`): its cells run in a sandbox
(:mod:`course.grading.sandbox`: bubblewrap, no network, a private scratch folder, an unprivileged user,
limits on memory, processes, CPU, wall time and output); each test cell's code -- the instructor's,
hidden tests included -- runs in a trusted judge process that only receives data back. Experiment
cells (tagged ``experiment``) are skipped. ``--jobs N`` grades N submissions at a time.

Only this process writes results, after each submission finishes (atomic replace), so an
interrupted batch keeps what it graded and a re-run resumes: a submission whose notebook and lesson
have not changed keeps its result (``--regrade`` grades everything again).

A class too large for one machine is cut into shards: ``--shard I/N`` grades only the submissions
that a stable hash of (student, lesson) gives to shard ``I`` (:func:`shard_of`), into its own
``--out``; any scheduler runs the N commands (a Slurm job array, a Kubernetes Indexed Job, GNU
parallel). ``course grade merge R0 R1 ... --out R`` (:func:`merge`) then writes the class's
grades.csv, results.json, feedback and gradebook (``--db-url``: nbgrader's gradebook in PostgreSQL).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course.commands.lessons import all_lessons
from course.grading import sandbox
from course.grading.assignments import generate_assignments, load_gradebook_library
from course.grading.feedback import feedback_page
from course.grading.intake import Refused, against_release, find_notebook, name_problem, read_notebook, submission_digest
from course.grading.notebooks import imported_modules, max_score, sha256_of, test_cells, unvalidated
from course.grading.pool import Judges
from course.grading.protocol import EventKind, Reply, Spec, Status
from course.grading.results import CellResult, GradebookWriter, SubmissionResult, atomic_write, shown, write_results
from course.grading.shards import check_shard, record_shard, shard_of
from course.tools.workspace import Workspace

__all__ = ["Options", "grade", "BatchRun"]


@dataclass(frozen=True)
class Options:
    """One batch's settings (``course grade``'s options). The command line reads them, and the
    environment, at its edge; nothing below reads either.

    Args:
        timeout: seconds a cell may run (``--timeout``); ``notebook_timeout``: seconds for a whole
            notebook (default ``max(600, 20 * timeout)``).
        lessons: grade only these lessons (``--lesson``); None: every lesson found.
        jobs: submissions graded at a time (default: the CPU cores).
        unsafe_no_sandbox: run submissions without the sandbox, as you (``--unsafe-no-sandbox``).
        regrade: grade again what the last run graded (default: keep unchanged results).
        memory_mb: address space of a submission's processes (``--memory``).
        shard: ``(i, n)``: grade only the submissions of shard ``i`` of ``n`` (``--shard I/N``).
        executor: ``"local"`` judges, or ``"dask"`` (an embedded LocalCluster, or the cluster at
            ``scheduler``), a submission whose worker dies retried ``retries`` times.
        scratch: where the sandboxes' host-side folders go (``$COURSE_GRADE_SCRATCH``; default: the
            system's temporary folder).
        assignment_cache: where generated assignments are kept between grading folders
            (``$COURSE_GRADE_CACHE``; default ``.state/grading-cache``).
        only_cells: ``{"student/lesson": [grade_id, ...]}``: grade those submissions on those test cells
            only, the others scoring 0 (the course's own tests of its tests; never for a class). Such a
            result is never kept for a run without it (its digest names the cells).
        dask_worker_plugins: extra ``distributed.WorkerPlugin`` objects registered on the Dask workers.
    """

    timeout: int = 60
    lessons: Sequence[str] | None = None
    jobs: int | None = None
    unsafe_no_sandbox: bool = False
    regrade: bool = False
    notebook_timeout: int | None = None
    memory_mb: int = 4096
    shard: tuple[int, int] | None = None
    executor: str = "local"
    scheduler: str | None = None
    retries: int = 2
    scratch: Path | None = None
    assignment_cache: Path | None = None
    only_cells: Mapping[str, Sequence[str]] | None = None
    dask_worker_plugins: Sequence = field(default_factory=tuple)


def grade(submissions: Path, out: Path, options: Options | None = None, *, progress=print,
          **settings) -> list[SubmissionResult]:
    """Grade every ``<student>/<lesson>/`` folder under ``submissions``; write the outputs to ``out``.

    ``options`` (:class:`Options`), or its fields as keywords. ``shard=(i, n)`` grades only the
    submissions that :func:`course.grading.shards.shard_of` gives to shard ``i`` of ``n``, and records that
    in ``out`` for ``course grade merge``. ``executor="dask"`` sends each submission to a judge on a Dask
    worker (:mod:`course.grading.dask`); everything else, results included, is written here as for local
    judges."""
    if options is None:
        options = Options(**settings)
    elif settings:
        raise TypeError("pass the options or their fields, not both")
    return BatchRun(Path(submissions), Path(out), options, progress).run()


def _only_suffix(only: Sequence[str] | None) -> str:
    """What a partial grade (:attr:`Options.only_cells`) adds to a submission's digest."""
    return "" if only is None else ":only:" + ",".join(sorted(only))


# In the --out folder: the (student, lesson) pairs whose result the last run could not write into the gradebook, so
# that a run that keeps those results writes them again (read from this file, never from a result's wording).
NOT_IN_GRADEBOOK = ".course-not-in-gradebook.json"


def _reusable(prev: dict | None, digest: str) -> bool:
    """Was this submission (same notebook, same lesson version) graded in the last run, for good?"""
    return bool(prev) and prev.get("sha256") == digest and prev.get("status") not in (Status.GRADER_ERROR.value,)


def _needs_judge(prev: dict | None, folder: Path, lesson: str, version: str) -> bool:
    path, _ = find_notebook(folder, lesson)
    return path is not None and not _reusable(prev, submission_digest(path) + ":" + version)


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    # lazy: only for the progress bar of a terminal
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="nb", desc="grading", dynamic_ncols=True)


def _kept(prev: dict) -> SubmissionResult:
    return SubmissionResult(**{**prev, "cells": [CellResult(**c) for c in prev["cells"]]})


class BatchRun:
    """One ``course grade`` batch, phase by phase: scan the submissions, start the judges, prepare the
    workspace (nbgrader's course root and generated assignments), grade in ``jobs`` threads (one judge
    each), write the results as they come and once more at the end."""

    def __init__(self, submissions: Path, out: Path, options: Options, progress=print):
        self.submissions, self.out, self.options, self.progress = submissions.resolve(), out.resolve(), options, progress
        self.t_start = time.perf_counter()
        self.startup: dict[str, float] = {}      # the batch's start-up phases, printed at the end
        self.items: list[tuple[str, str, Path]] = []
        self.results: dict[tuple[str, str], SubmissionResult] = {}
        self.previous: dict[tuple[str, str], dict] = {}
        self.sandbox_failed: set[tuple[str, str]] = set()        # submissions whose judge saw its sandbox fail
        self.not_in_gradebook: set[tuple[str, str]] = set()      # results the gradebook does not hold (NOT_IN_GRADEBOOK)
        self.only_cells = {k: list(v) for k, v in (options.only_cells or {}).items()}
        self.lock = threading.Lock()
        self.broken_sandbox: list[str] = []
        self.written = {"at": 0.0, "took": 0.0}
        self.done = 0
        self.bar = None

    # -- phases --------------------------------------------------------------------------------
    def run(self) -> list[SubmissionResult]:
        self._check()
        self._scan()
        self._start_judges()
        try:
            self._prepare()
        except BaseException:
            self.judges.close(hurry=True)
            shutil.rmtree(self.scratch_base, ignore_errors=True)
            raise
        self._announce()
        t0 = time.perf_counter()
        self._grade_all()
        if self.broken_sandbox:
            what = (sandbox.INSTALL_HINT if sandbox.bwrap() is None else
                    "bubblewrap is installed, so the reason is the one above (`course doctor` tries the sandbox too)")
            raise SystemExit(f"course grade: {self.broken_sandbox[0]}. Submissions are untrusted code and are only run "
                             f"in a sandbox: {what}. Nothing was graded without it; the results so far are grader-error, "
                             "graded again by the next run.")
        ordered = sorted(self.results.values(), key=lambda r: (r.student, r.lesson))
        if self.progress:
            n = max(1, len(self.items))
            self.progress(f"graded {len(self.items)} submissions in {time.perf_counter() - t0:.1f} s "
                          f"({(time.perf_counter() - t0) / n:.2f} s each with {self.judges.jobs} jobs)")
            self.progress(_startup_line({**self.startup, **getattr(self.judges, "phases", {})}, self.judges.first,
                                        self.t_start))
        return ordered

    def _check(self) -> None:
        o = self.options
        if not self.submissions.is_dir():
            raise SystemExit(f"course grade: {self.submissions} is not a folder. Expected "
                             "SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb.")
        if o.executor not in ("local", "dask"):
            raise ValueError(f"executor is 'local' or 'dask', not {o.executor!r}")
        if o.scheduler and o.executor != "dask":
            raise ValueError("a scheduler address is for executor='dask'")
        self.remote = o.executor == "dask" and bool(o.scheduler)   # the sandboxes are on the cluster's machines
        if not o.unsafe_no_sandbox and not self.remote and sandbox.bwrap() is None:
            raise SystemExit("course grade: bubblewrap (bwrap) is not installed. Submissions are untrusted code and "
                             "are only run in a sandbox: " + sandbox.INSTALL_HINT + ".")
        self.shard = check_shard(*o.shard) if o.shard is not None else None

    def _scan(self) -> None:
        """The submissions to grade, the folders that are no lesson, and the last run's results."""
        o = self.options
        self.known = {lesson.id: lesson for lesson in all_lessons()}
        for student_dir in sorted(p for p in self.submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for lesson_dir in sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
                student, lesson = student_dir.name, lesson_dir.name
                if o.lessons and lesson not in o.lessons:
                    continue
                if self.shard is not None and shard_of(student, lesson, self.shard[1]) != self.shard[0]:
                    continue
                bad_name = name_problem(student, "student")
                if bad_name:
                    self.results[(student, lesson)] = SubmissionResult(
                        student, lesson, status=Status.INVALID_NOTEBOOK.value, detail=bad_name)
                    continue
                if lesson not in self.known:
                    self.results[(student, lesson)] = SubmissionResult(
                        student, lesson, status=Status.UNKNOWN_LESSON.value,
                        detail=f"no lesson called {lesson!r}; lessons are: {', '.join(self.known)}")
                    continue
                self.items.append((student, lesson, lesson_dir))
        self.used = sorted({lesson for _, lesson, _ in self.items})
        results_path = self.out / "results.json"
        if results_path.is_file() and not o.regrade:
            try:
                for r in json.loads(results_path.read_text(encoding="utf-8")):
                    self.previous[(r["student"], r["lesson"])] = r
            except (ValueError, KeyError, TypeError):
                self.previous = {}
        try:                                  # results whose gradebook rows the last run could not write
            self.not_in_gradebook = {tuple(k) for k in json.loads((self.out / NOT_IN_GRADEBOOK).read_text(encoding="utf-8"))
                                     if isinstance(k, list) and len(k) == 2}
        except (OSError, ValueError, TypeError):
            self.not_in_gradebook = set()

    def _start_judges(self) -> None:
        """Judges start now, if anything needs grading, and import their libraries while this process
        prepares the workspace (both take seconds)."""
        o = self.options
        version = {lesson: sha256_of(self.known[lesson].solution) for lesson in self.used}  # = the workspace's source/
        self.todo = sum(1 for student, lesson, folder in self.items if _needs_judge(
            self.previous.get((student, lesson)), folder, lesson,
            version[lesson] + _only_suffix(self.only_cells.get(f"{student}/{lesson}"))))
        # Scratch folders of the sandboxes (Options.scratch picks where: e.g. a faster disk).
        self.scratch_base = Path(tempfile.mkdtemp(prefix="course-grade-", dir=o.scratch or None))
        os.chmod(self.scratch_base, 0o711)
        # The modules a warm sandbox imports first: those the lessons' own cells import (the instructor's
        # notebooks are the workspace's source/, hashed as `version` above).
        self.warm = sorted({m for lesson in self.used for m in imported_modules(unvalidated(self.known[lesson].solution))})
        # Each judge launches its warm sandbox as it starts, before its own imports.
        prestart = None if o.unsafe_no_sandbox else {"warm": self.warm, "limits": {"memory_mb": o.memory_mb}}
        jobs = min(o.jobs or os.cpu_count() or 1, max(1, self.todo))
        if o.executor == "dask" and self.todo:
            # lazy: Dask's libraries take seconds to import, and only --executor dask needs them
            from course.grading.dask import DaskJudges

            self.judges = DaskJudges(jobs, o.scheduler, o.retries, prestart,     # in each worker's scratch
                                     plugins=list(o.dask_worker_plugins))
        else:
            self.judges = Judges(jobs, prestart and dict(prestart, scratch_base=str(self.scratch_base)),
                                 sources=[self.known[lesson].solution for lesson in self.used])
        if self.todo:
            self.judges.start_all()
        self.startup["scan"] = time.perf_counter() - self.t_start

    def _prepare(self) -> None:
        """nbgrader's course root in ``out``, the lessons' generated assignments and notebooks."""
        o, out = self.options, self.out
        self.had_gradebook = (out / "gradebook.db").is_file()
        t = time.perf_counter()
        ws = self.ws = Workspace(out, timeout=o.timeout).prepare(self.used)
        record_shard(out, self.shard)
        self.startup["workspace"] = time.perf_counter() - t
        t = time.perf_counter()
        self.sources, self.releases, self.lesson_hash, self.files = {}, {}, {}, {}
        from_cache = generate_assignments(ws, self.used, fresh=not self.had_gradebook, cache=o.assignment_cache)
        for lesson in self.used:
            self.sources[lesson] = ws.path / "source" / lesson / f"{lesson}.ipynb"
            self.releases[lesson] = nbformat.read(str(ws.path / "release" / lesson / f"{lesson}.ipynb"), as_version=4)
            self.lesson_hash[lesson] = sha256_of(self.sources[lesson])
            self.files[lesson] = [str(p) for p in (ws.path / "release" / lesson).iterdir()
                                  if p.is_file() and p.suffix != ".ipynb"]
        self.source_nbs = {lesson: nbformat.read(str(p), as_version=4) for lesson, p in self.sources.items()}
        self.startup["assignment" + (" (cached)" if from_cache else "")] = time.perf_counter() - t
        if self.todo:      # the gradebook's library (a second to import) loads while the judges start
            threading.Thread(target=load_gradebook_library, daemon=True).start()
        self.gradebook_kept = self.had_gradebook and ws.db_url == f"sqlite:///{ws.db_path}"   # else written again
        self.keep_submitted = self.submissions != (ws.path / "submitted").resolve()  # `course workshop`: in place
        self.gradebook = GradebookWriter(ws)

    def _announce(self) -> None:
        if not self.progress:
            return
        o, judges, items = self.options, self.judges, self.items
        which = f"shard {self.shard[0]}/{self.shard[1]}: " if self.shard else ""
        again = f" ({len(items) - self.todo} unchanged since the last run: kept)" if len(items) > self.todo else ""
        self.progress(f"course grade: {which}{len(items)} submissions{again}, {judges.jobs if self.todo else 0} at a "
                      f"time; isolation: {sandbox.describe(o.unsafe_no_sandbox, probe=False) if self.todo else 'none needed'}"
                      + (f"; on {judges.describe()}" if hasattr(judges, "describe") else ""))
        partial = sum(1 for student, lesson, _ in items if f"{student}/{lesson}" in self.only_cells)
        if partial:
            self.progress(f"course grade: {partial} submission(s) graded on some test cells only, the others scored 0 "
                          "(the course's own tests of its tests, not for a class)")

    def _grade_all(self) -> None:
        """The submissions, ``jobs`` at a time. The sandbox is not tried before the batch (that would cost
        as much as starting it): the judges start it, and a sandbox that fails makes a grader-error
        (re-gradable, never run unsandboxed). Then it is tried once, and if it cannot start on this
        machine at all the batch stops, saying why."""
        self.work: queue.Queue = queue.Queue()
        for item in self.items:
            self.work.put(item)
        self.bar = _progress(len(self.items), self.progress is not None and sys.stderr.isatty())
        threads = [threading.Thread(target=self._thread, args=(i,), daemon=True) for i in range(self.judges.jobs)]
        interrupted = True
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            interrupted = False
        finally:
            self.judges.close(hurry=interrupted)
            if self.bar is not None:
                self.bar.close()
            shutil.rmtree(self.scratch_base, ignore_errors=True)
            with self.lock:
                self.gradebook.close()
                self._write_all()

    def _thread(self, slot: int) -> None:
        o = self.options
        while not self.broken_sandbox:
            try:
                student, lesson, folder = self.work.get_nowait()
            except queue.Empty:
                return
            try:
                res = self._grade_one(slot, student, lesson, folder)
            except Exception as exc:  # noqa: BLE001 - never stop the batch
                res = SubmissionResult(student, lesson, status=Status.GRADER_ERROR.value,
                                       detail=f"{type(exc).__name__}: {exc}")
                self._finish(res)
            with self.lock:
                self._report(res)
            if (res.student, res.lesson) in self.sandbox_failed and not o.unsafe_no_sandbox and not self.remote:
                ok, why = sandbox.available()
                if not ok:
                    self.broken_sandbox.append(why)

    # -- one submission ------------------------------------------------------------------------
    def _grade_one(self, slot: int, student: str, lesson: str, folder: Path) -> SubmissionResult:
        start = time.perf_counter()
        points = max_score(self.source_nbs[lesson])
        path, note = find_notebook(folder, lesson)
        if path is None:
            status = Status.INVALID_NOTEBOOK if isinstance(note, Refused) else Status.MISSING_NOTEBOOK
            res = SubmissionResult(student, lesson, max_score=points, status=status.value, detail=note)
            self._finish(res)
            return res
        only = self.only_cells.get(f"{student}/{lesson}")
        digest = submission_digest(path) + ":" + self.lesson_hash[lesson] + _only_suffix(only)
        copy = self.ws.path / "submitted" / student / lesson / f"{lesson}.ipynb"
        prev = self.previous.get((student, lesson))
        if _reusable(prev, digest) and (copy.is_file() or not self.keep_submitted):
            return self._finish(_kept(prev), kept=True)
        # nbgrader's own layout: the formgrader counts a lesson's submissions in submitted/ (the file as handed in).
        nb, problem = read_notebook(path, keep=copy if self.keep_submitted else None)
        if _reusable(prev, digest):
            return self._finish(_kept(prev), kept=True)
        if nb is None:
            return self._finish(SubmissionResult(student, lesson, max_score=points, status=Status.INVALID_NOTEBOOK.value,
                                                 detail=problem, sha256=digest))
        nb, changed, forged = against_release(nb, self.releases[lesson])
        clean = self.scratch_base / f"{slot}.ipynb"
        nbformat.write(nb, str(clean))
        note = "; ".join(([note] if note else []) + changed[:3])
        if only is not None:
            note = (note + "; " if note else "") + f"graded on {', '.join(only) or 'no'} test cell(s) only"
        reply = self.judges.grade(slot, self._spec(clean, student, lesson, only))
        if reply.error is None and forged:       # what intake removed counts as the judge's findings do
            reply.suspicious = list(dict.fromkeys(forged + reply.suspicious))[:50]
        res = self._result(reply, student, lesson, points, digest, note)
        res.seconds = round(time.perf_counter() - start, 2)
        self._finish(res, reply if reply.error is None else None)
        return res

    def _spec(self, notebook: Path, student: str, lesson: str, only: Sequence[str] | None) -> Spec:
        o = self.options
        return Spec(notebook=str(notebook), source=str(self.sources[lesson]),
                    release=str(self.ws.path / "release" / lesson / f"{lesson}.ipynb"), timeout=o.timeout,
                    notebook_timeout=o.notebook_timeout or max(600, o.timeout * 20), scratch_base=str(self.scratch_base),
                    sandbox=not o.unsafe_no_sandbox, limits={"memory_mb": o.memory_mb}, files=self.files[lesson],
                    submission=f"{student}/{lesson}", warm=self.warm, only_cells=None if only is None else list(only))

    def _result(self, reply: Reply, student: str, lesson: str, points: float, digest: str, note: str) -> SubmissionResult:
        """A judge's reply as the submission's result: its status from the reply's typed fields, and a
        detail that says what happened."""
        res = SubmissionResult(student, lesson, max_score=points, sha256=digest)
        if reply.error is not None:
            res.status, res.detail = Status.GRADER_ERROR.value, f"{note + '; ' if note else ''}{reply.error}"
            res.cells = [CellResult(c.metadata.nbgrader.grade_id, 0.0, float(c.metadata.nbgrader.get("points", 0)), False,
                                    "not graded") for c in test_cells(self.source_nbs[lesson])]
            return res
        res.cells = [CellResult(c.grade_id, c.points, c.max_points, c.passed, c.message) for c in reply.cells]
        res.score = float(sum(c.points for c in res.cells))
        deleted = [c.grade_id for c in reply.cells if c.deleted]
        timeouts, deaths = reply.of_kind(EventKind.TIMEOUT), reply.of_kind(EventKind.DIED)
        broken = reply.of_kind(EventKind.SANDBOX)           # the sandbox itself failed: re-gradable
        problems = []
        if deleted:
            problems.append(f"test cells deleted: {', '.join(deleted)} (scored 0)")
        if timeouts:
            problems.append(f"stopped after {self.options.timeout} s: {', '.join(timeouts)}")
        if deaths:
            problems.append("the student's process died and was restarted: " + ", ".join(deaths))
        if reply.suspicious:
            problems.append("suspicious code: " + "; ".join(reply.suspicious[:6]))
        if broken:
            self.sandbox_failed.add((student, lesson))      # typed: the batch checks its sandbox again
            problems.append("the grader's sandbox failed: " + "; ".join(broken))
            res.score = 0.0   # as every grader-error: nothing counts until it is graded again
            res.cells = [CellResult(c.grade_id, 0.0, c.max_points, False,
                                    "not graded: the grader's sandbox failed (graded again by the next run)")
                         for c in res.cells]      # so the gradebook and feedback say 0 too, as results.json
        res.status = reply.status().value
        res.detail = "; ".join(([note] if note else []) + problems)
        res.phases = reply.phases
        return res

    # -- results ---------------------------------------------------------------------------------
    def _write_all(self, now: bool = True) -> None:
        """grades.csv and results.json as they stand. After a result (``now=False``), at most every 2 s (or
        20 times as long as the last write took): rewriting them after every result made a batch quadratic
        (293 results: 30 s of the grader's CPU). The end of the batch writes them whatever happens, and a
        run cut short (kill -9) grades what is missing again."""
        start = time.perf_counter()
        if not now and start - self.written["at"] < max(2.0, 20 * self.written["took"]):
            return
        write_results(self.out, self.results.values())
        atomic_write(self.out / NOT_IN_GRADEBOOK, json.dumps(sorted(self.not_in_gradebook)) + "\n")
        self.written.update(at=start, took=time.perf_counter() - start)

    def _finish(self, res: SubmissionResult, reply: Reply | None = None, kept: bool = False) -> SubmissionResult:
        if reply is not None:                 # the judge rendered the pages; write them
            lesson = res.lesson
            if reply.autograded:
                atomic_write(self.ws.path / "autograded" / res.student / lesson / f"{lesson}.ipynb", reply.autograded)
            if reply.feedback_html:
                path = self.ws.path / "feedback" / res.student / lesson / f"{lesson}.html"
                atomic_write(path, feedback_page(reply.feedback_html, res))
                res.feedback = str(path)
            else:
                res.detail += f"; feedback not written ({reply.feedback_error or 'no page'})"
        with self.lock:
            # A result kept from the last run is in this gradebook already (unless it was not written then).
            key = (res.student, res.lesson)
            if res.status != Status.UNKNOWN_LESSON.value and res.lesson in self.sources and not (
                    kept and self.gradebook_kept and key not in self.not_in_gradebook):
                try:
                    self.gradebook.record(res)
                    self.not_in_gradebook.discard(key)
                except Exception as exc:  # noqa: BLE001
                    res.detail += f"; gradebook not updated ({type(exc).__name__}: {str(exc)[:120]})"
                    self.not_in_gradebook.add(key)
            self.results[(res.student, res.lesson)] = res
            if not kept:                        # kept ones are written with the next graded one, or at the end
                self._write_all(now=False)
        return res

    def _report(self, res: SubmissionResult) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(shown(f"{res.student}/{res.lesson} {res.score:g}/{res.max_score:g} {res.status}"))
        elif self.progress:
            self.progress(shown(f"[{self.done}/{len(self.items)}] {res.student}/{res.lesson}: {res.score:g}/"
                                f"{res.max_score:g} {res.status} ({res.seconds:.1f} s)"
                                f"{' - ' + res.detail if res.detail else ''}"))


def _process_age() -> float | None:
    """Seconds since this process started (Linux), to count Python's start and imports; else None."""
    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return float(Path("/proc/uptime").read_text().split()[0]) - int(fields[19]) / ticks
    except (OSError, ValueError, IndexError):
        return None


def _startup_line(startup: dict, first: list, t_start: float) -> str:
    """What the batch paid before its first verdict, phase by phase (``course grade`` prints it)."""
    age = _process_age()
    before = age - (time.perf_counter() - t_start) if age is not None else None
    parts = ([f"python and imports {before:.1f} s"] if before is not None else []) + \
        [f"{name} {seconds:.1f} s" for name, seconds in startup.items()]
    if first:
        started, asked, answered, phases = min(first, key=lambda f: f[2])
        parts_sum = sum(v for k, v in phases.items() if k != "judge")    # ("judge": their total, not a phase)
        work = parts_sum - phases.get("start", 0.0)      # grading that submission itself
        waited = max(0.0, answered - asked - parts_sum)
        # Each judge launches its warm sandbox as it starts: the sandbox's wait is what was left after the judge's.
        parts += [f"judge start {waited:.1f} s (after {asked - started:.1f} s alongside the above)",
                  f"warm sandbox {phases.get('start', 0.0):.1f} s more"]
        overhead = answered - t_start - work + (before or 0.0)
        return f"start-up: {', '.join(parts)}; per-batch cost {overhead:.1f} s before the first verdict"
    return f"start-up: {', '.join(parts)}; nothing needed a judge"

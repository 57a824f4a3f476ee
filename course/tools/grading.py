"""``course grade``: grade a folder of submissions with nbgrader, robustly.

Layout in: ``SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb`` (nbgrader's ``submitted/``).
Layout out (``--out DIR``, an nbgrader course root)::

    grades.csv      student, lesson, score, max_score, status
    results.json    every test cell: grade_id, points, max_points, passed, message; plus status/detail
    feedback/<student>/<lesson>/<lesson>.html   failures and messages, never the hidden tests' source
    gradebook.db, source/, release/, submitted/, autograded/   nbgrader's own state

Every submission is checked before nbgrader sees it (missing or misnamed notebook, invalid JSON,
deleted test cells), graded in its own kernel with a per-cell timeout, and given a status that says
what happened. One broken submission never stops the others; grading twice gives the same result.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from course.tools.lessons import all_lessons
from course.tools.workspace import Workspace, quiet_logs

__all__ = ["CellResult", "SubmissionResult", "grade", "summary_table", "OK_STATUSES"]

OK_STATUSES = ("graded",)
_HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.S)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class CellResult:
    grade_id: str
    points: float
    max_points: float
    passed: bool
    message: str = ""


@dataclass
class SubmissionResult:
    student: str
    lesson: str
    score: float = 0.0
    max_score: float = 0.0
    status: str = "pending"
    detail: str = ""
    seconds: float = 0.0
    cells: list[CellResult] = field(default_factory=list)
    feedback: str = ""


def _grade_cells(nb) -> list:
    return [c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")]


def _max_score(source_nb) -> float:
    return float(sum(c.metadata.nbgrader.get("points", 0) for c in _grade_cells(source_nb)))


def _error_message(cell) -> str:
    """What a test cell's failure says, in one or two lines, without its source or traceback."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            ename, evalue = out.get("ename", "Error"), _ANSI.sub("", str(out.get("evalue", ""))).strip()
            if ename == "CellTimeoutError":
                return "this cell ran past the time limit and was stopped (an infinite loop, or very slow code?)"
            if ename == "NameError":
                return f"{evalue}: run (or fix) the cell that defines it"
            return f"{ename}: {evalue}" if evalue else f"{ename} (a check failed without a message)"
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            return "the cell wrote to stderr, which nbgrader counts as a failure"
    return ""


def _last_error_line(log: str) -> str:
    """The most telling line of nbgrader's log: the last exception it reports."""
    lines = [ln.strip() for ln in log.splitlines() if re.match(r"\s*[\w.]+(Error|Exception)\b", ln)]
    return (lines[0] if lines else (log.strip().splitlines() or ["no log"])[-1])[:300]


def _find_notebook(folder: Path, lesson: str) -> tuple[Path | None, str]:
    expected = folder / f"{lesson}.ipynb"
    if expected.is_file():
        return expected, ""
    others = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    if len(others) == 1:
        return others[0], f"graded {others[0].name} (expected the name {lesson}.ipynb)"
    found = ", ".join(p.name for p in others) or "nothing"
    return None, f"expected {lesson}.ipynb in {folder}; found {found}. Ask the student to hand in {lesson}.ipynb."


def _read_notebook(path: Path):
    """The submission as an nbformat notebook, or a readable reason why it is not one."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"cannot read {path.name}: {exc}"
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - JSON or schema errors of every kind
        return None, f"{path.name} is not a valid notebook ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}). " \
                     "It may be truncated or edited outside Jupyter; ask the student to re-save and resubmit it."
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        return None, f"{path.name} does not follow the notebook format ({str(exc).splitlines()[0][:200]})."
    return nb, ""


def _feedback_html(autograded, result: SubmissionResult, out_path: Path) -> None:
    """Feedback the student may see: their code and outputs, test messages, no hidden test source."""
    from nbconvert import HTMLExporter

    nb = nbformat.from_dict(json.loads(json.dumps(autograded)))  # a private copy
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code":
            continue
        if meta.get("grade"):
            if _HIDDEN.search(cell.source):
                cell.source = _HIDDEN.sub("# (hidden tests ran here; their code is not shown)\n", cell.source)
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                # A traceback would show the hidden tests' source lines: keep only the message.
                out["traceback"] = [f"{out.get('ename', 'Error')}: {_ANSI.sub('', str(out.get('evalue', '')))}"]
    lines = [f"# Feedback: {result.lesson}", "", f"**{result.student}** scored **{result.score:g} / {result.max_score:g}**"
             f" (status: {result.status}{'; ' + result.detail if result.detail else ''}).", "",
             "| test | points | result |", "|---|---|---|"]
    for c in result.cells:
        msg = ("passed" if c.passed else "failed: " + c.message).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{c.grade_id}` | {c.points:g} / {c.max_points:g} | {msg} |")
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("\n".join(lines)))
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(body, encoding="utf-8")


def _scores_from_gradebook(ws: Workspace, lesson: str, student: str) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(ws.db_url) as gb:
        nb = gb.find_submission_notebook(lesson, lesson, student)
        return {g.name: (float(g.score or 0.0), float(g.max_score or 0.0)) for g in nb.grades}


def _grade_one(ws: Workspace, student: str, lesson: str, nb, source_nb, note: str) -> SubmissionResult:
    res = SubmissionResult(student=student, lesson=lesson, max_score=_max_score(source_nb), detail=note)
    wanted = [c.metadata.nbgrader.grade_id for c in _grade_cells(source_nb)]
    present = {c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells}
    deleted = [g for g in wanted if g not in present]
    dst = ws.path / "submitted" / student / lesson / f"{lesson}.ipynb"
    dst.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(dst))
    graded_dir = ws.path / "autograded" / student / lesson
    if graded_dir.exists():
        shutil.rmtree(graded_dir)
    try:
        with quiet_logs():
            outcome = ws.api().autograde(lesson, student, force=True, create=True)
    except Exception as exc:  # noqa: BLE001 - nbgrader itself failed: report, go on
        outcome = {"success": False, "error": f"{type(exc).__name__}: {exc}"}
    graded_path = graded_dir / f"{lesson}.ipynb"
    log = str(outcome.get("log") or "") + "\n" + str(outcome.get("error") or "")
    if not outcome.get("success") or not graded_path.is_file():
        dead = "DeadKernel" in log or "Kernel died" in log or "UnresponsiveKernel" in log
        res.status = "kernel-died" if dead else "autograde-failed"
        res.detail = ("the kernel died while running the notebook (os._exit, a crash, or out of memory); "
                      "nothing could be graded automatically, look at it by hand") if dead else \
            "nbgrader could not grade this notebook: " + _last_error_line(log)
        res.cells = [CellResult(g, 0.0, float(c.metadata.nbgrader.get("points", 0)), False, "not graded")
                     for g, c in zip(wanted, _grade_cells(source_nb))]
        return res
    graded = nbformat.read(str(graded_path), as_version=4)
    scores = _scores_from_gradebook(ws, lesson, student)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in graded.cells}
    timeouts = []
    for cell in graded.cells:
        if any(o.get("ename") == "CellTimeoutError" for o in cell.get("outputs", [])):
            timeouts.append(cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell {graded.cells.index(cell)}")
    for gid, src_cell in zip(wanted, _grade_cells(source_nb)):
        max_pts = float(src_cell.metadata.nbgrader.get("points", 0))
        pts, _ = scores.get(gid, (0.0, max_pts))
        cell = by_id.get(gid)
        if gid in deleted or cell is None:
            res.cells.append(CellResult(gid, 0.0, max_pts, False, "this test cell was deleted from the submission"))
            continue
        passed = pts >= max_pts
        res.cells.append(CellResult(gid, pts, max_pts, passed, "" if passed else (_error_message(cell) or "failed")))
    res.score = float(sum(c.points for c in res.cells))
    problems = []
    if deleted:
        problems.append(f"test cells deleted: {', '.join(deleted)} (scored 0)")
    if timeouts:
        problems.append(f"stopped after {ws.timeout} s in: {', '.join(timeouts)}")
    res.status = "graded" if not problems else ("timeout" if timeouts else "test-cells-deleted")
    res.detail = "; ".join(([note] if note else []) + problems)
    feedback = ws.path / "feedback" / student / lesson / f"{lesson}.html"
    try:
        _feedback_html(graded, res, feedback)
        res.feedback = str(feedback)
    except Exception as exc:  # noqa: BLE001 - feedback is a courtesy; never lose the grade over it
        res.detail += f"; feedback not written ({type(exc).__name__}: {exc})"
    return res


def grade(submissions: Path, out: Path, *, timeout: int = 60, lessons: list[str] | None = None,
          progress=print) -> list[SubmissionResult]:
    """Grade every ``<student>/<lesson>/`` folder under ``submissions``; write the outputs to ``out``."""
    submissions = Path(submissions)
    if not submissions.is_dir():
        raise SystemExit(f"course grade: {submissions} is not a folder. Expected SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb.")
    known = {l.id: l for l in all_lessons()}
    items: list[tuple[str, str, Path]] = []
    results: list[SubmissionResult] = []
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for lesson_dir in sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if lessons and lesson_dir.name not in lessons:
                continue
            if lesson_dir.name not in known:
                results.append(SubmissionResult(student_dir.name, lesson_dir.name, status="unknown-lesson",
                               detail=f"no lesson called {lesson_dir.name!r}; lessons are: {', '.join(known)}"))
                continue
            items.append((student_dir.name, lesson_dir.name, lesson_dir))
    used = sorted({lesson for _, lesson, _ in items})
    ws = Workspace(Path(out), timeout=timeout).prepare(used)
    sources = {}
    for lesson in used:
        ws.generate(lesson)
        sources[lesson] = nbformat.read(str(ws.path / "source" / lesson / f"{lesson}.ipynb"), as_version=4)
    for i, (student, lesson, folder) in enumerate(items, 1):
        start = time.perf_counter()
        path, note = _find_notebook(folder, lesson)
        if path is None:
            res = SubmissionResult(student, lesson, max_score=_max_score(sources[lesson]), status="missing-notebook", detail=note)
        else:
            nb, problem = _read_notebook(path)
            if nb is None:
                res = SubmissionResult(student, lesson, max_score=_max_score(sources[lesson]), status="invalid-notebook", detail=problem)
            else:
                res = _grade_one(ws, student, lesson, nb, sources[lesson], note)
        res.seconds = round(time.perf_counter() - start, 1)
        results.append(res)
        if progress:
            progress(f"[{i}/{len(items)}] {student}/{lesson}: {res.score:g}/{res.max_score:g} {res.status}"
                     f" ({res.seconds:.1f} s){' - ' + res.detail if res.detail else ''}")
    results.sort(key=lambda r: (r.student, r.lesson))
    out = ws.path
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["student", "lesson", "score", "max_score", "status"])
        for r in results:
            w.writerow([r.student, r.lesson, f"{r.score:g}", f"{r.max_score:g}", r.status])
    (out / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n", encoding="utf-8")
    return results


def summary_table(results: list[SubmissionResult]) -> str:
    rows = [("student", "lesson", "score", "status", "detail")]
    for r in results:
        rows.append((r.student, r.lesson, f"{r.score:g}/{r.max_score:g}", r.status, r.detail[:90]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    ok = sum(r.status in OK_STATUSES for r in results)
    lines.append(f"\n{ok} of {len(results)} submissions graded cleanly; {len(results) - ok} need a look.")
    return "\n".join(lines)

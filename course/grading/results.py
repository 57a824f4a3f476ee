"""What a batch writes: each submission's result, ``grades.csv`` and ``results.json`` (atomically), nbgrader's
gradebook (so the formgrader shows the scores), and the summary ``course grade`` prints."""

from __future__ import annotations

import io
import csv
import json
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course.tools.workspace import Workspace

OK_STATUSES = ("graded",)
STATUSES = {
    "graded": "graded normally",
    "timeout": "a cell ran past --timeout and was stopped; the rest of the notebook was still graded",
    "test-cells-deleted": "the student deleted test cells: those score 0, the rest are graded",
    "kernel-died": "the student's process died (os._exit, a crash, out of memory); restarted, the rest graded",
    "suspicious": "graded, but the code tampers with grading or reaches outside: look at it by hand",
    "invalid-notebook": "not a readable notebook (truncated JSON, a link, a pipe or device): 0 points, never read through a link",
    "missing-notebook": "no notebook in the lesson folder: 0 points",
    "unknown-lesson": "a folder that is not a lesson of this course",
    "grader-error": "the grader itself failed on this submission (a bug: please report it): 0 points",
}


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
    sha256: str = ""
    phases: dict = field(default_factory=dict)


# nbgrader builds gradebook rows through SQLAlchemy backrefs that SQLAlchemy 2 no longer cascades, and
# SQLAlchemy says so on stderr for every submission ("... not in session, add operation along ... will
# not proceed"); nbgrader adds those rows itself right after, so they are there (tests read them back).
warnings.filterwarnings("ignore", message=r".*not in session, add operation along")


def atomic_write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with (os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8")) as fh:
        fh.write(text)
    os.replace(tmp, path)


def csv_cell(value: str) -> str:
    """A text cell a spreadsheet will not run: one starting with = + - @ (or a tab or carriage return)
    is a formula there (OWASP's CSV injection), so it gets a leading apostrophe."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def shown(text: str) -> str:
    """Text from a submission (a folder name, a message) as a terminal shows it harmlessly: control
    characters (escape sequences that move the cursor, erase lines or retitle the window) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def write_results(out: Path, results) -> None:
    """``grades.csv`` and ``results.json`` in ``out``, sorted by (student, lesson), each replaced atomically."""

    ordered = sorted(results, key=lambda r: (r.student, r.lesson))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["student", "lesson", "score", "max_score", "status"])
    for r in ordered:
        w.writerow([csv_cell(r.student), csv_cell(r.lesson), f"{r.score:g}", f"{r.max_score:g}", r.status])
    atomic_write(out / "grades.csv", buf.getvalue())
    atomic_write(out / "results.json", json.dumps([asdict(r) for r in ordered], indent=2) + "\n")


class GradebookWriter:
    """Scores into nbgrader's gradebook (formgrader shows them): auto scores only, from the judge. One
    ``Gradebook`` for a whole batch, used by one thread at a time (the caller's lock): opening one per
    result took 0.1 s of CPU (its engine, a look at every table and at the schema's version), a third of
    the grading command's own time in a batch of a few hundred."""

    def __init__(self, ws: Workspace):
        self.ws, self.gb = ws, None

    def record(self, res: SubmissionResult) -> None:
        from nbgrader.api import Gradebook, MissingEntry

        from course.tools.workspace import in_process_alembic_head

        if self.gb is None:
            in_process_alembic_head()
            self.gb = Gradebook(self.ws.db_url)
        gb = self.gb
        try:
            gb.update_or_create_student(res.student)
            try:
                gb.remove_submission(res.lesson, res.student)
            except MissingEntry:
                pass
            gb.add_submission(res.lesson, res.student)
            # The notebook's grades in one query (a find_grade per test cell was half of the time here).
            grades = {g.name: g for g in gb.find_submission_notebook(res.lesson, res.lesson, res.student).grades}
            with gb.db.no_autoflush:
                for c in res.cells:
                    g = grades.get(c.grade_id)
                    if g is None:
                        continue
                    g.auto_score = min(float(c.points), float(c.max_points))
                    g.manual_score = None
                    g.extra_credit = None
            gb.db.commit()
        except BaseException:
            self.close()                   # rolled back; the next result opens the gradebook afresh
            raise

    def close(self) -> None:
        gb, self.gb = self.gb, None
        if gb is not None:
            try:
                gb.db.rollback()
                gb.close()
            except Exception:  # noqa: BLE001 - closing a gradebook whose last write failed
                pass


def without_password(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only for a message
        return url.split("@")[-1]


def summary_table(results: list[SubmissionResult], width: int = 110) -> str:
    rows = [("student", "lesson", "score", "status")]
    for r in results:
        rows.append((shown(r.student), shown(r.lesson), f"{r.score:g}/{r.max_score:g}", r.status))
    widths = [min(max(len(row[i]) for row in rows), 30) for i in range(len(rows[0]))]
    lines = ["  ".join(c[:w].ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    details = [shown(f"  {r.student}/{r.lesson} ({r.status}): {r.detail}")[:width * 3] for r in results if r.detail]
    if details:
        lines += ["", "details:"] + details
    ok = sum(r.status in OK_STATUSES for r in results)
    lines.append(f"\n{ok} of {len(results)} submissions graded cleanly; {len(results) - ok} need a look.")
    return "\n".join(lines)

"""What a batch writes: each submission's result, ``grades.csv`` and ``results.json`` (atomically), nbgrader's
gradebook (so the formgrader shows the scores), and the summary ``course grade`` prints."""

from __future__ import annotations

import csv
import io
import json
import os
import re
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
    """``path`` replaced whole by ``text`` (a file of the owner's only). A lone surrogate in the text (a learner's
    exception message, a folder name that was not UTF-8) is written as its escape, ``\\udc80``: in a notebook's JSON
    that is the same string again, on a page it is shown as text, and the submission is graded all the same."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with (os.fdopen(fd, "wb") if isinstance(text, bytes) else
          os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace")) as fh:
        fh.write(text)
    os.replace(tmp, path)


# What a spreadsheet may take for a field separator when it opens a text file (the comma of English locales, the
# semicolon of many others, a tab, a space, a pipe, a colon), and the characters a cell may start a formula with
# (OWASP's CSV injection: = + - @, their full-width forms, and a tab or carriage return before them).
SEPARATORS = ",;\t |:"
_FORMULA = re.compile(r"(^|[,;\t |:])([\s\"']*)(?=[=+\-@\uff1d\uff0b\uff0d\uff20])")
_ID_CHAR = re.compile(r"[\w.@+-]")


def spreadsheet_text(value) -> str:
    """``value`` as a text cell no spreadsheet runs, whichever separator it splits the line on.

    Characters that are not printable (a newline, a carriage return, a tab, escape sequences) are written as
    ``\\xNN`` escapes, so a field stays on its line; then every place where a cell could begin under one of
    :data:`SEPARATORS` (the field's start, or just after such a character) and a formula character follows gets
    an apostrophe first, which spreadsheets read as "this is text" (OWASP's rule, applied to every cell a
    spreadsheet could make of the field, not only to the first)."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))
    return _FORMULA.sub(lambda m: f"{m.group(1)}{m.group(2)}'", text)


def printable_name(name: str) -> str:
    """A student's or lesson's folder name as ``grades.csv`` writes it: an id (letters, digits and ``. _ @ + -``)
    as it is; any other character (a name the intake refused) as a ``\\xNN`` or ``\\uNNNN`` escape, so that no
    separator, quote or control character of it reaches a spreadsheet."""
    return "".join(c if _ID_CHAR.fullmatch(c) else (f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
                   for c in str(name))


def table_text(header, rows, *, delimiter: str = ",") -> str:
    """A CSV (or, with ``delimiter="\\t"``, TSV) text for spreadsheets: every cell through :func:`spreadsheet_text`
    (numbers are written as they print, which no spreadsheet runs). Every file the course writes for a spreadsheet
    is written by this function (tests/test_trust.py opens each of them under every separator)."""
    buf = io.StringIO()
    w = csv.writer(buf, delimiter=delimiter, lineterminator="\n")
    for row in [header, *rows]:
        w.writerow([c if isinstance(c, (int, float)) and not isinstance(c, bool) else spreadsheet_text(c) for c in row])
    return buf.getvalue()


def shown(text: str) -> str:
    """Text from a submission (a folder name, a message) as a terminal shows it harmlessly: control
    characters (escape sequences that move the cursor, erase lines or retitle the window) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def write_results(out: Path, results) -> None:
    """``grades.csv`` and ``results.json`` in ``out``, sorted by (student, lesson), each replaced atomically."""

    ordered = sorted(results, key=lambda r: (r.student, r.lesson))
    rows = [[printable_name(r.student), printable_name(r.lesson), f"{r.score:g}", f"{r.max_score:g}", r.status]
            for r in ordered]
    atomic_write(out / "grades.csv", table_text(["student", "lesson", "score", "max_score", "status"], rows))
    atomic_write(out / "results.json", json.dumps([asdict(r) for r in ordered], indent=2) + "\n")


class GradebookWriter:
    """Scores into nbgrader's gradebook (formgrader shows them): auto scores only, from the judge. One
    ``Gradebook`` for a whole batch, used by one thread at a time (the caller's lock): opening one per
    result took 0.1 s of CPU (its engine, a look at every table and at the schema's version), a third of
    the grading command's own time in a batch of a few hundred."""

    def __init__(self, ws: Workspace):
        self.ws, self.gb = ws, None

    def record(self, res: SubmissionResult) -> None:
        # lazy: nbgrader's gradebook takes a second to import; only its writer needs it
        from nbgrader.api import Gradebook, MissingEntry

        # lazy: the gradebook's schema check, with nbgrader's
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
        # lazy: only to hide a password in a message
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

"""What the class report reads, and the numbers it computes: a batch's results (``results.json``), each lesson's
tests as its student notebook states them (the rule each test cell checks, in its docstring; the section that
teaches it; its points), the class's roster (nbgrader's gradebook), which submissions came late, and, from those,
each test's difficulty and discrimination and the class's most common failure messages.

Everything here tolerates a partial or older ``--out`` folder: what is missing is said (:attr:`Report.missing`)
and the rest is computed."""

from __future__ import annotations

import ast
import json
import math
import re
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course.grading.intake import name_problem
from course.grading.results import shown

__all__ = ["TestCell", "Lesson", "Report", "load", "message_template", "difficulty_and_discrimination"]

GRADED = "graded"
REFUSED = ("invalid-notebook", "missing-notebook", "unknown-lesson", "grader-error")
SUSPICIOUS = "suspicious"


@dataclass
class TestCell:
    grade_id: str
    points: float
    rule: str                        # the test's docstring: what it checks, in the student notebook's words
    section: str                     # the heading of the lesson's section it belongs to
    section_text: str                # that section's text (the first Markdown cell under the heading)
    exercise: str                    # the section's title without its points


@dataclass
class Lesson:
    id: str
    title: str
    tests: list[TestCell] = field(default_factory=list)
    solution_cells: list[str] = field(default_factory=list)      # grade_ids of the exercises' solution cells
    stubs: dict[str, str] = field(default_factory=dict)          # grade_id -> the released stub (boilerplate)
    released: set[str] = field(default_factory=set)              # every code cell of the release, stripped

    @property
    def max_score(self) -> float:
        return sum(t.points for t in self.tests)

    def exercises(self) -> dict[str, list[TestCell]]:
        out: dict[str, list[TestCell]] = defaultdict(list)
        for t in self.tests:
            out[t.exercise].append(t)
        return dict(out)


@dataclass
class Report:
    out: Path
    results: list[dict]
    lessons: dict[str, Lesson]
    roster: list[str]
    late: set[tuple[str, str]]
    missing: list[str] = field(default_factory=list)            # what could not be read, in words

    def of(self, lesson: str) -> list[dict]:
        return [r for r in self.results if r.get("lesson") == lesson]

    def students(self) -> list[str]:
        return sorted(set(self.roster) | {r.get("student", "") for r in self.results if r.get("student")})


_HEADING = re.compile(r"^##\s+(.*)$", re.M)
_POINTS = re.compile(r"\s*\((\d+) points?\)\s*$")


def _docstring(source: str) -> str:
    try:
        doc = ast.get_docstring(ast.parse(source)) or ""
    except (SyntaxError, ValueError):
        return ""
    return " ".join(doc.split())


def lesson_from_notebooks(root: Path, lesson_id: str) -> Lesson | None:
    """A lesson's tests from its student notebook (the learner's words) and its points from the solution
    notebook's metadata; None when the lesson is not in this checkout."""
    student = root / "notebooks" / lesson_id / f"{lesson_id}.ipynb"
    if not student.is_file():
        return None
    nb = nbformat.read(str(student), as_version=4)
    title = nb.metadata.get("course", {}).get("title", lesson_id)
    lesson = Lesson(lesson_id, title)
    section, section_text, exercise = "", "", ""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            heading = _HEADING.search(cell.source)
            if heading and cell.source.lstrip().startswith("##"):
                section = heading.group(1).strip()
                exercise = _POINTS.sub("", section)
                body = cell.source.split("\n", 1)[1] if "\n" in cell.source else ""
                section_text = " ".join(re.sub(r"!\[[^\]]*\]\([^)]*\)", "", body).split())[:600]
            continue
        lesson.released.add(cell.source.strip())
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and meta.get("grade_id"):
            lesson.tests.append(TestCell(meta["grade_id"], float(meta.get("points", 0)), _docstring(cell.source),
                                         section, section_text, exercise or lesson_id))
        elif meta.get("solution") and meta.get("grade_id"):
            lesson.solution_cells.append(meta["grade_id"])
            lesson.stubs[meta["grade_id"]] = cell.source
    return lesson


def _roster(out: Path) -> tuple[list[str], str | None]:
    """The students of nbgrader's gradebook in ``out`` (SQLite), or ``([], why)``."""
    db = out / "gradebook.db"
    if not db.is_file():
        return [], "no gradebook.db in the folder (the roster is the students who handed something in)"
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            return sorted(r[0] for r in con.execute("SELECT id FROM student")), None
    except sqlite3.Error as exc:
        return [], f"the gradebook could not be read ({exc})"


def _late(out: Path) -> set[tuple[str, str]]:
    """(student, lesson) of submissions collected after their due date (``course workshop collect``'s marks)."""
    found = set()
    for mark in (out / "submitted").glob("*/*/.course-collected.json"):
        try:
            if json.loads(mark.read_text(encoding="utf-8")).get("late"):
                found.add((mark.parent.parent.name, mark.parent.name))
        except (OSError, ValueError, AttributeError):
            continue
    return found


def load(out: Path, root: Path) -> Report:
    """The report's data for the grading folder ``out`` (a ``course grade --out`` folder), with the lessons of the
    checkout ``root``."""
    out = Path(out)
    missing = []
    try:
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
        if not isinstance(results, list):
            raise ValueError("not a list of results")
        results = [r for r in results if isinstance(r, dict)]
    except FileNotFoundError:
        results, missing = [], [f"no results.json in {out} (run `course grade SUBMISSIONS --out {out}` first)"]
    except (OSError, ValueError) as exc:
        results, missing = [], [f"results.json could not be read ({exc})"]
    kept = []
    for n, r in enumerate(results):      # an older version's results: the fields this report reads, defaulted
        r = _clean(r)
        r.setdefault("cells", [])
        r.setdefault("status", "graded")
        r.setdefault("detail", "")
        r.setdefault("score", 0.0)
        r.setdefault("max_score", 0.0)
        problem = _row_problem(r)
        if problem:
            missing.append(f"results.json, result {n + 1}: {problem}; left out of the report and the exports")
            continue
        if not isinstance(r["cells"], list):
            missing.append(f"results.json, result {n + 1}: its cells are not a list; shown without them")
            r["cells"] = []
        r["cells"] = [c for c in r["cells"] if isinstance(c, dict)]
        kept.append(r)
    results = kept
    lessons = {}
    for lesson_id in sorted({str(r.get("lesson", "")) for r in results}):
        lesson = lesson_from_notebooks(root, lesson_id)
        if lesson is None:
            missing.append(f"the lesson {lesson_id!r} is not in this course (its results are shown without its rules)")
            lesson = Lesson(lesson_id, lesson_id)
        lessons[lesson_id] = lesson
    roster, why = _roster(out)
    if why:
        missing.append(why)
    return Report(out, results, lessons, roster, _late(out), missing)


def _clean(value):
    """A value read from results.json with every string made safe to write anywhere: a lone surrogate (a folder
    name that was not UTF-8, a message that held one) becomes its escape, as a terminal would show it."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _row_problem(r: dict) -> str | None:
    """Why a row of results.json is not a result this report can show (an edited or damaged file), or None."""
    if not isinstance(r.get("student"), str) or not r["student"]:
        return f"its student is {r.get('student')!r}, not a name"
    lesson = r.get("lesson")
    if not isinstance(lesson, str) or name_problem(lesson, "lesson"):
        return f"its lesson {shown(repr(lesson))[:80]} is not a lesson id"
    if not (_number(r["score"]) and _number(r["max_score"])):
        return f"its score {shown(repr(r['score']))[:40]} / {shown(repr(r['max_score']))[:40]} is not a pair of numbers"
    return None


# -- statistics -------------------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![A-Za-z_])[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?(?![A-Za-z_])")
_QUOTED = re.compile(r"`[^`]{1,200}`|'[^']{1,200}'|\"[^\"]{1,200}\"")
_SHAPE = re.compile(r"\((\s*#\s*,?)+\)")


def message_template(message: str) -> str:
    """A failure message with its particulars (numbers, shapes, quoted values) replaced by ``#`` and ``…``: the
    messages of one misconception group together whatever values each submission produced."""
    text = " ".join(str(message).split())
    text = text.split(" This cell checks:", 1)[0]
    text = _QUOTED.sub("…", text)
    text = _NUMBER.sub("#", text)
    text = _SHAPE.sub("(#)", text)
    return text[:400]


def _pearson(xs: list[float], ys: list[float]) -> float | None:
    n = len(xs)
    if n < 3:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sx = math.sqrt(sum((x - mx) ** 2 for x in xs))
    sy = math.sqrt(sum((y - my) ** 2 for y in ys))
    if sx == 0 or sy == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sx * sy)


def difficulty_and_discrimination(results: list[dict], grade_id: str) -> tuple[float | None, float | None, int]:
    """For one test cell, over the graded submissions: the share that passed it (difficulty, as PrairieLearn
    reports it: 1 is easy), its discrimination (the correlation between passing it and the score on the rest of
    the lesson: how well it separates strong from weak submissions; None with fewer than 3 or no spread), and the
    number of submissions counted."""
    passed, rest = [], []
    for r in results:
        cells = {c.get("grade_id"): c for c in r.get("cells", []) if isinstance(c, dict)}
        cell = cells.get(grade_id)
        if cell is None or r.get("status") in REFUSED:
            continue
        total = sum(float(c.get("points", 0)) for c in cells.values())
        passed.append(1.0 if cell.get("passed") else 0.0)
        rest.append(total - float(cell.get("points", 0)))
    if not passed:
        return None, None, 0
    return sum(passed) / len(passed), _pearson(passed, rest), len(passed)


def common_failures(results: list[dict], limit: int = 12) -> list[tuple[str, str, int, list[str], str]]:
    """The most common failure messages: ``(grade_id, template, count, students, one of the messages as written)``,
    most frequent first."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    example: dict[tuple[str, str], str] = {}
    for r in results:
        if r.get("status") in REFUSED:
            continue
        for c in r.get("cells", []):
            if isinstance(c, dict) and not c.get("passed") and c.get("message"):
                message = str(c["message"])
                key = (str(c.get("grade_id")), message_template(message))
                groups[key].append(str(r.get("student")))
                example.setdefault(key, f"{r.get('student')}: {' '.join(message.split())[:600]}")
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    return [(gid, template, len(students), sorted(set(students)), example[(gid, template)])
            for (gid, template), students in ranked[:limit]]


def status_counts(report: Report, lesson: str) -> dict[str, int]:
    rows = report.of(lesson)
    counts = Counter(str(r.get("status")) for r in rows)
    handed_in = {str(r.get("student")) for r in rows}
    return {
        "submissions": len(rows),
        "graded": counts.get(GRADED, 0),
        "suspicious": counts.get(SUSPICIOUS, 0),
        "refused": sum(counts.get(s, 0) for s in REFUSED),
        "timeout or died": counts.get("timeout", 0) + counts.get("kernel-died", 0),
        "late": sum(1 for s, l in report.late if l == lesson),
        "missing": len([s for s in report.roster if s not in handed_in]),
    }

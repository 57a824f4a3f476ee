"""Grades an LMS imports: Canvas's gradebook CSV and Moodle's grade import CSV, one column per lesson, written with
the course's formula-safe table writer (:func:`course.grading.results.table_text`: safe under any separator).

The course knows a learner by the id of her folder (on a hub, her account); the LMS knows her by its own ids. A
mapping file gives, per course id, what the LMS needs (every column optional but ``course_id``)::

    course_id,name,canvas_id,sis_user_id,sis_login_id,section,username,email,idnumber
    alice,"Doe, Alice",1234,S0001,adoe,A,adoe,alice@example.org,S0001

* **Canvas** (Grades > Import): the columns ``Student, ID, SIS User ID, SIS Login ID, Section``, then one per
  assignment, named ``<name> (<Canvas assignment id>)`` for an existing assignment (``--canvas-assignments``: lesson
  id -> assignment id) or ``<name>`` to create one; the second row, ``Points Possible``, gives each one's points.
* **Moodle** (Grades > Import > CSV file): a column to identify the user (``Username``, ``ID number`` and ``Email
  address`` are written where known; map one of them at import) and one column per lesson, the points earned.

A learner with no grade for a lesson (nothing handed in, or a notebook the grader refused) gets an empty cell
(nothing imported), never a 0 the course did not give; a folder whose name is not a student id is left out.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from course.grading.intake import name_problem
from course.grading.report.data import REFUSED
from course.grading.results import shown, table_text

__all__ = ["MappingError", "read_mapping", "canvas_csv", "moodle_csv", "exported", "MAPPING_COLUMNS"]

MAPPING_COLUMNS = ("course_id", "name", "canvas_id", "sis_user_id", "sis_login_id", "section", "username", "email",
                   "idnumber")


class MappingError(ValueError):
    """A mapping file the exports cannot use at all (unreadable, no ``course_id`` column): said, and nothing written."""


def read_mapping(path: Path | None) -> tuple[dict[str, dict], list[str]]:
    """``(course id -> its LMS fields, problems)`` from a mapping CSV (``course_id`` required, the rest optional;
    comma- or semicolon-separated, UTF-8 with or without a BOM, or a Windows code page); :class:`MappingError` when it
    cannot be used at all."""
    if path is None:
        return {}, []
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise MappingError(f"the mapping file {path} cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = raw.decode("cp1252", errors="replace")        # Excel on Windows saves CSV in its code page
    first = text.split("\n", 1)[0]
    delimiter = ";" if first.count(";") > first.count(",") else ","
    try:
        reader = csv.DictReader(io.StringIO(text), delimiter=delimiter)
        reader.fieldnames = [(f or "").strip().lower() for f in (reader.fieldnames or [])]
        rows = list(reader)
    except csv.Error as exc:
        raise MappingError(f"the mapping file {path} is not a CSV file this report can read ({exc})") from None
    if "course_id" not in reader.fieldnames:
        raise MappingError(f"the mapping file {path} has no course_id column in its first line (it has: "
                           f"{', '.join(shown(f)[:30] for f in reader.fieldnames[:12]) or 'nothing'}); its columns: "
                           f"{', '.join(MAPPING_COLUMNS)}, all but course_id optional")
    mapping, problems, seen = {}, [], {}
    for i, row in enumerate(rows, 2):
        cid = str(row.get("course_id") or "").strip()
        if not cid:
            problems.append(f"{path}: line {i} has no course_id (skipped)")
            continue
        if cid in mapping:
            problems.append(f"{path}: {shown(cid)[:60]!r} appears twice (the first one is used)")
            continue
        mapping[cid] = {k: str(row.get(k) or "").strip() for k in MAPPING_COLUMNS}
        for key in ("canvas_id", "sis_user_id", "sis_login_id", "username", "idnumber", "email"):
            value = mapping[cid][key]
            if value and seen.setdefault((key, value), cid) != cid:
                problems.append(f"{path}: {shown(cid)[:60]!r} and {shown(seen[(key, value)])[:60]!r} have the same "
                                f"{key} {shown(value)[:40]!r}: the LMS would give both grades to one learner")
        if not any(mapping[cid][k] for k in ("canvas_id", "sis_user_id", "sis_login_id")):
            problems.append(f"{path}: {shown(cid)[:60]!r} has no canvas_id, sis_user_id or sis_login_id: Canvas cannot "
                            "match that row (the course id is written as the SIS Login ID instead)")
    return mapping, problems


def _points(x: float) -> str:
    """A score as an LMS reads it: plain decimal digits, never an exponent (at most 4 decimals)."""
    text = f"{round(float(x), 4):.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def exported(results: list[dict]) -> tuple[list[dict], list[str]]:
    """The results an LMS gets: those graded (a refused notebook has no grade to give: its cell stays empty and the
    report lists it), under a folder name that is a student id; and, in words, the rest."""
    keep, left = [], []
    for r in results:
        student = str(r.get("student", ""))
        if name_problem(student, "student") is not None:
            left.append(f"a result under the folder {shown(student)[:60]!r}, which is not a student id")
        elif r.get("status") in REFUSED:
            left.append(f"{student}/{r.get('lesson')} ({r.get('status')}): no grade to export")
        else:
            keep.append(r)
    return keep, left


def _scores(results: list[dict]) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    scores, possible = {}, {}
    for r in results:
        possible[str(r.get("lesson"))] = max(possible.get(str(r.get("lesson")), 0.0), float(r.get("max_score", 0)))
    for r in exported(results)[0]:
        scores[(str(r.get("student")), str(r.get("lesson")))] = float(r.get("score", 0))
    return scores, possible


def canvas_csv(results: list[dict], mapping: dict[str, dict], lessons: list[str], titles: dict[str, str],
               assignments: dict[str, str] | None = None, roster: list[str] = ()) -> str:
    """The Canvas gradebook import file: a row for every learner with a result, on the roster or in the mapping."""
    scores, possible = _scores(results)
    assignments = assignments or {}
    columns = [f"{titles.get(l, l)} ({assignments[l]})" if assignments.get(l) else titles.get(l, l) for l in lessons]
    header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *columns]
    rows = [["Points Possible", "", "", "", "", *[_points(possible.get(l, 0)) for l in lessons]]]
    for student in sorted({s for s, _ in scores} | set(mapping) | set(roster)):
        m = mapping.get(student, {})
        identified = any(m.get(k) for k in ("canvas_id", "sis_user_id", "sis_login_id"))
        rows.append([m.get("name") or student, m.get("canvas_id", ""), m.get("sis_user_id", ""),
                     m.get("sis_login_id") or ("" if identified else student), m.get("section", ""),
                     *[_points(scores[(student, l)]) if (student, l) in scores else "" for l in lessons]])
    return table_text(header, rows)


def moodle_csv(results: list[dict], mapping: dict[str, dict], lessons: list[str], roster: list[str] = ()) -> str:
    """The Moodle grade import file (the same rows as :func:`canvas_csv`)."""
    scores, _ = _scores(results)
    header = ["Username", "ID number", "Email address", *lessons]
    rows = []
    for student in sorted({s for s, _ in scores} | set(mapping) | set(roster)):
        m = mapping.get(student, {})
        rows.append([m.get("username") or student, m.get("idnumber", ""), m.get("email", ""),
                     *[_points(scores[(student, l)]) if (student, l) in scores else "" for l in lessons]])
    return table_text(header, rows)

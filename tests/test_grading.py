"""Grading round trip through `course grade`, for every lesson with a tests/planted/<lesson>.py.

Per lesson, one `course grade` call grades: the reference solution (must get full marks), the
untouched student notebook (must get zero, graded without crashing), every planted classic bug (must
lose points in each cell it names) and every correct alternative style (must keep full marks).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from planting import build_submission, load_planted, results_by_key, write_submission

COURSE = str(Path(sys.executable).parent / "course")
ROOT = Path(__file__).resolve().parents[1]
PLANTED = load_planted()


def grade_bank(lesson: str, folder: Path) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """Grade the lesson's whole bank (reference, untouched, every variant) in one `course grade` call."""
    subs = folder / "submissions"
    write_submission(subs, "reference", lesson, build_submission(lesson))
    write_submission(subs, "untouched", lesson, build_submission(lesson, fill=False))
    for name, variant in PLANTED[lesson].items():
        write_submission(subs, name, lesson, build_submission(lesson, variant["replace"]))
    out = folder / "graded"
    proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(out), "--timeout", "60"],
                          capture_output=True, text=True, timeout=1800)
    assert (out / "results.json").is_file(), f"course grade wrote no results:\n{proc.stdout}\n{proc.stderr}"
    return proc, results_by_key(out / "results.json"), out


def _cells(result: dict) -> str:
    return "\n".join(f"    {c['grade_id']}: {c['points']}/{c['max_points']} {c['message'][:160]}" for c in result["cells"])


def _hidden_lines(lesson: str) -> set[str]:
    """Lines of hidden tests that the student notebook does not show anyway."""
    import nbformat

    source = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    hidden = set()
    for cell in source.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            block = cell.source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
            hidden |= {ln.strip() for ln in block.splitlines() if len(ln.strip()) > 30}
    student = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    return hidden - {ln.strip() for c in student.cells for ln in c.source.splitlines()}


def _feedback_problems(student: str, result: dict, hidden: set[str]) -> list[str]:
    import html
    import re

    if not result["feedback"]:
        return [f"{student}: no feedback file"]
    text = html.unescape(re.sub(r"<[^>]+>", "", Path(result["feedback"]).read_text()))
    problems = []
    if "BEGIN HIDDEN TESTS" in text:
        problems.append(f"{student}: feedback shows a hidden-tests marker")
    leaked = [ln for ln in hidden if ln in text]
    if leaked:
        problems.append(f"{student}: feedback shows hidden test code: {leaked[:2]}")
    for c in result["cells"]:
        if not c["passed"] and c["message"] and c["message"][:40] not in text:
            problems.append(f"{student}: feedback lacks the message of {c['grade_id']}")
    return problems


@pytest.mark.slow
@pytest.mark.parametrize("lesson", sorted(PLANTED))
def test_grading_round_trip(lesson, tmp_path):
    """Reference: full marks. Untouched: zero, graded. Each bug: loses points where it should.
    Each alternative style: full marks. Feedback: messages shown, hidden test code never."""
    proc, results, out = grade_bank(lesson, tmp_path)
    problems = []
    # A copy in nbgrader's submitted/, which the formgrader counts ("# Submissions").
    kept = {p.parent.parent.name for p in (out / "submitted").glob(f"*/{lesson}/{lesson}.ipynb")}
    if kept != {student for student, _ in results}:
        problems.append(f"submitted/ holds {sorted(kept)}, not every graded student")

    ref = results[("reference", lesson)]
    if not (ref["status"] == "graded" and ref["max_score"] > 0 and ref["score"] == ref["max_score"]):
        problems.append(f"reference solution: {ref['score']}/{ref['max_score']} ({ref['status']} {ref['detail']})\n{_cells(ref)}")

    untouched = results[("untouched", lesson)]
    if untouched["status"] != "graded" or untouched["score"] != 0 or any(c["passed"] for c in untouched["cells"]):
        problems.append(f"untouched student notebook: {untouched['score']} points ({untouched['status']})\n{_cells(untouched)}")

    for name, variant in PLANTED[lesson].items():
        r = results[(name, lesson)]
        cells = {c["grade_id"]: c for c in r["cells"]}
        if r["status"] != "graded":
            problems.append(f"{name}: status {r['status']} ({r['detail']})")
            continue
        if not variant["must_fail"]:
            if r["score"] != r["max_score"]:
                problems.append(f"{name} (a correct alternative style) lost points:\n{_cells(r)}")
            continue
        if r["score"] >= r["max_score"]:
            problems.append(f"planted bug {name} kept full marks")
        for gid in variant["must_fail"]:
            if gid not in cells:
                problems.append(f"{name}: {lesson} has no test cell {gid!r}")
            elif cells[gid]["points"] >= cells[gid]["max_points"]:
                problems.append(f"planted bug {name} was not caught by {gid}:\n{_cells(r)}")
            elif not cells[gid]["message"]:
                problems.append(f"{name}: {gid} failed without a message for the learner")

    hidden = _hidden_lines(lesson)
    checked = 0
    for (student, _), r in results.items():
        if r["status"] == "graded":
            problems += _feedback_problems(student, r, hidden)
            checked += 1
    if checked < 3:
        problems.append(f"only {checked} feedback files to check")
    assert not problems, f"{lesson}: " + "\n".join(problems) + f"\n--- course grade said:\n{proc.stdout[-2000:]}"


def test_every_lesson_has_a_planted_bank():
    root = Path(__file__).resolve().parents[1]
    lessons = sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir())
    missing = [l for l in lessons if l not in PLANTED]
    assert not missing, f"lessons without tests/planted/<lesson>.py: {missing}"
    for lesson, variants in PLANTED.items():
        assert any(v["must_fail"] for v in variants.values()), f"{lesson} plants no bug"
        assert any(not v["must_fail"] for v in variants.values()), f"{lesson} has no correct alternative style"

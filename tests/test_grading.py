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
PLANTED = load_planted()
_graded: dict[str, tuple] = {}

pytestmark = pytest.mark.slow


def _param(lesson, *rest):
    return pytest.param(lesson, *rest, marks=pytest.mark.xdist_group(f"grade-{lesson}"),
                        id="-".join([lesson, *map(str, rest)]))


def graded(lesson: str, tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """Grade the lesson's whole bank once per test session (and per xdist worker)."""
    if lesson not in _graded:
        subs = tmp_path_factory.mktemp(f"submissions-{lesson}")
        write_submission(subs, "reference", lesson, build_submission(lesson))
        write_submission(subs, "untouched", lesson, build_submission(lesson, fill=False))
        for name, variant in PLANTED[lesson].items():
            write_submission(subs, name, lesson, build_submission(lesson, variant["replace"]))
        out = tmp_path_factory.mktemp(f"graded-{lesson}")
        proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(out), "--timeout", "60"],
                              capture_output=True, text=True, timeout=1800)
        assert (out / "results.json").is_file(), f"course grade wrote no results:\n{proc.stdout}\n{proc.stderr}"
        _graded[lesson] = (proc, results_by_key(out / "results.json"), out)
    return _graded[lesson]


def _cells(result: dict) -> str:
    return "\n".join(f"  {c['grade_id']}: {c['points']}/{c['max_points']} {c['message'][:200]}" for c in result["cells"])


@pytest.mark.parametrize("lesson", [_param(l) for l in sorted(PLANTED)])
def test_reference_gets_full_marks(lesson, tmp_path_factory):
    _, results, _ = graded(lesson, tmp_path_factory)
    r = results[("reference", lesson)]
    assert r["status"] == "graded", r["detail"]
    assert r["max_score"] > 0
    assert r["score"] == r["max_score"], f"reference solution lost points:\n{_cells(r)}"


@pytest.mark.parametrize("lesson", [_param(l) for l in sorted(PLANTED)])
def test_untouched_student_notebook_gets_zero(lesson, tmp_path_factory):
    _, results, _ = graded(lesson, tmp_path_factory)
    r = results[("untouched", lesson)]
    assert r["status"] == "graded", r["detail"]
    assert r["score"] == 0, f"the untouched notebook earned points:\n{_cells(r)}"
    assert r["cells"] and not any(c["passed"] for c in r["cells"])


@pytest.mark.parametrize("lesson,variant", [_param(l, v) for l in sorted(PLANTED) for v in PLANTED[l]])
def test_planted_variant(lesson, variant, tmp_path_factory):
    _, results, _ = graded(lesson, tmp_path_factory)
    r = results[(variant, lesson)]
    must_fail = PLANTED[lesson][variant]["must_fail"]
    assert r["status"] == "graded", r["detail"]
    cells = {c["grade_id"]: c for c in r["cells"]}
    if not must_fail:
        assert r["score"] == r["max_score"], f"a correct alternative style lost points:\n{_cells(r)}"
        return
    assert r["score"] < r["max_score"], f"planted bug {variant} kept full marks"
    for gid in must_fail:
        assert gid in cells, f"{variant}: no test cell {gid!r} in {lesson}"
        assert cells[gid]["points"] < cells[gid]["max_points"], \
            f"planted bug {variant} was not caught by {gid}:\n{_cells(r)}"
        assert cells[gid]["message"], f"{gid} failed without a message for the learner"


@pytest.mark.parametrize("lesson", [_param(l) for l in sorted(PLANTED)])
def test_feedback_hides_hidden_tests(lesson, tmp_path_factory):
    import html
    import re

    import nbformat

    _, results, out = graded(lesson, tmp_path_factory)
    source = nbformat.read(str(Path(__file__).resolve().parents[1] / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    hidden_lines = set()
    for cell in source.cells:
        if "### BEGIN HIDDEN TESTS" in cell.source:
            block = cell.source.split("### BEGIN HIDDEN TESTS", 1)[1].split("### END HIDDEN TESTS", 1)[0]
            hidden_lines |= {ln.strip() for ln in block.splitlines() if len(ln.strip()) > 30}
    # A hidden line that also stands in the student notebook (a repeated set-up line) reveals nothing.
    student = (Path(__file__).resolve().parents[1] / "notebooks" / lesson / f"{lesson}.ipynb").read_text()
    student_lines = {ln.strip() for c in nbformat.reads(student, as_version=4).cells for ln in c.source.splitlines()}
    hidden_lines -= student_lines
    checked = 0
    for (student, les), r in results.items():
        if not r["feedback"]:
            continue
        text = html.unescape(re.sub(r"<[^>]+>", "", Path(r["feedback"]).read_text()))
        assert "BEGIN HIDDEN TESTS" not in text
        leaked = [ln for ln in hidden_lines if ln in text]
        assert not leaked, f"feedback for {student} shows hidden test code: {leaked[:3]}"
        for c in r["cells"]:
            if not c["passed"] and c["message"]:
                assert c["message"][:40] in text, f"feedback for {student} lacks the message of {c['grade_id']}"
        checked += 1
    assert checked >= 3


def test_every_lesson_has_a_planted_bank():
    root = Path(__file__).resolve().parents[1]
    lessons = sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir())
    missing = [l for l in lessons if l not in PLANTED]
    assert not missing, f"lessons without tests/planted/<lesson>.py: {missing}"
    for lesson, variants in PLANTED.items():
        assert any(v["must_fail"] for v in variants.values()), f"{lesson} plants no bug"
        assert any(not v["must_fail"] for v in variants.values()), f"{lesson} has no correct alternative style"

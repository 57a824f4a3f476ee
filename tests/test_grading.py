"""Grading round trip through `course grade`, for every lesson with a tests/planted/<lesson>.py.

Per lesson: the reference solution (must get full marks), the untouched student notebook (must get
zero, graded without crashing), every planted classic bug (must lose points in each cell it names)
and every correct alternative style (must keep full marks).

A planted bug (but each lesson's first) is graded only on the test cells it names
(``tests/grade_with_hooks.py --only-cells``; see :func:`partially_graded`).

The banks of the selected lessons (all of them in `make test`) are graded in one `course grade`
batch, shared by the per-lesson tests: a batch pays its judges' and sandboxes' start-up once (about
10 CPU-seconds), not once per lesson. Under pytest-xdist the first worker to need it grades (one
judge per core) while the others wait on a lock, then read the same results.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course.grading.judge.watchdog import NOT_ASKED
from planting import build_submission, load_planted, results_by_key, write_submission

COURSE = str(Path(sys.executable).parent / "course")
ROOT = Path(__file__).resolve().parents[1]
PLANTED = load_planted()
HOOKS = Path(__file__).resolve().parent / "grade_with_hooks.py"    # course grade, with --only-cells


def write_bank(lesson: str, subs: Path) -> None:
    """The lesson's whole bank (reference, untouched, every variant) as submissions."""
    write_submission(subs, "reference", lesson, build_submission(lesson))
    write_submission(subs, "untouched", lesson, build_submission(lesson, fill=False))
    for name, variant in PLANTED[lesson].items():
        write_submission(subs, name, lesson, build_submission(lesson, variant["replace"]))


def partially_graded(lesson: str) -> list[str]:
    """The planted bugs graded only on the test cells that must catch them (``tests/grade_with_hooks.py --only-cells``):
    every bug but the lesson's first, whose every failing cell is checked too (its message on the page,
    no hidden test code there). The other cells of a bug were half of the batch's CPU time; ``COURSE_PLANTED=all``
    grades every bug on every cell. The reference, the untouched notebook (which fails every test cell)
    and every correct alternative are graded on every cell."""
    if os.environ.get("COURSE_PLANTED", "") == "all":
        return []
    bugs = [name for name, variant in PLANTED[lesson].items() if variant["must_fail"]]
    return bugs[1:]


@pytest.fixture(scope="session")
def graded_banks(request, tmp_path_factory) -> tuple[dict, Path, str]:
    """The banks of the lessons whose round trips this session runs (all 13 in `make test`; one with
    ``-k 05_self``), graded by one `course grade` call, once per test session (every xdist worker reads
    the same results): (results by (student, lesson), the grading folder, what course grade said)."""
    lessons = sorted({item.callspec.params["lesson"] for item in request.session.items
                      if getattr(item, "originalname", "") == "test_grading_round_trip"})
    shared = tmp_path_factory.getbasetemp()
    shared = shared.parent if shared.name.startswith("popen-gw") else shared   # xdist: one folder for all workers
    folder = shared / "graded-banks"
    with open(shared / "graded-banks.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done.json").is_file():
            subs = folder / "submissions"
            for lesson in lessons:
                write_bank(lesson, subs)
            only = {f"{name}/{lesson}": graded_cells(PLANTED[lesson][name]) for lesson in lessons
                    for name in partially_graded(lesson)}
            (folder / "only-cells.json").write_text(json.dumps(only))
            proc = subprocess.run([sys.executable, str(HOOKS), "--only-cells", str(folder / "only-cells.json"),
                                   str(subs), "--out", str(folder / "graded"), "--timeout", "60"],
                                  capture_output=True, text=True, timeout=3000)
            (folder / "done.json").write_text(json.dumps({"stdout": proc.stdout[-4000:], "stderr": proc.stderr[-4000:]}))
    said = json.loads((folder / "done.json").read_text())
    out = folder / "graded"
    assert (out / "results.json").is_file(), f"course grade wrote no results:\n{said['stdout']}\n{said['stderr']}"
    return results_by_key(out / "results.json"), out, said["stdout"]


def graded_cells(variant: dict) -> list[str]:
    """The test cells a partially graded bug is graded on: those that must catch it, and those that must not
    (``must_pass``: a test of another idea, which the bug must not cost points)."""
    return list(variant["must_fail"]) + [gid for gid in variant.get("must_pass", []) if gid not in variant["must_fail"]]


def message_problems(name: str, variant: dict, cells: dict) -> list[str]:
    """A planted bug's ``must_pass`` cells keep their points, and its ``says`` / ``never_says``
    ({grade_id: [text, ...]}): the failure message of that cell
    contains each ``says`` text and no ``never_says`` text (case-insensitive), so that a message cannot
    point the wrong way (softmax advice on a cosine score) or miss the rule the text states."""
    problems = []
    for gid in variant.get("must_pass", []):
        cell = cells.get(gid)
        if cell is None:
            problems.append(f"{name}: no test cell {gid!r} (must_pass)")
        elif cell["points"] < cell["max_points"]:
            problems.append(f"{name} lost points in {gid}, a test of another idea (must_pass): {cell['message'][:300]}")
    for key, wanted in (("says", True), ("never_says", False)):
        for gid, texts in variant.get(key, {}).items():
            message = cells.get(gid, {}).get("message", "")
            for text in [texts] if isinstance(texts, str) else texts:
                if (text.lower() in message.lower()) != wanted:
                    problems.append(f"{name}: the message of {gid} {'lacks' if wanted else 'contains'} {text!r}: "
                                    f"{message[:400]}")
    return problems


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
def test_grading_round_trip(lesson, graded_banks):
    """Reference: full marks. Untouched: zero, graded. Each bug: loses points where it should.
    Each alternative style: full marks. Feedback: messages shown, hidden test code never."""
    every, out, said = graded_banks
    results = {key: r for key, r in every.items() if key[1] == lesson}
    expected = {"reference", "untouched", *PLANTED[lesson]}
    assert {student for student, _ in results} == expected, f"{lesson}: graded {sorted(results)}\n{said[-2000:]}"
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
        partial = name in partially_graded(lesson)
        asked = [c["grade_id"] for c in r["cells"] if c["message"] != NOT_ASKED]
        if asked != [gid for gid in cells if not partial or gid in graded_cells(variant)]:
            problems.append(f"{name}: graded on {asked}, not on {'the cells it names' if partial else 'every cell'}")
        if not variant["must_fail"]:
            if r["score"] != r["max_score"]:
                problems.append(f"{name} (a correct alternative style) lost points:\n{_cells(r)}")
            continue
        if not partial and r["score"] >= r["max_score"]:
            problems.append(f"planted bug {name} kept full marks")
        for gid in variant["must_fail"]:
            if gid not in cells:
                problems.append(f"{name}: {lesson} has no test cell {gid!r}")
            elif cells[gid]["points"] >= cells[gid]["max_points"]:
                problems.append(f"planted bug {name} was not caught by {gid}:\n{_cells(r)}")
            elif not cells[gid]["message"]:
                problems.append(f"{name}: {gid} failed without a message for the learner")
            elif partial and "NameError" in cells[gid]["message"]:     # a name an earlier (skipped) test cell defines?
                problems.append(f"{name}: {gid} failed with a NameError, which a skipped test cell may explain, not the "
                                f"bug: {cells[gid]['message'][:200]}")
        problems += message_problems(name, variant, cells)

    hidden = _hidden_lines(lesson)
    checked = 0
    for (student, _), r in results.items():
        if r["status"] == "graded":
            problems += _feedback_problems(student, r, hidden)
            checked += 1
    if checked < 3:
        problems.append(f"only {checked} feedback files to check")
    assert not problems, f"{lesson}: " + "\n".join(problems) + f"\n--- course grade said:\n{said[-2000:]}"


def test_every_lesson_has_a_planted_bank():
    root = Path(__file__).resolve().parents[1]
    lessons = sorted(p.name for p in (root / "solutions").iterdir() if p.is_dir())
    missing = [l for l in lessons if l not in PLANTED]
    assert not missing, f"lessons without tests/planted/<lesson>.py: {missing}"
    for lesson, variants in PLANTED.items():
        assert any(v["must_fail"] for v in variants.values()), f"{lesson} plants no bug"
        assert any(not v["must_fail"] for v in variants.values()), f"{lesson} has no correct alternative style"


@pytest.mark.slow
def test_the_class_report_of_every_bank(graded_banks):
    """The report `course grade` wrote at the end of the banks' batch (every lesson, about 30 students each): a page
    per lesson, the class page's counts and means are results.json's, and the certificate's catalogue names a
    mistake for most of the bugs graded on every cell (the first of each bank), at the exercise the bug changed."""
    import html
    import re

    from course.grading.report import data as report_data
    from course.grading.report.misconceptions import Catalogue

    every, out, said = graded_banks
    lessons = sorted({lesson for _, lesson in every})
    index = out / "report" / "index.html"
    assert index.is_file(), f"no class report after the batch:\n{said[-2000:]}"
    page = index.read_text(encoding="utf-8")
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, re.S)[1:]:
        cells = [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split()) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        if cells:
            rows[cells[0]] = cells
    assert sorted(rows) == lessons, sorted(rows)
    for lesson in lessons:
        assert (out / "report" / f"{lesson}.html").is_file(), lesson
        mine = [r for key, r in every.items() if key[1] == lesson]
        graded = [r for r in mine if r["status"] not in report_data.REFUSED]
        assert rows[lesson][1] == str(len(mine)), (lesson, rows[lesson])
        assert rows[lesson][7].startswith(f"{sum(r['score'] for r in graded) / len(graded):.1f} / "), (lesson, rows[lesson])

    catalogue = Catalogue.load(ROOT / "docs" / "fairness.json")
    first = {lesson: [n for n, v in PLANTED[lesson].items() if v["must_fail"]][:1] for lesson in lessons}
    bugs = [(lesson, name) for lesson, names in first.items() for name in names
            if every[(name, lesson)]["score"] < every[(name, lesson)]["max_score"]]
    named = {b: catalogue.name(b[0], every[(b[1], b[0])]["cells"]) for b in bugs}
    hits = [b for b, hit in named.items() if hit is not None]
    placed = [b for b in hits if named[b][0].exercise in PLANTED[b[0]][b[1]]["replace"]]
    assert len(hits) >= 0.6 * len(bugs) and len(placed) >= 0.8 * len(hits), (
        f"named {len(hits)} of {len(bugs)} bugs, {len(placed)} at the right exercise: "
        + "; ".join(f"{l}/{n} -> {named[(l, n)][0].exercise if named[(l, n)] else None}" for l, n in bugs))

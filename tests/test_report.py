"""The class report (``course report OUT``, written by ``course grade`` too): what an instructor reads after a batch.

A small class is graded once for the module (two lessons, ten submissions): honest answers in three styles, one
answer copied with its names changed and its methods reordered, two classic mistakes, a submission whose error
message carries markup, a folder whose name is markup, a learner on the roster who handed nothing in, a late
submission. The tests read the pages and the exports back and check them against ``results.json``:

* every number the pages show (submissions, graded, late, missing, mean score, each test's failures) is the one
  results.json and the roster give;
* the copy pairs with its original, and two learners who wrote their own do not;
* each classic mistake is named by the certificate's catalogue;
* no string from a submission reaches a page unescaped, and no cell of an export reads as a formula;
* the Canvas and Moodle files have the columns and rows their import expects;
* a missing or older folder gets a clear message, not a traceback.

Chromium opening the pages offline, beside a hostile submission: tests/test_browser.py.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from course.grading.report import data, lms, misconceptions, similarity
from planting import build_submission, load_planted, solution_sources, write_submission

ROOT = Path(__file__).resolve().parents[1]
L05, L00 = "05_self_attention", "00_softmax_lookup"
HOSTILE_NAME = "<img src=x onerror=alert(1)>"
MARKUP = '<script>alert("report")</script>'


def _planted(lesson: str, name: str) -> dict:
    return load_planted(everything=True)[lesson][name]["replace"]


def _copied(lesson: str) -> dict[str, str]:
    """The reference of ``lesson`` as a learner who copied it would hand it in: comments gone, names changed, the
    class's methods in the other order."""
    out = {}
    for gid, src in solution_sources(lesson).items():
        src = re.sub(r"#.*", "", src)
        for old, new in (("scores", "s"), ("weights", "attn"), ("d_k", "dim"), ("out", "result"),
                         ("positions", "pos")):
            src = re.sub(rf"\b{old}\b", new, src)
        if "    def __init__" in src and "    def forward" in src:
            head, rest = src.split("    def __init__", 1)
            init, forward = rest.split("    def forward", 1)
            src = head + "    def forward" + forward.rstrip() + "\n\n    def __init__" + init
        out[gid] = src
    return out


def _style(*names: str) -> dict[str, str]:
    replace = {}
    for name in names:
        replace.update(_planted(L05, name))
    return replace


RAISES_MARKUP = textwrap.dedent(f'''
    def scaled_dot_product_attention(q, k, v, mask=None):
        raise ValueError('{MARKUP}')
''')


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Path:
    """The class, graded by `course grade` (its report left to `course report`), with a roster and a late mark."""
    base = tmp_path_factory.mktemp("class-report")
    subs, out = base / "submissions", base / "graded"
    write_submission(subs, "alice", L05, build_submission(L05))
    write_submission(subs, "alice-copy", L05, build_submission(L05, _copied(L05)))
    write_submission(subs, "bob", L05, build_submission(L05, _style("sdpa_einsum_where", "masks_with_loops",
                                                                    "self_attention_inline_einsum_no_bias")))
    write_submission(subs, "carol", L05, build_submission(L05, _style("sdpa_loop_over_queries", "self_attention_loop_over_batch")))
    write_submission(subs, "dave", L05, build_submission(L05, _planted(L05, "sdpa_no_scaling")))
    write_submission(subs, "erin", L05, build_submission(L05, _planted(L05, "sdpa_softmax_over_queries")))
    write_submission(subs, "mallory", L05, build_submission(L05, {"scaled_dot_product_attention": RAISES_MARKUP}))
    write_submission(subs, HOSTILE_NAME, L05, build_submission(L05))
    write_submission(subs, "alice", L00, build_submission(L00))
    write_submission(subs, "dave", L00, build_submission(L00, fill=False))
    run = subprocess.run([sys.executable, "-m", "course.commands.cli", "grade", str(subs), "--out", str(out),
                          "--jobs", "2", "--timeout", "60", "--no-report"], cwd=ROOT, capture_output=True, text=True,
                         timeout=900)
    assert (out / "results.json").is_file(), run.stdout[-3000:] + run.stderr[-3000:]
    assert not (out / "report").exists(), "--no-report wrote a report"
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        gb.update_or_create_student("frank")                  # on the roster, handed nothing in
    mark = out / "submitted" / "bob" / L05 / ".course-collected.json"
    mark.write_text(json.dumps({"folder": f"bob+{L05}+x", "time": "2026-12-07T10:00:00Z", "late": True}))
    (base / "mapping.csv").write_text(
        "course_id,name,canvas_id,sis_user_id,sis_login_id,section,username,email,idnumber\n"
        'alice,"Doe, Alice",101,S1,adoe,A,adoe,alice@example.org,S1\n'
        'erin,"=HYPERLINK(""http://x"",""y"")",105,S5,erin,B,erin,erin@example.org,S5\n', encoding="utf-8")
    (base / "canvas.json").write_text(json.dumps({L05: "7001"}))
    rep = subprocess.run([sys.executable, "-m", "course.commands.cli", "report", str(out), "--mapping",
                          str(base / "mapping.csv"), "--canvas-assignments", str(base / "canvas.json"), "--site",
                          "https://course.example.org"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert rep.returncode == 0, rep.stdout[-3000:] + rep.stderr[-3000:]
    assert rep.stderr == "", rep.stderr[-3000:]
    return out


def _results(out: Path) -> list[dict]:
    return json.loads((out / "results.json").read_text())


def _text(page: str) -> str:
    """A page's visible text (tags removed, entities decoded), one space between words."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<img [^>]*>", "", page))).split())


def _rows(page: str, first_header: str) -> list[list[str]]:
    """The rows of the table whose first header cell is ``first_header``: each row's cells as text."""
    for table in re.findall(r"<table>(.*?)</table>", page, re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
        heads = [_text(c) for c in re.findall(r"<th>(.*?)</th>", rows[0], re.S)]
        if heads and heads[0] == first_header:
            return [[_text(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows[1:]]
    raise AssertionError(f"no table headed {first_header!r}")


def test_the_class_page_counts_what_results_and_roster_say(graded):
    results = _results(graded)
    page = (graded / "report" / "index.html").read_text()
    rows = {r[0]: r for r in _rows(page, "lesson")}
    assert set(rows) == {L00, L05}
    for lesson, row in rows.items():
        mine = [r for r in results if r["lesson"] == lesson]
        graded_rows = [r for r in mine if r["status"] not in data.REFUSED]
        handed_in = {r["student"] for r in mine}
        roster = {"frank", *{r["student"] for r in results if r["status"] not in data.REFUSED}}
        missing = len([s for s in roster if s not in handed_in])
        mean = sum(r["score"] for r in graded_rows) / len(graded_rows)
        assert row[1:7] == [str(len(mine)), str(sum(r["status"] == "graded" for r in mine)),
                            str(sum(r["status"] == "suspicious" for r in mine)),
                            str(sum(r["status"] in data.REFUSED for r in mine)),
                            "1" if lesson == L05 else "0", str(missing)], (lesson, row)
        assert row[7].startswith(f"{mean:.1f} / "), (lesson, row, mean)
    assert "frank" not in {r["student"] for r in results} and missing >= 1


def test_each_tests_failures_and_difficulty_are_the_results(graded):
    results = [r for r in _results(graded) if r["lesson"] == L05 and r["status"] not in data.REFUSED]
    page = (graded / "report" / f"{L05}.html").read_text()
    rows = _rows(page, "test")
    assert len(rows) == len(results[0]["cells"]) > 5
    for gid, rule, points, failed, difficulty, _disc in rows:
        outcomes = [c["passed"] for r in results for c in r["cells"] if c["grade_id"] == gid]
        assert failed == f"{outcomes.count(False)} of {len(outcomes)}", (gid, failed)
        assert difficulty == f"{outcomes.count(True) / len(outcomes):.2f}", (gid, difficulty)
        assert rule, f"{gid}: the rule it checks is not shown"
    lesson = data.lesson_from_notebooks(ROOT, L05)
    for t in lesson.tests:
        assert t.rule and "section: " + t.section in _text(page), t.grade_id
    # a test failed by the weak and passed by the strong discriminates positively
    fake = [{"status": "graded", "cells": [{"grade_id": "a", "passed": s > 2, "points": float(s > 2)},
                                           {"grade_id": "b", "passed": True, "points": float(s)}]} for s in range(6)]
    p, disc, n = data.difficulty_and_discrimination(fake, "a")
    assert (p, n) == (0.5, 6) and disc > 0.8
    p, disc, n = data.difficulty_and_discrimination(fake, "b")
    assert p == 1 and disc is None                     # no spread: no discrimination, not a fake 0


def test_a_copy_pairs_with_its_original_and_own_work_does_not(graded):
    page = (graded / "report" / f"{L05}.html").read_text()
    pairs = {tuple(sorted(m)) for m in re.findall(r"<summary><b>(.*?)</b> and <b>(.*?)</b>", page)}
    assert ("alice", "alice-copy") in pairs, pairs
    for honest in (("bob", "carol"), ("alice", "bob"), ("alice", "carol"), ("alice-copy", "bob")):
        assert tuple(sorted(honest)) not in pairs, (honest, pairs)
    assert "<mark>" in page and "never a verdict" in page


def test_similarity_ignores_the_starter_code():
    """Two learners who left every stub but one as released and wrote one line in it share nothing but the stubs
    (and the few characters around their line): they do not pair, even with the same line."""
    lesson = data.lesson_from_notebooks(ROOT, L05)
    stubs = "\n\n".join(lesson.stubs[g] for g in lesson.solution_cells)
    a = stubs.replace("raise NotImplementedError", "return torch.ones(T, T, dtype=torch.bool).tril()", 1)
    b = stubs.replace("raise NotImplementedError", "return (torch.arange(T)[:, None] >= torch.arange(T)).bool()", 1)
    assert similarity.similar_pairs(L05, {"a": a, "b": b}, stubs) == []
    assert similarity.similar_pairs(L05, {"a": a, "b": a}, stubs) == []    # one line is too little to say
    whole = "\n\n".join(solution_sources(L05)[g] for g in lesson.solution_cells)
    assert similarity.similar_pairs(L05, {"a": whole, "b": whole}, stubs)  # the same whole answer twice pairs


def test_each_classic_mistake_is_named(graded):
    page = (graded / "report" / f"{L05}.html").read_text()
    named = {r[0]: r[1] for r in _rows(page, "student")  if len(r) == 5}
    assert "scale" in named.get("dave", ""), named
    assert "softmax over the wrong axis" in named.get("erin", ""), named
    for honest in ("alice", "alice-copy", "bob", "carol"):
        assert honest not in named, named
    assert "for you only" in page


def test_what_is_left_out_of_the_exports_is_said(graded):
    page = _text((graded / "report" / "index.html").read_text())
    assert "left out of the LMS exports" in page and "not a student id" in page, page[:2000]


def test_the_catalogue_comes_from_the_certificate():
    catalogue = misconceptions.Catalogue.load(ROOT / "docs" / "fairness.json")
    assert catalogue.mistakes.get(L05), "docs/fairness.json has no killed mutant of lesson 05"
    assert misconceptions.Catalogue.load(ROOT / "no-such-file.json").mistakes == {}
    assert catalogue.name(L05, [{"grade_id": "x", "passed": True, "message": ""}]) is None      # nothing failed


def test_no_string_from_a_submission_reaches_a_page_unescaped(graded):
    pages = {p.name: p.read_text() for p in (graded / "report").glob("*.html")}
    for name, page in pages.items():
        assert "<script" not in page.lower() and "<img src=x" not in page, name
        assert "onerror=" not in page.replace("onerror=alert(1)&gt;", ""), name
        assert "Content-Security-Policy" in page and "default-src 'none'" in page, name
    lesson = pages[f"{L05}.html"]
    results = _results(graded)
    mallory = next(r for r in results if r["student"] == "mallory")
    assert any(MARKUP in c["message"] for c in mallory["cells"]), "the markup did not reach the results"
    assert html.escape(MARKUP, quote=True) in lesson or "alert(&quot;report&quot;)" in lesson
    hostile = [r for r in results if r["student"] != html.unescape(r["student"]) or "<" in r["student"]]
    for r in hostile:
        assert html.escape(r["student"]) in lesson or html.escape(r["student"]) in pages["index.html"]


def _csv(path: Path) -> list[list[str]]:
    return list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))


def test_canvas_export(graded):
    rows = _csv(graded / "exports" / "canvas.csv")
    head = rows[0]
    assert head[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    title = data.lesson_from_notebooks(ROOT, L05).title
    assert f"{title} (7001)" in head, head                        # an existing Canvas assignment, by its id
    assert rows[1][0] == "Points Possible"
    col05 = head.index(f"{title} (7001)")
    possible = {r["lesson"]: r["max_score"] for r in _results(graded)}
    assert float(rows[1][col05]) == possible[L05]
    by_name = {r[0]: r for r in rows[2:]}
    alice = by_name["Doe, Alice"]
    assert alice[1:5] == ["101", "S1", "adoe", "A"]
    score = {(r["student"], r["lesson"]): r["score"] for r in _results(graded)}
    assert float(alice[col05]) == score[("alice", L05)]
    erin = next(r for r in rows[2:] if r[1] == "105")
    assert not erin[0].startswith(("=", "+", "-", "@")), erin      # a name that is a formula stays text
    assert "frank" in {r[3] for r in rows[2:]}, "a learner on the roster is in the export"
    assert not any("<" in cell for r in rows for cell in r), "a folder that is not a student id is exported"
    mallory = next(r for r in rows[2:] if r[3] == "mallory")
    assert float(mallory[col05]) == score[("mallory", L05)]
    frank = next(r for r in rows[2:] if r[3] == "frank")
    assert frank[5:] == [""] * (len(head) - 5), "a lesson not handed in is left empty, never 0"


def test_moodle_export(graded):
    rows = _csv(graded / "exports" / "moodle.csv")
    assert rows[0][:3] == ["Username", "ID number", "Email address"] and rows[0][3:] == [L00, L05]
    score = {(r["student"], r["lesson"]): r["score"] for r in _results(graded)}
    by_user = {r[0]: r for r in rows[1:]}
    assert by_user["adoe"][1:3] == ["S1", "alice@example.org"]
    assert float(by_user["adoe"][3]) == score[("alice", L00)] and float(by_user["adoe"][4]) == score[("alice", L05)]
    assert by_user["bob"][3] == "" and float(by_user["bob"][4]) == score[("bob", L05)]


def test_mapping_problems_are_said(tmp_path):
    bad = tmp_path / "m.csv"
    bad.write_text("student,name\nalice,A\n")
    with pytest.raises(lms.MappingError, match="no course_id column"):
        lms.read_mapping(bad)
    with pytest.raises(lms.MappingError, match="cannot be read"):
        lms.read_mapping(tmp_path / "none.csv")
    twice = tmp_path / "t.csv"
    twice.write_text("course_id,name,canvas_id\nalice,A,1\nalice,B,2\n,C,3\nbob,Bob,1\ncarol,Carol,\n")
    mapping, problems = lms.read_mapping(twice)
    said = " | ".join(problems)
    assert mapping["alice"]["name"] == "A" and "appears twice" in said and "no course_id" in said
    assert "the same canvas_id" in said and "'carol' has no canvas_id" in said, said
    # Excel's files: a Windows code page, a semicolon, headers in other cases
    excel = tmp_path / "e.csv"
    excel.write_bytes(" Course_ID ;Name;canvas_id\r\nalice;Dupr\xe9, Al\xefce;101\r\n".encode("latin-1"))
    mapping, _ = lms.read_mapping(excel)
    assert mapping["alice"]["name"] == "Dupré, Alïce" and mapping["alice"]["canvas_id"] == "101"


def test_scores_reach_an_lms_as_plain_numbers():
    assert [lms._points(x) for x in (18, 12.3456789, 1234567.5, 0.0, -0.0)] == ["18", "12.3457", "1234567.5", "0", "0"]


def _report(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "course.commands.cli", "report", str(out), *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_bad_folders_get_a_clear_message(tmp_path):
    run = _report(tmp_path / "nowhere")
    assert run.returncode == 2 and "not a folder" in run.stderr and "Traceback" not in run.stderr
    run = _report(tmp_path)
    assert run.returncode == 2 and "no results.json" in run.stderr and "course grade" in run.stderr, run.stderr
    (tmp_path / "results.json").write_text("{not json")
    run = _report(tmp_path)
    assert run.returncode == 2 and "could not be read" in run.stderr and "Traceback" not in run.stderr, run.stderr
    bad_json = tmp_path / "a.json"
    bad_json.write_text("[1, 2]")
    (tmp_path / "results.json").write_text("[]")
    run = _report(tmp_path, "--canvas-assignments", str(bad_json))
    assert run.returncode == 2 and "--canvas-assignments" in run.stderr


def test_input_the_report_cannot_use_is_said_and_changes_nothing(tmp_path):
    """A results file that is not a list, a mapping that is missing, Canvas ids that are not numbers: rc 2, one
    sentence, no traceback, and the exports of the last good report left as they were."""
    (tmp_path / "results.json").write_text(json.dumps([{"student": "alice", "lesson": L05, "score": 18, "max_score": 20}]))
    assert _report(tmp_path).returncode == 0
    before = (tmp_path / "exports" / "canvas.csv").read_text()
    ids = tmp_path / "ids.json"
    for content in ('{"%s": null}' % L05, '{"%s": "7001x"}' % L05, '{"%s": true}' % L05):
        ids.write_text(content)
        run = _report(tmp_path, "--canvas-assignments", str(ids))
        assert run.returncode == 2 and "is a number" in run.stderr and "Traceback" not in run.stderr, run.stderr
    run = _report(tmp_path, "--mapping", str(tmp_path / "missing.csv"))
    assert run.returncode == 2 and "no such file" in run.stderr, run.stderr
    (tmp_path / "results.json").write_text('{"a": 1}')
    run = _report(tmp_path)
    assert run.returncode == 2 and "not a list of results" in run.stderr, run.stderr
    assert (tmp_path / "exports" / "canvas.csv").read_text() == before


def test_damaged_results_and_hostile_names_still_give_a_report(tmp_path):
    """Rows of the wrong types are left out and named; a folder name with matplotlib's $...$ or a byte that is not
    UTF-8 is shown as text; a lesson id that is a path writes nothing outside the report. Pages are the
    instructor's only (0600, in a 0700 folder)."""
    rows = [{"student": "alice", "lesson": L05, "score": 18, "max_score": 20},
            {"student": "a$\\foo$b", "lesson": L05, "score": 3, "max_score": 20, "status": "graded"},
            {"student": "bad\udcff", "lesson": L05, "score": 1, "max_score": 20,
             "cells": [{"grade_id": "t", "points": 0, "max_points": 1, "passed": False, "message": "x \udc80 y"}]},
            {"student": "bob", "lesson": L05, "score": "abc", "max_score": 20},
            {"student": 12, "lesson": L05, "score": 1, "max_score": 20},
            {"student": "carol", "lesson": "../../../escaped", "score": 1, "max_score": 2},
            {"student": "dave", "lesson": L05, "score": 5, "max_score": 20, "cells": 5}]
    (tmp_path / "results.json").write_text(json.dumps(rows))
    run = _report(tmp_path)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stdout + run.stderr
    said = run.stdout
    assert "result 4: its score" in said and "result 5: its student" in said and "result 6: its lesson" in said, said
    assert "result 7: its cells are not a list" in said, said
    assert not list(tmp_path.parent.glob("**/escaped.html")), "a lesson id that is a path wrote a page"
    rows = {r[0]: r for r in _rows((tmp_path / "report" / "index.html").read_text(), "lesson")}
    assert rows[L05][1] == "4", rows          # alice, the two odd names and dave; the damaged rows left out
    for f in (tmp_path / "report").glob("*.html"):
        assert f.stat().st_mode & 0o077 == 0, f
    assert (tmp_path / "report").stat().st_mode & 0o077 == 0


def test_the_next_batch_keeps_the_mapped_exports(graded, tmp_path):
    """`course grade` writes the report at the end of each batch with the options `course report` was last given
    for the folder: the Canvas file keeps its mapped ids and assignment columns."""
    import shutil

    from course.commands import cli

    out = tmp_path / "graded"
    shutil.copytree(graded, out)
    (tmp_path / "m.csv").write_text("course_id,name,canvas_id\nalice,\"Doe, Alice\",101\n")
    (tmp_path / "c.json").write_text(json.dumps({L05: "7001"}))
    assert _report(out, "--mapping", str(tmp_path / "m.csv"), "--canvas-assignments", str(tmp_path / "c.json"),
                   "--no-similar").returncode == 0
    (out / "exports" / "canvas.csv").unlink()
    cli._write_class_report(out, similar=False)               # what the end of the next batch calls
    rows = _csv(out / "exports" / "canvas.csv")
    assert any(h.endswith("(7001)") for h in rows[0]), rows[0]
    assert any(r[:2] == ["Doe, Alice", "101"] for r in rows), rows


def test_padding_or_a_new_cell_does_not_hide_a_copy(tmp_path):
    """A copy with dead code added (its own share drops, the original's does not), and an answer written into a new
    cell beside the untouched stub, still pair with the original."""
    stubs = "\n\n".join(data.lesson_from_notebooks(ROOT, L05).stubs.values())
    whole = "\n\n".join(solution_sources(L05).values())
    padding = "\n".join(f"def unused_{i}(x):\n    y = x * {i} + {i * 7}\n    return [y, y ** 2, str(y)]\n" for i in range(60))
    pairs = similarity.similar_pairs(L05, {"a": whole, "b": whole + "\n" + padding}, stubs)
    assert [(p.a, p.b) for p in pairs] == [("a", "b")]
    lesson = data.lesson_from_notebooks(ROOT, L05)
    write_submission(tmp_path, "evader", L05, build_submission(L05, fill=False))
    import nbformat
    path = tmp_path / "evader" / L05 / f"{L05}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(whole))
    nbformat.write(nb, str(path))
    code = similarity.learner_code(path, lesson.solution_cells, lesson.released)
    assert similarity.similar_pairs(L05, {"alice": whole, "evader": code}, stubs), "an answer in a new cell hid the copy"


def test_a_class_of_copies_shows_the_most_alike_pairs_only():
    stubs = "\n\n".join(data.lesson_from_notebooks(ROOT, L05).stubs.values())
    whole = "\n\n".join(solution_sources(L05).values())
    pairs = similarity.similar_pairs(L05, {f"s{i:02d}": whole for i in range(12)}, stubs)
    assert len(pairs) == similarity.SHOWN < pairs.total == 66


def test_an_older_results_file_still_reports(tmp_path):
    """Results written before ``cells`` and ``status`` existed, and a lesson this course does not have."""
    (tmp_path / "results.json").write_text(json.dumps([
        {"student": "alice", "lesson": L05, "score": 18, "max_score": 20},
        {"student": "bob", "lesson": "99_gone", "score": 1, "max_score": 2}, "garbage"]))
    run = _report(tmp_path)
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stdout + run.stderr
    page = (tmp_path / "report" / "index.html").read_text()
    assert "99_gone" in page and "not in this course" in _text(page) and "no gradebook.db" in _text(page)
    assert (tmp_path / "report" / f"{L05}.html").is_file()
    assert _csv(tmp_path / "exports" / "moodle.csv")[1] == ["alice", "", "", "18", ""]


def test_message_templates_group_one_mistake():
    a = "AssertionError: weights is 0.79 at position [0, 1, 5], but 0.21 was expected (24 of 24 values differ)"
    b = "AssertionError: weights is 0.5 at position [1, 0, 2], but 0.33 was expected (12 of 24 values differ)"
    assert data.message_template(a) == data.message_template(b)
    assert data.message_template("got 'foo'") == data.message_template("got 'bar'")
    assert data.message_template(a) != data.message_template("NameError: name 'torch' is not defined")

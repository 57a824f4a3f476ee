"""What a newcomer types, exactly as the README says it, from a fresh copy of the repository.

`make run` in a fresh clone failed every lesson once (a relative --out path the kernel could not
see) while every other test passed. These tests run the README's commands as typed: `make run`
(smoke profile, to stay within the suite's budget) in a fresh copy of the working tree, `course run`
with a relative --out from another folder, and `course grade` with relative paths.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fresh_clone import newcomer_env as _env
from planting import build_submission, write_submission

ROOT = Path(__file__).resolve().parents[1]
COURSE = str(Path(sys.executable).parent / "course")
LESSONS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())
pytestmark = pytest.mark.slow


def test_make_run_as_typed_in_a_fresh_clone(smoke_run):
    """`make run PROFILE=smoke` in a fresh copy: every lesson passes and records what it promises, its
    notebook shows nothing a learner should not see, and its widget answers every control.

    The run is conftest.py's ``smoke_run`` (tests/fresh_clone.py), shared with tests/test_site.py, which
    builds the website from it: the copy reuses this checkout's .venv (building one takes minutes);
    `-o` tells make the venv is up to date, exactly what a second `make run` on a fresh clone does."""
    clone, proc = smoke_run.clone, smoke_run
    probe = smoke_run.probe                      # each lesson's widget, moved as a learner would (course.widgets)
    report_path = clone / "results" / "report.json"
    assert report_path.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(report_path.read_text())
    problems = []
    assert [l["id"] for l in report["lessons"]] == LESSONS
    for res in report["lessons"]:
        if res["status"] != "passed" or res["profile"] != "smoke":
            problems.append(f"{res['id']}: {res['status']} ({res['profile']}) {res['error'][:800]}")
        missing = {t["metric"] for t in res["targets"]} - set(res["metrics"])
        if missing:
            problems.append(f"{res['id']} promises targets for metrics it never records: {sorted(missing)}")
    assert not problems, "\n".join(problems) + "\n" + proc.stdout[-2000:]
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    noise = [line for line in proc.stderr.splitlines() if "WARNING" in line or "Traceback" in line]
    assert not noise, "make run printed warnings a newcomer cannot act on:\n" + "\n".join(noise[:5])
    assert max(len(line) for line in proc.stdout.splitlines()) <= 200
    table = proc.stdout.split("lesson ", 1)[1].split("\n\n")[0]
    assert max(len(line) for line in table.splitlines()) <= 120, table
    assert not (ROOT / "results" / "report.json").exists() or (ROOT / "results") != clone / "results"

    # What each executed notebook shows a learner: no error, nothing on stderr, no stray value printed
    # by a cell's last line, no blank plot (the checks a lesson's page in Chromium makes, for all 13).
    from course.widgets import BLANK, ink, probe_problems

    shown = []
    for lesson in LESSONS:
        nb = json.loads((clone / "results" / f"{lesson}.ipynb").read_text(encoding="utf-8"))
        images = 0
        for cell in (c for c in nb["cells"] if c["cell_type"] == "code"):
            where = f"{lesson}, the cell starting {''.join(cell['source'])[:60]!r}"
            for o in cell.get("outputs", []):
                kind, data = o["output_type"], o.get("data", {})
                plain = "".join(data.get("text/plain", "")).strip()
                if kind == "error":
                    shown.append(f"{where}: {o['ename']}: {o['evalue'][:200]}")
                elif kind == "stream" and o.get("name") == "stderr":
                    shown.append(f"{where} wrote to stderr: {''.join(o['text'])[:200]!r}")
                elif kind == "execute_result" and (plain.startswith("<function") or re.fullmatch(r"-?[\d.e+-]+", plain)):
                    shown.append(f"{where} shows a stray value {plain[:80]!r}")
                if "image/png" in data:
                    images += 1
                    if ink(data["image/png"]) < BLANK:
                        shown.append(f"{where} shows a blank plot")
        if not images:
            shown.append(f"{lesson} shows no plot at all")
    assert not shown, "what the executed notebooks show a learner:\n" + "\n".join(shown[:10])

    # Every lesson's widget draws with its defaults, and each control redraws a non-blank plot.
    rows = [json.loads(line) for line in probe.read_text().splitlines()] if probe.is_file() else []
    assert {r["lesson"] for r in rows} == set(LESSONS), f"widgets probed in {sorted({r['lesson'] for r in rows})}"
    for lesson in LESSONS:
        moved = [r for r in rows if r["lesson"] == lesson and r["control"]]
        assert moved, f"{lesson}: its widget has no control that was moved"
    problems = probe_problems(rows)
    assert not problems, "widgets a learner would see fail:\n" + "\n".join(problems)
    # The lessons whose pages `make test` drives in Chromium have every kind of control the lessons use.
    from browser_pages import EVERY_CONTROL, NOT_MOVED_IN_BROWSER

    kinds = {l: {r["kind"] for r in rows if r["lesson"] == l and r["control"]} for l in LESSONS}   # ipywidgets classes
    missing = set().union(*kinds.values()) - set().union(*(kinds[l] for l in EVERY_CONTROL)) - NOT_MOVED_IN_BROWSER
    assert not missing, (f"no browser page of `make test` has a control of kind {sorted(missing)}: add a lesson that has "
                         f"one to EVERY_CONTROL in tests/browser_pages.py ({ {l: sorted(k) for l, k in kinds.items()} })")


def test_course_run_relative_out_from_another_folder(tmp_path):
    elsewhere = tmp_path / "somewhere" / "else"
    elsewhere.mkdir(parents=True)
    env = dict(_env(), COURSE_ROOT=str(ROOT))
    proc = subprocess.run([COURSE, "run", LESSONS[0], "--profile", "smoke", "--out", "my-results"], cwd=elsewhere,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    report = json.loads((elsewhere / "my-results" / "report.json").read_text())
    assert report["lessons"][0]["status"] == "passed" and report["lessons"][0]["metrics"]


def test_course_grade_relative_paths(tmp_path):
    write_submission(tmp_path / "subs", "alice", LESSONS[0], build_submission(LESSONS[0]))
    proc = subprocess.run([COURSE, "grade", "subs", "--out", "graded"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    rows = (tmp_path / "graded" / "grades.csv").read_text().splitlines()
    assert rows[1].startswith(f"alice,{LESSONS[0]},") and rows[1].endswith(",graded")

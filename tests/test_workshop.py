"""A workshop on one machine, end to end, with nbgrader's own exchange and two learners' homes.

host: `course workshop release` -> learners: `nbgrader fetch_assignment`, work, `nbgrader submit`
(what the Assignment List's buttons run) -> host: `course workshop collect`, `grade`, `return` ->
learners: `nbgrader fetch_feedback`. Everything lives in a temporary folder: the exchange, the
grading workspace and each learner's home (own HOME, USER and Jupyter folders).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

LESSON = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())[0]
COURSE = "workshop-test"


def filled(student_nb: Path) -> None:
    """Fill every exercise of a fetched student notebook with the solution's code (by grade_id)."""
    nb = nbformat.read(str(student_nb), as_version=4)
    sol = nbformat.read(str(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    answers = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in sol.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if c.metadata.get("nbgrader", {}).get("solution") and gid in answers:
            c.source = answers[gid]
    nbformat.write(nb, str(student_nb))


def test_workshop_cycle(tmp_path):
    exchange, grades = tmp_path / "exchange", tmp_path / "grades"
    host_env = dict(os.environ, COURSE_EXCHANGE=str(exchange), COURSE_GRADES=str(grades), COURSE_ID=COURSE)

    def host(*args, ok=True):
        r = subprocess.run([sys.executable, "-m", "course.commands.cli", "workshop", *args], cwd=ROOT, env=host_env,
                           capture_output=True, text=True, timeout=900)
        if ok:
            assert r.returncode == 0, f"course workshop {' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        return r.stdout

    def learner(name, *args):
        home = tmp_path / "homes" / name
        env = dict(os.environ, HOME=str(home), USER=name, LOGNAME=name,
                   JUPYTER_CONFIG_DIR=str(home / ".jupyter"), JUPYTER_DATA_DIR=str(home / ".local/share/jupyter"),
                   JUPYTER_RUNTIME_DIR=str(home / ".local/share/jupyter/runtime"), IPYTHONDIR=str(home / ".ipython"))
        env.pop("JUPYTER_CONFIG_PATH", None)
        home.mkdir(parents=True, exist_ok=True)
        # nbgrader names the learner after the OS account; the two homes share one account here, so
        # each says who it is (on a shared machine or JupyterHub each learner's own login does that).
        who = [f"--student={name}"] if args[0] in ("submit", "fetch_feedback") else []
        r = subprocess.run([sys.executable, "-m", "nbgrader", *args, *who, "--course", COURSE, f"--Exchange.root={exchange}"],
                           cwd=home, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"{name}: nbgrader {' '.join(args)}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        return home

    out = host("release", LESSON)
    assert f"released {LESSON}" in out
    assert (exchange / COURSE / "outbound" / LESSON / f"{LESSON}.ipynb").is_file()

    for name in ("alice", "bob"):
        home = learner(name, "fetch_assignment", LESSON)
        nb = home / LESSON / f"{LESSON}.ipynb"
        assert nb.is_file(), f"{name} did not get {LESSON}"
        assert "### BEGIN SOLUTION" not in nb.read_text(encoding="utf-8"), "the released lesson holds a solution"
        if name == "bob":
            filled(nb)              # alice hands in the untouched notebook, bob a finished one
        learner(name, "submit", LESSON)

    out = host("collect", LESSON, "--same-account")       # one account for both learners here
    assert "2 submission(s)" in out, out
    for name in ("alice", "bob"):
        assert (grades / "submitted" / name / LESSON / f"{LESSON}.ipynb").is_file()

    from course.grading import sandbox

    unsafe = [] if sandbox.available()[0] else ["--unsafe-no-sandbox"]
    host("grade", LESSON, "--jobs", "1", *unsafe)
    rows = {r["student"]: r for r in csv.DictReader(open(grades / "grades.csv", encoding="utf-8"))}
    assert rows["alice"]["status"] == "graded" and float(rows["alice"]["score"]) == 0, rows["alice"]
    assert rows["bob"]["status"] == "graded" and float(rows["bob"]["score"]) == float(rows["bob"]["max_score"]) > 0, rows["bob"]

    out = host("return", LESSON)
    assert "returned feedback" in out and "alice" in out and "bob" in out, out
    # On a hub every learner is another Unix user: the released pages must be readable by them, in a
    # folder none of them may list (nbgrader names each page by its submission's secret).
    released = exchange / COURSE / "feedback"
    assert released.stat().st_mode & 0o777 == 0o711, oct(released.stat().st_mode)
    pages = sorted(released.glob("*.html"))
    assert len(pages) == 2 and all(p.stat().st_mode & 0o004 for p in pages), [oct(p.stat().st_mode) for p in pages]
    for name in ("alice", "bob"):
        home = learner(name, "fetch_feedback", LESSON)
        pages = list((home / LESSON / "feedback").glob(f"*/{LESSON}.html"))
        assert len(pages) == 1, f"{name} fetched no feedback page"
        text = pages[0].read_text(encoding="utf-8")
        score = f"{float(rows[name]['score']):g}"
        assert "course-feedback" in text and score in text, f"{name}'s feedback page does not show the score {score}"
        assert "### BEGIN HIDDEN TESTS" not in text

    status = host("status")
    assert LESSON in status and "released" in status

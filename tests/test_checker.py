"""`course check` shows a cell that is not a test but failed (issue 42: it printed "9 of 9 public tests
passed" and exited 0 while lesson 02's experiment said "your decode_step loop and Seq2Seq.translate disagree")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course.commands.checker import first_cell_failure

sys.path.insert(0, str(Path(__file__).parent))
from planting import build_submission, write_submission  # noqa: E402


def _cell(ename: str, evalue: str, *, tags=(), grade_id=None):
    cell = nbformat.v4.new_code_cell("...")
    cell.metadata["tags"] = list(tags)
    if grade_id:
        cell.metadata["nbgrader"] = {"grade_id": grade_id, "solution": True}
    cell.outputs = [nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])]
    return cell


def test_first_failing_cell_is_reported():
    cells = [(3, 17, _cell("AssertionError", "your decode_step loop and Seq2Seq.translate disagree", tags=["experiment"])),
             (3, 18, _cell("NameError", "name 'model' is not defined", tags=["experiment"]))]
    position, outcome = first_cell_failure(cells)
    assert position == 3 and not outcome.passed and not outcome.graded
    assert outcome.grade_id == "cell 17 (an experiment, not graded)"
    assert "AssertionError: your decode_step loop and Seq2Seq.translate disagree" in outcome.message
    assert "1 later cell failed too" in outcome.message


def test_unfinished_notebook_reports_only_what_is_not_implemented():
    """While a stub remains, its "try it" cells raise NotImplementedError: the report lists the stubs instead."""
    cells = [(1, 5, _cell("NotImplementedError", "replace this line with your code")),
             (2, 9, _cell("NameError", "name 'emb' is not defined"))]
    assert first_cell_failure(cells) is None
    assert first_cell_failure([]) is None


@pytest.mark.slow
def test_course_check_fails_a_notebook_whose_experiment_fails(tmp_path):
    nb = build_submission("00_softmax_lookup")
    failing = nbformat.v4.new_code_cell('raise AssertionError("the experiment\'s own check: the two results disagree")')
    failing.metadata["tags"] = ["experiment"]
    nb.cells.append(failing)
    path = write_submission(tmp_path, "me", "00_softmax_lookup", nb)
    proc = subprocess.run([str(Path(sys.executable).parent / "course"), "check", str(path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"FAIL  cell {len(nb.cells) - 1} (an experiment, not graded)" in proc.stdout, proc.stdout
    assert "the experiment's own check: the two results disagree" in proc.stdout
    assert "8 of 8 public tests passed (13/13 points)" in proc.stdout, proc.stdout
    assert f"But cell {len(nb.cells) - 1} (an experiment, not graded) did not run" in proc.stdout, proc.stdout

"""Build and tidy solution notebooks (for course authors; learners never need this).

The solution notebooks in ``solutions/`` are the single source of truth. This module gives the
cell constructors with the exact nbgrader metadata the course uses, so a new lesson can be drafted
from a short script and then edited in JupyterLab like any notebook::

    from course.tools import authoring as A
    nb = A.notebook("00_softmax_lookup", "Softmax as a soft lookup", [
        A.md("# Softmax ..."),
        A.parameters(PROFILE="auto", DEVICE="auto", SEED=0),
        A.code("import torch ..."),
        A.solution("softmax", SOURCE_WITH_BEGIN_END_SOLUTION_MARKERS),
        A.tests("test_softmax_basic", 2, SOURCE_WITH_BEGIN_END_HIDDEN_TESTS_MARKERS),
    ], targets={"hit_rate_cold": ">= 0.99"})
    A.write(nb, "solutions/00_softmax_lookup/00_softmax_lookup.ipynb")

``tidy`` (also run by ``course release``) strips outputs and execution counts and gives every
cell a stable id, so that committed notebooks diff cleanly.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import nbformat

__all__ = ["md", "code", "parameters", "solution", "tests", "notebook", "tidy", "write"]

KERNEL = {"display_name": "Python 3 (course)", "language": "python", "name": "python3"}


def _src(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def md(text: str):
    """A markdown cell."""
    return nbformat.v4.new_markdown_cell(_src(text))


def code(text: str, *, tags: list[str] | None = None):
    """A plain (ungraded) code cell."""
    cell = nbformat.v4.new_code_cell(_src(text))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def parameters(**values):
    """The papermill ``parameters`` cell: literals only, one per line."""
    lines = [f"{k} = {v!r}" for k, v in values.items()]
    return code("\n".join(lines), tags=["parameters"])


def solution(grade_id: str, text: str):
    """An nbgrader solution cell whose ``grade_id`` is the graded definition's name."""
    cell = code(text)
    cell.metadata["nbgrader"] = {
        "grade": False, "grade_id": grade_id, "locked": False, "schema_version": 3, "solution": True, "task": False,
    }
    return cell


def tests(grade_id: str, points: float, text: str):
    """An autograded test cell worth ``points`` (visible tests, then ``### BEGIN HIDDEN TESTS``)."""
    cell = code(text)
    cell.metadata["nbgrader"] = {
        "grade": True, "grade_id": grade_id, "locked": True, "points": points, "schema_version": 3,
        "solution": False, "task": False,
    }
    return cell


def notebook(lesson_id: str, title: str, cells: list, *, targets: dict[str, str] | None = None,
             cell_timeout: int = 600):
    """A notebook with the course kernel and the lesson's metadata.

    Args:
        lesson_id: folder name = nbgrader assignment id = notebook name.
        title: the lesson's title, shown in reports.
        targets: metric name -> condition the standard and full profiles should meet, e.g.
            ``{"exact_match_attention": ">= 0.9"}``; ``course run`` checks them.
        cell_timeout: seconds one cell may run under ``course run`` before it is stopped.
    """
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = dict(KERNEL)
    nb.metadata["language_info"] = {"name": "python"}
    nb.metadata["course"] = {"id": lesson_id, "title": title, "targets": dict(targets or {}),
                             "cell_timeout": cell_timeout}
    nb.cells = list(cells)
    return tidy(nb)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")[:60] or "cell"


def tidy(nb):
    """Strip outputs and counts, and give each cell a stable, unique id."""
    seen: set[str] = set()
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
        cell.metadata.pop("papermill", None)
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        tags = cell.metadata.get("tags", [])
        base = _slug(gid) if gid else ("parameters" if "parameters" in tags else f"cell-{i:03d}")
        cid, n = base, 1
        while cid in seen:
            n += 1
            cid = f"{base}-{n}"
        seen.add(cid)
        cell["id"] = cid
    nb.metadata.pop("papermill", None)
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nb


def write(nb, path) -> Path:
    """Validate, tidy and write a notebook (creating its folder)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    nb = tidy(nb)
    nbformat.validate(nb)
    path.write_text(nbformat.writes(nb) + "\n", encoding="utf-8")
    return path

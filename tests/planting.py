"""Build graded-looking submissions from the reference solutions, with chosen cells replaced.

A planted-bug file ``tests/planted/<lesson>.py`` defines ``LESSON`` and ``VARIANTS``
(see CONTRIBUTING.md). A submission is the student notebook (as released) whose solution cells are
filled with the reference solution's code, except the cells a variant replaces.
"""

from __future__ import annotations

import importlib.util
import os
import json
import re
import textwrap
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
PLANTED = Path(__file__).resolve().parent / "planted"
# Lesson 05's wrong attention (no 1/sqrt(d_k)): the control an attack on lesson 05 must not beat (10/20).
WRONG_05 = '''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)                     # wrong: no 1/sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ v, weights
'''
_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)


def derived(lesson: str, cell: str, *changes) -> str:
    """The reference's solution ``cell`` of ``lesson`` with each (old, new) text replaced: a planted variant
    that differs from the reference exactly where its bug is (and fails loudly if the reference changed)."""
    src = solution_sources(lesson)[cell]
    for old, new in changes:
        assert old in src, f"{lesson}: the reference {cell} changed; update the variant ({old!r})"
        src = src.replace(old, new)
    return src


def solution_sources(lesson: str) -> dict[str, str]:
    """grade_id -> the reference code of each solution cell, solution markers removed."""
    nb = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    out = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            out[meta["grade_id"]] = _MARKER.sub("", cell.source)
    return out


def build_submission(lesson: str, replace: dict[str, str] | None = None, *, fill: bool = True):
    """The student notebook with solution cells filled in (or, with ``fill=False``, left untouched)."""
    nb = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    sources = solution_sources(lesson) if fill else {}
    replace = replace or {}
    unknown = set(replace) - set(solution_sources(lesson))
    if unknown:
        raise KeyError(f"{lesson}: planted variant replaces unknown solution cells {sorted(unknown)}")
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.metadata.get("nbgrader", {}).get("solution"):
            if gid in replace:
                cell.source = textwrap.dedent(replace[gid]).strip("\n")
            elif gid in sources:
                cell.source = sources[gid]
    return nb


def write_submission(folder: Path, student: str, lesson: str, nb) -> Path:
    path = folder / student / lesson / f"{lesson}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
    return path


def load_planted(everything: bool | None = None) -> dict[str, dict]:
    """lesson id -> VARIANTS, from every tests/planted/<lesson>.py.

    A bank may name variants in ``EXTENDED``: further bugs and styles, graded only when
    ``COURSE_PLANTED=all`` (or ``everything=True``), so that `make test` stays within its time budget
    while the whole bank remains one command away: ``COURSE_PLANTED=all pytest tests/test_grading.py``.
    """
    if everything is None:
        everything = os.environ.get("COURSE_PLANTED", "") == "all"
    found = {}
    for path in sorted(PLANTED.glob("[0-9]*.py")):
        spec = importlib.util.spec_from_file_location(f"planted_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        extended = set(getattr(mod, "EXTENDED", ()))
        unknown = extended - set(mod.VARIANTS)
        if unknown:
            raise ValueError(f"{path.name}: EXTENDED names no variant: {sorted(unknown)}")
        found[mod.LESSON] = {k: v for k, v in mod.VARIANTS.items() if everything or k not in extended}
    return found


def results_by_key(results_json: Path) -> dict[tuple[str, str], dict]:
    return {(r["student"], r["lesson"]): r for r in json.loads(results_json.read_text())}

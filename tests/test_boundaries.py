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
import re
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


# What names a message, a detail or an exception's text in the engine's code.
_MESSAGE = re.compile(r"\b(detail|message|msg|text|reason|why|str\((exc|e|err|error)\))\b")
def _wording(node) -> bool:
    """A string literal with words in it (not a punctuation mark): what deciding by wording would match."""
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and len(re.findall(r"[A-Za-z]", node.value)) >= 3


_REASON = re.compile(r"^\s*#\s*(lazy|cycle|warm-up|optional):")
_IMPORT_LINE = re.compile(r"^\s*(import |from \S+ import )")


def test_the_engine_imports_inside_a_function_only_with_a_reason():
    """An import inside a function of the grading engine (course/grading/) says why it is there, on the comment
    line above it or above the run of imports it belongs to: ``# lazy:`` (a measured cost only some paths pay),
    ``# cycle:`` (which cycle it breaks), ``# warm-up:`` (loaded once before forks) or ``# optional:`` (a
    package that may be missing). Any other import is at the module's top."""
    wrong = []
    for rel, tree in _modules():
        if not rel.startswith("course/grading/"):
            continue
        lines = (ROOT / rel).read_text(encoding="utf-8").split("\n")
        top = {id(n) for n in tree.body}
        for node in tree.body:
            if isinstance(node, (ast.If, ast.Try)):
                top |= {id(c) for c in ast.walk(node)}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in top:
                continue
            i = node.lineno - 2
            while i >= 0 and _IMPORT_LINE.match(lines[i]):      # up the run of imports it belongs to
                i -= 1
            if i < 0 or not _REASON.match(lines[i]):
                wrong.append(f"{rel}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert not wrong, "imports inside functions without a reason:\n" + "\n".join(wrong)


def test_no_import_circle_in_the_engine_or_the_checks():
    """No cycle among the modules of course/grading/, course/forbidden/ and course/checks*, counting every import (inside functions
    too): each import-time dependency points one way."""
    names = {}
    for rel, tree in _modules():
        name = rel[:-3].replace("/", ".").removesuffix(".__init__")
        names[name] = tree
    scope = {n for n in names if n.startswith(("course.grading", "course.forbidden", "course.checks"))}

    def owner(module: str) -> str | None:
        while module and module not in names:
            module = module.rpartition(".")[0]
        return module or None

    graph = {n: set() for n in scope}
    for n in scope:
        for module, imported, _ in _imports(names[n]):
            for target in [module] + [f"{module}.{x}" for x in imported]:
                o = owner(target) if target.startswith("course") else None
                if o in scope and o != n:
                    graph[n].add(o)
    seen, stack, cycles = set(), [], []

    def visit(v):
        if v in stack:
            cycles.append(stack[stack.index(v):] + [v])
            return
        if v in seen:
            return
        seen.add(v)
        stack.append(v)
        for w in sorted(graph[v]):
            visit(w)
        stack.pop()

    for v in sorted(graph):
        visit(v)
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c) for c in cycles[:5])


def test_no_status_is_decided_from_the_wording_of_a_message():
    """The grading engine decides nothing by matching the text of a message (a phrase ``in`` a detail or a message,
    a message's ``startswith``): every verdict, evasion, refusal and failure is a typed value from where it is
    found to where the status is decided (issue: "EVASIONS", "sandbox failed" in a detail, "NoFork")."""
    wrong = []
    for rel, tree in _modules():
        if not rel.startswith(("course/grading/", "course/forbidden/")):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops):
                left = node.left
                if _wording(left) and any(_MESSAGE.search(ast.unparse(c)) for c in node.comparators):
                    wrong.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:100]}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("startswith", "endswith") and _MESSAGE.search(ast.unparse(node.func.value)) and \
                    any(_wording(a) for a in node.args):
                wrong.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:100]}")
    assert not wrong, "decided from a message's wording:\n" + "\n".join(wrong)

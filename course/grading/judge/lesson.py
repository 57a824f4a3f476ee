"""What a judge keeps from one submission to the next: the instructor's notebooks, parsed once per content,
the test cells' context (the lesson's imports), compiled test cells, and the names a test reads."""

from __future__ import annotations

import ast
import builtins
import functools
import hashlib
import symtable
from pathlib import Path

import nbformat

# -- what a judge keeps from one submission to the next ------------------------------------------------
# The instructor's notebooks (hidden tests included) and what is derived from them are the same for every
# submission of a lesson version: read, parsed and compiled once per judge, keyed by their content.

_LESSON_FILES: dict[str, tuple] = {}       # sha256 of a source or release notebook -> (notebook, derived values)


def lesson_notebook(path) -> tuple:
    """``(notebook, memo)`` for an instructor's notebook: parsed once per content; ``memo`` holds what
    is computed from it (read only by the callers)."""

    data = Path(path).read_bytes()
    key = hashlib.sha256(data).hexdigest()
    if key not in _LESSON_FILES:
        if len(_LESSON_FILES) >= 64:
            _LESSON_FILES.clear()
        _LESSON_FILES[key] = (nbformat.reads(data.decode("utf-8"), as_version=4), {})
    return _LESSON_FILES[key]


def memoised(memo: dict, name: str, compute):
    if name not in memo:
        memo[name] = compute()
    return memo[name]


@functools.lru_cache(maxsize=512)
def compiled(source: str, filename: str):
    return compile(source, filename, "exec")


# -- what test cells see ---------------------------------------------------------------------------

def trusted_context(source_nb) -> dict:
    """Run the import statements of the lesson's own (non-test, non-solution) cells, here: those that
    bind a name some test cell reads (a judge needs no plotting or widget library; star imports are
    always run)."""
    ns: dict = {"__name__": "judge", "__builtins__": builtins}
    read: set[str] = set()           # every name a test cell mentions, read, bound or deleted
    for cell in source_nb.cells:
        if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            try:
                tree = ast.parse(cell.source)
            except (SyntaxError, RecursionError, MemoryError, ValueError):
                read.add("*")            # a test cell the filter cannot read: every import is run
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Name):
                    read.add(node.id)
                elif isinstance(node, (ast.Global, ast.Nonlocal)):
                    read.update(node.names)

    def needed(node):
        """The import statement with only the names some test reads (None if none)."""
        names = [a for a in node.names if "*" in read or a.name == "*" or (a.asname or a.name).split(".")[0] in read]
        if not names:
            return None
        node.names = names
        return node

    for cell in source_nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade") or meta.get("solution"):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        imports = [n for n in (needed(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))) if n]
        if imports:
            exec(compile(ast.Module(body=imports, type_ignores=[]), "<imports>", "exec"), ns)
    return ns


def free_names(source: str) -> list[str]:
    """Global names a test cell reads that it does not itself assign at top level."""
    return list(_free_names(source))


@functools.lru_cache(maxsize=512)
def _free_names(source: str) -> tuple[str, ...]:
    try:
        top = symtable.symtable(source, "<test>", "exec")
    except SyntaxError:
        return ()
    names: set[str] = set()

    def walk(table):
        for sym in table.get_symbols():
            if table.get_type() == "module":
                if sym.is_referenced() and not sym.is_assigned() and not sym.is_imported():
                    names.add(sym.get_name())
            elif sym.is_global() and sym.is_referenced():
                names.add(sym.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    assigned = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    return tuple(sorted(names - assigned))


def solution_sources(nb) -> dict[str, str]:
    """Name -> source of the definition that runs: the last one, in any of the learner's code cells (a first
    attempt kept above the answer, or a copy of a solution cell, is overridden as it is in the notebook)."""
    out = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        try:
            tree = ast.parse(cell.source)
        except (SyntaxError, RecursionError, MemoryError, ValueError):     # a cell nested too deeply reads as none
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[node.name] = ast.get_source_segment(cell.source, node) or cell.source
    return out

"""What the judge reads in a submission's code for a human to look at: tampering with grading, reaching
outside, forbidden functions taken as values. Reported, never punished: no verdict depends on it."""

from __future__ import annotations

import ast
import functools

from course.grading.judge.lesson import memoised
from course.grading.judge import reading
from course.grading.judge.reading import given_cells

# Strings that name the grader's own modules (a learner's code has no business with them).
GRADER_NAMES = ("course.tools", "course.grading", "tools.worker", "sandboxed.worker", "grading.judge")
SUSPICIOUS_CALLS = {
    ("gc", "get_objects"), ("gc", "get_referrers"), ("gc", "get_referents"), ("sys", "_getframe"),
    ("inspect", "currentframe"), ("inspect", "stack"), ("os", "kill"), ("os", "killpg"), ("os", "fork"),
    ("os", "system"), ("os", "getppid"), ("os", "setsid"), ("subprocess", "Popen"),
    ("subprocess", "run"), ("subprocess", "call"), ("subprocess", "check_output"), ("ctypes", "CDLL"),
    ("socket", "socket"), ("socket", "create_connection"), ("urllib", "request"), ("sys", "settrace"),
    ("sys", "setprofile"), ("builtins", "__import__"),
}
SUSPICIOUS_NAMES = {"get_ipython", "__builtins__", "ctypes", "input_transformers_post", "ast_transformers",
                    "input_transformers_cleanup", "sqlite3", "__code__", "__globals__", "f_back", "f_globals",
                    # the worker runs as __main__; operators and kernels of one's own run below the forbidden-call check
                    "__main__", "custom_op", "library", "Library", "register_kernel", "register_fake"}
PATCHABLE = {"torch", "F", "nn", "checks", "course", "math", "np", "numpy", "builtins", "sys", "os", "functional",
             "Tensor", "oracles", "masks"}


def suspicious(nb, source_nb=None) -> list[str]:
    """Things in the student's code that tamper with grading or reach outside (for a human to look at).

    Reported, not punished: the verdicts do not depend on any of it. Looks for: assignments to (or
    setattr on) attributes of torch, the course package, math, numpy, builtins, sys or os, under any
    alias; rebinding those names; frame walking, gc hunting, IPython transformers, signals, processes,
    sockets and ctypes. The lesson's own given and experiment cells (``source_nb``) are not the learner's
    code and are not reported (their imports still count, for the aliases they define).
    """
    given_sources, experiment_ids = given_cells(source_nb) if source_nb is not None else (set(), set())
    trees, unreadable = [], []
    patchable = set(PATCHABLE)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            read = _import_aliases(cell.source)
            if read == "syntax":
                continue
            if read == "unreadable":                              # Python itself cannot compile it either
                unreadable.append(f"cell {i}: code nested too deeply for the grader to read")
                continue
            patchable |= read
            if cell.source not in given_sources and cell.get("id") not in experiment_ids:
                trees.append((i, ast.parse(cell.source)))
    found = list(unreadable)
    for i, tree in trees:      # the grading machinery is not the learner's to import or reach
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    any(name in node.value for name in GRADER_NAMES):
                found.append(f"cell {i}: names the grader's code ({node.value[:40]!r})")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                if any(m and (m.startswith(("course.tools", "course.grading")) or
                              (m == "course" and any(a.name in ("tools", "grading") for a in node.names)))
                       for m in mods):
                    found.append(f"cell {i}: imports the grader's code")

    def base_name(t):
        while isinstance(t, (ast.Attribute, ast.Subscript)):
            t = t.value
        return t.id if isinstance(t, ast.Name) else None

    for i, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    (node.value.id, node.attr) in SUSPICIOUS_CALLS:
                found.append(f"cell {i}: {node.value.id}.{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr in SUSPICIOUS_NAMES:
                if node.attr not in ("library", "Library") or base_name(node.value) in patchable:   # not plt.style.library
                    found.append(f"cell {i}: .{node.attr}")
            elif isinstance(node, ast.Name) and node.id in SUSPICIOUS_NAMES:
                found.append(f"cell {i}: {node.id}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                for m in mods:
                    # (multiprocessing and threads: course.grading.judge.reading.means, which leaves cpu_count() alone)
                    if m and (m.split(".")[0] in ("ctypes", "socket", "subprocess", "gc", "sqlite3", "urllib", "http",
                                                  "requests", "signal", "pty", "__main__")
                              or m.startswith("torch.library")):
                        found.append(f"cell {i}: import {m}")
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    for sub in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                        b = base_name(sub)
                        if b in patchable and isinstance(sub, (ast.Attribute, ast.Subscript)):
                            found.append(f"cell {i}: assigns {ast.unparse(sub)}")
                        elif isinstance(sub, ast.Name) and sub.id in patchable and sub.id in PATCHABLE:
                            found.append(f"cell {i}: rebinds {sub.id}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
                    and node.args and base_name(node.args[0]) in patchable:
                found.append(f"cell {i}: {node.func.id}({ast.unparse(node.args[0])}, ...)")
    return list(dict.fromkeys(found))


def _import_aliases(source: str):
    """The names a cell's imports bind to torch, the course, numpy, math, builtins, sys, os or IPython
    (a frozenset), or "syntax" / "unreadable" (nested too deeply for Python's parser). Cached for cells
    of up to 16 000 characters: most cells are the lesson's own, the same in every submission, and a
    huge cell of one learner must not stay in the judge's memory for the next."""
    return _import_aliases_cached(source) if len(source) <= 16_000 else _read_import_aliases(source)


@functools.lru_cache(maxsize=1024)
def _import_aliases_cached(source: str):
    return _read_import_aliases(source)


def _read_import_aliases(source: str):
    roots = ("torch", "course", "numpy", "math", "builtins", "sys", "os", "IPython")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "syntax"
    except (RecursionError, MemoryError, ValueError):
        return "unreadable"
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in roots}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in roots:
            names |= {a.asname or a.name for a in node.names}
    return frozenset(names)


def forbidden_aliases(nb, source, memo: dict | None = None) -> list[str]:
    """Forbidden functions of this lesson taken as values in the learner's cells (course.forbidden)."""
    names = memoised(memo, "lesson_names", lambda: reading.lesson_names(source)) if memo is not None else \
        reading.lesson_names(source)
    return reading.aliases(nb, names, source)

"""What the judge reads in a submission's cells about the checks of forbidden calls: code that reaches below or
around them (:func:`tampering`, which fails the tests that use the checks), means honest notebooks use too
(:func:`means`, reported only), forbidden functions taken as values (:func:`aliases`), and the names a lesson
forbids (:func:`lesson_names`). Grader-only: the learner's copy of the course does not hold it."""

from __future__ import annotations

import ast
import importlib

# Names whose use in a learner's code can only serve to switch the checks off or to reach a kernel by
# another road: PyTorch's mode stacks and dispatcher internals, the grader's own modules, dynamic
# code. Honest solutions of the course's exercises never need them.
_TAMPER_ATTRS = {"_C", "ops", "_pop_mode", "_push_mode", "_disable_current_modes", "_python_dispatch", "_get_current_dispatch_mode_stack",
                 "TorchDispatchMode", "TorchFunctionMode", "__torch_dispatch__", "__torch_function__", "DispatchKey",
                 "DisableTorchFunction", "DisableTorchFunctionSubclass", "_DisableTorchDispatch", "as_subclass",
                 "_targets", "forbidden_targets", "_GRADING", "GradingHooks", "graded_by", "Guard", "forbidden", "Worker",
                 "_disabled_torch_function_impl", "_set_torch_function_mode", "setprofile", "settrace",
                 "getprofile", "setprofile_all_threads", "settrace_all_threads",
                 # operators and kernels of one's own run below the modes
                 "library", "custom_op", "Library"}
_TAMPER_MODULES = ("torch._C", "torch.ops", "torch.utils._python_dispatch", "torch.overrides", "course.tools", "course.grading",
                   "course.forbidden", "ctypes", "torch.library", "__main__")
_TORCHISH = {"torch", "F", "nn", "functional", "Tensor", "special", "linalg"}
_DYNAMIC = {"eval", "exec", "compile", "__import__"}


def _cells(nb, skip_sources=(), skip_ids=()):
    skip_sources, skip_ids = set(skip_sources), set(skip_ids)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        if cell.source in skip_sources or cell.get("id") in skip_ids:
            continue
        try:
            yield i, ast.parse(cell.source)
        except (RecursionError, MemoryError, ValueError):    # Python cannot compile it either: it runs nothing
            continue
        except SyntaxError:
            try:
                # lazy: only for a cell that is not Python (IPython's magics): a second to import
                from IPython.core.inputtransformer2 import TransformerManager
                yield i, ast.parse(TransformerManager().transform_cell(cell.source))
            except Exception:  # noqa: BLE001 - a cell that does not parse runs nothing either
                continue


def given_cells(source_nb) -> tuple[set[str], set[str]]:
    """Sources and ids of the lesson's own cells a learner does not write (given code, experiments)."""
    sources, ids = set(), set()
    for cell in source_nb.cells:
        meta = cell.get("metadata", {})
        if cell.cell_type != "code" or meta.get("nbgrader", {}).get("solution"):
            continue
        sources.add(cell.source)
        if "experiment" in meta.get("tags", []):
            ids.add(cell.get("id"))
    return sources, ids


def tampering(nb, source_nb=None) -> list[str]:
    """What in the learner's cells reaches below or around the checks of forbidden calls: the evidence that
    fails every test using those checks.

    Looks at solution cells and cells the learner added or changed (not the lesson's given cells nor
    its tests): PyTorch's dispatcher and mode internals (``torch._C``, ``torch.ops``, ``_pop_mode``,
    ``__torch_dispatch__``, ``as_subclass``...), operators of the learner's own (``torch.library``,
    ``custom_op``), the grader's modules and ``__main__`` (the grading worker), ``ctypes``, and ``getattr``
    on torch with a computed name. Means that ordinary notebooks use too (``sys.modules``, ``importlib``,
    ``eval``, threads and processes) are :func:`means`: reported for a look, never punished; what they could
    reach is checked at run time (the check's own pieces, new threads and processes while it is on).
    """
    return _read(nb, source_nb)[0]


def means(nb, source_nb=None) -> list[str]:
    """Means of reaching around the checks that honest notebooks use too (``"google.colab" in sys.modules``,
    ``importlib.reload``, ``eval`` of a typed expression, ``multiprocessing.cpu_count()``): reported for a
    human to look at, never punished. The harmless idioms are not reported at all."""
    return _read(nb, source_nb)[1]


_MEANS_MODULES = ("importlib", "threading", "_thread", "concurrent", "multiprocessing", "torch.multiprocessing")
_HARMLESS = {"multiprocessing": {"cpu_count"}, "importlib": {"reload"}}


def _read(nb, source_nb=None) -> tuple[list[str], list[str]]:
    """(:func:`tampering`, :func:`means`) of ``nb``."""
    sources, ids = given_cells(source_nb) if source_nb is not None else (set(), set())
    found, seen = [], []
    for i, tree in _cells(nb, sources, ids):
        torchish = set(_TORCHISH)
        harmless: set[int] = set()              # nodes of the harmless idioms
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                torchish |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] == "torch"}
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
                torchish |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Compare) and all(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops):
                harmless |= {id(c) for c in node.comparators}        # "google.colab" in sys.modules
        uses: dict[str, set[str]] = {}         # module alias -> the attributes the cell reads of it
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                uses.setdefault(node.value.id, set()).add(node.attr)
        for node in ast.walk(tree):
            line = getattr(node, "lineno", "?")
            if isinstance(node, ast.Attribute) and node.attr in _TAMPER_ATTRS:
                root = node.value
                while isinstance(root, ast.Attribute):
                    root = root.value
                if node.attr == "library" and not (isinstance(root, ast.Name) and root.id in torchish):
                    continue                                         # plt.style.library, not torch.library
                found.append(f"cell {i} line {line}: .{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr == "modules" and isinstance(node.value, ast.Name) \
                    and node.value.id == "sys":
                if id(node) not in harmless:
                    seen.append(f"cell {i} line {line}: sys.modules")
            elif isinstance(node, ast.Name) and node.id in _DYNAMIC:
                seen.append(f"cell {i} line {line}: {node.id}")
            elif isinstance(node, ast.Name) and node.id in ("TorchDispatchMode", "TorchFunctionMode"):
                found.append(f"cell {i} line {line}: {node.id}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                mods += [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module else []
                for m in mods:
                    if any(m == t or m.startswith(t + ".") for t in _MEANS_MODULES):
                        top = m.split(".")[0]
                        alias = next((a.asname or a.name for a in node.names if a.name == top), None) \
                            if isinstance(node, ast.Import) else None
                        if not (alias and top in _HARMLESS and uses.get(alias, set()) <= _HARMLESS[top]):
                            seen.append(f"cell {i} line {line}: import {m}")
                        break
                    if any(m == t or m.startswith(t + ".") for t in _TAMPER_MODULES) or m.split(".")[-1] in _TAMPER_ATTRS:
                        found.append(f"cell {i} line {line}: import {m}")
                        break
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "setattr", "delattr") and len(node.args) >= 2:
                obj, attr = node.args[0], node.args[1]
                root = obj
                while isinstance(root, ast.Attribute):
                    root = root.value
                on_torch = isinstance(root, ast.Name) and root.id in torchish
                literal = isinstance(attr, ast.Constant) and isinstance(attr.value, str)
                if on_torch and (not literal or attr.value in _TAMPER_ATTRS or node.func.id != "getattr"):
                    found.append(f"cell {i} line {line}: {node.func.id}({ast.unparse(obj)}, {ast.unparse(attr)})")
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and node.value in _TAMPER_ATTRS - {"ops", "forbidden", "Guard", "library"}):
                found.append(f"cell {i} line {line}: the string {node.value!r}")
    return list(dict.fromkeys(found)), list(dict.fromkeys(seen))


def aliases(nb, names, source_nb=None) -> list[str]:
    """Forbidden functions taken as values (``_f = torch.softmax``) rather than called where they are
    named, in the learner's cells: a way around a check by name, worth a human look."""
    names = set(names)
    sources, ids = given_cells(source_nb) if source_nb is not None else (set(), set())
    found = []
    for i, tree in _cells(nb, sources, ids):
        called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in names and id(node) not in called:
                found.append(f"cell {i} line {node.lineno}: takes {ast.unparse(node)} as a value (an alias of a "
                             "forbidden function)")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr" and \
                    len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in names:
                found.append(f"cell {i} line {node.lineno}: takes {ast.unparse(node)} (a forbidden function by "
                             "its name)")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch" and \
                    any(a.name in names for a in node.names):
                found.append(f"cell {i} line {node.lineno}: imports a forbidden function by name")
    return list(dict.fromkeys(found))


def lesson_names(source_nb) -> set[str]:
    """The names a lesson's tests forbid: string arguments of ``forbid(...)`` in its test cells, and the
    ``*SHORTCUTS`` / ``FUSED`` tuples of the ``course.checks_NN`` helpers those cells call."""
    names: set[str] = set()
    for cell in source_nb.cells:
        if cell.cell_type != "code" or not cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "forbid") or (isinstance(func, ast.Name) and func.id == "forbid"):
                names |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id.startswith("checks_"):
                try:
                    mod = importlib.import_module(f"course.{func.value.id}")
                except ImportError:
                    continue
                for key, value in vars(mod).items():
                    if (key == "FUSED" or key.endswith("SHORTCUTS")) and isinstance(value, tuple):
                        names |= {v for v in value if isinstance(v, str)}
    return names

"""The lesson's notebooks as the grader reads them: its test cells and their points, the lines of its
hidden tests, and the modules its cells import (a warm sandbox loads them once per batch)."""

from __future__ import annotations

import ast
import hashlib
import json
import re
from pathlib import Path

import nbformat

def test_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")]


def max_score(source_nb) -> float:
    return float(sum(c.metadata.nbgrader.get("points", 0) for c in test_cells(source_nb)))


def hidden_lines(source_nb, release_nb) -> set[str]:
    hidden = set()
    for cell in test_cells(source_nb):
        for block in re.findall(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", cell.source, re.S):
            hidden |= {ln.strip() for ln in block.splitlines() if len(ln.strip()) > 24}
    shown = {ln.strip() for c in release_nb.cells for ln in c.source.splitlines()}
    return hidden - shown


def unvalidated(path: Path):
    """A notebook read without nbformat's validation (whose first use compiles the schema, about half a
    second): for the instructor's own notebooks, read before the judges start."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    for cell in raw.get("cells", []):
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
    return nbformat.from_dict(raw)


def imported_modules(source_nb) -> set[str]:
    """Modules the instructor's notebook imports in the cells a sandbox runs (not tests, not
    experiments): a warm sandbox imports them once per batch, not once per submission."""

    found = set()
    for cell in source_nb.cells:
        meta = cell.get("metadata", {})
        if cell.cell_type != "code" or meta.get("nbgrader", {}).get("grade") or "experiment" in meta.get("tags", []):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:                       # top-level imports only
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)              # and `from course import checks_09`'s module:
                found |= {f"{node.module}.{a.name}" for a in node.names if a.name != "*"}  # a miss costs nothing
    return found


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()

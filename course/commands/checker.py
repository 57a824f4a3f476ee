"""``course check NOTEBOOK``: run a learner's notebook and its public tests, and say how each went.

The notebook runs in a fresh kernel exactly as nbgrader's validator would (``NBGRADER_EXECUTION`` set,
so the smoke profile is used), with a per-cell time limit. Each test cell is scored with nbgrader's
own rule (an error, or output on stderr, fails it) and reported in plain words. A cell that is not a
test but raised (an experiment, with the lesson's own checks) fails the check too, reported as such.

Learners' copies from ``course dist`` ship this module: it imports nothing of the instructor's side.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course.commands.lab import tool_environment

__all__ = ["TestOutcome", "CheckError", "check_notebook", "KERNEL_ARGUMENTS"]

# The kernels `course run` and `course check` start print only their errors on the terminal:
# ipykernel 7.4+ otherwise warns, once per kernel, that its local TCP sockets are not encrypted
# (Jupyter's standard set-up; messages are signed with the connection file's key). Warnings raised
# by a notebook's own cells still reach its outputs. (Defined here, not in runner.py, because
# learners' copies from `course dist` ship this module and not the runner.)
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=ERROR"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_UNIMPLEMENTED = re.compile(r"([A-Za-z_][\w.]*)(?:\([^()]*(?:\([^()]*\)[^()]*)*\))? is not implemented yet")


class CheckError(Exception):
    """The notebook could not be checked at all (missing, not a notebook, the kernel died): no report."""


@dataclass
class TestOutcome:
    grade_id: str
    points: float
    max_points: float
    message: str
    graded: bool = True         # False: a cell that is not a test (an experiment) and failed to run

    @property
    def passed(self) -> bool:
        return self.graded and self.points >= self.max_points


def _message(cell) -> str:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            evalue = _ANSI.sub("", str(out.get("evalue", ""))).strip()
            if out.get("ename") == "CellTimeoutError":
                return "the cell ran past the time limit (an infinite loop, or very slow code?)"
            return f"{out.get('ename')}: {evalue}" if evalue else str(out.get("ename"))
    return "the cell wrote to stderr (nbgrader counts that as a failure)"


def check_notebook(path: Path, *, timeout: int = 120) -> tuple[list[TestOutcome], list[str]]:
    """Execute the notebook and score its test cells.

    Returns:
        (outcomes, unimplemented): one outcome per test cell, and the names of the exercises whose
        stub (``raise NotImplementedError(...)``) a test ran into.
    """
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError
    from nbgrader.utils import determine_grade

    path = Path(path)
    if not path.is_file():
        raise CheckError(f"course check: {path} does not exist. Give the path of your notebook, e.g. "
                         "notebooks/05_self_attention/05_self_attention.ipynb")
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception as exc:  # noqa: BLE001
        raise CheckError(f"course check: {path} is not a valid notebook ({type(exc).__name__}: {exc}). "
                         "Re-save it from Jupyter, or restore it with `git checkout` and copy your code back.")
    tool_environment()
    os.environ["NBGRADER_EXECUTION"] = "validate"
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            extra_arguments=list(KERNEL_ARGUMENTS),
                            resources={"metadata": {"path": str(path.parent.resolve())}})
    try:
        client.execute()
    except DeadKernelError:
        raise CheckError("course check: the kernel died while running your notebook (os._exit, a crash, or out "
                         "of memory). Find the cell that kills it, then check again.")
    finally:
        os.environ.pop("NBGRADER_EXECUTION", None)
    outcomes = []
    failed_cells = []           # (position in outcomes, cell index, cell): cells that are not tests and raised
    for index, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and cell.cell_type == "code":
            score, max_score = determine_grade(cell, None)
            outcomes.append(TestOutcome(meta.get("grade_id", "?"), float(score or 0), float(max_score or 0),
                                        "" if score == max_score else _message(cell)))
        elif cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            failed_cells.append((len(outcomes), index, cell))
    # checks.call() says "<name> is not implemented yet" when a test meets an untouched stub.
    # The name may carry the call that met it: "SelfAttention(12, 4) is not implemented yet".
    unimplemented = sorted({m.group(1) for o in outcomes for m in [_UNIMPLEMENTED.search(o.message)] if m})
    failure = first_cell_failure(failed_cells)
    if failure is not None:
        outcomes.insert(failure[0], failure[1])
    return outcomes, unimplemented


def _stub(cell) -> bool:
    """Did the cell stop at an exercise left as its stub (``raise NotImplementedError``)?"""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            text = f"{out.get('ename')}: {_ANSI.sub('', str(out.get('evalue', '')))}"
            return out.get("ename") == "NotImplementedError" or bool(_UNIMPLEMENTED.search(text))
    return False


def first_cell_failure(failed_cells) -> tuple[int, TestOutcome] | None:
    """A cell that is not a test but raised (an experiment and its own checks, a "try it" cell) fails the
    check too: nbgrader would not score it, but the notebook does not run, and the learner must see why.

    Only the first such cell is reported (the later ones usually fail because of it), and only in a notebook
    whose every exercise is written: while a stub remains, its "try it" cells raise NotImplementedError, and
    the report already says what is not implemented yet.
    """
    if not failed_cells or any(_stub(cell) for _, _, cell in failed_cells):
        return None
    position, index, cell = failed_cells[0]
    tags = cell.get("metadata", {}).get("tags", [])
    gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    kind = f"your {gid}" if gid else ("an experiment, not graded" if "experiment" in tags else "not graded")
    more = len(failed_cells) - 1
    message = (_message(cell) + " This cell must run for your notebook to be complete, though it is not a test"
               + (f"; {more} later cell{'s' if more > 1 else ''} failed too, probably because of it." if more else "."))
    return position, TestOutcome(f"cell {index} ({kind})", 0.0, 0.0, message, graded=False)

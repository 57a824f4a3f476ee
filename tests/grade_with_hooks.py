"""``course grade`` with two hooks that only the course's own tests use, as a command: no product code reads
them from the environment (they are :class:`course.grading.batch.Options` fields a command line never sets).

    python tests/grade_with_hooks.py [--only-cells FILE] [--crash-workers RULES --crash-marks DIR] SUBMISSIONS --out R ...

* ``--only-cells FILE``: JSON ``{"student/lesson": [grade_id, ...]}``: those submissions are graded on
  those test cells only (tests/test_grading.py: a planted bug need only be graded on the cells that must
  catch it; the others score 0 and say why; such a result is never kept for a full run).
* ``--crash-workers "student/lesson=once,student/lesson=always"`` (with ``--executor dask``): the Dask worker
  that starts grading that submission exits at once, as a worker killed mid-batch does; ``once`` leaves a
  marker in ``--crash-marks`` so that the retry is graded (tests/test_grading_scale.py).

Everything else is ``course grade``'s own command line, parsed and run by its own code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path


class CrashOn:
    """A Dask worker plugin: the worker exits when it starts the task of a named submission."""

    name = "course-test-crash"

    def __init__(self, rules: str, marks: str):
        self.rules = [tuple(rule.partition("=")[::2]) for rule in rules.split(",") if rule]
        self.marks = marks

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing":
            return
        for who, how in self.rules:
            if str(key).startswith(f"grade-{who.replace('/', '-')}-"):
                marker = Path(self.marks) / who.replace("/", "__")
                if how == "always" or not marker.exists():
                    marker.touch()
                    os._exit(1)


def only_cells(path: str) -> dict:
    try:
        table = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--only-cells {path}: cannot read it as JSON ({exc})")
    if not (isinstance(table, dict) and all(isinstance(v, list) and all(isinstance(g, str) for g in v)
                                            for v in table.values())):
        raise SystemExit(f"--only-cells {path}: expected {{\"student/lesson\": [\"grade_id\", ...]}}")
    return table


def main(argv: list[str]) -> int:
    from course.commands import cli

    hooks = argparse.ArgumentParser(add_help=False)
    hooks.add_argument("--only-cells")
    hooks.add_argument("--crash-workers")
    hooks.add_argument("--crash-marks")
    known, rest = hooks.parse_known_args(argv)
    extra = {}
    if known.only_cells:
        extra["only_cells"] = only_cells(known.only_cells)
    if known.crash_workers:
        from distributed import WorkerPlugin

        plugin = type("CrashOnPlugin", (CrashOn, WorkerPlugin), {})(known.crash_workers, known.crash_marks)
        extra["dask_worker_plugins"] = (plugin,)
    args = cli.parse_args(["grade", *rest])
    return cli.grade_command(args, **extra)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

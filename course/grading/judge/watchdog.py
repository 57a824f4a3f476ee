"""A deadline on the judge's own work in a test cell, enforced from a thread."""

from __future__ import annotations

import threading
import os
import time

from course.grading.judge.session import ZYGOTE
from course.grading.protocol import CellVerdict, Event, EventKind, Reply

NOT_ASKED = "not graded: this run grades only some of the test cells (the course's own tests of its tests)"


def verdicts_of(tests: dict, results: dict, nb) -> list[dict]:
    cells = []
    for gid, cell in tests.items():
        max_pts = float(cell.metadata.nbgrader.get("points", 0))
        r = results.get(gid)
        if r is None:
            present = any(c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == gid for c in nb.cells)
            msg = "not graded: the notebook was stopped before this cell" if present else \
                "this test cell was deleted from the submission"
            cells.append({"grade_id": gid, "points": 0.0, "max_points": max_pts, "passed": False, "message": msg,
                          "deleted": not present})
        else:
            cells.append({"grade_id": gid, "points": max_pts if r["passed"] else 0.0, "max_points": max_pts,
                          "passed": r["passed"], "message": r["message"], "deleted": False})
    return cells


class Watchdog:
    """A deadline on the judge's own work in a test cell (its checks and oracles on the learner's answers,
    e.g. attention over a huge tensor the learner returned), which no Python signal can interrupt inside
    a C kernel: a thread watches the clock, and past the cell's limit writes the submission's verdict
    (that cell: timeout, 0; later cells: not graded) on the result channel and ends this judge process
    (its sandboxes die with it); the grader starts a fresh judge for the next submission."""

    def __init__(self):

        self.lock = threading.Lock()
        self.armed = None        # (deadline, gid, limit, tests, results, nb) while a test cell runs here
        self.out = None          # the result channel (set by main())

    def arm(self, deadline, gid, limit, tests, results, nb):
        with self.lock:
            self.armed = (deadline, gid, limit, tests, results, nb)

    def disarm(self):
        with self.lock:
            self.armed = None

    def start(self, out):

        self.out = out
        threading.Thread(target=self._watch, daemon=True, name="judge-watchdog").start()

    def _watch(self):
        while True:
            time.sleep(0.25)
            with self.lock:
                if self.armed is None or time.monotonic() < self.armed[0]:
                    continue
                deadline, gid, limit, tests, results, nb = self.armed
                results = dict(results)
                results[gid] = {"passed": False, "message": f"this test ran past the time limit ({limit} s) and was "
                                                           "stopped (the checks on your answers took too long: an "
                                                           "answer much larger than the test asked for?)"}
                verdict = Reply(cells=[CellVerdict(**c) for c in verdicts_of(tests, results, nb)], judge_exits=True,
                                events=[Event(EventKind.TIMEOUT, f"timeout: test cell {gid} (checking its answers ran "
                                                                 "past the limit)")])
                try:
                    self.out.write(verdict.encode() + "\n")
                    self.out.flush()
                finally:
                    try:                            # a signal only: its sandbox dies with it, nothing waited for
                        if ZYGOTE.proc is not None:
                            ZYGOTE.proc.kill()
                    finally:
                        os._exit(3)


WATCHDOG = Watchdog()

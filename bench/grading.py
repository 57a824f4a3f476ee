"""Grading throughput, side by side in one run: plain `nbgrader autograde` against `course grade`.

    .venv/bin/python bench/grading.py [--lesson 05_self_attention] [--n 8] [--jobs N]

Both grade the same N copies of the lesson's reference solution. nbgrader runs each notebook
whole in a Jupyter kernel, one after another (its only mode); `course grade` sandboxes each
submission, skips the experiment cells, decides verdicts in its judge and runs --jobs at a time.
Prints seconds per submission for both, the throughput ratio and course grade's phases.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from planting import build_submission, write_submission  # noqa: E402


def nbgrader_autograde(lesson: str, subs: Path, work: Path) -> float:
    from course.tools.workspace import Workspace, quiet_logs

    ws = Workspace(work).prepare([lesson])
    ws.generate(lesson)
    shutil.copytree(subs, work / "submitted")
    api = ws.api()
    start = time.perf_counter()
    for student in sorted(p.name for p in subs.iterdir()):
        with quiet_logs():
            out = api.autograde(lesson, student, force=True, create=True)
        if not out.get("success"):
            raise SystemExit(f"nbgrader failed on {student}: {out.get('error')}")
    return time.perf_counter() - start


def course_grade(subs: Path, out: Path, jobs: int) -> tuple[float, dict]:
    start = time.perf_counter()
    proc = subprocess.run([str(Path(sys.executable).parent / "course"), "grade", str(subs), "--out", str(out),
                           "--jobs", str(jobs)], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(proc.stdout[-2000:] + proc.stderr[-2000:])
    results = json.loads((out / "results.json").read_text())
    phases = {}
    for r in results:
        for k, v in r.get("phases", {}).items():
            phases[k] = phases.get(k, 0.0) + v / len(results)
    phases["per submission (wall, in its job)"] = sum(r["seconds"] for r in results) / len(results)
    return seconds, phases


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lesson", default="05_self_attention")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    subs = tmp / "subs"
    for i in range(args.n):
        write_submission(subs, f"student{i:03d}", args.lesson, build_submission(args.lesson))
    t_nb = nbgrader_autograde(args.lesson, subs, tmp / "nbgrader")
    t_course, phases = course_grade(subs, tmp / "course", args.jobs)
    t_course1, _ = course_grade(subs, tmp / "course1", 1) if args.jobs > 1 else (t_course, phases)
    n = args.n
    print(f"{args.lesson}, {n} submissions, {os.cpu_count()} CPU cores")
    print(f"  nbgrader autograde (one at a time):  {t_nb:7.1f} s  {t_nb / n:6.2f} s/submission")
    print(f"  course grade --jobs 1:               {t_course1:7.1f} s  {t_course1 / n:6.2f} s/submission  "
          f"({t_nb / t_course1:.1f}x nbgrader)")
    print(f"  course grade --jobs {args.jobs}:               {t_course:7.1f} s  {t_course / n:6.2f} s/submission  "
          f"({t_nb / t_course:.1f}x nbgrader)")
    print("  course grade phases, mean per submission (s): " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Grading throughput, side by side in one run: plain `nbgrader autograde` against `course grade`.

    .venv/bin/python bench/grading.py [--lesson 05_self_attention] [--n 8] [--jobs N]

Every submission is distinct (the reference solution with the student's name in a comment), so no
cache is flattered; ``--identical`` grades N copies of one notebook instead. nbgrader runs each
notebook whole in a Jupyter kernel, one after another (its only mode); `course grade` sandboxes each
submission, skips the experiment cells, decides verdicts in its judge and runs --jobs at a time.

Each `course grade` is timed as a whole command, in a fresh --out, for a batch of 2 and a batch of
N: the per-submission cost is the slope, the per-batch cost (start-up) what a batch pays before it
(``--n`` at least 4). Also timed: N submissions as 2 shards run side by side (--jobs split between
them) plus their merge.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from planting import build_submission, solution_sources, write_submission  # noqa: E402


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


def course(*argv: str, background: bool = False):
    """`course ARGV`, the command of this venv."""
    cmd = [str(Path(sys.executable).parent / "course"), *argv]
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"course {' '.join(argv)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def timed_grade(subs: Path, out: Path, jobs: int) -> tuple[float, str]:
    start = time.perf_counter()
    said = course("grade", str(subs), "--out", str(out), "--jobs", str(jobs))
    seconds = time.perf_counter() - start
    startup = next((ln for ln in said.splitlines() if ln.startswith("start-up:")), "")
    return seconds, startup


def sharded(subs: Path, tmp: Path, jobs: int) -> float:
    start = time.perf_counter()
    procs = [course("grade", str(subs), "--out", str(tmp / f"shard-{i}"), "--shard", f"{i}/2",
                    "--jobs", str(max(1, jobs // 2)), background=True) for i in range(2)]
    for p in procs:
        said, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a shard failed:\n{said[-3000:]}")
    course("grade", "merge", str(tmp / "shard-0"), str(tmp / "shard-1"), "--out", str(tmp / "merged"))
    return time.perf_counter() - start


def make_batch(folder: Path, lesson: str, n: int, identical: bool) -> Path:
    first = next(iter(solution_sources(lesson)))
    reference = solution_sources(lesson)[first]
    for i in range(n):
        name = f"student{i:03d}"
        replace = None if identical else {first: f"# {name}'s answer\n{reference}"}
        write_submission(folder, name, lesson, build_submission(lesson, replace))
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lesson", default="05_self_attention")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--identical", action="store_true", help="N copies of one notebook (flatters caches)")
    args = ap.parse_args()
    if args.n < 4:
        ap.error("--n must be at least 4 (a batch of 2 and a batch of N give the per-batch cost)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    subs = make_batch(tmp / "subs", args.lesson, args.n, args.identical)
    small = tmp / "subs-2"
    small.mkdir()
    for student in sorted(p.name for p in subs.iterdir())[:2]:
        shutil.copytree(subs / student, small / student)
    n = args.n
    t_nb = nbgrader_autograde(args.lesson, subs, tmp / "nbgrader")
    t2, _ = timed_grade(small, tmp / "course-2", args.jobs)
    tn, startup = timed_grade(subs, tmp / "course-n", args.jobs)
    per = (tn - t2) / (n - 2)
    rows = [(f"course grade --jobs {args.jobs}", tn, per, t2 - 2 * per, startup)]
    t_shards = sharded(subs, tmp / "shards", args.jobs)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    kind = "identical copies" if args.identical else "distinct submissions"
    print(f"{args.lesson}, {n} {kind}, {os.cpu_count()} CPU cores, load average {load:.1f} at the end")
    print(f"  {'':34} {'whole':>8} {'per sub':>8} {'per batch':>9}  vs nbgrader")
    print(f"  {'nbgrader autograde (one at a time)':34} {t_nb:7.1f}s {t_nb / n:7.2f}s {'':>9}  1.0x")
    for label, total, per, batch, _ in rows:
        print(f"  {label:34} {total:7.1f}s {per:7.2f}s {batch:8.1f}s  {t_nb / total:.1f}x")
    print(f"  {'2 shards side by side + merge':34} {t_shards:7.1f}s {'':>8} {'':>9}  {t_nb / t_shards:.1f}x")
    for label, *_, startup in rows:
        if startup:
            print(f"  {label}: {startup}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

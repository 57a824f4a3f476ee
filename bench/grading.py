"""Grading throughput, side by side in one run: plain `nbgrader autograde` against `course grade`.

    .venv/bin/python bench/grading.py [--lesson 05_self_attention] [--n 24] [--jobs N] [--no-dask]

Every submission is distinct (the reference solution with the student's name in a comment), so no
cache is flattered; ``--identical`` grades N copies of one notebook instead. nbgrader runs each
notebook whole in a Jupyter kernel, one after another (its only mode); `course grade` sandboxes each
submission, skips the experiment cells, decides verdicts in its judge and runs --jobs at a time.

Three ways to run `course grade`, each timed as whole commands in fresh --out folders, for a batch of
2 and a batch of N: local judges (``--jobs``), 2 shards side by side (``--jobs`` split between them)
plus their merge, ``--executor dask`` on an embedded cluster of ``--jobs`` workers, and ``--executor dask
--scheduler`` on a standing cluster of ``--jobs`` workers that has graded one batch before. The
per-submission cost is the slope between the two batches, the per-batch cost what is left
(``--n`` at least 4). The assignment cache (``COURSE_GRADE_CACHE``, a temporary folder here) is
filled once before the timings, as after a lesson's first batch; that first generation is reported
on its own.
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
    from course.tools import nbgrader_guard
    from course.tools.workspace import Workspace, quiet_logs

    ws = Workspace(work).prepare([lesson])
    ws.generate(lesson)
    shutil.copytree(subs, work / "submitted")
    api = ws.api()
    os.environ[nbgrader_guard.ALLOW] = "1"       # the course's own notebooks: nbgrader's autograde is timed
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


def timed_grade(subs: Path, out: Path, jobs: int, *extra: str) -> tuple[float, str]:
    start = time.perf_counter()
    said = course("grade", str(subs), "--out", str(out), "--jobs", str(jobs), *extra)
    seconds = time.perf_counter() - start
    startup = next((ln for ln in said.splitlines() if ln.startswith("start-up:")), "")
    return seconds, startup


def sharded(subs: Path, tmp: Path, jobs: int) -> tuple[float, str]:
    start = time.perf_counter()
    procs = [course("grade", str(subs), "--out", str(tmp / f"shard-{i}"), "--shard", f"{i}/2",
                    "--jobs", str(max(1, jobs // 2)), background=True) for i in range(2)]
    for p in procs:
        said, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a shard failed:\n{said[-3000:]}")
    course("grade", "merge", str(tmp / "shard-0"), str(tmp / "shard-1"), "--out", str(tmp / "merged"))
    return time.perf_counter() - start, ""


def make_batch(folder: Path, lesson: str, n: int, identical: bool) -> Path:
    first = next(iter(solution_sources(lesson)))
    reference = solution_sources(lesson)[first]
    for i in range(n):
        name = f"student{i:03d}"
        replace = None if identical else {first: f"# {name}'s answer\n{reference}"}
        write_submission(folder, name, lesson, build_submission(lesson, replace))
    return folder


def prime_cache(lesson: str, work: Path) -> float:
    """Generate the lesson's assignment once into the assignment cache (as a lesson's first batch does)."""
    from course.grading.assignments import generate_assignments as _generate_assignments
    from course.tools.workspace import Workspace

    start = time.perf_counter()
    _generate_assignments(Workspace(work).prepare([lesson]), [lesson], fresh=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lesson", default="05_self_attention")
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--identical", action="store_true", help="N copies of one notebook (flatters caches)")
    ap.add_argument("--no-dask", action="store_true", help="leave out --executor dask (needs course[dask])")
    args = ap.parse_args()
    if args.n < 4:
        ap.error("--n must be at least 4 (a batch of 2 and a batch of N give the per-batch cost)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    os.environ["COURSE_GRADE_CACHE"] = str(tmp / "assignment-cache")
    subs = make_batch(tmp / "subs", args.lesson, args.n, args.identical)
    small = tmp / "subs-2"
    small.mkdir()
    for student in sorted(p.name for p in subs.iterdir())[:2]:
        shutil.copytree(subs / student, small / student)
    n, jobs = args.n, args.jobs
    t_nb = nbgrader_autograde(args.lesson, subs, tmp / "nbgrader")
    t_generate = prime_cache(args.lesson, tmp / "prime")
    modes = [(f"course grade --jobs {jobs}", lambda batch, out: timed_grade(batch, out, jobs)),
             ("2 shards side by side + merge", lambda batch, out: sharded(batch, out, jobs))]
    standing = {}

    def standing_grade(batch: Path, out: Path):
        # A cluster that outlives the command (dask-ssh, Slurm, Kubernetes): its workers' judges are warm
        # after the first batch. Started after the other modes (its idle workers would share their
        # machine), warmed by one batch of 2 that is not timed, then timed like the others.
        if not standing:
            from distributed import LocalCluster

            standing["cluster"] = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True, host="127.0.0.1",
                                               dashboard_address=None, memory_limit=0)
            timed_grade(small, tmp / "standing-warm-up", jobs, "--executor", "dask", "--scheduler",
                        standing["cluster"].scheduler_address)
        return timed_grade(batch, out, jobs, "--executor", "dask", "--scheduler", standing["cluster"].scheduler_address)

    if not args.no_dask:
        modes.append((f"course grade --executor dask ({jobs} workers)",
                      lambda batch, out: timed_grade(batch, out, jobs, "--executor", "dask")))
        modes.append(("  same, standing cluster, judges warm", standing_grade))
    rows = []
    for i, (label, run) in enumerate(modes):
        if run is standing_grade:
            standing_grade(small, tmp / "standing-start")          # the cluster's start and first batch: not timed
        t2, _ = run(small, tmp / f"m{i}-2")
        tn, startup = run(subs, tmp / f"m{i}-n")
        per = (tn - t2) / (n - 2)
        rows.append((label, tn, per, t2 - 2 * per, startup))
    if standing:
        standing["cluster"].close()
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    kind = "identical copies" if args.identical else "distinct submissions"
    print(f"{args.lesson}, {n} {kind}, {os.cpu_count()} CPU cores, load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f} at the end")
    print(f"  {'':40} {'whole':>8} {'per sub':>8} {'per batch':>9}  vs nbgrader")
    print(f"  {'nbgrader autograde (one at a time)':40} {t_nb:7.1f}s {t_nb / n:7.2f}s {'':>9}  1.0x")
    for label, total, per, batch, _ in rows:
        print(f"  {label:40} {total:7.1f}s {per:7.2f}s {batch:8.1f}s  {t_nb / total:.1f}x")
    print(f"  (a lesson version's first batch also generates its assignment: {t_generate:.1f} s here, nbgrader "
          "already imported; then it is cached)")
    for label, *_, startup in rows:
        if startup:
            print(f"  {label}: {startup}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""`course grade` throughput: this checkout's HEAD against an earlier commit, same submissions, same machine.

    .venv/bin/python bench/grading_vs_commit.py 3ae34fd [--lesson 05_self_attention] [--sizes 8 24]
                                                        [--rounds 3] [--jobs 2]

Both graders run from this venv's packages, each from a clean copy of its own commit (``git worktree``
in a temporary folder; nothing is installed): a bare venv per side whose one ``.pth`` names the copy and
this venv's site-packages, so the sandbox binds that copy's ``course`` as it would an installed one.
Each batch size is graded by the old and the new grader in turn, ``--rounds`` times, whole command
(start-up included), fresh ``--out`` each time; every run's wall time is printed with the load average
beside it. The submissions are distinct (bench/grading.py's), graded with each side's own lesson.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from grading import make_batch  # noqa: E402


def side(tmp: Path, name: str, commit: str) -> Path:
    """A clean copy of ``commit`` and a bare venv that imports it (and this venv's packages): its python."""
    tree = tmp / f"{name}-tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), commit], check=True,
                   capture_output=True)
    venv = tmp / f"{name}-venv"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    here = next(p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir())
    (site / "bench-side.pth").write_text(f"{tree}\n{here}\n")
    (venv / "share").symlink_to(Path(sys.prefix) / "share")        # jupyter's templates (feedback pages)
    return venv / "bin" / "python"


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def grade(python: Path, subs: Path, out: Path, jobs: int) -> tuple[float, float]:
    """Wall seconds of the whole command, and CPU seconds of it and every process it waited for (judges,
    sandboxes, workers): the CPU time moves much less than the wall time on a busy machine."""
    env = dict(os.environ, PATH=f"{python.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    start, cpu = time.perf_counter(), _cpu()
    tree = python.parent.parent.parent / python.parent.parent.name.replace("-venv", "-tree")
    cli = "course.commands.cli" if (tree / "course" / "commands" / "cli.py").is_file() else "course.tools.cli"
    proc = subprocess.run([str(python), "-m", cli, "grade", str(subs), "--out", str(out),
                           "--jobs", str(jobs)], capture_output=True, text=True, env=env, cwd=out.parent)
    seconds, cpu = time.perf_counter() - start, _cpu() - cpu
    if proc.returncode != 0:
        raise SystemExit(f"{python} grade failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return seconds, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("commit", help="the earlier grader, e.g. 3ae34fd")
    ap.add_argument("--lesson", default="05_self_attention")
    ap.add_argument("--sizes", type=int, nargs=2, default=[8, 24])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-vs-commit-"))
    try:
        sides = {"old": side(tmp, "old", args.commit), "new": side(tmp, "new", "HEAD")}
        big = make_batch(tmp / f"subs-{max(args.sizes)}", args.lesson, max(args.sizes), identical=False)
        batches = {}
        for n in args.sizes:
            batches[n] = tmp / f"subs-{n}"
            if not batches[n].exists():
                batches[n].mkdir()
                for student in sorted(p.name for p in big.iterdir())[:n]:
                    shutil.copytree(big / student, batches[n] / student)
        times: dict[tuple, list] = {}
        for r in range(args.rounds):
            for n in args.sizes:
                for who in ("old", "new"):
                    load = os.getloadavg()[0]
                    out = tmp / f"out-{who}-{n}-{r}"
                    t, cpu = grade(sides[who], batches[n], out, args.jobs)
                    shutil.rmtree(out, ignore_errors=True)
                    times.setdefault((who, n), []).append((t, cpu))
                    print(f"round {r + 1}  {who} ({args.commit if who == 'old' else 'HEAD'})  {n:3d} submissions  "
                          f"{t:6.1f} s wall {cpu:6.1f} s CPU  load {load:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
        small, large = sorted(args.sizes)
        print(f"\nmedians, {args.lesson}, --jobs {args.jobs}, {os.cpu_count()} CPU cores:")
        for who in ("old", "new"):
            for k, what in enumerate(("wall", "CPU")):
                a, b = (statistics.median(x[k] for x in times[(who, n)]) for n in (small, large))
                per = (b - a) / (large - small)
                print(f"  {who} {what:4}: {small} in {a:.1f} s, {large} in {b:.1f} s; per submission {per:.2f} s, "
                      f"per batch {a - small * per:.1f} s")
    finally:
        for name in ("old", "new"):
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / f"{name}-tree")],
                           capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

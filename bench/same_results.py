"""Do two graders give the same results? Every planted bank, graded by an earlier commit and by
this checkout, in one script: ``grades.csv`` and ``results.json`` must be equal apart from timings.

    .venv/bin/python bench/same_results.py d96dcb2 [--lessons 00 05] [--jobs 2] [--keep DIR]

Each side is a clean copy of its commit (``git worktree``) with a bare venv that imports it and this
venv's packages (bench/grading_vs_commit.py's ``side``), so the sandbox binds that copy's ``course``.
The submissions are built once, from this checkout's banks (every variant, ``EXTENDED`` included, each
graded on every cell), and graded by both sides.
What may differ: the fields that time a run (``seconds``, ``phases``) and where the feedback page was
written (``feedback``, under each side's own --out). Everything else (scores, statuses, details, every
cell's points and message) must be the same; the script prints each difference and exits 1 if any.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from grading_vs_commit import side  # noqa: E402
from planting import build_submission, load_planted, write_submission  # noqa: E402

TIMINGS = ("seconds", "phases", "feedback")


def write_banks(subs: Path, lessons: list[str] | None) -> int:
    planted = load_planted(everything=True)
    count = 0
    for lesson, variants in sorted(planted.items()):
        if lessons and not any(lesson.startswith(x) for x in lessons):
            continue
        write_submission(subs, "reference", lesson, build_submission(lesson))
        write_submission(subs, "untouched", lesson, build_submission(lesson, fill=False))
        for name, variant in variants.items():
            write_submission(subs, name, lesson, build_submission(lesson, variant["replace"]))
        count += 2 + len(variants)
    return count


def graded(python: Path, tree: Path, subs: Path, out: Path, jobs: int, timeout: int) -> tuple[dict, str]:
    env = dict(os.environ, PATH=f"{python.parent}:{Path(sys.executable).parent}:{os.environ['PATH']}")
    cli = "course.commands.cli" if (tree / "course" / "commands" / "cli.py").is_file() else "course.tools.cli"
    proc = subprocess.run([str(python), "-m", cli, "grade", str(subs), "--out", str(out), "--jobs", str(jobs),
                           "--timeout", str(timeout)], capture_output=True, text=True, env=env, cwd=out.parent)
    if not (out / "results.json").is_file():
        raise SystemExit(f"{tree.name} wrote no results:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = json.loads((out / "results.json").read_text(encoding="utf-8"))
    for row in rows:
        for key in TIMINGS:
            row.pop(key, None)
    return {(r["student"], r["lesson"]): r for r in rows}, (out / "grades.csv").read_text(encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("commit", help="the earlier grader, e.g. d96dcb2")
    ap.add_argument("--new", default="HEAD", help="the later grader (default: HEAD)")
    ap.add_argument("--lessons", nargs="*", help="lesson prefixes (default: every bank)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=300, help="per cell: generous, so machine load changes nothing")
    ap.add_argument("--keep", help="keep the graded folders here")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="same-results-"))
    try:
        subs = tmp / "submissions"
        n = write_banks(subs, args.lessons)
        print(f"{n} submissions", flush=True)
        found = {}
        for name, commit in (("old", args.commit), ("new", args.new)):
            python = side(tmp, name, commit)
            found[name] = graded(python, tmp / f"{name}-tree", subs, tmp / f"out-{name}", args.jobs, args.timeout)
            print(f"{name} ({commit}): {len(found[name][0])} results", flush=True)
        (old, old_csv), (new, new_csv) = found["old"], found["new"]
        differences = []
        if old_csv != new_csv:
            differences.append("grades.csv differs")
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                differences.append(f"{key[0]}/{key[1]}:\n  old {json.dumps(old.get(key))[:1500]}\n"
                                   f"  new {json.dumps(new.get(key))[:1500]}")
        for d in differences:
            print(d)
        print(f"{len(differences)} difference(s) among {len(set(old) | set(new))} submissions")
        if args.keep:
            for name in ("old", "new"):
                shutil.copytree(tmp / f"out-{name}", Path(args.keep) / name, dirs_exist_ok=True)
        sys.exit(1 if differences else 0)
    finally:
        for name in ("old", "new"):
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / f"{name}-tree")],
                           capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""How often does the class report name the planted mistake? Every planted bug of every bank is graded (on every
cell), then named from the fairness certificate's catalogue (course/grading/report/misconceptions.py), as the
report names a failing submission's most likely mistake.

    .venv/bin/python bench/misconceptions.py [--lessons 05 08] [--jobs 2] [--graded DIR] [--keep DIR] [--json F]

Three rates, over the planted bugs that lost points:

* **named**: the report names a mistake at all (a pattern of failures at least THRESHOLD alike a catalogued one's, 0.3);
* **right place**: the named mistake is a change to an exercise the planted bug changed (its ``replace`` cells):
  the instructor is sent to the right function;
* **right mistake**, over the bugs whose name says which classic mistake they are (``LABELS``: a bug called
  ``..._no_scaling`` drops the scale, ``..._wrong_axis`` takes the softmax over the wrong axis, ...): the named
  mistake is that one (its operator, or a generic mutation of the same kind).

``--graded DIR`` reuses a folder this script graded before (``--keep``); the report itself is also written on that
folder once and timed (``course report``'s whole command, CPU and wall seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from course.grading.report.misconceptions import Catalogue  # noqa: E402
from planting import build_submission, load_planted, write_submission  # noqa: E402

# A planted bug's name -> the operators that make that mistake (the course's own, and the generic ones that can).
LABELS = [
    (r"no_scal|scale_by|unscaled|_scale$|wrong_scale|sqrt", {"attention:scale", "mutmut:operator_arg_removal",
                                                             "generic:statement_removal", "mutmut:operator_swap_op"}),
    (r"axis|over_queries|wrong_dim|dim_0|over_rows|over_columns", {"attention:softmax_axis", "generic:axis_change",
                                                                   "mutmut:operator_number"}),
    (r"finite|fill", {"attention:fill_value", "mutmut:operator_number", "mutmut:operator_remove_unary_ops"}),
    (r"sees_next|diagonal|off_by_one|sees_future", {"attention:causal_diagonal", "generic:slice_bounds",
                                                    "generic:number_decrement", "mutmut:operator_number",
                                                    "mutmut:operator_swap_op"}),
    (r"invert|mask_sign|blocked|true_means", {"attention:mask_sign", "mutmut:operator_remove_unary_ops",
                                              "mutmut:operator_if_exp"}),
    (r"transpose", {"attention:missing_transpose", "attention:permute_order"}),
    (r"dropout", {"attention:dropout"}),
    (r"shared", {"attention:shared_layers"}),
    (r"shift", {"attention:position_shift", "generic:slice_bounds"}),
]


def label(name: str) -> set[str] | None:
    for pattern, operators in LABELS:
        if re.search(pattern, name):
            return operators
    return None


def grade(subs: Path, out: Path, jobs: int) -> None:
    proc = subprocess.run([sys.executable, "-m", "course.commands.cli", "grade", str(subs), "--out", str(out),
                           "--jobs", str(jobs), "--timeout", "120", "--no-report"], cwd=ROOT, capture_output=True,
                          text=True)
    if not (out / "results.json").is_file():
        raise SystemExit(f"course grade wrote no results:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lessons", nargs="*", default=None, help="lesson id prefixes (default: every bank)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--graded", type=Path, default=None, help="a folder this script graded before (--keep)")
    ap.add_argument("--keep", type=Path, default=None, help="grade into this folder (kept)")
    ap.add_argument("--json", type=Path, default=None, help="write the rates and every bug's naming here")
    args = ap.parse_args()

    planted = load_planted(everything=True)
    lessons = sorted(l for l in planted if not args.lessons or any(l.startswith(x) for x in args.lessons))
    bugs = {(name, lesson): v for lesson in lessons for name, v in planted[lesson].items() if v["must_fail"]}
    if args.graded:
        out = args.graded
    else:
        base = args.keep or Path(tempfile.mkdtemp(prefix="misconceptions-"))
        subs, out = base / "submissions", base / "graded"
        for (name, lesson), variant in bugs.items():
            write_submission(subs, name, lesson, build_submission(lesson, variant["replace"]))
        t0 = time.time()
        grade(subs, out, args.jobs)
        print(f"graded {len(bugs)} planted bugs of {len(lessons)} lessons in {time.time() - t0:.0f} s")
    results = {(r["student"], r["lesson"]): r for r in json.loads((out / "results.json").read_text())}
    catalogue = Catalogue.load(ROOT / "docs" / "fairness.json")

    per_lesson = defaultdict(lambda: defaultdict(int))
    rows = []
    for (name, lesson), variant in sorted(bugs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        r = results.get((name, lesson))
        if r is None or r["score"] >= r["max_score"]:
            continue
        hit = catalogue.name(lesson, r["cells"])
        want = label(name)
        c = per_lesson[lesson]
        c["bugs"] += 1
        row = {"lesson": lesson, "bug": name, "named": None, "place": False, "labelled": want is not None,
               "right": None}
        if hit is not None:
            mistake, score = hit
            c["named"] += 1
            row.update(named=f"{mistake.exercise}: {mistake.operator} ({score:.2f})",
                       place=mistake.exercise in variant["replace"])
            c["place"] += row["place"]
        if want is not None:
            c["labelled"] += 1
            row["right"] = hit is not None and hit[0].operator in want and row["place"]
            c["right"] += bool(row["right"])
        rows.append(row)

    total = defaultdict(int)
    print(f"{'lesson':<28} {'bugs':>5} {'named':>6} {'right place':>12} {'labelled':>9} {'right mistake':>14}")
    for lesson in lessons:
        c = per_lesson[lesson]
        for k, v in c.items():
            total[k] += v
        print(f"{lesson:<28} {c['bugs']:>5} {c['named']:>6} {c['place']:>12} {c['labelled']:>9} {c['right']:>14}")
    def rate(a, b):
        return f"{total[a] / total[b]:.0%}" if total[b] else "-"
    print(f"{'all':<28} {total['bugs']:>5} {total['named']:>6} {total['place']:>12} {total['labelled']:>9} "
          f"{total['right']:>14}")
    print(f"named {rate('named', 'bugs')}; right place {rate('place', 'bugs')} of all bugs "
          f"({rate('place', 'named')} of those named); right mistake {rate('right', 'labelled')} of the labelled")
    # The threshold's trade-off on the same grading: how many are named, and how many of those at the right place.
    sweep = []
    for thr in (0.2, 0.3, 0.4, 0.5, 0.7):
        named = place = 0
        for (name, lesson), variant in bugs.items():
            r = results.get((name, lesson))
            if r is None or r["score"] >= r["max_score"]:
                continue
            hit = catalogue.name(lesson, r["cells"], threshold=thr)
            named += hit is not None
            place += hit is not None and hit[0].exercise in variant["replace"]
        sweep.append({"threshold": thr, "named": named, "place": place})
        print(f"threshold {thr:.1f}: named {named} of {total['bugs']}, right place {place} "
              f"({place / named:.0%} of those named)" if named else f"threshold {thr:.1f}: none named")
    for row in rows:
        if row["labelled"] and not row["right"]:
            print(f"  missed: {row['lesson']}/{row['bug']} -> {row['named']}")

    # The report's own cost on this folder: the whole command, as an instructor runs it.
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "course.commands.cli", "report", str(out)], cwd=ROOT, check=True,
                   capture_output=True, env=dict(os.environ))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"course report on {len(results)} results of {len(lessons)} lessons: {time.time() - t0:.1f} s wall, "
          f"{cpu:.1f} CPU-s")
    if args.json:
        args.json.write_text(json.dumps({"total": dict(total), "lessons": {k: dict(v) for k, v in per_lesson.items()},
                                         "bugs": rows, "sweep": sweep, "report_cpu_s": cpu}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

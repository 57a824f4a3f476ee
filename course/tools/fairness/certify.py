"""``make certify``: grade every exercise's mutants and correct alternatives with ``course grade`` and write
the fairness certificate (``docs/fairness.md``, and ``docs/fairness.json`` beside it).

    python -m course.tools.fairness.certify [--lessons ID ...] [--sample N] [--jobs J] [--seeds 0 1 2]

Per lesson, one ``course grade`` batch holds the reference (which must keep full marks), every mutant
(or a stable sample of ``N`` per exercise) and every correct alternative once per seed (the parameters
cell's ``SEED``). A mutant that loses a point is killed, and each failing cell's message is checked
(:mod:`.messages`); one that keeps full marks is run beside the reference outside the grader
(:mod:`.equivalence`): equal everywhere is equivalent, different somewhere is a survivor, listed with its
diff, the input where it differs and the decision taken (``decisions.json``).

The JSON keeps each lesson's latest record, so lessons can be certified one at a time (a slow machine, a
lesson just merged); the page is written from the whole JSON. The command exits 1 when a lesson of this
run misses a target:

* at least 98 % of the non-equivalent mutants of every exercise are killed;
* no correct alternative loses a point, on any seed;
* every killed mutant's failing cells have messages that pass the checks.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from . import messages as msgchecks
from .mutants import Mutant, mutate_lesson, sample, solution_cells, split_solution

ROOT = Path(__file__).resolve().parents[3]
KILL_TARGET = 0.98
ALTERNATIVES_TARGET = 3          # correct alternatives in other styles covering each exercise (issue 42)
# Statuses that say the grader failed, not the submission: such a mutant is not counted as killed.
GRADER_FAULTS = ("grader-error", "invalid-notebook", "missing-notebook", "unknown-lesson")
DECISIONS = Path(__file__).resolve().parent / "decisions.json"


# --------------------------------------------------------------------------------------------------
# Lessons, submissions, alternatives

def lessons(root: Path = ROOT) -> list[str]:
    """Every lesson: a folder of solutions/ with its notebook (a new lesson joins by existing)."""
    return sorted(p.name for p in (root / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())


def reference_sources(root: Path, lesson: str) -> dict[str, str]:
    return {gid: split_solution(raw)[0] for gid, raw in solution_cells(root, lesson).items()}


def build_submission(root: Path, lesson: str, replace: dict[str, str] | None = None, seed: int | None = None):
    """The student notebook, its solution cells filled with the reference except those replaced, and the
    parameters cell's SEED set to ``seed``."""
    nb = nbformat.read(str(root / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    sources = reference_sources(root, lesson)
    replace = replace or {}
    unknown = set(replace) - set(sources)
    if unknown:
        raise KeyError(f"{lesson}: no solution cells {sorted(unknown)}")
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in sources:
            cell.source = (replace.get(meta["grade_id"]) or sources[meta["grade_id"]]).strip("\n")
        if seed is not None and "parameters" in cell.metadata.get("tags", []):
            cell.source, n = re.subn(r"^SEED\s*=.*$", f"SEED = {int(seed)}", cell.source, flags=re.M)
            if not n:
                raise ValueError(f"{lesson}: the parameters cell has no SEED = line")
    return nb


def _load_bank(path: Path):
    tests = str(path.parents[1])
    if tests not in sys.path:
        sys.path.insert(0, tests)               # banks may import tests/planting.py
    spec = importlib.util.spec_from_file_location(f"bank_{path.parent.name}_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def alternatives(root: Path, lesson: str) -> dict[str, dict]:
    """Correct alternatives of a lesson: the planted bank's styles (``must_fail: []``, EXTENDED included) and
    every entry of ``tests/alternatives/<lesson>.py`` (same format; ``blind: True`` for those written from
    the student notebook alone, without reading the hidden tests)."""
    found = {}
    for folder in ("planted", "alternatives"):
        path = root / "tests" / folder / f"{lesson}.py"
        if not path.is_file():
            continue
        mod = _load_bank(path)
        for name, variant in mod.VARIANTS.items():
            if folder == "alternatives" and variant.get("must_fail"):
                raise ValueError(f"{path}: {name} is listed as an alternative but has must_fail")
            if not variant.get("must_fail"):
                found[f"{folder}:{name}"] = {"replace": variant["replace"], "blind": bool(variant.get("blind")),
                                              "style": variant.get("style", ""), "source": f"tests/{folder}/{lesson}.py"}
    return found


def _alt_student(name: str, seed: int) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", f"a_{name.replace(':', '_')}")[:54] + f"_s{seed}"


def _write(subs: Path, student: str, lesson: str, nb) -> None:
    path = subs / student / lesson / f"{lesson}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def hidden_lines(root: Path, lesson: str) -> set[str]:
    from course.grading.notebooks import hidden_lines as lines

    source = nbformat.read(str(root / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    release = nbformat.read(str(root / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    return lines(source, release)


# --------------------------------------------------------------------------------------------------
# Grading

def course_command() -> list[str]:
    exe = Path(sys.executable).parent / "course"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "course.commands.cli"]


def grade(subs: Path, out: Path, *, jobs: int, timeout: int, notebook_timeout: int, extra: list[str] = ()) -> tuple[list, float, str]:
    """One ``course grade`` batch: (results, CPU seconds of the grading processes, what it printed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = [*course_command(), "grade", str(subs), "--out", str(out), "--jobs", str(jobs), "--timeout", str(timeout),
           "--notebook-timeout", str(notebook_timeout), *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    results = out / "results.json"
    if not results.is_file():
        raise RuntimeError(f"course grade wrote no results ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(results.read_text()), cpu, proc.stdout[-2000:]


def failing_cells(result: dict) -> list[dict]:
    return [c for c in result.get("cells", []) if c.get("points", 0) < c.get("max_points", 0)]


def lost_points(result: dict) -> bool:
    return result.get("status") != "graded" or result.get("score", 0) < result.get("max_score", 0)


# --------------------------------------------------------------------------------------------------
# One lesson

def certify_lesson(root: Path, lesson: str, *, sample_n: int | None, jobs: int, timeout: int, notebook_timeout: int,
                   seeds: list[int], work: Path, with_alternatives: bool = True, with_equivalence: bool = True,
                   resume: bool = False, log=print) -> dict:
    started, t0 = _dt.datetime.now(_dt.timezone.utc), time.monotonic()
    generated = mutate_lesson(root, lesson)
    chosen: dict[str, list[Mutant]] = {cell: sample(g.mutants, sample_n, salt=lesson) for cell, g in generated.items()}
    if sample_n == 0:                                   # --alternatives-only: no mutant graded
        chosen = {cell: [] for cell in generated}
    alts = alternatives(root, lesson) if with_alternatives else {}
    subs, out = work / lesson / "submissions", work / lesson / "graded"
    kept = 0
    if resume and (out / "results.json").is_file():
        # an interrupted run of the same lesson: course grade keeps the result of a submission whose notebook
        # and lesson have not changed (content hashes), so only what is missing is graded now
        kept = len(json.loads((out / "results.json").read_text()))
        shutil.rmtree(subs, ignore_errors=True)
    else:
        shutil.rmtree(work / lesson, ignore_errors=True)
    _write(subs, "reference", lesson, build_submission(root, lesson))
    for mutants in chosen.values():
        for mu in mutants:
            _write(subs, mu.student, lesson, build_submission(root, lesson, {mu.cell: mu.source}))
    for name, alt in alts.items():
        for seed in seeds:
            _write(subs, _alt_student(name, seed), lesson, build_submission(root, lesson, alt["replace"], seed))
    n_subs = 1 + sum(map(len, chosen.values())) + len(alts) * len(seeds)
    log(f"{lesson}: grading {n_subs} submissions ({sum(map(len, chosen.values()))} mutants, {len(alts)} alternatives x "
        f"{len(seeds)} seeds)" + (f", {kept} already graded in an interrupted run" if kept else ""))
    results, cpu, said = grade(subs, out, jobs=jobs, timeout=timeout, notebook_timeout=notebook_timeout)
    by_student = {r["student"]: r for r in results if r["lesson"] == lesson}
    graded_s = time.monotonic() - t0

    ref = by_student.get("reference", {})
    record = {"lesson": lesson, "date": started.strftime("%Y-%m-%d %H:%M UTC"), "sample": sample_n, "seeds": seeds,
              "submissions": n_subs, "grading_cpu_s": round(cpu, 1),
              **({"resumed": f"{kept} results kept from an interrupted run in {work / lesson}; times are this run's only"}
                 if kept else {}),
              "reference": {"status": ref.get("status"), "score": ref.get("score"), "max": ref.get("max_score")},
              "exercises": {}, "alternatives": []}
    if not ref or lost_points(ref):
        record["error"] = f"the reference did not keep full marks: {ref.get('status')} {ref.get('detail', '')}\n{said}"
        record["seconds"] = round(time.monotonic() - t0, 1)
        return record

    names = list(reference_sources(root, lesson))
    hidden = hidden_lines(root, lesson)
    decisions = json.loads(DECISIONS.read_text()).get(lesson, {}) if DECISIONS.is_file() else {}
    candidates = []
    for cell, g in generated.items():
        ex = {"generated": g.generated, "dropped": dict(g.dropped), "mutants_total": len(g.mutants),
              "graded": len(chosen[cell]), "mutants": []}
        record["exercises"][cell] = ex
        for mu in chosen[cell]:
            r = by_student.get(mu.student)
            entry = {"key": mu.key, "operator": mu.operator, "diff": mu.diff}
            if r is None:
                entry.update(verdict="not graded", detail="course grade returned no result")
            elif r.get("status") in GRADER_FAULTS:
                entry.update(verdict="not graded", detail=f"{r.get('status')}: {r.get('detail', '')}"[:500])
            elif lost_points(r):
                failing = [{"cell": c["grade_id"], "points": f"{c['points']:g}/{c['max_points']:g}", "message": c["message"],
                            "problems": msgchecks.problems(c["message"], names=names, hidden=hidden)} for c in failing_cells(r)]
                if r.get("status") != "graded" and not failing:
                    failing = [{"cell": "(notebook)", "points": f"{r.get('score', 0):g}/{r.get('max_score', 0):g}",
                                "message": r.get("detail", ""),
                                "problems": msgchecks.problems(r.get("detail", ""), names=names, hidden=hidden)}]
                entry.update(verdict="killed", status=r.get("status"), score=f"{r.get('score', 0):g}/{r.get('max_score', 0):g}",
                             failing=failing, messages_pass=all(not f["problems"] for f in failing))
            else:
                entry.update(verdict="full marks")
                candidates.append((mu, entry))
            ex["mutants"].append(entry)

    if candidates and with_equivalence:
        from .equivalence import decide_in_child

        log(f"{lesson}: {len(candidates)} mutants kept full marks: differential testing outside the grader")
        for mu, entry in candidates:
            evidence = decide_in_child(root, mu)
            entry["evidence"] = evidence
            entry["verdict"] = "equivalent" if evidence.get("equivalent") else "surviving"
            if entry["verdict"] == "surviving":
                entry["decision"] = decisions.get(mu.key, {"decision": "undecided",
                                                           "why": "not yet reviewed: a hole to report"})
    elif candidates:
        for mu, entry in candidates:
            entry["verdict"] = "surviving"
            entry["decision"] = decisions.get(mu.key, {"decision": "undecided", "why": "equivalence not checked (--no-equivalence)"})

    for name, alt in alts.items():
        marks, lost = {}, []
        for seed in seeds:
            r = by_student.get(_alt_student(name, seed))
            if r is None:
                marks[str(seed)] = "not graded"
                lost.append({"seed": seed, "cell": "(notebook)", "message": "course grade returned no result"})
                continue
            status = "" if r.get("status") == "graded" else f" ({r.get('status')})"
            marks[str(seed)] = f"{r.get('score', 0):g}/{r.get('max_score', 0):g}{status}"
            if lost_points(r):
                lost += [{"seed": seed, "cell": c["grade_id"], "message": c["message"]} for c in failing_cells(r)] or \
                        [{"seed": seed, "cell": "(notebook)", "message": r.get("detail", "")}]
        record["alternatives"].append({"name": name, "cells": sorted(alt["replace"]), "blind": alt["blind"], "style": alt["style"],
                                       "source": alt["source"], "marks": marks, "lost": lost})
    record["seconds"] = round(time.monotonic() - t0, 1)
    record["grading_s"] = round(graded_s, 1)
    summarise(record)
    return record


def estimate_lesson(root: Path, lesson: str, *, jobs: int, timeout: int, notebook_timeout: int, seeds: list[int],
                    work: Path, log=print) -> dict:
    """What certifying a lesson would cost, without certifying it: its mutants and alternatives counted, and the
    reference graded once (its ``course grade`` time stands for a submission's; a mutant that fails early costs
    less, one that runs to the notebook timeout more)."""
    started, t0 = _dt.datetime.now(_dt.timezone.utc), time.monotonic()
    generated = mutate_lesson(root, lesson)
    alts = alternatives(root, lesson)
    subs, out = work / lesson / "estimate" / "submissions", work / lesson / "estimate" / "graded"
    shutil.rmtree(work / lesson / "estimate", ignore_errors=True)
    _write(subs, "reference", lesson, build_submission(root, lesson))
    log(f"{lesson}: grading the reference once to estimate the certificate's cost")
    results, cpu, said = grade(subs, out, jobs=jobs, timeout=timeout, notebook_timeout=notebook_timeout)
    ref = next((r for r in results if r["student"] == "reference"), {})
    n_mut = sum(len(g.mutants) for g in generated.values())
    n_subs = 1 + n_mut + len(alts) * len(seeds)
    per = float(ref.get("seconds") or 0.0)
    return {"lesson": lesson, "date": started.strftime("%Y-%m-%d %H:%M UTC"),
            "mutants": {cell: len(g.mutants) for cell, g in generated.items()}, "mutants_total": n_mut,
            "alternatives": len(alts), "seeds": seeds, "submissions": n_subs,
            "reference": {"status": ref.get("status"), "score": ref.get("score"), "max": ref.get("max_score"),
                          "seconds": per, "phases": ref.get("phases", {}), "grading_cpu_s": round(cpu, 1)},
            "estimate_s": round(per * n_subs), "seconds": round(time.monotonic() - t0, 1)}


def alternatives_per_exercise(record: dict) -> dict[str, tuple[int, int]]:
    """For each exercise of a lesson's record: how many of its correct alternatives replace that cell, and how
    many of those were written blind (from the student notebook alone)."""
    counts = {}
    for cell in record.get("exercises", {}):
        covering = [a for a in record.get("alternatives", []) if cell in a.get("cells", [])]
        counts[cell] = (len(covering), sum(1 for a in covering if a.get("blind")))
    return counts


def summarise(record: dict) -> None:
    """Counts per exercise and the targets met, in the record itself."""
    misses = []
    if record.get("error"):
        record["misses"] = [record["error"]]
        return
    for cell, (n, _blind) in alternatives_per_exercise(record).items():
        if n < ALTERNATIVES_TARGET:
            misses.append(f"{cell}: {n} correct alternative(s) in other styles (target {ALTERNATIVES_TARGET})")
    for cell, ex in record.get("exercises", {}).items():
        verdicts = [m["verdict"] for m in ex["mutants"]]
        killed, equivalent = verdicts.count("killed"), verdicts.count("equivalent")
        surviving = sum(v in ("surviving", "full marks", "not graded") for v in verdicts)
        # a survivor reviewed as a difference the contract allows (decisions.json: "acceptable") is not held
        # against the tests: a test that caught it would be unfair; it stays listed with its reason
        accepted = sum(1 for m in ex["mutants"] if m["verdict"] == "surviving"
                       and m.get("decision", {}).get("decision") == "acceptable")
        rate = killed / (killed + surviving - accepted) if killed + surviving - accepted else 1.0
        msg_ok = sum(1 for m in ex["mutants"] if m["verdict"] == "killed" and m["messages_pass"])
        ex.update(killed=killed, equivalent=equivalent, surviving=surviving, accepted=accepted, kill_rate=round(rate, 4),
                  messages_pass=msg_ok, messages_rate=round(msg_ok / killed, 4) if killed else 1.0)
        if rate < KILL_TARGET:
            misses.append(f"{cell}: {rate:.1%} of non-equivalent mutants killed (target {KILL_TARGET:.0%})")
        if killed and msg_ok < killed:
            misses.append(f"{cell}: {killed - msg_ok} of {killed} killed mutants have a message that fails the checks")
    for alt in record.get("alternatives", []):
        if alt["lost"]:
            misses.append(f"alternative {alt['name']} lost points: {alt['marks']}")
    record["misses"] = misses


# --------------------------------------------------------------------------------------------------
# The certificate

def load(json_path: Path) -> dict:
    if json_path.is_file():
        return json.loads(json_path.read_text())
    return {"lessons": {}}


def refresh_decisions(cert: dict) -> None:
    """Survivors' decisions as decisions.json has them now (reviewed after the run that found them)."""
    decisions = json.loads(DECISIONS.read_text()) if DECISIONS.is_file() else {}
    for lesson, rec in cert.get("lessons", {}).items():
        for ex in rec.get("exercises", {}).values():
            for m in ex["mutants"]:
                if m["verdict"] == "surviving":
                    m["decision"] = decisions.get(lesson, {}).get(m["key"], m.get("decision") or
                                                                  {"decision": "undecided", "why": "not yet reviewed: a hole to report"})


def save(json_path: Path, page: Path, lesson: str | None, record: dict | None, *, estimate: dict | None = None) -> None:
    """Put one lesson's record into the JSON (read again under a lock: runs of other lessons may be writing
    it too) and write the page from the JSON."""
    import fcntl

    from .report import write_page

    json_path.parent.mkdir(parents=True, exist_ok=True)
    with open(json_path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cert = load(json_path)
        if estimate is not None:                        # a cost estimate of a lesson not certified (--estimate)
            cert.setdefault("not_certified", {})[estimate["lesson"]] = estimate
        if lesson is not None:
            cert.setdefault("lessons", {})[lesson] = record
            if not record.get("sample"):                # certified in full: its estimate is history
                cert.get("not_certified", {}).pop(lesson, None)
        refresh_decisions(cert)
        for rec in cert["lessons"].values():
            summarise(rec)
        cert["lessons"] = dict(sorted(cert["lessons"].items()))
        json_path.write_text(json.dumps(cert, indent=1) + "\n")
        write_page(json.loads(json_path.read_text()), page)       # the page is what the JSON says
    json_path.with_suffix(".lock").unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m course.tools.fairness.certify", description=__doc__.split("\n\n")[0])
    ap.add_argument("--lessons", nargs="+", default=None, help="lessons to certify (default: every lesson in solutions/)")
    ap.add_argument("--sample", type=int, default=None, help="at most N mutants per exercise, chosen by a stable hash")
    ap.add_argument("--jobs", type=int, default=2, help="submissions graded at a time (course grade --jobs)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds one cell may run (course grade --timeout)")
    ap.add_argument("--notebook-timeout", type=int, default=600, help="seconds one notebook may run: a mutant that loops "
                                                                      "cannot stall the batch")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="SEED values each alternative is graded with")
    ap.add_argument("--no-alternatives", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "docs" / "fairness.md"))
    ap.add_argument("--work", default=None, help="grading folder (default: a temporary one, removed afterwards)")
    ap.add_argument("--resume", action="store_true",
                    help="with --work: keep the results of an interrupted run there (unchanged submissions are not graded again)")
    ap.add_argument("--alternatives-only", action="store_true",
                    help="grade the alternatives only and replace them in the lessons' existing records")
    ap.add_argument("--estimate", action="store_true",
                    help="certify nothing: count each lesson's mutants and alternatives, grade its reference once, and "
                         "put the cost of certifying it on the page")
    ap.add_argument("--page-only", action="store_true", help="grade nothing: apply decisions.json to the JSON and rewrite the page")
    args = ap.parse_args(argv)

    out = Path(args.out)
    json_path = out.with_suffix(".json")
    if args.page_only:
        save(json_path, out, None, None)
        return 0
    chosen = args.lessons or lessons()
    unknown = set(chosen) - set(lessons())
    if unknown:
        ap.error(f"no such lessons: {sorted(unknown)}")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="course-certify-"))
    command = "python -m course.tools.fairness.certify " + " ".join(argv if argv is not None else sys.argv[1:])
    misses = []
    t0 = time.monotonic()
    try:
        for lesson in chosen:
            if args.estimate:
                est = estimate_lesson(ROOT, lesson, jobs=args.jobs, timeout=args.timeout, notebook_timeout=args.notebook_timeout,
                                      seeds=args.seeds, work=work)
                est["command"] = command.strip()
                save(json_path, out, None, None, estimate=est)
                print(f"{lesson}: {est['submissions']} submissions, reference {est['reference']['seconds']:.0f} s: "
                      f"about {est['estimate_s'] / 3600:.1f} h at --jobs 1 (the reference's time per submission)")
                continue
            record = certify_lesson(ROOT, lesson, sample_n=0 if args.alternatives_only else args.sample, jobs=args.jobs,
                                    timeout=args.timeout,
                                    notebook_timeout=args.notebook_timeout, seeds=args.seeds, work=work,
                                    with_alternatives=not args.no_alternatives, resume=args.resume and bool(args.work))
            record["command"] = command.strip()
            if args.alternatives_only:
                previous = load(json_path).get("lessons", {}).get(lesson)
                if previous is None:
                    ap.error(f"--alternatives-only: {lesson} has no record to update; certify it first")
                previous["alternatives"] = record["alternatives"]
                previous["alternatives_run"] = {k: record[k] for k in ("date", "command", "seconds", "grading_cpu_s", "submissions")}
                record = previous
                summarise(record)
            misses += [f"{lesson} {m}" for m in record["misses"]]
            save(json_path, out, lesson, record)
            print(f"{lesson}: {record['seconds']:.0f} s, {len(record['misses'])} target(s) missed")
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"certified {len(chosen)} lesson(s) in {time.monotonic() - t0:.0f} s: {out}")
    for m in misses:
        print("MISSED:", m[:400])
    return 1 if misses else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())

"""``docs/fairness.md``, written from ``docs/fairness.json`` (every lesson's latest record)."""

from __future__ import annotations

from pathlib import Path

from .certify import ALTERNATIVES_TARGET, KILL_TARGET, alternatives_per_exercise

HEAD = """# Fairness certificate

Do the graded exercises' tests tell right from wrong? For every exercise, this page counts the mutants of its
reference solution that `course grade` catches, the correct alternatives it must not catch, and whether each
failure message tells the learner what is wrong. It is written by `make certify` (below); do not edit it by hand.

**Targets** (per exercise): at least {kill:.0%} of the non-equivalent mutants lose a point (a survivor reviewed as a
difference the contract allows, *acceptable* below, is listed but not held against the tests); no correct alternative
loses a point on any seed, and at least {alts} correct alternatives in other styles cover it (*alternatives (blind)*:
how many, and how many of them were written from the student notebook alone); every killed mutant's failing cells
have messages that pass the checks.

## How it is built

- **Mutants** (`course/tools/fairness/mutants.py`): each exercise's reference solution cell (the code between
  `### BEGIN/END SOLUTION`) changed in one place. Generic operators come from **mutmut** {mutmut} (its node
  operators on libcst: arithmetic, comparison and boolean operators swapped, numbers + 1, True/False, `is`/`in`
  negated, `~`/`not` removed, a call's argument removed, augmented assignment made plain, conditional
  expressions forced). mutmut was chosen over cosmic-ray 8.4.1 because its operators are one-to-one (cosmic-ray
  replaces each binary operator by all eleven others, eleven gradings for one slip) and libcst keeps the cell's
  formatting, so a mutant's diff is its changed line. **Written by hand**, because neither library has them:
  numbers - 1 (off by one downwards; mutmut only adds 1), slice bounds dropped or moved by one, an axis given
  by a name replaced by -1 or 0, a statement removed; and the attention-specific operators: softmax over
  another axis, the scale dropped or sqrt(d_model) instead of sqrt(d_k), the mask inverted, masked scores
  filled with 0 or -1e4 instead of -inf, tril/triu's diagonal moved by one, a transpose or permute removed,
  two axes of a permute swapped (patch order), biased/unbiased variance exchanged, dropout dropped or moved
  to the neighbouring assignment, layers shared instead of independent, an online softmax's running maximum
  started at 0, positions (`arange`) shifted by one, a length penalty dropped or applied in full. Left out of
  mutmut's set: string mutations and arguments replaced by `None` (they raise at once and test nothing the
  exercises are about), `x = y` -> `x = None` (the statement removal is the same slip). A mutant that does not
  compile, changes lines outside the solution region, or equals the reference (or another mutant) after
  `ast.unparse` is dropped and counted.
- **Grading**: each mutant is a submission (the student notebook filled with the reference, one cell replaced),
  graded by `course grade` in one batch per lesson; *killed* = it loses at least one point.
- **Equivalence by evidence** (`equivalence.py`): a mutant that keeps full marks is run beside the reference
  outside the grader, on every call the lesson's test cells make (hidden ones included, recorded on the
  reference), random inputs of the same shapes and dtypes, the same inputs x 1000, boolean masks at random and
  with a fully masked row; classes are built with the same arguments and seed (same `state_dict` names, shapes
  and initial values), loaded with the recorded `state_dict` and compared method by method. Equal everywhere
  (rtol 1e-4, atol 1e-5) = *equivalent*; different somewhere = *surviving*, with the input where it differs.
  The evidence is as wide as the calls the tests make: values are randomised, but an argument value or a code
  path that no test reaches (a `raise` for a broken precondition, an option never passed) is not explored, so a
  mutant that changes only such a path is reported equivalent. Each equivalent mutant is listed with its diff.
- **Alternatives**: the planted banks' correct styles (`tests/planted/<id>.py`, `must_fail: []`) and
  `tests/alternatives/<id>.py` (*blind*: written from the student notebook alone, without reading the hidden
  tests), each graded once per seed (the parameters cell's `SEED`).
- **Messages** (`messages.py`): every failing cell of a killed mutant: not empty, not a bare exception or
  traceback, not only PyTorch's (or Python's) wording, not an exception's withheld text alone, a sentence about
  the learner's code or the rule, and no line of hidden-test code. A failure that is an exception (the learner's
  code raised, or the test could not use what it returned) passes when the judge put it in context
  (`course/grading/judge/explain.py`): where it was raised (the visible test line, or "in this cell's hidden
  checks") and what the cell checks (its docstring, which the student notebook shows).
- **In `make test`** (`tests/test_fairness.py`): the engine's unit tests, a fixed sample (one mutant of one
  exercise per lesson, both chosen by a stable hash, among those this page records as killed) and every
  `tests/alternatives/` entry (packed into two submissions per lesson, seed 0): 36 submissions in one
  `course grade --jobs 1` batch; lesson 16 is left out (Triton's interpreter: minutes a submission). Measured
  on 2026-11-28 with `/usr/bin/time -v .venv/bin/python -m pytest tests/test_fairness.py`: 64 s wall, 39 s CPU
  (user + system, the graded sandboxes included), of which the sampled grading is 49 s wall. CI fails when
  the committed JSON misses a target for any exercise it certifies (an alternative that lost a point, a kill
  rate under 98 %, a killed mutant whose message fails the checks, a survivor not reviewed in `decisions.json`:
  `test_certificate_targets`), or when this page is not what the JSON gives.

## Totals
"""


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def write_page(cert: dict, out: Path) -> None:
    try:
        from importlib.metadata import version
        mutmut = version("mutmut")
    except Exception:  # noqa: BLE001 - the page says so
        mutmut = "(version unknown)"
    lines = [HEAD.format(kill=KILL_TARGET, alts=ALTERNATIVES_TARGET, mutmut=mutmut)]
    lessons = cert.get("lessons", {})
    rows = ["| lesson | date | sample | mutants graded | equivalent | killed | surviving (not accepted) | kill rate | messages pass | "
            "alternatives (lost) | time (wall, grading CPU) | targets |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    tot = dict(graded=0, equivalent=0, killed=0, surviving=0, msg=0, alts=0, lost=0, s=0.0)
    for lesson, rec in sorted(lessons.items()):
        ex = rec.get("exercises", {})
        graded = sum(len(e["mutants"]) for e in ex.values())
        eq = sum(e.get("equivalent", 0) for e in ex.values())
        k = sum(e.get("killed", 0) for e in ex.values())
        s = sum(e.get("surviving", 0) - e.get("accepted", 0) for e in ex.values())     # accepted survivors: not held against
        msg = sum(e.get("messages_pass", 0) for e in ex.values())
        alts = rec.get("alternatives", [])
        lost = sum(1 for a in alts if a["lost"])
        rows.append(f"| {lesson} | {rec.get('date', '')} | {rec.get('sample') or 'all'} | {graded} | {eq} | {k} | {s} | "
                    f"{_pct(k / (k + s)) if k + s else '-'} | {_pct(msg / k) if k else '-'} | {len(alts)} ({lost}) | "
                    f"{rec.get('seconds', 0) / 60:.1f} min, {rec.get('grading_cpu_s', 0) / 60:.1f} min | "
                    f"{_targets(rec)} |")
        for key, v in (("graded", graded), ("equivalent", eq), ("killed", k), ("surviving", s), ("msg", msg), ("alts", len(alts)),
                       ("lost", lost), ("s", rec.get("seconds", 0))):
            tot[key] += v
    k, s = tot["killed"], tot["surviving"]
    rows.append(f"| **all** | | | {tot['graded']} | {tot['equivalent']} | {k} | {s} | {_pct(k / (k + s)) if k + s else '-'} | "
                f"{_pct(tot['msg'] / k) if k else '-'} | {tot['alts']} ({tot['lost']}) | {tot['s'] / 60:.1f} min | |")
    lines += rows
    cpu = sum(rec.get("grading_cpu_s", 0) for rec in lessons.values())
    subs = sum(rec.get("submissions", 0) for rec in lessons.values())
    if subs:
        lines.append(f"\nGrading cost: {subs} submissions took {cpu / 60:.1f} min of CPU in `course grade` "
                     f"({cpu / subs:.2f} s a submission; the wall time above is that of a shared, busy 2-core machine).")
    survivors = [(lesson, cell, m) for lesson, rec in sorted(lessons.items()) for cell, e in rec.get("exercises", {}).items()
                 for m in e["mutants"] if m["verdict"] in ("surviving", "full marks", "not graded")]
    lines.append("\n## Surviving mutants and the decisions taken\n")
    if not survivors:
        lines.append("None: every non-equivalent mutant graded lost a point.")
    else:
        lines.append("A survivor keeps full marks yet differs from the reference. *hole*: the lesson's tests miss a rule "
                     "its text states (reported to the lesson, to be fixed there); *acceptable*: a difference the contract "
                     "allows; *undecided*: not reviewed yet. Diffs and the input where each differs are in the lesson's "
                     "section below.\n")
        lines.append("| lesson | exercise | mutant | change | decision | why |")
        lines.append("| --- | --- | --- | --- | --- | --- |")
        for lesson, cell, m in survivors:
            d = m.get("decision", {})
            lines.append(f"| {lesson} | `{cell}` | {m['key']} | `{_changed(m['diff'])}` | {d.get('decision', 'undecided')} | "
                         f"{d.get('why', '').replace('|', '/')} |")
    kinds: dict[str, int] = {}
    cells_checked = 0
    for rec in lessons.values():
        for e in rec.get("exercises", {}).values():
            for m in e["mutants"]:
                for f in m.get("failing", []):
                    cells_checked += 1
                    for p in f["problems"]:
                        kinds[p.split(":")[0]] = kinds.get(p.split(":")[0], 0) + 1
    if cells_checked:
        lines.append(f"\n## Message checks, all lessons\n\n{cells_checked} failing cells of killed mutants were checked; "
                     "the problems found (a cell may have several):\n")
        for p, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
            lines.append(f"- {n} x {p}")
    missing = sorted(set(_all_lessons(out)) - set(lessons))
    if missing:
        lines.append(f"\nNot certified yet: {', '.join(missing)} (run `make certify LESSONS=\"{' '.join(missing)}\"`).")
    sampled = sorted(lesson for lesson, rec in lessons.items() if rec.get("sample"))
    if sampled:
        lines.append(f"\nCertified on a sample of mutants only (the counts are of the sample): {', '.join(sampled)}.")
    estimates = cert.get("not_certified", {})
    if estimates:
        lines.append("\n### What certifying the rest would cost\n")
        lines.append("Measured by grading each lesson's reference once (`--estimate`); a submission's time is taken to "
                     "be the reference's, on the machine and load of that day (a mutant that fails early costs less; one "
                     "that loops runs to the notebook timeout, and equivalence runs add about 20 s per full-marks mutant).\n")
        lines.append("| lesson | measured | mutants | alternatives x seeds | submissions | reference graded in | "
                     "estimated full run (--jobs 1) | command |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for lesson, e in sorted(estimates.items()):
            ref = e.get("reference", {})
            lines.append(f"| {lesson} | {e.get('date', '')} | {e.get('mutants_total', 0)} | {e.get('alternatives', 0)} x "
                         f"{len(e.get('seeds', []))} | {e.get('submissions', 0)} | {ref.get('seconds', 0):.0f} s "
                         f"({ref.get('score')}/{ref.get('max')}) | {e.get('estimate_s', 0) / 3600:.1f} h | "
                         f"`{e.get('command', '')}` |")
    lines.append("\nRebuild: `make certify` (every lesson, every mutant), or `make certify LESSONS=\"00_softmax_lookup\" "
                 "SAMPLE=5` (a lesson, five mutants per exercise). Each lesson's record keeps the command and the date "
                 "it was made with; times are on the machine that ran it (2 shared cores here).")

    for lesson, rec in sorted(lessons.items()):
        lines.append(f"\n## {lesson}\n")
        lines.append(f"`{rec.get('command', '')}` on {rec.get('date', '')}: {rec.get('submissions', 0)} submissions, "
                     f"{rec.get('seconds', 0) / 60:.1f} min wall, grading CPU {rec.get('grading_cpu_s', 0) / 60:.1f} min; "
                     f"reference {rec['reference'].get('score')}/{rec['reference'].get('max')}.")
        if rec.get("resumed"):
            lines.append(f"\nResumed: {rec['resumed']}.")
        if rec.get("sample"):
            lines.append(f"\nA sample: at most {rec['sample']} mutants per exercise, chosen by a stable hash; the counts "
                         "below are of the sample.")
        if rec.get("alternatives_run"):
            a = rec["alternatives_run"]
            lines.append(f"\nAlternatives graded again by `{a['command']}` on {a['date']}: {a['submissions']} submissions, "
                         f"{a['seconds'] / 60:.1f} min wall, grading CPU {a['grading_cpu_s'] / 60:.1f} min.")
        if rec.get("error"):
            lines.append(f"\n**Error**: {rec['error'][:500]}")
        lines.append("\n| exercise | generated | dropped | graded | equivalent | killed | surviving (accepted) | kill rate | "
                     "messages pass | alternatives (blind) |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        covering = alternatives_per_exercise(rec)
        for cell, e in rec.get("exercises", {}).items():
            dropped = ", ".join(f"{n} {why}" for why, n in sorted(e["dropped"].items())) or "0"
            lines.append(f"| `{cell}` | {e['generated']} | {dropped} | {e['graded']} of {e['mutants_total']} | {e.get('equivalent', 0)} | "
                         f"{e.get('killed', 0)} | {e.get('surviving', 0)} ({e.get('accepted', 0)}) | {_pct(e.get('kill_rate', 1))} | "
                         f"{e.get('messages_pass', 0)} of {e.get('killed', 0)} | {covering[cell][0]} ({covering[cell][1]}) |")
        eqs = [(c, m) for c, e in rec.get("exercises", {}).items() for m in e["mutants"] if m["verdict"] == "equivalent"]
        if eqs:
            lines.append("\n**Equivalent mutants** (equal to the reference on every input tried):\n")
            for cell, m in eqs:
                ev = m["evidence"]
                lines.append(f"- `{cell}` {m['operator']} `{_changed(m['diff'])}`: {ev['inputs']} inputs "
                             f"({ev.get('calls_recorded', '?')} recorded calls and their variants), "
                             f"max |difference| {ev['max_difference']:.3g}")
        survivors = [(c, m) for c, e in rec.get("exercises", {}).items() for m in e["mutants"]
                     if m["verdict"] in ("surviving", "full marks", "not graded")]
        if survivors:
            lines.append("\n**Surviving mutants** (full marks, yet different from the reference):\n")
            for cell, m in survivors:
                d = m.get("decision", {})
                lines.append(f"- `{cell}` {m['operator']} ({m['key']}): differs at {m.get('evidence', {}).get('witness', '?')}  ")
                lines.append(f"  decision: **{d.get('decision', 'undecided')}**: {d.get('why', '')}\n")
                lines.append("  ```diff\n" + "\n".join("  " + ln for ln in m["diff"].splitlines()) + "\n  ```")
        bad = [(c, m, f) for c, e in rec.get("exercises", {}).items() for m in e["mutants"] if m["verdict"] == "killed"
               for f in m["failing"] if f["problems"]]
        if bad:
            kinds: dict[str, int] = {}
            for _, _, f in bad:
                for p in f["problems"]:
                    kinds[p.split(":")[0]] = kinds.get(p.split(":")[0], 0) + 1
            lines.append(f"\n**Message checks**: {len(bad)} failing cells of killed mutants have a message that fails a check "
                         "(count per problem):\n")
            for p, n in sorted(kinds.items(), key=lambda kv: -kv[1]):
                lines.append(f"- {n} x {p}")
            seen = set()
            lines.append("\nOne example per test cell:\n")
            for cell, m, f in bad:
                if f["cell"] in seen:
                    continue
                seen.add(f["cell"])
                lines.append(f"- `{f['cell']}` on `{cell}` {m['operator']} `{_changed(m['diff'])}`: "
                             f"\"{f['message'][:200]}\" ({'; '.join(f['problems'])})")
        alts = rec.get("alternatives", [])
        if alts:
            lines.append("\n**Alternatives** (seed: marks):\n")
            lines.append("| alternative | cells | blind | marks |")
            lines.append("| --- | --- | --- | --- |")
            for a in alts:
                marks = ", ".join(f"{s}: {v}" for s, v in a["marks"].items())
                lines.append(f"| {a['name']} | {', '.join(a['cells'])} | {'yes' if a['blind'] else ''} | {marks} |")
            per = {}
            for a in alts:
                for c in a["cells"]:
                    per[c] = per.get(c, 0) + 1
            few = [c for c in rec.get("exercises", {}) if per.get(c, 0) < 3]
            if few:
                lines.append(f"\nExercises with fewer than 3 alternatives: {', '.join(f'`{c}` ({per.get(c, 0)})' for c in few)}.")
            for a in alts:
                for lost in a["lost"]:
                    lines.append(f"- LOST: {a['name']} seed {lost['seed']} `{lost['cell']}`: {lost['message'][:200]}")
        if rec.get("misses"):
            lines.append("\n**Targets missed**:\n")
            lines += [f"- {m[:300]}" for m in rec["misses"]]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


def _targets(rec: dict) -> str:
    return "met" if not rec.get("misses") else f"{len(rec['misses'])} missed"


def _changed(diff: str) -> str:
    plus = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    minus = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    text = f"{minus[0] if minus else ''} -> {plus[0] if plus else '(removed)'}"
    return text.replace("`", "'")[:140]


def _all_lessons(out: Path) -> list[str]:
    from .certify import lessons
    try:
        return lessons()
    except OSError:
        return []

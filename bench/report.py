"""One report from a GPU checklist run (``bench/gpu.sh``): ``OUT/report.md`` and ``OUT/report.json``.

    python bench/report.py OUT [--device cuda] [--profile full] [--quick 0] [--seconds S]

Reads what the checklist's steps left in OUT: ``steps.jsonl`` (one line per step: status, exit
code, seconds, log), ``doctor.json`` (``course doctor``), ``lessons/report.json`` (``course run``) and
one JSON per benchmark (``attention_scaling.json``, ``gpt.json``, ``bert.json``, ``vit.json``).

A benchmark's JSON may be any object. Two optional keys are shown first, so a benchmark can say
what matters: ``"summary"`` ({name: value}: the numbers for the README) and ``"goals"`` (a list of
{"name", "value", "target", "met"}). Everything else appears flattened (``a.b.c = value``), lists of
records as tables. The issue's goals are checked here too: the whole course within 15 minutes,
SDPA >= 10x naive attention at T = 8192 in bf16 (``attention_scaling.json``:
results.bfloat16.at_8192.speedup_sdpa_vs_naive) and the lesson GPT at >= 1.0x the tokens/s of
GPT2LMHeadModel (``gpt.json``: ratio); a goal is judged only on a GPU run, never on --allow-cpu/--quick.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from course.tools.runner import cell_times, format_cell_times  # noqa: E402  (the checkout's own course package)

BENCHES = ("attention_scaling", "gpt", "bert", "vit")
COURSE_GOAL_SECONDS = 15 * 60          # the whole course, full profile, one H100/H200 (issue 12)


def _load(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _get(obj, *keys):
    """obj[k1][k2]... or None when any level is missing."""
    for k in keys:
        if not isinstance(obj, dict) or k not in obj:
            return None
        obj = obj[k]
    return obj


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _flatten(obj, limit: int = 60) -> tuple[list[tuple[str, object]], dict[str, list[dict]]]:
    """Scalar leaves of a JSON object as (dotted.key, value), plus its lists of records (lists of dicts
    of scalars, e.g. one row per sequence length) by dotted key, to be shown as tables."""
    leaves: list[tuple[str, object]] = []
    records: dict[str, list[dict]] = {}

    def walk(o, key):
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, f"{key}.{k}" if key else str(k))
        elif isinstance(o, list):
            if o and all(isinstance(x, dict) and all(not isinstance(v, (dict, list)) for v in x.values()) for x in o):
                records[key] = o
            elif all(not isinstance(x, (dict, list)) for x in o):
                if len(leaves) < limit:
                    leaves.append((key, "[" + ", ".join(_fmt(x) for x in o[:8]) + (", ..." if len(o) > 8 else "") + "]"))
            else:
                for i, v in enumerate(o[:8]):
                    walk(v, f"{key}[{i}]")
        elif len(leaves) < limit:
            leaves.append((key, o))

    walk(obj, "")
    return leaves, records


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c).replace("|", "\\|").replace("\n", " ") for c in row) + " |" for row in rows]
    return lines


def build(out: Path, *, device: str, profile: str, quick: bool, seconds: float | None) -> dict:
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()] \
        if (out / "steps.jsonl").is_file() else []
    doctor = _load(out / "doctor.json")
    lessons = _load(out / "lessons" / "report.json")
    benches = {name: _load(out / f"{name}.json") for name in BENCHES}
    # A lesson whose step was ended from outside (the step's limit, the budget, a signal) wrote no report of
    # its own: its row comes from the step, and where it was from its executed notebook, saved cell by cell.
    reported = {l.get("id") for l in (lessons or {}).get("lessons", [])}
    cut = []
    for s in steps:
        lesson = s["name"].split(":", 1)[1] if s["name"].startswith("lesson:") else None
        if lesson and lesson not in reported and s["status"] in ("timeout", "stopped"):
            cut.append({"id": lesson, "status": f"{s['status']} (step ended from outside)", "seconds": s["seconds"],
                        "profile": profile, "device": device, "targets": [], "metrics": {},
                        "cells": cell_times(out / "lessons" / lesson / f"{lesson}.ipynb")})
    if cut:
        lessons = {**(lessons or {}), "lessons": (lessons or {}).get("lessons", []) + cut}
    hw = (doctor or {}).get("hardware", {})
    gpu = hw.get("gpus", [{}])[0].get("name") if hw.get("gpus") else None

    goals = []
    if lessons:
        ran = lessons.get("lessons", [])
        total = sum(l.get("seconds", 0) for l in ran)
        real = device == "cuda" and profile == "full" and not quick
        course = sorted(p.name for p in (Path(__file__).resolve().parents[1] / "solutions").glob("*") if p.is_dir())
        passed = {l.get("id") for l in ran if l.get("status") == "passed"}
        whole = bool(course) and set(course) <= passed
        note = ("" if real else f"not a GPU full run ({device}, {profile}{', quick' if quick else ''})")
        if real and not whole:
            note = f"not the whole course: {len(passed & set(course))} of {len(course)} lessons ran and passed"
        goals.append({"name": "whole course, full profile", "value": round(total, 1), "unit": "s",
                      "target": f"<= {COURSE_GOAL_SECONDS}",
                      "met": (total <= COURSE_GOAL_SECONDS) if real and whole else None, "note": note})
    real_gpu = device == "cuda" and not quick
    speedup = _get(benches["attention_scaling"], "results", "bfloat16", "at_8192", "speedup_sdpa_vs_naive")
    if benches["attention_scaling"] is not None:
        goals.append({"name": "SDPA vs naive attention at T = 8192, bf16", "value": speedup, "unit": "x",
                      "target": ">= 10", "met": (speedup >= 10) if real_gpu and speedup is not None else None,
                      "note": "T = 8192 not reached" if speedup is None else "not a GPU run"})
    ratio = _get(benches["gpt"], "ratio")
    if benches["gpt"] is not None:
        goals.append({"name": "lesson GPT tokens/s / GPT2LMHeadModel's", "value": ratio, "unit": "x",
                      "target": ">= 1.0", "met": (ratio >= 1.0) if real_gpu and ratio is not None else None,
                      "note": "not a GPU run"})
    for name, data in benches.items():
        if isinstance(data, dict):
            for g in data.get("goals", []) or []:
                if isinstance(g, dict):
                    judged = {} if real_gpu else {"met": None, "note": "not a GPU run"}
                    goals.append({**g, "name": f"{name}: {g.get('name', '?')}", **judged})

    report = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "device": device, "gpu": gpu, "profile": profile, "quick": quick,
        "seconds": None if seconds is None else round(seconds, 1),
        "all_passed": bool(steps) and all(s["status"] in ("passed", "problems") for s in steps),
        "steps": steps, "goals": goals, "doctor": doctor, "lessons": lessons, "benchmarks": benches,
    }

    md = ["# GPU checklist report", ""]
    where = gpu or ("CPU (--allow-cpu: a test of the script, not GPU numbers)" if device == "cpu" else device)
    md.append(f"{report['created']} · {where} · torch {hw.get('torch', '?')} · lessons' profile `{profile}`"
              + (" · quick" if quick else "") + (f" · {report['seconds']} s in all" if seconds is not None else ""))
    md += ["", "## Steps", ""]
    md += _table(["step", "status", "exit", "time (s)", "log"],
                 [[s["name"], s["status"], s["rc"], s["seconds"], Path(s["log"]).name if s["log"] else "-"] for s in steps])
    if goals:
        md += ["", "## Goals", ""]
        md += _table(["goal", "value", "target", "met"],
                     [[g.get("name"), f"{_fmt(g.get('value'))} {g.get('unit', '')}".strip(), g.get("target"),
                       {True: "met", False: "MISSED", None: g.get("note") or "n/a"}[g.get("met")]] for g in goals])

    md += ["", "## Machine (`course doctor`)", ""]
    if hw:
        m = hw.get("matmul", {})
        if hw.get("device") == "cuda":
            for g in hw["gpus"]:
                md.append(f"- GPU cuda:{g['index']}: {g['name']}, {g['memory_gib']} GiB, compute capability "
                          f"{g['capability']}, {g['multiprocessors']} SMs")
            peak = (f" of {m['peak_tflops']:.0f} datasheet peak ({m['peak_name']}, dense): "
                    f"{100 * m['fraction_of_peak']:.0f} %" if m.get("peak_tflops") else " (peak unknown for this card)")
            md.append(f"- {m.get('dtype')} matmul {m.get('n')}x{m.get('n')}: {m.get('tflops', 0):.0f} TFLOP/s measured{peak}")
        else:
            a = hw.get("matmul_all_threads", {})
            md.append(f"- no GPU: {hw.get('no_gpu_reason', '')}")
            md.append(f"- CPU fp32 matmul {m.get('n')}x{m.get('n')}: {m.get('gflops', 0):.1f} GFLOP/s with 1 thread, "
                      f"{a.get('gflops', 0):.1f} with {a.get('threads')} ({hw.get('cpu_cores')} cores, {hw.get('cpu_capability')})")
        s = hw.get("sdpa", {})
        if s:
            md += ["", f"SDPA backends ({s.get('case')}; PyTorch picks {s.get('default') or '?'}):", ""]
            md += _table(["backend", "enabled", "runs", "ms", "why not"],
                         [[r["backend"], r["enabled"], r["runs"], r["ms"], r["why_not"]] for r in s.get("backends", [])])
        if doctor.get("problems"):
            md += ["", "Doctor's problems (not GPU failures): " + "; ".join(doctor["problems"])]
    else:
        md.append("No doctor.json: the doctor step did not run or failed (see its log).")

    md += ["", f"## Lessons (`course run --profile {profile}`)", ""]
    if lessons:
        rows = []
        for l in lessons.get("lessons", []):
            targets = [t for t in l.get("targets", [])]
            shown = "; ".join(f"{t['metric']} {_fmt(t['value'])} ({t['target']}"
                              f"{'' if t['met'] is None else ', met' if t['met'] else ', MISSED'})" for t in targets[:6])
            if not targets:
                shown = "; ".join(f"{k} {_fmt(v)}" for k, v in list(l.get("metrics", {}).items())[:6])
            rows.append([l["id"], l["status"], l["seconds"], f"{l['profile']}/{l['device']}", shown or "-"])
        md += _table(["lesson", "status", "time (s)", "run", "targets (first 6)"], rows)
        total = sum(l.get("seconds", 0) for l in lessons.get("lessons", []))
        md += ["", f"All lessons: {total:.0f} s ({total / 60:.1f} min; goal on one H100/H200: "
               f"<= {COURSE_GOAL_SECONDS // 60} min). Every metric: lessons/report.md."]
        errors = [f"- {l['id']}: {l['error'].splitlines()[0][:300]}" for l in lessons.get("lessons", []) if l.get("error")]
        if errors:
            md += ["", "Errors:", ""] + errors
        md += ["", "Where the time went (papermill's record in each executed notebook; the notebooks are in lessons/):", ""]
        md += [f"- {l['id']}: {format_cell_times(l.get('cells') or {})}" for l in lessons.get("lessons", [])]
    else:
        md.append("No lessons/report.json: the lessons step did not run or failed before writing it (see its log).")

    md += ["", "## Benchmarks", ""]
    by_step = {s["name"]: s for s in steps}
    for name, data in benches.items():
        step = by_step.get(name)
        state = step["status"] if step else "not run"
        took = f", {step['seconds']} s" if step else ""
        md += [f"### {name} ({state}{took})", ""]
        if not isinstance(data, dict):
            md += ["No JSON written." + (" The script does not exist yet." if state == "missing" else ""), ""]
            continue
        if isinstance(data.get("summary"), dict):
            md += _table(["summary", "value"], [[k, v] for k, v in data["summary"].items()]) + [""]
        rest = {k: v for k, v in data.items() if k not in ("summary", "goals")}
        leaves, records = _flatten(rest)
        if leaves:
            md += _table(["key", "value"], [[k, v] for k, v in leaves]) + [""]
        for key, rows in records.items():
            columns = list(dict.fromkeys(c for row in rows for c in row))
            md += [f"`{key}`:", ""] + _table(columns, [[row.get(c) for c in columns] for row in rows[:80]])
            md += ([f"... {len(rows) - 80} more rows in {name}.json"] if len(rows) > 80 else []) + [""]

    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / "report.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the checklist's output folder")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile", default="full")
    ap.add_argument("--quick", default="0")
    ap.add_argument("--seconds", type=float, default=None, help="wall time of the whole checklist")
    args = ap.parse_args(argv)
    out = args.out.resolve()
    build(out, device=args.device, profile=args.profile, quick=args.quick in ("1", "true", "yes"), seconds=args.seconds)
    print((out / "report.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

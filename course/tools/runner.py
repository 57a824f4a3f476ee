"""``course run``: execute solution notebooks with papermill and report what they achieved.

Each lesson runs in its own kernel with a cell timeout, its metrics are collected through the
``COURSE_METRICS`` file (see :mod:`course.metrics`), and one failing lesson never stops the others.
The report is ``report.json`` (machine-readable), ``report.md`` and a table on the terminal.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course.commands.lessons import Lesson

__all__ = ["LessonResult", "SeedSummary", "summarize_seeds", "run_lessons", "run_lessons_seeds", "format_table",
           "format_seed_table", "cell_times", "format_cell_times", "KERNEL_ARGUMENTS"]

# Shared with `course check`, which learners' copies (course dist) ship without this module.
from course.commands.checker import KERNEL_ARGUMENTS  # noqa: E402


@dataclass
class LessonResult:
    id: str
    title: str
    status: str = "pending"          # passed | failed | timeout | missed-target
    seconds: float = 0.0
    profile: str = ""
    device: str = ""
    metrics: dict = field(default_factory=dict)
    targets: list = field(default_factory=list)   # {metric, target, value, met}
    error: str = ""
    notebook: str = ""
    cells: dict = field(default_factory=dict)     # where the time went: cell_times(notebook)


def _read_metrics(path: Path) -> dict:
    metrics = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                item = json.loads(line)
                metrics[item["name"]] = item["value"]
            except (ValueError, KeyError):
                continue
    return metrics


def _error_text(exc: BaseException) -> str:
    """A one-paragraph account of why a notebook failed (papermill's error, or the exception)."""
    ename = getattr(exc, "ename", type(exc).__name__)
    evalue = getattr(exc, "evalue", str(exc))
    cell = getattr(exc, "exec_count", None)
    where = f" in cell [{cell}]" if cell else ""
    return f"{ename}{where}: {str(evalue).strip()[:500]}"


def _seconds_between(start: str | None, end: str | None) -> float | None:
    from datetime import datetime

    try:
        return round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 1)
    except (TypeError, ValueError):
        return None


def cell_times(notebook: Path, *, top: int = 5) -> dict:
    """Where a lesson's time went, read from papermill's record in its executed notebook, also one left
    behind by a run stopped from outside (papermill saves the notebook as each cell starts and ends).

    Returns ``{}`` when there is no readable notebook, else ``{"code_cells", "finished", "seconds",
    "slowest": [...], "running": {...} | None}``: ``slowest`` are the ``top`` finished cells by duration and
    ``running`` the cell that had started and not ended (the one a stopped or timed-out run was in, with
    ``started_at_s``, when it started, counted from the notebook's start); ``failed`` is the cell that raised
    or ran past its time limit, if one did. Each cell is given as ``cell`` (its
    number among all cells, from 1), ``section`` (the last markdown heading above it) and ``line`` (its first
    line of code)."""
    try:
        nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
        cells = nb["cells"]
        nb_start = nb.get("metadata", {}).get("papermill", {}).get("start_time")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    section, done, running, failed, n_code = "", [], None, None, 0
    for i, cell in enumerate(cells, 1):
        source = "".join(cell.get("source", "")) if isinstance(cell.get("source"), list) else str(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            heads = [line.lstrip("#").strip() for line in source.splitlines() if line.startswith("#")]
            section = heads[-1] if heads else section
            continue
        if cell.get("cell_type") != "code":
            continue
        n_code += 1
        pm = (cell.get("metadata") or {}).get("papermill") or {}
        code = [line.strip() for line in source.splitlines() if line.strip() and not line.strip().startswith("#")]
        where = {"cell": i, "section": section[:80], "line": (code[0] if code else "")[:100]}
        if pm.get("status") == "running" or (pm.get("start_time") and not pm.get("end_time")):
            running = {**where, "started_at_s": _seconds_between(nb_start, pm.get("start_time"))}
        elif isinstance(pm.get("duration"), (int, float)):
            done.append({**where, "seconds": round(float(pm["duration"]), 1)})
            if pm.get("status") == "failed" or pm.get("exception"):
                failed = done[-1]
    return {"code_cells": n_code, "finished": len(done), "seconds": round(sum(c["seconds"] for c in done), 1),
            "slowest": sorted(done, key=lambda c: -c["seconds"])[:top], "running": running, "failed": failed}


def format_cell_times(times: dict) -> str:
    """One line: the cell a run stopped in (if any) and the slowest finished cells."""
    if not times:
        return "no executed notebook to read"
    parts = []
    run = times.get("running")
    if run:
        started = f", started {run['started_at_s']:.0f} s in" if run.get("started_at_s") is not None else ""
        parts.append(f"stopped in cell {run['cell']} ({run['section'] or 'no heading'}: `{run['line']}`{started})")
    bad = times.get("failed")
    if bad:
        parts.append(f"failed in cell {bad['cell']} ({bad['section'] or 'no heading'}: `{bad['line']}`) after {bad['seconds']:.0f} s")
    parts.append(f"{times['finished']} of {times['code_cells']} code cells finished in {times['seconds']:.0f} s")
    slow = "; ".join(f"cell {c['cell']} {c['seconds']:.0f} s ({c['section'] or 'no heading'})" for c in times["slowest"][:3])
    return ", ".join(parts) + (f"; slowest: {slow}" if slow else "")


def run_lesson(lesson: Lesson, out: Path, *, profile: str, device: str, seed: int, timeout: int | None,
               progress: bool) -> LessonResult:
    import papermill as pm

    from course.config import resolve_device, resolve_profile

    out = Path(out).expanduser().resolve()
    dev = resolve_device(device)
    res = LessonResult(id=lesson.id, title=lesson.title, profile=resolve_profile(profile, dev), device=dev)
    out.mkdir(parents=True, exist_ok=True)
    executed = out / f"{lesson.id}.ipynb"
    metrics_file = out / f"{lesson.id}.metrics.jsonl"
    metrics_file.unlink(missing_ok=True)
    res.notebook = str(executed)
    old = os.environ.get("COURSE_METRICS")
    os.environ["COURSE_METRICS"] = str(metrics_file)
    os.environ["COURSE_HEADLESS"] = "1"      # widgets draw once, statically (see course.widgets)
    start = time.perf_counter()
    try:
        pm.execute_notebook(
            str(lesson.solution), str(executed),
            parameters={"PROFILE": profile, "DEVICE": device, "SEED": seed},
            kernel_name="python3", cwd=str(lesson.solution.parent),
            execution_timeout=timeout or lesson.cell_timeout, progress_bar=progress, log_output=False,
            extra_arguments=KERNEL_ARGUMENTS,
        )
        res.status = "passed"
    except Exception as exc:  # noqa: BLE001 - any failure is reported, the next lesson still runs
        timed_out = "Timeout" in type(exc).__name__ or "timed out" in str(exc).lower()
        res.status = "timeout" if timed_out else "failed"
        res.error = _error_text(exc)
        if not hasattr(exc, "ename") and not timed_out:
            res.error += "\n" + "".join(traceback.format_exception_only(type(exc), exc)).strip()
    finally:
        res.seconds = round(time.perf_counter() - start, 1)
        if old is None:
            os.environ.pop("COURSE_METRICS", None)
        else:
            os.environ["COURSE_METRICS"] = old
    res.metrics = _read_metrics(metrics_file)
    res.cells = cell_times(executed)
    check_targets = res.profile != "smoke"
    for t in lesson.targets:
        value = res.metrics.get(t.metric)
        met = t.met_by(value) if check_targets else None
        res.targets.append({"metric": t.metric, "target": str(t), "value": value, "met": met})
    if res.status == "passed" and any(t["met"] is False for t in res.targets):
        res.status = "missed-target"
    return res


def _fmt(v) -> str:
    return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def format_table(results: list[LessonResult], *, markdown: bool = False) -> str:
    """The report as a table: one row per lesson, then one row per target."""
    rows = [("lesson", "status", "time (s)", "run", "metric", "value", "target")]
    for r in results:
        first = (r.id, r.status, f"{r.seconds:.1f}", f"{r.profile}/{r.device}")
        shown = {t["metric"] for t in r.targets}
        lines = []
        for t in r.targets:
            mark = {True: "met", False: "MISSED", None: "n/a (smoke)" if r.profile == "smoke" else "-"}[t["met"]]
            lines.append((t["metric"], _fmt(t["value"]), f"{t['target']} {mark}"))
        for name, value in r.metrics.items():
            if name not in shown:
                lines.append((name, _fmt(value), ""))
        if not lines:
            lines = [("-", "-", "")]
        for i, line in enumerate(lines):
            rows.append((first if i == 0 else ("", "", "", "")) + line)
    errors = [f"{r.id}: {r.error.strip()}" for r in results if r.error]
    if markdown:
        out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows[1:]]
        if errors:
            out += ["", "Errors:", ""] + [f"- {e.splitlines()[0][:500]}" for e in errors]
        return "\n".join(out)
    # Fits a normal terminal: long values are cut in the table, errors are printed in full below it.
    caps = (23, 13, 8, 13, 23, 9, 19)      # at most 120 characters a line
    rows = [tuple(c if len(c) <= cap else c[:cap - 1] + "~" for c, cap in zip(row, caps)) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if errors:
        lines += ["", "errors:"] + [f"  {e}" for e in errors]
    return "\n".join(lines)



def _environment(t0: float) -> dict:
    """What a report says of when and where it ran (the same for one seed and several)."""
    import torch

    return {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "total_seconds": round(time.perf_counter() - t0, 1),
            "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores"}

def run_lessons(lessons: list[Lesson], out: Path, *, profile: str = "auto", device: str = "auto", seed: int = 0,
                timeout: int | None = None) -> list[LessonResult]:
    """Run each lesson, write the report into ``out``, print the table; returns the results."""

    # The kernel runs in the notebook's own folder: every path handed to it must be absolute.
    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    progress = sys.stderr.isatty()
    results = []
    t0 = time.perf_counter()
    for i, lesson in enumerate(lessons, 1):
        print(f"[{i}/{len(lessons)}] {lesson.id}: running (profile={profile}, device={device}) ...", flush=True)
        res = run_lesson(lesson, out, profile=profile, device=device, seed=seed, timeout=timeout, progress=progress)
        print(f"[{i}/{len(lessons)}] {lesson.id}: {res.status} in {res.seconds:.1f} s"
              + (f" -- {res.error.splitlines()[0]}" if res.error else ""), flush=True)
        if res.status in ("timeout", "failed") and (res.cells.get("running") or res.cells.get("failed")):
            print(f"    {format_cell_times(res.cells)}", flush=True)
        results.append(res)
    report = {**_environment(t0), "all_passed": all(r.status == "passed" for r in results),
              "lessons": [asdict(r) for r in results]}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md = ["# Course run report", "", f"{report['created']} · torch {report['torch']} · "
          f"{report['cuda'] or 'CPU'} · {report['machine']} · total {report['total_seconds']} s", "",
          format_table(results, markdown=True), "", "## Where the time went", "",
          "Per lesson, from papermill's record in the executed notebook: the slowest cells and, for a run that "
          "stopped, the cell it stopped in.", ""]
    md += [f"- {r.id}: {format_cell_times(r.cells)}" for r in results] + [""]
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")
    print()
    print(format_table(results))
    passed = sum(r.status == "passed" for r in results)
    print(f"\n{passed}/{len(results)} lessons passed in {report['total_seconds']} s. "
          f"Executed notebooks and report: {out.resolve()}/ (report.md, report.json)")
    return results


# ---------------------------------------------------------------------------------------------------
# Several seeds: `course run LESSONS --seeds 0 1 2`
# ---------------------------------------------------------------------------------------------------

@dataclass
class SeedSummary:
    """One lesson run once per seed: per metric the mean and sample standard deviation over the seeds
    that reported it, and per target whether it held on every seed."""

    id: str
    title: str
    seeds: list
    status: str = "pending"          # passed | failed | timeout | missed-target (the worst over the seeds)
    profile: str = ""
    device: str = ""
    seconds: float = 0.0             # all seeds together
    metrics: dict = field(default_factory=dict)   # name -> {mean, sd, n, values: {seed: value}}
    targets: list = field(default_factory=list)   # {metric, target, values: {seed: value}, mean, sd, met, failed_seeds}
    runs: list = field(default_factory=list)      # one LessonResult (as a dict) per seed


def _mean_sd(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


_SEVERITY = {"passed": 0, "missed-target": 1, "timeout": 2, "failed": 3}


def summarize_seeds(lesson: Lesson, runs: list[tuple[int, LessonResult]]) -> SeedSummary:
    """Combine one lesson's runs (one per seed). A target holds only if it held on every seed: a seed
    that did not report the metric, or whose notebook failed, counts as a miss. Targets are judged
    (``met`` True/False) unless every run used the smoke profile, which promises no results."""
    first = runs[0][1] if runs else LessonResult(id=lesson.id, title=lesson.title)
    summary = SeedSummary(id=lesson.id, title=lesson.title, seeds=[s for s, _ in runs], profile=first.profile,
                          device=first.device, seconds=round(sum(r.seconds for _, r in runs), 1),
                          runs=[{"seed": s, **asdict(r)} for s, r in runs])
    names = []
    for _, r in runs:
        names += [n for n in r.metrics if n not in names]
    for name in names:
        values = {s: _number(r.metrics.get(name)) for s, r in runs}
        numbers = [v for v in values.values() if v is not None]
        mean, sd = _mean_sd(numbers)
        summary.metrics[name] = {"mean": mean, "sd": sd, "n": len(numbers), "values": values}
    judged = any(r.profile != "smoke" for _, r in runs)
    for t in lesson.targets:
        values = {s: _number(r.metrics.get(t.metric)) for s, r in runs}
        numbers = [v for v in values.values() if v is not None]
        mean, sd = _mean_sd(numbers)
        failed = [s for s, v in values.items() if not t.met_by(v)]
        summary.targets.append({"metric": t.metric, "target": str(t), "values": values, "mean": mean, "sd": sd,
                                "met": (not failed) if judged else None, "failed_seeds": failed if judged else []})
    worst = max((r.status for _, r in runs), key=lambda st: _SEVERITY.get(st, 3), default="failed")
    summary.status = worst
    if summary.status == "passed" and any(t["met"] is False for t in summary.targets):
        summary.status = "missed-target"
    return summary


def _fmt_mean_sd(item: dict) -> str:
    if item.get("mean") is None:
        return "-"
    return f"{_fmt(item['mean'])} ± {_fmt(item['sd'])}"


def format_seed_table(summaries: list[SeedSummary], *, markdown: bool = False) -> str:
    """One row per lesson, then one row per metric: mean ± sd over the seeds, the value of each seed,
    and for a target whether it held on every seed (and on which seeds it did not)."""
    rows = [("lesson", "status", "seeds", "metric", "mean ± sd", "per seed", "target")]
    for r in summaries:
        first = (r.id, r.status, " ".join(str(s) for s in r.seeds))
        lines, shown = [], set()
        for t in r.targets:
            shown.add(t["metric"])
            if t["met"] is None:
                mark = "n/a (smoke)"
            elif t["met"]:
                mark = "held on every seed"
            else:
                mark = "MISSED on seed " + ", ".join(str(s) for s in t["failed_seeds"])
            lines.append((t["metric"], _fmt_mean_sd(t), " / ".join(_fmt(v) for v in t["values"].values()),
                          f"{t['target']} {mark}"))
        for name, m in r.metrics.items():
            if name not in shown:
                lines.append((name, _fmt_mean_sd(m), " / ".join(_fmt(v) for v in m["values"].values()), ""))
        for i, line in enumerate(lines or [("-", "-", "-", "")]):
            rows.append((first if i == 0 else ("", "", "")) + line)
    errors = [f"{r.id} (seed {run['seed']}): {run['error'].strip()}" for r in summaries for run in r.runs if run["error"]]
    if markdown:
        out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
        out += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows[1:]]
        if errors:
            out += ["", "Errors:", ""] + [f"- {e.splitlines()[0][:500]}" for e in errors]
        return "\n".join(out)
    caps = (18, 13, 8, 24, 19, 26, 36)
    rows = [tuple(c if len(c) <= cap else c[:cap - 1] + "~" for c, cap in zip(row, caps)) for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    if errors:
        lines += ["", "errors:"] + [f"  {e}" for e in errors]
    return "\n".join(lines)


def run_lessons_seeds(lessons: list[Lesson], out: Path, *, seeds: list[int], profile: str = "auto",
                      device: str = "auto", timeout: int | None = None) -> list[SeedSummary]:
    """Run each lesson once per seed (papermill's ``SEED``), the executed notebooks in ``out/seed-N/``;
    write ``report.json`` and ``report.md`` with, per metric, the mean ± sd over the seeds and, per
    target, whether it held on every seed. Returns one :class:`SeedSummary` per lesson."""

    out = Path(out).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    progress = sys.stderr.isatty()
    summaries = []
    t0 = time.perf_counter()
    n = len(lessons) * len(seeds)
    k = 0
    for lesson in lessons:
        runs = []
        for seed in seeds:
            k += 1
            print(f"[{k}/{n}] {lesson.id} seed {seed}: running (profile={profile}, device={device}) ...", flush=True)
            res = run_lesson(lesson, out / f"seed-{seed}", profile=profile, device=device, seed=seed, timeout=timeout,
                             progress=progress)
            print(f"[{k}/{n}] {lesson.id} seed {seed}: {res.status} in {res.seconds:.1f} s"
                  + (f" -- {res.error.splitlines()[0]}" if res.error else ""), flush=True)
            runs.append((seed, res))
        summaries.append(summarize_seeds(lesson, runs))
    report = {**_environment(t0), "seeds": list(seeds), "all_passed": all(s.status == "passed" for s in summaries),
              "lessons": [asdict(s) for s in summaries]}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    md = ["# Course run report, several seeds", "",
          f"{report['created']} · seeds {' '.join(map(str, seeds))} · torch {report['torch']} · {report['cuda'] or 'CPU'} · "
          f"{report['machine']} · total {report['total_seconds']} s", "",
          "Per metric: mean ± sample standard deviation over the seeds, then each seed's value in seed order. "
          "A target holds only if it held on every seed.", "",
          format_seed_table(summaries, markdown=True), ""]
    (out / "report.md").write_text("\n".join(md), encoding="utf-8")
    print()
    print(format_seed_table(summaries))
    passed = sum(s.status == "passed" for s in summaries)
    print(f"\n{passed}/{len(summaries)} lessons passed on every seed ({' '.join(map(str, seeds))}) in "
          f"{report['total_seconds']} s. Executed notebooks and report: {out}/ (seed-N/, report.md, report.json)")
    return summaries

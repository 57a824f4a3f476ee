"""The class report: ``course report OUT`` (and the end of every ``course grade`` batch) writes, into
``OUT/report/``, one page for the class and one per lesson (scores, what each test checks and how many it caught,
the class's most common failures, the most likely mistake of each failing submission, refused and suspicious
submissions, difficulty and discrimination, similar submissions), and into ``OUT/exports/`` the grades as Canvas
and Moodle import them. Offline pages, no script; every string from a submission escaped.

Modules: ``data`` (reading and statistics), ``misconceptions`` (the certificate's catalogue of classic mistakes),
``similarity`` (copydetect), ``pages`` (HTML and plots), ``lms`` (the exports).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from course.grading.report import data, lms, misconceptions, pages, similarity
from course.grading.results import atomic_write, shown

__all__ = ["ReportError", "write_report", "options_of", "remember_options"]

OPTIONS = ".course-report-options.json"      # in OUT/report/: what `course report` was last given for this folder


class ReportError(Exception):
    """Input the report cannot be made from (said to the instructor; nothing is written)."""


def options_of(out: Path, *, mapping: Path | None = None, canvas_assignments: str | Path | None = None,
               site: str | None = None) -> dict:
    """The report's options for ``out``: those given, else those ``course report`` was last given for it (so the end
    of the next ``course grade`` batch keeps the mapped exports); :class:`ReportError` for a file that cannot be
    used."""
    saved = {}
    try:
        saved = json.loads((Path(out) / "report" / OPTIONS).read_text(encoding="utf-8"))
        saved = saved if isinstance(saved, dict) else {}
    except (OSError, ValueError):
        pass
    if mapping is None and isinstance(saved.get("mapping"), str):
        mapping = Path(saved["mapping"])
    if mapping is not None:
        if not Path(mapping).is_file():
            raise ReportError(f"--mapping {mapping}: no such file (a CSV with a course_id column)")
    assignments = saved.get("canvas_assignments") if canvas_assignments is None else None
    if canvas_assignments is not None:
        try:
            assignments = json.loads(Path(canvas_assignments).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ReportError(f"--canvas-assignments {canvas_assignments}: cannot be read as JSON ({exc})") from None
    if assignments is not None:
        if not isinstance(assignments, dict):
            raise ReportError(f"--canvas-assignments {canvas_assignments}: not an object "
                              '{"lesson id": "Canvas assignment id", ...}')
        bad = [f"{shown(str(k))[:40]}: {shown(repr(v))[:40]}" for k, v in assignments.items()
               if isinstance(v, bool) or not re.fullmatch(r"\d{1,18}", str(v).strip() if isinstance(v, (str, int)) else "")]
        if bad:
            raise ReportError(f"--canvas-assignments {canvas_assignments}: a Canvas assignment id is a number (the "
                              f"digits at the end of the assignment's address): {'; '.join(bad[:5])}")
        assignments = {str(k): str(v).strip() for k, v in assignments.items()}
    site = site if site is not None else (saved.get("site") if isinstance(saved.get("site"), str) else None)
    return {"mapping": Path(mapping) if mapping is not None else None, "canvas_assignments": assignments, "site": site}


def remember_options(out: Path, options: dict) -> None:
    """Keep the options of a ``course report`` run for the folder's next batch (:func:`options_of`)."""
    kept = {"mapping": str(Path(options["mapping"]).resolve()) if options.get("mapping") else None,
            "canvas_assignments": options.get("canvas_assignments"), "site": options.get("site")}
    atomic_write(Path(out) / "report" / OPTIONS, json.dumps(kept, indent=1))


def _results_problem(out: Path) -> str | None:
    try:
        results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return (f"no results.json in {out}: give the --out folder of a `course grade` run (or run `course grade "
                f"SUBMISSIONS --out {out}` first)")
    except (OSError, ValueError) as exc:
        return f"{out / 'results.json'} could not be read ({exc}): grade the folder again with `course grade ... --regrade`"
    if not isinstance(results, list):
        return f"{out / 'results.json'} is not a list of results: grade the folder again with `course grade ... --regrade`"
    return None


def write_report(out: Path, root: Path, *, site: str | None = None, mapping: Path | None = None,
                 canvas_assignments: dict[str, str] | None = None, similar: bool = True) -> tuple[Path, list[str]]:
    """Write the report of the grading folder ``out`` (lessons from the checkout ``root``): ``(its index page, what it
    says could not be read or done)``. Every page and export is made before any is written, each written whole
    (a reader never sees half a page, nor pages of two batches), readable by the instructor only;
    :class:`ReportError` (nothing written) when the results or the mapping cannot be used."""
    out = Path(out)
    problem = _results_problem(out)
    if problem:
        raise ReportError(problem)
    report = data.load(out, root)
    catalogue = misconceptions.Catalogue.load(root / "docs" / "fairness.json")
    if not catalogue.mistakes:
        report.missing.append("no fairness certificate (docs/fairness.json): mistakes are not named")
    lesson_ids = sorted(report.lessons)
    try:
        mapped, problems = lms.read_mapping(mapping)
    except lms.MappingError as exc:
        raise ReportError(str(exc)) from None
    report.missing += problems
    unknown = sorted(set(canvas_assignments or {}) - set(lesson_ids))
    if unknown:
        report.missing.append(f"--canvas-assignments names lessons with no result here: {', '.join(unknown[:8])} "
                              "(a lesson id is the folder name, e.g. 05_self_attention)")
    left = lms.exported(report.results)[1]
    if left:
        report.missing.append(f"left out of the LMS exports: {'; '.join(left[:8])}{' …' if len(left) > 8 else ''}")
    titles = {lid: report.lessons[lid].title for lid in lesson_ids}
    files = {out / "exports" / "canvas.csv": lms.canvas_csv(report.results, mapped, lesson_ids, titles,
                                                            canvas_assignments, report.roster),
             out / "exports" / "moodle.csv": lms.moodle_csv(report.results, mapped, lesson_ids, report.roster)}
    found = {lid: _lesson_findings(out, report, lid, catalogue, similar) for lid in lesson_ids}
    folder = out / "report"
    for lid in lesson_ids:
        named, pairs = found[lid]
        files[folder / f"{lid}.html"] = pages.lesson_page(report, lid, named=named, pairs=pairs, site=site)
    index = folder / "index.html"
    files[index] = pages.class_page(report, lesson_ids)
    for path in (folder, out / "exports"):
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)        # every learner's scores, code and failures: the instructor's eyes only
    for path, text in files.items():
        atomic_write(path, text)
    return index, report.missing


def _lesson_findings(out: Path, report: data.Report, lid: str, catalogue, similar: bool) -> tuple[dict, list]:
    """One lesson's named mistakes (student -> (mistake, how alike)) and similar pairs; what failed is said in
    ``report.missing``."""
    lesson = report.lessons[lid]
    rows = report.of(lid)
    named = {}
    for r in rows:
        if r.get("status") in data.REFUSED or float(r.get("score", 0)) >= float(r.get("max_score", 0)):
            continue
        hit = catalogue.name(lid, r.get("cells", []))
        if hit is not None:
            named[str(r.get("student"))] = hit
    pairs = []
    if similar and len(rows) > 1 and lesson.solution_cells:
        codes = similarity.codes_of(out, lid, sorted({str(r.get("student")) for r in rows}), lesson.solution_cells,
                                    lesson.released)
        stubs = "\n\n".join(lesson.stubs[g] for g in lesson.solution_cells if g in lesson.stubs)
        try:
            pairs = similarity.similar_pairs(lid, codes, stubs)
        except Exception as exc:  # noqa: BLE001 - the report shows the rest; says why this part is missing
            report.missing.append(f"{lid}: similar submissions could not be computed ({type(exc).__name__}: {exc})")
    return named, pairs

"""The class report: ``course report OUT`` (and the end of every ``course grade`` batch) writes, into
``OUT/report/``, one page for the class and one per lesson (scores, what each test checks and how many it caught,
the class's most common failures, the most likely mistake of each failing submission, refused and suspicious
submissions, difficulty and discrimination, similar submissions), and into ``OUT/exports/`` the grades as Canvas
and Moodle import them. Offline pages, no script; every string from a submission escaped.

Modules: ``data`` (reading and statistics), ``misconceptions`` (the certificate's catalogue of classic mistakes),
``similarity`` (copydetect), ``pages`` (HTML and plots), ``lms`` (the exports).
"""

from __future__ import annotations

from pathlib import Path

from course.grading.report import data, lms, misconceptions, pages, similarity
from course.grading.results import atomic_write

__all__ = ["write_report"]


def write_report(out: Path, root: Path, *, site: str | None = None, mapping: Path | None = None,
                 canvas_assignments: dict[str, str] | None = None, similar: bool = True) -> tuple[Path, list[str]]:
    """Write the report of the grading folder ``out`` (lessons from the checkout ``root``): ``(its index page, what it
    says could not be read or done)``."""
    out = Path(out)
    report = data.load(out, root)
    catalogue = misconceptions.Catalogue.load(root / "docs" / "fairness.json")
    if not catalogue.mistakes:
        report.missing.append("no fairness certificate (docs/fairness.json): mistakes are not named")
    lesson_ids = sorted(report.lessons)
    mapped, problems = lms.read_mapping(mapping)
    report.missing += problems
    left = lms.exported(report.results)[1]
    if left:
        report.missing.append(f"left out of the LMS exports: {'; '.join(left[:8])}{' …' if len(left) > 8 else ''}")
    titles = {lid: report.lessons[lid].title for lid in lesson_ids}
    atomic_write(out / "exports" / "canvas.csv", lms.canvas_csv(report.results, mapped, lesson_ids, titles,
                                                                 canvas_assignments, report.roster))
    atomic_write(out / "exports" / "moodle.csv", lms.moodle_csv(report.results, mapped, lesson_ids, report.roster))
    found = {lid: _lesson_findings(out, report, lid, catalogue, similar) for lid in lesson_ids}
    folder = out / "report"
    for lid in lesson_ids:
        named, pairs = found[lid]
        pages.write(folder / f"{lid}.html", pages.lesson_page(report, lid, named=named, pairs=pairs, site=site))
    index = folder / "index.html"
    pages.write(index, pages.class_page(report, lesson_ids))
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
        codes = similarity.codes_of(out, lid, sorted({str(r.get("student")) for r in rows}), lesson.solution_cells)
        stubs = "\n\n".join(lesson.stubs[g] for g in lesson.solution_cells if g in lesson.stubs)
        try:
            pairs = similarity.similar_pairs(lid, codes, stubs)
        except Exception as exc:  # noqa: BLE001 - the report shows the rest; says why this part is missing
            report.missing.append(f"{lid}: similar submissions could not be computed ({type(exc).__name__}: {exc})")
    return named, pairs

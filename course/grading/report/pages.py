"""The class report's pages: one for the class (``index.html``) and one per lesson, plain HTML with the plots
embedded as PNG data (no script, no network: they open from the disk and from any static server).

Every string that came from a submission or a result (student ids, messages, details, code) is escaped: the
instructor opens these pages, and the threat model applies to them as to every page a submission reaches."""

from __future__ import annotations

import base64
import functools
import html
import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import course.grading.report.data as D  # noqa: E402
from course.grading.intake import name_problem  # noqa: E402

__all__ = ["lesson_page", "class_page", "STYLE"]

STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1100px;color:#222;line-height:1.45}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0}td,th{border:1px solid #ccc;padding:.25em .5em;vertical-align:top;
font-size:.92em}th{background:#f3f1f8;text-align:left}.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555;font-size:.92em}.warn{background:#fff6e0;border:1px solid #e6c36a;padding:.5em .8em}
code,pre{font-family:ui-monospace,monospace;font-size:.88em}pre{background:#f7f7f7;padding:.5em;overflow:auto;
max-height:28em;white-space:pre-wrap}mark{background:#ffe08a}.pair{display:grid;grid-template-columns:1fr 1fr;gap:.6em}
img{max-width:100%}details{margin:.3em 0}
"""


def esc(value) -> str:
    return html.escape(str(value), quote=True)


def _plain_text(draw):
    """Draw with every label taken as plain text: matplotlib reads text between two ``$`` as mathematics, and a
    student folder named ``a$\\foo$b`` would stop the drawing (and the report of the whole batch)."""
    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        with plt.rc_context({"text.parse_math": False, "text.usetex": False}):
            return draw(*args, **kwargs)
    return drawn


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _img(src: str, alt: str) -> str:
    return f'<img src="{src}" alt="{esc(alt)}">'


@_plain_text
def score_histogram(scores: list[float], max_score: float, title: str) -> str:
    fig, ax = plt.subplots(figsize=(6, 2.6))
    bins = max(5, min(20, int(max_score) + 1)) if max_score else 10
    ax.hist(scores, bins=bins, range=(0, max_score or 1), color="#8172B3", edgecolor="white")
    ax.set_xlabel("score")
    ax.set_ylabel("submissions")
    ax.yaxis.get_major_locator().set_params(integer=True)      # a count of submissions
    ax.set_title(title)
    ax.axvline(sum(scores) / len(scores) if scores else 0, color="#333", linestyle="--", linewidth=1, label="mean")
    ax.legend(fontsize=8)
    return _img(_png(fig), f"{title}: how many submissions scored each number of points out of {max_score:g}")


@_plain_text
def exercise_bars(lesson: D.Lesson, results: list[dict]) -> str:
    """Each exercise's share of its points the class earned (mean over the graded submissions)."""
    exercises = lesson.exercises()
    if not exercises or not results:
        return ""
    names, shares = [], []
    for name, tests in exercises.items():
        possible = sum(t.points for t in tests)
        got = []
        for r in results:
            cells = {c.get("grade_id"): c for c in r.get("cells", []) if isinstance(c, dict)}
            got.append(sum(float(cells.get(t.grade_id, {}).get("points", 0)) for t in tests) / possible if possible else 0)
        names.append(name if len(name) <= 38 else name[:37] + "…")
        shares.append(sum(got) / len(got))
    fig, ax = plt.subplots(figsize=(6, 0.45 * len(names) + 0.8))
    ax.barh(range(len(names)), shares, color="#55A868")
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of the exercise's points earned, mean over the class")
    ax.set_title("Which exercises the class got")
    return _img(_png(fig), "For each exercise, the mean share of its points the class earned, from 0 to 1")


def _counts_table(counts: dict[str, int]) -> str:
    head = "".join(f"<th>{esc(k)}</th>" for k in counts)
    row = "".join(f'<td class="num">{v}</td>' for v in counts.values())
    return f"<table><tr>{head}</tr><tr>{row}</tr></table>"


def lesson_page(report: D.Report, lesson_id: str, *, named: dict, pairs: list, site: str | None = None) -> str:
    """One lesson's page. ``named``: student -> (mistake, similarity) for its failing submissions; ``pairs``: its
    similar submissions; ``site``: the URL of the course's website (its lesson pages are linked), if any."""
    lesson = report.lessons[lesson_id]
    rows = report.of(lesson_id)
    graded = [r for r in rows if r.get("status") not in D.REFUSED]
    parts = [f"<h1>{esc(lesson_id)}: {esc(lesson.title)}</h1>",
             '<p><a href="index.html">the class</a></p>',
             _counts_table(D.status_counts(report, lesson_id))]
    scores = [float(r.get("score", 0)) for r in graded]
    if scores:
        parts.append(score_histogram(scores, lesson.max_score or max(float(r.get("max_score", 0)) for r in graded),
                                     f"{lesson_id}: scores of {len(scores)} submissions (refused ones left out)"))
        parts.append(exercise_bars(lesson, graded))

    parts.append("<h2>What each test checks, and how many it caught</h2>")
    parts.append('<p class="note">Difficulty is the share of graded submissions that passed the test (1: everyone). '
                 "Discrimination is the correlation between passing it and the score on the rest of the lesson: near 0, "
                 "the test does not separate strong from weak submissions; negative, it may be checking the wrong "
                 "thing.</p>")
    stats = []
    for t in lesson.tests:
        p, disc, n = D.difficulty_and_discrimination(graded, t.grade_id)
        failed = round((1 - p) * n) if p is not None else 0
        stats.append((failed, t, p, disc, n))
    stats.sort(key=lambda s: -s[0])
    table = ["<table><tr><th>test</th><th>the rule it checks (the student notebook's words)</th><th>points</th>"
             "<th>failed</th><th>difficulty</th><th>discrimination</th></tr>"]
    for failed, t, p, disc, n in stats:
        where = f'<br><span class="note">section: {esc(t.section)}</span>' if t.section else ""
        table.append(f"<tr><td><code>{esc(t.grade_id)}</code></td><td>{esc(t.rule)}{where}</td>"
                     f'<td class="num">{t.points:g}</td><td class="num">{failed} of {n}</td>'
                     f'<td class="num">{"" if p is None else f"{p:.2f}"}</td>'
                     f'<td class="num">{"" if disc is None else f"{disc:+.2f}"}</td></tr>')
    table.append("</table>")
    parts.append("".join(table))

    parts.append("<h2>The class's most common failures</h2>")
    failures = D.common_failures(graded)
    if not failures:
        parts.append("<p>No test failed.</p>")
    tests = {t.grade_id: t for t in lesson.tests}
    for gid, template, count, students, example in failures:
        t = tests.get(gid)
        link = ""
        if t is not None and t.section:
            anchor = ""
            if site:
                anchor = f' (<a href="{esc(site.rstrip("/"))}/lessons/{esc(lesson_id)}">the lesson</a>)'
            link = (f'<details><summary>what the lesson says: {esc(t.section)}{anchor}</summary>'
                    f"<p>{esc(t.section_text)}</p></details>")
        parts.append(f"<p><b>{count}</b> × <code>{esc(gid)}</code>: {esc(template)}</p>{link}"
                     f'<p class="note">{esc(", ".join(students[:20]))}{" …" if len(students) > 20 else ""}</p>'
                     f'<p class="note">as one learner read it, {esc(example)}</p>')

    parts.append("<h2>The mistake each failing submission most likely made</h2>")
    parts.append('<p class="note">Matched against the fairness certificate\'s catalogue of classic mistakes (each a '
                 "change to the reference that the tests catch): a submission whose failures look like a catalogued "
                 "mistake's most likely made it. A suggestion for where to look first, for you only: a learner's page "
                 "never shows it, since it is written in terms of the reference solution.</p>")
    if named:
        parts.append("<table><tr><th>student</th><th>most likely mistake</th><th>in the reference, the change</th>"
                     "<th>exercise</th><th>alike</th></tr>")
        for student, (mistake, score) in sorted(named.items()):
            parts.append(f"<tr><td>{esc(student)}</td><td>{esc(mistake.name)}</td><td><code>{esc(mistake.change)}</code>"
                         f'</td><td><code>{esc(mistake.exercise)}</code></td><td class="num">{score:.2f}</td></tr>')
        parts.append("</table>")
    else:
        parts.append("<p>None named (no failing submission is close to a catalogued mistake, or the lesson has no "
                     "certificate).</p>")

    flagged = [r for r in rows if r.get("status") in D.REFUSED + (D.SUSPICIOUS, "timeout", "kernel-died")]
    parts.append("<h2>Refused, suspicious, stopped</h2>")
    if flagged:
        parts.append("<table><tr><th>student</th><th>status</th><th>why</th></tr>")
        for r in sorted(flagged, key=lambda r: (str(r.get("status")), str(r.get("student")))):
            parts.append(f"<tr><td>{esc(r.get('student'))}</td><td>{esc(r.get('status'))}</td>"
                         f"<td>{esc(str(r.get('detail', ''))[:1500])}</td></tr>")
        parts.append("</table>")
    else:
        parts.append("<p>None.</p>")

    parts.append("<h2>Similar submissions</h2>")
    parts.append('<p class="warn">Similarity is evidence to look at, never a verdict. Short exercises leave little room '
                 "to differ, and learners may share an idea from the same lecture. The code shared by both is marked; "
                 "the starter code everyone received is not counted.</p>")
    if pairs:
        for pair in pairs:
            parts.append(f"<details><summary><b>{esc(pair.a)}</b> and <b>{esc(pair.b)}</b>: "
                         f"{pair.shares[0]:.0%} and {pair.shares[1]:.0%} of their code shared</summary>"
                         f'<div class="pair"><pre>{pair.code_a}</pre><pre>{pair.code_b}</pre></div></details>')
        more = getattr(pairs, "total", len(pairs)) - len(pairs)
        if more > 0:
            parts.append(f'<p class="note">and {more} more pairs, less alike than these (the {len(pairs)} most alike '
                         "are shown).</p>")
    else:
        parts.append("<p>No pair above the threshold.</p>")
    return _page(f"{lesson_id}: class report", parts, report)


def class_page(report: D.Report, lessons: list[str]) -> str:
    parts = ["<h1>Class report</h1>",
             f'<p class="note">From {esc(report.out)}: {len(report.results)} results, {len(report.students())} '
             "students.</p>"]
    if lessons:
        head = ["<table><tr><th>lesson</th><th>submissions</th><th>graded</th><th>suspicious</th><th>refused</th>"
                "<th>late</th><th>missing</th><th>mean score</th></tr>"]
        for lid in lessons:
            counts = D.status_counts(report, lid)
            graded = [float(r.get("score", 0)) for r in report.of(lid) if r.get("status") not in D.REFUSED]
            possible = report.lessons[lid].max_score
            mean = f"{sum(graded) / len(graded):.1f} / {possible:g}" if graded else ""
            head.append(f'<tr><td><a href="{esc(lid)}.html">{esc(lid)}</a></td>'
                        + "".join(f'<td class="num">{counts[k]}</td>' for k in
                                  ("submissions", "graded", "suspicious", "refused", "late", "missing"))
                        + f'<td class="num">{mean}</td></tr>')
        head.append("</table>")
        parts.append("".join(head))
        parts.append(_class_heatmap(report, lessons))
    else:
        parts.append("<p>No result to show yet.</p>")
    return _page("Class report", parts, report)


@_plain_text
def _class_heatmap(report: D.Report, lessons: list[str]) -> str:
    students = [s for s in report.students() if name_problem(s, "student") is None]
    if not students:
        return ""
    if len(students) > 400:
        return (f'<p class="note">The map of each student\'s share of each lesson is drawn for up to 400 students; this '
                f"class has {len(students)} (the lesson pages have every number).</p>")
    grid = []
    for s in students:
        row = []
        for lid in lessons:
            r = next((r for r in report.of(lid) if r.get("student") == s), None)
            row.append(float("nan") if r is None else float(r.get("score", 0)) / max(1e-9, float(r.get("max_score", 0)) or 1))
        grid.append(row)
    cmap = matplotlib.colormaps["Purples"].with_extremes(bad="#d9d9d9")
    fig, ax = plt.subplots(figsize=(0.5 * len(lessons) + 2.5, 0.18 * len(students) + 1.5))
    im = ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(lessons)), [lid[:2] for lid in lessons])
    ax.set_yticks(range(len(students)), [s if len(s) <= 24 else s[:23] + "…" for s in students], fontsize=6)
    ax.set_title("Each student's share of each lesson's points (grey: not handed in)")
    fig.colorbar(im, ax=ax, fraction=0.04)
    return _img(_png(fig), "A grid of students by lessons, each cell the share of the lesson's points earned, grey "
                           "where nothing was handed in")


def _page(title: str, parts: list[str], report: D.Report) -> str:
    warn = "".join(f'<p class="warn">{esc(m)}</p>' for m in report.missing)
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; "
            "style-src 'unsafe-inline'\">"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head><body>{warn}{''.join(parts)}</body></html>")

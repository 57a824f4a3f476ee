"""The pages a submission produces: the notebook as graded (``autograded/``, for the instructor and the
formgrader) and the feedback page (for the learner), built from the release's cells, the learner's
sources and what the sandbox printed; never a line of a hidden test on the learner's page."""

from __future__ import annotations

import re
import threading
import time

import nbformat

from course.grading.intake import against_release, as_plain_text
from course.grading.notebooks import test_cells
from course.grading.results import SubmissionResult
import html as _html

_HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.S)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def graded_notebook(nb, source_nb, release_nb, judged: dict, *, for_student: bool):
    """The submission with the outputs the sandbox produced and each test's verdict.

    Built from the submission as intake rebuilds it against the release (:func:`course.grading.intake.
    against_release`, done here again, whoever calls): the release's metadata, the learner's sources, a
    learner's Markdown as plain text. For the student (feedback): test cells show their visible part only
    (the released version), never hidden test code. For the instructor (autograded/): the full trusted test
    cell. A second copy of a test cell becomes a line of plain text (it was not graded).
    """
    out, _, _ = against_release(nb, release_nb)
    trusted = {c.metadata.nbgrader.grade_id: c for c in test_cells(source_nb)}
    visible = {c.metadata.nbgrader.grade_id: c for c in test_cells(release_nb)}
    verdicts = {c["grade_id"]: c for c in judged.get("cells", [])}
    outputs = judged.get("outputs", {})
    seen: set[str] = set()
    for i, cell in enumerate(out.cells):
        if cell.cell_type != "code":
            continue
        cell.outputs, cell.execution_count = [], None
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in trusted and gid in seen:
            out.cells[i] = nbformat.v4.new_markdown_cell(as_plain_text(f"(a second copy of the test cell {gid}: "
                                                                       "not graded)"))
            continue
        if gid in trusted:
            seen.add(gid)
            src = visible.get(gid) if for_student else trusted.get(gid)
            cell.source = _HIDDEN.sub("# (hidden tests ran here; their code is not shown)\n", src.source) if src is not None else ""
            cell.metadata["nbgrader"] = dict(trusted[gid].metadata.nbgrader)
            v = verdicts.get(gid)
            if v and not v["passed"]:
                ename, _, evalue = v["message"].partition(": ")
                cell.outputs = [nbformat.v4.new_output("error", ename=_error_name(ename), evalue=evalue or v["message"],
                                                       traceback=[v["message"]])]
            continue
        got = outputs.get(str(i))
        if not got:
            continue
        if got.get("output"):
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=str(got["output"])))
        err = got.get("error")
        if err:
            name = _error_name(str(err.get("type", "Error")))
            cell.outputs.append(nbformat.v4.new_output("error", ename=name, evalue=str(err.get("message", "")),
                                                       traceback=[f"{name}: {err.get('message', '')}"]))
    return out


def _error_name(name: str) -> str:
    """An exception's name as a page shows it: an identifier, else just "Error" (the learner names classes)."""
    return name if name.isidentifier() and len(name) <= 60 else "Error"


def render_feedback(nb) -> str:
    """The graded notebook as an HTML page.

    Nothing on it is compared with the hidden tests, and nothing is cut from it because of them: a filter that
    removed the lines of a hidden test wherever they appeared (the learner's own cells and outputs included)
    marked exactly the learner's correct guesses of those lines, and so confirmed them. The page holds no hidden
    line by how it is built instead: its test cells are the release's (their visible part), a learner's outputs
    are only those of cells that ran before the first test, and the judge's messages quote visible lines only
    (:mod:`course.grading.judge.explain`; ``make certify`` and tests/test_grading.py check every message of every
    planted bug and mutant). What the learner wrote comes back as she wrote it."""
    exporter = getattr(_EXPORTERS, "html", None)
    if exporter is None:
        exporter = _EXPORTERS.html = _feedback_exporter()
    body, _ = exporter.from_notebook_node(nb)
    return body


# The page is the student's notebook: its Markdown, HTML and JavaScript outputs are sanitized
# (``sanitize_html``), so that a script in a submission never runs in the browser of whoever opens the
# page. nbconvert's lab template also ran bleach's sanitizer over every code cell's Pygments output,
# which Pygments has already escaped (the page is byte for byte the same without it); that was half
# the time of a feedback page (about 1 s of 2 for lesson 08), so this template leaves it out.
# tests/test_grading_attacks.py checks that nothing a submission writes runs.
_FEEDBACK_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{% block input %}
<div class="jp-CodeMirrorEditor jp-Editor jp-InputArea-editor" data-type="inline">
     <div class="cm-editor cm-s-jupyter">
{{ cell.source | highlight_code(metadata=cell.metadata) }}
     </div>
</div>
{%- endblock input %}
"""

# nbconvert's HTMLExporter ends by parsing the whole page with BeautifulSoup to add three attributes
# (alt text on images without one, tabindex on cell inputs and outputs) and writing it out again: 60 %
# of a feedback page's time, as each Pygments token is a tag. These expressions add the same
# attributes, at the same place, to the template's own output (tests/test_grading_attacks.py
# compares the two pages as parsed HTML).
_A11Y = (
    (re.compile(r'(<div class="jp-Cell-inputWrapper"[^>]*)>'), r'\1 tabindex="0">'),
    (re.compile(r'(<div\b[^>]*\bclass="[^"]*\bjp-OutputArea-output\b[^"]*"[^>]*)>'), r'\1 tabindex="0">'),
    (re.compile(r'(<img\b(?![^>]*\balt=)[^>]*?)(\s*/?>)'), r'\1 alt="No description has been provided for this image"\2'),
)


_SCRIPT = re.compile(r"(<script\b.*?</script\s*>)", re.S | re.I)


def accessible(html: str) -> str:
    """:data:`_A11Y` applied to the page's markup, never inside a ``<script>`` element: a notebook's widget
    state travels in one as JSON, and an ``alt`` added to an ``<img`` in its strings broke that JSON."""
    parts = _SCRIPT.split(html)
    for i in range(0, len(parts), 2):          # the even parts are outside every <script>...</script>
        for pattern, replacement in _A11Y:
            parts[i] = pattern.sub(replacement, parts[i])
    return "".join(parts)


# What a feedback page highlights (Pygments); the rest of its code is shown as plain, escaped text.
HIGHLIGHT_CELL_CHARS, HIGHLIGHT_LINE_CHARS, HIGHLIGHT_PAGE_CHARS, HIGHLIGHT_SECONDS = 20_000, 1_000, 300_000, 20.0


# What a judge keeps of feedback pages from one submission to the next: the rendering of texts up to 16 000
# characters (the lesson's own cells are the same in every submission), at most 2 048 of them per cache
# and 8 MB of keys and values, so that one learner's huge cells cannot fill the judge's memory.
_CACHED_TEXT, _CACHED_ITEMS, _CACHED_CHARS = 16_000, 2048, 8_000_000


class _TextCache:
    """Rendered texts by key, emptied when it would hold more than its bounds."""

    def __init__(self):
        self.items: dict = {}
        self.chars = 0

    def get(self, key, compute):
        if key not in self.items:
            value = compute()
            size = len(value) + sum(len(k) for k in (key if isinstance(key, tuple) else (key,)) if isinstance(k, str))
            if len(self.items) >= _CACHED_ITEMS or self.chars + size > _CACHED_CHARS:
                self.items, self.chars = {}, 0
            self.items[key] = value
            self.chars += size
        return self.items[key]


def _feedback_exporter():
    """nbconvert's HTML exporter (lab template, sanitized) for feedback pages, without its
    BeautifulSoup pass, and with Pygments' output kept per cell source for every cell but the
    learner's answers: test cells and given code are the same in every submission of a lesson.
    Falls back to the plain exporter (same page, slower) if this nbconvert lacks the pieces it uses."""
    # lazy: nbconvert and jinja2 take a second to import; only a judge that renders a page needs them
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    options = dict(sanitize_html=True, template_name="lab", template_file="course_feedback.html.j2",
                   extra_loaders=[DictLoader({"course_feedback.html.j2": _FEEDBACK_TEMPLATE})])
    try:
        # lazy: as above
        from jinja2 import pass_context
        from nbconvert.exporters.templateexporter import TemplateExporter
        from nbconvert.filters import clean_html as clean_html_filter
        from nbconvert.filters.highlight import Highlight2HTML
        from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter
    except ImportError:
        return HTMLExporter(**options)

    class FeedbackExporter(HTMLExporter):
        def from_notebook_node(self, nb, resources=None, **kw):
            langinfo = nb.metadata.get("language_info", {})
            lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
            highlight = Highlight2HTML(pygments_lexer=lexer, parent=self)
            cache = self._highlighted.setdefault(lexer, _TextCache())

            spent = {"chars": 0, "until": time.monotonic() + HIGHLIGHT_SECONDS}

            def highlight_code(source, language=None, metadata=None):
                metadata = metadata or {}
                # Highlighting is super-linear on some inputs (a 50 000-character attribute chain took 117 s):
                # long cells and lines, and whatever comes after the page's budget, are shown as plain text.
                spent["chars"] += len(source)
                if len(source) > HIGHLIGHT_CELL_CHARS or spent["chars"] > HIGHLIGHT_PAGE_CHARS or \
                        time.monotonic() > spent["until"] or \
                        max((len(line) for line in source.splitlines()), default=0) > HIGHLIGHT_LINE_CHARS:
                    return f'<div class="highlight"><pre><span></span>{_html.escape(source)}</pre></div>'
                if metadata.get("nbgrader", {}).get("solution") or len(source) > _CACHED_TEXT:  # the learner's: seen once
                    return highlight(source, language=language, metadata=metadata)
                key = (source, language, metadata.get("magics_language"))
                return cache.get(key, lambda: highlight(source, language=language, metadata=metadata))

            markdown, cleaned = self._markdown, self._cleaned

            @pass_context
            def markdown2html(context, source):
                # The lesson's Markdown is the same in every submission: rendered once per judge.
                cell = context.get("cell", {})
                if cell.get("attachments") or len(source) > _CACHED_TEXT:
                    return HTMLExporter.markdown2html(self, context, source)
                key = (source, str(context.get("resources", {}).get("metadata", {}).get("path", "")))
                return markdown.get(key, lambda: HTMLExporter.markdown2html(self, context, source))

            def clean_html(html):
                if len(html) > _CACHED_TEXT:
                    return clean_html_filter(html)
                return cleaned.get(html, lambda: clean_html_filter(html))

            try:
                metadata = self._nb_metadata
            except AttributeError:       # an nbconvert laid out otherwise: its own, slower way
                return super().from_notebook_node(nb, resources, **kw)
            resources = self._init_resources(resources)
            self.register_filter("markdown2html", markdown2html)
            self.register_filter("clean_html", clean_html)
            self.register_filter("highlight_code", highlight_code)
            self.register_filter("filter_data_type", WidgetsDataTypeFilter(
                notebook_metadata=metadata, parent=self, resources=resources))
            html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
            html = accessible(html)
            return html, resources

    exporter = FeedbackExporter(**options)
    exporter._highlighted, exporter._markdown, exporter._cleaned = {}, _TextCache(), _TextCache()
    return exporter


def _summary_html(result: SubmissionResult) -> str:
    """The score and one row per test, as the first thing on the feedback page."""
    rows = "".join(
        f"<tr><td><code>{_html.escape(c.grade_id)}</code></td><td>{c.points:g} / {c.max_points:g}</td>"
        f"<td>{'passed' if c.passed else 'failed: ' + _html.escape(c.message)}</td></tr>" for c in result.cells)
    detail = f"; {_html.escape(result.detail)}" if result.detail else ""
    return (f'<div class="course-feedback" style="margin:1em 2em;font-family:sans-serif">'
            f"<h1>Feedback: {_html.escape(result.lesson)}</h1>"
            f"<p><b>{_html.escape(result.student)}</b> scored <b>{result.score:g} / {result.max_score:g}</b> "
            f"(status: {_html.escape(result.status)}{detail}).</p>"
            f'<table border="1" cellpadding="4" style="border-collapse:collapse"><tr><th>test</th><th>points</th>'
            f"<th>result</th></tr>{rows}</table></div>")


def feedback_page(body: str, result: SubmissionResult) -> str:
    """The page with the score and one row per test on top (the judge's messages: no hidden line, as above)."""
    summary = _summary_html(result)
    at = body.find("<body")
    at = body.find(">", at) + 1 if at >= 0 else 0
    return body[:at] + summary + body[at:]


_EXPORTERS = threading.local()     # one nbconvert exporter per grading thread (its templates load once)

"""``course grade``: grade a folder of submissions, isolated, in parallel, with verdicts out of reach.

Layout in: ``SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb`` (nbgrader's ``submitted/``).
Layout out (``--out DIR``, an nbgrader course root)::

    grades.csv      student, lesson, score, max_score, status       (rewritten after every submission)
    results.json    every test cell: grade_id, points, max_points, passed, message; status, detail
    feedback/<student>/<lesson>/<lesson>.html   the student's code, outputs and test messages, no hidden test
    autograded/<student>/<lesson>/<lesson>.ipynb the notebook as graded (for the instructor, formgrader)
    submitted/<student>/<lesson>/<lesson>.ipynb  a copy of each readable submission (the formgrader counts them)
    gradebook.db, source/, release/             nbgrader's own state; scores go into its gradebook

How a submission is graded (see :mod:`course.tools.judge`): its cells run in a sandbox
(:mod:`course.tools.sandbox`: bubblewrap, no network, a private scratch folder, an unprivileged user,
limits on memory, processes, CPU, wall time and output); each test cell's code -- the instructor's,
hidden tests included -- runs in a trusted judge process that only receives data back. Experiment
cells (tagged ``experiment``) are skipped. ``--jobs N`` grades N submissions at a time.

Only this process writes results, after each submission finishes (atomic replace), so an
interrupted batch keeps what it graded and a re-run resumes: a submission whose notebook and lesson
have not changed keeps its result (``--regrade`` grades everything again).

A class too large for one machine is cut into shards: ``--shard I/N`` grades only the submissions
that a stable hash of (student, lesson) gives to shard ``I`` (:func:`shard_of`), into its own
``--out``; any scheduler runs the N commands (a Slurm job array, a Kubernetes Indexed Job, GNU
parallel). ``course grade merge R0 R1 ... --out R`` (:func:`merge`) then writes the class's
grades.csv, results.json, feedback and gradebook (``--db-url``: nbgrader's gradebook in PostgreSQL).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import warnings
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from course.tools.lessons import all_lessons
from course.tools.workspace import Workspace

__all__ = ["CellResult", "SubmissionResult", "grade", "merge", "MergeError", "shard_of", "parse_shard", "summary_table",
           "OK_STATUSES", "STATUSES"]

OK_STATUSES = ("graded",)
STATUSES = {
    "graded": "graded normally",
    "timeout": "a cell ran past --timeout and was stopped; the rest of the notebook was still graded",
    "test-cells-deleted": "the student deleted test cells: those score 0, the rest are graded",
    "kernel-died": "the student's process died (os._exit, a crash, out of memory); restarted, the rest graded",
    "suspicious": "graded, but the code tampers with grading or reaches outside: look at it by hand",
    "invalid-notebook": "not a readable notebook (truncated JSON, a link, a pipe or device): 0 points, never read through a link",
    "missing-notebook": "no notebook in the lesson folder: 0 points",
    "unknown-lesson": "a folder that is not a lesson of this course",
    "grader-error": "the grader itself failed on this submission (a bug: please report it): 0 points",
}
_HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", re.S)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class CellResult:
    grade_id: str
    points: float
    max_points: float
    passed: bool
    message: str = ""


@dataclass
class SubmissionResult:
    student: str
    lesson: str
    score: float = 0.0
    max_score: float = 0.0
    status: str = "pending"
    detail: str = ""
    seconds: float = 0.0
    cells: list[CellResult] = field(default_factory=list)
    feedback: str = ""
    sha256: str = ""
    phases: dict = field(default_factory=dict)


def _test_cells(nb) -> list:
    return [c for c in nb.cells if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")]


def _max_score(source_nb) -> float:
    return float(sum(c.metadata.nbgrader.get("points", 0) for c in _test_cells(source_nb)))


# nbgrader builds gradebook rows through SQLAlchemy backrefs that SQLAlchemy 2 no longer cascades, and
# SQLAlchemy says so on stderr for every submission ("... not in session, add operation along ... will
# not proceed"); nbgrader adds those rows itself right after, so they are there (tests read them back).
warnings.filterwarnings("ignore", message=r".*not in session, add operation along")

MAX_NOTEBOOK_BYTES = 100 * 2**20       # a notebook larger than this is refused unread
MAX_CELLS = 2000                        # more cells than this: refused (rendering them would take minutes)
MAX_SOURCE_CHARS = 4_000_000            # characters of cell sources (code, Markdown, raw) a notebook may hold


class _Refused(str):
    """Why a handed-in file is refused unread (a link, a special file): status ``invalid-notebook``."""


def _link_problem(path: Path, what: str) -> str | None:
    """Why ``path`` must not be read as a submission, from ``lstat`` (links are never followed)."""
    import stat

    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot read {what} {path.name}: {exc.strerror or exc}"
    if stat.S_ISLNK(st.st_mode):
        return (f"{what} {path.name} is a symbolic link; hand in the notebook file itself "
                "(links are never followed, not even to another file in the submissions folder).")
    if what == "folder":
        return None if stat.S_ISDIR(st.st_mode) else f"{path.name} is not a folder"
    if not stat.S_ISREG(st.st_mode):
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a named pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else
                "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        return f"{path.name} is {kind}, not a notebook file; hand in the notebook file itself."
    if st.st_nlink > 1:
        return (f"{path.name} is a hard link ({st.st_nlink} names for one file); hand in a copy of the notebook "
                "file itself.")
    if st.st_size > MAX_NOTEBOOK_BYTES:
        return f"{path.name} is {st.st_size / 2**20:.0f} MiB, more than the {MAX_NOTEBOOK_BYTES // 2**20} MiB a notebook may be."
    return None


def _find_notebook(folder: Path, lesson: str) -> tuple[Path | None, str]:
    """The submitted notebook of ``<student>/<lesson>/``, or ``(None, why)``.

    Read with ``lstat``, never through a link: a notebook, lesson folder or student folder that is a
    symbolic link, a hard link (``st_nlink > 1``) or a special file (FIFO, device, socket) is refused,
    with a :class:`_Refused` reason (status ``invalid-notebook``). Links are refused even when they
    stay inside the submissions folder: a link from one student's folder to another's is exactly the
    case to refuse, and an instructor who copies submissions in gets plain files anyway.
    """
    for part, what in ((folder.parent, "folder"), (folder, "folder")):
        problem = _link_problem(part, what)
        if problem:
            return None, _Refused(problem)
    expected = folder / f"{lesson}.ipynb"
    if os.path.lexists(expected):
        problem = _link_problem(expected, "the notebook")
        return (None, _Refused(problem)) if problem else (expected, "")
    try:
        others = sorted(Path(e.path) for e in os.scandir(folder) if e.name.endswith(".ipynb") and not e.name.startswith("."))
    except OSError as exc:
        return None, f"cannot list {folder}: {exc.strerror or exc}"
    if len(others) == 1:
        problem = _link_problem(others[0], "the notebook")
        if problem:
            return None, _Refused(problem)
        return others[0], f"graded {others[0].name} (expected the name {lesson}.ipynb)"
    found = ", ".join(p.name for p in others) or "nothing"
    return None, f"expected {lesson}.ipynb in {folder}; found {found}. Ask the student to hand in {lesson}.ipynb."


def _read_notebook(path: Path):
    """The submission as an nbformat notebook, or a readable reason why it is not one.

    Opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked again on the open file (a regular file with one
    name, not too large), so nothing is read through a link or from a pipe or device."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        problem = _link_problem(path, "the notebook")
        return None, problem or f"cannot read {path.name}: {exc.strerror or exc}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or st.st_size > MAX_NOTEBOOK_BYTES:
            return None, _link_problem(path, "the notebook") or f"{path.name} is not a plain notebook file"
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError as exc:
        return None, f"cannot read {path.name}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    if len(data) > MAX_NOTEBOOK_BYTES:
        return None, f"{path.name} is larger than the {MAX_NOTEBOOK_BYTES // 2**20} MiB a notebook may be."
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"cannot read {path.name}: {exc}"
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - JSON or schema errors of every kind
        return None, f"{path.name} is not a valid notebook ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}). " \
                     "It may be truncated or edited outside Jupyter; ask the student to re-save and resubmit it."
    if len(nb.cells) > MAX_CELLS:
        return None, (f"{path.name} has {len(nb.cells)} cells; a lesson's notebook has well under a hundred, and "
                      f"at most {MAX_CELLS} are graded. Delete the extra cells and hand it in again.")
    chars = sum(len(c.source) for c in nb.cells)
    if chars > MAX_SOURCE_CHARS:
        return None, (f"{path.name} holds {chars:,} characters of cell sources, more than the {MAX_SOURCE_CHARS:,} a "
                      "notebook may (a lesson's has about 100 000); delete what is not part of your answers.")
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as exc:
        return None, f"{path.name} does not follow the notebook format ({str(exc).splitlines()[0][:200]})."
    return nb, ""


def _as_plain_text(cell) -> None:
    """A Markdown or raw cell the learner wrote, shown as its text: in a fenced block, no HTML, link or
    image of it is rendered (nbgrader's formgrader renders autograded notebooks without sanitizing, in the
    instructor's Jupyter, where a script could act as the instructor)."""
    import re

    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", cell.source)), default=0))
    cell.cell_type = "markdown"
    cell.source = f"{fence}text\n{cell.source}\n{fence}"
    cell.pop("attachments", None)


def _graded_notebook(nb, source_nb, release_nb, judged: dict, *, for_student: bool):
    """The submission with the outputs the sandbox produced and each test's verdict.

    For the student (feedback): test cells show their visible part only (the released version),
    never hidden test code. For the instructor (autograded/): the full trusted test cell.
    """
    out = nbformat.from_dict(json.loads(json.dumps(nb)))
    trusted = {c.metadata.nbgrader.grade_id: c for c in _test_cells(source_nb)}
    visible = {c.metadata.nbgrader.grade_id: c for c in _test_cells(release_nb)}
    verdicts = {c["grade_id"]: c for c in judged.get("cells", [])}
    outputs = judged.get("outputs", {})
    lesson_text = {c.source for c in release_nb.cells if c.cell_type != "code"}
    for i, cell in enumerate(out.cells):
        if cell.cell_type != "code":
            if cell.source not in lesson_text:
                _as_plain_text(cell)
            continue
        cell.outputs, cell.execution_count = [], None
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in trusted:
            src = visible.get(gid) if for_student else trusted.get(gid)
            cell.source = _HIDDEN.sub("# (hidden tests ran here; their code is not shown)\n", src.source) if src is not None else ""
            cell.metadata["nbgrader"] = dict(trusted[gid].metadata.nbgrader)
            v = verdicts.get(gid)
            if v and not v["passed"]:
                ename, _, evalue = v["message"].partition(": ")
                cell.outputs = [nbformat.v4.new_output("error", ename=ename or "Error", evalue=evalue or v["message"],
                                                       traceback=[v["message"]])]
            continue
        got = outputs.get(str(i))
        if not got:
            continue
        if got.get("output"):
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=got["output"]))
        err = got.get("error")
        if err:
            cell.outputs.append(nbformat.v4.new_output("error", ename=str(err.get("type", "Error")),
                                                       evalue=str(err.get("message", "")),
                                                       traceback=[f"{err.get('type', 'Error')}: {err.get('message', '')}"]))
    return out


def render_feedback(nb, hidden_lines: set[str]) -> str:
    """The graded notebook as an HTML page, with every line of a hidden test removed whatever printed it."""
    exporter = getattr(_EXPORTERS, "html", None)
    if exporter is None:
        exporter = _EXPORTERS.html = _feedback_exporter()
    body, _ = exporter.from_notebook_node(nb)
    return _scrub(body, hidden_lines)


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
    import html as _html

    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    options = dict(sanitize_html=True, template_name="lab", template_file="course_feedback.html.j2",
                   extra_loaders=[DictLoader({"course_feedback.html.j2": _FEEDBACK_TEMPLATE})])
    try:
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
            for pattern, replacement in _A11Y:
                html = pattern.sub(replacement, html)
            return html, resources

    exporter = FeedbackExporter(**options)
    exporter._highlighted, exporter._markdown, exporter._cleaned = {}, _TextCache(), _TextCache()
    return exporter


def _scrub(body: str, hidden_lines: set[str]) -> str:
    import html as _html

    for line in hidden_lines:
        for variant in {line, _html.escape(line)}:
            body = body.replace(variant, "[hidden test line removed]")
    return body


def _summary_html(result: SubmissionResult) -> str:
    """The score and one row per test, as the first thing on the feedback page."""
    import html as _html

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


def _feedback_page(body: str, result: SubmissionResult, hidden_lines: set[str]) -> str:
    summary = _scrub(_summary_html(result), hidden_lines)
    at = body.find("<body")
    at = body.find(">", at) + 1 if at >= 0 else 0
    return body[:at] + summary + body[at:]


_EXPORTERS = threading.local()     # one nbconvert exporter per grading thread (its templates load once)


def _hidden_lines(source_nb, release_nb) -> set[str]:
    hidden = set()
    for cell in _test_cells(source_nb):
        for block in re.findall(r"### BEGIN HIDDEN TESTS(.*?)### END HIDDEN TESTS", cell.source, re.S):
            hidden |= {ln.strip() for ln in block.splitlines() if len(ln.strip()) > 24}
    shown = {ln.strip() for c in release_nb.cells for ln in c.source.splitlines()}
    return hidden - shown


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _csv_cell(value: str) -> str:
    """A text cell a spreadsheet will not run: one starting with = + - @ (or a tab or carriage return)
    is a formula there (OWASP's CSV injection), so it gets a leading apostrophe."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def shown(text: str) -> str:
    """Text from a submission (a folder name, a message) as a terminal shows it harmlessly: control
    characters (escape sequences that move the cursor, erase lines or retitle the window) escaped."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))


def _write_results(out: Path, results) -> None:
    """``grades.csv`` and ``results.json`` in ``out``, sorted by (student, lesson), each replaced atomically."""
    import io

    ordered = sorted(results, key=lambda r: (r.student, r.lesson))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["student", "lesson", "score", "max_score", "status"])
    for r in ordered:
        w.writerow([_csv_cell(r.student), _csv_cell(r.lesson), f"{r.score:g}", f"{r.max_score:g}", r.status])
    _atomic_write(out / "grades.csv", buf.getvalue())
    _atomic_write(out / "results.json", json.dumps([asdict(r) for r in ordered], indent=2) + "\n")


class _GradebookWriter:
    """Scores into nbgrader's gradebook (formgrader shows them): auto scores only, from the judge. One
    ``Gradebook`` for a whole batch, used by one thread at a time (the caller's lock): opening one per
    result took 0.1 s of CPU (its engine, a look at every table and at the schema's version), a third of
    the grading command's own time in a batch of a few hundred."""

    def __init__(self, ws: Workspace):
        self.ws, self.gb = ws, None

    def record(self, res: SubmissionResult) -> None:
        from nbgrader.api import Gradebook, MissingEntry

        from course.tools.workspace import in_process_alembic_head

        if self.gb is None:
            in_process_alembic_head()
            self.gb = Gradebook(self.ws.db_url)
        gb = self.gb
        try:
            gb.update_or_create_student(res.student)
            try:
                gb.remove_submission(res.lesson, res.student)
            except MissingEntry:
                pass
            gb.add_submission(res.lesson, res.student)
            # The notebook's grades in one query (a find_grade per test cell was half of the time here).
            grades = {g.name: g for g in gb.find_submission_notebook(res.lesson, res.lesson, res.student).grades}
            with gb.db.no_autoflush:
                for c in res.cells:
                    g = grades.get(c.grade_id)
                    if g is None:
                        continue
                    g.auto_score = min(float(c.points), float(c.max_points))
                    g.manual_score = None
                    g.extra_credit = None
            gb.db.commit()
        except BaseException:
            self.close()                   # rolled back; the next result opens the gradebook afresh
            raise

    def close(self) -> None:
        gb, self.gb = self.gb, None
        if gb is not None:
            try:
                gb.db.rollback()
                gb.close()
            except Exception:  # noqa: BLE001 - closing a gradebook whose last write failed
                pass




def _unvalidated(path: Path):
    """A notebook read without nbformat's validation (whose first use compiles the schema, about half a
    second): for the instructor's own notebooks, read before the judges start."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    for cell in raw.get("cells", []):
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
    return nbformat.from_dict(raw)


def _imported_modules(source_nb) -> set[str]:
    """Modules the instructor's notebook imports in the cells a sandbox runs (not tests, not
    experiments): a warm sandbox imports them once per batch, not once per submission."""
    import ast

    found = set()
    for cell in source_nb.cells:
        meta = cell.get("metadata", {})
        if cell.cell_type != "code" or meta.get("nbgrader", {}).get("grade") or "experiment" in meta.get("tags", []):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in tree.body:                       # top-level imports only
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module)              # and `from course import checks_09`'s module:
                found |= {f"{node.module}.{a.name}" for a in node.names if a.name != "*"}  # a miss costs nothing
    return found


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load_gradebook_library() -> None:
    try:
        from course.tools.workspace import in_process_alembic_head

        in_process_alembic_head()
    except Exception:  # noqa: BLE001 - imported again, with its error, where it is used
        pass


def _only_cells() -> dict[str, list[str]]:
    """The test cells to grade per submission ("student/lesson": [grade_id, ...]) from the JSON file named
    by ``$COURSE_GRADE_ONLY_CELLS``; {} (every cell) when it is unset. A hook for the course's own tests of
    its tests (tests/test_grading.py: a planted bug need only be graded on the cells that must catch it),
    set in the instructor's environment, never by a submission. The other test cells get 0 points and
    say why; such a result is never reused for a run without the hook (its digest names the cells)."""
    value = os.environ.get("COURSE_GRADE_ONLY_CELLS")
    if not value:
        return {}
    try:
        table = json.loads(Path(value).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"COURSE_GRADE_ONLY_CELLS={value}: cannot read it as JSON ({exc}); unset it to grade every cell")
    if not (isinstance(table, dict) and all(isinstance(v, list) and all(isinstance(g, str) for g in v) for v in table.values())):
        raise SystemExit(f"COURSE_GRADE_ONLY_CELLS={value}: expected {{\"student/lesson\": [\"grade_id\", ...]}}")
    return table


def _only_suffix(only: list[str] | None) -> str:
    """What a partial grade (:func:`_only_cells`) adds to a submission's digest."""
    return "" if only is None else ":only:" + ",".join(sorted(only))


def _assignment_cache() -> Path:
    """Where generated assignments are kept between grading folders: ``$COURSE_GRADE_CACHE``, else
    ``.state/grading-cache`` in the checkout (ignored by git; delete it at will)."""
    from course.tools.lab import state_dir

    value = os.environ.get("COURSE_GRADE_CACHE")
    return Path(value).expanduser().resolve() if value else state_dir() / "grading-cache"


def _generate_assignments(ws: Workspace, lessons: list[str], *, fresh: bool) -> bool:
    """nbgrader's ``generate_assignment`` for each lesson into ``ws`` (its ``release/`` and gradebook),
    once per lesson version (:meth:`Workspace.generate_cached`). A new grading folder with an SQLite
    gradebook (every shard, every fresh ``--out``) copies them from the assignment cache when this set
    of lesson versions was generated before (the gradebook then holds the assignments and no student),
    else generates them and stores them there. True when they came from the cache."""
    from importlib.metadata import version as _version

    sqlite = fresh and ws.db_url == f"sqlite:///{ws.db_path}" and not ws.db_path.exists()
    folder = None
    if sqlite:
        from course.tools.lessons import root

        # `import nbgrader` takes a second (its server extensions): its version, from the metadata
        key = hashlib.sha256(f"{_version('nbgrader')}\0{ws.course_id}\0".encode())
        config = root() / "autograde" / "nbgrader_config.py"      # the settings generate_assignment reads
        key.update(config.read_bytes() if config.is_file() else b"")
        for lesson in sorted(lessons):
            key.update(f"\0{lesson}\0{ws.source_digest(lesson)}".encode())
        folder = _assignment_cache() / key.hexdigest()[:40]
        if (folder / "gradebook.db").is_file() and all((folder / "release" / l).is_dir() for l in lessons):
            try:
                tmp = ws.path / ".gradebook.db.cached"
                shutil.copyfile(folder / "gradebook.db", tmp)
                for lesson in lessons:
                    dst = ws.path / "release" / lesson
                    if dst.exists():
                        shutil.rmtree(dst)
                    shutil.copytree(folder / "release" / lesson, dst)
                os.replace(tmp, ws.db_path)
                for lesson in lessons:
                    ws.mark_generated(lesson)
                return True
            except OSError:
                pass                         # generated below as without a cache
    for lesson in lessons:
        ws.generate_cached(lesson)
    if folder is not None:
        try:                                 # built aside, then renamed: shards storing at once cannot mix
            folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=folder.parent))
            shutil.copyfile(ws.db_path, tmp / "gradebook.db")
            for lesson in lessons:
                shutil.copytree(ws.path / "release" / lesson, tmp / "release" / lesson)
            try:
                os.rename(tmp, folder)
            except OSError:                  # another run stored it first
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass                             # the cache is an optimisation: grading goes on without it
    return False


class _ForkedJudge:
    """A judge forked by the judges' fork server (:func:`course.tools.judge.serve_forks`): not this
    process's child, so it is watched and killed through a pidfd (``Popen``'s interface, as used here)."""

    def __init__(self, pid: int, pidfd: int, stdin_fd: int, stdout_fd: int):
        self.pid, self.pidfd, self.returncode = pid, pidfd, None
        self.stdin = os.fdopen(stdin_fd, "w", encoding="utf-8")
        self.stdout = os.fdopen(stdout_fd, "r", encoding="utf-8")

    def poll(self):
        import select

        if self.returncode is None and select.select([self.pidfd], [], [], 0)[0]:
            self.returncode = -9
        return self.returncode

    def wait(self, timeout=None):
        import select

        if self.returncode is None:
            if not select.select([self.pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("judge", timeout)
            self.returncode = -9
        return self.returncode

    def kill(self):
        import signal

        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except OSError:
            pass

    def release(self):
        for thing in (self.stdin, self.stdout):
            try:
                thing.close()
            except OSError:
                pass
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1


class _Judges:
    """``jobs`` judge processes, each grading one notebook at a time. They are forked from one warm
    process, the fork server (``python -m course.tools.judge --forks=FD``), which imports everything
    once and launches their warm sandboxes first; a judge that dies is forked again from it in
    milliseconds. Where pidfds are missing (not Linux, or an old kernel) or the server fails, each
    judge is a ``python -m course.tools.judge`` of its own, as before."""

    def __init__(self, jobs: int, prestart: dict | None = None, sources: list | None = None):
        self.jobs = max(1, int(jobs))
        self.prestart = prestart           # the warm sandbox each judge launches first (sandbox.prestart_from_env)
        self.sources = [str(p) for p in sources or []]    # the lessons' instructor notebooks, read ahead
        self.procs: dict[int, object] = {}
        self.first: list[tuple] = []       # per judge process: (started, asked, answered, phases) of its first submission
        self._started: dict[int, float] = {}
        self.server = self._sock = None    # the fork server and the socket to it
        self._asked: list[tuple] = []      # fork requests not yet answered: (slot, stdin write end, stdout read end)
        self._lock = threading.Lock()
        self._closed = False

    def _env(self) -> dict:
        from course.tools import sandbox

        env = dict(os.environ, OMP_NUM_THREADS="1")
        env.pop(sandbox.PRESTART_ENV, None)
        if self.prestart is not None:
            env[sandbox.PRESTART_ENV] = json.dumps(self.prestart)
        return env

    def _start_server(self) -> None:
        import signal
        import socket

        if not (hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal") and hasattr(socket, "send_fds")):
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = self._env()
        env["COURSE_JUDGE_SOURCES"] = json.dumps(self.sources)
        try:
            self.server = subprocess.Popen([sys.executable, "-m", "course.tools.judge", f"--forks={theirs.fileno()}",
                                            f"--slots={self.jobs}"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, env=env, pass_fds=[theirs.fileno()],
                                           start_new_session=True)
        except OSError:
            ours.close()
            return
        finally:
            theirs.close()
        ours.settimeout(300)               # its imports take seconds; a server that never answers is given up
        self._sock = ours

    def _stop_server(self, wait: float = 10) -> None:
        asked, self._asked = self._asked, []
        for _, a, b in asked:              # forks asked for and never answered
            os.close(a)
            os.close(b)
        if self._sock is not None:
            try:
                self._sock.shutdown(2)     # EOF for the server, and wakes a thread waiting on its answer
            except OSError:
                pass
            self._sock.close()             # the server kills what is left and exits
            self._sock = None
        if self.server is not None:
            try:
                self.server.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, 9)
                self.server.wait()
            self.server = None

    def _ask_fork(self, slot: int) -> None:
        import socket

        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            socket.send_fds(self._sock, [json.dumps({"op": "fork", "slot": slot}).encode()], [in_r, out_w])
        except OSError:
            for fd in (in_w, out_r):
                os.close(fd)
            raise
        finally:
            os.close(in_r)                 # the server has its own copies now
            os.close(out_w)
        self._asked.append((slot, in_w, out_r))

    def _forked(self, slot: int):
        """The judge forked for ``slot`` (asked for before), or None if the server failed."""
        import socket

        while self._asked:
            try:
                data, fds, _, _ = socket.recv_fds(self._sock, 4096, 1)
                answer = json.loads(data)
            except Exception:  # noqa: BLE001 - no answer (the server failed, or the batch is being stopped)
                answer, fds = None, []
            try:
                asked_slot, in_w, out_r = self._asked.pop(0)
            except IndexError:                       # the batch was stopped meanwhile (close took them)
                for fd in fds:
                    os.close(fd)
                return None
            if not isinstance(answer, dict) or answer.get("ev") != "forked" or len(fds) != 1:
                for fd in (in_w, out_r, *fds):
                    os.close(fd)
                self._stop_server()
                return None
            judge = _ForkedJudge(int(answer["pid"]), fds[0], in_w, out_r)
            if asked_slot == slot:
                return judge
            self.procs[asked_slot] = judge
        return None

    def _proc(self, slot: int):
        with self._lock:
            if self._closed:
                raise RuntimeError("grading was stopped before this submission's judge started")
            p = self.procs.get(slot)
            if p is not None and p.poll() is None:
                return p
            if p is not None and isinstance(p, _ForkedJudge):
                p.release()
            p = None
            if self._sock is not None:
                if not any(s == slot for s, _, _ in self._asked):
                    try:
                        self._ask_fork(slot)
                    except OSError:
                        self._stop_server()
                if self._sock is not None:
                    p = self._forked(slot)
            if p is None:
                if self._closed:
                    raise RuntimeError("grading was stopped before this submission's judge started")
                p = subprocess.Popen([sys.executable, "-m", "course.tools.judge"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self._env(),
                                     start_new_session=True)
            self.procs[slot] = p
            self._started.setdefault(slot, time.perf_counter())
            return p

    def start_all(self) -> None:
        """Start the fork server now and ask for every judge (they are forked once its imports are done,
        while the batch is prepared here); without a server, start every judge process."""
        t = time.perf_counter()
        self._start_server()
        with self._lock:
            for slot in range(self.jobs):
                self._started[slot] = t
                if self._sock is not None:
                    try:
                        self._ask_fork(slot)
                    except OSError:
                        self._stop_server()
        if self._sock is None:
            for slot in range(self.jobs):
                self._proc(slot)

    def grade(self, slot: int, spec: dict) -> dict:
        asked = time.perf_counter()
        p = self._proc(slot)                         # waits for the fork server's imports, the first time
        started = self._started.pop(slot, None)      # set when this is the judge process's first submission
        answer = self._ask(slot, p, spec)
        if started is not None:
            self.first.append((started, asked, time.perf_counter(), answer.get("phases", {})))
        return answer

    def _ask(self, slot: int, p, spec: dict) -> dict:
        import select

        limit = float(spec.get("notebook_timeout", 600)) * 2 + 300     # the judge enforces its own limits first
        try:
            p.stdin.write(json.dumps(spec) + "\n")
            p.stdin.flush()
            ready, _, _ = select.select([p.stdout], [], [], limit)
            line = p.stdout.readline() if ready else ""
        except (BrokenPipeError, OSError, ValueError):
            line = ""
        if not line:
            self._kill(slot)
            return {"error": "the judge process stopped or stalled unexpectedly"}
        try:
            answer = json.loads(line)
        except ValueError:
            self._kill(slot)
            return {"error": "the judge process answered something unreadable"}
        if isinstance(answer, dict) and answer.get("judge_exits"):   # its watchdog stopped it: a fresh one next
            self._kill(slot)
        return answer

    def _kill(self, slot: int) -> None:
        with self._lock:
            p = self.procs.pop(slot, None)
        if p is None:
            return
        if isinstance(p, _ForkedJudge):                # a session of its own, its sandboxes die with it
            if p.poll() is None:                      # alive, so its pid (its process group's id) is its own
                try:
                    os.killpg(p.pid, 9)
                except (ProcessLookupError, PermissionError):
                    pass
            p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            p.release()
            return
        try:
            os.killpg(p.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self, hurry: bool = False):
        """End every judge: told to stop (they end side by side once idle), or with ``hurry`` (the batch
        was interrupted: they may be mid-submission) killed at once. Never waits on a grading thread: a
        thread still waiting for a fork gets no judge (``_proc`` refuses once closed)."""
        self._closed = True
        procs = list(dict(self.procs).values())      # a copy made at once, without the lock a fork may hold
        for p in procs:                               # every judge told first: they end side by side
            try:
                p.stdin.close()
            except (OSError, ValueError):
                pass
        for p in procs:
            try:
                if hurry:
                    raise subprocess.TimeoutExpired("judge", 0)
                p.wait(timeout=10)
            except Exception:  # noqa: BLE001
                if isinstance(p, _ForkedJudge) and p.poll() is None:
                    try:
                        os.killpg(p.pid, 9)
                    except (ProcessLookupError, PermissionError):
                        pass
                p.kill()
        self._stop_server(wait=3 if hurry else 10)    # the judges it forked die with it, their sandboxes with them


def _reusable(prev: dict | None, digest: str) -> bool:
    """Was this submission (same notebook, same lesson version) graded in the last run, for good?"""
    return bool(prev) and prev.get("sha256") == digest and prev.get("status") not in ("grader-error",)


def _needs_judge(prev: dict | None, folder: Path, lesson: str, version: str) -> bool:
    path, _ = _find_notebook(folder, lesson)
    return path is not None and not _reusable(prev, _sha256(path) + ":" + version)


def _progress(total: int, enabled: bool):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="nb", desc="grading", dynamic_ncols=True)


def grade(submissions: Path, out: Path, *, timeout: int = 60, lessons: list[str] | None = None, jobs: int | None = None,
          unsafe_no_sandbox: bool = False, regrade: bool = False, notebook_timeout: int | None = None,
          memory_mb: int = 4096, shard: tuple[int, int] | None = None, executor: str = "local",
          scheduler: str | None = None, retries: int = 2, progress=print) -> list[SubmissionResult]:
    """Grade every ``<student>/<lesson>/`` folder under ``submissions``; write the outputs to ``out``.

    ``shard=(i, n)`` grades only the submissions that :func:`shard_of` gives to shard ``i`` of ``n``
    (``--shard I/N``), and records that in ``out`` for :func:`merge`. ``executor="dask"`` sends each
    submission to a judge on a Dask worker (:mod:`course.tools.grading_dask`; an embedded LocalCluster
    of ``jobs`` workers, or the cluster at ``scheduler``; a submission whose worker dies is retried on
    another, ``retries`` times); everything else, results included, is written here as for local judges."""
    from course.tools import sandbox

    t_start = time.perf_counter()
    startup: dict[str, float] = {}          # the batch's start-up phases, printed at the end
    submissions = Path(submissions).resolve()
    if not submissions.is_dir():
        raise SystemExit(f"course grade: {submissions} is not a folder. Expected SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb.")
    if executor not in ("local", "dask"):
        raise ValueError(f"executor is 'local' or 'dask', not {executor!r}")
    if scheduler and executor != "dask":
        raise ValueError("a scheduler address is for executor='dask'")
    remote = executor == "dask" and bool(scheduler)     # the sandboxes are on the cluster's machines, not here
    if not unsafe_no_sandbox and not remote and sandbox._bwrap() is None:
        raise SystemExit("course grade: bubblewrap (bwrap) is not installed. Submissions are untrusted code and are "
                         "only run in a sandbox: " + sandbox.INSTALL_HINT + ".")
    jobs = jobs or os.cpu_count() or 1
    known = {l.id: l for l in all_lessons()}
    items: list[tuple[str, str, Path]] = []
    results: dict[tuple[str, str], SubmissionResult] = {}
    if shard is not None:
        shard = _check_shard(*shard)
    for student_dir in sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for lesson_dir in sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            if lessons and lesson_dir.name not in lessons:
                continue
            if shard is not None and shard_of(student_dir.name, lesson_dir.name, shard[1]) != shard[0]:
                continue
            if lesson_dir.name not in known:
                results[(student_dir.name, lesson_dir.name)] = SubmissionResult(
                    student_dir.name, lesson_dir.name, status="unknown-lesson",
                    detail=f"no lesson called {lesson_dir.name!r}; lessons are: {', '.join(known)}")
                continue
            items.append((student_dir.name, lesson_dir.name, lesson_dir))
    used = sorted({lesson for _, lesson, _ in items})
    out = Path(out).resolve()
    previous = {}
    results_path = out / "results.json"
    if results_path.is_file() and not regrade:
        try:
            for r in json.loads(results_path.read_text(encoding="utf-8")):
                previous[(r["student"], r["lesson"])] = r
        except (ValueError, KeyError, TypeError):
            previous = {}

    # Judges start now, if anything needs grading, and import their libraries while this process
    # prepares the workspace (both take seconds).
    version = {lesson: _sha256(known[lesson].solution) for lesson in used}    # = the workspace's source/
    only_cells = _only_cells()
    todo = sum(1 for student, lesson, folder in items if _needs_judge(
        previous.get((student, lesson)), folder, lesson, version[lesson] + _only_suffix(only_cells.get(f"{student}/{lesson}"))))
    # Scratch folders of the sandboxes (COURSE_GRADE_SCRATCH picks where: e.g. a faster disk).
    scratch_base = Path(tempfile.mkdtemp(prefix="course-grade-", dir=os.environ.get("COURSE_GRADE_SCRATCH") or None))
    os.chmod(scratch_base, 0o711)
    # The modules a warm sandbox imports first: those the lessons' own cells import (the instructor's
    # notebooks are the workspace's source/, hashed as `version` above).
    warm = sorted({m for lesson in used for m in _imported_modules(_unvalidated(known[lesson].solution))})
    # Each judge launches its warm sandbox as it starts, before its own imports.
    prestart = None if unsafe_no_sandbox else {"warm": warm, "limits": {"memory_mb": memory_mb}}
    if executor == "dask" and todo:
        from course.tools.grading_dask import DaskJudges

        judges = DaskJudges(min(jobs, max(1, todo)), scheduler, retries, prestart)     # in each worker's scratch
    else:
        judges = _Judges(min(jobs, max(1, todo)), prestart and dict(prestart, scratch_base=str(scratch_base)),
                         sources=[known[lesson].solution for lesson in used])
    if todo:
        judges.start_all()
    startup["scan"] = time.perf_counter() - t_start
    had_gradebook = (out / "gradebook.db").is_file()
    try:
        t = time.perf_counter()
        ws = Workspace(out, timeout=timeout).prepare(used)
        _record_shard(out, shard)
        startup["workspace"] = time.perf_counter() - t
        t = time.perf_counter()
        sources, releases, lesson_hash, files = {}, {}, {}, {}
        from_cache = _generate_assignments(ws, used, fresh=not had_gradebook)
        for lesson in used:
            sources[lesson] = ws.path / "source" / lesson / f"{lesson}.ipynb"
            releases[lesson] = nbformat.read(str(ws.path / "release" / lesson / f"{lesson}.ipynb"), as_version=4)
            lesson_hash[lesson] = _sha256(sources[lesson])
            files[lesson] = [str(p) for p in (ws.path / "release" / lesson).iterdir()
                             if p.is_file() and p.suffix != ".ipynb"]
        source_nbs = {l: nbformat.read(str(p), as_version=4) for l, p in sources.items()}
        hidden = {l: _hidden_lines(source_nbs[l], releases[l]) for l in used}
        startup["assignment" + (" (cached)" if from_cache else "")] = time.perf_counter() - t
        if todo:      # the gradebook's library (a second to import) loads while the judges start
            threading.Thread(target=_load_gradebook_library, daemon=True).start()
    except BaseException:
        judges.close(hurry=True)
        shutil.rmtree(scratch_base, ignore_errors=True)
        raise
    gradebook_kept = had_gradebook and ws.db_url == f"sqlite:///{ws.db_path}"    # else write kept results again
    keep_submitted = submissions != (ws.path / "submitted").resolve()   # `course workshop` grades in place
    lock = threading.Lock()
    if progress:
        which = f"shard {shard[0]}/{shard[1]}: " if shard else ""
        again = f" ({len(items) - todo} unchanged since the last run: kept)" if len(items) > todo else ""
        progress(f"course grade: {which}{len(items)} submissions{again}, {judges.jobs if todo else 0} at a time; "
                 f"isolation: {sandbox.describe(unsafe_no_sandbox, probe=False) if todo else 'none needed'}"
                 + (f"; on {judges.describe()}" if hasattr(judges, "describe") else ""))
        partial = sum(1 for student, lesson, _ in items if f"{student}/{lesson}" in only_cells)
        if partial:
            progress(f"course grade: $COURSE_GRADE_ONLY_CELLS is set: {partial} submission(s) graded on the test cells it "
                     "names only, the others scored 0 (a hook of the course's own tests, not for a class)")
    # The sandbox is not tried before the batch (that would cost as much as starting it): the judges
    # start it, and a sandbox that fails makes a grader-error (re-gradable, never run unsandboxed).
    # Then it is tried once, and if it cannot start on this machine at all the batch stops, saying why.
    broken_sandbox: list[str] = []

    gradebook = _GradebookWriter(ws)
    written = {"at": 0.0, "took": 0.0}

    def write_all(now: bool = True):
        """grades.csv and results.json as they stand. After a result (``now=False``), at most every 2 s (or
        20 times as long as the last write took): rewriting them after every result made a batch quadratic
        (293 results: 30 s of the grader's CPU). The end of the batch writes them whatever happens, and a
        run cut short (kill -9) grades what is missing again."""
        start = time.perf_counter()
        if not now and start - written["at"] < max(2.0, 20 * written["took"]):
            return
        _write_results(out, results.values())
        written.update(at=start, took=time.perf_counter() - start)

    def finish(res: SubmissionResult, nb=None, judged=None, kept=False):
        if nb is not None and judged is not None:     # the judge rendered the pages; write them
            lesson = res.lesson
            if judged.get("autograded"):
                _atomic_write(ws.path / "autograded" / res.student / lesson / f"{lesson}.ipynb", judged["autograded"])
            if judged.get("feedback_html"):
                path = ws.path / "feedback" / res.student / lesson / f"{lesson}.html"
                _atomic_write(path, _feedback_page(judged["feedback_html"], res, hidden[lesson]))
                res.feedback = str(path)
            else:
                res.detail += f"; feedback not written ({judged.get('feedback_error', 'no page')})"
        with lock:
            # A result kept from the last run is in this gradebook already (unless it was not written then).
            if res.status not in ("unknown-lesson",) and res.lesson in sources and not (
                    kept and gradebook_kept and "gradebook not updated" not in res.detail):
                try:
                    gradebook.record(res)
                except Exception as exc:  # noqa: BLE001
                    res.detail += f"; gradebook not updated ({type(exc).__name__}: {str(exc)[:120]})"
            results[(res.student, res.lesson)] = res
            if not kept:                        # kept ones are written with the next graded one, or at the end
                write_all(now=False)

    work: "queue.Queue" = queue.Queue()
    for item in items:
        work.put(item)
    bar = _progress(len(items), progress is not None and sys.stderr.isatty())
    done = [0]

    def report(res: SubmissionResult):
        done[0] += 1
        if bar is not None:
            bar.update(1)
            bar.set_postfix_str(shown(f"{res.student}/{res.lesson} {res.score:g}/{res.max_score:g} {res.status}"))
        elif progress:
            progress(shown(f"[{done[0]}/{len(items)}] {res.student}/{res.lesson}: {res.score:g}/{res.max_score:g} "
                           f"{res.status} ({res.seconds:.1f} s){' - ' + res.detail if res.detail else ''}"))

    def one(slot: int, student: str, lesson: str, folder: Path) -> SubmissionResult:
        start = time.perf_counter()
        max_score = _max_score(source_nbs[lesson])
        path, note = _find_notebook(folder, lesson)
        if path is None:
            status = "invalid-notebook" if isinstance(note, _Refused) else "missing-notebook"
            res = SubmissionResult(student, lesson, max_score=max_score, status=status, detail=note)
            finish(res)
            return res
        digest = _sha256(path) + ":" + lesson_hash[lesson]
        only = only_cells.get(f"{student}/{lesson}")
        digest += _only_suffix(only)
        copy = ws.path / "submitted" / student / lesson / f"{lesson}.ipynb"
        prev = previous.get((student, lesson))
        if _reusable(prev, digest) and (copy.is_file() or not keep_submitted):
            res = SubmissionResult(**{**prev, "cells": [CellResult(**c) for c in prev["cells"]]})
            finish(res, kept=True)
            return res
        nb, problem = _read_notebook(path)
        if nb is not None and keep_submitted:
            # nbgrader's own layout: the formgrader counts a lesson's submissions in submitted/.
            _atomic_write(copy, nbformat.writes(nb))
        if _reusable(prev, digest):
            res = SubmissionResult(**{**prev, "cells": [CellResult(**c) for c in prev["cells"]]})
            finish(res, kept=True)
            return res
        if nb is None:
            res = SubmissionResult(student, lesson, max_score=max_score, status="invalid-notebook", detail=problem, sha256=digest)
            finish(res)
            return res
        clean = scratch_base / f"{slot}.ipynb"
        nbformat.write(nb, str(clean))
        spec = {"notebook": str(clean), "source": str(sources[lesson]), "timeout": timeout,
                "notebook_timeout": notebook_timeout or max(600, timeout * 20), "scratch_base": str(scratch_base),
                "sandbox": not unsafe_no_sandbox, "limits": {"memory_mb": memory_mb}, "files": files[lesson],
                "submission": f"{student}/{lesson}",
                "release": str(ws.path / "release" / lesson / f"{lesson}.ipynb"), "warm": warm}
        if only is not None:
            spec["only_cells"] = list(only)
            note = (note + "; " if note else "") + f"graded on {', '.join(only) or 'no'} test cell(s) only ($COURSE_GRADE_ONLY_CELLS)"
        judged = judges.grade(slot, spec)
        res = SubmissionResult(student, lesson, max_score=max_score, sha256=digest)
        if "error" in judged:
            res.status, res.detail = "grader-error", f"{note + '; ' if note else ''}{judged['error']}"
            res.cells = [CellResult(c.metadata.nbgrader.grade_id, 0.0, float(c.metadata.nbgrader.get("points", 0)), False,
                                    "not graded") for c in _test_cells(source_nbs[lesson])]
        else:
            res.cells = [CellResult(c["grade_id"], float(c["points"]), float(c["max_points"]), bool(c["passed"]), c["message"])
                         for c in judged["cells"]]
            res.score = float(sum(c.points for c in res.cells))
            deleted = [c["grade_id"] for c in judged["cells"] if c.get("deleted")]
            events = judged.get("events", [])
            problems = []
            if deleted:
                problems.append(f"test cells deleted: {', '.join(deleted)} (scored 0)")
            timeouts = [e for e in events if e.startswith("timeout") or "time limit" in e]
            deaths = [e for e in events if e.startswith("died") or "died" in e]
            if timeouts:
                problems.append(f"stopped after {timeout} s: {', '.join(timeouts)}")
            if deaths:
                problems.append("the student's process died and was restarted: " + ", ".join(deaths))
            if judged.get("suspicious"):
                problems.append("suspicious code: " + "; ".join(judged["suspicious"][:6]))
            broken = [e for e in events if e.startswith("sandbox:")]   # the sandbox itself failed: re-gradable
            if broken:
                problems.append("the grader's sandbox failed: " + "; ".join(broken))
                res.score = 0.0   # as every grader-error: nothing counts until it is graded again
                res.cells = [CellResult(c.grade_id, 0.0, c.max_points, False,
                                        "not graded: the grader's sandbox failed (graded again by the next run)")
                             for c in res.cells]      # so the gradebook and feedback say 0 too, as results.json
            res.status = ("grader-error" if broken else "suspicious" if judged.get("suspicious") else
                          "kernel-died" if deaths else
                          "timeout" if timeouts else "test-cells-deleted" if deleted else "graded")
            res.detail = "; ".join(([note] if note else []) + problems)
            res.phases = judged.get("phases", {})
        res.seconds = round(time.perf_counter() - start, 2)
        finish(res, nb, judged if "error" not in judged else None)
        return res

    def worker(slot: int):
        while not broken_sandbox:
            try:
                student, lesson, folder = work.get_nowait()
            except queue.Empty:
                return
            try:
                res = one(slot, student, lesson, folder)
            except Exception as exc:  # noqa: BLE001 - never stop the batch
                res = SubmissionResult(student, lesson, status="grader-error", detail=f"{type(exc).__name__}: {exc}")
                finish(res)
            with lock:
                report(res)
            if res.status == "grader-error" and "sandbox failed" in res.detail and not unsafe_no_sandbox and not remote:
                ok, why = sandbox.available()
                if not ok:
                    broken_sandbox.append(why)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(judges.jobs)]
    interrupted = True
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        interrupted = False
    finally:
        judges.close(hurry=interrupted)
        if bar is not None:
            bar.close()
        shutil.rmtree(scratch_base, ignore_errors=True)
        with lock:
            gradebook.close()
            write_all()
    if broken_sandbox:
        raise SystemExit(f"course grade: {broken_sandbox[0]}. Submissions are untrusted code and are only run in a "
                         f"sandbox: {sandbox.INSTALL_HINT}. Nothing was graded without it; the results so far are "
                         "grader-error, graded again by the next run.")
    ordered = sorted(results.values(), key=lambda r: (r.student, r.lesson))
    if progress:
        n = max(1, len(items))
        progress(f"graded {len(items)} submissions in {time.perf_counter() - t0:.1f} s "
                 f"({(time.perf_counter() - t0) / n:.2f} s each with {judges.jobs} jobs)")
        progress(_startup_line({**startup, **getattr(judges, "phases", {})}, judges.first, t_start))
    return ordered


def _process_age() -> float | None:
    """Seconds since this process started (Linux), to count Python's start and imports; else None."""
    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return float(Path("/proc/uptime").read_text().split()[0]) - int(fields[19]) / ticks
    except (OSError, ValueError, IndexError):
        return None


def _startup_line(startup: dict, first: list, t_start: float) -> str:
    """What the batch paid before its first verdict, phase by phase (``course grade`` prints it)."""
    age = _process_age()
    before = age - (time.perf_counter() - t_start) if age is not None else None
    parts = ([f"python and imports {before:.1f} s"] if before is not None else []) + \
        [f"{name} {seconds:.1f} s" for name, seconds in startup.items()]
    if first:
        started, asked, answered, phases = min(first, key=lambda f: f[2])
        work = sum(phases.values()) - phases.get("start", 0.0)      # grading that submission itself
        waited = max(0.0, answered - asked - sum(phases.values()))
        # Each judge launches its warm sandbox as it starts: the sandbox's wait is what was left after the judge's.
        parts += [f"judge start {waited:.1f} s (after {asked - started:.1f} s alongside the above)",
                  f"warm sandbox {phases.get('start', 0.0):.1f} s more"]
        overhead = answered - t_start - work + (before or 0.0)
        return f"start-up: {', '.join(parts)}; per-batch cost {overhead:.1f} s before the first verdict"
    return f"start-up: {', '.join(parts)}; nothing needed a judge"


SHARD_FILE = ".course-shard.json"      # in a shard's --out: which shard of how many it graded


def shard_of(student: str, lesson: str, count: int) -> int:
    """The shard, ``0 .. count - 1``, that grades ``student``'s ``lesson``: SHA-256 of the two names, so
    every machine, Python version and run agrees (Python's own ``hash()`` is salted per process)."""
    digest = hashlib.sha256(f"{student}\0{lesson}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def _check_shard(index: int, count: int) -> tuple[int, int]:
    if not (isinstance(index, int) and isinstance(count, int) and 0 <= index < count):
        raise ValueError(f"a shard is I/N with 0 <= I < N (got {index}/{count})")
    return index, count


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` (0-based, as a Slurm array index or a Kubernetes completion index) -> ``(I, N)``."""
    try:
        index, count = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise ValueError(f"--shard takes I/N, e.g. 0/4 (shards 0 to 3 of 4); got {text!r}") from None
    return _check_shard(index, count)


def _record_shard(out: Path, shard: tuple[int, int] | None) -> None:
    path = out / SHARD_FILE
    if shard is None:
        path.unlink(missing_ok=True)
    else:
        _atomic_write(path, json.dumps({"shard": shard[0], "of": shard[1]}) + "\n")


class MergeError(Exception):
    """Shards that cannot be merged as they are (overlapping, incomplete, or graded on other lesson versions)."""


def merge(inputs: list[Path], out: Path, *, db_url: str | None = None, progress=print) -> list[SubmissionResult]:
    """Merge the results of ``course grade --shard`` runs into ``out``: the only writer of its
    ``grades.csv``, ``results.json``, ``feedback/``, ``autograded/``, ``submitted/`` and gradebook.

    Refuses (:class:`MergeError`) shards that overlap (a submission graded in two), that were graded
    with different shard counts or against other versions of a lesson than each other or this
    checkout, and an incomplete set. Idempotent: merging again writes the same files, and only
    submissions whose result changed since the last merge into the same gradebook are written to it.
    ``db_url`` puts the gradebook in that database (nbgrader's ``CourseDirectory.db_url``, e.g.
    ``postgresql://user@host/db``) instead of ``out/gradebook.db``.
    """
    import filecmp

    out = Path(out).resolve()
    inputs = [Path(p).resolve() for p in inputs]
    if not inputs:
        raise MergeError("nothing to merge: name the --out folders of the shards")
    if len(set(inputs)) != len(inputs):
        raise MergeError("a shard folder is named twice")
    if out in inputs:
        raise MergeError(f"--out {out} is one of the shards: merge into a folder of its own")
    shards, found = {}, {}
    for folder in inputs:
        try:
            rows = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        except OSError:
            raise MergeError(f"{folder} has no results.json: has that shard run (course grade ... --out {folder})?") from None
        except ValueError as exc:
            raise MergeError(f"{folder}/results.json is not readable JSON ({exc})") from None
        try:
            spec = json.loads((folder / SHARD_FILE).read_text(encoding="utf-8"))
            shards[folder] = (int(spec["shard"]), int(spec["of"]))
        except OSError:
            shards[folder] = None
        for row in rows:
            res = SubmissionResult(**{**row, "cells": [CellResult(**c) for c in row.get("cells", [])]})
            key = (res.student, res.lesson)
            if key in found:
                raise MergeError(f"{res.student}/{res.lesson} is in two shards, {found[key][0]} and {folder}: "
                                 "each submission must be graded by exactly one shard")
            sh = shards[folder]
            if sh is not None and shard_of(res.student, res.lesson, sh[1]) != sh[0]:
                raise MergeError(f"{folder} holds {res.student}/{res.lesson}, which belongs to shard "
                                 f"{shard_of(res.student, res.lesson, sh[1])}/{sh[1]}, not {sh[0]}/{sh[1]}: "
                                 "was that folder graded without --shard, or with another one?")
            found[key] = (folder, res)
    counts = {sh[1] for sh in shards.values() if sh}
    if len(counts) > 1:
        raise MergeError("the shards were cut in different numbers: " +
                         ", ".join(f"{f} is {sh[0]}/{sh[1]}" for f, sh in shards.items() if sh))
    if counts:
        (count,) = counts
        seen = {}
        for folder, sh in shards.items():
            if sh and sh[0] in seen:
                raise MergeError(f"{seen[sh[0]]} and {folder} are both shard {sh[0]}/{count}")
            if sh:
                seen[sh[0]] = folder
        missing = sorted(set(range(count)) - set(seen))
        if missing:
            raise MergeError(f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing: merge every shard "
                             "of the batch (their grades.csv would be incomplete otherwise)")

    known = {l.id: l for l in all_lessons()}
    used = sorted({lesson for _, lesson in found if lesson in known})
    current = {lesson: _sha256(known[lesson].solution) for lesson in used}   # what a workspace's source/ holds
    for (student, lesson), (folder, res) in sorted(found.items()):
        if ":only:" in res.sha256:
            raise MergeError(f"{folder} graded {student}/{lesson} on some test cells only ($COURSE_GRADE_ONLY_CELLS, "
                             "a hook of the course's own tests): grade that shard again without it")
        version = res.sha256.partition(":")[2]
        if version and lesson in current and version != current[lesson]:
            others = sorted({str(f) for f, r in found.values() if r.lesson == lesson
                             and r.sha256.partition(":")[2] == current[lesson]})
            raise MergeError(f"{folder} graded {lesson} against another version of the lesson than "
                             + (f"{', '.join(others)} and " if others else "") + "this checkout's solutions/ "
                             f"(e.g. {student}/{lesson}): grade that shard again with this version")
    had_gradebook = (out / "gradebook.db").is_file()
    ws = Workspace(out, db_url=db_url).prepare(used)
    _generate_assignments(ws, used, fresh=not had_gradebook)

    record = out / ".course-merged.json"
    previous = {}
    try:
        if json.loads(record.read_text(encoding="utf-8")).get("db_url") == ws.db_url:
            previous = {(r["student"], r["lesson"]): r for r in json.loads((out / "results.json").read_text(encoding="utf-8"))}
    except (OSError, ValueError, KeyError, TypeError):
        previous = {}
    merged, written = [], 0
    gradebook = _GradebookWriter(ws)
    try:
        for (student, lesson), (folder, res) in sorted(found.items()):
            for kind, name in (("feedback", f"{lesson}.html"), ("autograded", f"{lesson}.ipynb"),
                               ("submitted", f"{lesson}.ipynb")):
                src, dst = folder / kind / student / lesson / name, out / kind / student / lesson / name
                if src.is_file() and not (dst.is_file() and filecmp.cmp(src, dst, shallow=False)):
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    tmp = dst.with_name(f".{name}.merge")
                    shutil.copyfile(src, tmp)
                    os.replace(tmp, dst)
                if kind == "feedback":
                    res.feedback = str(dst) if src.is_file() else ""
            if lesson in current and previous.get((student, lesson)) != asdict(res):
                gradebook.record(res)
                written += 1
            merged.append(res)
    finally:
        gradebook.close()
    _write_results(out, merged)
    _atomic_write(record, json.dumps({"db_url": ws.db_url, "shards": [str(f) for f in inputs]}, indent=1) + "\n")
    if progress:
        where = str(ws.db_path) if ws.db_url == f"sqlite:///{ws.db_path}" else _without_password(ws.db_url)
        progress(f"course grade merge: {len(merged)} submissions from {len(inputs)} folder(s) into {out}; "
                 f"gradebook {where}: {written} written, {len(merged) - written} unchanged")
    return merged


def _without_password(url: str) -> str:
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only for a message
        return url.split("@")[-1]


def summary_table(results: list[SubmissionResult], width: int = 110) -> str:
    rows = [("student", "lesson", "score", "status")]
    for r in results:
        rows.append((shown(r.student), shown(r.lesson), f"{r.score:g}/{r.max_score:g}", r.status))
    widths = [min(max(len(row[i]) for row in rows), 30) for i in range(len(rows[0]))]
    lines = ["  ".join(c[:w].ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    details = [shown(f"  {r.student}/{r.lesson} ({r.status}): {r.detail}")[:width * 3] for r in results if r.detail]
    if details:
        lines += ["", "details:"] + details
    ok = sum(r.status in OK_STATUSES for r in results)
    lines.append(f"\n{ok} of {len(results)} submissions graded cleanly; {len(results) - ok} need a look.")
    return "\n".join(lines)

"""A submission on its way in: found in its folder, read as a file (never through a link), measured before
it is parsed (so that no notebook can make the grader's own process hold gigabytes), parsed, checked
against the notebook format, and rebuilt against the lesson's release (:func:`against_release`): what
the grader keeps of it is the release's cells, metadata and points, and the learner's sources. Whatever
is wrong becomes a reason, never an exception."""

from __future__ import annotations

import array
import copy
import stat
import os
import re
import threading
from pathlib import Path

import nbformat

from course.grading.results import atomic_write
from course.grading import owned
import hashlib

MAX_NOTEBOOK_BYTES = 100 * 2**20       # a notebook larger than this is refused unread
MAX_CELLS = 2000                        # more cells than this: refused (rendering them would take minutes)
MAX_SOURCE_CHARS = 4_000_000            # characters of cell sources (code, Markdown, raw) a notebook may hold
# What the JSON of a notebook may hold, counted before it is parsed. An executed lesson holds under 1 000 objects
# and arrays and under 10 000 values (all 17 lessons, `make run`: at most 846 and 7 628); millions of empty objects in its metadata took the
# grader's process to 3.7 GB for an 8 MiB file (16.6 GB for 95 MiB), and 200 000 small objects to +350 MB each.
MAX_JSON_CONTAINERS = 50_000            # objects and arrays
MAX_JSON_VALUES = 500_000               # values of every kind (strings, numbers, objects, arrays...)
MAX_JSON_DEPTH = 64                     # nesting
# Notebooks whose parse holds the most memory are parsed one at a time in a batch: larger than this, or with
# more values than this (a parsed value costs about 100 bytes, its text often under 5).
BIG_NOTEBOOK = 16 * 2**20
BIG_VALUES = 100_000
_BIG = threading.BoundedSemaphore(1)
_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"')     # a JSON string, escapes included (possessive: no backtracking)
_BRACKETS = bytes(range(256)).translate(None, b"[]{}")  # every byte but the four brackets


class Refused(str):
    """Why a handed-in file is refused unread (a link, a special file): status ``invalid-notebook``."""


def _link_problem(path: Path, what: str) -> str | None:
    """Why ``path`` must not be read as a submission, from ``lstat`` (links are never followed)."""

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


def find_notebook(folder: Path, lesson: str) -> tuple[Path | None, str]:
    """The submitted notebook of ``<student>/<lesson>/``, or ``(None, why)``.

    Read with ``lstat``, never through a link: a notebook, lesson folder or student folder that is a
    symbolic link, a hard link (``st_nlink > 1``) or a special file (FIFO, device, socket) is refused,
    with a :class:`Refused` reason (status ``invalid-notebook``). Links are refused even when they
    stay inside the submissions folder: a link from one student's folder to another's is exactly the
    case to refuse, and an instructor who copies submissions in gets plain files anyway.
    """
    for part, what in ((folder.parent, "folder"), (folder, "folder")):
        problem = _link_problem(part, what)
        if problem:
            return None, Refused(problem)
    expected = folder / f"{lesson}.ipynb"
    if os.path.lexists(expected):
        problem = _link_problem(expected, "the notebook")
        return (None, Refused(problem)) if problem else (expected, "")
    try:
        others = sorted(Path(e.path) for e in os.scandir(folder) if e.name.endswith(".ipynb") and not e.name.startswith("."))
    except OSError as exc:
        return None, f"cannot list {folder}: {exc.strerror or exc}"
    if len(others) == 1:
        problem = _link_problem(others[0], "the notebook")
        if problem:
            return None, Refused(problem)
        return others[0], f"graded {others[0].name} (expected the name {lesson}.ipynb)"
    found = ", ".join(p.name for p in others) or "nothing"
    return None, f"expected {lesson}.ipynb in {folder}; found {found}. Ask the student to hand in {lesson}.ipynb."


def open_submission(path: Path) -> tuple[int | None, str]:
    """A descriptor of the handed-in file ``<submissions>/<student>/<lesson>/<name>``, or ``(None, why)``.

    Opened through descriptors from the submissions folder down (:func:`course.grading.owned.open_folder`), each
    component with ``O_NOFOLLOW``: a student or lesson folder swapped for a link after :func:`find_notebook` looked
    at it is refused, never followed, as the file itself is."""
    folder, why = owned.open_folder(path.parents[2], [path.parent.parent.name, path.parent.name])
    if folder is None:
        return None, Refused(f"the folder {why} (links are never followed; hand in plain folders and files)")
    try:
        return os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0),
                       dir_fd=folder), ""
    except OSError as exc:
        problem = _link_problem(path, "the notebook")
        return None, problem or f"cannot read {path.name}: {exc.strerror or exc}"
    finally:
        os.close(folder)


def submission_digest(path: Path) -> str:
    """The SHA-256 of the handed-in file, read as :func:`read_notebook` reads it ("" when it cannot be)."""
    fd, _ = open_submission(path)
    if fd is None:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or st.st_size > MAX_NOTEBOOK_BYTES:
            return ""
        digest = hashlib.sha256()
        with os.fdopen(fd, "rb", closefd=False) as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def read_notebook(path: Path, keep: Path | None = None):
    """The submission as an nbformat notebook, or a readable reason why it is not one.

    Opened with ``O_NOFOLLOW | O_NONBLOCK`` and checked again on the open file (a regular file with one
    name, not too large), so nothing is read through a link or from a pipe or device."""

    fd, problem = open_submission(path)
    if fd is None:
        return None, problem
    held: list = []
    try:
        return _read_open(path, fd, keep, held)
    finally:
        if held:                             # one heavy notebook at a time: the grader's peak memory stays bounded
            _BIG.release()


def _read_open(path: Path, fd: int, keep: Path | None, held: list):
    """:func:`read_notebook` on the open ``fd`` (closed here). Takes :data:`_BIG` (and says so in ``held``) for a
    file larger than :data:`BIG_NOTEBOOK` before reading it, and for one with more than :data:`BIG_VALUES` values
    before parsing it."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1 or st.st_size > MAX_NOTEBOOK_BYTES:
            return None, _link_problem(path, "the notebook") or f"{path.name} is not a plain notebook file"
        if st.st_size > BIG_NOTEBOOK:
            _BIG.acquire()
            held.append(True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError as exc:
        return None, f"cannot read {path.name}: {exc.strerror or exc}"
    finally:
        os.close(fd)
    if len(data) > MAX_NOTEBOOK_BYTES:
        return None, f"{path.name} is larger than the {MAX_NOTEBOOK_BYTES // 2**20} MiB a notebook may be."
    counted = json_counts(data)
    if isinstance(counted, str):
        return None, (f"{path.name} {counted}. A lesson's notebook, run and saved, is far below that: clear the outputs "
                      "(Edit > Clear Outputs of All Cells), save, and hand it in again.")
    if not held and (len(data) > BIG_NOTEBOOK or counted[1] > BIG_VALUES):
        _BIG.acquire()
        held.append(True)
    if keep is not None:                     # the file as handed in, from the bytes read (not from a parse)
        atomic_write(keep, data)
    pieces = [data]
    del data                                 # parsed from `pieces`, which lets go of the bytes once decoded
    nb, problem = _parsed(path, pieces)
    if nb is None and keep is not None:
        keep.unlink(missing_ok=True)
    return nb, problem


def json_counts(data: bytes) -> tuple[int, int] | str:
    """``(objects and arrays, values)`` in ``data``, a notebook's JSON not parsed yet, or what in it is over the
    caps (:data:`MAX_JSON_CONTAINERS`, :data:`MAX_JSON_VALUES`, :data:`MAX_JSON_DEPTH`), in words.

    Counted on the bytes without copying them and without building a Python object per value: brackets and
    commas are counted over the whole text, less those inside strings (each string's span counted in place);
    a comma separates two values. The nesting is followed on the text between strings, a piece at a time."""
    quotes = data.count(b'"')
    if quotes > 2 * MAX_JSON_VALUES + data.count(b'\\"'):
        return f"holds more than {MAX_JSON_VALUES:,} strings (the cap on a notebook's values)"
    containers, commas = data.count(b"{") + data.count(b"["), data.count(b",")
    gaps = array.array("q", [0])             # the text between strings: start, end, start, ... (16 bytes a string)
    for m in _STRING.finditer(data):
        i, j = m.span()
        containers -= data.count(b"{", i, j) + data.count(b"[", i, j)
        commas -= data.count(b",", i, j)
        gaps.extend((i, j))
    gaps.append(len(data))
    if containers > MAX_JSON_CONTAINERS:
        return (f"holds {containers:,} JSON objects and arrays, more than the {MAX_JSON_CONTAINERS:,} a notebook may "
                "(metadata or outputs padded with empty objects?)")
    values = commas + containers
    if values > MAX_JSON_VALUES:
        return f"holds {values:,} JSON values, more than the {MAX_JSON_VALUES:,} a notebook may"
    depth = deepest = 0
    view = memoryview(data)
    for start, end in zip(gaps[::2], gaps[1::2]):
        for at in range(start, end, 1 << 20):                   # the text between two strings, 1 MiB at a time
            for byte in view[at:min(end, at + (1 << 20))].tobytes().translate(None, _BRACKETS):
                depth += 1 if byte in (0x5B, 0x7B) else -1
                if depth > deepest:
                    deepest = depth
                    if deepest > MAX_JSON_DEPTH:
                        return f"nests JSON more than {MAX_JSON_DEPTH} levels deep (a notebook needs about ten)"
    return containers, values


def _parsed(path: Path, held: list[bytes]):
    try:
        text = held.pop().decode("utf-8")          # the bytes are let go of here: no one else holds them
    except UnicodeDecodeError as exc:
        return None, f"cannot read {path.name}: {exc}"
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - JSON or schema errors of every kind
        return None, f"{path.name} is not a valid notebook ({type(exc).__name__}: {str(exc).splitlines()[0][:200]}). " \
                     "It may be truncated or edited outside Jupyter; ask the student to re-save and resubmit it."
    del text
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


_FENCED = re.compile(r"(`{3,})text\n(.*)\n\1", re.S)
_CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
STUDENT_NAME = re.compile(r"[\w.@+-]{1,100}")        # a folder name that is a student id (any letters, no markup)


def name_problem(name: str, what: str) -> str | None:
    """Why a folder name cannot be a student's (or lesson's) id: the formgrader, the gradebook and the pages
    show it, so it holds only letters, digits and ``. _ @ + -``."""
    if STUDENT_NAME.fullmatch(name) and name not in (".", ".."):
        return None
    shown = "".join(c if c.isprintable() else "?" for c in name[:60])
    return (f"the {what} folder {shown!r} is not a {what} id: an id holds letters, digits and . _ @ + - only (it is "
            "shown in the formgrader, the gradebook and every page); rename the folder")


def against_release(nb, release):
    """The submission rebuilt from the lesson's release: ``(notebook, notes, flags)``.

    The notebook's metadata is the release's. Each cell keeps its type, its source and (a well-formed) id; its
    metadata is the release's for the cell it claims to be (by nbgrader ``grade_id`` and type, its first copy
    only), else none: nothing a learner writes in metadata (a ``grade_id`` holding markup, tags, widget state,
    attachments) reaches the graded notebook, the formgrader or a page. Markdown and raw cells that are not
    the lesson's own text become fenced plain text; the lesson's own keep the release's attachments (its
    diagrams). A later copy of a lesson's test cell keeps that cell's
    metadata for the judge, which ignores it and reports it. ``notes``: what was changed, for the detail;
    ``flags``: nbgrader metadata the lesson does not have (a submission that forges cells), reported as
    suspicious."""
    known = {}
    for cell in release.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if isinstance(gid, str):
            known.setdefault(gid, cell)
    lesson_text = {c.source: c for c in release.cells if c.cell_type != "code"}
    out = nbformat.v4.new_notebook(metadata=copy.deepcopy(dict(release.metadata)))
    out.nbformat, out.nbformat_minor = release.get("nbformat", 4), release.get("nbformat_minor", out.nbformat_minor)
    notes, flags, used, ids = [], [], set(), set()
    for i, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {})
        claim = meta.get("nbgrader") if isinstance(meta, dict) else None
        gid = claim.get("grade_id") if isinstance(claim, dict) else None
        twin = known.get(gid) if isinstance(gid, str) else None
        if twin is not None and twin.cell_type != cell.cell_type:
            twin = None
        metadata = {}
        if twin is not None and gid not in used:
            used.add(gid)
            metadata = copy.deepcopy(dict(twin.metadata))
        elif twin is not None and twin.metadata.get("nbgrader", {}).get("grade"):
            metadata = copy.deepcopy(dict(twin.metadata))        # a pasted test cell: the judge ignores it
        elif twin is not None:
            notes.append(f"cell {i} is a second copy of the lesson's cell {gid}: its nbgrader metadata was removed")
        elif claim is not None:
            flags.append(f"cell {i}: nbgrader metadata the lesson does not have ({str(gid)[:40]!r}): removed")
        source = cell.source if isinstance(cell.source, str) else ""
        if cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(source, metadata=metadata)
        elif cell.cell_type == "markdown" and source in lesson_text and not metadata:
            new = nbformat.v4.new_markdown_cell(source, metadata=copy.deepcopy(dict(lesson_text[source].metadata)))
            if lesson_text[source].get("attachments"):      # the lesson's diagrams: the release's own, never the learner's
                new["attachments"] = copy.deepcopy(dict(lesson_text[source].attachments))
        elif cell.cell_type == "markdown" and metadata:
            new = nbformat.v4.new_markdown_cell(source, metadata=metadata)
        else:
            new = nbformat.v4.new_markdown_cell(as_plain_text(source))
        cid = cell.get("id")
        if isinstance(cid, str) and _CELL_ID.fullmatch(cid) and cid not in ids:
            new["id"] = cid
        ids.add(new.get("id"))
        out.cells.append(new)
    return out, notes, flags


def as_plain_text(source: str) -> str:
    """A learner's Markdown or raw cell as its text in a fenced block: no HTML, link or image of it renders
    (nbgrader's formgrader renders notebooks without sanitising, in the instructor's Jupyter, where a script
    would act as the instructor). Text already fenced this way is kept as it is (intake and the judge both
    rebuild a submission: the second pass changes nothing)."""
    m = _FENCED.fullmatch(source)
    if m and max((len(r) for r in re.findall(r"`+", m.group(2))), default=0) < len(m.group(1)):
        return source
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", source)), default=0))
    return f"{fence}text\n{source}\n{fence}"

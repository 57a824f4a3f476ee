"""Similar submissions: pairs of one lesson's submissions whose code shares more than a threshold, found with
copydetect (winnowing, as MOSS does: the code is tokenised, names replaced by placeholders, fingerprinted by
k-grams, and the released starter code's fingerprints left out as boilerplate). Renaming variables or reordering
functions keeps a pair alike; two people who wrote their own keep theirs apart.

Similarity is evidence to look at, never a verdict: short exercises leave little room to differ, and learners may
legitimately share an idea from the same lecture. The report says so beside every pair.
"""

from __future__ import annotations

import html
import io
import logging
from dataclasses import dataclass
from pathlib import Path

import nbformat
import numpy as np

from course.grading.intake import name_problem

__all__ = ["Pair", "Pairs", "learner_code", "similar_pairs", "K", "THRESHOLD", "MIN_SHARED", "SHOWN"]

K = 25                 # characters of a k-gram of the normalised code (copydetect's noise threshold)
WINDOW = 1             # every k-gram is kept (winnowing window)
THRESHOLD = 0.9        # one of the two has at least this share of its code in the other (the larger share: dead
                       # code added to a copy lowers only the copy's own share); a copy with its names changed and
                       # its functions reordered shares 0.98-1.00, two honest answers of lesson 03's six short
                       # exercises about 0.84, of lesson 05 at most 0.44
MIN_SHARED = 100       # and at least this many characters of normalised code beyond the starter code: two one-line
                       # answers written into the same stubs share the few characters around them, not an answer
SHOWN = 50             # pairs shown with their code, most alike first (a class of copies: 200 give 19 900 pairs)


@dataclass
class Pair:
    lesson: str
    a: str
    b: str
    similarity: float                  # the larger of the two shares: how much of one is the other's
    shares: tuple[float, float]
    code_a: str                        # each side's code, with the shared parts marked (escaped HTML)
    code_b: str


def learner_code(notebook: Path, solution_cells: list[str], released: set[str] = frozenset()) -> str:
    """The learner's answers in a handed-in notebook: the sources of its solution cells, in the lesson's order, then
    every other code cell she added or changed (not a cell of the release, ``released``): an answer written into a
    new cell beside an untouched stub is hers too."""
    try:
        nb = nbformat.read(str(notebook), as_version=4)
    except Exception:  # noqa: BLE001 - an unreadable notebook has no code to compare
        return ""
    by_id, extra = {}, []
    for cell in nb.cells:
        if cell.cell_type != "code" or not isinstance(cell.source, str):
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if gid in solution_cells and gid not in by_id:
            by_id[gid] = cell.source
        elif not (isinstance(meta, dict) and meta.get("grade")) and cell.source.strip() not in released:
            extra.append(cell.source)
    return "\n\n".join([by_id[g] for g in solution_cells if g in by_id] + extra)[:200_000]


def _fingerprint(code: str, boilerplate=None):
    # lazy: copydetect (and its Pygments) only for a report with several submissions of a lesson
    import copydetect

    logging.getLogger().setLevel(max(logging.getLogger().level, logging.ERROR))   # copydetect warns on stderr
    return copydetect.CodeFingerprint("answer.py", K, WINDOW, boilerplate=boilerplate, fp=io.StringIO(code),
                                      language="python")


def boilerplate_of(stubs: str):
    """The fingerprints of the released starter code (as copydetect's own boilerplate: a sorted array), or None."""
    if not stubs.strip():
        return None
    return np.unique(np.array(list(_fingerprint(stubs).hashes), dtype=np.int64))


def _marked(code: str, slices) -> str:
    """``code`` as escaped HTML with the shared slices in ``<mark>``."""
    out, at = [], 0
    for start, end in sorted(zip(list(slices[0]), list(slices[1]))):
        start, end = int(start), int(end)
        if start < at:
            start = at
        if end <= start:
            continue
        out.append(html.escape(code[at:start]))
        out.append(f"<mark>{html.escape(code[start:end])}</mark>")
        at = end
    out.append(html.escape(code[at:]))
    return "".join(out)


class Pairs(list):
    """The pairs shown (at most :data:`SHOWN`, most alike first); ``total``: how many were found."""

    total = 0


def similar_pairs(lesson: str, codes: dict[str, str], stubs: str, *, threshold: float = THRESHOLD) -> Pairs:
    """The pairs of ``codes`` (student -> code) in which one has at least ``threshold`` of its code in the other and
    the two share at least :data:`MIN_SHARED` characters of normalised code, most alike first (the first
    :data:`SHOWN` of them with their code; ``.total`` counts them all)."""
    # lazy: as above
    import copydetect

    boiler = boilerplate_of(stubs)
    prints = {s: _fingerprint(c, boiler) for s, c in sorted(codes.items()) if c.strip()}
    names = sorted(prints)
    found = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            overlap, shares, slices = copydetect.compare_files(prints[a], prints[b])
            high = float(max(shares))
            if overlap >= MIN_SHARED and high >= threshold:
                found.append((-high, a, b, (float(shares[0]), float(shares[1])), slices))
    found.sort(key=lambda f: (f[0], f[1], f[2]))
    pairs = Pairs(Pair(lesson, a, b, -neg, shares, _marked(prints[a].raw_code, slices[0]),
                       _marked(prints[b].raw_code, slices[1])) for neg, a, b, shares, slices in found[:SHOWN])
    pairs.total = len(found)
    return pairs


def codes_of(out: Path, lesson: str, students: list[str], solution_cells: list[str],
             released: set[str] = frozenset()) -> dict[str, str]:
    """Each student's answers for ``lesson``, read from the grading folder's kept copies (``submitted/``)."""
    found = {}
    for student in students:
        if name_problem(student, "student") is not None:      # a refused folder: nothing of it was kept
            continue
        path = Path(out) / "submitted" / student / lesson / f"{lesson}.ipynb"
        if path.is_file() and not path.is_symlink():
            found[student] = learner_code(path, solution_cells, released)
    return found

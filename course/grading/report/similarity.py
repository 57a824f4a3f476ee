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

__all__ = ["Pair", "learner_code", "similar_pairs", "K", "THRESHOLD", "MIN_SHARED"]

K = 25                 # characters of a k-gram of the normalised code (copydetect's noise threshold)
WINDOW = 1             # every k-gram is kept (winnowing window)
THRESHOLD = 0.6        # both submissions share at least this share of their own code with the other
MIN_SHARED = 100       # and at least this many characters of normalised code beyond the starter code: two one-line
                       # answers written into the same stubs share the few characters around them, not an answer


@dataclass
class Pair:
    lesson: str
    a: str
    b: str
    similarity: float                  # the lower of the two shares: how much of each is the other's
    shares: tuple[float, float]
    code_a: str                        # each side's code, with the shared parts marked (escaped HTML)
    code_b: str


def learner_code(notebook: Path, solution_cells: list[str]) -> str:
    """The learner's answers in a handed-in notebook: the sources of its solution cells, in the lesson's order."""
    try:
        nb = nbformat.read(str(notebook), as_version=4)
    except Exception:  # noqa: BLE001 - an unreadable notebook has no code to compare
        return ""
    by_id = {}
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and gid in solution_cells and gid not in by_id and isinstance(cell.source, str):
            by_id[gid] = cell.source
    return "\n\n".join(by_id[g] for g in solution_cells if g in by_id)[:200_000]


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


def similar_pairs(lesson: str, codes: dict[str, str], stubs: str, *, threshold: float = THRESHOLD) -> list[Pair]:
    """Every pair of ``codes`` (student -> code) whose shares are both at least ``threshold`` and who share at least
    :data:`MIN_SHARED` characters of normalised code, most alike first."""
    # lazy: as above
    import copydetect

    boiler = boilerplate_of(stubs)
    prints = {s: _fingerprint(c, boiler) for s, c in sorted(codes.items()) if c.strip()}
    names = sorted(prints)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            overlap, shares, slices = copydetect.compare_files(prints[a], prints[b])
            low = float(min(shares))
            if overlap >= MIN_SHARED and low >= threshold:
                pairs.append(Pair(lesson, a, b, low, (float(shares[0]), float(shares[1])),
                                  _marked(prints[a].raw_code, slices[0]), _marked(prints[b].raw_code, slices[1])))
    return sorted(pairs, key=lambda p: -p.similarity)


def codes_of(out: Path, lesson: str, students: list[str], solution_cells: list[str]) -> dict[str, str]:
    """Each student's answers for ``lesson``, read from the grading folder's kept copies (``submitted/``)."""
    found = {}
    for student in students:
        if name_problem(student, "student") is not None:      # a refused folder: nothing of it was kept
            continue
        path = Path(out) / "submitted" / student / lesson / f"{lesson}.ipynb"
        if path.is_file() and not path.is_symlink():
            found[student] = learner_code(path, solution_cells)
    return found

"""Naming the misconception behind a failing submission, from the fairness certificate's catalogue of classic
mistakes.

The certificate (``docs/fairness.json``) graded every mutant of every exercise's reference: the softmax over the
wrong axis, the scale dropped, the mask inverted, a finite fill, an argument removed... and kept, for each mutant it
killed, which test cells failed and what they said. A failing submission whose pattern of failures (each failing
cell, with its message's template: numbers and quoted values removed) is close to a mutant's is most likely that
mistake. The match is for the instructor's report only: a mutant is described by the change it makes to the
reference solution, which a learner's page must never show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from course.grading.report.data import message_template

__all__ = ["Mistake", "Catalogue", "NAMES"]

# The course's own mutation operators (course/tools/fairness), in the words of an instructor.
NAMES = {
    "attention:softmax_axis": "softmax over the wrong axis",
    "attention:scale": "the 1/sqrt(d_k) scale dropped or wrong",
    "attention:mask_sign": "the mask read the wrong way round (True taken as blocked)",
    "attention:missing_transpose": "a transpose missing",
    "attention:causal_diagonal": "the causal mask off by one on its diagonal",
    "attention:fill_value": "masked scores filled with a finite value instead of -inf",
    "attention:dropout": "dropout missing or in the wrong place",
    "attention:shared_layers": "one layer shared where each needs its own",
    "attention:position_shift": "positions shifted by one",
    "attention:permute_order": "axes permuted in the wrong order",
    "attention:length_penalty": "the length penalty applied wrongly",
    "attention:running_max_start": "the running maximum started from the wrong value",
    "generic:axis_change": "an operation along the wrong axis",
    "generic:statement_removal": "a statement left out",
    "generic:number_decrement": "a constant off by one",
    "generic:slice_bounds": "a slice off by one",
    "mutmut:operator_arg_removal": "an argument left out",
    "mutmut:operator_swap_op": "an operator swapped",
    "mutmut:operator_number": "a number changed",
    "mutmut:operator_name": "a name swapped",
    "mutmut:operator_keywords": "a keyword changed",
    "mutmut:operator_if_exp": "a condition inverted",
    "mutmut:operator_remove_unary_ops": "a sign dropped",
}


@dataclass(frozen=True)
class Mistake:
    lesson: str
    exercise: str
    operator: str
    change: str                        # the changed line(s) of the reference, as the mutant has them
    failures: tuple                    # ((grade_id, its failure message), ...) of the cells it fails

    @property
    def name(self) -> str:
        return NAMES.get(self.operator, self.operator.split(":")[-1].replace("_", " "))


def _change(diff: str) -> str:
    """The mutant's own lines of a unified diff (``+`` lines), without comments: what the mistake looks like."""
    lines = [ln[1:].split("#")[0].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return " / ".join(ln for ln in lines if ln)[:200] or "(a line removed)"


def failures_of(cells: list[dict]) -> dict[str, str]:
    """A result's failing cells: grade_id -> its message (whitespace normalised)."""
    return {str(c.get("cell") or c.get("grade_id")): " ".join(str(c.get("message", "")).split())
            for c in cells if isinstance(c, dict) and not c.get("passed", False)}


# How much one failing cell counts towards a match: the same message with the same values (the test's inputs gave
# the mutant's outputs: the same mistake), the same message with other values, or only the same cell failing.
SAME_VALUES, SAME_MESSAGE, SAME_CELL = 1.0, 0.7, 0.35


def likeness(mine: dict[str, str], theirs: dict[str, str]) -> float:
    """How alike two patterns of failures are, from 0 to 1: each cell that fails in either counts
    :data:`SAME_VALUES`, :data:`SAME_MESSAGE` or :data:`SAME_CELL` when it fails in both, else 0; the mean."""
    cells = set(mine) | set(theirs)
    if not cells:
        return 0.0
    total = 0.0
    for c in cells & set(theirs) & set(mine):
        if mine[c] == theirs[c]:
            total += SAME_VALUES
        elif message_template(mine[c]) == message_template(theirs[c]):
            total += SAME_MESSAGE
        else:
            total += SAME_CELL
    return total / len(cells)


# How alike a submission's failures must be to a catalogued mistake's to be named (see :func:`likeness`): on the
# 100 planted bugs of lessons 00, 03, 05, 06 and 07 (bench/misconceptions.py), 0.3 names 85 of them and sends the
# instructor to the exercise the bug changed for 80 of those 85 (94 %); 0.5 names about half (97 % placed), 0.2
# names a few more at the same 93-96 %.
THRESHOLD = 0.3


class Catalogue:
    """The killed mutants of each lesson, from a certificate file (``docs/fairness.json``)."""

    def __init__(self, mistakes: dict[str, list[Mistake]]):
        self.mistakes = mistakes

    @classmethod
    def load(cls, path: Path) -> "Catalogue":
        try:
            cert = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return cls({})
        found: dict[str, list[Mistake]] = {}
        for lesson, record in (cert.get("lessons") or {}).items():
            for exercise, ex in (record.get("exercises") or {}).items():
                for m in ex.get("mutants", []):
                    if m.get("verdict") != "killed" or not m.get("failing"):
                        continue
                    failing = failures_of([{"cell": f.get("cell"), "message": f.get("message", ""), "passed": False}
                                           for f in m["failing"]])
                    found.setdefault(lesson, []).append(Mistake(
                        lesson, exercise, str(m.get("operator", "")), _change(str(m.get("diff", ""))),
                        tuple(sorted(failing.items()))))
        return cls(found)

    def name(self, lesson: str, cells: list[dict], *, threshold: float = THRESHOLD) -> tuple[Mistake, float] | None:
        """The catalogued mistake whose failures are most like these (``(mistake, likeness)``, see
        :func:`likeness`), or None when none is at least ``threshold`` alike. Ties go to the course's own named
        operators (``attention:``), then to the mutant listed first."""
        mine = failures_of(cells)
        if not mine:
            return None
        best, best_score = None, 0.0
        for m in self.mistakes.get(lesson, []):
            score = likeness(mine, dict(m.failures))
            if score > best_score + 1e-9 or (abs(score - best_score) <= 1e-9 and best is not None and
                                             m.operator.startswith("attention:") and
                                             not best.operator.startswith("attention:")):
                best, best_score = m, score
        return (best, best_score) if best is not None and best_score >= threshold else None

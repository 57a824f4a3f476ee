"""What a lesson's text promises about its own structure: the points a section header announces."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())
HEADER = re.compile(r"^#+ .*\((\d+) points?\)", re.M)


@pytest.mark.parametrize("lesson", LESSONS)
def test_section_headers_announce_the_points_of_their_tests(lesson):
    """A header "## 1. ... (N points)" announces the sum of the points of the graded test cells up to the
    next header that announces points (the learner plans with it; nbgrader grades with the metadata)."""
    nb = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    sections = []                                       # [header line, announced, counted]
    for cell in nb.cells:
        match = HEADER.search(cell.source) if cell.cell_type == "markdown" else None
        if match:
            sections.append([match.group(0), int(match.group(1)), 0])
        grading = cell.metadata.get("nbgrader", {})
        if grading.get("grade") and sections:
            sections[-1][2] += grading.get("points", 0)
    wrong = [f"{line!r} announces {announced}, its tests sum to {counted}"
             for line, announced, counted in sections if announced != counted]
    assert not wrong, f"{lesson}: " + "; ".join(wrong)

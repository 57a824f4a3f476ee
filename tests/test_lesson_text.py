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


# -- issue 42: text that pointed the wrong way (each of these failed before its fix) -------------------------

def _cells(lesson: str):
    return nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4).cells


def _text(lesson: str) -> str:
    """The lesson's markdown and code, whitespace collapsed (a sentence may wrap anywhere)."""
    return " ".join(" ".join(c.source.split()) for c in _cells(lesson))


def _cell(lesson: str, grade_id: str) -> str:
    return next(" ".join(c.source.split()) for c in _cells(lesson) if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_reference_to_the_seed_notes(lesson):
    """The course grew from lecture notes the authors call "the seeds"; a learner never saw them ("the seed's
    notation" in lesson 03): say "the lecture notes"."""
    prose = " ".join(" ".join(c.source.split()) for c in _cells(lesson) if c.cell_type == "markdown")
    found = re.findall(r"seed's|seeds'|score of the seeds|the seeds leave", prose)
    assert not found, f"{lesson} speaks of the seeds (the authors' name for the lecture notes): {found}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_dtype_minimum_is_never_said_to_zero_a_fully_masked_row(lesson):
    """Masking with torch.finfo(dtype).min gives a row with no allowed key UNIFORM weights, not zeros (lesson 01
    said it "does it"; lesson 04 called the minimum "not a finite constant"). Every cell that recommends the
    dtype's minimum and speaks of such a row says so, or says to zero the row after the softmax."""
    wrong = []
    for cell in _cells(lesson):
        if cell.cell_type == "code" and not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        shown = re.sub(r"### BEGIN SOLUTION.*?### END SOLUTION", "", cell.source, flags=re.S)   # what the learner reads
        text = " ".join(shown.split())
        if re.search(r"finfo\(|dtype's minimum", text) and re.search(r"fully (padded|masked)|no real|no sentence|"
                                                                       r"no allowed|nothing to attend|empty", text):
            if "uniform" not in text and "after the softmax" not in text and "after it" not in text:
                wrong.append(text[:120])
    assert not wrong, f"{lesson}: the dtype's minimum is offered for a fully masked row without saying its softmax is uniform: {wrong}"
    for wrong_way in ("minimum, not a finite constant",                 # lesson 04: the minimum IS a finite constant
                      "or replacing the NaN, both do it"):              # lesson 01: the minimum alone gives a uniform row
        assert wrong_way not in _text(lesson), f"{lesson} says {wrong_way!r}"


def test_lesson_09_states_the_sampling_rule_not_one_way_to_meet_it():
    text = _text("09_language_model")
    assert "Draw with `torch.multinomial(probs, 1, generator=generator)`." not in text
    assert "every random number `sample_next` uses comes from that generator" in text


def test_lesson_10_explains_the_embeddings_initialisation_before_the_exercise():
    cells = _cells("10_bert")
    at = next(i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == "BertEmbeddings")
    before = " ".join(cells[at - 1].source.split())
    assert "Initialisation" in before and "all three tables" in before and "(token, segment and position)" in before


def test_lesson_12_measures_both_accumulations_instead_of_claiming_one():
    """Section 6 said a chunked attention in low precision is "about 2x worse" than SDPA; one that accumulates
    in float32, as the contract allows, is not. It now measures both."""
    text = _text("12_efficient_attention")
    assert "precision is about **2×** worse" not in text
    assert "chunked_attention(q.float(), k.float(), v.float(), 128).to(dt)" in text and "float32 inside" in text


def test_lesson_07_says_what_a_query_with_no_allowed_key_gets():
    assert "A query with no allowed key is left undefined" in _cell("07_transformer_block", "EncoderBlock")
    assert "A query that may attend to no key" in _text("07_transformer_block")


def test_lesson_06_says_the_layers_are_registered_under_their_names():
    assert "registered under these names" in _cell("06_multi_head_attention", "MultiHeadAttention")


def test_lesson_08_beam_docstring_has_one_stopping_rule():
    """"(or beam_size have finished)" read as a second stopping rule beside a message that said the search
    does not stop as soon as beam_size have finished."""
    doc = _cell("08_transformer", "beam_search")
    assert "(or ``beam_size`` have finished)" not in doc and "at most ``beam_size`` finish" in doc
    assert "it does not stop as soon as beam_size hypotheses have finished" not in _text("08_transformer")

"""Every lesson has its learner's layer (CONTRIBUTING.md, "The learner's layer"), as a learner meets it in the
student notebook:

* front matter as its second cell (objectives, what it needs, core or optional, study time, what runs long),
  the one ``course learner-layer`` writes from course/tools/learner/lessons/;
* at least two diagrams, each an image embedded in the notebook (a cell attachment: Colab sees no other file)
  with alt text, a real picture (decodes, not blank), and drawn from the source kept in the repository;
* before each experiment that records a metric, a question to answer ("predict"), and after it, text computed
  from this run's numbers (``narrate``); an "over seeds" box where the lesson has targets;
* a self-check of 3 to 5 questions with answers behind a click, and references with links;
* none of the phrases of the project's history (the list below, grown from what readers found).
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
ALL = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())


def _layered() -> list[str]:
    from course.tools.learner.lessons import all_fronts

    return [lesson for lesson in ALL if lesson in all_fronts()]


LESSONS = _layered()


def test_every_lesson_has_its_learners_layer():
    """All lessons, not only those that have one: a lesson without front matter would skip every test below."""
    assert LESSONS == ALL, f"no learner's layer (course/tools/learner/lessons/lNN.py): {sorted(set(ALL) - set(LESSONS))}"


# Phrases that tell the project's history, or send a learner to material they do not have. A reader who finds
# another adds it here.
HISTORY = [
    r"lecture notes", r"\bthe seeds\b", r"\bseeds'", r"\bthe issue\b", r"\bissue's\b", r"\bissue \d+",
    r"earlier version of this lesson", r"an earlier version", r"trial on seed", r"\bin our runs\b", r"\bour runs\b",
    r"\bwe measured\b", r"\bthe authors?\b(?! of)", r"red team", r"\bplanted\b", r"fairness certificate",
    r"\bTODO\b", r"\bFIXME\b", r"\bXXX\b", r"this project's", r"\bwas written before\b", r"\bused to\b.*\blesson\b",
]
IMAGE = re.compile(r"!\[([^\]]*)\]\(attachment:([A-Za-z0-9_.-]+\.png)\)")


def _student(lesson: str):
    return nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)


def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


def _sections(nb) -> list[list]:
    """The notebook cut at each second-level heading ("## ..."): one list of cells per section."""
    sections = [[]]
    for cell in nb.cells:
        if cell.cell_type == "markdown" and re.match(r"##\s", cell.source):
            sections.append([])
        sections[-1].append(cell)
    return sections


@pytest.mark.parametrize("lesson", LESSONS)
def test_front_matter(lesson):
    nb = _student(lesson)
    cell = nb.cells[1]
    assert cell.cell_type == "markdown" and "front-matter" in _tags(cell), \
        f"{lesson}: the second cell is not the front matter (course learner-layer writes it)"
    text = cell.source
    objectives = re.findall(r"^\d+\. ", text.split("**After this lesson you will be able to**")[-1].split("**You need**")[0], re.M)
    assert 3 <= len(objectives) <= 5, f"{lesson}: {len(objectives)} objectives (3 to 5)"
    for part in ("**At a glance.**", "**You need**", "**Study time**", "**On a CPU:**", "hours of study"):
        assert part in text, f"{lesson}: the front matter has no {part!r}"
    assert ("Core lesson" in text) != ("Optional lesson" in text), f"{lesson}: core or optional, and only one"


@pytest.mark.parametrize("lesson", LESSONS)
def test_at_least_two_diagrams_embedded_with_alt_text(lesson):
    from PIL import Image

    nb = _student(lesson)
    found = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for alt, name in IMAGE.findall(cell.source):
            data = cell.get("attachments", {}).get(name, {}).get("image/png")
            assert data, f"{lesson}: {name} is shown but not embedded in its cell (Colab would show nothing)"
            assert len(alt.split()) >= 12, f"{lesson}: {name}'s alt text is too short to stand for the picture: {alt!r}"
            image = Image.open(io.BytesIO(base64.b64decode(data))).convert("L")
            assert image.width >= 400 and image.height >= 150, f"{lesson}: {name} is {image.size}"
            dark = sum(image.histogram()[:200]) / (image.width * image.height)
            assert 0.01 < dark < 0.6, f"{lesson}: {name} looks blank or solid ({dark:.1%} of it dark)"
            found.append(name)
    assert len(set(found)) >= 2, f"{lesson}: {len(set(found))} diagram(s), at least 2 expected: {found}"
    from course.tools.learner.lessons import all_diagrams

    drawn = {f"{d.name}.png" for d in all_diagrams().values() if d.lesson == lesson}
    assert set(found) <= drawn, f"{lesson}: images with no source in course/tools/learner/lessons/: {set(found) - drawn}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_predict_then_run_then_read_this_run(lesson):
    nb = _student(lesson)
    problems = []
    for section in _sections(nb):
        records = [c for c in section if c.cell_type == "code" and "metrics.record(" in c.source]
        if not records:
            continue
        head = section[0].source.splitlines()[0] if section and section[0].cell_type == "markdown" else "(top)"
        first = section.index(records[0])
        if not any("predict" in _tags(c) or "**Predict" in c.source for c in section[:first] if c.cell_type == "markdown"):
            problems.append(f"{head}: no prediction asked before its experiment")
        if not any("narrate." in c.source for c in section if c.cell_type == "code"):
            problems.append(f"{head}: no reading of this run's numbers (narrate.say) after its experiment")
    assert not problems, f"{lesson}: " + "; ".join(problems)
    targets = nb.metadata.get("course", {}).get("targets", {})
    boxes = [c for c in nb.cells if "over-seeds" in _tags(c)]
    if targets:
        assert boxes, f"{lesson} has targets and no 'over seeds' box"
    for box in boxes:
        assert box.source.startswith("<details>") and "mean ± sd" in box.source, \
            f"{lesson}: an over-seeds box was not written by course learner-layer"


@pytest.mark.parametrize("lesson", LESSONS)
def test_self_check_and_references(lesson):
    nb = _student(lesson)
    checks = [c for c in nb.cells if "self-check" in _tags(c)]
    assert len(checks) == 1, f"{lesson}: {len(checks)} self-check cells"
    answers = checks[0].source.count("<details>")
    assert 3 <= answers <= 5 and checks[0].source.count("</details>") == answers, \
        f"{lesson}: the self-check has {answers} answers behind a click (3 to 5)"
    refs = [c for c in nb.cells if "references" in _tags(c)]
    assert refs and len(re.findall(r"\]\(https?://", refs[0].source)) >= 2, f"{lesson}: references need links"
    tail = [c for c in nb.cells[nb.cells.index(checks[0]):] if c.cell_type == "code"]
    assert not tail, f"{lesson}: code after the self-check"


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_project_history_in_what_a_learner_reads(lesson):
    nb = _student(lesson)
    text = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            text.append(cell.source)
        else:                                       # comments and the strings the learner reads
            text += re.findall(r"#.*", cell.source)
    joined = " ".join(" ".join(t.split()) for t in text)
    found = sorted({m.group(0) for p in HISTORY for m in re.finditer(p, joined, re.I)})
    assert not found, f"{lesson}: {found}"


def test_learner_layer_is_up_to_date():
    """``course learner-layer --check``: every lesson's diagrams, front matter and boxes are what their sources give,
    and the student notebooks carry them (``course release --check`` runs in tests/test_notebooks.py)."""
    from course.tools.learner.build import build

    problems = build(check=True)
    assert not problems, "\n".join(problems)

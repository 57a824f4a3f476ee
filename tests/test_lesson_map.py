"""Every lesson has each of its parts (CONTRIBUTING.md, "A lesson's map"): what a maintainer who opens one lesson
must find, in the places the map names. A part a lesson's own cells name (a checks module, a reference module)
exists; the parts every lesson has are each there."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_lesson_has_its_parts(lesson):
    n = lesson[:2]
    missing = [rel for rel in (f"solutions/{lesson}/{lesson}.ipynb", f"notebooks/{lesson}/{lesson}.ipynb",
                               f"tests/planted/{lesson}.py", f"course/tools/learner/lessons/l{n}.py")
               if not (ROOT / rel).is_file()]
    nb = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    if nb.metadata.get("course", {}).get("targets") and not (ROOT / "docs" / "measured" / f"{lesson}.json").is_file():
        missing.append(f"docs/measured/{lesson}.json (its targets over seeds 0-2)")
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for module in sorted(set(re.findall(r"\bchecks_(\d\d)\b", code))):
        if not (ROOT / "course" / f"checks_{module}.py").is_file():
            missing.append(f"course/checks_{module}.py (its test cells call it)")
    for module in sorted(set(re.findall(r"\brefs_(\d\d)\b", code))):
        if not (ROOT / "course" / "tools" / "references" / f"refs_{module}.py").is_file():
            missing.append(f"course/tools/references/refs_{module}.py (its hidden tests import it)")
    certified = json.loads((ROOT / "docs" / "fairness.json").read_text(encoding="utf-8"))
    if lesson not in certified.get("lessons", {}):
        missing.append("its record in docs/fairness.json (make certify LESSONS=" + lesson + ")")
    assert not missing, f"{lesson} lacks: " + "; ".join(missing)

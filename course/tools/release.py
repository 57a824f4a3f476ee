"""``course release``: regenerate the student notebooks in ``notebooks/`` from ``solutions/``.

nbgrader's generate_assignment replaces solution regions by stubs, removes hidden tests, locks the
test cells and clears outputs. ``--check`` regenerates into a temporary folder and fails, naming the
lesson, when the committed student notebook differs (CI runs it).
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
import tempfile
from pathlib import Path

from course.commands.lessons import Lesson
from course.tools.workspace import Workspace

__all__ = ["release", "leaks"]

_LEAK = re.compile(r"BEGIN (SOLUTION|HIDDEN TESTS)|END (SOLUTION|HIDDEN TESTS)")


def leaks(path: Path) -> list[str]:
    """Markers of solutions or hidden tests left in a student notebook (should be none)."""
    text = Path(path).read_text(encoding="utf-8")
    return sorted(set(m.group(0) for m in _LEAK.finditer(text)))


def _normalise(path: Path) -> str:
    """The notebook as canonical JSON text (stable key order, one trailing newline)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def release(lessons: list[Lesson], *, check: bool = False) -> list[str]:
    """Regenerate (or, with ``check``, compare) each lesson's student notebook.

    Returns a list of problems (empty when all is well).
    """
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="course-release-") as tmp:
        ws = Workspace(Path(tmp)).prepare([l.id for l in lessons])
        for lesson in lessons:
            generated = ws.generate(lesson.id)
            text = _normalise(generated)
            found = leaks(generated)
            if found:
                problems.append(f"{lesson.id}: the generated student notebook still contains {', '.join(found)}")
            target = lesson.student
            if check:
                if not target.is_file():
                    problems.append(f"{lesson.id}: notebooks/{lesson.id}/{lesson.id}.ipynb is missing; run `course release`")
                    continue
                current = target.read_text(encoding="utf-8")
                if current != text:
                    diff = list(difflib.unified_diff(current.splitlines(), text.splitlines(), "committed", "generated", n=1, lineterm=""))
                    problems.append(f"{lesson.id}: the committed student notebook differs from what `course release` "
                                    f"generates from solutions/ (run `course release` and commit):\n  " + "\n  ".join(diff[:12]))
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            # Data files that sit beside a lesson's notebook travel with the student version too.
            for extra in generated.parent.iterdir():
                if extra.name != generated.name and extra.name != ".ipynb_checkpoints":
                    dst = target.parent / extra.name
                    if extra.is_dir():
                        shutil.copytree(extra, dst, dirs_exist_ok=True)
                    else:
                        shutil.copy2(extra, dst)
    return problems

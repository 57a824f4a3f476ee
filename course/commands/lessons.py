"""Where the course lives on disk, which lessons it has, and what each one promises.

A lesson is a folder ``solutions/<id>/`` holding ``<id>.ipynb``. Its title, the targets its metrics
should meet and its cell timeout are in the notebook's metadata under ``"course"`` (written by
:func:`course.tools.authoring.notebook`), so a lesson is described in exactly one place.
"""

from __future__ import annotations

import json
import operator
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Lesson", "root", "all_lessons", "resolve", "Target", "parse_target"]

_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}


def root() -> Path:
    """The course's checkout: ``$COURSE_ROOT``, else the nearest parent of the current folder that
    holds ``solutions/`` and ``pyproject.toml``, else the folder above this package."""
    env = os.environ.get("COURSE_ROOT")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "solutions").is_dir() and (folder / "pyproject.toml").is_file():
            return folder
    return Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Target:
    """A promise such as ``exact_match >= 0.9``."""

    metric: str
    op: str
    value: float

    def met_by(self, value: float | None) -> bool:
        return value is not None and _OPS[self.op](value, self.value)

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"


def parse_target(metric: str, text: str) -> Target:
    m = re.fullmatch(r"\s*(>=|<=|==|>|<)\s*([-+0-9.eE]+)\s*", str(text))
    if not m:
        raise ValueError(f"target for {metric!r} must look like '>= 0.9', not {text!r}")
    return Target(metric, m.group(1), float(m.group(2)))


@dataclass(frozen=True)
class Lesson:
    id: str
    solution: Path
    student: Path
    title: str = ""
    targets: tuple[Target, ...] = field(default_factory=tuple)
    cell_timeout: int = 600

    @classmethod
    def load(cls, lesson_id: str, base: Path | None = None) -> "Lesson":
        base = base or root()
        sol = base / "solutions" / lesson_id / f"{lesson_id}.ipynb"
        meta = {}
        try:
            meta = json.loads(sol.read_text(encoding="utf-8")).get("metadata", {}).get("course", {})
        except (OSError, ValueError):
            pass
        targets = tuple(parse_target(k, v) for k, v in meta.get("targets", {}).items())
        return cls(
            id=lesson_id,
            solution=sol,
            student=base / "notebooks" / lesson_id / f"{lesson_id}.ipynb",
            title=meta.get("title", lesson_id),
            targets=targets,
            cell_timeout=int(meta.get("cell_timeout", 600)),
        )


def all_lessons(base: Path | None = None) -> list[Lesson]:
    """Every lesson in ``solutions/``, in course order."""
    base = base or root()
    folder = base / "solutions"
    ids = sorted(p.name for p in folder.iterdir() if (p / f"{p.name}.ipynb").is_file()) if folder.is_dir() else []
    return [Lesson.load(i, base) for i in ids]


def resolve(names: list[str] | None, base: Path | None = None) -> list[Lesson]:
    """Lessons named by id or by a unique prefix (``05`` or ``05_self_attention``); all if none."""
    lessons = all_lessons(base)
    if not names:
        return lessons
    chosen = []
    for name in names:
        name = name.strip().rstrip("/").split("/")[-1].removesuffix(".ipynb")
        hits = [l for l in lessons if l.id == name] or [l for l in lessons if l.id.startswith(name)]
        if len(hits) != 1:
            known = ", ".join(l.id for l in lessons) or "(none)"
            what = "matches several lessons" if hits else "is not a lesson"
            raise SystemExit(f"course: {name!r} {what}. Lessons: {known}")
        chosen.append(hits[0])
    return chosen

"""Each lesson's learner's layer, one module per lesson (``l05.py`` for lesson 05): its front matter (what a
learner will be able to do, what they need, core or optional, what runs long) registered with :func:`front`, and
its explanatory diagrams, each a function that returns a :class:`course.tools.learner.draw.Sheet`, registered with
:func:`diagram` under the name the lesson's Markdown uses (``![...](attachment:<name>.png)``) and the alt text the
image carries wherever it is shown. ``course learner-layer`` draws them and writes them into the lessons.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Callable

__all__ = ["Diagram", "Front", "diagram", "front", "all_diagrams", "all_fronts"]


@dataclass(frozen=True)
class Diagram:
    lesson: str                 # the lesson id (folder name)
    name: str                   # the attachment's name without ".png"
    alt: str                    # what the picture shows, for a reader who cannot see it
    draw: Callable


@dataclass(frozen=True)
class Front:
    """What a lesson's front matter says. ``level``: "core" (on the main path) or "optional"; ``lessons``: the
    earlier lessons it builds on; ``needs``: the other things to know (math, PyTorch); ``objectives``: 3 to 5
    things the learner will be able to do, each a sentence starting with a verb; ``standard_minutes``: the
    standard profile's run on a 2-core laptop CPU, measured (docs/benchmarks.md); ``runs_long``: what takes long
    on a CPU, in the learner's words ("" when nothing does)."""

    lesson: str
    level: str
    lessons: tuple[str, ...]
    needs: str
    objectives: tuple[str, ...]
    standard_minutes: float
    runs_long: str = ""
    part: str = ""


_DIAGRAMS: dict[str, Diagram] = {}
_FRONTS: dict[str, Front] = {}


def diagram(lesson: str, name: str, alt: str):
    """Register the decorated function as the diagram ``name`` of ``lesson`` (names are unique in the course)."""

    def register(fn):
        if name in _DIAGRAMS:
            raise ValueError(f"two diagrams are called {name!r}")
        _DIAGRAMS[name] = Diagram(lesson, name, " ".join(alt.split()), fn)
        return fn

    return register


def front(lesson: str, *, level: str, lessons=(), needs: str, objectives, standard_minutes: float, runs_long: str = "",
          part: str = "") -> Front:
    """Register the front matter of ``lesson``."""
    if level not in ("core", "optional"):
        raise ValueError(f"{lesson}: level is 'core' or 'optional', not {level!r}")
    item = Front(lesson, level, tuple(lessons), " ".join(needs.split()), tuple(" ".join(o.split()) for o in objectives),
                 float(standard_minutes), " ".join(runs_long.split()), part)
    _FRONTS[lesson] = item
    return item


def _load() -> None:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def all_diagrams() -> dict[str, Diagram]:
    """Every registered diagram by name."""
    _load()
    return dict(sorted(_DIAGRAMS.items()))


def all_fronts() -> dict[str, Front]:
    """Every lesson's front matter by lesson id."""
    _load()
    return dict(sorted(_FRONTS.items()))

"""Thin wrappers over ipywidgets, so a lesson's interactive cell is one readable call.

When no person is watching -- nbgrader grading or validating, or `course run` executing a notebook
(it sets ``COURSE_HEADLESS``) -- the function is simply called once with the default values: the
saved notebook shows a static plot, and no widget comm can stall the executor (a known,
intermittent nbclient hang with ipywidgets cells: jupyter/nbclient#312).
"""

from __future__ import annotations

from typing import Callable

import os

from course.config import grading

__all__ = ["interact"]


def interact(fn: Callable, **controls):
    """``ipywidgets.interact(fn, **controls)``; headless, ``fn`` called once with each control's default.

    Controls are ipywidgets objects (``FloatSlider``, ``Dropdown``…) or the shorthand tuples and
    lists ``interact`` accepts.
    """
    if not (grading() or os.environ.get("COURSE_HEADLESS")):
        try:
            import ipywidgets

            return ipywidgets.interact(fn, **controls)
        except ImportError:  # pragma: no cover - ipywidgets is a dependency; be kind anyway
            pass
    defaults = {}
    for name, control in controls.items():
        if hasattr(control, "value"):
            defaults[name] = control.value
        elif isinstance(control, (list, tuple)) and control and not isinstance(control[0], (int, float)):
            defaults[name] = control[0][1] if isinstance(control[0], tuple) else control[0]
        elif isinstance(control, tuple):
            defaults[name] = control[0]
        else:
            defaults[name] = control
    return fn(**defaults)

"""Thin wrappers over ipywidgets, so a lesson's interactive cell is one readable call.

When ipywidgets cannot render (no front end, or nbgrader executing), the function is simply called
once with the default values, so the cell still shows a plot and never fails.
"""

from __future__ import annotations

from typing import Callable

from course.config import grading

__all__ = ["interact"]


def interact(fn: Callable, **controls):
    """``ipywidgets.interact(fn, **controls)``; under nbgrader, ``fn`` with each control's default.

    Controls are ipywidgets objects (``FloatSlider``, ``Dropdown``…) or the shorthand tuples and
    lists ``interact`` accepts.
    """
    if not grading():
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

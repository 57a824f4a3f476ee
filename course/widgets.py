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


def interact(fn: Callable, **controls) -> None:
    """``ipywidgets.interact(fn, **controls)``; headless, ``fn`` called once with each control's default.

    Controls are ipywidgets objects (``FloatSlider``, ``Dropdown``, ``Text``…) or the shorthand tuples,
    lists and strings ``interact`` accepts. A text box redraws when you press Enter (or leave it), not
    at every keystroke: half-typed input never reaches ``fn``.

    Returns None, so a cell ending with this call shows the widget and nothing else (ipywidgets'
    own ``interact`` returns ``fn``, which a notebook would print as ``<function ...>``).
    """
    if not (grading() or os.environ.get("COURSE_HEADLESS")):
        try:
            import ipywidgets
        except ImportError:  # pragma: no cover - ipywidgets is a dependency; be kind anyway
            ipywidgets = None
        if ipywidgets is not None:
            from IPython.display import display

            controls = {name: _settled(ipywidgets, control) for name, control in controls.items()}
            display(ipywidgets.interactive(fn, **controls))
            return None
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
    fn(**defaults)
    return None


def _settled(ipywidgets, control):
    """A text box that redraws on Enter: a plain string becomes ``Text(value, continuous_update=False)``.

    With ipywidgets' default (a redraw at every keystroke), the first edit of lesson 05's text box
    showed a blank white image or a half-drawn heatmap for a moment (caught in Chromium: the half-typed
    sequence's redraw racing the next one), and a half-typed sequence is not what the learner means.
    """
    if isinstance(control, str):
        return ipywidgets.Text(value=control, continuous_update=False)
    if isinstance(control, ipywidgets.Text):
        control.continuous_update = False
    return control

"""Thin wrappers over ipywidgets, so a lesson's interactive cell is one readable call.

When no person is watching -- nbgrader grading or validating, or `course run` executing a notebook
(it sets ``COURSE_HEADLESS``) -- the function is simply called once with the default values: the
saved notebook shows a static plot, and no widget comm can stall the executor (a known,
intermittent nbclient hang with ipywidgets cells: jupyter/nbclient#312).
"""

from __future__ import annotations

import os
import threading
from typing import Callable

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
            display(_one_at_a_time(ipywidgets)(fn, **controls))
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


# One drawing at a time, across every widget of the kernel. JupyterLab (4.4+) sends widget messages on
# a kernel subshell, a second thread, and ipykernel 7 routes each control's messages to the thread
# its last echo came from: a control's first change runs on the kernel's main thread, later ones on
# the subshell's. pyplot keeps one global list of figures, and two things drew into it at once:
#   * two redraws: one thread's ``plt.show()`` displayed and closed the figure the other had only
#     just created;
#   * a redraw and any other widget message: `comm` runs IPython's ``post_execute`` callbacks after
#     every message, and matplotlib's among them (pyplot's ``draw_all``, matplotlib-inline's
#     ``flush_figures``) rendered or closed the figure a redraw on the other thread was drawing.
# Either way the page showed a blank or half-drawn image of the plot's size (lessons 02 and 04 in
# Chromium; tests/test_widgets_threads.py drives both races at the kernel level). So redraws and the
# ``post_execute`` callbacks hold this lock. Re-entrant: a redraw may set another control's value,
# whose redraw then runs on the same thread.
# A cell's own code holds no lock, so a redraw asked for on another thread while a cell runs (a
# control moved during a training cell) waits for that cell to end, as it did before subshells.
_DRAWING = threading.RLock()
_NO_CELL = threading.Event()        # set: no cell is running
_NO_CELL.set()
_cell_thread = None                 # the thread running the current cell


def _one_at_a_time(ipywidgets):
    """``ipywidgets.interactive`` whose redraws hold :data:`_DRAWING`, after any running cell."""

    class Interactive(ipywidgets.interactive):
        def update(self, *args):
            if _cell_thread is not None and threading.current_thread() is not _cell_thread:
                _NO_CELL.wait()
            with _DRAWING:
                return super().update(*args)

    _guard_events()
    return Interactive


def _guard_events() -> None:
    """Once per kernel: run the ``post_execute`` callbacks holding :data:`_DRAWING`, and keep track of
    the running cell (``pre_run_cell`` / ``post_run_cell``, which IPython pairs even when a cell fails)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - comes with ipykernel
        return
    events = getattr(get_ipython(), "events", None)
    if events is None or getattr(events, "_course_drawing_lock", None) is _DRAWING:
        return
    trigger = events.trigger

    def trigger_one_at_a_time(event, *args, **kwargs):
        global _cell_thread
        if event == "pre_run_cell":
            _cell_thread = threading.current_thread()
            _NO_CELL.clear()
        elif event == "post_run_cell":
            try:
                return trigger(event, *args, **kwargs)
            finally:
                _cell_thread = None
                _NO_CELL.set()
        if event != "post_execute":
            return trigger(event, *args, **kwargs)
        with _DRAWING:
            return trigger(event, *args, **kwargs)

    events.trigger = trigger_one_at_a_time
    events._course_drawing_lock = _DRAWING


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

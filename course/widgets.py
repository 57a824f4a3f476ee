"""Thin wrappers over ipywidgets, so a lesson's interactive cell is one readable call.

When no person is watching -- nbgrader grading or validating, or `course run` executing a notebook
(it sets ``COURSE_HEADLESS``) -- the function is simply called once with the default values: the
saved notebook shows a static plot, and no widget comm can stall the executor (a known,
intermittent nbclient hang with ipywidgets cells: jupyter/nbclient#312).

With ``COURSE_WIDGET_PROBE`` set to a file as well, a headless ``interact`` also moves each control to
another value, as a learner would, and appends to that file what each drawing showed (images, how
much of each is not background, text): the test suite checks every lesson's widget that way in the
notebooks `make run` executes (:func:`probe_problems`), and drives a few of them in a browser.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
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
    probe = os.environ.get("COURSE_WIDGET_PROBE")
    if probe and not grading():
        _probe(fn, controls, defaults, Path(probe))
    else:
        fn(**defaults)
    return None


# -- the headless probe (COURSE_WIDGET_PROBE) ------------------------------------------------------

BLANK = 0.005          # an image with less than this share of non-background pixels is blank


def ink(png_base64: str) -> float:
    """The share of an image's pixels that differ from its background (0.0: a blank image)."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(base64.b64decode(png_base64))).convert("RGBA")
    background = Image.new("RGBA", img.size, (255, 255, 255, 255))
    a = np.asarray(Image.alpha_composite(background, img).convert("L")).astype(int)
    values, counts = np.unique(a, return_counts=True)
    return float((np.abs(a - values[counts.argmax()]) > 8).mean())


def _drawn(fn, kwargs: dict):
    """What ``fn(**kwargs)`` shows: (its outputs, captured, and a summary: images, their ink, text)."""
    from IPython.utils.capture import capture_output

    with capture_output(display=True) as cap:
        fn(**kwargs)
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is not None and plt.get_fignums():
            plt.show()                  # a figure drawn but not shown: the page would show it too
    images = [o.data["image/png"] for o in cap.outputs if "image/png" in o.data]
    text = cap.stdout + "".join(o.data.get("text/plain", "") for o in cap.outputs if "image/png" not in o.data)
    return cap, {"images": [str(i) for i in images], "ink": [round(ink(str(i)), 4) for i in images], "text": text.strip()}


def _as_widget(fn, name: str, control):
    """The ipywidgets control ``interact`` makes of ``control`` (an abbreviation: a tuple, a list, a
    string...), with its value where ``fn``'s own default for ``name`` puts it, as on the page."""
    import inspect

    import ipywidgets

    if isinstance(control, (ipywidgets.ValueWidget, ipywidgets.fixed)):
        return control
    try:
        default = inspect.signature(fn).parameters[name].default
    except (KeyError, TypeError, ValueError):
        default = inspect.Parameter.empty
    return ipywidgets.interactive.widget_from_abbrev(control, default)


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - a tensor's == is not one truth value
        return a is b


def _moves(control) -> list:
    """Up to three other values a learner could give the ipywidgets ``control``, one step at a time."""
    value = control.value
    options = getattr(control, "_options_values", None)
    if options is not None:
        return [o for o in options if not _same(o, value)][:3]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, str):
        words = value.replace(",", " ").split()
        return [" ".join(reversed(words)) if len(set(words)) > 1 else "what a great movie"]
    if isinstance(value, (int, float)) and hasattr(control, "step"):
        lo, hi, step = getattr(control, "min", None), getattr(control, "max", None), control.step or 1
        if type(control).__name__.endswith("LogSlider"):       # its min and max are exponents of its base
            return []
        room = 1e-9 * abs(step)                                 # 0.2 + 0.1 is above 0.3 in binary
        out, up, down = [], value, value
        for _ in range(3):
            if hi is None or up + step <= hi + room:
                up = up + step
                out.append(up)
            elif lo is None or down - step >= lo - room:
                down = down - step
                out.append(down)
        return [type(value)(round(v, 10)) for v in out]
    return []


def _probe(fn, controls: dict, defaults: dict, path: Path) -> None:
    """Draw with the defaults (shown, as headless ``interact`` does), then move each control in turn
    (hidden) until the drawing changes, up to three steps; append one JSON line per drawing to ``path``."""
    lesson, widget = Path.cwd().name, getattr(fn, "__name__", "widget")
    cap, first = _drawn(fn, defaults)
    cap.show()
    rows = [{"lesson": lesson, "widget": widget, "control": None, **first}]
    # The learner starts from what the page shows: ipywidgets' own control for an abbreviation.
    import ipywidgets

    widgets, refused = {}, {}
    for name, control in controls.items():
        try:
            widgets[name] = _as_widget(fn, name, control)
        except Exception as exc:  # noqa: BLE001 - the page could not show this control either
            refused[name] = f"ipywidgets makes no control of {control!r}: {type(exc).__name__}: {exc}"[:300]
    start = dict(defaults, **{name: w.value for name, w in widgets.items()})
    if not all(_same(start[k], defaults[k]) for k in start):
        cap, first = _drawn(fn, start)
    for name in controls:
        control = widgets.get(name)
        if isinstance(control, ipywidgets.fixed):
            continue                    # a fixed argument: no control on the page
        row = {"lesson": lesson, "widget": widget, "control": name, "kind": type(control).__name__,
               "from": repr(start[name])[:80]}
        moves = [] if control is None else _moves(control)
        if name in refused:
            row["error"] = refused[name]
        elif not moves:
            row["error"] = f"no other value to move this {type(control).__name__} to"
        for value in moves:
            row["to"] = repr(value)[:80]
            try:
                _, now = _drawn(fn, dict(start, **{name: value}))
            except Exception as exc:  # noqa: BLE001 - reported to the test, the notebook goes on
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                break
            row.update(now, same=(now["images"], now["text"]) == (first["images"], first["text"]),
                       first_images=len(first["images"]), same_images=bool(now["images"]) and now["images"] == first["images"])
            if (not row["same_images"]) if first["images"] else (not row["same"]):
                break                   # the plot changed (or, for a widget that only prints, its text)
        rows.append(row)
    with open(path, "a", encoding="utf-8") as f:
        for row in rows:
            row["images"] = len(row.get("images", []))
            f.write(json.dumps(row) + "\n")


def probe_problems(rows: list[dict]) -> list[str]:
    """What a learner would see go wrong in the probed widgets: nothing drawn, a blank image, a
    control that raises, one whose plot vanishes, or one that leaves the plot as it was (after up to
    three steps; its printed text may change or not). A widget that only prints may print the same
    for neighbouring values, as a browser check allows too."""
    problems = []
    for r in rows:
        where = f"{r['lesson']}: {r['widget']}" + (f", control {r['control']!r} {r.get('from')} -> {r.get('to')}"
                                                   if r["control"] else " with its defaults")
        if r.get("error"):
            problems.append(f"{where}: {r['error']}")
            continue
        if not r["images"] and not r["text"]:
            problems.append(f"{where}: showed nothing")
        if any(i < BLANK for i in r["ink"]):
            problems.append(f"{where}: a blank image (ink {min(r['ink'])})")
        if r["control"] and r.get("first_images") and not r["images"]:
            problems.append(f"{where}: the plot is gone (it showed only: {r['text'][:120]!r})")
        elif r["control"] and r["images"] and r.get("same_images"):
            problems.append(f"{where}: the plot did not change")
    return problems


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

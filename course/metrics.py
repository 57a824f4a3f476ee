"""Record a lesson's results so that ``course run`` can collect them into its report.

``record("val_acc_attention", 0.94)`` prints a readable line in the notebook and, when the
``COURSE_METRICS`` environment variable names a file (``course run`` sets it), appends one JSON
line to that file (only rank 0 of a ``torchrun`` job writes: ``RANK`` unset or 0). The targets each metric is compared
with live in :mod:`course.commands.lessons`.
"""

from __future__ import annotations

import json
import os
import time

__all__ = ["record", "Recorded"]


class Recorded(float):
    """The float ``record`` returns: a number like any other, except that a notebook cell ending with
    ``metrics.record(...)`` shows only the ``[metric]`` line, not the value a second time."""

    def _ipython_display_(self):    # IPython's display hook calls this instead of echoing the value
        pass


def record(name: str, value, *, unit: str = "", note: str = "") -> float:
    """Print and store one metric of this run; returns the value as a float (usable in arithmetic)."""
    if hasattr(value, "item"):
        value = value.item()
    value = float(value)
    if os.environ.get("RANK", "0") != "0":       # another rank of a torchrun job: rank 0 reports
        return Recorded(value)
    shown = f"{value:.4g}{(' ' + unit) if unit else ''}"
    print(f"[metric] {name} = {shown}{('  (' + note + ')') if note else ''}")
    path = os.environ.get("COURSE_METRICS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"name": name, "value": value, "unit": unit, "note": note, "time": time.time()}) + "\n")
    return Recorded(value)

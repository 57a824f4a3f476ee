"""The headless widget probe (``COURSE_WIDGET_PROBE``, course/widgets.py) that checks every lesson's
widget in the notebooks `make run` executes: it must tell a working widget from the ways one fails a
learner. One kernel runs a notebook of seven widgets; the probe's report must flag exactly the six
broken ones, each for its own reason."""

from __future__ import annotations

import json
import textwrap

import nbformat
import pytest

nbclient = pytest.importorskip("nbclient")

CELLS = [
    """
    import matplotlib.pyplot as plt
    import ipywidgets as W
    from course import widgets

    def good(k=1, name="a b c", which="x"):
        plt.plot(range(10), [i * k for i in range(10)], label=name + which)
        plt.title(f"{k} {name} {which}")
        plt.show()

    def frozen(k=1):                      # a control that does nothing: the plot never changes
        plt.plot(range(10))
        plt.show()

    def blank(k=1):                       # draws an empty, white figure
        plt.figure()
        plt.axis("off")
        plt.show()

    def raises(k=1):                      # the first value works, the next raises
        if k != 1:
            raise IndexError("index 2 is out of range")
        plt.plot(range(3))
        plt.show()

    def silent(k=1):                      # draws nothing at all
        pass

    def vanishing(k=1):                   # any other value: a message instead of the plot
        if k != 1:
            print("type a number between 1 and 1")
            return
        plt.plot(range(5))
        plt.show()

    def captioned(k=1):                   # the caption follows the control, the plot does not
        print(f"k = {k}")
        plt.plot(range(7))
        plt.show()
    """,
    'widgets.interact(good, k=W.IntSlider(value=1, min=0, max=5), name="a b c", which=["x", "y"])',
    "widgets.interact(frozen, k=W.IntSlider(value=1, min=0, max=5))",
    "widgets.interact(blank, k=W.FloatSlider(value=1.0, min=0, max=2, step=0.5))",
    "widgets.interact(raises, k=W.Dropdown(options=[1, 2, 3], value=1))",
    "widgets.interact(silent, k=(0, 4))",
    "widgets.interact(vanishing, k=W.IntSlider(value=1, min=0, max=3))",
    "widgets.interact(captioned, k=W.IntSlider(value=1, min=0, max=3))",
]


def test_the_probe_flags_each_way_a_widget_fails_and_passes_a_working_one(tmp_path, monkeypatch):
    from course.widgets import probe_problems

    probe = tmp_path / "probe.jsonl"
    monkeypatch.setenv("COURSE_HEADLESS", "1")
    monkeypatch.setenv("COURSE_WIDGET_PROBE", str(probe))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(textwrap.dedent(c)) for c in CELLS])
    nbclient.NotebookClient(nb, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}).execute()
    rows = [json.loads(line) for line in probe.read_text().splitlines()]
    assert [r["widget"] for r in rows] == (["good"] * 4 + ["frozen"] * 2 + ["blank"] * 2 + ["raises"] * 2 + ["silent"] * 2
                                           + ["vanishing"] * 2 + ["captioned"] * 2)
    good = [r for r in rows if r["widget"] == "good"]
    assert all(r["images"] == 1 for r in good) and all(not r.get("same") for r in good[1:]), good
    assert [r["to"] for r in good[1:]] == ["2", "'c b a'", "'y'"]          # slider, text and list, each moved
    problems = probe_problems(rows)
    by_widget = {w: [p for p in problems if f": {w}" in p]
                 for w in ("good", "frozen", "blank", "raises", "silent", "vanishing", "captioned")}
    assert by_widget["good"] == [], problems
    assert len(by_widget["frozen"]) == 1 and "did not change" in by_widget["frozen"][0], problems
    assert len([p for p in by_widget["blank"] if "blank image" in p]) == 2, problems       # default and moved
    assert len(by_widget["raises"]) == 1 and "IndexError: index 2" in by_widget["raises"][0], problems
    assert by_widget["silent"] and all("showed nothing" in p for p in by_widget["silent"]), problems
    assert len(by_widget["vanishing"]) == 1 and "the plot is gone" in by_widget["vanishing"][0], problems
    assert len(by_widget["captioned"]) == 1 and "did not change" in by_widget["captioned"][0], problems
    # interact's abbreviation (0, 4) is the slider a page shows: at the function's own default, 1
    assert [r["from"] for r in rows if r["widget"] == "silent" and r["control"]] == ["1"], rows
    # The notebook still shows the default drawing of each widget, as a headless run always did.
    shown = [o for c in nb.cells[1:] for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(shown) == 6, [c.get("outputs") for c in nb.cells[1:]]

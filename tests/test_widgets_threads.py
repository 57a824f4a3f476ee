"""Widget redraws on two kernel threads at once (the blank-image defect of lessons 02 and 04).

JupyterLab 4.4+ sends widget messages on a kernel subshell, and ipykernel 7 routes each control's
messages to the thread its last echo came from: a control's first change runs on the kernel's main
thread, later ones on the subshell's. pyplot's figure list is global, so
* two redraws of one widget at the same time: one thread's ``plt.show()`` displayed and closed the
  figure the other had only created (a blank image), and the other then showed nothing;
* a redraw and any other widget message at the same time: `comm` runs the ``post_execute``
  callbacks after every message, and matplotlib-inline's ``flush_figures`` rendered and closed the
  figure the redraw was still drawing;
* a redraw while a cell that plots runs on the main thread.
``course.widgets.interact`` draws one thing at a time and waits for a running cell; this test drives
the three races at the kernel level, sending messages as JupyterLab does.
"""

from __future__ import annotations

import base64
import io
import os
import queue
import textwrap
import time

import pytest

from course.commands.lessons import root

jupyter_client = pytest.importorskip("jupyter_client")

# A redraw that leaves its figure empty for a moment, as a heatmap does while its model runs.
CELL = textwrap.dedent("""
    import time
    import ipywidgets
    import matplotlib.pyplot as plt
    from course import widgets

    def draw(step=0, kind="line", width=8):
        fig = plt.figure(figsize=(3, 2))
        time.sleep(0.4)
        ax = fig.add_subplot()
        ax.plot([0, 1], [0, step + 1], lw=width)
        ax.set_title(kind)
        plt.show()

    widgets.interact(draw, step=ipywidgets.IntSlider(value=0, min=0, max=5, description="step"),
                     kind=ipywidgets.Dropdown(options=["line", "bar"], value="line", description="kind"),
                     width=ipywidgets.IntSlider(value=8, min=4, max=12, description="width"))
    display(ipywidgets.IntSlider(value=0, description="other"))   # a widget with no plot
""")


def _ink(b64: str) -> float:
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("L"))
    return float((pixels < 250).mean())


@pytest.fixture()
def kernel(tmp_path):
    from jupyter_client.manager import start_new_kernel

    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython"), MPLCONFIGDIR=str(tmp_path / "mpl"),
               JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"), PYTHONPATH=str(root()),
               PYDEVD_DISABLE_FILE_VALIDATION="1")
    for name in ("COURSE_HEADLESS", "NBGRADER_EXECUTION", "COURSE_GRADING", "MPLBACKEND"):
        env.pop(name, None)
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path), env=env)
    try:
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_two_redraws_at_once_each_show_their_whole_figure(kernel):
    kc = kernel
    kc.control_channel.send(kc.session.msg("create_subshell_request", {}))
    reply = kc.control_channel.get_msg(timeout=30)
    if reply["content"].get("status") != "ok":
        pytest.skip(f"this ipykernel has no subshells ({reply['content']}); the race cannot happen")
    subshell = reply["content"]["subshell_id"]

    comms = {}
    msg_id = kc.execute(CELL)
    while True:
        m = kc.get_iopub_msg(timeout=120)
        if m["msg_type"] == "comm_open" and m["content"]["data"]["state"].get("description"):
            comms[m["content"]["data"]["state"]["description"]] = m["content"]["comm_id"]
        assert m["msg_type"] != "error", m["content"]
        if (m["msg_type"] == "status" and m["content"]["execution_state"] == "idle"
                and m["parent_header"].get("msg_id") == msg_id):
            break
    slider, dropdown, width, other = comms["step"], comms["kind"], comms["width"], comms["other"]

    def change(comm_id, state):
        # JupyterLab sends every widget message with the subshell's id; ipykernel decides the thread.
        m = kc.session.msg("comm_msg", {"comm_id": comm_id,
                                        "data": {"method": "update", "state": state, "buffer_paths": []}})
        m["header"]["subshell_id"] = subshell
        kc.shell_channel.send(m)
        return m["header"]["msg_id"]

    def images(parents, quiet=0.5, limit=60.0):
        """The images each message's handler showed: read until every one has gone idle, then until
        nothing more comes for ``quiet`` seconds (a late image would still be counted)."""
        got, busy = {p: [] for p in parents}, set(parents)
        end = time.monotonic() + limit
        while time.monotonic() < end:
            try:
                m = kc.get_iopub_msg(timeout=quiet if not busy else max(0.1, end - time.monotonic()))
            except queue.Empty:
                if not busy:
                    return got
                continue
            parent = m["parent_header"].get("msg_id")
            assert m["msg_type"] != "error", m["content"]
            if parent in got and m["msg_type"] == "display_data" and "image/png" in m["content"]["data"]:
                got[parent].append(_ink(m["content"]["data"]["image/png"]))
            if parent in busy and m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                busy.discard(parent)
        raise AssertionError(f"no idle status after {limit} s for {len(busy)} of {len(parents)} messages: {got}")

    first, plain = change(slider, {"value": 1}), change(other, {"value": 1})
    assert [len(v) for v in images([first, plain]).values()] == [1, 0]
    # Both now answer on the subshell; the dropdown's first change runs on the main thread.
    a, b = change(slider, {"value": 2}), change(dropdown, {"index": 1})
    shown = images([a, b])
    assert [len(shown[a]), len(shown[b])] == [1, 1], f"images per redraw: {shown}"
    assert min(shown[a] + shown[b]) > 0.01, f"a redraw showed a blank figure: ink {shown}"
    # A redraw on the main thread (a control's first change) while the plain slider's messages are
    # handled on the subshell, each followed by the post_execute callbacks.
    c = change(width, {"value": 10})
    plain = []
    for value in range(2, 10):
        time.sleep(0.1)
        plain.append(change(other, {"value": value}))
    shown = images([c, *plain])
    assert [len(v) for v in shown.values()] == [1] + [0] * len(plain), f"images per message: {shown}"
    assert min(shown[c]) > 0.01, f"the redraw showed a blank figure: ink {shown}"
    # A control moved (on the subshell) while a cell that plots runs on the main thread: the redraw
    # waits for the cell, and each shows its own whole figure.
    cell = kc.execute("fig = plt.figure(figsize=(3, 2)); time.sleep(1.0)\n"
                      "fig.add_subplot().plot([0, 1], [1, 0], lw=8); plt.show()")
    time.sleep(0.3)
    e = change(slider, {"value": 3})
    shown = images([cell, e])
    assert [len(shown[cell]), len(shown[e])] == [1, 1], f"images per message: {shown}"
    assert min(shown[cell] + shown[e]) > 0.01, f"a blank figure: ink {shown}"

"""`course lab` options, the labs' generated settings, and what cells show (fast, no server started)."""

from __future__ import annotations

import json
import os
from pathlib import Path


from course.commands import lab


def test_root_dir_spellings_collapse_to_one():
    chosen, rest = lab.split_root_dir(["--ServerApp.root_dir=/a", "--port", "9", "--notebook-dir", "/b", "--no-browser"])
    assert chosen == "/b" and rest == ["--port", "9", "--no-browser"]
    assert lab.split_root_dir(["--ip=0.0.0.0"]) == (None, ["--ip=0.0.0.0"])


def test_learner_command_has_one_root_and_the_options(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_EXCHANGE", str(tmp_path / "exchange"))
    monkeypatch.setattr(lab, "state_dir", lambda: tmp_path / "state")
    monkeypatch.delenv("JUPYTER_CONFIG_PATH", raising=False)
    cmd, env, serve = lab.lab_command(extra=["--ServerApp.root_dir=" + str(tmp_path), "--foo=1"], port=8899,
                                      token="t", ip="0.0.0.0", no_browser=True)
    roots = [c for c in cmd if "root_dir" in c or "notebook-dir" in c]
    assert roots == [f"--ServerApp.root_dir={tmp_path}"] and serve == tmp_path
    for opt in ("--port=8899", "--IdentityProvider.token=t", "--ip=0.0.0.0", "--no-browser", "--foo=1"):
        assert opt in cmd
    config = Path(env["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0])
    text = (config / "nbgrader_config.py").read_text()
    assert f"c.Exchange.root = {str(tmp_path / 'exchange')!r}" in text and "course_id" in text
    disabled = json.loads((config / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
    assert disabled.get("@jupyter/nbgrader:formgrader") and disabled.get("@jupyter/nbgrader:course-list")
    server = json.loads((config / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"]
    assert server["nbgrader.server_extensions.formgrader"] is False
    assert (tmp_path / "exchange").is_dir()


def test_check_names_classes_called_with_arguments():
    from course.commands.checker import _UNIMPLEMENTED

    found = [m.group(1) for m in map(_UNIMPLEMENTED.search, [
        "AssertionError: SelfAttention(12, 4) is not implemented yet: replace ...",
        "AssertionError: softmax is not implemented yet: ...",
        "AssertionError: MultiHeadAttention(8, 2, bias=False) is not implemented yet"]) if m]
    assert found == ["SelfAttention", "softmax", "MultiHeadAttention"]


def test_interact_and_record_leave_no_stray_value(monkeypatch):
    """A cell ending with widgets.interact(...) or metrics.record(...) shows nothing more."""
    from course import metrics, widgets

    monkeypatch.setenv("COURSE_HEADLESS", "1")
    seen = []
    assert widgets.interact(lambda x=0: seen.append(x) or "drawn", x=(3, 0, 5)) is None and seen == [3]
    value = metrics.record("m", 0.25)
    assert value == 0.25 and value + 1 == 1.25 and hasattr(value, "_ipython_display_")
    assert value._ipython_display_() is None

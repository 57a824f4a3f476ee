"""Test-wide set-up: keep Jupyter, IPython, matplotlib and torch state out of the user's home."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / ".state"
_ENV = {
    "JUPYTER_CONFIG_DIR": STATE / "jupyter" / "config",
    "JUPYTER_DATA_DIR": STATE / "jupyter" / "data",
    "JUPYTER_RUNTIME_DIR": STATE / "jupyter" / "runtime",
    "IPYTHONDIR": STATE / "ipython",
    "MPLCONFIGDIR": STATE / "matplotlib",
    "TORCH_HOME": STATE / "torch",
    "HF_HOME": STATE / "huggingface",
    "XDG_CACHE_HOME": STATE / "cache",
}
for name, path in _ENV.items():
    os.environ.setdefault(name, str(path))
    Path(os.environ[name]).mkdir(parents=True, exist_ok=True)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ["COURSE_ROOT"] = str(ROOT)
os.environ.pop("NBGRADER_EXECUTION", None)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The course's tensors are tiny: one CPU thread per test worker is fastest, and several threads
    per worker crawl when pytest-xdist runs workers side by side (as course.setup does in notebooks)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def built_handout(tmp_path_factory) -> Path:
    """`course dist` run once per test session, shared by the xdist workers (a file lock in their common
    temporary folder): the learner's copy, built and audited (about 20 CPU-seconds). Tests only read it,
    or take a copy of their own (:func:`handout`) to change it."""
    import subprocess
    import sys

    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent                  # pytest-N/, above each worker's popen-gwK/
    dest = shared / "built-handout" / "handout"
    with FileLock(str(shared / "built-handout.lock")):
        if not (shared / "built-handout" / "ok").is_file():
            proc = subprocess.run([str(Path(sys.executable).parent / "course"), "dist", str(dest)],
                                  capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            assert "Checked: no solution, no hidden test, no graded answer." in proc.stdout, proc.stdout
            (shared / "built-handout" / "ok").write_text(proc.stdout)
    return dest


def _shared_folder(tmp_path_factory) -> Path:
    """pytest's temporary folder that every xdist worker of this session sees (pytest-N/)."""
    shared = tmp_path_factory.getbasetemp()
    return shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """`make run PROFILE=smoke` as typed in a fresh copy of the working tree, once per test session and
    shared by the xdist workers (a file lock): tests/test_newcomer.py checks what it printed and executed,
    tests/test_site.py builds the website there. ``.clone`` is the copy, ``.probe`` the widget probe's
    file, ``.returncode``, ``.stdout`` and ``.stderr`` what `make run` gave (tests/fresh_clone.py)."""
    import json
    import types

    from filelock import FileLock
    from fresh_clone import make_run_smoke

    shared = _shared_folder(tmp_path_factory)
    dest = shared / "smoke-run"
    with FileLock(str(shared / "smoke-run.lock")):
        if not (dest / "done.json").is_file():
            dest.mkdir(exist_ok=True)
            make_run_smoke(dest)
    done = json.loads((dest / "done.json").read_text(encoding="utf-8"))
    return types.SimpleNamespace(clone=dest / "course", probe=dest / "widget-probe.jsonl", **done)


@pytest.fixture
def handout(built_handout, tmp_path) -> Path:
    """A copy of the learner's copy for one test to change (a venv in it, filled-in notebooks, a planted leak)."""
    import shutil

    return Path(shutil.copytree(built_handout, tmp_path / "handout", symlinks=True))


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip with a reason on a machine where PyTorch sees no CUDA GPU (CI)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; PyTorch sees none here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

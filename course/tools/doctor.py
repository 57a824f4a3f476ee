"""``course doctor``: what this machine can do, and whether the course is installed correctly."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["doctor"]


def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "NOT INSTALLED"


def doctor() -> int:
    """Print versions, the device and the Jupyter set-up; return the number of problems found."""
    import torch

    from course.tools.lessons import all_lessons, root
    from course.tools.workspace import tool_environment

    tool_environment()
    problems = []
    print(f"course root     {root()}")
    print(f"python          {platform.python_version()} ({sys.executable})")
    print(f"machine         {platform.platform()}, {os.cpu_count()} CPU cores")
    for dist in ("torch", "nbgrader", "papermill", "jupyterlab", "ipywidgets", "matplotlib", "transformers", "nbclient"):
        v = _version(dist)
        print(f"{dist:<15} {v}")
        if v == "NOT INSTALLED":
            problems.append(f"{dist} is missing: run `make setup`")
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            print(f"cuda:{i}          {p.name}, {p.total_memory / 2**30:.1f} GiB, compute capability {p.major}.{p.minor}")
        print(f"bf16            {'yes' if torch.cuda.is_bf16_supported() else 'no'}; default profile: full")
    else:
        print("device          CPU only (no CUDA GPU visible); default profile: standard")
    t = time.perf_counter()
    a = torch.randn(512, 512)
    for _ in range(20):
        a @ a
    gflops = 20 * 2 * 512 ** 3 / (time.perf_counter() - t) / 1e9
    print(f"cpu matmul      {gflops:.1f} GFLOP/s (512x512, {torch.get_num_threads()} threads)")

    specs = subprocess.run([sys.executable, "-m", "jupyter", "kernelspec", "list", "--json"], capture_output=True, text=True)
    try:
        kernels = json.loads(specs.stdout)["kernelspecs"]
        spec = kernels.get("python3", {})
        exe = spec.get("spec", {}).get("argv", [""])[0]
        ok = bool(exe) and Path(exe).resolve().parent == Path(sys.executable).resolve().parent
        print(f"kernel python3  {spec.get('resource_dir', 'missing')} -> {exe or '?'} {'OK' if ok else 'NOT this venv'}")
        if not ok:
            problems.append("the 'python3' Jupyter kernel does not run this venv's Python: run `make setup` again")
    except (ValueError, KeyError):
        problems.append("`jupyter kernelspec list` failed: " + specs.stderr.strip()[:200])
    ext = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"], capture_output=True, text=True)
    text = ext.stdout + ext.stderr
    for name in ("@jupyter/nbgrader", "@jupyter-widgets/jupyterlab-manager"):
        ok = name in text and "enabled" in text.split(name, 1)[1].splitlines()[0].lower() if name in text else False
        print(f"labextension    {name}: {'enabled' if ok else 'MISSING or disabled'}")
        if not ok:
            problems.append(f"JupyterLab extension {name} is not enabled")
    srv = subprocess.run([sys.executable, "-m", "jupyter", "server", "extension", "list"], capture_output=True, text=True)
    server_text = srv.stdout + srv.stderr
    ok = "nbgrader" in server_text and "enabled" in server_text
    print(f"server ext      nbgrader: {'enabled' if ok else 'MISSING'}")
    if not ok:
        problems.append("nbgrader's Jupyter server extension is not enabled")
    lessons = all_lessons()
    from course.tools import sandbox

    ok, why = sandbox.available()
    print(f"grading sandbox {sandbox.describe(False) if ok else 'NOT AVAILABLE: ' + why}")
    if not ok:
        problems.append("`course grade` needs bubblewrap to isolate submissions: " + sandbox.INSTALL_HINT)
    print(f"lessons         {len(lessons)}: {', '.join(l.id for l in lessons)}")
    missing = [l.id for l in lessons if not l.student.is_file()]
    if missing:
        problems.append(f"student notebooks missing for {', '.join(missing)}: run `course release`")
    print(f"home writes     JUPYTER_DATA_DIR={os.environ.get('JUPYTER_DATA_DIR', '(default: ~)')}")
    print()
    if problems:
        print("Problems:")
        for p in problems:
            print(f"  - {p}")
    else:
        print("All checks passed.")
    return len(problems)

"""Where code lives, as the checks ask it of a frame: Triton's installed package, every installed package (the
standard library, site-packages, PyTorch), and this package's own files (the checks' frames are nobody's work)."""

from __future__ import annotations

import os
import sys

import torch

# The files of this package: frames running them are the check's own (its modes, its reading of storages).
_HERE = os.path.dirname(os.path.abspath(__file__))
OWN_FILES = frozenset(os.path.join(_HERE, name) for name in os.listdir(_HERE) if name.endswith(".py"))


def triton_dir() -> str | None:
    """The folder of the installed ``triton`` package (with a trailing separator), found without importing
    it; None where it is not installed."""
    import importlib.util

    module = sys.modules.get("triton")
    origin = getattr(module, "__file__", None)
    if origin is None:
        try:
            spec = importlib.util.find_spec("triton")
        except (ImportError, ValueError):
            spec = None
        origin = getattr(spec, "origin", None)
    return os.path.join(os.path.dirname(origin), "") if origin else None


def triton_frame(frame) -> bool:
    """Whether ``frame`` runs code of Triton's installed package (its interpreter, its language)."""
    folder = TRITON_DIR[0] if TRITON_DIR else None
    return bool(folder) and frame.f_code.co_filename.startswith(folder)


TRITON_DIR: list = []          # filled by TritonWatch.start: [folder or None]


def triton_file(filename: str) -> bool:
    folder = TRITON_DIR[0] if TRITON_DIR else None
    return bool(folder) and filename.startswith(folder)


def _installed_prefixes() -> tuple[str, ...]:
    """Where installed Python code lives here: the standard library, every site-packages (Debian's
    dist-packages too) and the folder PyTorch itself was loaded from."""
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    found = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(k)}
    try:
        found.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - some virtualenvs' site module
        pass
    found.add(os.path.dirname(os.path.dirname(torch.__file__)))
    return tuple(sorted(os.path.join(p, "") for p in found if p))


INSTALLED = _installed_prefixes()


def installed_module_loading(frame, outer=frozenset()) -> bool:
    """Whether ``frame`` runs under the top level of an installed module imported since the check began
    (below the ``outer`` frames; PyTorch loads parts of itself lazily, and those touch NumPy): not the
    learner's work. A module the learner wrote (in the working folder) counts as the learner's."""
    while frame is not None and id(frame) not in outer:
        code = frame.f_code
        if code.co_name == "<module>" and code.co_filename.startswith(INSTALLED):
            return True
        frame = frame.f_back
    return False

"""Test-wide set-up: keep Jupyter, IPython, matplotlib and torch state out of the user's home."""

import os
from pathlib import Path

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

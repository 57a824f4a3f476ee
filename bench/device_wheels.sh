#!/usr/bin/env bash
# Wheels for a GPU machine whose image lacks what `course run` needs (papermill, nbclient, nbformat, ipykernel,
# ipywidgets and what they need that the image does not hold), downloaded here into .whl/ so that they travel
# with the checkout; bench/on_device.sh installs them there before it runs a command.
#
#   bench/device_wheels.sh [PYTHON_VERSION]       default 3.12 (the lent H200's image: python3 3.12)
#
# The versions are the ones this checkout's .venv holds (make setup), so the kernel on the GPU runs the same
# Jupyter stack as here. The list skips what the machine's image already has (torch, numpy, matplotlib,
# transformers, triton, scikit-learn, tqdm, pyyaml, requests, click, psutil, pygments...: see the device
# tool's KINDS.md). .whl/ is git-ignored through .git/info/exclude (this script adds the line).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYV="${1:-3.12}"
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || { echo "bench/device_wheels.sh: run 'make setup' first (the versions come from .venv)" >&2; exit 2; }
NEEDED="papermill ipykernel ipywidgets nbformat nbclient"
# The image's packages (the device tool's KINDS.md, 2026-11-17): never carried.
ON_IMAGE="aiohttp anyio attrs certifi charset-normalizer click filelock fsspec idna jinja2 markupsafe matplotlib
numpy packaging pandas pillow pip psutil pygments python-dateutil pyyaml requests rich setuptools six tqdm
typing-extensions urllib3 torch transformers triton scikit-learn scipy"
PINS="$("$PY" - "$NEEDED" "$ON_IMAGE" "$PYV" <<'PYEOF'
import importlib.metadata as md, re, sys
from packaging.requirements import Requirement
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
needed, on_image, pyv = sys.argv[1].split(), {norm(n) for n in sys.argv[2].split()}, sys.argv[3]
env = {"python_version": pyv, "python_full_version": pyv + ".0", "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": "x86_64", "implementation_name": "cpython", "platform_python_implementation": "CPython",
       "os_name": "posix", "extra": ""}
pins, todo = {}, list(needed)
while todo:
    name = norm(todo.pop())
    if name in pins or name in on_image:
        continue
    dist = md.distribution(name)
    pins[name] = dist.version
    for line in dist.requires or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            todo.append(req.name)
print(" ".join(f"{n}=={v}" for n, v in sorted(pins.items())))
PYEOF
)"
cd "$ROOT"
EXCLUDE="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$EXCLUDE")" .whl
grep -qx "/.whl/" "$EXCLUDE" 2>/dev/null || echo "/.whl/" >> "$EXCLUDE"
PLATFORMS=()
for p in manylinux1 manylinux2014 manylinux_2_17 manylinux_2_24 manylinux_2_26 manylinux_2_27 manylinux_2_28 \
         manylinux_2_31 manylinux_2_34 manylinux_2_35; do PLATFORMS+=(--platform "${p}_x86_64"); done
for pin in $PINS; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
    "${PLATFORMS[@]}" -d .whl "$pin"
done
echo "bench/device_wheels.sh: $(ls .whl | wc -l) wheels in .whl/ ($(du -sh .whl | cut -f1)), for Python $PYV:"
echo "  $PINS"

#!/usr/bin/env bash
# On a lent GPU machine: install the wheels that travelled in .whl/ (bench/device_wheels.sh) into /tmp/site,
# put them and this checkout on PYTHONPATH, check that `course run` can import what it needs, then run the
# command given. For the device tool (carry: [".whl"]), e.g.
#
#   bench/on_device.sh bench/gpu.sh --budget 540 --lessons "06" --steps lessons "$OUT/gpu"
#
# Without .whl/ it runs the command as it is (an image that already has the Jupyter stack).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SITE="${ON_DEVICE_SITE:-/tmp/site}"
PY="$(command -v python3 || command -v python)"
if compgen -G "$ROOT/.whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$ROOT"/.whl/*.whl \
    || { echo "bench/on_device.sh: installing .whl/ into $SITE failed (wheels for another Python? bench/device_wheels.sh $("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])'))" >&2; exit 2; }
  export PATH="$SITE/bin:$PATH"
fi
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'PYEOF' || exit 2
import importlib.util, sys
missing = [m for m in ("papermill", "nbclient", "nbformat", "ipykernel", "ipywidgets", "torch") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"bench/on_device.sh: {', '.join(missing)} missing: run bench/device_wheels.sh here and carry .whl")
from jupyter_client.kernelspec import KernelSpecManager
specs = KernelSpecManager().find_kernel_specs()
if "python3" not in specs:
    sys.exit(f"bench/on_device.sh: no python3 kernel (found {sorted(specs)})")
import torch
print(f"bench/on_device.sh: Python {sys.version.split()[0]}, torch {torch.__version__}, "
      f"CUDA {'yes: ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no'}, kernel python3")
PYEOF
cd "$ROOT" && exec "$@"

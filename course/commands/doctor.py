"""``course doctor``: what this machine can do, and whether the course is installed correctly."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import sys
import time
from pathlib import Path

__all__ = ["doctor", "hardware", "peak_tflops", "main"]

def _version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "NOT INSTALLED"


# Dense (no 2:4 sparsity) tensor-core peaks from the vendors' datasheets, in TFLOP/s, for the dtype
# the doctor measures (bf16, or fp16 on cards without native bf16). GeForce cards: fp32 accumulate.
# First match wins: more specific names come first ("L40S" before "L40" before "L4").
PEAKS = [
    (("GH200",), "GH200", 989.0),
    (("H200", "NVL"), "H200 NVL", 835.0),
    (("H200",), "H200 SXM", 989.0),
    (("H100", "NVL"), "H100 NVL", 835.0),
    (("H100", "PCIE"), "H100 PCIe", 756.0),
    (("H100",), "H100 SXM", 989.0),
    (("H800", "PCIE"), "H800 PCIe", 756.0),
    (("H800",), "H800 SXM", 989.0),
    (("B200",), "B200", 2250.0),
    (("A100",), "A100", 312.0),
    (("A800",), "A800", 312.0),
    (("A10G",), "A10G", 70.0),
    (("A10",), "A10", 125.0),
    (("L40S",), "L40S", 362.0),
    (("L40",), "L40", 181.0),
    (("L4",), "L4", 121.0),
    (("RTX 4090",), "RTX 4090", 165.0),
    (("RTX 3090",), "RTX 3090", 71.0),
    (("V100",), "V100 (fp16)", 125.0),
    (("T4",), "T4 (fp16)", 65.0),
]


def peak_tflops(name: str) -> tuple[str, float] | None:
    """The datasheet's dense bf16/fp16 tensor-core peak for a GPU name, or None when unknown."""
    upper = name.upper()
    for words, label, peak in PEAKS:
        if all(w in upper for w in words):
            if words == ("T4",) and "RTX" in upper:      # "RTX 4..." is no T4
                continue
            return label, peak
    return None


def _best_seconds(fn, repeats: int, sync=lambda: None) -> float:
    """The fastest of ``repeats`` timed calls: what the hardware can do, least disturbed by other programs."""
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return min(times)


def _cpu_matmul(n: int = 512, threads: int | None = None) -> dict:
    """fp32 matmul GFLOP/s on the CPU (best of 15), with ``threads`` intra-op threads."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        seconds = _best_seconds(lambda: a @ b, 15)
        return {"dtype": "float32", "n": n, "threads": torch.get_num_threads(), "gflops": 2 * n ** 3 / seconds / 1e9}
    finally:
        torch.set_num_threads(before)


def _gpu_matmul(device) -> dict:
    """Tensor-core matmul TFLOP/s (bf16, fp16 before compute capability 8.0) next to the datasheet peak."""
    import torch

    props = torch.cuda.get_device_properties(device)
    dtype = torch.bfloat16 if props.major >= 8 else torch.float16
    n = 8192 if props.total_memory > 8 * 2**30 else 4096
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b                                            # warm-up: cuBLAS picks its kernel
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    repeats = 20
    start.record()
    for _ in range(repeats):
        a @ b
    stop.record()
    torch.cuda.synchronize(device)
    seconds = start.elapsed_time(stop) / 1000 / repeats
    tflops = 2 * n ** 3 / seconds / 1e12
    peak = peak_tflops(props.name)
    del a, b
    torch.cuda.empty_cache()
    return {"dtype": str(dtype).replace("torch.", ""), "n": n, "tflops": tflops,
            "peak_name": peak[0] if peak else None, "peak_tflops": peak[1] if peak else None,
            "fraction_of_peak": tflops / peak[1] if peak else None}


SDPA_BACKENDS = [                                          # (SDPBackend member, torch.backends.cuda flag)
    ("FLASH_ATTENTION", "flash", "flash_sdp_enabled"),
    ("EFFICIENT_ATTENTION", "memory-efficient", "mem_efficient_sdp_enabled"),
    ("CUDNN_ATTENTION", "cuDNN", "cudnn_sdp_enabled"),
    ("MATH", "math", "math_sdp_enabled"),
]


def _sdpa(device) -> dict:
    """Which ``F.scaled_dot_product_attention`` backends are enabled, which actually run here, how fast.

    A small case each (B=4, H=8, T=1024, Dh=64 in bf16 on a GPU; B=2, T=128 in float32 on the CPU),
    forced through ``torch.nn.attention.sdpa_kernel``; ``default`` is the backend PyTorch picks.
    """
    import warnings

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cuda = torch.device(device).type == "cuda"
    B, T, dtype = (4, 1024, torch.bfloat16) if cuda else (2, 128, torch.float32)
    q, k, v = (torch.randn(B, 8, T, 64, device=device, dtype=dtype) for _ in range(3))
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    out = {"case": f"B={B} H=8 T={T} Dh=64 {str(dtype).replace('torch.', '')} causal", "backends": []}
    try:
        out["default"] = next(label for member, label, _ in SDPA_BACKENDS
                              if int(getattr(SDPBackend, member)) == int(torch._fused_sdp_choice(q, k, v, is_causal=True)))
    except Exception:  # noqa: BLE001 - a private helper: report nothing rather than fail
        out["default"] = None
    for member, label, flag in SDPA_BACKENDS:
        row = {"backend": label, "enabled": bool(getattr(torch.backends.cuda, flag)()) if cuda else None,
               "runs": False, "ms": None, "why_not": ""}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")              # "... not compiled with flash attention" etc.
            try:
                with sdpa_kernel([getattr(SDPBackend, member)]):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    row["ms"] = 1000 * _best_seconds(
                        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 5, sync)
                row["runs"] = True
            except Exception as exc:  # noqa: BLE001 - "No available kernel" and friends
                row["why_not"] = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        out["backends"].append(row)
    return out


def hardware() -> dict:
    """What the machine offers the lessons, measured: the GPU (or the CPU), SDPA backends, matmul speed."""
    import torch

    info = {"torch": torch.__version__, "cuda_build": torch.version.cuda, "cpu_cores": os.cpu_count(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "gpus": []}
    if torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            info["gpus"].append({"index": i, "name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                                 "capability": f"{p.major}.{p.minor}", "multiprocessors": p.multi_processor_count})
        info["device"] = "cuda"
        info["bf16"] = torch.cuda.get_device_capability(0)[0] >= 8
        info["matmul"] = _gpu_matmul(torch.device("cuda:0"))
        info["sdpa"] = _sdpa(torch.device("cuda:0"))
    else:
        from course.config import no_cuda_reason

        info["device"] = "cpu"
        info["no_gpu_reason"] = no_cuda_reason()
        info["matmul"] = _cpu_matmul(threads=1)
        info["matmul_all_threads"] = _cpu_matmul(threads=os.cpu_count())
        before = torch.get_num_threads()
        torch.set_num_threads(1)                         # as in the notebooks (course.setup)
        try:
            info["sdpa"] = _sdpa(torch.device("cpu"))
        finally:
            torch.set_num_threads(before)
    return info


def _print_hardware(info: dict) -> None:
    m = info["matmul"]
    if info["device"] == "cuda":
        for g in info["gpus"]:
            print(f"GPU cuda:{g['index']:<7} {g['name']}, {g['memory_gib']} GiB, compute capability {g['capability']}, "
                  f"{g['multiprocessors']} SMs")
        print(f"bf16            {'native' if info['bf16'] else 'not native (compute capability < 8.0): fp16 measured'}"
              "; default profile: full")
        peak = (f" of {m['peak_tflops']:.0f} peak ({m['peak_name']}, datasheet, dense): {100 * m['fraction_of_peak']:.0f} %"
                if m["peak_tflops"] else " (peak: unknown for this card)")
        print(f"{m['dtype']} matmul     {m['tflops']:.0f} TFLOP/s measured ({m['n']}x{m['n']}){peak}")
    else:
        print(f"GPU             none: no GPU here ({info['no_gpu_reason']}); lessons run on the CPU, "
              "default profile: standard")
        a = info["matmul_all_threads"]
        print(f"cpu matmul      {m['gflops']:.1f} GFLOP/s fp32 with 1 thread (what notebooks use), "
              f"{a['gflops']:.1f} with {a['threads']} ({m['n']}x{m['n']}, {info['cpu_capability']})")
    s = info["sdpa"]
    rows = []
    for r in s["backends"]:
        state = f"{r['ms']:.2f} ms" if r["runs"] else "does not run"
        if r["enabled"] is False:
            state += " (disabled)"
        rows.append(f"{r['backend']} {state}")
    where = "GPU" if info["device"] == "cuda" else "CPU"
    print(f"SDPA backends   on the {where}, {s['case']}: " + "; ".join(rows)
          + (f"; PyTorch picks {s['default']}" if s.get("default") else ""))


def _kernel_python3() -> tuple[str, str]:
    """(resource folder, interpreter) of the 'python3' Jupyter kernel, read in-process (no subprocess)."""
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_all_specs().get("python3", {})
    return spec.get("resource_dir", "missing"), (spec.get("spec", {}).get("argv") or [""])[0]


def _lab_extension_enabled(name: str) -> bool:
    """Is the prebuilt JupyterLab extension ``name`` installed and not disabled? (What
    ``jupyter labextension list`` reports, read from the same files in milliseconds instead of seconds.)"""
    from jupyter_core.paths import jupyter_config_path, jupyter_path

    installed = any((Path(d) / name / "package.json").is_file() for d in jupyter_path("labextensions"))
    disabled = False
    for d in jupyter_config_path():
        page = Path(d) / "labconfig" / "page_config.json"
        if page.is_file():
            try:
                off = json.loads(page.read_text(encoding="utf-8")).get("disabledExtensions", {})
            except ValueError:
                continue
            disabled |= bool(off.get(name)) if isinstance(off, dict) else name in off
    return installed and not disabled


def _server_extension_enabled(package: str) -> bool:
    """Does a Jupyter server config enable an extension of ``package``, and can it be imported?"""
    import importlib.util

    from jupyter_core.paths import jupyter_config_path

    enabled = False
    for d in jupyter_config_path():
        for f in sorted((Path(d) / "jupyter_server_config.d").glob("*.json")) + [Path(d) / "jupyter_server_config.json"]:
            try:
                ext = json.loads(f.read_text(encoding="utf-8")).get("ServerApp", {}).get("jpserver_extensions", {})
            except (OSError, ValueError):
                continue
            for key, on in ext.items():
                if key == package or key.startswith(package + "."):
                    enabled = bool(on)
    return enabled and importlib.util.find_spec(package) is not None


def _instructor_copy() -> bool:
    """The repository, with the grading tools; a learner's copy from ``course dist`` has none of them."""
    import importlib.util

    try:
        return importlib.util.find_spec("course.grading.sandbox") is not None
    except ModuleNotFoundError:          # no course.grading at all: a learner's copy
        return False


def _lessons(base: Path) -> tuple[list[str], list[str]]:
    """(lesson ids, ids whose student notebook is missing): from ``solutions/`` in the repository,
    from ``notebooks/`` in a learner's copy (which has no solutions)."""
    from course.commands.lessons import all_lessons

    lessons = all_lessons(base)
    if lessons:
        return [l.id for l in lessons], [l.id for l in lessons if not l.student.is_file()]
    folder = base / "notebooks"
    ids = sorted(p.name for p in folder.iterdir() if (p / f"{p.name}.ipynb").is_file()) if folder.is_dir() else []
    return ids, []


def doctor(json_out: Path | None = None) -> int:
    """Print versions, the device and the Jupyter set-up; return the number of problems found.

    Args:
        json_out: also write everything measured (versions, hardware, problems) to this JSON file.
    """

    from course.commands.lab import tool_environment
    from course.commands.lessons import root

    tool_environment()
    problems = []
    versions = {}
    print(f"course root     {root()}")
    print(f"python          {platform.python_version()} ({sys.executable})")
    print(f"machine         {platform.platform()}, {os.cpu_count()} CPU cores")
    for dist in ("torch", "nbgrader", "papermill", "jupyterlab", "ipywidgets", "matplotlib", "transformers", "nbclient"):
        v = versions[dist] = _version(dist)
        print(f"{dist:<15} {v}")
        if v == "NOT INSTALLED":
            problems.append(f"{dist} is missing: run `make setup`")
    from course import triton_support

    version, how = triton_support.status()
    versions["triton"] = version or "NOT INSTALLED"
    print(f"{'triton':<15} {version + ': ' + how if version else how}")
    if version is None and triton_support.SUPPORTED:
        problems.append("triton is missing (lesson 16's kernels): run `make setup`")
    info = hardware()
    _print_hardware(info)
    try:
        resource, exe = _kernel_python3()
        ok = bool(exe) and Path(exe).resolve().parent == Path(sys.executable).resolve().parent
        print(f"kernel python3  {resource} -> {exe or '?'} {'OK' if ok else 'NOT this venv'}")
        if not ok:
            problems.append("the 'python3' Jupyter kernel does not run this venv's Python: run `make setup` again")
    except Exception as exc:  # noqa: BLE001 - a broken Jupyter install is a problem to report, not a crash
        problems.append(f"reading the Jupyter kernels failed: {exc}"[:200])
    for name in ("@jupyter/nbgrader", "@jupyter-widgets/jupyterlab-manager"):
        ok = _lab_extension_enabled(name)
        print(f"labextension    {name}: {'enabled' if ok else 'MISSING or disabled'}")
        if not ok:
            problems.append(f"JupyterLab extension {name} is not enabled")
    ok = _server_extension_enabled("nbgrader")
    print(f"server ext      nbgrader: {'enabled' if ok else 'MISSING'}")
    if not ok:
        problems.append("nbgrader's Jupyter server extension is not enabled")
    ids, missing = _lessons(root())
    if _instructor_copy():
        from course.grading import sandbox

        ok, why = sandbox.available()
        print(f"grading sandbox {sandbox.describe(False) if ok else 'NOT AVAILABLE: ' + why}")
        print(f"bubblewrap      {sandbox.bwrap_origin()}; user namespaces {'work' if ok else 'did not start: see above'}")
        if not ok:
            problems.append("`course grade` needs bubblewrap to isolate submissions: " + sandbox.INSTALL_HINT)
    else:
        print("copy            a learner's copy (course dist): course check, course doctor, course lab")
    print(f"lessons         {len(ids)}: {', '.join(ids)}")
    if missing:
        problems.append(f"student notebooks missing for {', '.join(missing)}: run `course release`")
    if not ids:
        problems.append(f"no lessons found in {root()}: run this from the course's folder")
    print(f"home writes     JUPYTER_DATA_DIR={os.environ.get('JUPYTER_DATA_DIR', '(default: ~)')}")
    print()
    if problems:
        print("Problems:")
        for p in problems:
            print(f"  - {p}")
    else:
        print("All checks passed.")
    if json_out is not None:
        report = {"created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "python": platform.python_version(),
                  "machine": platform.platform(), "versions": versions, "hardware": info, "lessons": ids,
                  "problems": problems}
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return len(problems)


def main(argv: list[str] | None = None) -> int:
    """``python -m course.commands.doctor [--json OUT] [--hardware]`` (``course doctor`` prints the same)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m course.commands.doctor", description=__doc__)
    parser.add_argument("--json", type=Path, help="also write what was measured to this JSON file")
    parser.add_argument("--hardware", action="store_true",
                        help="only the device: GPU or CPU, SDPA backends, matmul speed (no Jupyter checks)")
    args = parser.parse_args(argv)
    if args.hardware:
        info = hardware()
        _print_hardware(info)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"hardware": info}, indent=2) + "\n", encoding="utf-8")
        return 0
    return 1 if doctor(args.json) else 0


if __name__ == "__main__":
    sys.exit(main())

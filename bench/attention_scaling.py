"""Naive attention vs chunked attention vs F.scaled_dot_product_attention: time and peak memory as T grows.

Lesson 12's scaling benchmark, for the GPU checklist and for anyone curious about their machine:

    python bench/attention_scaling.py --device cpu --max-t 4096
    python bench/attention_scaling.py --device cuda --json results/attention_scaling.json

For each dtype (float32 and bfloat16 by default) and each T = min_t, 2 min_t, ... up to --max-t, it
times the three methods (median after a warm-up) and measures the peak memory of one call
(``course.efficiency``). A method that runs out of memory, or whose call takes longer than
--time-limit seconds, is dropped for the longer sequences; the others go on, so the largest T
reached says where memory stopped each method. It prints a table per dtype, the fitted exponents
(cost ~ T^p on the three longest sequences each method ran), and on CUDA the SDPA-vs-naive speed-up
and memory ratio at T = 8192 and the largest T reached. ``--json`` writes all of it to a file.

The chunked method is the reference solution of lesson 12 (the ``chunked_attention`` cell of
``solutions/12_efficient_attention/12_efficient_attention.ipynb``), executed from the notebook's
source so that the benchmark always measures what the lesson teaches.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import re
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course import efficiency  # noqa: E402

SOLUTION = ROOT / "solutions" / "12_efficient_attention" / "12_efficient_attention.ipynb"


def load_chunked_attention(path: Path = SOLUTION):
    """The reference ``chunked_attention`` from the solution notebook's graded cell."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "chunked_attention":
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            source = re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", "", source, flags=re.M)
            ns = {"torch": torch, "math": math, "F": F}
            exec(compile(source, f"{path.name}:chunked_attention", "exec"), ns)
            return ns["chunked_attention"]
    raise LookupError(f"{path} has no cell with grade_id 'chunked_attention'")


def naive_attention(q, k, v):
    """softmax(q k^T / sqrt(Dh)) v with the whole (T, T) matrix in memory."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])   # (B, H, T, T)
    return torch.softmax(scores, dim=-1) @ v                    # (B, H, T, Dh)


def lengths(min_t: int, max_t: int) -> list[int]:
    out, T = [], min_t
    while T <= max_t:
        out.append(T)
        T *= 2
    return out


def summarise(rows, methods, device_type):
    """Fitted exponents, largest T per method, and the SDPA/naive comparison at T = 8192 and at the largest common T."""
    out = {"exponents": {}, "largest_T": {}}
    for m in methods:
        ok = [r for r in rows if r["method"] == m and r["status"] == "ok"]
        Ts = [r["T"] for r in ok]
        out["largest_T"][m] = max(Ts) if Ts else None
        out["exponents"][m] = {
            "time": efficiency.fit_exponent(Ts[-3:], [r["seconds"] for r in ok][-3:])[0],
            "memory": efficiency.fit_exponent(Ts[-3:], [r["peak_bytes"] for r in ok][-3:])[0],
            "fitted_on_T": Ts[-3:],
        }
    by = {(r["method"], r["T"]): r for r in rows if r["status"] == "ok"}
    common = sorted(T for (m, T) in by if m == "naive" and ("sdpa", T) in by)

    def compare(T):
        n, s = by[("naive", T)], by[("sdpa", T)]
        return {"T": T, "naive_ms": n["seconds"] * 1e3, "sdpa_ms": s["seconds"] * 1e3,
                "speedup_sdpa_vs_naive": n["seconds"] / s["seconds"],
                "naive_peak_bytes": n["peak_bytes"], "sdpa_peak_bytes": s["peak_bytes"],
                "memory_ratio_naive_vs_sdpa": n["peak_bytes"] / s["peak_bytes"]}

    out["at_8192"] = compare(8192) if 8192 in common else None
    out["at_largest_common_T"] = compare(common[-1]) if common else None
    return out


def _clean(x):
    """NaN and infinities become null: the file stays strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="cpu or cuda (default: cuda if present)")
    p.add_argument("--max-t", type=int, default=None, help="longest sequence (default: 4096 on cpu, 131072 on cuda)")
    p.add_argument("--min-t", type=int, default=None, help="shortest sequence (default: 256 on cpu, 1024 on cuda)")
    p.add_argument("--dtypes", default="float32,bfloat16", help="comma-separated torch dtypes")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=None, help="default: 2 on cpu, 16 on cuda")
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--chunk-size", type=int, default=None, help="chunked attention's key chunk (default: 256 cpu, 1024 cuda)")
    p.add_argument("--repeat", type=int, default=3, help="timed calls per point (median)")
    p.add_argument("--time-limit", type=float, default=None, help="drop a method after a call this slow (s; default 5 cpu, 30 cuda)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("--device cuda was asked for, but PyTorch sees no CUDA GPU on this machine; use --device cpu.")
        return 2
    gpu = device.type == "cuda"
    max_t = args.max_t or (131072 if gpu else 4096)
    min_t = args.min_t or (1024 if gpu else 256)
    heads = args.heads or (16 if gpu else 2)
    chunk = args.chunk_size or (1024 if gpu else 256)
    time_limit = args.time_limit or (30.0 if gpu else 5.0)
    if args.threads:
        torch.set_num_threads(args.threads)
    chunked_attention = load_chunked_attention()
    methods = {
        "naive": naive_attention,
        "chunked": lambda q, k, v: chunked_attention(q, k, v, chunk),
        "sdpa": F.scaled_dot_product_attention,
    }
    report = {
        "device": torch.cuda.get_device_name(device) if gpu else f"cpu ({platform.processor() or platform.machine()}, "
                                                                  f"{torch.get_num_threads()} threads)",
        "torch": torch.__version__,
        "config": {"batch": args.batch, "heads": heads, "head_dim": args.head_dim, "chunk_size": chunk,
                   "lengths": lengths(min_t, max_t), "repeat": args.repeat, "time_limit_s": time_limit},
        "sdpa_backends": {},
        "results": {},
    }
    print(f"attention scaling on {report['device']}, torch {torch.__version__}: B={args.batch} H={heads} "
          f"Dh={args.head_dim} chunk={chunk}, T = {min_t}..{max_t}")
    start = time.perf_counter()
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name.strip())
        report["sdpa_backends"][name] = efficiency.sdpa_backends(device, dtype)

        def make_inputs(T, dtype=dtype):
            g = torch.Generator(device).manual_seed(T)
            return tuple(torch.randn(args.batch, heads, T, args.head_dim, generator=g, device=device, dtype=dtype)
                         for _ in range(3))

        q, k, v = make_inputs(min_t)
        kernel = efficiency.sdpa_kernel_used(q, k, v)
        del q, k, v
        print(f"\n== {name}: SDPA runs the {kernel} kernel ==")
        with torch.no_grad():
            rows = efficiency.measure_scaling(methods, lengths(min_t, max_t), make_inputs, device=device,
                                              repeat=args.repeat, time_limit=time_limit)
        summary = summarise(rows, methods, device.type)
        report["results"][name] = {"sdpa_kernel": kernel, "rows": rows, **summary}
        for m, e in summary["exponents"].items():
            print(f"  {m:>8}: time ~ T^{e['time']:.2f}, memory ~ T^{e['memory']:.2f} (T = {e['fitted_on_T']}); "
                  f"largest T reached {summary['largest_T'][m]}")
        for label in ("at_8192", "at_largest_common_T"):
            c = summary[label]
            if c:
                print(f"  SDPA vs naive at T = {c['T']}: {c['speedup_sdpa_vs_naive']:.1f}x faster "
                      f"({c['naive_ms']:.2f} -> {c['sdpa_ms']:.2f} ms), {c['memory_ratio_naive_vs_sdpa']:.1f}x less memory "
                      f"({efficiency.format_bytes(c['naive_peak_bytes'])} -> {efficiency.format_bytes(c['sdpa_peak_bytes'])})")
        if gpu:
            torch.cuda.empty_cache()
    report["seconds"] = time.perf_counter() - start
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(_clean(report), indent=1))
        print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

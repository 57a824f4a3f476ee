"""Measuring what attention costs: time with a warm-up, peak memory, log-log exponents, SDPA kernels.

Lesson 12 and ``bench/attention_scaling.py`` use these helpers; a learner may read them. None of
them computes attention: they time and weigh the functions they are given.

    seconds = time_call(lambda: f(q, k, v), device="cpu")      # median of a few calls, after a warm-up
    out, peak = peak_memory(lambda: f(q, k, v), device="cpu")   # bytes, beyond what existed before
    slope, _ = fit_exponent([1024, 2048, 4096], [t1, t2, t4])   # cost ~ T^slope
    sdpa_kernel_used(q, k, v)                                   # 'flash (CPU)', 'flash', 'math', ...

Peak memory, two ways:
    CUDA  the caching allocator's own counter (``torch.cuda.max_memory_allocated``): everything the
          call allocated on the GPU, scratch space inside fused kernels included.
    CPU   PyTorch keeps no such counter for the CPU, so :class:`TensorMemory` watches every tensor an
          operation returns (a ``TorchDispatchMode``) and adds up the storage bytes alive at each
          moment. Scratch space that a single fused kernel allocates and frees internally (the CPU
          flash kernel's per-thread tiles: a few hundred KB) is not seen; every tensor a Python-level
          computation holds is.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
import weakref
from typing import Callable, Iterable, Sequence

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = [
    "synchronize",
    "time_call",
    "TensorMemory",
    "peak_memory",
    "fit_exponent",
    "sdpa_kernel_used",
    "sdpa_backends",
    "is_out_of_memory",
    "format_bytes",
    "measure_scaling",
]


def synchronize(device) -> None:
    """Wait for queued GPU work (CUDA runs asynchronously: a timer must wait for the kernels)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], *, device="cpu", warmup: int = 1, repeat: int = 3,
              max_seconds: float | None = None) -> float:
    """Median wall time of ``fn()`` in seconds, after ``warmup`` untimed calls.

    The warm-up pays one-off costs (kernel selection, allocator growth, lazy initialisation) that a
    long-running model pays once. ``max_seconds`` stops repeating early once that much time was
    spent timing (at least one timed call always runs).
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    times, spent = [], 0.0
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
        spent += times[-1]
        if max_seconds is not None and spent >= max_seconds:
            break
    return statistics.median(times)


class TensorMemory(TorchDispatchMode):
    """Peak bytes held by the tensors that operations create inside the ``with`` block (any device).

    Storage shared by views is counted once; a tensor's bytes are released when the last tensor
    using its storage is garbage collected. Tensors that existed before the block (the inputs) are
    not counted, nor are views of them.

        with TensorMemory() as mem:
            out = f(q, k, v)
        mem.peak          # bytes
    """

    def __init__(self):
        super().__init__()
        self.current = 0
        self.peak = 0
        self._bytes: dict[int, int] = {}     # storage address -> bytes
        self._count: dict[int, int] = {}     # storage address -> live tracked tensors using it
        self._ids: set[int] = set()          # ids of the tracked tensors still alive

    def _release(self, tid: int, key: int) -> None:
        self._ids.discard(tid)
        self._count[key] -= 1
        if self._count[key] == 0:
            self.current -= self._bytes.pop(key)
            del self._count[key]

    def _track(self, t: torch.Tensor, inputs: set[int]) -> None:
        if id(t) in self._ids or t.is_meta:
            return
        storage = t.untyped_storage()
        key, nbytes = storage.data_ptr(), storage.nbytes()
        if key == 0 or nbytes == 0:
            return
        if key not in self._bytes:
            if key in inputs:                # a view of a tensor made before the block: not new memory
                return
            self._bytes[key], self._count[key] = nbytes, 0
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        self._count[key] += 1
        self._ids.add(id(t))
        weakref.finalize(t, self._release, id(t), key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        leaves = pytree.tree_leaves((args, kwargs))
        inputs = {x.untyped_storage().data_ptr() for x in leaves if isinstance(x, torch.Tensor) and not x.is_meta}
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._track(t, inputs)
        return out


def peak_memory(fn: Callable[[], object], *, device="cpu"):
    """Run ``fn()`` once and return ``(its result, peak bytes it allocated)``.

    On CUDA the allocator's peak above what was allocated before the call; on the CPU the peak of
    :class:`TensorMemory`. The result is kept alive, so the peak includes the output.
    """
    device = torch.device(device)
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        out = fn()
        synchronize(device)
        return out, torch.cuda.max_memory_allocated(device) - base
    with TensorMemory() as mem:
        out = fn()
    return out, mem.peak


def fit_exponent(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares fit of ``log y = slope * log x + log c``; returns ``(slope, c)``.

    A cost that grows like ``T^2`` has slope 2 on a log-log plot, one that grows like ``T`` slope 1.
    Non-positive or non-finite points are left out; fewer than two points give ``(nan, nan)``.
    """
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys)
           if x and y and x > 0 and y > 0 and math.isfinite(x) and math.isfinite(y)]
    if len(pts) < 2:
        return math.nan, math.nan
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx == 0:
        return math.nan, math.nan
    slope = sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
    return slope, math.exp(my - slope * mx)


# aten kernels behind F.scaled_dot_product_attention, and what the course calls them
_SDPA_KERNELS = {
    "_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_efficient_attention": "memory-efficient",
    "_scaled_dot_product_cudnn_attention": "cuDNN",
    "_scaled_dot_product_fused_attention_overrideable": "overrideable",
}


class _OpNames(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def sdpa_kernel_used(q, k, v, **kwargs) -> str:
    """Which kernel ``F.scaled_dot_product_attention(q, k, v, **kwargs)`` runs for these tensors.

    Returns ``"flash"``, ``"flash (CPU)"``, ``"memory-efficient"``, ``"cuDNN"``, or ``"math"`` (the
    unfused reference: matmul, softmax, matmul, with the full T_q x T_k matrix). Honours an
    enclosing ``torch.nn.attention.sdpa_kernel(...)`` restriction.
    """
    import torch.nn.functional as F

    with torch.no_grad(), _OpNames() as ops:
        F.scaled_dot_product_attention(q, k, v, **kwargs)
    for name in ops.names:
        if name in _SDPA_KERNELS:
            return _SDPA_KERNELS[name]
    return "math"


def sdpa_backends(device="cpu", dtype=torch.float32, *, T: int = 64, head_dim: int = 64) -> dict[str, str]:
    """For each ``SDPBackend`` (flash, memory-efficient, cuDNN, math): does it run here?

    Each backend is tried alone (``torch.nn.attention.sdpa_kernel``) on a small ``(1, 2, T, head_dim)``
    input of ``dtype``. Returns ``{backend: "runs" or the reason it does not}``.
    """
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(1, 2, T, head_dim, device=device, dtype=dtype)
    out = {}
    for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"):
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            out[name] = "not in this PyTorch"
            continue
        try:
            with sdpa_kernel(backend), _quiet_warnings():
                F.scaled_dot_product_attention(q, q, q)
            out[name] = "runs"
        except RuntimeError as exc:
            text = str(exc).strip()
            if "No viable backend" in text or "No available kernel" in text:
                out[name] = "not available for this device and dtype"
            else:
                out[name] = "no: " + (text.splitlines()[0][:120] if text else type(exc).__name__)
    return out


def _quiet_warnings():
    import warnings

    ctx = warnings.catch_warnings()

    class _Quiet:
        def __enter__(self):
            ctx.__enter__()
            warnings.simplefilter("ignore")

        def __exit__(self, *exc):
            return ctx.__exit__(*exc)

    return _Quiet()


def is_out_of_memory(exc: BaseException) -> bool:
    """True for the errors PyTorch raises when an allocation does not fit (GPU or CPU)."""
    if isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in text or "can't allocate memory" in text or "not enough memory" in text
        or isinstance(exc, MemoryError))


def format_bytes(n: float) -> str:
    """``1536 -> '1.5 KiB'``."""
    if n is None or not math.isfinite(n):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


def measure_scaling(methods: dict[str, Callable], lengths: Iterable[int], make_inputs: Callable[[int], tuple], *,
                    device="cpu", warmup: int = 1, repeat: int = 3, time_limit: float | None = None,
                    memory: bool = True, log: Callable[[str], None] | None = print) -> list[dict]:
    """Time and weigh each method at each sequence length.

    Args:
        methods: name -> ``fn(*inputs)``.
        lengths: the sequence lengths T, in increasing order.
        make_inputs: ``T -> inputs`` (a tuple of tensors on ``device``).
        device: where the inputs live (decides how time and memory are measured).
        warmup, repeat: see :func:`time_call`.
        time_limit: once one call of a method takes longer than this (seconds), its longer lengths
            are skipped ("too slow"). A method that runs out of memory is skipped from then on too.
        memory: also measure the peak memory of one call (:func:`peak_memory`).
        log: called with one line per measurement (``None``: silent).

    Returns:
        One dict per (method, T): ``method, T, seconds, peak_bytes, status`` (``"ok"``,
        ``"out of memory"``, ``"too slow"``), seconds / peak_bytes ``nan`` when not measured.
    """
    rows, stopped = [], {}
    for T in lengths:
        inputs = make_inputs(T)
        for name, fn in methods.items():
            row = {"method": name, "T": int(T), "seconds": math.nan, "peak_bytes": math.nan, "status": "ok"}
            if name in stopped:
                row["status"] = stopped[name]
                rows.append(row)
                continue
            try:
                warm = warmup
                if memory:
                    start = time.perf_counter()
                    out, peak = peak_memory(functools.partial(fn, *inputs), device=device)
                    row["peak_bytes"] = float(peak)
                    del out
                    if time.perf_counter() - start > 1.0:     # a slow call has warmed up enough: save the time
                        warm = 0
                row["seconds"] = time_call(functools.partial(fn, *inputs), device=device, warmup=warm,
                                           repeat=repeat, max_seconds=time_limit)
            except Exception as exc:  # noqa: BLE001 - only out-of-memory is expected; re-raise the rest
                if not is_out_of_memory(exc):
                    raise
                row["status"] = stopped[name] = "out of memory"
                if torch.device(device).type == "cuda":
                    torch.cuda.empty_cache()
            if time_limit is not None and row["seconds"] > time_limit and name not in stopped:
                stopped[name] = "too slow"
            rows.append(row)
            if log is not None:
                if row["status"] == "ok":
                    log(f"{name:>10}  T={T:>6}  {row['seconds'] * 1e3:9.2f} ms  peak {format_bytes(row['peak_bytes']):>10}")
                else:
                    log(f"{name:>10}  T={T:>6}  {row['status']}")
        del inputs
    return rows

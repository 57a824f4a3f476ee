"""Why SDPA's speed-up over naive attention depends on the card: time each SDPA backend, forced, beside naive
attention, in bf16, with CUDA events after a warm-up, for a few (B, H) at T = 8192 and 16384.

    python3 bench/sdpa_backends.py          (needs a CUDA GPU; docs/gpu-2026-11-28.md has an H200's numbers)
"""

import functools

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
            ("cudnn", SDPBackend.CUDNN_ATTENTION))


def naive(q, k, v):
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    return s.softmax(-1) @ v


def sdpa(q, k, v, backend=None):
    if backend is None:
        return F.scaled_dot_product_attention(q, k, v)
    with sdpa_kernel([backend]):
        return F.scaled_dot_product_attention(q, k, v)


def timed(fn, reps=10):
    """Milliseconds a call, CUDA events around ``reps`` calls after 3 warm-up calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main():
    print(torch.__version__, torch.cuda.get_device_name())
    for T in (8192, 16384):
        for B, H in ((1, 16), (4, 16), (1, 32)):
            q, k, v = (torch.randn(B, H, T, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            row = {}
            try:
                row["naive"] = timed(functools.partial(naive, q, k, v))
            except torch.OutOfMemoryError:
                row["naive"] = float("nan")
                torch.cuda.empty_cache()
            row["sdpa_default"] = timed(functools.partial(sdpa, q, k, v))
            for name, backend in BACKENDS:
                try:
                    row[name] = timed(functools.partial(sdpa, q, k, v, backend))
                except Exception as exc:  # noqa: BLE001 - a backend this card or shape does not have
                    row[name] = f"n/a ({type(exc).__name__})"
            flops = 4 * B * H * T * T * 64
            said = " ".join(f"{k}={v:.3f}ms" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
            best = min(x for x in row.values() if isinstance(x, float) and x == x and x > 0)
            print(f"T={T} B={B} H={H}: {said} | naive/sdpa_default={row['naive'] / row['sdpa_default']:.1f}x "
                  f"naive/best={row['naive'] / best:.1f}x | best {flops / best / 1e9:.0f} TFLOP/s")
            del q, k, v
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""Why is SDPA only ~5x naive attention at T = 8192? Time each SDPA backend, forced, beside naive attention,
bf16, CUDA events after a warm-up, for a few (B, H) at T = 8192 and 16384."""
import torch, torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend

def naive(q, k, v):
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    return s.softmax(-1) @ v

def timed(fn, reps=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) / reps

print(torch.__version__, torch.cuda.get_device_name())
for T in (8192, 16384):
    for B, H in ((1, 16), (4, 16), (1, 32)):
        q, k, v = (torch.randn(B, H, T, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        row = {}
        try:
            row["naive"] = timed(lambda: naive(q, k, v))
        except torch.OutOfMemoryError:
            row["naive"] = float("nan"); torch.cuda.empty_cache()
        row["sdpa_default"] = timed(lambda: F.scaled_dot_product_attention(q, k, v))
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                         ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                with sdpa_kernel([be]):
                    row[name] = timed(lambda: F.scaled_dot_product_attention(q, k, v))
            except Exception as e:  # noqa: BLE001
                row[name] = f"n/a ({type(e).__name__})"
        flops = 4 * B * H * T * T * 64
        msg = " ".join(f"{k}={v:.3f}ms" if isinstance(v, float) else f"{k}={v}" for k, v in row.items())
        best = min(x for x in row.values() if isinstance(x, float) and x == x and x > 0)
        print(f"T={T} B={B} H={H}: {msg} | naive/sdpa_default={row['naive'] / row['sdpa_default']:.1f}x "
              f"naive/best={row['naive'] / best:.1f}x | best {flops / best / 1e9:.0f} TFLOP/s")
        del q, k, v; torch.cuda.empty_cache()

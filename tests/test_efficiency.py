"""Units for course.efficiency (timing, peak memory, exponent fits, SDPA kernels) and lesson 12's test helpers."""

from __future__ import annotations

import math
import pickle

import pytest
import torch
import torch.nn.functional as F

from course import checks_12, efficiency


def test_fit_exponent_recovers_powers():
    Ts = [256, 512, 1024, 2048]
    assert efficiency.fit_exponent(Ts, [3 * T ** 2 for T in Ts])[0] == pytest.approx(2.0)
    slope, c = efficiency.fit_exponent(Ts, [5 * T for T in Ts])
    assert slope == pytest.approx(1.0) and c == pytest.approx(5.0)
    assert math.isnan(efficiency.fit_exponent([1], [1])[0])
    assert efficiency.fit_exponent([1, 2, 4, 8], [1, 4, float("nan"), 64])[0] == pytest.approx(2.0)   # bad points dropped


def test_tensor_memory_counts_new_tensors_once():
    x = torch.zeros(1000)                                  # made before: not counted
    with efficiency.TensorMemory() as mem:
        a = x + 1                                          # 4000 bytes
        b = a.view(10, 100)                                # a view: same storage, not counted again
        c = x[:10]                                         # a view of the input: not new memory
        del a, b, c
        d = torch.ones(500) * 2                            # 2000 + 2000 while both live, then 2000
    assert mem.peak == 4000
    assert mem.current == 2000                             # d is still alive
    del d


def test_peak_memory_sees_the_quadratic_matrix():
    def naive(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1), -1) @ v

    peaks = []
    for T in (128, 256):
        q = torch.randn(1, T, 8)
        _, peak = efficiency.peak_memory(lambda: naive(q, q, q))
        peaks.append(peak)
        assert peak >= 2 * T * T * 4                       # scores and weights, float32
    assert efficiency.fit_exponent([128, 256], peaks)[0] > 1.8
    q4 = q[None]                                            # (1, 1, T, 8): the fused CPU kernel wants 4-D inputs
    assert efficiency.sdpa_kernel_used(q4, q4, q4) != "math"
    _, flash = efficiency.peak_memory(lambda: F.scaled_dot_product_attention(q4, q4, q4))
    assert flash < T * T * 4                                # the fused kernel never returns a T x T tensor


def test_time_call_and_measure_scaling():
    assert efficiency.time_call(lambda: torch.ones(10).sum(), repeat=2) >= 0.0
    rows = efficiency.measure_scaling({"sum": lambda x: x.sum()}, [8, 16], lambda T: (torch.ones(T),), repeat=1, log=None)
    assert [r["T"] for r in rows] == [8, 16] and all(r["status"] == "ok" for r in rows)

    def oom(x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8 GiB")

    rows = efficiency.measure_scaling({"oom": oom}, [8, 16], lambda T: (torch.ones(T),), repeat=1, log=None)
    assert [r["status"] for r in rows] == ["out of memory", "out of memory"]
    with pytest.raises(ValueError):
        efficiency.measure_scaling({"bad": lambda x: (_ for _ in ()).throw(ValueError("boom"))}, [8],
                                   lambda T: (torch.ones(T),), repeat=1, log=None)


def test_sdpa_kernel_names():
    q = torch.randn(1, 2, 16, 8)
    assert efficiency.sdpa_kernel_used(q, q, q) in {"flash (CPU)", "flash", "memory-efficient", "cuDNN", "math"}
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        assert efficiency.sdpa_kernel_used(q, q, q) == "math"
    backends = efficiency.sdpa_backends("cpu", T=8, head_dim=8)
    assert backends["MATH"] == "runs"


def test_format_bytes():
    assert efficiency.format_bytes(512) == "512 B"
    assert efficiency.format_bytes(1536) == "1.5 KiB"
    assert efficiency.format_bytes(3 * 2 ** 30) == "3.0 GiB"


def test_watched_tensor_refuses_large_intermediates_and_survives_pickle():
    q = checks_12.watched(torch.randn(2, 64, 4), limit=2 * 64 * 64 // 2)
    small = q @ q[..., :16, :].transpose(-2, -1)           # (2, 64, 16): fine
    assert isinstance(small, checks_12.Watched)
    with pytest.raises(AssertionError, match="as large as the whole T_q x T_k matrix"):
        q @ q.transpose(-2, -1)                            # (2, 64, 64)
    again = pickle.loads(pickle.dumps(q.detach().clone()))   # how the grader sends it into the sandbox
    with pytest.raises(AssertionError):
        again @ again.transpose(-2, -1)


def test_run_chunked_forbids_sdpa():
    def cheat(q, k, v, chunk_size, causal=False):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    q, k, v = checks_12.random_qkv(2, 8, 4)
    with pytest.raises(AssertionError, match="fused attention"):
        checks_12.run_chunked(cheat, q, k, v, 4)

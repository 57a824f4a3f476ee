"""The GPU path: clear device errors, the doctor, the training loop's device handling, bench/gpu.sh.

Everything here runs on a CPU-only machine (CI). Tests that need a CUDA GPU are marked
``@pytest.mark.gpu`` and skip with the reason when PyTorch sees none.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import course
from course import config, train
from course.commands import doctor

ROOT = Path(__file__).resolve().parents[1]
GPU_SH = ROOT / "bench" / "gpu.sh"
HAS_CUDA = torch.cuda.is_available()
needs_no_gpu = pytest.mark.skipif(HAS_CUDA, reason="checks what happens on a machine without a GPU")


# -- DEVICE = "cuda" / "mps" on a machine without one -------------------------------------------------

@needs_no_gpu
@pytest.mark.parametrize("device", ["cuda", "CUDA", "cuda:0", "gpu"])
def test_cuda_without_gpu_says_what_to_set(device, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with pytest.raises(config.DeviceError) as info:
        course.setup("smoke", device, 0, quiet=True)
    message = str(info.value)
    assert "no CUDA GPU" in message and 'DEVICE = "auto"' in message and 'DEVICE = "cpu"' in message
    assert "parameters cell" in message
    # the learner sees setup's one error, not a chain through torch's CUDA initialisation
    assert info.value.__cause__ is None and info.value.__suppress_context__
    assert isinstance(info.value, RuntimeError)          # what older code and tests catch


def test_cuda_index_beyond_the_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(config.DeviceError, match=r"has 1 CUDA GPU\(s\): cuda:0\. Set DEVICE = 'cuda' or 'auto'"):
        config.resolve_device("cuda:3")
    assert config.resolve_device("cuda:0") == "cuda:0"


def test_mps_where_there_is_none(monkeypatch):
    if torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    with pytest.raises(config.DeviceError, match=r"DEVICE = 'mps' \(Apple-silicon GPU\).*DEVICE = \"auto\""):
        config.resolve_device("mps")


def test_unknown_device_is_a_value_error():
    with pytest.raises(ValueError, match="DEVICE must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', not 'tpu'"):
        config.resolve_device("tpu")
    with pytest.raises(ValueError, match="cuda:N"):
        config.resolve_device("cuda:x")


def test_auto_picks_the_cpu_without_gpu():
    assert config.resolve_device("auto") == ("cuda" if HAS_CUDA else "cpu")
    assert config.resolve_device("cpu") == "cpu"


def test_cpu_run_changes_nothing():
    run = course.Run("standard", "cpu", 0)
    assert not run.cuda and not run.amp
    x = torch.randn(3)
    with run.autocast():
        assert not torch.is_autocast_enabled()
        assert (x @ x).dtype == torch.float32
    batch = {"x": x, "pair": (x, 1), "name": "a"}
    moved = run.put(batch)
    assert moved["x"] is x and moved["pair"][0] is x and moved["name"] == "a"
    run.sync()                                             # nothing to wait for


# -- the training loop ---------------------------------------------------------------------------------

def _toy(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 3))
    gen = torch.Generator().manual_seed(seed + 1)

    def make_batch(step):
        return torch.randn(16, 6, generator=gen), torch.randint(0, 3, (16,), generator=gen)

    return model, make_batch


def _loss(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def test_fit_on_cpu_matches_a_plain_loop_exactly():
    """Keeping losses on the device must not change a CPU number: compare with the per-step .item() loop."""
    steps, lr, warmup = 40, 1e-2, 5
    model, make_batch = _toy()
    hist = train.fit(model, make_batch, _loss, steps=steps, lr=lr, warmup=warmup, clip=0.5)

    ref, ref_batch = _toy()
    opt = torch.optim.AdamW(ref.parameters(), lr=lr, weight_decay=0.0)         # fit's default
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    losses, norms = [], []
    for step in range(steps):
        loss = _loss(ref, ref_batch(step))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(ref.parameters()), 0.5)))
        opt.step()
        sched.step()
        losses.append(loss.item())
    assert hist.losses == losses and hist.grad_norms == norms
    assert all(type(v) is float for v in hist.losses + hist.grad_norms)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters()))


def test_fit_callback_gets_floats_and_amp_is_ignored_on_cpu():
    model, make_batch = _toy()
    seen = []
    hist = train.fit(model, make_batch, _loss, steps=12, on_step=lambda s, l: seen.append((s, l)), amp=True,
                     device="cpu", log_every=5)
    assert [s for s, _ in seen] == list(range(12))
    assert [l for _, l in seen] == hist.losses and all(type(l) is float for _, l in seen)
    assert hist.seconds > 0 and not model.training


def test_to_device_keeps_structure():
    Pair = __import__("collections").namedtuple("Pair", "a b")
    x = torch.ones(2)
    out = train.to_device([Pair(x, {"k": x}), 3, None], "cpu")
    assert isinstance(out, list) and isinstance(out[0], Pair) and out[0].a is x and out[0].b["k"] is x
    assert out[1:] == [3, None]


# -- course doctor -------------------------------------------------------------------------------------

def test_peak_table():
    assert doctor.peak_tflops("NVIDIA H100 80GB HBM3") == ("H100 SXM", 989.0)
    assert doctor.peak_tflops("NVIDIA H100 PCIe") == ("H100 PCIe", 756.0)
    assert doctor.peak_tflops("NVIDIA H100 NVL") == ("H100 NVL", 835.0)
    assert doctor.peak_tflops("NVIDIA H200") == ("H200 SXM", 989.0)
    assert doctor.peak_tflops("NVIDIA A100-SXM4-80GB") == ("A100", 312.0)
    assert doctor.peak_tflops("NVIDIA L4")[0] == "L4"
    assert doctor.peak_tflops("NVIDIA L40S")[0] == "L40S"
    assert doctor.peak_tflops("NVIDIA GeForce RTX 4090")[0] == "RTX 4090"
    assert doctor.peak_tflops("Tesla T4")[0] == "T4 (fp16)"
    assert doctor.peak_tflops("NVIDIA GeForce RTX 4070") is None
    assert doctor.peak_tflops("Some Future GPU") is None


@needs_no_gpu
def test_doctor_says_no_gpu_on_cpu(tmp_path, capsys):
    out = tmp_path / "doctor.json"
    doctor.doctor(out)
    text = capsys.readouterr().out
    assert "GPU             none: no GPU here" in text
    assert "GFLOP/s fp32 with 1 thread" in text
    assert "SDPA backends   on the CPU" in text and "math" in text
    info = json.loads(out.read_text())["hardware"]
    assert info["device"] == "cpu" and info["gpus"] == []
    assert info["matmul"]["gflops"] > 0
    backends = {r["backend"]: r for r in info["sdpa"]["backends"]}
    assert set(backends) == {"flash", "memory-efficient", "cuDNN", "math"} and backends["math"]["runs"]


# -- bench/gpu.sh --------------------------------------------------------------------------------------

def _gpu_sh(*args, cwd, env=None, timeout=300):
    return subprocess.run(["bash", str(GPU_SH), *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@needs_no_gpu
def test_gpu_sh_refuses_without_gpu(tmp_path):
    proc = _gpu_sh("out", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no CUDA GPU is visible" in proc.stderr and "--allow-cpu" in proc.stderr
    assert not (tmp_path / "out").exists()                 # refused before writing anything


def test_gpu_sh_usage_errors(tmp_path):
    assert _gpu_sh("--bogus", cwd=tmp_path).returncode == 2
    help_ = _gpu_sh("--help", cwd=tmp_path)
    assert help_.returncode == 0 and "--allow-cpu" in help_.stdout


FAKE_SCALING = """
import argparse, json
ap = argparse.ArgumentParser(); ap.add_argument("--device"); ap.add_argument("--json")
a = ap.parse_args()
json.dump({"device": a.device, "summary": {"sdpa_speedup_T8192": 12.5},
           "goals": [{"name": "SDPA >= 10x naive at T=8192", "value": 12.5, "target": ">= 10", "met": True}],
           "rows": [{"T": 1024, "ms": 1.0}]}, open(a.json, "w"))
print("fake scaling done")
"""


def test_gpu_sh_allow_cpu_continues_past_failures_and_reports(tmp_path):
    """From another folder, a relative OUT; a failing and missing benchmark are recorded, the rest still runs."""
    benches = tmp_path / "benches"
    benches.mkdir()
    (benches / "attention_scaling.py").write_text(textwrap.dedent(FAKE_SCALING))
    (benches / "gpt.py").write_text("import sys\nprint('boom', file=sys.stderr)\nsys.exit(3)\n")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    proc = _gpu_sh("--allow-cpu", "--quick", "--steps", "attention_scaling gpt bert", "rel/out", cwd=cwd,
                   env={"GPU_SH_BENCH_DIR": str(benches)})
    assert proc.returncode == 1, proc.stdout + proc.stderr      # a step failed: non-zero, but a report exists
    out = cwd / "rel" / "out"
    report = json.loads((out / "report.json").read_text())
    status = {s["name"]: s["status"] for s in report["steps"]}
    assert status == {"attention_scaling": "passed", "gpt": "failed", "bert": "missing"}
    assert report["device"] == "cpu" and report["quick"] is True and not report["all_passed"]
    assert report["benchmarks"]["attention_scaling"]["device"] == "cpu"
    assert "boom" in (out / "logs" / "gpt.log").read_text()
    md = (out / "report.md").read_text()
    assert "sdpa_speedup_T8192" in md and "attention_scaling: SDPA >= 10x naive at T=8192" in md
    assert "| gpt | failed | 3 |" in md and "does not exist yet" in md


@pytest.mark.slow
def test_gpu_sh_allow_cpu_runs_doctor_and_a_lesson(tmp_path):
    proc = _gpu_sh("--allow-cpu", "--quick", "--lessons", "00_softmax_lookup", "--steps", "doctor lessons",
                   str(tmp_path / "out"), cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert [s["name"] for s in report["steps"]] == ["doctor", "lesson:00_softmax_lookup"]
    assert report["lessons"]["lessons"][0]["status"] == "passed"
    assert report["doctor"]["hardware"]["device"] == "cpu"
    assert report["goals"][0]["met"] is None                  # a CPU smoke run says nothing about the goal


def test_gpu_sh_keeps_to_its_budget_and_reports_when_stopped(tmp_path):
    """A lent GPU comes with minutes: --budget skips what would not fit, and a run stopped from outside (SIGTERM,
    as a device's time limit does) ends its step and still writes the report."""
    import signal
    import time

    benches = tmp_path / "benches"
    benches.mkdir()
    (benches / "attention_scaling.py").write_text("import time\nprint('started', flush=True)\ntime.sleep(120)\n")
    proc = _gpu_sh("--allow-cpu", "--quick", "--budget", "5", "--steps", "attention_scaling", "spent", cwd=tmp_path,
                   env={"GPU_SH_BENCH_DIR": str(benches)})
    report = json.loads((tmp_path / "spent" / "report.json").read_text())
    assert {s["name"]: s["status"] for s in report["steps"]} == {"attention_scaling": "skipped"}, proc.stdout
    env = dict(os.environ, GPU_SH_BENCH_DIR=str(benches))
    run = subprocess.Popen(["bash", str(GPU_SH), "--allow-cpu", "--quick", "--steps", "attention_scaling",
                            str(tmp_path / "stopped")], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    log = tmp_path / "stopped" / "logs" / "attention_scaling.log"
    deadline = time.monotonic() + 120
    while not (log.is_file() and "started" in log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=120)
    assert run.returncode == 3, out
    report = json.loads((tmp_path / "stopped" / "report.json").read_text())
    assert [(s["name"], s["status"]) for s in report["steps"]] == [("attention_scaling", "stopped")], out


def test_a_lesson_stopped_from_outside_says_which_cell_it_was_in(tmp_path):
    """A lesson's step ended by its limit writes no report of its own; papermill saves the executed notebook
    as each cell starts, so the checklist's report still says which cell the lesson was in, and how long the
    finished ones took (the lesson 08 run on an H200 that stopped at 300 s said nothing of where)."""
    import signal
    import time

    import nbformat

    sys.path.insert(0, str(ROOT / "bench"))
    import report as gpu_report

    from course.tools.runner import cell_times

    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    nb.cells = [nbformat.v4.new_markdown_cell("# A lesson\n## 1. Quick"), nbformat.v4.new_code_cell("x = 1"),
                nbformat.v4.new_markdown_cell("## 2. Beam search, sentence by sentence"),
                nbformat.v4.new_code_cell("# the slow part\nimport time\ntime.sleep(120)"),
                nbformat.v4.new_code_cell("y = 2")]
    source = tmp_path / "lesson.ipynb"
    nbformat.write(nb, source)
    out = tmp_path / "gpu"
    executed = out / "lessons" / "08_slow" / "08_slow.ipynb"
    executed.parent.mkdir(parents=True)
    run = subprocess.Popen([sys.executable, "-c", "import papermill as pm, sys; pm.execute_notebook(sys.argv[1], "
                            "sys.argv[2], kernel_name='python3', progress_bar=False)", str(source), str(executed)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (cell_times(executed).get("running") or {}).get("cell") == 4 and time.monotonic() < deadline:
        time.sleep(0.3)
    run.send_signal(signal.SIGTERM)
    run.communicate(timeout=60)

    times = cell_times(executed)
    assert times["running"]["cell"] == 4, times
    assert times["running"]["section"] == "2. Beam search, sentence by sentence"
    assert times["running"]["line"] == "import time"            # the first line of code, not the comment
    assert times["finished"] == 1 and times["code_cells"] == 3 and times["slowest"][0]["cell"] == 2
    (out / "steps.jsonl").write_text(json.dumps({"name": "lesson:08_slow", "status": "timeout", "rc": 124,
                                                 "seconds": 300.0, "log": "", "command": "course run"}) + "\n")
    rep = gpu_report.build(out, device="cuda", profile="full", quick=False, seconds=300.0)
    md = (out / "report.md").read_text()
    assert "| 08_slow | timeout (step ended from outside) | 300 | full/cuda |" in md, md
    assert "08_slow: stopped in cell 4 (2. Beam search, sentence by sentence: `import time`" in md, md
    assert rep["lessons"]["lessons"][0]["cells"]["running"]["cell"] == 4
    assert rep["goals"][0]["met"] is None                       # a stopped lesson is not the whole course
    assert cell_times(tmp_path / "missing.ipynb") == {}


# -- on a GPU ------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU; PyTorch sees none here")
def test_gpu_setup_full_profile_and_amp(monkeypatch, capsys):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("COURSE_PROFILE", raising=False)
    run = course.setup("auto", "auto", 0)
    assert run.device == "cuda" and run.profile == "full" and "TF32" in capsys.readouterr().out
    assert run.amp == (torch.cuda.get_device_capability()[0] >= 8)
    with run.autocast():
        a = torch.randn(8, 8, device="cuda")
        assert (a @ a).dtype == (torch.bfloat16 if run.amp else torch.float32)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU; PyTorch sees none here")
def test_gpu_fit_with_amp_and_pinned_batches():
    model, make_batch = _toy()
    model = model.cuda()
    hist = train.fit(model, make_batch, _loss, steps=30, lr=1e-2, amp=True, device="cuda")
    assert len(hist.losses) == 30 and all(v == v for v in hist.losses)
    assert hist.losses[-1] < hist.losses[0]
    assert all(p.dtype == torch.float32 for p in model.parameters())
    x = torch.arange(6.0)
    y = train.to_device(x, "cuda")
    assert y.is_cuda and torch.equal(y.cpu(), x)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU; PyTorch sees none here")
def test_gpu_doctor_measures_the_card():
    info = doctor.hardware()
    assert info["device"] == "cuda" and info["gpus"][0]["memory_gib"] > 0
    assert info["matmul"]["tflops"] > 1
    assert any(r["runs"] for r in info["sdpa"]["backends"])


def test_gpu_tests_are_marked():
    """Every test here that needs a GPU carries the gpu marker (so `-m "not gpu"` deselects them)."""
    module = sys.modules[__name__]
    for name in ("test_gpu_setup_full_profile_and_amp", "test_gpu_fit_with_amp_and_pinned_batches",
                 "test_gpu_doctor_measures_the_card"):
        marks = {m.name for m in getattr(module, name).pytestmark}
        assert {"gpu", "skipif"} <= marks

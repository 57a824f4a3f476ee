"""Estimate every lesson's ``full`` profile on one H100 from its work, calibrated (issue 54: the course's
``full`` profile in at most 15 minutes on one card, lesson after lesson).

    .venv/bin/python bench/full_estimate.py                  # the table of docs/benchmarks.md (markdown), ~2 min of one core
    .venv/bin/python bench/full_estimate.py --detail         # and every experiment of every lesson
    .venv/bin/python bench/full_estimate.py --lessons 08 09 --detail --no-checks
    .venv/bin/python bench/full_estimate.py --json OUT.json  # every number
    .venv/bin/python bench/full_estimate.py --lessons 09 --what-if 09 cfg.steps=2000 --what-if 09 d_gru=512   # a re-size
    .venv/bin/python bench/full_estimate.py --check-standard # the same work model against the standard profile's CPU times

Nothing here runs a lesson. For each lesson it

1. reads the ``full`` values of the solution notebook's ``run.pick(...)`` calls from its source (``standard``
   where a call has no ``full``), so a re-size of the notebook moves the estimate;
2. lists the experiments of the ``full`` profile (training loops, evaluations, generation, timing loops), each
   with its units (optimizer steps or calls) and, per unit,
   * the model FLOPs (``FlopCounterMode`` on the lesson's own model code, run here at a reduced batch and
     scaled linearly to the full batch: matmuls forward and backward, so attention's T^2 products are in;
     for the transformers also the textbook count 6 N + 12 L T d per token as a check),
   * the kernels a CUDA run launches (aten operators counted with a dispatch mode, views left out,
     AdamW fused or foreach and cuDNN's RNNs counted as a CUDA run calls them),
   * the seconds of CPU-resident work (batches made in Python, models the lesson runs on the CPU on purpose),
     timed here;
3. turns each unit into seconds on the GPU machine: ``max(host, device)`` where
   ``host = kernels x c_op + cpu / s_host`` (eager PyTorch cannot launch faster than its Python thread) and
   ``device = kernels x k_min + FLOPs / R(width, dtype)``, plus a fixed start-up per lesson.

The constants and where they come from (see ``calibrate``): ``c_op``, the host's time per launched kernel, from
lesson 06's ``full`` run on an H200 (55.4 s, docs/gpu-2026-11-28.md), a launch-bound lesson whose work is
counted here exactly as every other lesson's; ``R``, the effective FLOP/s of a model of width d, from the
benchmarks on the same H200 (GPT-2 and ViT-B/16 in bf16, BERT d 512 in TF32), falling in proportion to the width
below theirs; ``s_host``, the GPU machine's CPU against this one, from lesson 00 (a CPU-only lesson) on the
H100; ``k_min``, a kernel's minimum time on the device, the one constant taken from no measurement here
(it never decides a lesson: every small model is host-bound). Three scenarios (fast, mid, slow) move every
uncertain constant together and give the range. How the work model fares against the CPU: ``--check-standard``
predicts the standard profile's CPU time with the same experiment lists (CPU constants measured here) for
comparison with docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import glob
import json
import math
import os
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

os.environ.setdefault("TQDM_DISABLE", "1")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

BUDGET_S = 900.0                     # the issue's goal: the whole course's full profile in 15 minutes
LESSONS = ("00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13", "14", "15", "16")

# --------------------------------------------------------------------------- measurements on a GPU (docs/gpu-*.md)

# The full values of the lessons when they ran on a GPU (2026-11-25 and 11-28), where they differ from today's: the
# calibration (06) and the cross-checks (02, 03, 07, 08) need the work of those runs, not of today's notebooks.
MEASURED_WITH = {
    "02": {"STEPS": 1200},
    "03": {"TR": dict(n_train=20000, n_test=1000, max_len=10, steps=400, d_hidden=128)},
    "06": {"cfg.steps": 400},
    "07": {"cfg_a.steps": 600, "cfg_a.seeds": 3, "cfg_b.steps": 600, "cfg_b.warmup": 60},
    "08": {"cfg.epochs": 12, "cfg.warmup": 400, "beam_pairs": 200, "cfg_avg": dict(steps=1170, every=58, K=5),
           "cfg_warm": dict(n_layers=6, steps=1000, lr=1e-3, warmup=200)},
}

GPU = {
    # lesson 06's full profile alone on an H200 (docs/gpu-2026-11-28.md, lessons-1712/lessons-report.json)
    "lesson06_full_s": 55.4,
    # bench/gpt.py on the H200: GPT-2 124M, block 1024, batch 16, bf16 autocast, training tokens/s and FLOPs per token
    "gpt2_tokens_s": 320128.0, "gpt2_flops_token": 855383040.0, "gpt2_width": 768,
    # bench/vit.py on the H200: ViT-B/16, batch 128, bf16 autocast, training images/s
    "vit_images_s": 2386.2,
    # bench/bert.py on the H200: d 512, 8 layers, d_ff 2048, seq 128, batch 64, vocab 1000, float32 (TF32), one step
    "bert_train_s": 0.0383,
    # lesson 00's full profile on the H100 beside 11 other lessons (docs/gpu-2026-11-25.md): all of its work runs on the CPU
    "lesson00_shared_s": 41.6,
    # lesson 12 on the H100 (docs/gpu-2026-11-25.md, second call): torch.compile of one encoder layer, seconds
    "compile_s": 10.5,
    # bench/attention_scaling.py on the H200, bf16, B 1, H 16, Dh 64 (docs/gpu-2026-11-28.md): ms per call at T = 16 384
    "attn16k_ms": {"naive": 16.57, "chunked": 31.42, "sdpa": 2.26},
}
# Upper bounds: lessons run beside 11 others on the H100 on 2026-11-25 with that day's full values (MEASURED_WITH
# where they have changed since; the GPU and 16 cores were shared, so each one alone is faster).
SHARED_UPPER = {"00": 41.6, "01": 161.0, "02": 300.0, "03": 232.0, "05": 95.0, "07": 288.0}
# Lesson 04's 16 ablation runs (2 000 steps each) took 306.5 s beside 4 lessons and a benchmark on the H100
# (docs/gpu-2026-11-25/lesson-04-call3.metrics.jsonl); lesson 08 did not finish in 300 s alone on the H200.
OBSERVED = {"04_ablation_shared_s": 306.5, "08_h200_more_than_s": 300.0}
# The smoke profile's lesson time on this 2-core machine, kernel start included (`course run LESSON --profile smoke`,
# 2026-12-07, load average 2-6; docs/benchmarks.md gave 9-12 s for 00-07 and 15-50 s for 08-12 on a busier day). It
# holds the start-up, the imports, the test cells and the plots: what a lesson costs whatever its profile.
SMOKE_S = {"00": 5.5, "01": 6.2, "02": 7.1, "03": 7.7, "04": 7.2, "05": 7.0, "06": 9.5, "07": 12.4, "08": 11.5, "09": 10.3,
           "10": 16.7, "11": 12.2, "12": 6.5, "13": 9.2, "14": 9.0, "15": 9.4, "16": 10.3}


@dataclass(frozen=True)
class Scenario:
    """One consistent set of the uncertain constants; the range of an estimate is the spread of the scenarios."""

    name: str
    fixed_factor: float      # a lesson's start-up on the GPU machine / its smoke time here (faster CPU, plus CUDA's start)
    s_host: float            # the GPU machine's CPU speed / this CPU's, for CPU-resident work
    gamma: float             # R falls as (width / reference width) ** gamma below the references' widths
    device_factor: float     # an H100's device time / the H200's (same FLOP/s, 70 % of the memory bandwidth)
    k_min: float             # seconds a kernel takes on the device at least (launch gap included)
    t_sync: float            # seconds a host-device synchronisation costs
    r_rnn: float             # FLOP/s of an RNN's recurrent GEMMs (batch x hidden rows, bf16; TF32 half): no GPU measurement
    c_op: float = 0.0        # seconds of host time per launched kernel: calibrated from lesson 06


SCENARIOS = (
    Scenario("fast", fixed_factor=1.0, s_host=2.0, gamma=0.5, device_factor=1.0, k_min=2e-6, t_sync=20e-6, r_rnn=150e12),
    Scenario("mid", fixed_factor=0.8, s_host=1.3, gamma=0.75, device_factor=1.2, k_min=3e-6, t_sync=50e-6, r_rnn=80e12),
    Scenario("slow", fixed_factor=0.5, s_host=0.9, gamma=1.0, device_factor=1.4, k_min=4e-6, t_sync=100e-6, r_rnn=40e12),
)

# --------------------------------------------------------------------------- the notebook's values


class Values:
    """The values of a solution notebook's ``run.pick(...)`` calls for one profile, read from the source.

    ``v["cfg"]`` is the value assigned to ``cfg`` (the first such assignment; ``v.get("cfg", 2)`` the second),
    ``v.at("repeats =")`` the value of the pick on the line containing that text. A pick whose value depends on
    the notebook's state (``steps // 2``) is evaluated when asked for, with the names given then.
    """

    def __init__(self, lesson: str, profile: str = "full", overrides: dict | None = None):
        self.lesson, self.profile = lesson, profile
        self.path = Path(glob.glob(str(ROOT / "solutions" / f"{lesson}*" / f"{lesson}*.ipynb"))[0])
        nb = json.loads(self.path.read_text())
        self.meta = nb["metadata"].get("course", {})
        self.params: dict = {}
        self.named: dict[str, list] = {}          # name -> [source of the chosen profile's expression, ...]
        self.lines: list[tuple[str, str]] = []    # (source line, expression) of every pick
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            src = "".join(cell["source"])
            if "parameters" in cell["metadata"].get("tags", []):
                exec(src, {}, self.params)
                continue
            if "run.pick" not in src:
                continue
            try:
                tree = ast.parse(src)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and self._is_pick(node):
                    self.lines.append((src.splitlines()[node.lineno - 1], self._chosen(node)))
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    self._assign(node.targets[0], node.value)
        self.overrides = overrides or {}

    @staticmethod
    def _is_pick(node) -> bool:
        f = node.func
        return isinstance(f, ast.Attribute) and f.attr == "pick" and isinstance(f.value, ast.Name) and f.value.id == "run"

    def _chosen(self, node) -> str:
        kw = {k.arg: k.value for k in node.keywords}
        pos = dict(zip(("smoke", "standard", "full"), node.args))
        pos.update(kw)
        expr = pos.get(self.profile) if self.profile in pos else pos.get("standard")
        return ast.unparse(expr)

    def _assign(self, target, value):
        if isinstance(value, ast.Call) and self._is_pick(value):
            chosen = self._chosen(value)
            if isinstance(target, ast.Name):
                self.named.setdefault(target.id, []).append(chosen)
            elif isinstance(target, ast.Tuple):       # D_MODEL, D_K = run.pick(..., full=(128, 64))
                for i, t in enumerate(target.elts):
                    if isinstance(t, ast.Name):
                        self.named.setdefault(t.id, []).append(f"({chosen})[{i}]")
        elif isinstance(value, ast.Tuple) and isinstance(target, ast.Tuple):
            for t, v in zip(target.elts, value.elts):
                self._assign(t, v)

    def _eval(self, expr: str, names: dict):
        from course import train_lm
        ns = {"min": min, "max": max, "range": range, "dict": dict, "list": list, "tuple": tuple, "train_lm": train_lm,
              **self.params, **names}
        return eval(expr, ns)  # noqa: S307 - the course's own notebook source, to read its sizes

    def get(self, name: str, occurrence: int = 1, **names):
        value = self._eval(self.named[name][occurrence - 1], names)
        for key, new in self.overrides.items():          # "cfg.steps" or "N_TRAIN"
            base, _, sub = key.partition(".")
            if base == name and occurrence == 1:
                if name == "cfg09" and isinstance(new, str):           # lesson 14: a row of train_lm.PROFILES
                    from course import train_lm
                    value = dict(train_lm.PROFILES[new])
                elif sub and isinstance(value, dict):
                    value = {**value, sub: new}
                elif not sub:
                    value = new
        return value

    def __getitem__(self, name: str):
        return self.get(name)

    def at(self, hint: str, **names):
        found = [expr for line, expr in self.lines if hint in line]
        if len(found) != 1:
            raise KeyError(f"lesson {self.lesson}: {len(found)} run.pick lines contain {hint!r}")
        value = self._eval(found[0], names)
        name = re.match(r"\W*(?:for \w+ in )?(\w+)", hint).group(1)      # "beam_pairs = data.test[:" -> beam_pairs
        return self.overrides.get(name, value)

    def param(self, name: str):
        return self.overrides.get(name, self.params[name])


# --------------------------------------------------------------------------- counting a unit of work on this CPU

NO_KERNEL = {  # aten operators that launch nothing on a GPU (views, metadata, allocation)
    "view", "_unsafe_view", "t", "transpose", "permute", "expand", "as_strided", "detach", "alias", "unsqueeze", "squeeze",
    "reshape", "slice", "select", "split", "split_with_sizes", "unbind", "chunk", "_reshape_alias", "lift_fresh",
    "empty_like", "empty", "empty_strided", "size", "stride", "is_same_size", "diagonal", "narrow", "unflatten",
    "flatten", "_record_function_enter_new", "_record_function_exit", "lift_fresh_copy", "view_as_real", "numpy_T",
    "sym_size", "sym_stride", "dim", "is_nonzero", "_has_compatible_shallow_copy_type", "set_", "resize_", "new_empty",
    "new_empty_strided", "_foreach_zero_", "zeros", "_to_copy_noop", "movedim", "swapaxes", "unfold_copy_noop",
}
RNN_MODULES = (nn.GRU, nn.LSTM, nn.RNN)        # cuDNN on a GPU: one call forward, two backward, the steps inside
RNN_CELLS = (nn.GRUCell, nn.LSTMCell)          # two GEMMs and one fused kernel forward, about seven kernels backward


FUSED_ON_CUDA = ("scaled_dot_product_attention", "dropout")   # one kernel each way on a GPU; the CPU may decompose them


def _fused(counter, name, original):
    """``torch.nn.functional.<name>`` counted as a CUDA run calls it: one kernel forward, one backward."""
    def call(*args, **kwargs):
        if counter._fused or counter._rnn_depth or KernelCount.paused:
            return original(*args, **kwargs)
        if name == "dropout":
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            if p == 0 or not training:
                return original(*args, **kwargs)
        grad = torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        counter.fused_host += 1 + (1 if grad else 0)
        counter._fused += 1
        try:
            return original(*args, **kwargs)
        finally:
            counter._fused -= 1
    return call


class KernelCount(TorchDispatchMode):
    """Kernels a CUDA run of the same code would launch, counted from the aten operators run here.

    ``host``: launches from the Python thread; ``dev``: kernels cuDNN launches inside one RNN call (no Python);
    ``syncs``: read-backs (``.item()``, ``.tolist()``, a bool of a tensor). Operators inside an RNN module, which the
    CPU decomposes and cuDNN does not, are replaced by what cuDNN launches; their share of the backward pass is
    estimated as their share of the forward pass.
    """

    def __init__(self):
        super().__init__()
        self.fwd = self.bwd = self.rnn_inner_fwd = self.syncs = 0
        self.rnn_host = self.dev = 0.0
        self.rnn_steps = self.rnn_flops = 0.0     # cuDNN's sequential steps and their FLOPs (hidden-to-hidden GEMMs)
        self.names: dict[str, int] = {}
        self._rnn_depth = 0
        self._fused = 0
        self.fused_host = 0.0
        self._backward = 0
        self._hooks = []
        self._orig_backward = None

    paused = 0                # > 0 while work that runs on the CPU in a GPU run too (batches made in Python) runs
    in_optimizer = 0          # > 0 inside an optimizer's step

    @classmethod
    @contextlib.contextmanager
    def optimizer_step(cls):
        cls.in_optimizer += 1
        try:
            yield
        finally:
            cls.in_optimizer -= 1

    @classmethod
    @contextlib.contextmanager
    def cpu_side(cls):
        """Operators inside run on the CPU on the GPU machine too: not counted (their time is timed instead)."""
        cls.paused += 1
        try:
            yield
        finally:
            cls.paused -= 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if KernelCount.paused:
            pass
        elif name == "_local_scalar_dense":
            if KernelCount.in_optimizer:         # the optimizer's step counters stay on the CPU in a GPU run
                return func(*args, **(kwargs or {}))
            self.syncs += 1
        elif name not in NO_KERNEL:
            if self._backward:
                self.bwd += 1
            elif self._rnn_depth or self._fused:
                self.rnn_inner_fwd += 1
            else:
                self.fwd += 1
                self.names[name] = self.names.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    def _pre(self, module, args):
        if isinstance(module, RNN_MODULES + RNN_CELLS):
            if self._rnn_depth == 0:
                train = torch.is_grad_enabled() and any(p.requires_grad for p in module.parameters())
                if isinstance(module, RNN_MODULES):
                    x = args[0]
                    if isinstance(x, nn.utils.rnn.PackedSequence):      # packed: lengths read back to the CPU first
                        steps = len(x.batch_sizes)
                        self.syncs += 1
                    else:
                        steps = x.shape[1] if getattr(module, "batch_first", False) else x.shape[0]
                    dirs = 2 if module.bidirectional else 1
                    rows = int(x.batch_sizes[0]) if isinstance(x, nn.utils.rnn.PackedSequence) else \
                        (x.shape[0] if getattr(module, "batch_first", False) else x.shape[1])
                    gates = {nn.GRU: 3, nn.LSTM: 4}.get(type(module), 1)
                    seq = steps * dirs * module.num_layers * (3 if train else 1)     # backward: about twice forward
                    self.rnn_host += 1 + (2 if train else 0)
                    self.dev += steps * dirs * module.num_layers * (2 + (4 if train else 0))
                    self.rnn_steps += seq
                    self.rnn_flops += seq * 2 * rows * module.hidden_size * gates * module.hidden_size
                else:
                    self.rnn_host += 3 + (7 if train else 0)
            self._rnn_depth += 1

    def _post(self, module, args, out):
        if isinstance(module, RNN_MODULES + RNN_CELLS):
            self._rnn_depth -= 1

    def __enter__(self):
        self._hooks = [nn.modules.module.register_module_forward_pre_hook(self._pre),
                       nn.modules.module.register_module_forward_hook(self._post)]
        counter = self
        self._orig_backward = orig = torch.autograd.backward

        def backward(*a, **k):
            counter._backward += 1
            try:
                return orig(*a, **k)
            finally:
                counter._backward -= 1
        torch.autograd.backward = backward
        self._orig_reads = {name: getattr(torch.Tensor, name) for name in ("tolist", "cpu", "numpy")}

        def reading(name, orig):
            def read(t, *a, **k):         # on a GPU a copy back to the host: it waits for the queued work
                if not KernelCount.paused:
                    counter.syncs += 1
                return orig(t, *a, **k)
            return read
        for name, original in self._orig_reads.items():
            setattr(torch.Tensor, name, reading(name, original))
        self._orig_fused = {name: getattr(F, name) for name in FUSED_ON_CUDA}
        for name, original in self._orig_fused.items():
            setattr(F, name, _fused(self, name, original))
        return super().__enter__()

    def __exit__(self, *exc):
        for name, original in self._orig_fused.items():
            setattr(F, name, original)
        for h in self._hooks:
            h.remove()
        torch.autograd.backward = self._orig_backward
        for name, original in self._orig_reads.items():
            setattr(torch.Tensor, name, original)
        return super().__exit__(*exc)

    @property
    def host(self) -> float:
        outer = self.fwd + self.rnn_inner_fwd
        bwd = self.bwd * (self.fwd / outer if outer else 1.0)     # fused internals' backward: one kernel instead
        return self.fwd + bwd + self.rnn_host + self.fused_host


@dataclass
class Probe:
    """One unit of a lesson's work, run here at a reduced batch: kernels, syncs, FLOPs and CPU time."""

    host: float                  # kernels launched from Python per unit
    dev: float                   # kernels launched inside cuDNN calls per unit
    syncs: float                 # read-backs per unit
    flops: float                 # FLOPs per unit at the full batch (fitted linear in the batch)
    cpu_s: float                 # this CPU's seconds per unit at the reduced batch (1 thread)
    cpu_rate: float              # this CPU's effective FLOP/s on the model (from two batch sizes)
    cpu_overhead: float          # this CPU's seconds per unit that do not grow with the batch
    flops_at: dict = field(default_factory=dict)
    rnn_steps: float = 0.0       # cuDNN's sequential steps per unit (forward and backward)
    rnn_flops: float = 0.0       # their hidden-to-hidden FLOPs at the full batch

    def cpu_seconds(self, flops: float | None = None) -> float:
        """This CPU's time for the unit with ``flops`` FLOPs (the full batch by default)."""
        return self.cpu_overhead + (self.flops if flops is None else flops) / self.cpu_rate


def _time(fn, repeats: int) -> float:
    """CPU seconds of this thread for one call (the fastest of ``repeats``): torch runs on one thread here, so this
    is the work's own time, whatever else the shared machine is doing (wall-clock time moved 3x with its load)."""
    times = []
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return min(times)


def _flops(fn) -> float:
    with FlopCounterMode(display=False) as fc:
        fn()
    return float(fc.get_total_flops())


def probe(unit, small: int, large: int, full: float, repeats: int = 3, amp: bool = False) -> Probe:
    """``unit(b)`` does one unit of work at batch ``b``; counted at ``small``, timed at ``small`` and ``large``.
    ``amp``: the run autocasts to bf16; its casts are counted under the CPU's autocast (timed without it)."""
    unit(small)                                                  # warm-up: optimizer state, caches
    with KernelCount() as kc, torch.autocast("cpu", dtype=torch.bfloat16, enabled=amp):
        unit(small)
    f_small, f_large = _flops(lambda: unit(small)), _flops(lambda: unit(large))
    t_small, t_large = _time(lambda: unit(small), repeats), _time(lambda: unit(large), repeats)
    slope = (f_large - f_small) / (large - small)
    flops = f_small + slope * (full - small)
    rate = (f_large - f_small) / max(t_large - t_small, 1e-6) if f_large > f_small else 1e10
    rate = min(max(rate, 1e9), 1e12)
    overhead = max(t_small - f_small / rate, 0.2 * t_small)
    return Probe(host=kc.host, dev=kc.dev, syncs=kc.syncs, flops=flops, cpu_s=t_small, cpu_rate=rate, cpu_overhead=overhead,
                 flops_at={small: f_small, large: f_large}, rnn_steps=kc.rnn_steps, rnn_flops=kc.rnn_flops * full / small)


def timed(fn, repeats: int = 3) -> float:
    """This CPU's seconds for ``fn()`` (the fastest of repeats, after one call)."""
    fn()
    return _time(fn, repeats)


def counted(fn) -> KernelCount:
    """Kernels (and syncs) of one call of ``fn``."""
    with KernelCount() as kc:
        fn()
    return kc


# --------------------------------------------------------------------------- the lessons' code


def notebook(lesson: str, profile: str = "smoke") -> dict:
    """The namespace of a solution notebook after its set-up cell, its solution cells and the definitions (imports,
    functions, classes) of its other cells, run on the CPU in the smoke profile: the lesson's own code to probe."""
    path = glob.glob(str(ROOT / "solutions" / f"{lesson}*" / f"{lesson}*.ipynb"))[0]
    cells = json.loads(Path(path).read_text())["cells"]
    ns: dict = {"__name__": f"lesson_{lesson}"}
    with contextlib.redirect_stdout(open(os.devnull, "w")):
        for i, cell in enumerate(cells):
            if cell["cell_type"] != "code":
                continue
            src, meta = "".join(cell["source"]), cell["metadata"]
            nbg = meta.get("nbgrader", {})
            if "parameters" in meta.get("tags", []):
                exec(src, ns)
                ns.update(PROFILE=profile, DEVICE="cpu")
            elif "course.setup" in src or nbg.get("solution"):
                exec(compile(src, f"<{lesson} cell {i}>", "exec"), ns)
            elif not nbg.get("grade"):                               # not a test: keep its definitions only
                try:
                    tree = ast.parse(src)
                except SyntaxError:
                    continue
                keep = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom))]
                for node in keep:             # one at a time: a default argument may name the cell's state
                    try:
                        exec(compile(ast.Module(body=[node], type_ignores=[]), f"<{lesson} cell {i} defs>", "exec"), ns)
                    except NameError:
                        pass
    torch.set_num_threads(1)
    return ns


def define(lesson: str, ns: dict, name: str, **names) -> None:
    """Run the notebook's definition of ``name`` in ``ns`` once ``names`` (what its default arguments read) are there."""
    ns.update(names)
    path = glob.glob(str(ROOT / "solutions" / f"{lesson}*" / f"{lesson}*.ipynb"))[0]
    for cell in json.loads(Path(path).read_text())["cells"]:
        if cell["cell_type"] == "code" and f"def {name}(" in "".join(cell["source"]):
            for node in ast.parse("".join(cell["source"])).body:
                if isinstance(node, ast.FunctionDef) and node.name == name:
                    exec(compile(ast.Module(body=[node], type_ignores=[]), f"<{lesson} {name}>", "exec"), ns)
                    return
    raise KeyError(f"lesson {lesson} defines no {name}")


@contextlib.contextmanager
def cuda_like_optimizers():
    """AdamW as a CUDA run builds it: ``fit``'s fused AdamW, the lessons' own ``torch.optim.AdamW`` foreach."""
    import course.train as tr

    orig_init, orig_adamw = torch.optim.AdamW.__init__, tr._adamw

    def init(self, params, *a, **k):
        if not k.get("fused"):
            k.setdefault("foreach", True)
        orig_init(self, params, *a, **k)

    torch.optim.AdamW.__init__ = init
    tr._adamw = lambda model, lr, weight_decay: torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay,
                                                                  fused=True)
    try:
        yield
    finally:
        torch.optim.AdamW.__init__, tr._adamw = orig_init, orig_adamw


def fit_unit(model, make_batch, loss_fn, *, clip=1.0):
    """One step of ``course.train.fit`` (fused AdamW, clipping, the loss kept on the device) as a unit."""
    import course.train as tr

    state = {}

    def unit(b):
        if b not in state:
            state[b] = (copy.deepcopy(model), None)
            m = state[b][0]
            state[b] = (m, tr._adamw(m, 1e-3, 0.0))
        m, opt = state[b]
        with KernelCount.cpu_side():
            batch = make_batch(b)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(m, batch)
        loss.backward()
        params = [p for p in m.parameters() if p.grad is not None]
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(params, clip)
        else:
            torch.nn.utils.clip_grad_norm_(params, float("inf"))
        with KernelCount.optimizer_step():
            opt.step()
        buf = torch.empty(2)
        buf[0] = loss.detach()            # fit keeps the loss and the norm in tensors on the device
        buf[1] = loss.detach()
    return unit


def loop_unit(model, make_batch, loss_fn, *, item=True, clip=True):
    """One step of a lesson's own loop: AdamW (foreach on a GPU), clipping, ``loss.item()`` when ``item``."""
    state = {}

    def unit(b):
        if b not in state:
            m = copy.deepcopy(model)
            state[b] = (m, torch.optim.AdamW(m.parameters(), lr=1e-3))
        m, opt = state[b]
        with KernelCount.cpu_side():
            batch = make_batch(b)
        loss = loss_fn(m, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        with KernelCount.optimizer_step():
            opt.step()
        if item:
            loss.item()
    return unit


def transformer_flops_token(d: int, layers: int, d_ff: int, T: float, vocab: int = 0, kv_frac: float = 1.0,
                            cross: bool = False, train: bool = True) -> float:
    """The textbook count per token: 2 x parameters of the matmuls + attention's 4 T d per layer (scores and mix),
    x 3 for forward + backward; ``cross`` adds a cross-attention per layer (decoder)."""
    per_layer = 2 * (2 * d * d + 2 * d * d * kv_frac + 2 * d * d_ff) + 4 * T * d
    if cross:
        per_layer += 2 * (4 * d * d) + 4 * T * d
    fwd = layers * per_layer + 2 * d * vocab
    return (3 if train else 1) * fwd


# --------------------------------------------------------------------------- one experiment's work


@dataclass
class Work:
    """One experiment of a lesson's full profile: ``units`` repetitions of one unit of work."""

    name: str
    units: float
    host: float = 0.0            # kernels launched from Python per unit
    dev: float = 0.0             # kernels launched inside cuDNN per unit
    flops: float = 0.0           # model FLOPs per unit
    width: int = 128             # the model's width (for R)
    dtype: str = "fp32"          # "bf16" (autocast) or "fp32" (TF32 matmuls)
    cpu: float = 0.0             # seconds of CPU-resident work per unit, on THIS CPU
    syncs: float = 0.0           # host-device synchronisations per unit
    fixed: float = 0.0           # seconds outside the model (compiling), on the GPU machine
    device_s: float = 0.0        # device seconds per unit measured on the H200 (attention kernels), instead of FLOPs / R
    rnn_steps: float = 0.0       # cuDNN's sequential steps per unit
    rnn_flops: float = 0.0       # their FLOPs per unit (GEMMs of batch x hidden: a few of the card's SMs busy)
    cpu_unit: float | None = None  # THIS CPU's seconds for the unit's model work (the probe's fit), for --check-standard
    note: str = ""

    @classmethod
    def of(cls, name: str, units: float, p: Probe, *, width: int, dtype: str = "fp32", cpu: float = 0.0,
           extra_host: float = 0.0, extra_syncs: float = 0.0, note: str = ""):
        return cls(name, units, host=p.host + extra_host, dev=p.dev, flops=p.flops, width=width, dtype=dtype, cpu=cpu,
                   syncs=p.syncs + extra_syncs, rnn_steps=p.rnn_steps, rnn_flops=p.rnn_flops, cpu_unit=p.cpu_seconds(), note=note)


def rate(width: int, dtype: str, sc: Scenario, ref: dict) -> float:
    """Effective FLOP/s of a model of this width on the card: the benchmarks' rate at their width, falling as
    (width / reference) ** gamma below it (elementwise work and small GEMMs weigh more as the width shrinks)."""
    r, w0 = ref[dtype]
    return r * min(1.0, width / w0) ** sc.gamma


def seconds(w: Work, sc: Scenario, ref: dict) -> tuple[float, float, float]:
    """(total seconds, host seconds per unit, device seconds per unit) of ``w`` on the GPU machine."""
    host = w.host * sc.c_op + w.cpu / sc.s_host + w.syncs * sc.t_sync
    if w.device_s:
        device = w.device_s * sc.device_factor
    else:
        device = ((w.host + w.dev) * sc.k_min + (w.flops / rate(w.width, w.dtype, sc, ref) if w.flops else 0.0)) \
            * sc.device_factor
    if w.rnn_steps:                       # the recurrence: one small GEMM after the other
        r_rnn = sc.r_rnn * (1.0 if w.dtype == "bf16" else 0.5)
        device += w.rnn_steps * max(2 * sc.k_min, w.rnn_flops / w.rnn_steps / r_rnn) * sc.device_factor
    return w.units * max(host, device) + w.fixed, host, device


# --------------------------------------------------------------------------- the lessons' experiments
# Each function lists one lesson's experiments for the profile its Values were read for. Units and sizes come from
# the notebook's run.pick values (v[...]); kernels, FLOPs and CPU seconds from the lesson's own code run here.
# Transfers: run.put (pinned, non-blocking) counts 2 launches per tensor; .to(device) from pageable memory 1 launch
# and 1 synchronisation.

PINNED, PAGEABLE = 2.0, 1.0


def lesson_00(v: Values) -> list[Work]:
    ns = notebook("00")
    n_queries, steps = v.at("n_queries ="), v.at("steps =")
    big = ns["key_value_table"](n=v.param("N_ENTRIES"), d_key=v.param("D_KEY"), d_value=8, seed=0)
    q, _ = ns["noisy_queries"](big, 400, noise=0.15, seed=1)
    soft_lookup = ns["soft_lookup"]

    def lookups():
        outs = torch.stack([soft_lookup(x, big.keys, big.values, temperature=0.3)[0] for x in q])
        torch.cdist(outs, big.values).argmin(dim=-1)
    per_query = timed(lookups) / len(q)
    qv = (0.1 * torch.randn(v.param("D_KEY"))).requires_grad_(True)
    opt = torch.optim.Adam([qv], lr=0.05)

    def learn_step():
        out, w = soft_lookup(qv, big.keys, big.values, temperature=0.3)
        loss = ((out - big.values[5]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        loss.item()
        w[5].item()
    per_step = timed(lambda: [learn_step() for _ in range(20)]) / 20
    return [Work("hit rate: soft lookups (on the CPU)", 5 * n_queries, cpu=per_query,
                 note=f"5 temperatures x {n_queries} queries, one call each, CPU tensors"),
            Work("a query learned by gradient descent (on the CPU)", steps, cpu=per_step, note=f"{steps} Adam steps")]


def lesson_01(v: Values) -> list[Work]:
    ns = notebook("01")
    tweets = ns["tweets"]
    n_train, n_test = v["N_TRAIN"], v["N_TEST"]
    data_s = timed(lambda: tweets.load(n_train=1000, n_val=100, n_test=100, seed=0), 1) / 1200
    data = tweets.load(n_train=2000, n_val=100, n_test=500, seed=0, dim=v.param("EMBED_DIM"), max_len=v.param("MAX_LEN"))
    steps, batch = v["STEPS"], v["BATCH"]
    works = [Work("tweets generated and encoded (CPU)", n_train + 500 + n_test, cpu=data_s)]
    big = tweets.load(n_train=min(n_train, 20000), n_val=10, n_test=10, seed=0)
    gen = torch.Generator().manual_seed(1)
    sample_s = timed(lambda: big.train.sample(batch, gen), 5)
    for pooling in ("mean", "attention"):
        torch.manual_seed(0)
        model = ns["TweetClassifier"](data.vectors, pooling)

        def loss_fn(m, b):
            ids, mask, labels = b
            return F.cross_entropy(m(ids, mask)[0], labels)
        p = probe(fit_unit(model, lambda b: data.train.sample(b, gen), loss_fn), 8, 64, batch)
        works.append(Work.of(f"{pooling} pooling: {steps} steps of {batch}", steps, p, width=v.param("EMBED_DIM"),
                             cpu=sample_s, extra_host=3 * PAGEABLE, extra_syncs=3))
        ev = counted(lambda: [model(*data.test.batch(torch.arange(64))[:2]) for _ in range(1)])
        n_eval = math.ceil(n_test / 500) + 1
        works.append(Work(f"{pooling} pooling: test and validation", n_eval, host=ev.host + 3 + 2, syncs=4))
    lengths, repeats = v.at("lengths_T ="), v.at("repeats =")
    gru, pool = nn.GRU(50, 50, batch_first=True), ns["AttentionPooling"](50)
    for T in lengths:
        x, m = torch.randn(2, T, 50), torch.ones(2, T, dtype=torch.bool)
        with torch.no_grad():
            kg, kp = counted(lambda: gru(x)), counted(lambda: pool(x, m))
        works.append(Work(f"timing: GRU and pooling forward, T = {T}", repeats, host=kg.host + kp.host, dev=kg.dev,
                          flops=2 * 3 * 2 * 50 * 50 * 64 * T, width=50, syncs=2))
    return works


def _typical_pairs(data, n, split="train"):
    """n pairs of the split's most common target length (what a length-sorted sampler's window holds on average)."""
    pairs = data.split(split)
    mean = round(sum(len(p.tgt) for p in pairs) / len(pairs))
    same = [p for p in pairs if len(p.tgt) == mean] or pairs
    return [same[i % len(same)] for i in range(n)], mean


def _translation_data_s(make, **kw) -> float:
    """This CPU's seconds per generated sentence pair."""
    return timed(lambda: make(n_train=2000, n_val=10, n_test=10, seed=0, **kw), 1) / 2020


def lesson_02(v: Values) -> list[Work]:
    ns = notebook("02")
    sizes = v["sizes"]
    make = ns["make_translation_data"]
    max_len = v.param("MAX_LEN")
    pair_s = _translation_data_s(make, max_len=max_len)
    data = make(n_train=3000, n_val=50, n_test=300, max_len=max_len, seed=0)
    d_emb, d_hidden, steps, batch = v["D_EMB"], v["D_HIDDEN"], v["STEPS"], v["BATCH"]
    Seq2Seq = ns["Seq2Seq"]
    works = [Work("translation pairs generated (CPU)", sum(sizes.values()), cpu=pair_s)]
    for name in ("plain", "attention"):
        torch.manual_seed(0)
        att = ns["AdditiveAttention"](d_hidden, Seq2Seq.encoder_size(d_hidden), d_hidden) if name == "attention" else None
        model = Seq2Seq(len(data.src_vocab), len(data.tgt_vocab), d_emb, d_hidden, attention=att,
                        step=ns["decode_step"] if att is not None else None)

        def make_batch(b):
            return data.batch(_typical_pairs(data, b)[0])
        p = probe(fit_unit(model, make_batch, ns["_loss"] if "_loss" in ns else _seq2seq_loss), 4, 32, batch)
        batch_s = timed(lambda: make_batch(batch), 3)
        works.append(Work.of(f"{name}: {steps} steps of {batch}", steps, p, width=d_hidden, cpu=batch_s,
                             extra_host=5 * PAGEABLE, extra_syncs=5))
        works += _seq2seq_eval(f"{name}: greedy test translations", model, data, sizes["n_test"], d_hidden)
    return works


def _seq2seq_loss(model, batch):
    logits = model(batch.src, batch.src_mask, batch.tgt_in)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0)


def _seq2seq_eval(name, model, data, n, width, chunk=256) -> list[Work]:
    """Greedy translation of n pairs in chunks of 256: kernels per decoding step, steps = longest target + 1."""
    pairs, mean = _typical_pairs(data, 4, "test")
    b = data.batch(pairs)
    with torch.no_grad():
        k1 = counted(lambda: model.translate(b.src, b.src_mask, 1, data.tgt_vocab.bos_id, data.tgt_vocab.eos_id))
        k4 = counted(lambda: model.translate(b.src, b.src_mask, 4, data.tgt_vocab.bos_id, data.tgt_vocab.eos_id))
    per_step = (k4.host - k1.host) / 3
    longest = max(len(p.tgt) for p in data.split("test")) + 1
    chunks = math.ceil(n / chunk)
    return [Work(name, chunks, host=k1.host - per_step + per_step * longest, dev=k1.dev * longest, syncs=longest + 5,
                 width=width, cpu=0.002 * chunk / 256 * 10, note=f"{chunks} chunks of {chunk}, about {longest} steps each")]


def lesson_03(v: Values) -> list[Work]:
    ns = notebook("03")
    n_queries = v.at("n_queries =")
    d_ks, T_k = [4, 16, 64, 256, 1024], 32

    def stats(n):
        g = torch.Generator().manual_seed(1)
        for d_k in d_ks:
            q, k = torch.randn(n, 1, d_k, generator=g), torch.randn(n, T_k, d_k, generator=g)
            for score in (ns["dot_score"], ns["scaled_dot_score"]):
                s = score(q, k).squeeze(1)
                s.var().item()
                ns["attention_entropy"](torch.softmax(s, dim=-1)).mean().item()
                ns["softmax_jacobian_norm"](s).median().item()
    stats_s = timed(lambda: stats(256), 1) / 256
    works = [Work("score statistics over d_k (CPU)", n_queries, cpu=stats_s, note="random q, k on the CPU")]
    KM = dict(n_keys=32, d_in=64, n_classes=10, noise=1.0, min_keys=16)
    km_steps = v.at("km_steps =")
    model = ns["KeyMatcher"](ns["scaled_dot_score"], KM["d_in"], v.param("D_K_LARGE"), KM["n_classes"])
    gen = torch.Generator().manual_seed(7)

    def km_batch(b):
        return list(ns["key_matching_batch"](b, generator=gen, **KM))

    def km_loss(m, batch):
        query, keys, labels, mask, target = batch
        return F.cross_entropy(m(query, keys, labels, mask)[0], target)
    p = probe(fit_unit(model, km_batch, km_loss, clip=None), 8, 64, 64)
    b_s = timed(lambda: km_batch(64), 3)
    works.append(Work.of(f"key matching: 2 x {km_steps} steps", 2 * km_steps, p, width=v.param("D_K_LARGE"), cpu=b_s,
                         extra_host=5 * PINNED, extra_syncs=1, note="on_step reads the loss: a sync per step"))
    works.append(Work("key matching: held-out accuracy every few steps", 2 * 16, host=12, syncs=2))
    TR = v["TR"]
    make = ns["make_translation_data"]
    pair_s = _translation_data_s(make, max_len=TR["max_len"])
    works.append(Work("translation pairs generated (CPU)", TR["n_train"] + 32 + TR["n_test"], cpu=pair_s))
    data = make(n_train=2000, n_val=32, n_test=200, max_len=TR["max_len"], seed=0)
    Seq2Seq, d_hidden = ns["Seq2Seq"], TR["d_hidden"]
    d_key = Seq2Seq.encoder_size(d_hidden)
    for name, att in (("scaled dot", lambda: ns["ScoreAttention"](ns["scaled_dot_score"], d_hidden, d_key)),
                      ("MLP", lambda: ns["ScoreAttention"](ns["MLPScore"](d_hidden, d_key, d_hidden), d_hidden, d_key))):
        torch.manual_seed(0)
        model = Seq2Seq(len(data.src_vocab), len(data.tgt_vocab), 32, d_hidden, att(), luong=True)
        p = probe(fit_unit(model, lambda b: data.batch(_typical_pairs(data, b)[0]), _seq2seq_loss), 4, 32, 128)
        batch_s = timed(lambda: data.batch(_typical_pairs(data, 128)[0]), 3)
        n_models = 3 if name == "scaled dot" else 2              # dot, scaled dot, cosine | bilinear, MLP
        works.append(Work.of(f"Luong translators, {name}-like scores: {n_models} x {TR['steps']} steps of 128",
                             n_models * TR["steps"], p, width=d_hidden, cpu=batch_s, extra_host=5, extra_syncs=5))
        works += _seq2seq_eval(f"{n_models} translators ({name}-like): test translations", model, data, TR["n_test"], d_hidden)
        works[-1].units *= n_models
    works.append(Work("timing: attention module fwd + bwd", 5 * v.at("time_attention(r["), host=40, syncs=1))
    T_big = v.at("T_big =")
    works.append(Work("timing: scores at T = {}".format(T_big), 5 * (1 + v.at("for _ in range(run.pick(")), host=8, syncs=1,
                      flops=2 * 8 * T_big * T_big * 64 * 4, width=64))
    return works


def lesson_04(v: Values) -> list[Work]:
    ns = notebook("04")
    stories, D, K = ns["stories"], v.param("D_MODEL"), v.param("MAX_HOPS")
    n_train, n_test = v["N_TRAIN"], v["N_TEST"]
    story_s = timed(lambda: stories.encode(stories.make_splits(n_train=1000, n_val=10, n_test=10, seed=0)["train"]), 1) / 1000
    works = [Work("stories generated and encoded (CPU)", n_train + 200 + n_test, cpu=story_s)]
    train = stories.encode(stories.make_splits(n_train=2000, n_val=10, n_test=10, seed=0)["train"])
    gen = torch.Generator().manual_seed(1)

    def make_batch(b):
        return train[torch.randint(0, len(train), (b,), generator=gen)]

    def loss_fn(m, batch):
        return F.cross_entropy(m(batch.story, batch.story_mask, batch.question)[0], batch.answer)
    steps, batch, abl_steps, seeds = v["STEPS"], v["BATCH"], v["ABLATION_STEPS"], v["ABLATION_SEEDS"]
    for k in range(1, K + 1):
        torch.manual_seed(0)
        p = probe(fit_unit(ns["MemN2N"](D, k), make_batch, loss_fn), 8, 64, batch)
        works.append(Work.of(f"{k} hop(s): {steps} steps of {batch}", steps, p, width=D, extra_host=1 + 6, extra_syncs=1,
                             note="index on the CPU, moved, then the story batch gathered on the device"))
        if k == K:
            p3 = p
    works.append(Work("test accuracy by question type", K, host=4 * 30 + 12, syncs=8))
    works.append(Work.of(f"ablation: {len(seeds)} seeds x 4 controller updates x {abl_steps} steps", len(seeds) * 4 * abl_steps,
                         p3, width=D, extra_host=7, extra_syncs=1))
    works.append(Work("ablation: accuracy and chain attention per run", len(seeds) * 4, host=2 * (4 * 30 + 12), syncs=12))
    return works


def lesson_05(v: Values) -> list[Work]:
    ns = notebook("05")
    vocab, T, (d_model, d_k), steps, batch = 16, v["SEQ_LEN"], (v["D_MODEL"], v["D_K"]), v["STEPS"], v["BATCH"]
    works = []
    lengths, repeats = v.at("lengths_T ="), v.at("repeats =")
    for L in lengths:          # B 4, D 64: naive attention's (T, T) weights; an H200's naive attention per (head, T^2)
        per_call = 4 * L * L * GPU["attn16k_ms"]["naive"] * 1e-3 / (16 * 16384 ** 2) * 2      # float32: twice bf16's bytes
        works.append(Work(f"timing: attention and a linear layer, T = {L}", 2 + repeats, host=12, syncs=2,
                          device_s=per_call))
    gen = torch.Generator().manual_seed(1)

    def make_batch(b):
        x, y, _ = ns["reversal_batch"](b, T, vocab, generator=gen)
        return x, y

    def loss_fn(m, b):
        return F.cross_entropy(m(b[0])[0].reshape(-1, vocab), b[1].reshape(-1))
    batch_s = timed(lambda: make_batch(batch), 5)
    for pos in (True, False):
        torch.manual_seed(0)
        p = probe(fit_unit(ns["ReversalModel"](vocab, T, d_model, d_k, use_positions=pos), make_batch, loss_fn), 8, 64, batch)
        works.append(Work.of(f"reversal {'with' if pos else 'without'} positions: {steps} steps of {batch}", steps, p,
                             width=d_model, cpu=batch_s, extra_host=2 * PINNED))
    works.append(Work("evaluations and maps", 6, host=30, syncs=3))
    return works


def lesson_06(v: Values) -> list[Work]:
    ns = notebook("06")
    cfg = v["cfg"]
    ns["cfg"] = cfg
    settings = {"2 sources, d_model 32": (2, 32, 11), "3 sources, d_model 16": (3, 16, 6)}
    heads = v.param("HEAD_COUNTS")
    works = []
    for setting, (n_src, d_model, vocab) in settings.items():
        n_classes = (vocab - 1) ** n_src
        gen = torch.Generator().manual_seed(1)
        batch_s = timed(lambda: ns["multi_source_batch"](cfg["batch"], n_src, vocab, gen), 5)

        def loss_fn(m, b):
            return F.cross_entropy(m(b[0])[0].reshape(-1, n_classes), b[1].reshape(-1))
        torch.manual_seed(0)
        model = ns["HeadsModel"](vocab, cfg["T"], d_model, 4, n_classes)
        p = probe(fit_unit(model, lambda b: ns["multi_source_batch"](b, n_src, vocab, gen), loss_fn), 8, 64, cfg["batch"])
        runs = len(heads) * cfg["seeds"]
        works.append(Work.of(f"{setting}: {runs} runs x {cfg['steps']} steps of {cfg['batch']}", runs * cfg["steps"], p,
                             width=d_model, cpu=batch_s, extra_host=2 * PINNED))
        works.append(Work(f"{setting}: held-out accuracy per run", runs, host=40, syncs=2,
                          cpu=timed(lambda: ns["multi_source_batch"](cfg["n_eval"], n_src, vocab, gen), 1) / 4))
    return works


def lesson_07(v: Values) -> list[Work]:
    ns = notebook("07")
    works = []
    a = v["cfg_a"]
    gen = torch.Generator().manual_seed(1)

    def batch_of(cfg):
        def make(b):
            x, y, _ = ns["reversal_batch"](b, cfg["T"], cfg["vocab"], generator=gen)
            return x, y
        return make

    def loss_fn(m, b):
        return F.cross_entropy(m(b[0]).flatten(0, 1), b[1].flatten())
    torch.manual_seed(0)
    blocks = [ns["EncoderBlock"](a["d_model"], a["n_heads"], a["d_ff"]) for _ in range(a["layers"])]
    model = ns["Reverser"](a["vocab"], a["T"], a["d_model"], blocks, "add", 0)
    p = probe(fit_unit(model, batch_of(a), loss_fn), 8, 64, a["batch"])
    batch_s = timed(lambda: batch_of(a)(a["batch"]), 5)
    works.append(Work.of(f"positions: 4 variants x {a['seeds']} seeds x {a['steps']} steps of {a['batch']}",
                         4 * a["seeds"] * a["steps"], p, width=a["d_model"], cpu=batch_s, extra_host=2 * PINNED))
    b = v["cfg_b"]
    for residual in (True, False):
        torch.manual_seed(0)
        layers = [nn.TransformerEncoderLayer(b["d_model"], b["n_heads"], b["d_ff"], dropout=0.0, batch_first=True)
                  for _ in range(b["layers"])]
        blocks = layers if residual else [ns["WithoutResiduals"](layer) for layer in layers]
        model = ns["Reverser"](b["vocab"], b["T"], b["d_model"], blocks, "add")
        p = probe(fit_unit(model, batch_of(b), loss_fn), 8, 64, b["batch"])
        works.append(Work.of(f"{b['layers']} blocks {'with' if residual else 'without'} residuals: 2 x {b['steps']} steps",
                             2 * b["steps"], p, width=b["d_model"], cpu=timed(lambda: batch_of(b)(b["batch"]), 5),
                             extra_host=2 * PINNED))
    works.append(Work("gradient per block and similarity per block, 8 models", 8, host=3 * 12 * 30, syncs=13))
    return works


# --------------------------------------------------------------------------- calibration


def reference_rates() -> dict:
    """Effective FLOP/s and width of the H200 benchmarks: bf16 from GPT-2 and ViT-B/16, float32 (TF32) from BERT."""
    gpt2 = GPU["gpt2_tokens_s"] * GPU["gpt2_flops_token"]
    vit_img = 197 * transformer_flops_token(768, 12, 3072, 197) + 3 * 2 * 196 * 768 * 768     # patches + 12 blocks
    vit = GPU["vit_images_s"] * vit_img
    bert_step = 64 * 128 * (transformer_flops_token(512, 8, 2048, 128, vocab=1000) + 3 * 2 * 512 * 512)
    bert = bert_step / GPU["bert_train_s"]
    return {"bf16": ((gpt2 + vit) / 2, 768), "fp32": (bert, 512), "_detail": {"gpt2": gpt2, "vit": vit, "bert": bert}}


def fixed_seconds(lesson: str, sc: Scenario) -> float:
    """A lesson's cost whatever its profile (kernel start, imports, CUDA's start, test cells, plots) on the GPU machine."""
    return SMOKE_S[lesson] * sc.fixed_factor + 2.0                     # + CUDA context and library start


def calibrate(works06: list[Work], ref: dict) -> list[Scenario]:
    """c_op per scenario: lesson 06's 55.4 s on the H200 = its start-up + its counted work, host-bound."""
    out = []
    for sc in SCENARIOS:
        ops = sum(w.units * w.host for w in works06)
        other = sum(w.units * (w.cpu / sc.s_host + w.syncs * sc.t_sync) for w in works06)
        c_op = (GPU["lesson06_full_s"] - fixed_seconds("06", sc) - other) / ops
        if sc.name == "fast":
            # What if a third of lesson 06's 55 s went to costs counted here as nothing (its 48 pinned copies a step,
            # the set-up of its 24 models)? The kernels of other lessons would then cost 0.6 x as much: still above
            # the 24 us that lesson 08's unfinished 300 s requires (see the cross-checks).
            c_op *= 0.6
        sc = Scenario(**{**sc.__dict__, "c_op": c_op})
        for w in works06:                     # the premise: every unit of lesson 06 is host-bound (device shorter)
            _, host, device = seconds(w, sc, ref)
            assert device < host, f"lesson 06 is not host-bound in scenario {sc.name}: {w.name}"
        out.append(sc)
    return out


def c_op_for(lesson: str, works: list[Work], target_s: float, sc: Scenario, ref: dict) -> float:
    """The c_op at which the lesson's estimate on an H200 (device_factor 1) would be ``target_s`` (bisection)."""
    lo, hi = 1e-7, 1e-3
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        trial = Scenario(**{**sc.__dict__, "c_op": mid, "device_factor": 1.0})
        total = fixed_seconds(lesson, trial) + sum(seconds(w, trial, ref)[0] for w in works)
        lo, hi = (mid, hi) if total < target_s else (lo, mid)
    return (lo * hi) ** 0.5


def _bench_module(name: str):
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def benchmark_bounds() -> dict:
    """Upper bounds on c_op from the H200 benchmarks: a step cannot take less than its launches, so
    c_op <= measured step time / kernels per step (the kernels of the same steps counted here at a tiny size)."""
    from course import masks
    out = {}
    bb, bv, bg = _bench_module("bert"), _bench_module("vit"), _bench_module("gpt")
    with cuda_like_optimizers(), contextlib.redirect_stdout(open(os.devnull, "w")):
        _, Bert = bb.lesson_classes()
        torch.manual_seed(0)
        m = Bert(1000, d_model=512, n_heads=4, d_ff=2048, n_layers=8, max_len=128)
        ids, seg = torch.randint(5, 1000, (2, 16)), torch.zeros(2, 16, dtype=torch.long)
        real, nsp = torch.ones(2, 16, dtype=torch.bool), torch.randint(0, 2, (2,))
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)

        def bert_step():
            mlm, n = m(ids, seg, masks.key_padding(real))
            loss = F.cross_entropy(mlm.flatten(0, 1), ids.flatten()) + F.cross_entropy(n, nsp)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            with KernelCount.optimizer_step():
                opt.step()
        bert_step()
        out["BERT d 512 x 8, training step (TF32)"] = (counted(bert_step).host, GPU["bert_train_s"])
        torch.manual_seed(0)
        vit = bv.lesson_vit()(224, 16, 3, 1000, 768, 12, 12, 3072)
        x, y = torch.randn(1, 3, 224, 224), torch.randint(0, 1000, (1,))
        opt_v = torch.optim.AdamW(vit.parameters(), lr=1e-4, fused=True)

        def vit_step():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(vit(x).float(), y)
            opt_v.zero_grad(set_to_none=True)
            loss.backward()
            with KernelCount.optimizer_step():
                opt_v.step()
        vit_step()
        out["ViT-B/16, training step (bf16)"] = (counted(vit_step).host, 128 / GPU["vit_images_s"])
        torch.manual_seed(0)
        gpt = bg.lesson_gpt()(1000, 1024, 768, 12, 12, dropout=0.0)
        idx = torch.randint(0, 1000, (1, 32))
        opt_g = torch.optim.AdamW(gpt.parameters(), lr=3e-4, weight_decay=0.1, fused=True)

        def gpt_step():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = bg.lm_loss(gpt(idx)[0], idx)
            opt_g.zero_grad(set_to_none=True)
            loss.backward()
            with KernelCount.optimizer_step():
                opt_g.step()
        gpt_step()
        out["GPT-2 124M, training step (bf16)"] = (counted(gpt_step).host, 16 * 1024 / GPU["gpt2_tokens_s"])
    return {k: {"kernels": n, "step_s": t, "c_op_max": t / n} for k, (n, t) in out.items()}


def estimate(lesson: str, works: list[Work], scenarios: list[Scenario], ref: dict) -> dict:
    per = {}
    for sc in scenarios:
        parts = [(w, *seconds(w, sc, ref)) for w in works]
        per[sc.name] = {"total": fixed_seconds(lesson, sc) + sum(p[1] for p in parts), "fixed": fixed_seconds(lesson, sc),
                        "works": [{"name": w.name, "seconds": s, "host_per_unit": h, "device_per_unit": d,
                                   "bound": "device" if d > h else "host"} for w, s, h, d in parts]}
    totals = [p["total"] for p in per.values()]
    mid = per["mid"]
    top = max(mid["works"], key=lambda x: x["seconds"]) if mid["works"] else {"name": "-", "seconds": 0}
    return {"lesson": lesson, "low": min(totals), "mid": mid["total"], "high": max(totals), "scenarios": per,
            "dominant": top["name"], "dominant_s": top["seconds"], "dominant_bound": top.get("bound", "")}


def _sorted_chunk_steps(pairs, chunk=256, extra=1):
    """Decoding steps of translate_with: length-sorted chunks, each until its longest reference + extra."""
    order = sorted(pairs, key=lambda p: len(p.src))
    return [max(len(p.tgt) for p in order[i:i + chunk]) + extra for i in range(0, len(order), chunk)]


def lesson_08(v: Values) -> list[Work]:
    ns = notebook("08")
    sizes, cfg = v["sizes"], v["cfg"]
    make = ns["make_translation_data"]
    pair_s = _translation_data_s(make, max_len=25)
    data = make(n_train=4000, n_val=100, n_test=sizes["n_test"], max_len=25, seed=0)
    full_data_train = sizes["n_train"]
    steps = max(4, int(cfg["epochs"] * (full_data_train // cfg["batch"])))
    Transformer, loss_tf = ns["Transformer"], ns["translation_loss"]
    d = cfg["d_model"]

    def tf(n_layers=cfg["n_layers"], norm_first=False):
        torch.manual_seed(0)
        return Transformer(len(data.src_vocab), len(data.tgt_vocab), d_model=d, n_heads=cfg["n_heads"], d_ff=cfg["d_ff"],
                           n_layers=n_layers, norm_first=norm_first)

    def loss_fn(m, b):
        return loss_tf(m, b.src, torch.cat([b.tgt_in[:, :1], b.tgt_out], dim=1), pad_id=0)

    def make_batch(b):
        return data.batch(_typical_pairs(data, b)[0])
    batch_s = timed(lambda: make_batch(cfg["batch"]), 3)
    works = [Work("translation pairs generated (CPU)", sum(sizes.values()), cpu=pair_s)]
    model = tf()
    p_tf = probe(fit_unit(model, make_batch, loss_fn), 4, 32, cfg["batch"])
    n_tf = sum(p.numel() for p in model.parameters())
    works.append(Work.of(f"Transformer {cfg['n_layers']}+{cfg['n_layers']} layers, d {d}: {steps} steps of {cfg['batch']}",
                         steps, p_tf, width=d, cpu=batch_s, extra_host=5 * PAGEABLE, extra_syncs=5,
                         note=f"{n_tf:,} parameters; {cfg['epochs']} epochs of {full_data_train}"))
    torch.manual_seed(0)
    gru = ns["Seq2Seq"](len(data.src_vocab), len(data.tgt_vocab), cfg["gru_emb"], cfg["gru_hidden"], luong=True,
                        attention=ns["GRUCrossAttention"](cfg["gru_hidden"], ns["Seq2Seq"].encoder_size(cfg["gru_hidden"])))

    def gru_loss(m, b):
        return F.cross_entropy(m(b.src, b.src_mask, b.tgt_in).flatten(0, 1), b.tgt_out.flatten(), ignore_index=0)
    p_gru = probe(fit_unit(gru, make_batch, gru_loss), 4, 32, cfg["batch"])
    works.append(Work.of(f"GRU with attention: {steps} steps of {cfg['batch']}", steps, p_gru, width=cfg["gru_hidden"],
                         cpu=batch_s, extra_host=5, extra_syncs=5))
    rounds = v.at("step_seconds_side_by_side(run.pick(") + 1
    works.append(Work("time per step side by side (fwd + bwd, synchronised)", rounds,
                      host=p_tf.host * 0.85 + p_gru.host * 0.85, dev=p_gru.dev, flops=p_tf.flops + p_gru.flops, width=d,
                      syncs=2 + p_tf.syncs + p_gru.syncs))
    # greedy decoding: kernels per step (a fresh model never says <eos>: eos_id -1 keeps it going)
    src = data.batch(_typical_pairs(data, 4, "test")[0]).src
    model.eval()
    k1 = counted(lambda: ns["greedy_decode"](model, src, 1, 1, -1))
    k5 = counted(lambda: ns["greedy_decode"](model, src, 5, 1, -1))
    per_step, first = (k5.host - k1.host) / 4, k1.host
    f_step = (_flops(lambda: ns["greedy_decode"](model, src, 5, 1, -1)) - _flops(lambda: ns["greedy_decode"](model, src, 1, 1, -1))) / 4

    def greedy(name, pairs, models=1):
        chunk_steps = _sorted_chunk_steps(pairs)
        return Work(name, models * len(chunk_steps), host=first + per_step * (sum(chunk_steps) / len(chunk_steps) - 1),
                    syncs=sum(chunk_steps) / len(chunk_steps) + 2, width=d,
                    flops=f_step * 256 / 4 * sum(chunk_steps) / len(chunk_steps) * 2,
                    cpu=0.004, note=f"{len(chunk_steps)} length-sorted chunks of up to 256")
    test = data.split("test")
    works.append(greedy("greedy test translations, Transformer", test))
    works += _seq2seq_eval("greedy test translations, GRU", gru, data, len(test), cfg["gru_hidden"])
    probe_n = v.at("probe = data.test[:")
    works.append(Work("cross-attention maps of the probe sentences", 1, host=p_tf.host / 3, syncs=2, width=d,
                      cpu=timed(lambda: data.batch(test[:probe_n]), 1) + probe_n * 2e-4))
    works.append(greedy("swapped memory: the probe translated twice", test[:probe_n], models=2))
    beam_n = v.at("beam_pairs = data.test[:")
    one = src[:1, :]
    b1 = counted(lambda: ns["beam_search"](model, one[0], 4, 1, 1, -1))
    b5 = counted(lambda: ns["beam_search"](model, one[0], 4, 5, 1, -1))
    beam_step, beam_first = (b5.host - b1.host) / 4, b1.host
    beam_syncs = (b5.syncs - b1.syncs) / 4
    mean_len = sum(len(p.tgt) for p in test[:beam_n]) / beam_n + 1
    works.append(Work(f"beam search, 3 settings x 2 models x {beam_n} sentences, one at a time", 6 * beam_n,
                      host=beam_first + beam_step * (mean_len - 1), syncs=beam_syncs * mean_len + 1, width=d,
                      cpu=2e-5 * mean_len, note=f"about {mean_len:.0f} steps per sentence, beam 4"))
    works.append(greedy("beam study: greedy on the same sentences, 2 models", test[:beam_n], models=2))
    avg = v.get("cfg_avg", steps=steps)
    works.append(Work.of(f"checkpoint averaging: {v.param('N_SEEDS')} x {avg['steps']} steps", v.param("N_SEEDS") * avg["steps"],
                         p_tf, width=d, cpu=batch_s, extra_host=5, extra_syncs=5))
    n_tensors = len(model.state_dict())
    works.append(Work("checkpoint averaging: snapshots, averages, validation", v.param("N_SEEDS"),
                      host=avg["K"] * n_tensors * 2 + 2 * (p_tf.host / 3), syncs=10, width=d))
    works.append(greedy("checkpoint averaging: greedy validation, 2 per seed", data.split("val")[:sizes["n_val"]],
                        models=2 * v.param("N_SEEDS")))
    warm = v["cfg_warm"]
    deep = tf(n_layers=warm["n_layers"])
    p_deep = probe(fit_unit(deep, make_batch, loss_fn), 4, 16, cfg["batch"])
    works.append(Work.of(f"warm-up study: 4 x {warm['steps']} steps, {warm['n_layers']}+{warm['n_layers']} layers",
                         4 * warm["steps"], p_deep, width=d, cpu=batch_s, extra_host=5, extra_syncs=5))
    works.append(greedy("warm-up study: greedy validation", data.split("val")[:sizes["n_val"]], models=4))
    return works


_CORPUS = {}


def corpus(max_chars=None):
    """The course's character corpus (Python's standard library sources), loaded once; its loading time here."""
    if max_chars not in _CORPUS:
        from course.data.corpus import load_corpus
        t0 = time.thread_time()
        c = load_corpus(max_chars=max_chars)
        _CORPUS[max_chars] = (c, time.thread_time() - t0)
    return _CORPUS[max_chars]


def _evals(steps: int, every: int) -> int:
    """How many times lesson 09's train_lm evaluates: at step 0, every ``every`` steps, every ``every // 5`` early."""
    early = max(1, every // 5)
    return 1 + sum(1 for s in range(1, steps + 1) if s % every == 0 or s == steps or (s < 3 * every and s % early == 0))


def _lm_probe(model, corp, block, batch, loss, *, amp=True, item=True, small=2, large=8, repeats=2, short=32):
    """A language model's training step, probed on windows of ``short`` tokens (the kernels do not depend on the
    length, but for an RNN's sequential steps): FLOPs scaled to the full batch and, linearly, to ``block``; the
    transformers' attention term, which grows as T^2, is added back by the callers' textbook count."""
    gen = torch.Generator().manual_seed(1)
    T = min(block, short)
    unit = loop_unit(model, lambda b: corp.batch("train", b, T, gen)[0], loss, item=item)
    p = probe(unit, small, large, batch, repeats=repeats, amp=amp)
    scale = block / T
    p.flops *= scale
    p.dev *= scale
    p.rnn_steps *= scale
    p.rnn_flops *= scale
    return p


def _generation(model, idx, n, **kw):
    """Kernels and syncs of one generated token (the difference of generating n and 1), and of the call's start."""
    with torch.no_grad():
        k1 = counted(lambda: model.generate(idx, 1, **kw))
        kn = counted(lambda: model.generate(idx, n, **kw))
    per = (kn.host - k1.host) / (n - 1)
    return per, k1.host - per, (kn.syncs - k1.syncs) / (n - 1)


def lesson_09(v: Values) -> list[Work]:
    ns = notebook("09")
    cfg = v["cfg"]
    corp, load_s = corpus(v.at("corpus = load_corpus("))
    V, d, L, H, T, B = corp.vocab_size, cfg["d_model"], cfg["n_layers"], cfg["n_heads"], cfg["block"], cfg["batch"]
    GPT, lm_loss = ns["GPT"], ns["lm_loss"]
    torch.manual_seed(0)
    model = GPT(V, T, d, H, L)
    n_params = sum(p.numel() for p in model.parameters())
    p = _lm_probe(model, corp, T, B, lambda m, x: lm_loss(m(x)[0].float(), x))
    counted_flops, p.flops = p.flops, transformer_flops_token(d, L, 4 * d, T, vocab=V) * B * T
    works = [Work("corpus read and its unigram baseline (CPU)", 1, cpu=load_s,
                  note=f"GPT step: {p.flops / 1e12:.2f} TFLOP textbook, {counted_flops / 1e12:.2f} counted without the T^2 growth")]
    evals = _evals(cfg["steps"], cfg["eval_every"])
    per_tok = transformer_flops_token(d, L, 4 * d, T, vocab=V, train=False)
    train_note = f"{n_params:,} parameters; {p.flops / 1e12:.2f} TFLOP per step"
    for name in ("GPT, every position", "GPT, last position only"):
        works.append(Work.of(f"{name}: {cfg['steps']} steps of {B} x {T}", cfg["steps"], p, width=d, dtype="bf16",
                             extra_host=2 * PAGEABLE, extra_syncs=2, note=train_note))
        works.append(Work(f"{name}: {evals} evaluations of {cfg['eval_batches']} x {cfg['eval_batch']} windows",
                          evals * cfg["eval_batches"], host=p.host / 3 + 8, syncs=3, width=d, dtype="bf16",
                          flops=per_tok * cfg["eval_batch"] * T))
    idx = corp.encode("def ")[None]
    model.eval()
    per, start, syn = _generation(model, idx, 6)
    n_samples = 5 * cfg["sample_len"]
    works.append(Work(f"samples: 5 x {cfg['sample_len']} characters, cached, batch 1", n_samples, host=per, syncs=syn, width=d,
                      flops=2 * n_params))
    n_new = v.at("n_new =", cfg=cfg)
    starts = idx.repeat(4, 1)
    per_u, _, syn_u = _generation(model, starts, 6, use_cache=False)
    per_c, _, syn_c = _generation(model, starts, 6, use_cache=True)
    works.append(Work(f"cached = uncached: 3 x {n_new} tokens each way, batch 4", 3 * n_new, host=per_u + per_c, syncs=syn_u + syn_c,
                      width=d, flops=4 * 2 * n_params * (1 + n_new / 2)))
    speed_block = v.at("speed_block =")
    lengths = [n for n in (16, 32, 64, 128, 256, 512, 1024) if n <= speed_block]
    tokens = sum(lengths)                               # the GPU's comparison: one round each way
    works.append(Work(f"cache speed-up on the GPU (for comparison): lengths {lengths[0]}..{lengths[-1]}, once each way", tokens,
                      host=per_u + per_c, syncs=syn_u + syn_c, width=d,
                      flops=2 * n_params * (1 + sum(n * n for n in lengths) / sum(lengths) / 2)))
    torch.manual_seed(0)                                # the target's timing runs on the CPU on every machine: timed here
    fresh = GPT(V, speed_block, d, H, L).eval()

    def both_ways():
        for n in lengths:
            for use_cache in (True, False):
                fresh.generate(idx[:, :1], n - 1, top_k=1, use_cache=use_cache)
    works.append(Work(f"cache speed-up on the CPU (the target): lengths {lengths[0]}..{lengths[-1]}, twice each way", 1,
                      cpu=2 * _time(both_ways, 1)))
    def gru_parameters(h):                              # the notebook's count: embedding, GRU, head
        return V * h + 6 * h * h + 6 * h + h * V + V
    d_gru = v.overrides.get("d_gru", min(range(8, 2049), key=lambda h: abs(gru_parameters(h) - n_params)))
    torch.manual_seed(0)
    gru = ns["GRULM"](V, d_gru)
    pg = _lm_probe(gru, corp, T, B, lambda m, x: lm_loss(m(x)[0].float(), x))
    works.append(Work.of(f"GRU LM, d_hidden {d_gru}: {cfg['steps']} steps of {B} x {T}", cfg["steps"], pg, width=d_gru,
                         dtype="bf16", extra_host=2, extra_syncs=2, note=f"the GPT's {n_params:,} parameters; "
                         f"{T} sequential steps forward, twice that backward"))
    works.append(Work(f"GRU LM: {evals} evaluations", evals * cfg["eval_batches"], host=pg.host / 3 + 8, syncs=3,
                      width=d_gru, dtype="bf16", flops=pg.flops / 3 * cfg["eval_batch"] / B,
                      rnn_steps=T, rnn_flops=pg.rnn_flops / 3 * cfg["eval_batch"] / B))
    ratio_rounds = v.at("for i in range(run.pick(")
    works.append(Work("GRU / GPT time per step, side by side", ratio_rounds, host=pg.host + p.host, syncs=4, width=d,
                      dtype="bf16", flops=pg.flops + p.flops, rnn_steps=pg.rnn_steps, rnn_flops=pg.rnn_flops))
    works.append(Work("induction probe: attention maps of 16 repeated strings", 1, host=p.host / 3 + 12 * L, syncs=3 + H * L * 2,
                      width=d))
    return works


def lesson_10(v: Values) -> list[Work]:
    ns = notebook("10")
    documents, tweets, masks = ns["documents"], ns["tweets"], ns["masks"]
    vocab = documents.make_vocab()
    ns["vocab"] = vocab
    cfg, MAX_LEN = v["cfg"], 64
    doc_s = timed(lambda: documents.generate(2000, seed=1), 1) / 2000
    docs = documents.generate(4000, seed=1)
    gen = torch.Generator().manual_seed(1)

    def pretraining_batch(b):
        index = torch.randint(len(docs), (b,), generator=gen)
        pairs = ns["make_nsp_pairs"]([docs[int(i)] for i in index], generator=gen)
        ids, segments, real = documents.encode_pairs(pairs, vocab)
        inputs, labels = ns["mask_tokens"](ids, documents.special_mask(ids), len(vocab), documents.MASK, generator=gen)
        nsp = torch.tensor([0 if is_next else 1 for _, _, is_next in pairs])
        return inputs, segments, real, labels, nsp
    batch_s = timed(lambda: pretraining_batch(cfg["batch"]), 3)
    d, L = cfg["d_model"], cfg["n_layers"]
    Bert = ns["Bert"]

    def bert():
        return Bert(len(vocab), d_model=d, n_heads=cfg["n_heads"], d_ff=cfg["d_ff"], n_layers=L, max_len=MAX_LEN, dropout=0.0)
    torch.manual_seed(0)
    model = bert()

    def loss_fn(m, b):
        inputs, segments, real, labels, nsp = b
        mlm, nsp_logits = m(inputs, segments, masks.key_padding(real))
        return F.cross_entropy(mlm.flatten(0, 1), labels.flatten()) + F.cross_entropy(nsp_logits, nsp)
    p = probe(fit_unit(model, pretraining_batch, loss_fn), 4, 32, cfg["batch"])
    T = pretraining_batch(8)[0].shape[1]
    works = [Work("documents generated (CPU)", cfg["n_docs"] + 2000, cpu=doc_s),
             Work.of(f"pre-training, d {d}, {L} layers: {cfg['steps']} steps of {cfg['batch']} x {T}", cfg["steps"], p, width=d,
                     cpu=batch_s, extra_host=5 * PAGEABLE, extra_syncs=5 + 1,
                     note="batches made in Python each step; on_step reads the loss"),
             Work("held-out MLM and NSP accuracy", (cfg["steps"] // cfg["eval_every"] + 2) * v.at("eval_batches = ["),
                  host=p.host / 3 + 10,
                  syncs=4, width=d, flops=p.flops / 3 * 250 / cfg["batch"]),
             Work("baseline and evaluation batches made (CPU)", 28, cpu=batch_s * 250 / cfg["batch"])]
    with torch.no_grad():
        one, many = pretraining_batch(2), pretraining_batch(250)
        enc_1 = timed(lambda: model.encode(one[0][:1], one[1][:1], masks.key_padding(one[2][:1])), 3)
        enc_250 = timed(lambda: model.encode(many[0], many[1], masks.key_padding(many[2])), 1)
    n_cls = v.at("cls_attention_on_topic_words(run.pick(")
    works.append(Work(f"checks on the CPU: transformers' copy on 250 pairs, [CLS] attention over {n_cls} pairs", 1,
                      cpu=3 * enc_250 + n_cls * 2 * enc_1, note="the bridged model runs on the CPU (eager attention: x2)"))
    works.append(Work("homonyms: fresh models and contextual vectors", v.at("for k in range(run.pick(smoke=") + 1,
                      host=p.host / 3 + 60,
                      syncs=3, width=d))
    t = v["tcfg"]
    kw = dict(min_len=4, max_len=t["max_len"])
    tweet_s = timed(lambda: tweets.generate_negated(500, seed=12, **kw), 1) / 500
    train_tweets = tweets.generate(500, seed=11, **kw) + tweets.generate_negated(500, seed=12, **kw)
    ids, segments, real = documents.encode_pairs([list(x.words) for x in train_tweets], vocab)
    labels = torch.tensor([x.label for x in train_tweets])
    train_t = (ids, segments, real, labels)
    g2 = torch.Generator().manual_seed(3)

    def ft_batch(b):
        index = torch.randint(len(ids), (b,), generator=g2)
        return [x[index] for x in train_t]

    def ft_loss(m, b):
        return F.cross_entropy(m(*b[:3]), b[3])
    torch.manual_seed(0)
    clf = ns["BertClassifier"](bert())
    pf = probe(fit_unit(clf, ft_batch, ft_loss), 4, 32, t["batch"])
    pool = ns["PoolingClassifier"](len(vocab), d)
    pp = probe(fit_unit(pool, ft_batch, ft_loss), 4, 32, t["batch"])
    n_bert = 2 * len(t["lrs_bert"]) + 2 * t["seeds"]
    works += [Work("fine-tuning tweets generated (CPU)", 2 * (t["n_train"] + t["n_val"] + t["n_test"]), cpu=tweet_s),
              Work.of(f"fine-tuning BERT: {n_bert} runs x {t['steps']} steps of {t['batch']}", n_bert * t["steps"], pf, width=d,
                      extra_host=1 + 4, extra_syncs=1, note=f"{2 * len(t['lrs_bert'])} for the learning rates, "
                      f"{2 * t['seeds']} seeds"),
              Work.of(f"fine-tuning attention pooling: {t['seeds']} x {t['steps']} steps", t["seeds"] * t["steps"], pp, width=d,
                      extra_host=5, extra_syncs=1),
              Work("fine-tuned models scored", 2 * len(t["lrs_bert"]) + 4 * 3 * t["seeds"], host=pf.host / 3 + 5, syncs=1,
                   width=d, flops=pf.flops / 3 * max(t["n_val"], t["n_test"]) * 2 / t["batch"])]
    return works


def lesson_11(v: Values) -> list[Work]:
    ns = notebook("11")
    images, ViT, SmallCNN = ns["images"], ns["ViT"], ns["SmallCNN"]
    digits, P = ns["digits"], v.param("PATCH_SIZE")
    a, b, c = v["cfg_a"], v["cfg_b"], v["cfg_c"]
    g = torch.Generator().manual_seed(1)

    def classifier_unit(model, x, y, shift):
        def make(bsz):
            idx = torch.randint(0, len(y), (bsz,), generator=g)
            return images.random_shift(x[idx], shift, generator=g), y[idx]

        def loss(m, batch):
            return F.cross_entropy(m(batch[0]), batch[1], label_smoothing=0.1)
        return loop_unit(model, make, loss, item=True), make

    def trained(name, model, x, y, steps, batch, shift, width, amp):
        unit, make = classifier_unit(model, x, y, shift)
        p = probe(unit, 4, 32, batch, amp=amp)
        cpu = timed(lambda: make(batch), 5)
        return Work.of(name, steps, p, width=width, dtype="bf16", cpu=cpu, extra_host=2 * PAGEABLE + 1, extra_syncs=2,
                       note="bf16 autocast; loss.item() every step")

    def vit(cfg, S, p, n_classes):
        torch.manual_seed(0)
        return ViT(S, p, 1, n_classes, cfg["d_model"], cfg["n_layers"], cfg["n_heads"], cfg["d_ff"], dropout=cfg.get("dropout", 0.0))
    x, y = digits.train_x, digits.train_y
    T = (8 // P) ** 2 + 1
    works = [trained(f"ViT on digits, d {a['d_model']}, {a['n_layers']} layers, T {T}: {a['steps']} steps of {a['batch']}",
                     vit(a, 8, P, 10), x, y, a["steps"], a["batch"], 1, a["d_model"], True),
             trained(f"CNN on digits: {a['cnn_steps']} steps of {a['batch']}", SmallCNN(1, 10, width=a["cnn_width"]), x, y,
                     a["cnn_steps"], a["batch"], 1, a["cnn_width"], True)]
    for n in b["sizes"]:
        bsz = min(a["batch"], n)
        works.append(trained(f"{n} training images: ViT, {b['steps']} steps of {bsz}", vit(a, 8, P, 10), x[:n], y[:n], b["steps"],
                             bsz, 1, a["d_model"], True))
        works.append(trained(f"{n} training images: CNN, {b['steps']} steps of {bsz}", SmallCNN(1, 10, width=a["cnn_width"]),
                             x[:n], y[:n], b["steps"], bsz, 1, a["cnn_width"], True))
    works.append(Work("test accuracy of each digits model", 2 + 2 * len(b["sizes"]) + 2, host=80, syncs=2))
    shapes_s = timed(lambda: images.shapes(500, seed=0, image_size=24, cell=4), 1) / 500
    sx, sy, _ = images.shapes(512, seed=0, image_size=24, cell=4)
    works.append(Work("shapes generated (CPU)", c["n_train"] + c["n_test"], cpu=shapes_s))
    works.append(trained(f"shapes: ViT, d {c['d_model']}, {c['n_layers']} layers, T {(24 // 4) ** 2 + 1}: {c['steps']} steps of 64",
                         vit(c, 24, 4, 2), sx, sy, c["steps"], 64, 0, c["d_model"], True))
    works.append(trained(f"shapes: CNN, {c['steps']} steps of 64", SmallCNN(1, 2, width=c["cnn_width"]), sx, sy, c["steps"], 64, 0,
                         c["cnn_width"], True))
    works.append(Work("shapes: test predictions, 2 models", 2 * math.ceil(c["n_test"] / 1024), host=60, syncs=1,
                      cpu=1024 * 24 * 24 * 4 / 1e9))
    works.append(Work("attention maps from transformers' copy (CPU), 2 x 64 images", 2, cpu=0.3))
    return works


def _attention_call_s(method: str, T: int, heads: int = 16) -> float:
    """Device seconds of one attention call (B 1, Dh 64, bf16) at length T: the H200's measurement at T = 16 384
    (bench/attention_scaling.py), scaled as T^2 (all three do T^2 work) and by the number of heads."""
    return GPU["attn16k_ms"][method] * 1e-3 * (T / 16384) ** 2 * heads / 16


def lesson_12(v: Values) -> list[Work]:
    ns = notebook("12")
    cfg = v["cfg"]
    if v.param("MAX_T"):
        cfg["lengths"] = [T for T in cfg["lengths"] if T <= v.param("MAX_T")] or cfg["lengths"][:1]
    H, calls = cfg["H"], 1 + 1 + cfg["repeat"]            # peak memory, warm-up, repeats
    gpu_gib = 80
    works = []
    for T in cfg["lengths"]:
        for method in ("naive", "chunked", "sdpa"):
            if method == "naive" and cfg["B"] * H * T * T * 2 * 2 > gpu_gib * 2 ** 30:   # scores and weights, bf16
                continue                                  # out of memory: one failed call, skipped from then on
            host = {"naive": 6, "chunked": 12 * math.ceil(T / cfg["chunk"]), "sdpa": 1}[method]
            works.append(Work(f"scaling: {method}, T = {T}", calls, host=host, syncs=2,
                              device_s=_attention_call_s(method, T, H) * cfg["B"]))
    T_c = v.at("T_c =")
    for c in v.at("chunk_sizes ="):
        n = math.ceil(T_c / c)
        works.append(Work(f"chunk sizes: {c} at T = {T_c}", 1 + 1 + cfg["repeat"], host=12 * n, syncs=2,
                          device_s=_attention_call_s("chunked", T_c, H) * max(1.0, 1024 / c) ** 0.5))
    T_b = v.at("T_b =")
    works.append(Work(f"SDPA backends at T = {T_b}", 4 * 5, host=3, syncs=2, device_s=_attention_call_s("naive", T_b, H)))
    T_p = v.at("T_p =")
    works.append(Work(f"precision at T = {T_p}: float64 reference, 3 dtypes", 1, host=200, syncs=10,
                      device_s=3 * 4 * _attention_call_s("naive", T_p, 4) * 8))
    d_block, n_tok = v.at("d_block ="), 4 * v.at("x = torch.randn(4, run.pick(")
    blk = 2 * n_tok * 12 * d_block ** 2 + 4 * n_tok * v.at("x = torch.randn(4, run.pick(") * d_block
    works.append(Work(f"autocast: one block, d {d_block}, 4 x {n_tok // 4} tokens, 2 x 5 forward calls", 10, host=20, syncs=1,
                      flops=blk, width=d_block))
    d_c, n_c = v.at("d_c ="), 8 * v.at("x = torch.randn(8, run.pick(")
    step = 3 * (2 * n_c * 12 * d_c ** 2 + 4 * n_c * (n_c // 8) * d_c)
    compile_on = v.param("COMPILE") and v.profile != "smoke"
    works.append(Work(f"torch.compile of one block, d {d_c}: compile, then 2 x 7 training steps", 14, host=60, syncs=1,
                      flops=step, width=d_c, fixed=GPU["compile_s"] if compile_on else 0.0,
                      note=f"compile time measured on the H100: {GPU['compile_s']} s"))
    lm = v["cfg_lm"]
    corp, _ = corpus(lm["chars"])
    V, d, L, Hq, T, B = corp.vocab_size, lm["d_model"], lm["n_layers"], lm["n_heads"], lm["context"], lm["batch"]
    gen = torch.Generator().manual_seed(1)

    def lm_loss(m, b):
        x, y = b
        return F.cross_entropy(m(x)[0].flatten(0, 1), y.flatten())
    for n_kv in lm["kv_heads"]:
        torch.manual_seed(0)
        model = ns["TinyLM"](V, T, d, L, Hq, n_kv)
        p = probe(fit_unit(model, lambda b: corp.batch("train", b, 32, gen), lm_loss), 2, 8, B, amp=True, repeats=2)
        p.flops = transformer_flops_token(d, L, 4 * d, T, vocab=V, kv_frac=n_kv / Hq) * B * T
        name = {Hq: "MHA", 1: "MQA"}.get(n_kv, "GQA")
        works.append(Work.of(f"{name} ({n_kv} kv heads), d {d}, {L} layers: {lm['steps']} steps of {B} x {T}", lm["steps"], p,
                             width=d, dtype="bf16", extra_host=2, extra_syncs=2))
        works.append(Work(f"{name}: validation loss, {lm['eval_batches']} batches", lm["eval_batches"], host=p.host / 3, syncs=3,
                          width=d, flops=p.flops / 3))
        works.append(Work(f"{name}: KV cache filled token by token, {T} tokens", T, host=p.host / 3 / L * L * 0.6 + 6, syncs=1,
                          width=d, flops=2 * sum(x.numel() for x in model.parameters())))
    return works


def lesson_13(v: Values) -> list[Work]:
    ns = notebook("13")
    cfg = v["cfg"]
    corp, load_s = corpus(cfg["chars"])
    V, d, H, L, T, B = corp.vocab_size, cfg["d_model"], cfg["n_heads"], cfg["n_layers"], cfg["train_T"], cfg["batch"]
    works = [Work("corpus read (CPU)", 1, cpu=load_s)]
    gen = torch.Generator().manual_seed(1)
    ns["SCHEMES"] = ("learned", "sinusoidal", "rope", "alibi", "none")       # the experiment cell's constant

    def loss(m, b):
        x, y = b
        return F.cross_entropy(m(x).float().flatten(0, 1), y.flatten())
    for scheme in ns["SCHEMES"]:
        torch.manual_seed(0)
        model = ns["PositionalGPT"](V, scheme, T, d, H, L)
        unit = loop_unit(model, lambda b: corp.batch("train", b, 32, gen), loss, item=False)
        p = probe(unit, 2, 8, B, amp=True, repeats=2)
        p.flops = transformer_flops_token(d, L, 4 * d, T, vocab=V) * B * T
        works.append(Work.of(f"{scheme}: {cfg['steps']} steps of {B} x {T}", cfg["steps"], p, width=d, dtype="bf16",
                             extra_host=2, extra_syncs=2, note="bf16 autocast; losses kept on the device"))
        n_batches = math.ceil(cfg["windows"] / 16)
        curves = 3 if scheme == "rope" else 1                     # rope: plain, interpolation, NTK base
        works.append(Work(f"{scheme}: loss at every position, {cfg['windows']} windows of {cfg['eval_T']}",
                          curves * n_batches, host=p.host / 3 + 4, syncs=0, width=d, dtype="bf16",
                          flops=transformer_flops_token(d, L, 4 * d, cfg["eval_T"], vocab=V, train=False) * 16 * cfg["eval_T"]))
    works.append(Work("the demonstrations (rotations, BLOOM's biases, LlamaAttention)", 1, cpu=0.5))
    return works


def lesson_14(v: Values) -> list[Work]:
    ns = notebook("14")
    cfg = v["cfg"]
    V, d, H = cfg["vocab"], cfg["d_model"], cfg["n_heads"]
    torch.manual_seed(0)
    aot = ns["AttentionOnlyTransformer"](V, d, H, n_layers=2, block_size=2 * cfg["max_len"] + 1)
    gen = torch.Generator().manual_seed(1)
    L_mean = (cfg["min_len"] + cfg["max_len"]) // 2

    def make(b):
        return ns["repeated_sequences"](b, L_mean, V, generator=gen)

    def loss_fn(m, seqs):
        return F.cross_entropy(m(seqs)[:, :-1].flatten(0, 1), seqs[:, 1:].flatten())
    p = probe(fit_unit(aot, make, loss_fn), 4, 32, cfg["batch"], amp=True)
    eval_seqs = ns["repeated_sequences"](8, cfg["eval_len"], V, generator=gen)
    define("14", ns, "evaluate", eval_seqs=eval_seqs, L_eval=cfg["eval_len"])
    ev = counted(lambda: ns["evaluate"](aot, seqs=eval_seqs, L=cfg["eval_len"]))
    works = [Work.of(f"attention-only, 2 layers, d {d}: {cfg['steps']} steps of {cfg['batch']}", cfg["steps"], p, width=d,
                     dtype="bf16", extra_host=PINNED, extra_syncs=1, note="on_step reads the loss every step"),
             Work(f"scores every {cfg['eval_every']} steps", cfg["steps"] // cfg["eval_every"] + 1, host=ev.host, syncs=ev.syncs,
                  width=d),
             Work("heads switched off, circuits, compositions", 14, host=ev.host, syncs=ev.syncs, width=d, cpu=0.05)]
    cfg09 = v["cfg09"]
    corp, load_s = corpus(v.at("corpus = load_corpus("))
    from transformers import GPT2LMHeadModel

    from course.oracles.gpt2 import gpt2_config
    V9, d9, L9, T9, B9 = corp.vocab_size, cfg09["d_model"], cfg09["n_layers"], cfg09["block"], cfg09["batch"]
    torch.manual_seed(0)
    gpt = GPT2LMHeadModel(gpt2_config(V9, T9, d9, cfg09["n_heads"], L9, attn_implementation="sdpa"))
    gpt.loss_type = "ForCausalLM"
    g2 = torch.Generator().manual_seed(2)
    pg = probe(fit_unit(gpt, lambda b: corp.batch("train", b, 32, g2)[0], lambda m, x: m(input_ids=x, labels=x).loss), 2, 8, B9,
               amp=True, repeats=2)
    pg.flops = transformer_flops_token(d9, L9, 4 * d9, T9, vocab=V9) * B9 * T9
    works += [Work("corpus read (CPU)", 1, cpu=load_s),
              Work.of(f"lesson 09's GPT (transformers), d {d9}, {L9} layers: {cfg09['steps']} steps of {B9} x {T9}", cfg09["steps"],
                      pg, width=d9, dtype="bf16", extra_host=PINNED, note="course.train_lm.train: the full profile's sizes"),
              Work("lesson 09's GPT read with eager attention, 2 x 64 sequences", 2, host=pg.host / 3, syncs=4, width=d9,
                   flops=pg.flops / 3 / B9 * 64)]
    return works


def lesson_15(v: Values) -> list[Work]:
    ns = notebook("15")
    cfg = v["cfg"]
    corp, load_s = corpus(cfg["max_chars"])
    V, d, H, L, T, B = corp.vocab_size, cfg["d_model"], cfg["n_heads"], cfg["n_layers"], cfg["block"], cfg["batch"]
    from course import serving
    gen = torch.Generator().manual_seed(1)

    def loss(m, x):
        return ns["next_token_loss"](m(x), x).mean()

    def lm(d_, h_, l_, **kw):
        torch.manual_seed(0)
        return serving.ServingLM(V, d_, h_, l_, max_distance=T // 2, **kw)
    works = [Work("corpus read (CPU)", 1, cpu=load_s)]
    target = lm(d, H, L)
    models = {"target": (target, cfg["steps"]), "draft": (lm(cfg["draft_d"], 1, 1), cfg["draft_steps"]),
              "linear attention": (lm(d, H, L, mixer=lambda q, k, v_: ns["linear_attention"](q, k, v_, causal=True)), cfg["steps"])}
    for name, (m, steps) in models.items():
        unit = loop_unit(m, lambda b: corp.batch("train", b, 32, gen)[0], loss, item=False)
        p = probe(unit, 2, 8, B, repeats=2)
        p.flops *= T / 32 * (1 + T / 32 / 8)             # windows of T, not 32: linear, plus attention's T^2 share
        works.append(Work.of(f"{name}, d {m.tok_emb.embedding_dim}: {steps} steps of {B} x {T}", steps, p, width=m.tok_emb.embedding_dim,
                             extra_host=2, extra_syncs=2))
    long = cfg["long"]
    x = corp.batch("val", 1, long, gen)[0]
    fwd = _flops(lambda: target(x[:, :64])) * cfg["eval_batch"] * long / 64 * (1 + long / 64 / 8)
    with torch.no_grad():
        k_fwd = counted(lambda: target(x[:, :64], window=16, n_sinks=2))

        def stepped(n, make_cache):
            caches = [make_cache() for _ in range(L)]
            return counted(lambda: [target.step(x[:, t:t + 1], t, caches) for t in range(n)])
        k8 = stepped(8, lambda: ns["SlidingWindowCache"](10 ** 9))
        k16 = stepped(16, lambda: ns["SlidingWindowCache"](10 ** 9))
        per_step = (k16.host - k8.host) / 8
        i4, i8, i16 = (stepped(n, lambda: ns["Int8Cache"]()) for n in (4, 8, 16))

    def quadratic(n, pts=((4, i4.host), (8, i8.host), (16, i16.host))):
        (x1, y1), (x2, y2), (x3, y3) = pts
        c2 = ((y3 - y1) / (x3 - x1) - (y2 - y1) / (x2 - x1)) / (x3 - x2)
        c1 = (y2 - y1) / (x2 - x1) - c2 * (x1 + x2)
        return y1 + c1 * (n - x1) + c2 * (n * n - x1 * x1)
    works += [Work(f"the window cache against a masked pass: 2 dtypes x {long} tokens, one at a time", 2 * long, host=per_step,
                   syncs=L + 1, width=d),
              Work(f"sinks and windows: {1 + 4 * len(cfg['windows'])} passes of {cfg['eval_batch']} x {long}",
                   1 + 4 * len(cfg["windows"]) + 6, host=k_fwd.host, syncs=1, flops=fwd, width=d,
                   note="with the maps and the int8 round trips"),
              Work(f"greedy through a float32 cache: 8 prompts x {16 + cfg['spec_new']} tokens", 8 * (15 + cfg["spec_new"]),
                   host=per_step, syncs=L + 1, width=d),
              Work(f"greedy through the int8 cache: 8 prompts x {16 + cfg['spec_new']} tokens (kernels fitted at 4, 8, 16 "
                   "steps)", 8, host=quadratic(15 + cfg["spec_new"]), syncs=(L + 1) * (15 + cfg["spec_new"]), width=d)]
    # the CPU part: the lesson moves speculative decoding to the CPU (threads: torch's default on a GPU machine)
    spec_target, spec_draft = target, models["draft"][0]
    bigram = serving.BigramDraft.from_counts(corp.train[:200_000], V)
    with torch.no_grad():
        t_33 = timed(lambda: spec_target(x[:, :33]), 5)
        t_V = timed(lambda: spec_target(x[:, :33].repeat(V, 1)), 1)
        mid = 64 + cfg["spec_new"] // 2
        t_mid, d_mid = timed(lambda: spec_target(x[:, :mid]), 3), timed(lambda: spec_draft(x[:, :mid]), 3)
        b_mid = timed(lambda: bigram(x[:, :mid]), 3)
        gen_cpu = torch.Generator().manual_seed(5)
        prompt = x[:, :32]
        t_spec = timed(lambda: ns["speculative_generate"](spec_target, spec_draft, prompt, 2, k=4, generator=gen_cpu), 5)
        t_all = timed(lambda: ns["speculative_generate"](spec_draft, spec_draft, prompt, 2, k=4, generator=gen_cpu), 5)
    runs = cfg["chi2_runs"]
    works += [Work("chi-square: the exact two-token distribution (CPU)", 1, cpu=t_33 * 2 + t_V),
              Work(f"chi-square: {runs} runs x 3 rules (CPU)", runs, cpu=t_spec + t_all + 2 * t_33)]
    n_new, n_prompts = cfg["spec_new"], cfg["spec_prompts"]
    alpha = 0.7                              # docs/benchmarks.md: 2.84 tokens per target pass at k = 4 (standard profile)
    per_pass = {k: (1 - alpha ** (k + 1)) / (1 - alpha) for k in cfg["ks"]}
    sweep = sum(n_prompts * n_new / per_pass[k] * (t_mid + k * dk) for k in cfg["ks"] for dk in (d_mid, b_mid))
    best = {dk: max(cfg["ks"], key=lambda k: per_pass[k] / (1 + k * dk / t_mid)) for dk in (d_mid, b_mid)}
    rounds = cfg["timing_rounds"] * sum(n_prompts * n_new * t_mid + n_prompts * n_new / per_pass[k] * (t_mid + k * dk)
                                        for dk, k in best.items())
    works += [Work(f"speculative decoding: 2 drafts x {len(cfg['ks'])} values of k x {n_prompts} prompts x {n_new} tokens (CPU)",
                   1, cpu=sweep, note="passes over the whole text, no cache; acceptance 0.7 as measured"),
              Work("speculative decoding: a pass's cost, 2 x 21 pairs (CPU)", 1, cpu=42 * (t_mid + d_mid)),
              Work(f"speculative decoding: plain vs speculative, {cfg['timing_rounds']} rounds x 2 drafts (CPU)", 1, cpu=rounds),
              Work("the speculation widget, once (CPU)", 1, cpu=32 / per_pass[4] * (t_mid + 4 * d_mid))]
    lengths = cfg["lin_lengths"]
    with torch.no_grad():
        lin = models["linear attention"][0]
        states = [None] * L
        kl = counted(lambda: lin.step_recurrent(x[:, :1], states, ns["linear_attention_recurrent"]))
    works += [Work(f"linear attention and the cache, token by token: {lengths[-1]} tokens", lengths[-1], host=kl.host + per_step,
                   syncs=L + 1, width=d),
              Work(f"linear attention: recurrent vs parallel, {T} tokens", T, host=kl.host, syncs=1, width=d)]
    return works


def lesson_16(v: Values) -> list[Work]:
    """Lesson 16 on a GPU compiles its Triton kernels (never run on a GPU yet): the kernels are launched a few hundred
    times; what costs is Triton's compilation, one per specialisation (causal or not, forward, the two backward
    kernels, the block sizes and the head sizes of the checks): about 12 compilations of 1-2 s each (not measured)."""
    gpu_max = v.param("GPU_MAX_T")
    lengths = [T for T in (1024, 2048, 4096, 8192, 16384) if T <= gpu_max]
    timing = sum(61 * (_attention_call_s("sdpa", T) / 2 + _attention_call_s("sdpa", T) / 2 * 1.2 + _attention_call_s("naive", T))
                 for T in lengths)
    return [Work("Triton compilations (12, about 1.5 s each: not measured)", 1, fixed=18.0),
            Work("correctness in float32 and bf16, causal and not", 12, host=40, syncs=6),
            Work(f"speed against SDPA's flash kernel and naive attention, T = {lengths[0]}..{lengths[-1]}", 1, host=400, syncs=60,
                 device_s=timing)]


# --------------------------------------------------------------------------- the report

# A re-size to estimate beside today's values (run.pick names -> values, as --what-if takes them), shown as the
# table's last column; empty when the notebooks hold the latest one. The re-size of 2026-12-07 (CHANGELOG.md) is in
# the notebooks: fewer steps, runs and layers at the full profile's widths and batches (a small model costs the same
# per step on a GPU at any batch), and the standard profile's sizes in lessons 03, 09, 10, 13, 14 and 15, whose
# targets are met on every seed.
PROPOSAL: dict[str, dict] = {}

# The per-lesson caps (seconds on one H100, start-up included), 900 s in all: each lesson's estimate after the
# re-size of 2026-12-07 (bench/full_estimate.py, that day), rounded. A lesson that outgrows its cap on the card is the one to
# cut again.
CAPS = {"00": 8, "01": 12, "02": 84, "03": 33, "04": 98, "05": 20, "06": 44, "07": 67, "08": 124, "09": 39, "10": 81,
        "11": 81, "12": 42, "13": 50, "14": 32, "15": 55, "16": 30}

TITLES = {}


def lesson_works(lesson: str, profile: str = "full", overrides: dict | None = None, cuda: bool = True) -> tuple[Values, list[Work]]:
    """A lesson's experiments for ``profile``, probed with the optimizers a CUDA run builds (``cuda``) or the CPU's."""
    v = Values(lesson, profile, overrides)
    TITLES[lesson] = v.path.parent.name
    optimizers = cuda_like_optimizers() if cuda else contextlib.nullcontext()
    with optimizers, contextlib.redirect_stdout(open(os.devnull, "w")):
        works = globals()[f"lesson_{lesson}"](v)
    return v, works


def fmt_s(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.1f}"


def markdown(results: list[dict], scenarios: list[Scenario], ref: dict, checks: dict, proposal: list[dict] | None = None) -> str:
    total = {k: sum(r[k] for r in results) for k in ("low", "mid", "high")}
    extra = " after the proposed re-size: mid (range) |" if proposal else ""
    lines = ["| lesson | today's full profile: estimated s on one H100, mid (range) | share of the 900 s | dominant experiment "
             "(mid, seconds) | cap |" + extra, "| --- | --- | --- | --- | --- |" + (" --- |" if proposal else "")]
    after = {r["lesson"]: r for r in proposal or []}
    for r in results:
        cap = CAPS.get(r["lesson"])
        over = "" if cap is None or r["mid"] <= cap else f" (x{r['mid'] / cap:.1f} over)"
        row = (f"| `{TITLES.get(r['lesson'], r['lesson'])}` | **{fmt_s(r['mid'])}** ({fmt_s(r['low'])}-{fmt_s(r['high'])}) | "
               f"{100 * r['mid'] / BUDGET_S:.0f} % | {r['dominant']}: {fmt_s(r['dominant_s'])} | {cap} s{over} |")
        if proposal:
            a = after[r["lesson"]]
            changed = "" if r["lesson"] in PROPOSAL else " (unchanged)"
            row += f" {fmt_s(a['mid'])} ({fmt_s(a['low'])}-{fmt_s(a['high'])}){changed} |"
        lines.append(row)
    caps = sum(CAPS.get(r["lesson"], 0) for r in results)
    row = (f"| **all {len(results)}** | **{fmt_s(total['mid'])}** ({fmt_s(total['low'])}-{fmt_s(total['high'])}) | "
           f"**{100 * total['mid'] / BUDGET_S:.0f} %** | | {caps} s |")
    if proposal:
        pt = {k: sum(r[k] for r in proposal) for k in ("low", "mid", "high")}
        row += f" **{fmt_s(pt['mid'])}** ({fmt_s(pt['low'])}-{fmt_s(pt['high'])}) |"
    lines.append(row)
    lines += ["", "Constants (fast / mid / slow scenario): c_op " + " / ".join(f"{1e6 * s.c_op:.0f}" for s in scenarios)
              + " µs of host time per launched kernel (lesson 06 on the H200); s_host " + " / ".join(f"{s.s_host:g}" for s in scenarios)
              + "; t_sync " + " / ".join(f"{1e6 * s.t_sync:.0f}" for s in scenarios) + " µs; R at the references' widths: bf16 "
              + f"{ref['bf16'][0] / 1e12:.0f} TFLOP/s (d {ref['bf16'][1]}), TF32 {ref['fp32'][0] / 1e12:.0f} TFLOP/s "
              + f"(d {ref['fp32'][1]}), times (d / d_ref)^" + "/".join(f"{s.gamma:g}" for s in scenarios)
              + "; H100 / H200 device time " + " / ".join(f"{s.device_factor:g}" for s in scenarios) + "."]
    if checks:
        lines += ["", "Cross-checks of c_op:"]
        for name, b in checks.get("benchmarks", {}).items():
            lines.append(f"* {name} on the H200: {1e3 * b['step_s']:.1f} ms for {b['kernels']:.0f} kernels, so c_op <= "
                         f"{1e6 * b['c_op_max']:.0f} µs")
        if "08" in checks:
            lines.append(f"* lesson 08 did not finish in 300 s on the H200: with these experiment lists that needs c_op >= "
                         f"{1e6 * checks['08']:.0f} µs")
        for lesson, (est, bound) in checks.get("shared", {}).items():
            lines.append(f"* lesson {lesson}: estimated {fmt_s(est)} s alone (fast scenario), {fmt_s(bound)} s measured beside 11 other "
                         "lessons on the H100 (2026-11-25, that day's full values): "
                         + ("below, as it must be" if est < bound else "ABOVE"))
        if "04" in checks:
            lines.append(f"* lesson 04's ablation: estimated {1e3 * checks['04'][0]:.1f} ms per step alone, "
                         f"{1e3 * checks['04'][1]:.1f} ms measured beside 4 lessons and a benchmark on the H100")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lessons", nargs="*", default=list(LESSONS), help="lesson ids (default: all; 06 is always probed)")
    ap.add_argument("--detail", action="store_true", help="print every experiment of every lesson")
    ap.add_argument("--json", default=None, help="write every number to this file")
    ap.add_argument("--what-if", nargs=2, action="append", default=[], metavar=("LESSON", "NAME=VALUE"),
                    help="estimate a lesson with one run.pick value replaced (cfg.steps=2000, N_TRAIN=5000, d_gru=512 ...)")
    ap.add_argument("--check-standard", action="store_true",
                    help="also predict the standard profile on this CPU with the same experiment lists")
    ap.add_argument("--no-checks", action="store_true", help="skip the cross-checks of c_op (the benchmarks' kernels)")
    ap.add_argument("--no-proposal", dest="proposal", action="store_false",
                    help="leave out the estimate of the proposed re-size (PROPOSAL; by default a column of the table)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    overrides: dict[str, dict] = {}
    for lesson, assignment in args.what_if:
        key, _, value = assignment.partition("=")
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):              # an expression: "[1024 * 2 ** i for i in range(7)]"
            from course import train_lm
            parsed = eval(value, {"train_lm": train_lm, "range": range, "dict": dict})  # noqa: S307 - the command line's own
        overrides.setdefault(lesson, {})[key] = parsed
    ref = reference_rates()
    t0 = time.perf_counter()
    _, works06 = lesson_works("06")
    _, measured06 = lesson_works("06", "full", MEASURED_WITH["06"])
    scenarios = calibrate(measured06, ref)
    results, checks = [], {}
    for lesson in args.lessons:
        if lesson == "06" and "06" not in overrides:
            works = works06
        else:
            _, works = lesson_works(lesson, "full", overrides.get(lesson))
        r = estimate(lesson, works, scenarios, ref)
        r["works"] = [w.__dict__ for w in works]
        results.append(r)
        print(f"{lesson}: {fmt_s(r['mid'])} s ({fmt_s(r['low'])}-{fmt_s(r['high'])}); {r['dominant']}", file=sys.stderr)
        then = works if lesson not in MEASURED_WITH else None   # the work of the GPU run a cross-check compares with
        if lesson in ("08", *SHARED_UPPER) and lesson not in overrides and then is None:
            _, then = lesson_works(lesson, "full", MEASURED_WITH[lesson])
        if lesson == "08" and "08" not in overrides:
            checks["08"] = c_op_for("08", then, OBSERVED["08_h200_more_than_s"], scenarios[0], ref)
        if lesson in SHARED_UPPER and lesson not in overrides:
            checks.setdefault("shared", {})[lesson] = (estimate(lesson, then, scenarios, ref)["low"], SHARED_UPPER[lesson])
        if lesson == "04" and "04" not in overrides:
            abl = next(e for e in r["scenarios"]["mid"]["works"] if e["name"].startswith("ablation: "))
            checks["04"] = (max(abl["host_per_unit"], abl["device_per_unit"]), OBSERVED["04_ablation_shared_s"] / 32000)
    proposal = None
    if args.proposal and PROPOSAL:
        proposal = []
        for lesson in args.lessons:
            changes = {**PROPOSAL.get(lesson, {}), **overrides.get(lesson, {})}
            if changes:
                _, works = lesson_works(lesson, "full", changes)
                r = estimate(lesson, works, scenarios, ref)
                r["works"] = [w.__dict__ for w in works]
            else:
                r = next(x for x in results if x["lesson"] == lesson)
            proposal.append(r)
            print(f"{lesson} re-sized: {fmt_s(r['mid'])} s ({fmt_s(r['low'])}-{fmt_s(r['high'])})", file=sys.stderr)
    if not args.no_checks:
        checks["benchmarks"] = benchmark_bounds()
    print(markdown(results, scenarios, ref, checks, proposal))
    if args.detail:
        for r in results:
            mid = r["scenarios"]["mid"]
            print(f"\n#### {TITLES.get(r['lesson'], r['lesson'])}: {fmt_s(r['mid'])} s (start-up {mid['fixed']:.0f} s)\n")
            print("| experiment | units | kernels / unit | syncs / unit | GFLOP / unit | CPU ms / unit | host ms / unit | device ms / unit"
                  " | seconds (mid) |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            for w, e in zip(r["works"], mid["works"]):
                print(f"| {w['name']} | {w['units']:,.0f} | {w['host']:,.0f} | {w['syncs']:.1f} | {w['flops'] / 1e9:,.2f} | "
                      f"{1e3 * w['cpu']:.2f} | {1e3 * e['host_per_unit']:.2f} | {1e3 * e['device_per_unit']:.2f} | {e['seconds']:,.1f} |")
    if args.check_standard:
        print("\n" + check_standard(args.lessons))
    if args.json:
        Path(args.json).write_text(json.dumps({"scenarios": [s.__dict__ for s in scenarios], "reference_rates": ref,
                                               "results": results, "proposal": proposal, "checks": checks, "caps": CAPS},
                                              indent=1, default=str))
    print(f"\n(probed in {time.perf_counter() - t0:.0f} s on this CPU)", file=sys.stderr)
    return 0


# docs/benchmarks.md, standard profile on the 2-core development machine (seed 0; "busy" where the page says so)
STANDARD_MEASURED = {"00": "12 s", "01": "15 s", "02": "180 s", "03": "34 s (busy)", "04": "135 s (busy)", "05": "20 s",
                     "06": "39 s (busy)", "07": "55 s (busy)", "08": "927 s", "09": "180 s", "10": "340 s",
                     "11": "565-800 s (busy)", "13": "about 200 CPU-s", "14": "about 80 CPU-s", "15": "about 120 CPU-s"}


def check_standard(lessons) -> str:
    """The same experiment lists, read for the standard profile and probed with the CPU's own optimizers, timed on
    this CPU: each unit costs what its probe measured here (overhead + FLOPs / this CPU's rate), experiments
    without a probe their kernels x this CPU's time per operator; the total is set against docs/benchmarks.md.
    Lessons 12 and 16 are left out: their timing experiments are sized by the device, not by a count."""
    rows = ["| lesson | standard on this CPU: predicted | measured (docs/benchmarks.md) |", "| --- | --- | --- |"]
    for lesson in lessons:
        if lesson not in STANDARD_MEASURED:
            continue
        _, works = lesson_works(lesson, "standard", cuda=False)
        probed = [w for w in works if w.cpu_unit is not None and w.host]
        per_op = statistics.median([w.cpu_unit / w.host for w in probed]) if probed else 10e-6
        total = SMOKE_S[lesson]
        for w in works:
            if w.device_s:
                continue
            if w.cpu_unit is not None:            # the probe's unit made its batches too
                unit = w.cpu_unit
            else:
                unit = w.host * per_op + w.flops / 20e9 + w.cpu
            total += w.units * unit + w.fixed
        rows.append(f"| `{TITLES[lesson]}` | {fmt_s(total)} s | {STANDARD_MEASURED[lesson]} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())

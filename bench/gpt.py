"""Training throughput: lesson 09's GPT against transformers' GPT2LMHeadModel, side by side in one run.

The lesson's ``GPT`` is taken from the solution notebook itself (its graded cells are executed here), and
``transformers.GPT2LMHeadModel`` is built from a ``GPT2Config`` with the same configuration (layers, heads,
d_model, context, vocabulary, dropout 0, exact GELU, tied head, ``attn_implementation="sdpa"``), nothing
downloaded. Both start from the same weights (copied with ``course.oracles.gpt2``; the script checks that
their logits agree), train on the same random batches with the same AdamW, in the same dtype (float32 on
the CPU, bfloat16 autocast on CUDA), and are timed in alternating rounds so that a busy machine slows both
alike. It prints tokens/s for both and their ratio (ours / theirs); on CUDA also the model FLOP
utilisation, 6 N + 12 L D T FLOPs per token against the card's bf16 dense peak.

    python bench/gpt.py                       # CPU
    python bench/gpt.py --device cuda --json gpt_bench.json

Not a test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _common import configure, describe  # noqa: E402

from course.oracles.gpt2 import gpt2_config, gpt2_state_dict  # noqa: E402

NOTEBOOK = ROOT / "solutions" / "09_language_model" / "09_language_model.ipynb"
PRESETS = {   # d_model, n_heads, n_layers, block (T), batch (B), vocab (V)
    "cpu": dict(d_model=256, n_heads=4, n_layers=4, block=256, batch=8, vocab=256),
    "cuda": dict(d_model=768, n_heads=12, n_layers=12, block=1024, batch=16, vocab=50304),   # GPT-2 small
}
PEAK_BF16 = [  # (substring of the device name, dense bf16 FLOP/s)
    ("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("A100", 312e12), ("L40S", 362e12),
    ("A10", 125e12), ("L4", 121e12), ("4090", 165e12), ("V100", 125e12), ("T4", 65e12),
]


def lesson_gpt():
    """The ``GPT`` class of the solution notebook (its solution cells run in a fresh namespace)."""
    import nbformat

    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    ns = {"torch": torch, "nn": torch.nn, "F": F, "math": math}
    marker = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            exec(compile(marker.sub("", cell.source), f"<{cell.metadata['nbgrader']['grade_id']}>", "exec"), ns)
    return ns["GPT"]


def lm_loss(logits, idx):
    """The same loss for both models: every position predicts the next token."""
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V).float(), idx[:, 1:].reshape(-1))


def build(cfg, device):
    from transformers import GPT2LMHeadModel

    GPT = lesson_gpt()
    torch.manual_seed(0)
    ours = GPT(cfg["vocab"], cfg["block"], cfg["d_model"], cfg["n_heads"], cfg["n_layers"], dropout=0.0)
    hf_cfg = gpt2_config(cfg["vocab"], cfg["block"], cfg["d_model"], cfg["n_heads"], cfg["n_layers"],
                         attn_implementation="sdpa")
    theirs = GPT2LMHeadModel(hf_cfg)
    sd, _ = gpt2_state_dict(ours.state_dict(), "the lesson's GPT")
    theirs.load_state_dict(sd, strict=False)
    ours, theirs = ours.to(device), theirs.to(device)
    idx = torch.randint(0, cfg["vocab"], (2, min(64, cfg["block"])), device=device)
    with torch.no_grad():
        diff = (ours.eval()(idx)[0] - theirs.eval()(input_ids=idx, use_cache=False).logits).abs().max().item()
    return ours.train(), theirs.train(), diff


def step_fns(ours, theirs, device, compiled=None):
    """One training step per model; ``compiled`` (a copy of ours, same weights) runs under ``torch.compile``."""
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    models = {"ours": ours, "theirs": theirs, **({"compiled": compiled} if compiled is not None else {})}
    opts = {name: torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1,
                                    fused=device.type == "cuda") for name, m in models.items()}

    def make(name, forward):
        opt = opts[name]

        def step(idx):
            with amp:
                loss = lm_loss(forward(idx), idx)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss
        return step

    fns = {"ours": make("ours", lambda idx: ours(idx)[0]),
           "theirs": make("theirs", lambda idx: theirs(input_ids=idx, use_cache=False).logits)}
    if compiled is not None:
        forward = torch.compile(compiled)
        fns["compiled"] = make("compiled", lambda idx: forward(idx)[0])
    return fns


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", help="cpu, cuda or auto (cuda when present)")
    ap.add_argument("--json", metavar="OUT", help="write the numbers to this JSON file")
    ap.add_argument("--steps", type=int, default=None, help="timed steps per round (default: 5 CPU, 20 CUDA)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating timed rounds per model (median reported)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default: 2 CPU, 10 CUDA)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    for key in PRESETS["cpu"]:
        ap.add_argument(f"--{key.replace('_', '-')}", type=int, default=None, help=f"override the preset's {key}")
    ap.add_argument("--peak-tflops", type=float, default=None, help="bf16 dense peak of the GPU, if not recognised")
    ap.add_argument("--compile", action="store_true",
                    help="also time the lesson GPT under torch.compile (a copy with the same weights, in the same "
                         "alternating rounds; its compile time, the first warm-up steps, reported apart)")
    args = ap.parse_args(argv)

    device, cfg, steps, warmup = configure(ap, args, PRESETS)
    ours, theirs, diff = build(cfg, device)
    n_params = describe(device, cfg, ours, theirs, diff)
    compiled = None
    if args.compile:
        import copy
        compiled = copy.deepcopy(ours)
    steps_of = step_fns(ours, theirs, device, compiled)
    names = list(steps_of)
    gen = torch.Generator().manual_seed(0)
    batch = lambda: torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["block"]), generator=gen).to(device)
    warmup_s = {}
    for name in names:
        sync(device)
        t0 = time.perf_counter()
        for _ in range(warmup):
            steps_of[name](batch())
        sync(device)
        warmup_s[name] = time.perf_counter() - t0
    rates = {name: [] for name in names}
    tokens = steps * cfg["batch"] * cfg["block"]
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:   # each model leads in turn
            data = [batch() for _ in range(steps)]
            sync(device)
            t0 = time.perf_counter()
            for idx in data:
                steps_of[name](idx)
            sync(device)
            rates[name].append(tokens / (time.perf_counter() - t0))
    result = {"device": str(device), "config": cfg, "params": n_params, "steps_per_round": steps, "rounds": args.rounds,
              "max_logit_diff_at_init": diff, "torch": torch.__version__, "warmup_steps": warmup,
              "warmup_seconds": warmup_s}
    for name in rates:
        result[f"tokens_per_s_{name}"] = statistics.median(rates[name])
        result[f"rounds_tokens_per_s_{name}"] = rates[name]
    result["ratio"] = result["tokens_per_s_ours"] / result["tokens_per_s_theirs"]
    print(f"tokens/s: lesson GPT {result['tokens_per_s_ours']:,.0f}   transformers GPT2LMHeadModel (sdpa) "
          f"{result['tokens_per_s_theirs']:,.0f}   ratio {result['ratio']:.2f}x  (median of {args.rounds} rounds of {steps} steps)")
    if compiled is not None:
        result["compile_speedup"] = result["tokens_per_s_compiled"] / result["tokens_per_s_ours"]
        print(f"torch.compile: lesson GPT {result['tokens_per_s_compiled']:,.0f} tokens/s, "
              f"{result['compile_speedup']:.2f}x eager; its {warmup} warm-up steps (compilation) took "
              f"{warmup_s['compiled']:.1f} s vs {warmup_s['ours']:.1f} s eager")
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak = args.peak_tflops * 1e12 if args.peak_tflops else next((p for k, p in PEAK_BF16 if k in name), None)
        n_flop = n_params - cfg["block"] * cfg["d_model"]                 # position embeddings do no FLOPs
        flops_per_token = 6 * n_flop + 12 * cfg["n_layers"] * cfg["d_model"] * cfg["block"]
        result.update(gpu=name, flops_per_token=flops_per_token, peak_bf16_flops=peak)
        if peak:
            for who in names:
                result[f"mfu_{who}"] = flops_per_token * result[f"tokens_per_s_{who}"] / peak
            print(f"MFU (bf16 peak {peak / 1e12:.0f} TFLOP/s): lesson GPT {100 * result['mfu_ours']:.1f} %, "
                  f"transformers {100 * result['mfu_theirs']:.1f} %")
        else:
            print(f"unknown GPU {name!r}: pass --peak-tflops to get the MFU")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()

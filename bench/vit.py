"""Speed: lesson 11's ViT against transformers' ViTForImageClassification, side by side in one run.

The lesson's ``ViT`` is taken from the solution notebook itself (its graded cells are executed here), and
``transformers.ViTForImageClassification`` is built from a ``ViTConfig`` with the same configuration
(image and patch size, channels, d_model, layers, heads, d_ff, classes, exact GELU, LayerNorm eps, no
dropout), nothing downloaded, with its default fast attention (``attn_implementation="sdpa"``). Both start
from the same weights (copied with ``course.oracles.vit``; the script checks that their logits agree) and
are timed on the same random images, in the same dtype (float32 on the CPU, bfloat16 autocast on CUDA),
in alternating rounds so that a busy machine slows both alike:

* **train step**: forward, cross-entropy, backward, AdamW step (training mode);
* **inference**: forward under ``torch.inference_mode()`` (eval mode).

It prints images/s for both and the ratios ours / theirs (above 1: the lesson's ViT is faster).

    python bench/vit.py                       # CPU, a small ViT on 32x32 RGB images
    python bench/vit.py --device cuda --json vit_bench.json    # ViT-Base/16 at 224x224

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

from course.oracles.vit import to_hf_vit  # noqa: E402

NOTEBOOK = ROOT / "solutions" / "11_vit" / "11_vit.ipynb"
PRESETS = {
    "cpu": dict(image_size=32, patch_size=4, in_channels=3, n_classes=10, d_model=192, n_layers=6, n_heads=3,
                d_ff=768, batch=32),                                            # a ViT-Tiny on CIFAR-sized images
    "cuda": dict(image_size=224, patch_size=16, in_channels=3, n_classes=1000, d_model=768, n_layers=12, n_heads=12,
                 d_ff=3072, batch=128),                                         # ViT-Base/16
}
MODEL_KEYS = ("image_size", "patch_size", "in_channels", "n_classes", "d_model", "n_layers", "n_heads", "d_ff")


def lesson_vit():
    """The ``ViT`` class of the solution notebook (its solution cells run in a fresh namespace)."""
    import nbformat

    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    ns = {"torch": torch, "nn": torch.nn, "F": F, "math": math}
    marker = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n?", re.M)
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution"):
            exec(compile(marker.sub("", cell.source), f"<{cell.metadata['nbgrader']['grade_id']}>", "exec"), ns)
    return ns["ViT"]


def build(cfg: dict, device: torch.device):
    ViT = lesson_vit()
    model_cfg = {k: cfg[k] for k in MODEL_KEYS}
    torch.manual_seed(0)
    ours = ViT(**model_cfg, dropout=0.0)
    theirs = to_hf_vit(ours, classifier=True, attn_implementation="sdpa", **model_cfg)
    ours, theirs = ours.to(device).eval(), theirs.to(device).eval()
    x = torch.randn(4, cfg["in_channels"], cfg["image_size"], cfg["image_size"], device=device)
    with torch.no_grad():
        diff = (ours(x) - theirs(pixel_values=x).logits).abs().max().item()
    return ours, theirs, diff


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
    args = ap.parse_args(argv)

    device, cfg, steps, warmup = configure(ap, args, PRESETS)
    ours, theirs, diff = build(cfg, device)
    n_params = describe(device, cfg, ours, theirs, diff)

    amp = lambda: torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-4, fused=device.type == "cuda")
            for name, m in (("ours", ours), ("theirs", theirs))}
    forwards = {"ours": lambda x: ours(x), "theirs": lambda x: theirs(pixel_values=x).logits}
    models = {"ours": ours, "theirs": theirs}

    def train_step(name, x, y):
        models[name].train()
        with amp():
            loss = F.cross_entropy(forwards[name](x).float(), y)
        opts[name].zero_grad(set_to_none=True)
        loss.backward()
        opts[name].step()

    def infer_step(name, x, y):
        models[name].eval()
        with torch.inference_mode(), amp():
            forwards[name](x)

    gen = torch.Generator().manual_seed(0)
    B, C, S = cfg["batch"], cfg["in_channels"], cfg["image_size"]
    batch = lambda: (torch.randn(B, C, S, S, generator=gen).to(device),
                     torch.randint(0, cfg["n_classes"], (B,), generator=gen).to(device))
    result = {"device": str(device), "config": cfg, "params": n_params, "steps_per_round": steps, "rounds": args.rounds,
              "max_logit_diff_at_init": diff, "torch": torch.__version__, "threads": torch.get_num_threads(),
              "theirs": "transformers.ViTForImageClassification (sdpa)"}
    if device.type == "cuda":
        result["gpu"] = torch.cuda.get_device_name(device)
    for kind, step_fn in (("train", train_step), ("inference", infer_step)):
        for name in ("ours", "theirs"):
            for _ in range(warmup):
                step_fn(name, *batch())
        sync(device)
        rates = {"ours": [], "theirs": []}
        for r in range(args.rounds):
            for name in (("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")):
                data = [batch() for _ in range(steps)]
                sync(device)
                t0 = time.perf_counter()
                for x, y in data:
                    step_fn(name, x, y)
                sync(device)
                rates[name].append(steps * B / (time.perf_counter() - t0))
        for name in rates:
            result[f"{kind}_images_per_s_{name}"] = statistics.median(rates[name])
        result[f"{kind}_ratio"] = result[f"{kind}_images_per_s_ours"] / result[f"{kind}_images_per_s_theirs"]
        print(f"{kind:>9}: lesson ViT {result[f'{kind}_images_per_s_ours']:,.1f} images/s   transformers ViT "
              f"{result[f'{kind}_images_per_s_theirs']:,.1f} images/s   ratio {result[f'{kind}_ratio']:.2f}x  "
              f"(median of {args.rounds} rounds of {steps} steps, batch {B})")
    result["summary"] = {"train_ratio": result["train_ratio"], "inference_ratio": result["inference_ratio"],
                         "max_logit_diff_at_init": diff}
    result["goals"] = [{"name": f"{k} ratio (ours / transformers)", "value": result[f"{k}_ratio"], "target": ">= 1.0",
                        "met": result[f"{k}_ratio"] >= 1.0} for k in ("train", "inference")]
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()

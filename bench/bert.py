"""Time lesson 10's ``Bert`` against ``transformers.BertForPreTraining`` at the same configuration.

The lesson's classes are taken from the solution notebook's graded cells (``BertEmbeddings`` and
``Bert``: their source is executed here, nothing is copied by hand), and ``transformers``' model is
built from a ``BertConfig`` of the same sizes (no download) holding the same weights. Both run the
same batches with padding: a training step (MLM + NSP loss, backward, AdamW step) and inference (no
gradient), side by side in one run, each timed as the median of several repeats after a warm-up, the models taking turns (round-robin) so
that a busy machine slows them alike.
``transformers`` is timed with its default attention (``sdpa``) and with ``eager`` (the one that can
return attention maps); ratios above 1 mean the lesson's model is faster.

    python bench/bert.py                       # CPU, a small configuration
    python bench/bert.py --device cuda --json results/bench_bert.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import nbformat
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course import masks  # noqa: E402
from course.oracles import bert as bridge  # noqa: E402


def lesson_classes():
    """``BertEmbeddings`` and ``Bert`` from the solution notebook's graded cells."""
    nb = nbformat.read(str(ROOT / "solutions" / "10_bert" / "10_bert.ipynb"), as_version=4)
    ns = {"torch": torch, "nn": nn, "F": F, "masks": masks}
    for name in ("BertEmbeddings", "Bert"):
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == name)
        exec(compile(cell.source, f"<solution cell {name}>", "exec"), ns)
    return ns["BertEmbeddings"], ns["Bert"]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def median_time(fn, device, repeats, warmup):
    for _ in range(warmup):
        fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--json", default=None, help="write the results to this file")
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--d-model", type=int, default=None)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: skipping (run with --device cpu)")
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    gpu = device.type == "cuda"
    D = args.d_model or (512 if gpu else 128)
    L = args.layers or (8 if gpu else 2)
    T = args.seq or (128 if gpu else 64)
    B = args.batch or (64 if gpu else 32)
    repeats = args.repeats or (20 if gpu else 10)
    V, H, d_ff = args.vocab, args.heads, 4 * D

    _, Bert = lesson_classes()
    torch.manual_seed(0)
    ours = Bert(V, d_model=D, n_heads=H, d_ff=d_ff, n_layers=L, max_len=T).to(device)
    models = {"lesson Bert": ours}
    for attn in ("sdpa", "eager"):
        models[f"transformers ({attn})"] = bridge.to_hf_pretraining(ours.cpu().state_dict(), H, attn=attn).to(device)
    ours.to(device)

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (B, T), generator=g)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    real = torch.arange(T) < lengths[:, None]
    ids = ids.masked_fill(~real, 0)
    segments = ((torch.arange(T) >= (lengths[:, None] // 2)) & real).long()
    labels = torch.where(torch.rand(B, T, generator=g) < 0.15, ids, torch.full_like(ids, -100)).masked_fill(~real, -100)
    nsp_labels = torch.randint(0, 2, (B,), generator=g)
    ids, segments, real, labels, nsp_labels = (t.to(device) for t in (ids, segments, real, labels, nsp_labels))

    def run(name, model):
        if name == "lesson Bert":
            return model(ids, segments, masks.key_padding(real))
        out = model(input_ids=ids, token_type_ids=segments, attention_mask=real.long())
        return out.prediction_logits, out.seq_relationship_logits

    # Round-robin: every repeat times each model once, so a busy machine slows them all alike.
    steps = {}
    for name, model in models.items():
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def train_step(name=name, model=model, opt=opt):
            model.train()
            mlm, nsp = run(name, model)
            loss = F.cross_entropy(mlm.flatten(0, 1), labels.flatten()) + F.cross_entropy(nsp, nsp_labels)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        def infer(name=name, model=model):
            model.eval()
            with torch.no_grad():
                run(name, model)

        steps[name] = (train_step, infer)
    times = {name: ([], []) for name in models}
    for r in range(repeats + 2):                                        # the first two rounds warm up
        for name, (train_step, infer) in steps.items():
            for k, fn in enumerate((train_step, infer)):
                t = median_time(fn, device, 1, 0)
                if r >= 2:
                    times[name][k].append(t)
    results = {name: {"train_step_s": statistics.median(tr), "inference_s": statistics.median(inf)}
               for name, (tr, inf) in times.items()}

    base = results["lesson Bert"]
    rows = []
    for name, r in results.items():
        r["train_ratio"] = r["train_step_s"] / base["train_step_s"]       # > 1: the lesson's model is faster
        r["inference_ratio"] = r["inference_s"] / base["inference_s"]
        rows.append(f"{name:<22} {r['train_step_s'] * 1e3:>10.1f} {r['inference_s'] * 1e3:>10.1f} "
                    f"{r['train_ratio']:>8.2f}x {r['inference_ratio']:>8.2f}x")
    info = dict(device=str(device), torch=torch.__version__, threads=torch.get_num_threads(), vocab=V, d_model=D,
                n_heads=H, d_ff=d_ff, n_layers=L, seq=T, batch=B, repeats=repeats)
    if gpu:
        info["gpu"] = torch.cuda.get_device_name(device)
    print("config: " + ", ".join(f"{k}={v}" for k, v in info.items()))
    print(f"{'model':<22} {'train (ms)':>10} {'infer (ms)':>10} {'train x':>9} {'infer x':>9}   (x = their time / the lesson's)")
    print("\n".join(rows))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"config": info, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

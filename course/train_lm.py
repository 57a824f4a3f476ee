"""Lesson 09's language model on every GPU of a node: ``torchrun`` + DistributedDataParallel.

    torchrun --standalone --nproc-per-node=4 -m course.train_lm --profile full --out results/lm

trains a character-level GPT on the standard library's sources (lesson 09's corpus; ``full``: 6 layers,
384 wide, context 256, a model a GPU keeps busy, larger than the lesson's own) with :func:`course.train.fit` on every rank: NCCL
on CUDA, each rank on ``cuda:LOCAL_RANK``, gloo on the CPU. ``--batch`` is the GLOBAL batch (64
windows in ``full``): each step every rank takes its ``batch / (ranks x accumulate)``
windows per micro-step, so the same command on 1, 2 or 8 GPUs trains on the same data with the
same learning rate. Only rank 0 prints, writes ``metrics.jsonl`` and ``checkpoint.pt`` to
``--out``. A plain ``python -m course.train_lm`` is one process.

The model is ``transformers``' ``GPT2LMHeadModel`` built from a config (nothing downloaded), the
same layout as the lesson's ``GPT`` (the lesson's tests show the two compute the same logits); its
``labels=`` loss is the lesson's every-position loss. For models too big for one device, PyTorch's
FSDP2 (``torch.distributed.fsdp.fully_shard``) shards parameters, gradients and optimiser state
across the ranks instead of copying the model to each.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch

PROFILES = {
    # The smoke and standard sizes are lesson 09's (its cfg cell); full is a larger model for GPUs.
    "smoke": dict(d_model=32, n_heads=2, n_layers=1, block=32, batch=8, steps=12, lr=3e-3, warmup=3),
    "standard": dict(d_model=64, n_heads=4, n_layers=2, block=64, batch=32, steps=700, lr=6e-3, warmup=30),
    "full": dict(d_model=384, n_heads=6, n_layers=6, block=256, batch=64, steps=5000, lr=1e-3, warmup=200),
}


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m course.train_lm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", choices=sorted(PROFILES), default="standard",
                    help="smoke and standard: lesson 09's sizes; full: a larger model for GPUs (default: standard)")
    ap.add_argument("--steps", type=int, help="optimisation steps (default: the profile's)")
    ap.add_argument("--batch", type=int, help="GLOBAL batch, in windows, across all ranks (default: the profile's)")
    ap.add_argument("--accumulate", type=int, default=1, help="micro-batches per step on each rank (default 1)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default: the profile's)")
    ap.add_argument("--corpus", default="stdlib", help="'stdlib' or the path of a UTF-8 text file")
    ap.add_argument("--max-chars", type=int, help="keep only the first N characters of the corpus")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--amp", action=argparse.BooleanOptionalAction, default=True,
                    help="bf16 autocast where the GPU supports it (default on; no effect on the CPU)")
    ap.add_argument("--out", type=Path, help="folder for metrics.jsonl and checkpoint.pt (rank 0 writes)")
    args = ap.parse_args(argv)
    cfg = dict(PROFILES[args.profile])
    for key in ("steps", "batch", "lr"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    if cfg["steps"] < 1 or cfg["batch"] < 1 or args.accumulate < 1:
        ap.error("--steps, --batch and --accumulate must be at least 1")
    args.cfg = cfg
    return args


def train(corpus, cfg: dict, *, seed: int = 0, device="cpu", amp: bool = True, accumulate: int = 1,
          attn_implementation: str = "sdpa", desc: str = "GPT", log_every: int = 50):
    """Lesson 09's GPT trained on ``corpus``: ``(model, History)``.

    The model is ``transformers``' ``GPT2LMHeadModel`` built from :func:`course.oracles.gpt2.gpt2_config`
    with ``cfg``'s sizes (a row of :data:`PROFILES`: ``d_model, n_heads, n_layers, block, batch, steps,
    lr, warmup``), initialised from ``torch.manual_seed(seed)`` and trained with :func:`course.train.fit`
    on the windows of step ``s`` drawn from ``Generator().manual_seed(seed * 1_000_003 + s)``, every
    position predicting the next character. Under ``torchrun`` every rank calls it alike (see
    :func:`main`). Later lessons reuse it (lesson 14 scores the trained model's heads).
    """
    from transformers import GPT2LMHeadModel

    from course.oracles.gpt2 import gpt2_config
    from course.train import fit

    device = torch.device(device)
    torch.manual_seed(seed)                          # the same initial weights on every rank
    config = gpt2_config(corpus.vocab_size, cfg["block"], cfg["d_model"], cfg["n_heads"], cfg["n_layers"],
                         attn_implementation=attn_implementation)
    model = GPT2LMHeadModel(config).to(device)
    model.loss_type = "ForCausalLM"                  # the every-position loss (and no warning naming it)

    def make_batch(step):                            # the step's global batch, the same on every rank
        gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
        return corpus.batch("train", cfg["batch"], cfg["block"], gen)[0]

    def loss_fn(net, x):                             # every position predicts the next character
        return net(input_ids=x, labels=x).loss

    hist = fit(model, make_batch, loss_fn, steps=cfg["steps"], lr=cfg["lr"], warmup=cfg["warmup"],
               amp=amp, device=device, accumulate=accumulate, desc=desc, log_every=log_every)
    return model, hist


def main(argv=None) -> dict:
    from course import metrics
    from course.data.corpus import load_corpus
    from course.train import init_distributed, is_main, save_checkpoint

    args = parse_args(argv)
    cfg = args.cfg
    world = init_distributed()
    if cfg["batch"] % (world.world_size * args.accumulate):
        raise SystemExit(f"--batch {cfg['batch']} must be a multiple of ranks x accumulate "
                         f"= {world.world_size} x {args.accumulate}")
    device = torch.device(world.device)
    corpus = load_corpus(args.corpus, max_chars=args.max_chars)
    out = args.out
    if out is not None and is_main():
        out.mkdir(parents=True, exist_ok=True)
        os.environ["COURSE_METRICS"] = str(out / "metrics.jsonl")
    if is_main():
        print(f"{world.world_size} rank(s), {world.backend or 'one process'}, {device}; "
              f"{cfg['steps']} steps of {cfg['batch']} windows x {cfg['block']} characters", flush=True)
    start = time.perf_counter()
    model, hist = train(corpus, cfg, seed=args.seed, device=device, amp=args.amp, accumulate=args.accumulate)
    config = model.config
    if is_main():
        print(f"GPT {sum(p.numel() for p in model.parameters()):,} parameters", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    result = {"ranks": world.world_size, "steps": cfg["steps"], "final_train_loss": hist.final_loss,
              "tokens_per_s": cfg["steps"] * cfg["batch"] * cfg["block"] / seconds, "seconds": seconds}
    if is_main():
        with torch.no_grad():
            model.eval()
            gen = torch.Generator().manual_seed(50_000)
            vals = [model(input_ids=(x := corpus.batch("val", 64, cfg["block"], gen)[0].to(device)), labels=x).loss.item()
                    for _ in range(4)]
        result["val_loss"] = sum(vals) / len(vals)
        metrics.record("val_loss", result["val_loss"], note="nats per character, validation split")
        metrics.record("tokens_per_s", result["tokens_per_s"], note=f"{world.world_size} rank(s), all ranks together")
        if out is not None:
            save_checkpoint(model, out / "checkpoint.pt", config=config.to_dict(), vocab=corpus.vocab)
            (out / "result.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
        print(json.dumps({k: (round(v, 4) if isinstance(v, float) and math.isfinite(v) else v)
                          for k, v in result.items()}), flush=True)
    if world.world_size > 1:
        torch.distributed.destroy_process_group()
    return result


if __name__ == "__main__":
    main()

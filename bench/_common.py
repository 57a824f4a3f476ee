"""What the benchmarks against `transformers` share: the device, the preset and the machine line."""

from __future__ import annotations

import argparse
import platform

import torch


def configure(ap: argparse.ArgumentParser, args, presets: dict) -> tuple[torch.device, dict, int, int]:
    """The device asked for (a clear error when CUDA is asked for and missing), CPU threads, TF32 on
    CUDA, the preset for that device with the command line's overrides, and the timed/untimed steps."""
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda was asked for, but PyTorch sees no CUDA GPU")
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = dict(presets["cuda" if device.type == "cuda" else "cpu"])
    for key in cfg:
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    steps = args.steps or (20 if device.type == "cuda" else 5)
    warmup = args.warmup if args.warmup is not None else (10 if device.type == "cuda" else 2)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    return device, cfg, steps, warmup


def describe(device: torch.device, cfg: dict, ours, theirs, diff: float) -> int:
    """Print the machine, the configuration, both parameter counts and how far the two models differ;
    return the lesson model's parameter count."""
    n_params = sum(p.numel() for p in ours.parameters())
    n_theirs = sum(p.numel() for p in theirs.parameters())
    print(f"device {device} ({torch.cuda.get_device_name(device) if device.type == 'cuda' else platform.processor() or 'cpu'}), "
          f"torch {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"config {cfg}; parameters: ours {n_params:,}, transformers {n_theirs:,}; "
          f"max |logits ours - theirs| at init = {diff:.2e}")
    return n_params

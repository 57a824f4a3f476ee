"""Tools for lesson 13's length experiment: train a language model on short windows, read it on long ones.

Lesson 13 trains one GPT per position scheme (learned, sinusoidal, RoPE, ALiBi, none) on lesson 09's corpus with
windows of 128 characters, then measures the loss at every position of longer windows. The model itself is
written in the notebook (it is lesson 09's GPT with the position scheme swapped, and lesson 09's GPT is a graded
answer); this module holds what the experiment does *with* any such model:

``train_windows``       lesson 09's recipe (AdamW, warm-up, cosine decay, clipping) on random training windows,
                        the same windows in the same order for every model trained with generators seeded alike;
``loss_per_position``   the mean next-token loss at each position of a batch of held-out windows.

A model is anything that maps token ids ``(B, T)`` (and optional keyword arguments, such as ``positions=``) to
logits ``(B, T, V)``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["train_windows", "loss_per_position"]


def train_windows(model: nn.Module, corpus, *, steps: int, batch_size: int, block_size: int, lr: float, warmup: int,
                  generator: torch.Generator, device=None, amp: bool = False, desc: str = "training") -> list[float]:
    """Lesson 09's recipe: AdamW, a linear warm-up, a cosine decay to lr / 10, gradient clipping at 1.

    Each step draws ``batch_size`` random training windows of ``block_size`` tokens from ``corpus``
    (:class:`~course.data.corpus.CharCorpus`) with ``generator``: two models trained with generators seeded
    alike see the same windows in the same order. ``amp``: bf16 autocast on a GPU that supports it.
    Returns the training loss of every step.
    """
    from course.train import autocast, progress

    device = device or next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.99), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(       # linear warm-up, then cosine decay to lr / 10
        opt, lambda s: min(1.0, (s + 1) / max(1, warmup)) * (0.1 + 0.45 * (1 + math.cos(math.pi * min(s, steps) / steps))))
    model.train()
    losses = []
    for _ in progress(range(steps), desc=desc):
        x, y = corpus.batch("train", batch_size, block_size, generator, device=device)
        with autocast(device, enabled=amp):
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.detach())
    model.eval()
    return [float(v) for v in torch.stack(losses).cpu()] if losses else []


@torch.no_grad()
def loss_per_position(model: nn.Module, windows: torch.Tensor, *, batch_size: int = 16, **kwargs) -> torch.Tensor:
    """The mean next-token cross-entropy at every position of ``windows`` (N, T + 1): (T,), in nats.

    Position t scores the prediction of ``windows[:, t + 1]`` from ``windows[:, :t + 1]``; ``kwargs`` go to
    the model's forward (``positions=...``).
    """
    model.eval()
    total = None
    for start in range(0, len(windows), batch_size):
        chunk = windows[start:start + batch_size]
        x, y = chunk[:, :-1], chunk[:, 1:]
        logits = model(x, **kwargs)
        nll = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none").sum(0)   # (T,)
        total = nll if total is None else total + nll
    return (total / len(windows)).cpu()

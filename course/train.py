"""A small, readable training loop shared by the lessons' experiments.

Experiments call :func:`fit` with a function that makes a batch and a function that computes the
loss; graded test cells never train. The progress bar is hidden while nbgrader executes a notebook.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from course.config import grading

__all__ = ["History", "fit", "progress"]


def progress(iterable=None, *, total=None, desc: str = "", disable: bool | None = None):
    """``tqdm.auto`` progress bar, silent under nbgrader (stderr would fail a test cell)."""
    from tqdm.auto import tqdm

    if disable is None:
        disable = grading()
    return tqdm(iterable, total=total, desc=desc, disable=disable, leave=False)


@dataclass
class History:
    """Losses (one per step) and wall time of a :func:`fit` call."""

    losses: list[float] = field(default_factory=list)
    seconds: float = 0.0
    grad_norms: list[float] = field(default_factory=list)

    @property
    def final_loss(self) -> float:
        """Mean of the last 10 % of the losses (less noisy than the very last one)."""
        if not self.losses:
            return math.nan
        tail = self.losses[-max(1, len(self.losses) // 10):]
        return sum(tail) / len(tail)


def fit(
    model: torch.nn.Module,
    make_batch: Callable[[int], object],
    loss_fn: Callable[[torch.nn.Module, object], torch.Tensor],
    *,
    steps: int,
    lr: float = 1e-3,
    weight_decay: float = 0.0,
    clip: float | None = 1.0,
    warmup: int = 0,
    desc: str = "training",
    optimizer: torch.optim.Optimizer | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> History:
    """Train ``model`` for ``steps`` Adam(W) steps.

    Args:
        model: the module to train (already on its device).
        make_batch: ``make_batch(step)`` returns whatever ``loss_fn`` takes.
        loss_fn: ``loss_fn(model, batch)`` returns a scalar loss.
        steps: number of optimisation steps.
        lr: peak learning rate (linear warm-up over ``warmup`` steps, then constant).
        clip: gradient-norm clipping threshold (None for no clipping).
        optimizer: use this optimiser instead of a fresh AdamW.
        on_step: called as ``on_step(step, loss)`` after each step.

    Returns:
        A :class:`History` of per-step losses, gradient norms and the wall time.
    """
    opt = optimizer or torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
    hist = History()
    model.train()
    start = time.perf_counter()
    bar = progress(range(steps), desc=desc)
    for step in bar:
        loss = loss_fn(model, make_batch(step))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf")) if params else torch.tensor(0.0)
        opt.step()
        sched.step()
        value = loss.item()
        hist.losses.append(value)
        hist.grad_norms.append(float(norm))
        if on_step is not None:
            on_step(step, value)
        if step % 20 == 0 and hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{value:.3f}")
    hist.seconds = time.perf_counter() - start
    model.eval()
    return hist

"""A small, readable training loop shared by the lessons' experiments.

Experiments call :func:`fit` with a function that makes a batch and a function that computes the
loss; graded test cells never train. The progress bar is hidden while nbgrader executes a notebook.

On a GPU the loop keeps the GPU busy: the Python thread queues a step's kernels and moves on to the
next step without waiting for the loss to come back, because losses and gradient norms are kept
in tensors on the device and read back once every ``log_every`` steps (a ``loss.item()`` per step
would stall the GPU on every step). ``amp=True`` runs the forward pass and the loss in bf16
autocast where the GPU supports it, and batches made on the CPU reach the GPU through pinned
memory without blocking (:func:`to_device`). On the CPU none of this changes a number.

Several GPUs (or several CPU processes): started under ``torchrun --nproc-per-node=N``, a script
calls :func:`init_distributed` once (NCCL on CUDA with ``cuda:LOCAL_RANK``, gloo on the CPU), and
:func:`fit` then wraps the model in ``DistributedDataParallel``. Every rank builds the same global
batch with ``make_batch(step)`` and keeps its own rows of it (:func:`shard`), split again into
``accumulate`` micro-batches; gradients are averaged across ranks only on the last micro-step
(``no_sync()`` on the others), so a step sees exactly the gradient of the whole global batch, as
one process would. Only rank 0 shows progress, writes metrics (:mod:`course.metrics`) and
checkpoints (:func:`save_checkpoint`). Without :func:`init_distributed` nothing changes: one
process is the default everywhere, notebooks and grading included.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from course.config import grading

__all__ = ["History", "fit", "progress", "to_device", "autocast", "Distributed", "init_distributed",
           "distributed", "is_main", "shard", "save_checkpoint", "unwrap"]


def progress(iterable=None, *, total=None, desc: str = "", disable: bool | None = None):
    """``tqdm.auto`` progress bar, silent under nbgrader (stderr would fail a test cell)."""
    from tqdm.auto import tqdm

    if disable is None:
        disable = grading()
    return tqdm(iterable, total=total, desc=desc, disable=disable, leave=False)


def to_device(batch, device):
    """Move a tensor, or a tuple / list / dict of tensors (nested), to ``device``.

    To a CUDA device, CPU tensors are copied from pinned (page-locked) memory with
    ``non_blocking=True``: the copy overlaps with the GPU's work instead of stopping the Python
    thread. Tensors already on ``device`` and anything that is not a tensor come back unchanged.
    """
    device = torch.device(device)
    if isinstance(batch, torch.Tensor):
        if batch.device == device or (device.index is None and batch.device.type == device.type):
            return batch
        if device.type == "cuda" and batch.device.type == "cpu":
            return batch.pin_memory().to(device, non_blocking=True)
        return batch.to(device)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [to_device(v, device) for v in batch]
        if hasattr(batch, "_fields"):                       # a namedtuple keeps its type
            return type(batch)(*moved)
        return type(batch)(moved)
    return batch


def amp_supported(device) -> bool:
    """True on a CUDA device with native bf16 (compute capability 8.0+: A100, L4, H100, RTX 30xx/40xx...)."""
    device = torch.device(device)
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8


def autocast(device, enabled: bool = True):
    """bf16 ``torch.autocast`` on a CUDA device that supports it, a do-nothing context elsewhere."""
    if enabled and amp_supported(device):
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass(frozen=True)
class Distributed:
    """Where this process sits in a ``torchrun`` job: its rank, the world size and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"
    backend: str | None = None


def distributed() -> Distributed:
    """This process's place: a one-process world unless :func:`init_distributed` joined a group."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return Distributed()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    backend = dist.get_backend()
    device = f"cuda:{local}" if backend == "nccl" else "cpu"
    return Distributed(dist.get_rank(), dist.get_world_size(), local, device, backend)


def init_distributed(backend: str | None = None) -> Distributed:
    """Join the process group ``torchrun`` describes (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``MASTER_ADDR``/``MASTER_PORT`` in the environment); a no-op returning a one-process world when
    ``WORLD_SIZE`` is unset (a plain ``python`` run).

    The backend is NCCL when CUDA is available (each rank then uses ``cuda:LOCAL_RANK``), gloo
    otherwise. Call :func:`torch.distributed.destroy_process_group` at the end of the script.
    """
    import torch.distributed as dist

    if "WORLD_SIZE" not in os.environ:
        return Distributed(device="cuda:0" if torch.cuda.is_available() else "cpu")
    if not dist.is_initialized():
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend)
    return distributed()


def is_main() -> bool:
    """True on rank 0, and in a plain one-process run: the process that writes files and logs."""
    return distributed().rank == 0


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The model inside a ``DistributedDataParallel`` wrapper (the model itself otherwise)."""
    return getattr(model, "module", model)


def save_checkpoint(model: torch.nn.Module, path, **extra) -> bool:
    """``torch.save`` the (unwrapped) model's ``state_dict`` and ``extra`` to ``path``, on rank 0
    only; returns True where this process wrote it."""
    if not is_main():
        return False
    torch.save({"model": unwrap(model).state_dict(), **extra}, path)
    return True


def shard(batch, index: int, count: int):
    """Rows ``index * n / count .. (index + 1) * n / count`` of every tensor in ``batch`` (nested
    tuples, lists and dicts as :func:`to_device`), cut along the first axis. The batch size must be
    a multiple of ``count``: equal shards make the mean of the shards' mean losses the mean loss of
    the whole batch, so the averaged gradient is the full batch's."""
    if isinstance(batch, torch.Tensor):
        n = batch.shape[0]
        if n % count:
            raise ValueError(f"a batch of {n} rows cannot be cut into {count} equal shards "
                             "(ranks x accumulate must divide the batch size)")
        size = n // count
        return batch[index * size:(index + 1) * size]
    if isinstance(batch, dict):
        return {k: shard(v, index, count) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        cut = [shard(v, index, count) for v in batch]
        if hasattr(batch, "_fields"):
            return type(batch)(*cut)
        return type(batch)(cut)
    return batch


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


def _adamw(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW; on a GPU its fused kernel (one launch for all parameters instead of several per tensor)."""
    params = [p for p in model.parameters() if p.requires_grad]
    fused = bool(params) and all(p.is_cuda and p.is_floating_point() for p in params)
    kwargs = {"fused": True} if fused else {}
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, **kwargs)


def _kept(dtype: torch.dtype) -> torch.dtype:
    """The dtype a History keeps a value in: its own when float32/float64 (exact), else float32."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


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
    amp: bool = False,
    device=None,
    log_every: int = 50,
    accumulate: int = 1,
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
        on_step: called as ``on_step(step, loss)`` after each step, ``loss`` a float. Reading it
            waits for the GPU, so on a GPU a callback costs a synchronisation per step.
        amp: run ``loss_fn`` under bf16 autocast where the model's GPU supports it (``run.amp``);
            ignored on the CPU. Parameters, gradients and the optimiser stay in float32.
        device: if given, each batch is moved there with :func:`to_device` (pinned, non-blocking);
            leave it None when ``make_batch`` already returns tensors on the model's device.
        log_every: steps between two read-backs of the loss for the progress bar.
        accumulate: micro-batches per step (gradient accumulation): ``make_batch(step)`` returns
            the step's whole batch, cut into ``accumulate`` equal pieces (times the number of
            ranks under :func:`init_distributed`, each rank keeping its own), each piece's loss
            scaled by ``1 / accumulate``. The batch size must be a multiple of ranks x accumulate.
            Under DDP ``loss_fn`` receives the ``DistributedDataParallel`` wrapper (call it; reach
            the model's attributes through :func:`unwrap`).

    Returns:
        A :class:`History` of per-step losses (the mean over the whole global batch, on every
        rank), gradient norms and the wall time.
    """
    if accumulate < 1:
        raise ValueError(f"accumulate must be at least 1, got {accumulate}")
    world = distributed()
    net = model
    if world.world_size > 1:
        from torch.nn.parallel import DistributedDataParallel

        on_gpu = next(model.parameters()).device.type == "cuda"
        net = DistributedDataParallel(model, device_ids=[world.local_rank] if on_gpu else None)
    pieces = world.world_size * accumulate
    opt = optimizer or _adamw(model, lr, weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0)
    first = next(model.parameters(), None)
    model_device = first.device if first is not None else torch.device("cpu")
    hist = History()
    losses = norms = None            # filled on the loss's device: read back every log_every steps only
    model.train()
    start = time.perf_counter()
    bar = progress(range(steps), desc=desc, disable=True if world.rank else None)
    for step in bar:
        batch = make_batch(step)
        opt.zero_grad(set_to_none=True)
        loss = None
        for micro in range(accumulate):
            piece = shard(batch, world.rank * accumulate + micro, pieces) if pieces > 1 else batch
            if device is not None:
                piece = to_device(piece, device)
            last = micro == accumulate - 1
            # Gradients are averaged across ranks once per step, on the last micro-batch only.
            sync = contextlib.nullcontext() if last or net is model else net.no_sync()
            with sync:
                with autocast(model_device, enabled=amp):
                    part = loss_fn(net, piece)
                (part / accumulate).backward()
            part = part.detach() / accumulate
            loss = part if loss is None else loss + part
        params = [p for p in model.parameters() if p.grad is not None]
        norm = torch.nn.utils.clip_grad_norm_(params, clip if clip else float("inf")) if params else torch.tensor(0.0)
        opt.step()
        sched.step()
        if losses is None:
            losses = torch.empty(steps, dtype=_kept(loss.dtype), device=loss.device)
            norms = torch.empty(steps, dtype=_kept(norm.dtype), device=norm.device)
        losses[step] = loss.detach().reshape(())
        norms[step] = norm.detach().reshape(())
        if on_step is not None:
            on_step(step, losses[step].item())
        if (step % log_every == 0 or step == steps - 1) and not getattr(bar, "disable", True):
            bar.set_postfix(loss=f"{losses[step].item():.3f}")
    if losses is not None:
        if world.world_size > 1:                 # each rank saw its shard: the global batch's mean loss
            import torch.distributed as dist

            dist.all_reduce(losses)
            losses /= world.world_size
        hist.losses = losses.tolist()        # the one synchronisation of the run
        hist.grad_norms = norms.tolist()
    hist.seconds = time.perf_counter() - start
    model.eval()
    return hist

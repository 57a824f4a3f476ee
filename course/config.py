"""Profiles, devices and seeds: the first thing every notebook calls.

A notebook's ``parameters`` cell sets ``PROFILE``, ``DEVICE`` and ``SEED``; the next cell calls
``run = course.setup(PROFILE, DEVICE, SEED)`` and then sizes its experiments with
``run.pick(smoke=..., standard=..., full=...)``.

Profiles:
    smoke     seconds per lesson on a CPU; CI and autograding. Forced whenever nbgrader executes
              the notebook (``NBGRADER_EXECUTION`` is set), so that a submission left on
              ``PROFILE = "full"`` still grades in seconds.
    standard  meaningful results on a laptop CPU in a few minutes.
    full      the workshop run on a GPU.
    auto      ``full`` on CUDA, ``standard`` otherwise.
"""

from __future__ import annotations

import os
import random
import sys
import warnings
from dataclasses import dataclass, field

PROFILES = ("smoke", "standard", "full")


@dataclass(frozen=True)
class Run:
    """The resolved settings of one notebook run."""

    profile: str
    device: str
    seed: int
    grading: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    def pick(self, smoke, standard, full=None):
        """Return the value meant for this run's profile (``full`` defaults to ``standard``)."""
        return {"smoke": smoke, "standard": standard, "full": standard if full is None else full}[
            self.profile
        ]

    @property
    def torch_device(self):
        import torch

        return torch.device(self.device)

    @property
    def cuda(self) -> bool:
        """True when this run's device is a CUDA GPU."""
        return self.device.startswith("cuda")

    @property
    def amp(self) -> bool:
        """True where bf16 autocast is safe and pays: a CUDA GPU with native bf16 (compute capability 8.0+).

        Pass it on, ``fit(..., amp=run.amp)``, or wrap a forward pass in ``with run.autocast():``.
        Always False on the CPU, so CPU results never change.
        """
        if not self.cuda:
            return False
        import torch

        return torch.cuda.get_device_capability(self.torch_device)[0] >= 8

    def autocast(self, enabled: bool = True):
        """``torch.autocast`` to bf16 on a GPU where :attr:`amp` holds; a do-nothing context elsewhere."""
        import contextlib

        import torch

        if enabled and self.amp:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def put(self, batch):
        """Move a tensor, or a tuple/list/dict of them, to this run's device.

        On a GPU the copy comes from pinned memory and does not block the Python thread; on the CPU
        the tensors come back unchanged. See :func:`course.train.to_device`.
        """
        from course.train import to_device

        return to_device(batch, self.device)

    def sync(self) -> None:
        """Wait for the GPU's queued work (before reading a clock); nothing to wait for on the CPU."""
        if self.cuda:
            import torch

            torch.cuda.synchronize(self.torch_device)

    def generator(self, offset: int = 0):
        """A ``torch.Generator`` seeded from the run's seed (plus ``offset``), on the CPU."""
        import torch

        return torch.Generator().manual_seed(self.seed + offset)


def grading() -> bool:
    """True when nbgrader (autograde or validate) is executing this notebook."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


class DeviceError(RuntimeError):
    """The ``DEVICE`` asked for does not exist on this machine; the message says what to set instead."""


_FIX = ('Set DEVICE = "auto" (the GPU when there is one, the CPU otherwise) or DEVICE = "cpu" in the '
        "parameters cell (the first code cell), then run the notebook again.")


def no_cuda_reason() -> str:
    import torch

    if torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        return (f"this PyTorch ({torch.__version__}) is a CPU-only build; a GPU needs a CUDA build of "
                "PyTorch (see pytorch.org) and an NVIDIA driver")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from PyTorch"
    return "PyTorch has CUDA support but finds no GPU (is there one? does `nvidia-smi` list it?)"


def resolve_device(device: str = "auto") -> str:
    """Turn the notebook's ``DEVICE`` into a device that exists here.

    ``"auto"`` picks the first CUDA GPU when PyTorch sees one, else the CPU (never MPS: not every
    operation the lessons use runs there). ``"cpu"``, ``"cuda"``, ``"cuda:N"`` and ``"mps"`` are taken
    as asked, and a device this machine does not have is a :class:`DeviceError` that says what to set
    instead, raised before any tensor touches it (not a CUDA traceback from deep inside a cell).
    """
    import torch

    device = (device or "auto").strip().lower()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device == "gpu":
        device = "cuda"
    if device == "cuda" or device.startswith("cuda:"):
        index = device.partition(":")[2]
        if index and not index.isdigit():
            raise ValueError(f"DEVICE = {device!r} is not a device: write 'cuda' or 'cuda:N' with N a number.")
        if not torch.cuda.is_available():
            raise DeviceError(f"DEVICE = {device!r} was asked for, but this machine has no CUDA GPU visible to "
                              f"PyTorch: {no_cuda_reason()}. {_FIX}")
        count = torch.cuda.device_count()
        if index and int(index) >= count:
            raise DeviceError(f"DEVICE = {device!r} was asked for, but this machine has {count} CUDA GPU(s): "
                              f"cuda:0{f' to cuda:{count - 1}' if count > 1 else ''}. Set DEVICE = 'cuda' or 'auto'.")
        return device
    if device == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            why = ("this PyTorch was built without MPS" if mps is None or not mps.is_built()
                   else "MPS needs an Apple-silicon Mac with macOS 12.3 or later")
            raise DeviceError(f"DEVICE = 'mps' (Apple-silicon GPU) was asked for, but it is not available here: "
                              f"{why}. {_FIX}")
        return device
    raise ValueError(f"DEVICE must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps', not {device!r}.")


def resolve_profile(profile: str = "auto", device: str = "cpu") -> str:
    profile = (profile or "auto").lower()
    if grading():
        return "smoke"
    if profile == "auto":
        profile = os.environ.get("COURSE_PROFILE", "auto").lower()
    if profile == "auto":
        return "full" if device.startswith("cuda") else "standard"
    if profile not in PROFILES:
        raise ValueError(f"PROFILE must be one of auto, {', '.join(PROFILES)}; got {profile!r}.")
    return profile


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and PyTorch (CPU and CUDA) so a run repeats exactly."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _warnings_to_stdout() -> None:
    """Show warnings on stdout: nbgrader fails any test cell that writes to stderr."""

    def show(message, category, filename, lineno, file=None, line=None):
        print(f"{category.__name__}: {message}", file=sys.stdout)

    warnings.showwarning = show


def setup(profile: str = "auto", device: str = "auto", seed: int = 0, *, quiet: bool = False,
          cpu_threads: int | None = 1) -> Run:
    """Resolve the profile and device, seed everything, and print one line saying what was chosen.

    Args:
        profile: ``"auto"``, ``"smoke"``, ``"standard"`` or ``"full"``.
        device: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"``; one this machine lacks
            raises :class:`DeviceError`, whose message says what to set instead.
        seed: seeds Python, NumPy and PyTorch.
        quiet: do not print the summary line.
        cpu_threads: torch's intra-op threads on the CPU (1 by default; None leaves torch's choice).

    Returns:
        A :class:`Run` whose ``pick`` method sizes the lesson's experiments.
    """
    import torch

    try:
        dev = resolve_device(device)
    except (DeviceError, ValueError) as exc:
        raise type(exc)(str(exc)) from None       # the message says it all: no chained traceback
    prof = resolve_profile(profile, dev)
    notes = []
    if dev.startswith("cuda"):
        # Tensor cores for float32 matmuls (TF32, ~10 bits of mantissa) in the experiments' models;
        # graded test cells compare on the CPU, where nothing changes.
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        name = torch.cuda.get_device_name(torch.device(dev))
        bf16 = torch.cuda.get_device_capability(torch.device(dev))[0] >= 8
        notes.append(f"{name}; TF32 matmuls; bf16 autocast {'available (run.amp)' if bf16 else 'not native here'}")
    if grading():
        notes.append("nbgrader is running this notebook: smoke profile")
        _warnings_to_stdout()
        # A learner's stray write to stderr must not cost them a test cell.
        sys.stderr = sys.stdout
    if dev == "cpu" and cpu_threads:
        # The course's models are tiny (64- to 128-wide layers): one thread per operation is as fast
        # as several, and several kernels side by side (CI, grading, a busy laptop) no longer wait
        # on each other's threads, which made small operations 10-100x slower in our measurements.
        torch.set_num_threads(cpu_threads)
    seed_everything(seed)
    run = Run(profile=prof, device=dev, seed=seed, grading=grading(), notes=tuple(notes))
    if not quiet:
        extra = f" ({'; '.join(notes)})" if notes else ""
        print(f"profile={prof} device={dev} seed={seed} torch={torch.__version__}{extra}")
    return run

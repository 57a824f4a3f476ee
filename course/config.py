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

    def generator(self, offset: int = 0):
        """A ``torch.Generator`` seeded from the run's seed (plus ``offset``), on the CPU."""
        import torch

        return torch.Generator().manual_seed(self.seed + offset)


def grading() -> bool:
    """True when nbgrader (autograde or validate) is executing this notebook."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def resolve_device(device: str = "auto") -> str:
    import torch

    device = (device or "auto").lower()
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"DEVICE = {device!r} was asked for, but this machine has no CUDA GPU visible to "
            "PyTorch. Set DEVICE = 'auto' (or 'cpu') in the parameters cell."
        )
    if device not in ("cpu",) and not device.startswith("cuda") and device != "mps":
        raise ValueError(f"DEVICE must be 'auto', 'cpu' or 'cuda[:N]', not {device!r}.")
    return device


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
        device: ``"auto"``, ``"cpu"`` or ``"cuda"``.
        seed: seeds Python, NumPy and PyTorch.
        quiet: do not print the summary line.
        cpu_threads: torch's intra-op threads on the CPU (1 by default; None leaves torch's choice).

    Returns:
        A :class:`Run` whose ``pick`` method sizes the lesson's experiments.
    """
    import torch

    dev = resolve_device(device)
    prof = resolve_profile(profile, dev)
    notes = []
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

"""Each sandbox's share of the CPU, bounded by the grader itself.

A submission may start many busy threads. Whether its neighbours in a batch still get their share used to
depend on the kernel's autogroup scheduling (each session its own CPU group), which systemd services and
containers' cpu cgroups do not have. So the grader puts every sandbox in a control group of its own:

* **cgroup v2** (``/sys/fs/cgroup`` is cgroup2 with the ``cpu`` controller, and the grader may create
  groups there: root, or a delegated tree): ``cpu.max`` caps a sandbox at :data:`CPUS_PER_SANDBOX` CPUs,
  ``cpu.weight`` gives every sandbox the same weight;
* **cgroup v1** (a writable ``/sys/fs/cgroup/cpu``): the same with ``cpu.cfs_quota_us`` and ``cpu.shares``;
* otherwise: each sandbox runs at a lower priority than the grader (``nice`` :data:`NICE`), and its CPU
  time is capped by the CPU rlimit (:class:`course.grading.sandbox.Limits`), which bounds how long a hog
  lasts but not the share it takes meanwhile.

``course doctor`` and ``course grade`` say which one is in use (:func:`describe`).
"""

from __future__ import annotations

import threading
import time
import functools
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuShare", "share", "describe", "CPUS_PER_SANDBOX", "NICE"]

CPUS_PER_SANDBOX = 1.0        # a sandbox uses at most one CPU, whatever it starts
NICE = 10                     # without cgroups: sandboxes below the grader and its judges
PERIOD_US = 100_000
V2_ROOT = Path("/sys/fs/cgroup")
V1_CPU = Path("/sys/fs/cgroup/cpu")
# Each sandbox's group sits at the top of the hierarchy, beside every other process's, not under a common
# parent: a parent group would weigh all sandboxes together as one process, and on a busy machine a batch
# got a fifteenth of the CPU (measured: 4x slower at a load average of 15).
PREFIX = "course-sandbox-"


@dataclass(frozen=True)
class CpuShare:
    """How sandboxes are held to their share: ``kind`` is "cgroup2", "cgroup1" or "nice"; ``parent`` is
    the hierarchy's root, where each sandbox gets a group of its own (None for "nice")."""

    kind: str
    parent: Path | None = None

    def describe(self) -> str:
        cap = f"at most {CPUS_PER_SANDBOX:g} CPU each, equal weights"
        if self.kind == "cgroup2":
            return f"a cgroup v2 group per sandbox (in {self.parent}: cpu.max, {cap})"
        if self.kind == "cgroup1":
            return f"a cgroup v1 cpu group per sandbox (in {self.parent}: cpu.cfs_quota_us, {cap})"
        return (f"nice {NICE} and the CPU-time rlimit (no cgroup this grader may create: a sandbox's busy threads "
                "can slow its neighbours, though not past their time limits)")

    def new_group(self) -> Path | None:
        """A fresh group for one sandbox (None without cgroups). Its processes are capped and weighted
        as every other sandbox's."""
        if self.parent is None:
            return None
        group = self.parent / f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            group.mkdir()
            if self.kind == "cgroup2":
                (group / "cpu.max").write_text(f"{int(CPUS_PER_SANDBOX * PERIOD_US)} {PERIOD_US}\n")
                (group / "cpu.weight").write_text("100\n")
            else:
                (group / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
                (group / "cpu.cfs_quota_us").write_text(f"{int(CPUS_PER_SANDBOX * PERIOD_US)}\n")
                (group / "cpu.shares").write_text("1024\n")
        except OSError:
            remove_group(group)
            return None
        return group


def enter(group: Path | None) -> None:
    """In a sandbox's first process, before it execs (a ``preexec_fn``): join ``group``, or lower its
    priority when there is none. Never raises: a sandbox that could not join runs at a lower priority."""
    if group is not None:
        try:
            (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
            return
        except OSError:
            pass
    try:
        os.nice(NICE)
    except OSError:
        pass


def remove_group(group: Path | None) -> None:
    """Remove a sandbox's group once its processes are gone (an empty group only: never raises)."""
    if group is None:
        return
    try:
        group.rmdir()
    except OSError:
        pass


def remove_group_later(group: Path | None, limit: float = 10.0) -> None:
    """:func:`remove_group`, retried from a thread until the group's last process has gone (a sandbox's
    PID 1 dies a moment after the bubblewrap process the judge killed)."""
    if group is None:
        return
    remove_group(group)
    if not group.exists():
        return

    def retry():
        end = time.monotonic() + limit
        while group.exists() and time.monotonic() < end:
            time.sleep(0.1)
            remove_group(group)

    threading.Thread(target=retry, daemon=True, name="cpu-group-removal").start()


def _writable_parent(base: Path, controller_file: str) -> Path | None:
    """``base`` if this process may create a group there with ``controller_file`` in it, else None."""
    probe = base / f"{PREFIX}probe-{os.getpid()}"
    try:
        probe.mkdir()
        ok = (probe / controller_file).exists()
        probe.rmdir()
    except OSError:
        return None
    return base if ok else None


@functools.lru_cache(maxsize=1)
def share() -> CpuShare:
    """What this machine lets the grader use, tried once per process."""
    try:
        v2 = (V2_ROOT / "cgroup.controllers").read_text().split()
    except OSError:
        v2 = []
    if "cpu" in v2:
        try:                                  # the cpu controller for the groups under the root
            subtree = (V2_ROOT / "cgroup.subtree_control").read_text().split()
            if "cpu" not in subtree:
                (V2_ROOT / "cgroup.subtree_control").write_text("+cpu\n")
        except OSError:
            pass
        parent = _writable_parent(V2_ROOT, "cpu.max")
        if parent is not None:
            _remove_stale(parent)
            return CpuShare("cgroup2", parent)
    if (V1_CPU / "cpu.cfs_quota_us").exists():
        parent = _writable_parent(V1_CPU, "cpu.cfs_quota_us")
        if parent is not None:
            _remove_stale(parent)
            return CpuShare("cgroup1", parent)
    return CpuShare("nice")


def _remove_stale(parent: Path) -> None:
    """Groups of sandboxes whose grader is gone (killed before it removed them): empty, removed."""
    for group in parent.glob(f"{PREFIX}*"):
        try:
            pid = int(group.name[len(PREFIX):].split("-")[0])
            os.kill(pid, 0)
        except (ValueError, IndexError, ProcessLookupError):
            remove_group(group)
        except PermissionError:
            pass


def describe() -> str:
    return share().describe()

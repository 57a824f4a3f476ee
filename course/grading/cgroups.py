"""Each sandbox's share of the CPU and of memory, bounded by the grader itself.

A submission may start many busy threads, or many processes that each stay under the address-space rlimit
(:class:`course.grading.sandbox.Limits`) and together hold gigabytes. Whether its neighbours in a batch
still get their share used to depend on the machine (the kernel's autogroup scheduling, which systemd
services and containers do not have; no bound at all on the sum of a sandbox's processes). So the grader
puts every sandbox in a control group of its own:

* **cgroup v2** (``/sys/fs/cgroup`` is cgroup2, and the grader may create groups there: root, or a
  delegated tree): ``cpu.max`` caps a sandbox at :data:`CPUS_PER_SANDBOX` CPUs, ``cpu.weight`` gives every
  sandbox the same weight, ``memory.max`` caps all its processes and its scratch folders together (with
  no swap: ``memory.swap.max``), each where its controller is enabled;
* **cgroup v1** (writable ``/sys/fs/cgroup/cpu`` and ``/sys/fs/cgroup/memory``): the same with
  ``cpu.cfs_quota_us``, ``cpu.shares`` and ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``);
* otherwise: each sandbox runs at a lower priority than the grader (``nice`` :data:`NICE`), its CPU time is
  capped by the CPU rlimit and each of its processes by the address-space rlimit, which bound how long a
  hog lasts and what one process holds, not the share it takes meanwhile nor the sum of its processes.

The memory cap (:func:`sandbox_bytes`) is the address-space limit of one process plus the scratch folders
(tmpfs pages are charged to the group that writes them): a sandbox over it has a process killed by the
kernel, which the judge reports as "out of memory". ``course doctor`` and ``course grade`` say what is in
use (:func:`describe`).
"""

from __future__ import annotations

import functools
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Share", "Group", "share", "describe", "enter", "remove_group", "remove_group_later", "sandbox_bytes",
           "CPUS_PER_SANDBOX", "NICE"]

CPUS_PER_SANDBOX = 1.0        # a sandbox uses at most one CPU, whatever it starts
NICE = 10                     # without cgroups: sandboxes below the grader and its judges
PERIOD_US = 100_000
V2_ROOT = Path("/sys/fs/cgroup")
V1_CPU = Path("/sys/fs/cgroup/cpu")
V1_MEMORY = Path("/sys/fs/cgroup/memory")
# Each sandbox's group sits at the top of the hierarchy, beside every other process's, not under a common
# parent: a parent group would weigh all sandboxes together as one process, and on a busy machine a batch
# got a fifteenth of the CPU (measured: 4x slower at a load average of 15).
PREFIX = "course-sandbox-"


def sandbox_bytes(memory_mb: int, scratch_mb: int) -> int:
    """What one sandbox may hold in all: one process's address-space limit, plus its scratch folders (two
    tmpfs of ``scratch_mb`` and a home of a quarter of that, :func:`course.grading.sandbox.worker_command`)."""
    return (int(memory_mb) + 2 * int(scratch_mb) + max(16, int(scratch_mb) // 4)) * 2**20


@dataclass(frozen=True)
class Group:
    """One sandbox's groups: one path per hierarchy (cgroup v2: one; v1: cpu and memory)."""

    paths: tuple[Path, ...]


@dataclass(frozen=True)
class Share:
    """How sandboxes are held to their share: ``kind`` is "cgroup2", "cgroup1" or "nice"; ``cpu`` and
    ``memory`` are the roots where each sandbox gets a group of its own for that controller (None where
    the grader may not create one; the same root for both under cgroup v2)."""

    kind: str
    cpu: Path | None = None
    memory: Path | None = None

    def describe(self) -> str:
        cap = f"at most {CPUS_PER_SANDBOX:g} CPU each, equal weights"
        what = []
        if self.cpu is not None:
            what.append(f"cpu.max, {cap}" if self.kind == "cgroup2" else f"cpu.cfs_quota_us, {cap}")
        if self.memory is not None:
            what.append("memory.max: its processes and scratch folders together" if self.kind == "cgroup2"
                        else "memory.limit_in_bytes: its processes and scratch folders together")
        if not what:
            return (f"nice {NICE} and the CPU-time and address-space rlimits (no cgroup this grader may create: a "
                    "sandbox's busy threads can slow its neighbours, though not past their time limits, and its "
                    "processes together may hold more than one's limit)")
        missing = [] if self.cpu is not None else [f"CPU: nice {NICE}"]
        missing += [] if self.memory is not None else ["memory: the address-space rlimit per process"]
        roots = sorted({str(p) for p in (self.cpu, self.memory) if p is not None})
        return (f"a {'cgroup v2' if self.kind == 'cgroup2' else 'cgroup v1'} group per sandbox (in {', '.join(roots)}: "
                f"{'; '.join(what)})" + (f"; {', '.join(missing)}" if missing else ""))

    def new_group(self, memory_bytes: int | None = None) -> Group | None:
        """Fresh groups for one sandbox (None without cgroups): its processes are capped and weighted as
        every other sandbox's, and together may hold ``memory_bytes``."""
        name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}"
        made: list[Path] = []
        try:
            if self.cpu is not None:
                group = self.cpu / name
                group.mkdir()
                made.append(group)
                if self.kind == "cgroup2":
                    (group / "cpu.max").write_text(f"{int(CPUS_PER_SANDBOX * PERIOD_US)} {PERIOD_US}\n")
                    (group / "cpu.weight").write_text("100\n")
                else:
                    (group / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
                    (group / "cpu.cfs_quota_us").write_text(f"{int(CPUS_PER_SANDBOX * PERIOD_US)}\n")
                    (group / "cpu.shares").write_text("1024\n")
            if self.memory is not None and memory_bytes:
                group = self.memory / name
                if group not in made:
                    group.mkdir()
                    made.append(group)
                if self.kind == "cgroup2":
                    (group / "memory.max").write_text(f"{int(memory_bytes)}\n")
                    _try_write(group / "memory.swap.max", "0\n")
                else:
                    (group / "memory.limit_in_bytes").write_text(f"{int(memory_bytes)}\n")
                    _try_write(group / "memory.memsw.limit_in_bytes", f"{int(memory_bytes)}\n")
        except OSError:
            remove_group(Group(tuple(made)))
            return None
        return Group(tuple(made)) if made else None


def _try_write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError:
        pass                      # (no swap accounting on this kernel)


def enter(group: Group | None) -> None:
    """In a sandbox's first process, before it execs (a ``preexec_fn``): join ``group``, or lower its
    priority when it has no CPU group. Never raises: a sandbox that could not join runs at a lower priority."""
    joined_cpu = False
    for path in group.paths if group is not None else ():
        try:
            (path / "cgroup.procs").write_text(f"{os.getpid()}\n")
            joined_cpu = joined_cpu or (path / "cpu.shares").exists() or (path / "cpu.max").exists()
        except OSError:
            pass
    if joined_cpu:
        return
    try:
        os.nice(NICE)
    except OSError:
        pass


def remove_group(group: Group | None) -> bool:
    """Remove a sandbox's groups once its processes are gone (empty groups only: never raises). True when
    none is left."""
    left = False
    for path in group.paths if group is not None else ():
        try:
            path.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            left = True
    return not left


def remove_group_later(group: Group | None, limit: float = 10.0) -> None:
    """:func:`remove_group`, retried from a thread until the group's last process has gone (a sandbox's
    PID 1 dies a moment after the bubblewrap process the judge killed)."""
    if group is None or remove_group(group):
        return

    def retry():
        end = time.monotonic() + limit
        while not remove_group(group) and time.monotonic() < end:
            time.sleep(0.1)

    threading.Thread(target=retry, daemon=True, name="cgroup-removal").start()


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


def _enable_v2(controller: str) -> None:
    """The controller for the groups under the v2 root (never raises)."""
    try:
        if controller not in (V2_ROOT / "cgroup.subtree_control").read_text().split():
            (V2_ROOT / "cgroup.subtree_control").write_text(f"+{controller}\n")
    except OSError:
        pass


@functools.lru_cache(maxsize=1)
def share() -> Share:
    """What this machine lets the grader use, tried once per process."""
    try:
        v2 = (V2_ROOT / "cgroup.controllers").read_text().split()
    except OSError:
        v2 = []
    if "cpu" in v2 or "memory" in v2:
        for controller in ("cpu", "memory"):
            if controller in v2:
                _enable_v2(controller)
        cpu = _writable_parent(V2_ROOT, "cpu.max") if "cpu" in v2 else None
        memory = _writable_parent(V2_ROOT, "memory.max") if "memory" in v2 else None
        if cpu is not None or memory is not None:
            _remove_stale(V2_ROOT)
            return Share("cgroup2", cpu, memory)
    cpu = _writable_parent(V1_CPU, "cpu.cfs_quota_us") if (V1_CPU / "cpu.cfs_quota_us").exists() else None
    memory = _writable_parent(V1_MEMORY, "memory.limit_in_bytes") if (V1_MEMORY / "memory.limit_in_bytes").exists() else None
    for root in {p for p in (cpu, memory) if p is not None}:
        _remove_stale(root)
    if cpu is not None or memory is not None:
        return Share("cgroup1", cpu, memory)
    return Share("nice")


def _remove_stale(parent: Path) -> None:
    """Groups of sandboxes whose grader is gone (killed before it removed them): empty, removed."""
    for group in parent.glob(f"{PREFIX}*"):
        try:
            pid = int(group.name[len(PREFIX):].split("-")[0])
            os.kill(pid, 0)
        except (ValueError, IndexError, ProcessLookupError):
            remove_group(Group((group,)))
        except PermissionError:
            pass


def describe() -> str:
    return share().describe()

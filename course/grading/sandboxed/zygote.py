"""PID 1 of a warm sandbox: forks a fresh worker per submission and, between two, kills every other process
of the sandbox and empties its scratch folders; nothing inside can signal it or read its memory."""

from __future__ import annotations

import importlib
import json
import select
import shutil
import signal
import socket
import stat
import os
import time

from course.grading.sandboxed.wire import ZygoteEvent, ZygoteOp
import ctypes

SCRATCH = ("/sandbox/work", "/sandbox/home", "/tmp")
INBOX = "/sandbox/inbox"            # the lesson's data files, bound read-only; copied into work/ per submission


def _sweep(limit: float = 10.0) -> bool:
    """Kill every other process of the sandbox and reap them all (called by the zygote, PID 1).
    True when none is left."""

    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            os.kill(-1, signal.SIGKILL)          # from PID 1: every process in the namespace but itself
        except ProcessLookupError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG) != (0, 0):
                pass
        except ChildProcessError:
            return True                          # no child left (orphans are ours too: we are PID 1)
        time.sleep(0.005)
    return False


def _empty(top: str, keep: frozenset, deadline: float, removed: list) -> bool:
    """Empty the folder ``top``; never raises, never recurses, never follows a link.

    A folder inside is not walked: its entries are moved up into ``top`` (renamed, by file
    descriptor), so a tree of any depth comes apart with two open descriptors and paths one name
    long. Other mounts (the read-only folders bound under /tmp) and the names in ``keep`` stay.
    True when ``top`` holds nothing else at the end."""

    try:
        tfd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    counter = 0
    try:
        dev = os.fstat(tfd).st_dev
        try:
            os.fchmod(tfd, 0o1777 if top == "/tmp" else 0o777)
        except OSError:
            pass
        while time.monotonic() < deadline:
            names = [n for n in os.listdir(tfd) if n not in keep]
            if not names:
                return True
            progress = False
            for name in names:
                if time.monotonic() > deadline:
                    return False
                try:
                    st = os.stat(name, dir_fd=tfd, follow_symlinks=False)
                    if st.st_dev != dev:             # a mount point: not ours to remove
                        continue
                    if not stat.S_ISDIR(st.st_mode):
                        os.unlink(name, dir_fd=tfd)
                        removed[0] += 1
                        progress = True
                        continue
                    os.chmod(name, 0o700, dir_fd=tfd)
                    dfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=tfd)
                    try:
                        for sub in os.listdir(dfd):
                            counter += 1
                            os.rename(sub, f".wipe-{os.getpid()}-{counter}", src_dir_fd=dfd, dst_dir_fd=tfd)
                    finally:
                        os.close(dfd)
                    os.rmdir(name, dir_fd=tfd)
                    removed[0] += 1
                    progress = True
                except OSError:
                    continue
            if not progress:
                return False
        return False
    except BaseException:  # noqa: BLE001 - a clean-up that fails says so; the judge then restarts the sandbox
        return False
    finally:
        os.close(tfd)


def _wipe(keep: dict[str, frozenset], limit: float = 20.0) -> tuple[bool, int]:
    """Empty the scratch folders (tmpfs mounts of this sandbox): (all empty?, entries removed)."""
    deadline = time.monotonic() + limit
    ok, removed = True, [0]
    for top in SCRATCH:
        if os.path.isdir(top):
            ok = _empty(top, keep.get(top, frozenset()), deadline, removed) and ok
    return ok, removed[0]


IPC_RMID = 0
SYSV = (("shm", "shmctl"), ("sem", "semctl"), ("msg", "msgctl"))


def _remove_ipc() -> tuple[bool, int]:
    """Remove every System V shared-memory segment, semaphore set and message queue of the sandbox's IPC
    namespace, which outlive the processes that made them: a warm sandbox would hand one submission's data
    (a test's hidden inputs) and memory to the next. Called once no process is left (a segment goes when
    its last process detaches). Returns (some left?, removed). POSIX message queues are kept from being made
    at all (RLIMIT_MSGQUEUE 0, :class:`course.grading.sandbox.Limits`)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return True, 0
    removed, left = 0, False
    for kind, call in SYSV:
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                ids = [int(line.split()[1]) for line in fh.read().splitlines()[1:] if line.split()]
        except (OSError, ValueError, IndexError):
            continue
        for ident in ids:
            args = (ident, 0, IPC_RMID) if kind == "sem" else (ident, IPC_RMID, None)
            if getattr(libc, call)(*args) == 0:
                removed += 1
            else:
                left = True
    return left, removed


def _copy_inbox(names) -> None:

    for name in names:
        if isinstance(name, str) and name and "/" not in name and name not in (".", ".."):
            try:
                shutil.copyfile(os.path.join(INBOX, name), os.path.join("/sandbox/work", name))
            except OSError:
                pass


def _ignore_signals() -> None:

    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            continue
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError, RuntimeError):
            pass


def _default_signals() -> None:

    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass


def processes() -> dict[int, tuple[int, str]]:
    """Every process of this sandbox's PID namespace but PID 1, read from /proc: pid -> (parent pid, state
    letter). "Z" only for a process none of whose threads runs any more: a process whose first thread
    exited (``SYS_exit``) shows "Z" in its own stat while its other threads go on; it counts as alive."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or name == "1":
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                rest = fh.read().rpartition(b")")[2].split()
            state = rest[0].decode("ascii", "replace")
            if state in ("Z", "X") and _live_threads(int(name)):
                state = "R"
            found[int(name)] = (int(rest[1]), state)
        except (OSError, IndexError, ValueError):
            continue                                 # gone meanwhile
    return found


def _live_threads(pid: int) -> bool:
    """Does any thread of ``pid`` still run (a state other than zombie or dead)?"""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                if fh.read().rpartition(b")")[2].split()[0] not in (b"Z", b"X"):
                    return True
        except (OSError, IndexError):
            continue
    return False


def runtime(pid: int) -> dict[str, int]:
    """Nanoseconds each of ``pid``'s threads has run (the kernel's own count, /proc/<pid>/task/*/schedstat): a
    stopped process does not run, so a thread whose reading grows, or a new thread, means something woke it."""
    counts = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return counts
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
                counts[tid] = int(fh.read().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return counts


def ran_since(before: dict[str, int], now: dict[str, int]) -> bool:
    """Some thread ran between two readings (a thread that ended since, as a zombie thread of a stopped
    process may, is not running)."""
    return any(n > before.get(tid, -1) for tid, n in now.items())


def settled_runtime(pid: int, limit: float = 1.0) -> dict[str, int]:
    """``runtime`` once the stop has taken effect: a thread shows 'T' as it stops, and its count is brought up
    to date when it leaves the CPU, a moment later (longer on a loaded machine). Two equal readings 5 ms
    apart, or what the last reading says after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    last = runtime(pid)
    while time.monotonic() < deadline:
        time.sleep(0.005)
        now = runtime(pid)
        if now == last:
            return now
        last = now
    return last


def stopped(pid: int, limit: float = 2.0) -> bool:
    """Wait until every thread of ``pid`` is stopped (SIGSTOP takes effect thread by thread)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            states = []
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/stat", "rb") as fh:
                    states.append(fh.read().rpartition(b")")[2].split()[0])
        except (OSError, IndexError):
            return False
        if all(s in (b"T", b"t", b"Z", b"X") for s in states):
            return True
        time.sleep(0.001)
    return False


def last_pid() -> int:
    """The last PID this namespace handed out (to a process or a thread): two readings that differ mean
    something started in between. 0 where the kernel does not say."""
    try:
        with open("/proc/sys/kernel/ns_last_pid") as fh:
            return int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def _signal(pid: int, name: str) -> None:

    try:
        os.kill(pid, getattr(signal, name))
    except OSError:
        pass


def _readable_by_pid1() -> None:
    """In a new worker: dumpable again (a fork inherits PID 1's "non-dumpable"), so that PID 1 may read its memory
    map (:func:`native_code`). Its memory is the learner's own: reading it gives a learner's process nothing the
    learner's code does not hold already, and every other process is ended while the tests run."""
    try:
        ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)      # PR_SET_DUMPABLE = 1
    except (OSError, AttributeError):
        pass


def native_code(pids) -> list[str]:
    """Machine code the learner's processes ``pids`` run that the sandbox did not bring: executable mappings
    (``/proc/PID/maps``) of a file on a writable file system (the sandbox's scratch folders: everything
    installed is bound read-only), of a deleted file or of memory (``memfd``). A C++ extension a notebook
    compiled or wrote from bytes calls PyTorch's kernels without the dispatcher, below every check of
    forbidden calls. Read here, by PID 1, which no learner's process can reach."""
    found: set[str] = set()
    for pid in pids:
        if not pid:
            continue
        try:
            with open(f"/proc/{pid}/maps") as f:
                lines = f.read().splitlines()
        except PermissionError:                                    # it made itself unreadable (PR_SET_DUMPABLE 0)
            found.add(f"a process whose memory map is hidden (PID {pid})")
            continue
        except OSError:                                            # gone
            continue
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) < 6 or "x" not in parts[1]:
                continue
            path = parts[5].strip()
            if not path or path.startswith("["):                  # [vdso], [vsyscall]: the kernel's
                continue
            if path.startswith("/memfd:") or path.endswith("(deleted)"):
                found.add(path)
                continue
            try:
                if not os.statvfs(path).f_flag & os.ST_RDONLY:
                    found.add(path)
            except OSError:
                found.add(path)
    return sorted(found)[:5]


def fence(worker: int, fork: int, stop: bool = True, limit: float = 3.0) -> tuple[int, int, bool]:
    """While a submission's tests run, the only learner code that runs is the function under test: end every
    process of the sandbox but PID 1, the worker and its tests' fork (``fork``, kept only if it is a live
    child of the worker). With ``stop`` (and a fork), the worker is stopped first (SIGSTOP, which no process
    can catch): none of its threads runs until RESUME. Processes that start more as they are ended are
    ended again until none is left, for ``limit`` seconds. Returns ``(processes ended, the fork kept or 0,
    whether none is left)``."""
    procs = processes()
    keep = {worker}
    if fork and procs.get(fork, (0, "Z"))[0] == worker and procs[fork][1] != "Z":
        keep.add(fork)
        if stop:
            _signal(worker, "SIGSTOP")
            stopped(worker, limit=5.0)          # a thread waiting for a CPU on a loaded machine stops late
    else:
        fork = 0
    ended: set[int] = set()
    deadline = time.monotonic() + limit
    while True:
        extra = [p for p, (_, state) in procs.items() if p not in keep and state != "Z"]
        if not extra:
            return len(ended), fork, True
        if time.monotonic() > deadline:
            return len(ended), fork, False
        for p in extra:
            _signal(p, "SIGKILL")
            ended.add(p)
        for p in extra:                              # the orphans among them are ours to reap (we are PID 1)
            try:
                os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.002)
        procs = processes()


def _wait_for_end(fork: int, limit: float = 2.0) -> None:
    """The tests' fork, told to end, writes its last byte to the worker and exits: wait for that (the worker
    is stopped and cannot reap it, so it stays a zombie); one still running after ``limit`` is killed."""
    if not fork:
        return
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        state = processes().get(fork, (0, "Z"))[1]
        if state == "Z":
            return
        time.sleep(0.002)
    _signal(fork, "SIGKILL")


class _Tests:
    """What PID 1 keeps while a submission's tests run: their fork, and how long the stopped worker had run
    when it was stopped (its threads may not run again before RESUME: a fork that wakes it, SIGCONT, is seen
    by the kernel's count of the worker's running time, however the worker is stopped again after)."""

    def __init__(self):
        self.fork, self.ran, self.woke = 0, {}, False

    def answer(self, op, msg: dict, worker: int, say) -> None:
        """FENCE, CENSUS or RESUME (see :class:`course.grading.sandboxed.wire.ZygoteOp`): says FENCED."""
        if op == ZygoteOp.FENCE:
            claimed = msg.get("fork")
            ended, self.fork, clean = fence(worker, claimed if type(claimed) is int and claimed > 1 else 0)
            self.ran, self.woke = settled_runtime(worker) if self.fork else {}, False
        elif op == ZygoteOp.CENSUS:
            self._watch(worker)
            ended, self.fork, clean = fence(worker, self.fork, stop=False)
        else:
            self._watch(worker)
            _wait_for_end(self.fork)
            ended, _, clean = fence(worker, 0, stop=False)
            self.fork, self.ran = 0, {}
            _signal(worker, "SIGCONT")
        native = native_code((worker, self.fork)) if op != ZygoteOp.RESUME else []
        say(ev=ZygoteEvent.FENCED, ended=ended, fork=self.fork, clean=clean, last_pid=last_pid(), woke=self.woke,
            native=native)

    def _watch(self, worker: int) -> None:
        if self.fork and ran_since(self.ran, runtime(worker)):      # the stopped worker ran: stop it again, say so
            self.woke = True
            _signal(worker, "SIGSTOP")
            stopped(worker)
            self.ran = settled_runtime(worker)


def serve_sandbox(ctrl_fd: int, keep: dict[str, frozenset], worker_class) -> None:
    """Serve many submissions from one warm sandbox: fork a fresh worker for each.

    Runs as PID 1 of the sandbox's namespace. Talks to the judge over its own control socket
    (``ctrl_fd``), which each worker closes before any student code runs; the worker gets fresh
    pipes for its requests and answers, passed by the judge for this submission only. So a worker
    cannot speak for the zygote, and nothing a worker left in a pipe reaches the next one.
    Non-dumpable (no process of the sandbox can read its memory or its descriptors) and deaf to
    every signal it may ignore. Between two submissions it kills every other process, reaps them,
    empties the scratch folders and only then says "clean" (or "dirty": the judge then starts a new
    sandbox). Messages: judge -> zygote JSON (+ two descriptors with "fork"); zygote -> judge JSON.
    """

    try:
        libc = ctypes.CDLL(None)
        libc.prctl(4, 0, 0, 0, 0)                    # PR_SET_DUMPABLE = 0: nobody reads our memory or fds
        # Die with bubblewrap's process outside (the judge kills it): dropping to the sandbox user
        # cleared the parent-death signal bubblewrap had set, so set it again.
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    _ignore_signals()
    ctrl = socket.socket(fileno=ctrl_fd)

    def say(**msg):
        try:
            ctrl.send(json.dumps(msg).encode())
        except OSError:
            os._exit(0)

    say(ev=ZygoteEvent.READY, clean=_wipe(keep)[0])
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(ctrl, 1 << 16, 2)
        except OSError:
            data, fds = b"", []
        if not data:                                 # the judge is gone: as PID 1, our exit ends everything
            _sweep(2)
            os._exit(0)
        try:
            req = json.loads(data)
        except ValueError:
            os._exit(0)
        if req.get("op") != ZygoteOp.FORK or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        _copy_inbox(req.get("files", []))
        pid = os.fork()
        if pid == 0:
            try:
                ctrl.close()                         # before any student code: the worker never holds it
                _readable_by_pid1()
                os.chdir("/sandbox/work")
                _default_signals()
                worker_class(fds[0], fds[1]).serve()
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        say(ev=ZygoteEvent.STARTED)
        exited = False
        tests = _Tests()                             # while the tests run: their fork, the stopped worker
        budget = 20.0                                # seconds the clean-up may take (the END request says)

        while True:
            if not exited:
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done, status = pid, 0
                if done == pid:
                    exited = True
                    say(ev=ZygoteEvent.EXITED, status=status)
            ready, _, _ = select.select([ctrl], [], [], 0.05 if not exited else None)
            if not ready:
                continue
            try:
                data = ctrl.recv(1 << 16)
                msg = json.loads(data) if data else None
            except (OSError, ValueError):
                msg = None
            if not isinstance(msg, dict):
                _sweep(2)
                os._exit(0)
            op = msg.get("op")
            if op == ZygoteOp.END:
                # the judge's budget for the clean-up (what is left of the notebook's time): a sandbox that cannot
                # be emptied in it is thrown away by the judge, which starts a fresh one
                budget = msg.get("limit")
                budget = min(20.0, max(0.5, float(budget))) if type(budget) in (int, float) else 20.0
                break
            if op in (ZygoteOp.FENCE, ZygoteOp.CENSUS, ZygoteOp.RESUME) and not exited:
                tests.answer(op, msg, pid, say)
        swept = _sweep()
        clean, removed = _wipe(keep, budget) if swept else (False, 0)
        ipc_left, ipc_removed = _remove_ipc() if swept else (True, 0)
        clean, removed = clean and not ipc_left, removed + ipc_removed
        say(ev=ZygoteEvent.CLEAN if clean else ZygoteEvent.DIRTY, removed=removed)


def warm_checks() -> None:
    """Run the check of forbidden calls once, on a small tensor: its first use loads some 800 modules of
    PyTorch's dispatch machinery (about 2 s). Done before the zygote forks, every worker starts with them
    loaded instead of paying it again per submission."""
    # warm-up: the check's first use loads PyTorch's dispatch machinery once, before the forks
    import torch

    # warm-up: loaded once in the warm sandbox, before the forks
    from course import forbidden

    try:
        with forbidden.Guard(("softmax",), "warm up", limit=1 << 30):
            torch.ones(2, 2).tril().sum()
    except Exception:  # noqa: BLE001 - a check that fails here fails again, visibly, where a test uses it
        pass


def warm_imports(lists: list[str]) -> None:
    """Import the modules the lessons import (named by the judge from the instructor's notebooks), so
    that each forked worker finds them loaded. One that fails is left for the notebook to report.

    Triton's interpreter is chosen first, where there is no GPU: ``transformers`` (lessons 13's and 14's
    oracles) imports ``triton`` as it loads, and a ``triton`` imported without the interpreter cannot run
    lesson 16's kernels on a CPU (:func:`course.triton_support.setup` refuses it)."""
    # warm-up: loaded once in the warm sandbox, before the forks
    from course import triton_support

    triton_support.prefer_interpreter()
    for name in (n for names in lists for n in names.split(",") if n):
        try:
            module = importlib.import_module(name)
            for extra in getattr(module, "WARM_IMPORTS", ()):    # what the module imports when used
                importlib.import_module(extra)
        except Exception:  # noqa: BLE001 - the submission's own import says what is wrong
            pass

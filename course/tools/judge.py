"""The trusted side of grading: decides every test cell's verdict outside the student's reach.

For one submission the judge starts a worker in the sandbox (:mod:`course.tools.worker`) and walks
the student's notebook. Ordinary cells and solution cells run in the worker; cells the lesson tags
``experiment`` are skipped. At each test cell the judge runs the **instructor's** test code (from
the lesson's source notebook, hidden tests included) in its own interpreter, where the learner's
names are :class:`Remote` stand-ins: a call or attribute read becomes a request to the worker and
what comes back is data (tensors by value, numbers, strings...) or another stand-in. Checks, oracles,
torch and the test code itself all live here, where the student's code never runs, so patching them
in the notebook changes nothing. A test passes when its code finishes without an exception.

A cell that runs past its time limit, or a worker that dies, is stopped; the worker is restarted and
the cells before are replayed, so the rest of the notebook is still graded.
"""

from __future__ import annotations

import ast
import builtins
import collections
import functools
import os
import random
import select
import signal
import subprocess
import sys
import symtable
import time
from pathlib import Path

from course.tools import sandbox

# A judge started by the grader launches its warm sandbox first, before importing torch: the sandbox's
# Python imports its own libraries meanwhile, on another core when there is one. The judges' fork
# server (serve_forks) launches one per judge it will fork, each as a uid of its own.
_FORKS = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--forks=")] if __name__ == "__main__" else []
if _FORKS:
    _AHEAD = min(8, max(1, int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--slots=")), "1"))))
    _EARLY_MANY = sandbox.prestart_from_env([sandbox.fresh_uid() if os.geteuid() == 0 else None for _ in range(_AHEAD)])
else:
    _EARLY_MANY = []
_EARLY = sandbox.prestart_from_env() if __name__ == "__main__" and not _FORKS else None

import nbformat  # noqa: E402
import torch  # noqa: E402

from course import checks  # noqa: E402
from course.tools import wire  # noqa: E402

MAX_RESTARTS = 6


class RemoteError(Exception):
    """An exception raised by the student's code in the sandbox (its type name and message)."""


class WorkerGone(Exception):
    """The worker died, broke the protocol, or ran past its time limit."""

    def __init__(self, message: str, *, timeout: bool = False):
        super().__init__(message)
        self.timeout = timeout


class Exhausted(WorkerGone):
    """The learner's code stopped its worker more than ``MAX_RESTARTS`` times in one notebook (it died,
    ran out of time, or was killed by a process the learner left running): the learner's doing, not the
    grader's, so the remaining cells score 0 and the verdict is ``kernel-died``, never ``grader-error``."""


class ProcessLimit(WorkerGone):
    """The test's fork could not start: the learner's code holds every process and thread its sandbox may
    have. A restart would replay the same cells into the same state, so the notebook ends here."""


_BUILTIN_ERRORS = {n: getattr(builtins, n) for n in dir(builtins)
                   if isinstance(getattr(builtins, n), type) and issubclass(getattr(builtins, n), Exception)}


def _rebuild_error(info) -> Exception:
    """The student's exception as a local one of the same builtin type (else RemoteError)."""
    name = str(info.get("type", "Error"))[:60] if isinstance(info, dict) else "Error"
    message = str(info.get("message", ""))[:2000] if isinstance(info, dict) else str(info)[:2000]
    cls = _BUILTIN_ERRORS.get(name)
    if cls is not None and cls not in (SystemExit, KeyboardInterrupt):
        try:
            return cls(message)
        except Exception:  # noqa: BLE001
            pass
    return RemoteError(f"{name}: {message}" if message else name)


# -- the stand-in for objects that live in the sandbox --------------------------------------------

_TRUSTED_MODULES = ("torch", "builtins", "collections", "numpy", "math", "functools", "typing")
_standins: dict[tuple, type] = {}
_HEAPTYPE = 1 << 9


def _claimable(cls) -> bool:
    """May a stand-in claim to be an instance of ``cls``? Only if every class of its chain but
    ``object`` is written in Python: C code (torch's first) trusts ``isinstance`` and then reads the
    object's memory as its own layout, so a stand-in posing as a tensor would crash the judge."""
    if not isinstance(cls, type) or issubclass(cls, (torch.Tensor, BaseException)):
        return False
    for c in cls.__mro__:
        if c is object:
            continue
        if not c.__flags__ & _HEAPTYPE or type(c).__name__.startswith("pybind11") or \
                str(c.__module__).startswith(("torch._C", "builtins")) or c.__basicsize__ > 64 or c.__itemsize__:
            return False
    return True


def _trusted_class(module, qual):
    """The class ``module.qual`` names, if a trusted module is loaded here and has it (imports nothing)."""
    import sys

    obj = sys.modules.get(str(module))
    if obj is None:
        return None
    for part in str(qual).split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def _resolve_class(info: dict):
    """The class a remote object claims to be: the real one for torch/builtins, else a stand-in."""
    import sys

    mro = [tuple(x) for x in info.get("mro", []) if isinstance(x, (list, tuple)) and len(x) == 2]
    bases = []
    for module, qual in mro:
        if str(module).split(".")[0] in _TRUSTED_MODULES and "<" not in str(qual):
            # Never import on a learner's say-so (import-time code would run in the judge): only modules
            # the judge has already loaded count; any other claim is an unknown class (a plain stand-in).
            obj = sys.modules.get(str(module))
            if obj is None:
                continue
            try:
                for part in str(qual).split("."):
                    obj = getattr(obj, part)
                if isinstance(obj, type) and _claimable(obj):
                    bases.append(obj)
                    break
            except (ImportError, AttributeError):
                continue
    trusted = bases[0] if bases else object
    if mro and str(mro[0][0]).split(".")[0] in _TRUSTED_MODULES and bases and mro[0][1] == trusted.__qualname__:
        return trusted
    name = str(mro[0][1]).split(".")[-1][:60] if mro else "Remote"
    key = (name, trusted)
    if key not in _standins:
        try:
            _standins[key] = type(name, (trusted,), {"__module__": "submission"})
        except TypeError:
            _standins[key] = type(name, (object,), {"__module__": "submission"})
    return _standins[key]


class Remote:
    """A learner's object that lives in the sandbox. Using it sends a request; answers are data."""

    __slots__ = ("_r_session", "_r_id", "_r_info", "_r_extra", "__weakref__")

    def __init__(self, session, hid: int, info: dict):
        object.__setattr__(self, "_r_session", session)
        object.__setattr__(self, "_r_id", hid)
        object.__setattr__(self, "_r_info", info)
        object.__setattr__(self, "_r_extra", {})

    @property
    def __class__(self):  # isinstance(remote, nn.Module) reads this
        return _resolve_class(self._r_info)

    def _r(self, op, **kw):
        return self._r_session.request(op, h=self._r_id, **kw)

    def __getattr__(self, name):
        extra = object.__getattribute__(self, "_r_extra")
        if name in extra:
            return extra[name]
        if name.startswith("__") and name.endswith("__") and name not in ("__name__", "__qualname__", "__doc__"):
            raise AttributeError(name)
        return self._r("getattr", name=name)

    def __setattr__(self, name, value):
        self._r("setattr", name=name, value=_outgoing(value))

    def __call__(self, *args, **kwargs):
        walk = _Walk()           # one walk: the copies to send, the judge's tensors among them, any stand-in
        args, kwargs, mutable = _outgoing(args, walk, 1), _outgoing(kwargs, walk, 1), walk.tensors
        # the worker skips its own walks where they would find nothing (no tensor to watch, no handle to resolve)
        return self._r("call", args=args, kwargs=kwargs, grad=torch.is_grad_enabled(), mutable=mutable,
                       tensors=bool(mutable), handles=walk.handles, containers=checks.in_place_changes_seen(),
                       held=walk.containers)

    def __getitem__(self, key):
        return self._r("getitem", key=_outgoing(key))

    def __setitem__(self, key, value):
        self._r("setitem", key=_outgoing(key), value=_outgoing(value))

    def __len__(self):
        n = self._r("len")
        if not isinstance(n, int) or n < 0:
            raise TypeError("len() of the learner's object is not a non-negative integer")
        return n

    def __iter__(self):
        items = self._r("iter")
        if not isinstance(items, list):
            raise TypeError("the learner's object could not be iterated")
        return iter(items)

    def __contains__(self, item):
        return bool(self._r("contains", item=_outgoing(item)) is True)

    def __bool__(self):
        return self._r("bool") is True

    def __repr__(self):
        text = self._r("repr")
        return str(text)[:2000] if isinstance(text, str) else "<learner's object>"

    __str__ = __repr__

    def __reduce__(self):
        return (wire.Handle, (self._r_id,))


_ATOMS = frozenset({str, int, float, bool, type(None), bytes, complex})


def _copy_back(originals: list, mutated: list) -> None:
    """The learner's call changed some of its tensor arguments in place (in the sandbox, on copies):
    make the same change to the test's own tensors, so the test sees what it would in the notebook.
    Only inside ``checks.seeing_in_place_changes()``: elsewhere a change could bend the reference a test
    computes after the call from its own tensors."""
    for item in mutated[:len(originals)]:
        if not (isinstance(item, list) and len(item) == 2 and type(item[0]) is int
                and 0 <= item[0] < len(originals) and isinstance(item[1], torch.Tensor)):
            continue
        dst, src = originals[item[0]], item[1]
        try:
            with torch.no_grad():
                if dst.shape != src.shape:
                    dst.data = src.to(dst.dtype).clone()
                elif not torch.equal(dst, src.to(dst.dtype)):
                    dst.copy_(src)
        except (RuntimeError, TypeError):
            dst.data = src.clone()


def _mirror(known: list, held: list, rebound) -> None:
    """Put into the test's own lists and dicts (``held``) what the learner's call left in its copies of
    them: ``rebound`` is [[i, contents]], each item ["o", j] (the j-th of ``known``: the call's tensors,
    then its containers) or ["v", value]."""
    def value(ref):
        if isinstance(ref, list) and len(ref) == 2:
            if ref[0] == "o" and type(ref[1]) is int and 0 <= ref[1] < len(known):
                return known[ref[1]]
            if ref[0] == "v":
                return ref[1]
        raise WorkerGone("the sandbox broke the grading protocol (a malformed change to a container)")

    for entry in rebound if isinstance(rebound, list) else []:
        if not (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int and 0 <= entry[0] < len(held)
                and isinstance(entry[1], list)):
            raise WorkerGone("the sandbox broke the grading protocol (a malformed change to a container)")
        target = held[entry[0]]
        if isinstance(target, dict):
            pairs = [(p[0], value(p[1])) for p in entry[1] if isinstance(p, list) and len(p) == 2]
            target.clear()
            target.update(pairs)
        else:
            target[:] = [value(r) for r in entry[1]]


class _Walk:
    """What :func:`_outgoing` saw on its way: the judge's own tensors, in the order :func:`wire.tensors`
    names them, and whether any stand-in became a handle."""

    __slots__ = ("tensors", "handles", "containers")

    def __init__(self):
        self.tensors: list = []
        self.handles = False
        self.containers: list = []      # the test's own lists and dicts, in the order the worker walks them


def _outgoing(value, walk: _Walk | None = None, depth: int = 0):
    """Judge-side values on their way into the sandbox: stand-ins become handles, tensors copies. With
    ``walk``, also note what :class:`_Walk` holds (``depth``: as :func:`wire.tensors` counts it)."""
    if type(value) in _ATOMS:          # the leaves of a test's nested data (thousands per call): as they are
        return value
    if isinstance(value, Remote) or type(value) is Remote:
        if walk is not None:
            walk.handles = True
        return wire.Handle(object.__getattribute__(value, "_r_id"))
    if type(value) is list:
        if walk is not None and depth < 50:
            walk.containers.append(value)
        return [_outgoing(v, walk, depth + 1) for v in value]
    if type(value) is tuple:
        return tuple([_outgoing(v, walk, depth + 1) for v in value])
    if type(value) is dict or type(value) is collections.OrderedDict:   # a state_dict is an OrderedDict
        if walk is not None and depth < 50:
            walk.containers.append(value)
        return type(value)((k, _outgoing(v, walk, depth + 1)) for k, v in value.items())
    if isinstance(value, torch.Tensor):
        if walk is not None and depth <= 50 and issubclass(type(value), torch.Tensor):
            walk.tensors.append(value)          # wire.tensors descends 50 levels of containers
        return value.detach().clone()
    if callable(value) and not isinstance(value, (type, torch.nn.Module, torch.Generator)) and \
            getattr(value, "__module__", "") in ("__main__", None, "judge"):
        raise TypeError("a test cannot pass a function defined in the test to the learner's code")
    return value


# -- one worker in its sandbox ---------------------------------------------------------------------

class _Foster:
    """A sandbox this judge owns but did not start: the judges' fork server launched it before the judge
    was forked (:func:`serve_forks`), so it is the server's child. Watched and killed through a pidfd,
    which names that process and no other, even once it has ended (the server reaps it)."""

    stdin = stdout = None

    def __init__(self, pid: int, pidfd: int):
        self.pid, self.pidfd, self.returncode = pid, pidfd, None

    def poll(self):
        if self.returncode is None and select.select([self.pidfd], [], [], 0)[0]:
            self.returncode = -signal.SIGKILL          # ended; its status is the server's to collect
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            if not select.select([self.pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("sandbox", timeout)
            self.returncode = -signal.SIGKILL
        return self.returncode

    def kill(self):
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)   # bubblewrap; its PID 1 dies with it
        except (ProcessLookupError, OSError):
            pass


def _terminate(proc) -> None:
    """Kill a worker or sandbox process (and its process group), close its pipes, reap it."""
    if proc is None:
        return
    if isinstance(proc, _Foster):
        proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        return
    if proc.poll() is None:             # not reaped yet, so its pid is still its own (a zombie's at worst)
        for kill in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


class _Zygote:
    """The warm sandbox of this judge process: one bubblewrap sandbox whose PID 1 forks a fresh worker
    per submission. The judge believes only what this sandbox's PID 1 says on its control socket,
    which no worker holds: "ready"/"clean" after it has killed every other process and emptied the
    scratch folders, "exited" when a worker ends. Killed and started again whenever a worker
    misbehaves (times out, dies, breaks the protocol) or the clean-up fails."""

    def __init__(self):
        self.proc = None
        self.ctrl = None
        self.inbox = None
        self.key = None          # what it was started for (scratch base, warm modules, limits)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.ctrl is not None

    def start(self, scratch_base: Path, warm, limits, deadline: float):
        global _EARLY

        self.kill()
        early, _EARLY = _EARLY, None
        if early is not None and early[0] == sandbox.prestart_key(scratch_base, warm, limits):
            self.proc, self.ctrl, self.inbox = early[1]         # launched when this judge started
        else:
            if early is not None:                               # not the sandbox this submission needs
                _terminate(early[1][0])
                early[1][1].close()
                sandbox.remove_scratch(early[1][2])
            self.proc, self.ctrl, self.inbox = sandbox.launch_zygote(scratch_base, warm, limits)
        self.key = sandbox.prestart_key(scratch_base, warm, limits)
        msg = self.hear(deadline)
        if msg.get("ev") != "ready" or msg.get("clean") is not True:
            raise WorkerGone(f"the sandbox did not start ({msg})")

    def hear(self, deadline: float | None) -> dict:
        """The next message of the sandbox's PID 1 (a WorkerGone if none by the deadline)."""
        import json

        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not select.select([self.ctrl], [], [], left)[0]:
            raise WorkerGone("the sandbox did not answer in time", timeout=True)
        try:
            data = self.ctrl.recv(1 << 16)
            msg = json.loads(data) if data else None
        except (OSError, ValueError):
            msg = None
        if not isinstance(msg, dict):
            raise WorkerGone("the sandbox stopped")
        return msg

    def tell(self, fds=(), **msg):
        import json
        import socket

        try:
            socket.send_fds(self.ctrl, [json.dumps(msg).encode()], list(fds))
        except OSError:
            raise WorkerGone("the sandbox stopped") from None

    def kill(self):
        _terminate(self.proc)
        self.proc = None
        if self.ctrl is not None:
            self.ctrl.close()
            self.ctrl = None
        if self.inbox is not None:
            sandbox.remove_scratch(self.inbox)
            self.inbox = None


_ZYGOTE = _Zygote()


class Session:
    """One worker for one submission: start, requests with deadlines, stop."""

    def __init__(self, scratch_base: Path, *, use_sandbox: bool, limits: sandbox.Limits, start_timeout: float = 120):
        self.scratch_base, self.use_sandbox, self.limits = Path(scratch_base), use_sandbox, limits
        self.proc = None
        self.rfd = self.wfd = None
        self.deadline = None
        self.proxies: dict[int, Remote] = {}
        self.start_timeout = start_timeout
        self.files: list[str] = []
        self.warm: list[str] = []            # modules a new warm sandbox imports first
        self.own_scratch = None
        self.exited = False
        self.left_behind = 0                 # files and folders the clean-up removed after this submission
        self.lies: list[str] = []            # what the worker claimed that cannot be true
        self.watches: dict = {}              # inside a seeing block: each call's inputs, by the number the worker gave

    def _close_pipes(self):
        for fd in (self.rfd, self.wfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.rfd = self.wfd = None

    def start(self):
        import shutil

        self.proxies = {}
        self.exited = False
        self.deadline = time.monotonic() + self.start_timeout
        try:
            if self.use_sandbox:
                # A judge that lives on (a Dask worker's) may get a submission with other limits or modules.
                if not _ZYGOTE.alive() or _ZYGOTE.key != sandbox.prestart_key(self.scratch_base, self.warm, self.limits):
                    _ZYGOTE.start(self.scratch_base, self.warm, self.limits, self.deadline)
                names = []
                for old in _ZYGOTE.inbox.iterdir():
                    old.unlink()
                for extra in self.files:             # data files that travel with the lesson
                    p = Path(extra)
                    if p.is_file():
                        shutil.copyfile(p, _ZYGOTE.inbox / p.name)
                        os.chmod(_ZYGOTE.inbox / p.name, 0o644)
                        names.append(p.name)
                # Fresh pipes for this submission only: nothing a previous worker wrote can reach the judge.
                req_r, req_w = os.pipe()
                ans_r, ans_w = os.pipe()
                try:
                    _ZYGOTE.tell(fds=(req_r, ans_w), op="fork", files=names)
                finally:
                    os.close(req_r)
                    os.close(ans_w)
                self.rfd, self.wfd, self.proc = ans_r, req_w, _ZYGOTE.proc
                os.set_blocking(self.wfd, False)
                msg = _ZYGOTE.hear(self.deadline)
                if msg.get("ev") != "started":
                    raise WorkerGone("the sandbox did not start a worker")
            else:
                self.own_scratch = self.own_scratch or sandbox.prepare_scratch(self.scratch_base)
                for extra in self.files:
                    p = Path(extra)
                    if p.is_file():
                        shutil.copy2(p, self.own_scratch / "work" / p.name)
                env = {k: v for k, v in os.environ.items() if not k.startswith(("COURSE_METRICS",))}
                env.update({"NBGRADER_EXECUTION": "autograde", "COURSE_HEADLESS": "1", "MPLBACKEND": "Agg",
                            "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"})
                self.proc = subprocess.Popen(sandbox.worker_command(self.own_scratch, sandbox=False),
                                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                             cwd=str(self.own_scratch / "work"), env=env, start_new_session=True,
                                             preexec_fn=self.limits.apply)
                self.rfd, self.wfd = self.proc.stdout.fileno(), self.proc.stdin.fileno()
                os.set_blocking(self.wfd, False)
            ready = self._read()
        except (OSError, wire.WireError) as exc:
            raise WorkerGone(f"the sandbox did not start ({exc})") from None
        finally:
            self.deadline = None
        if not (isinstance(ready, dict) and ready.get("value") == "ready"):
            raise WorkerGone("the sandbox did not start")

    def stop(self, *, graceful: bool = False):
        """End this submission's worker. Gracefully, the warm sandbox is kept for the next one if its
        PID 1 says, on its own channel, that it killed every process of the submission and emptied the
        scratch folders."""
        if self.proc is None:
            return
        if self.use_sandbox:
            self._close_pipes()
            if graceful and _ZYGOTE.alive():
                try:
                    _ZYGOTE.tell(op="end")
                    deadline = time.monotonic() + 30
                    while True:
                        msg = _ZYGOTE.hear(deadline)
                        if type(msg.get("removed")) is int:
                            self.left_behind = msg["removed"]
                        if msg.get("ev") == "clean":
                            self.proc = None
                            return
                        if msg.get("ev") != "exited":
                            break
                except WorkerGone:
                    pass
            _ZYGOTE.kill()
            self.proc = None
            return
        _terminate(self.proc)
        self.proc = None
        self.rfd = self.wfd = None

    def close(self):
        if not self.use_sandbox and self.own_scratch is not None:
            sandbox.remove_scratch(self.own_scratch)
            self.own_scratch = None

    def _dead(self) -> bool:
        if self.proc is None or self.proc.poll() is not None or self.exited:
            return True
        return False

    def _watch_zygote(self, timeout: float | None) -> None:
        """A message from the sandbox's PID 1 while waiting on the worker: it can only be "exited"."""
        if not self.use_sandbox or _ZYGOTE.ctrl is None:
            return
        if select.select([_ZYGOTE.ctrl], [], [], timeout)[0]:
            msg = _ZYGOTE.hear(time.monotonic() + 1)
            self.exited = True
            raise WorkerGone("the sandbox running the notebook died (os._exit, a crash, or out of memory)"
                             if msg.get("ev") == "exited" else "the sandbox stopped")

    def _read(self):
        deadline = self.deadline if self.deadline is not None else time.monotonic() + 600
        watch = [self.rfd] + ([_ZYGOTE.ctrl] if self.use_sandbox and _ZYGOTE.ctrl is not None else [])
        left = deadline - time.monotonic()
        ready = select.select(watch, [], [], max(0.0, left))[0] if left > 0 else []
        if not ready:
            raise WorkerGone("ran past the time limit", timeout=True)
        if self.rfd not in ready:
            self._watch_zygote(0)
        try:
            payload = wire.recv(self.rfd, deadline=deadline)
            return wire.decode_data(payload, self._make_remote)
        except wire.WireTimeout:
            raise WorkerGone("ran past the time limit", timeout=True) from None
        except wire.WireError as exc:
            self._watch_zygote(2)
            if self.proc.poll() is not None or self.exited:
                raise WorkerGone("the sandbox running the notebook died (os._exit, a crash, or out of memory)") from None
            raise WorkerGone(f"the sandbox broke the grading protocol ({exc})") from None

    def _make_remote(self, hid, info):
        proxy = self.proxies.get(hid)
        mro = info.get("mro") if isinstance(info, dict) else None
        if proxy is None and mro and str(mro[0][0]).split(".")[0] in _TRUSTED_MODULES:
            claimed = _trusted_class(*mro[0])
            if claimed is not None and issubclass(claimed, torch.Tensor) and len(self.lies) < 5:
                # Real tensors travel as data, never as handles: this object lies about its class.
                self.lies.append(f"an object of the learner's code claims to be {mro[0][0]}.{mro[0][1]}")
        if proxy is None:
            proxy = self.proxies[hid] = Remote(self, hid, info if isinstance(info, dict) else {})
        return proxy

    def request(self, op, *, mutable=None, held=None, **kw):
        """Send one request; the answer, as data. ``mutable``: the judge's own tensors passed in the
        call (in the order the worker walks them), to receive the changes the call made to them."""
        if self._dead() or self.wfd is None:
            raise WorkerGone("the sandbox running the notebook died (os._exit, a crash, or out of memory)")
        seeing = checks.in_place_changes_seen()
        if seeing:
            kw["seeing"] = True        # the worker watches this block's inputs until a request comes without it
        else:
            self.watches = {}
        try:
            payload = wire.encode_request({"op": op, **kw})
        except pickle_errors() as exc:
            raise TypeError(f"this value cannot be sent to the learner's code: {exc}") from None
        deadline = self.deadline if self.deadline is not None else time.monotonic() + 600
        try:
            wire.send(self.wfd, payload, deadline=deadline)
        except wire.WireTimeout:
            raise WorkerGone("ran past the time limit", timeout=True) from None
        except (BrokenPipeError, OSError):
            raise WorkerGone("the sandbox running the notebook died (os._exit, a crash, or out of memory)") from None
        reply = self._read()
        if not isinstance(reply, dict):
            raise WorkerGone("the sandbox broke the grading protocol (a malformed answer)")
        if mutable and isinstance(reply.get("mutated"), list) and seeing:
            _copy_back(mutable, reply["mutated"])      # only where a test checks its inputs (else: thrown away)
        if seeing:
            if reply.get("tampered"):
                if len(self.lies) < 5:
                    self.lies.append(f"replaced {', '.join(map(str, reply['tampered']))}, the check of changes to inputs")
                raise AssertionError("your code replaced part of the grader's check of changes to a function's inputs.")
            if kw.get("containers") and reply.get("rebound") and held is not None:
                # An entry of a list or dict the test passed was replaced, added or removed: the same change
                # to the test's own, so that its assertions see what they would in the notebook.
                _mirror(list(mutable or []) + list(held), held, reply["rebound"])
            # A change made after its call (by what the call returned, when the test used it) comes with the
            # answer that saw it: the same change to that call's inputs.
            for entry in reply.get("later") if isinstance(reply.get("later"), list) else []:
                watched = self.watches.get(entry[0]) if isinstance(entry, list) and len(entry) == 3 else None
                if watched is not None:
                    tensors, containers = watched
                    if tensors and isinstance(entry[1], list):
                        _copy_back(tensors, entry[1])
                    if containers and isinstance(entry[2], list) and entry[2]:
                        _mirror(list(tensors) + list(containers), containers, entry[2])
            if kw.get("containers") and isinstance(reply.get("watch"), int):
                self.watches[reply["watch"]] = (list(mutable or []), list(held or []))
        self.last_reply = reply
        if reply.get("ok") is True:
            return reply.get("value") if "missing" not in reply else _MISSING
        raise _rebuild_error(self._withheld(reply.get("error") or {}))

    def _withheld(self, info):
        """A learner's exception raised while a hidden check runs keeps its type, not its message: the
        message is the learner's to write, and could repeat the hidden inputs onto the feedback page."""
        # The type's name is the learner's to choose too: only a builtin exception's name is kept.
        kind = info.get("type") if isinstance(info, dict) else None
        withheld = {"type": kind if kind in _BUILTIN_ERRORS else "an exception of a class your code defined",
                    "message": "raised by your code after a hidden check's inputs reached it (its message is not "
                               "shown: it could repeat them)"}
        if getattr(self, "fork_saw_hidden", False):      # an earlier test cell of this fork sent hidden inputs
            return withheld
        hidden = getattr(self, "hidden_lines", None)
        if not hidden or not isinstance(info, dict):
            return info
        filename, lines = hidden
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == filename:
                if frame.f_lineno in lines:
                    return withheld
                break
            frame = frame.f_back
        return info


def pickle_errors():
    import pickle

    return (pickle.PicklingError, AttributeError, TypeError)


_MISSING = object()


# -- what a judge keeps from one submission to the next ------------------------------------------------
# The instructor's notebooks (hidden tests included) and what is derived from them are the same for every
# submission of a lesson version: read, parsed and compiled once per judge, keyed by their content.

_LESSON_FILES: dict[str, tuple] = {}       # sha256 of a source or release notebook -> (notebook, derived values)


def _lesson_notebook(path) -> tuple:
    """``(notebook, memo)`` for an instructor's notebook: parsed once per content; ``memo`` holds what
    is computed from it (read only by the callers)."""
    import hashlib

    data = Path(path).read_bytes()
    key = hashlib.sha256(data).hexdigest()
    if key not in _LESSON_FILES:
        if len(_LESSON_FILES) >= 64:
            _LESSON_FILES.clear()
        _LESSON_FILES[key] = (nbformat.reads(data.decode("utf-8"), as_version=4), {})
    return _LESSON_FILES[key]


def _memo(memo: dict, name: str, compute):
    if name not in memo:
        memo[name] = compute()
    return memo[name]


@functools.lru_cache(maxsize=512)
def _compiled(source: str, filename: str):
    return compile(source, filename, "exec")


# -- what test cells see ---------------------------------------------------------------------------

def trusted_context(source_nb) -> dict:
    """Run the import statements of the lesson's own (non-test, non-solution) cells, here: those that
    bind a name some test cell reads (a judge needs no plotting or widget library; star imports are
    always run)."""
    ns: dict = {"__name__": "judge", "__builtins__": builtins}
    read: set[str] = set()           # every name a test cell mentions, read, bound or deleted
    for cell in source_nb.cells:
        if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            try:
                tree = ast.parse(cell.source)
            except (SyntaxError, RecursionError, MemoryError, ValueError):
                read.add("*")            # a test cell the filter cannot read: every import is run
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Name):
                    read.add(node.id)
                elif isinstance(node, (ast.Global, ast.Nonlocal)):
                    read.update(node.names)

    def needed(node):
        """The import statement with only the names some test reads (None if none)."""
        names = [a for a in node.names if "*" in read or a.name == "*" or (a.asname or a.name).split(".")[0] in read]
        if not names:
            return None
        node.names = names
        return node

    for cell in source_nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade") or meta.get("solution"):
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        imports = [n for n in (needed(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))) if n]
        if imports:
            exec(compile(ast.Module(body=imports, type_ignores=[]), "<imports>", "exec"), ns)
    return ns


def free_names(source: str) -> list[str]:
    """Global names a test cell reads that it does not itself assign at top level."""
    return list(_free_names(source))


@functools.lru_cache(maxsize=512)
def _free_names(source: str) -> tuple[str, ...]:
    try:
        top = symtable.symtable(source, "<test>", "exec")
    except SyntaxError:
        return ()
    names: set[str] = set()

    def walk(table):
        for sym in table.get_symbols():
            if table.get_type() == "module":
                if sym.is_referenced() and not sym.is_assigned() and not sym.is_imported():
                    names.add(sym.get_name())
            elif sym.is_global() and sym.is_referenced():
                names.add(sym.get_name())
        for child in table.get_children():
            walk(child)

    walk(top)
    assigned = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    return tuple(sorted(names - assigned))


def solution_sources(nb) -> dict[str, str]:
    """Name -> source of the cell that defines it, for names defined in the student's solution cells."""
    out = {}
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            continue
        try:
            tree = ast.parse(cell.source)
        except (SyntaxError, RecursionError, MemoryError, ValueError):     # a cell nested too deeply reads as none
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out[node.name] = ast.get_source_segment(cell.source, node) or cell.source
    return out


SUSPICIOUS_CALLS = {
    ("gc", "get_objects"), ("gc", "get_referrers"), ("gc", "get_referents"), ("sys", "_getframe"),
    ("inspect", "currentframe"), ("inspect", "stack"), ("os", "kill"), ("os", "killpg"), ("os", "fork"),
    ("os", "system"), ("os", "getppid"), ("os", "setsid"), ("subprocess", "Popen"),
    ("subprocess", "run"), ("subprocess", "call"), ("subprocess", "check_output"), ("ctypes", "CDLL"),
    ("socket", "socket"), ("socket", "create_connection"), ("urllib", "request"), ("sys", "settrace"),
    ("sys", "setprofile"), ("builtins", "__import__"),
}
SUSPICIOUS_NAMES = {"get_ipython", "__builtins__", "ctypes", "input_transformers_post", "ast_transformers",
                    "input_transformers_cleanup", "sqlite3", "__code__", "__globals__", "f_back", "f_globals",
                    # the worker runs as __main__; operators and kernels of one's own run below the forbidden-call check
                    "__main__", "custom_op", "library", "Library", "register_kernel", "register_fake"}
PATCHABLE = {"torch", "F", "nn", "checks", "course", "math", "np", "numpy", "builtins", "sys", "os", "functional",
             "Tensor", "oracles", "masks"}


def suspicious(nb, source_nb=None) -> list[str]:
    """Things in the student's code that tamper with grading or reach outside (for a human to look at).

    Reported, not punished: the verdicts do not depend on any of it. Looks for: assignments to (or
    setattr on) attributes of torch, the course package, math, numpy, builtins, sys or os, under any
    alias; rebinding those names; frame walking, gc hunting, IPython transformers, signals, processes,
    sockets and ctypes. The lesson's own given and experiment cells (``source_nb``) are not the learner's
    code and are not reported (their imports still count, for the aliases they define).
    """
    from course.forbidden import given_cells

    given_sources, experiment_ids = given_cells(source_nb) if source_nb is not None else (set(), set())
    trees, unreadable = [], []
    patchable = set(PATCHABLE)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            read = _import_aliases(cell.source)
            if read == "syntax":
                continue
            if read == "unreadable":                              # Python itself cannot compile it either
                unreadable.append(f"cell {i}: code nested too deeply for the grader to read")
                continue
            patchable |= read
            if cell.source not in given_sources and cell.get("id") not in experiment_ids:
                trees.append((i, ast.parse(cell.source)))
    found = list(unreadable)
    for i, tree in trees:      # the grading machinery is not the learner's to import or reach
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    ("course.tools" in node.value or "tools.worker" in node.value):
                found.append(f"cell {i}: names the grader's code ({node.value[:40]!r})")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                if any(m and (m.startswith("course.tools") or (m == "course" and any(a.name == "tools" for a in node.names)))
                       for m in mods):
                    found.append(f"cell {i}: imports the grader's code")

    def base_name(t):
        while isinstance(t, (ast.Attribute, ast.Subscript)):
            t = t.value
        return t.id if isinstance(t, ast.Name) else None

    for i, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                    (node.value.id, node.attr) in SUSPICIOUS_CALLS:
                found.append(f"cell {i}: {node.value.id}.{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr in SUSPICIOUS_NAMES:
                found.append(f"cell {i}: .{node.attr}")
            elif isinstance(node, ast.Name) and node.id in SUSPICIOUS_NAMES:
                found.append(f"cell {i}: {node.id}")
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                for m in mods:
                    if m and (m.split(".")[0] in ("ctypes", "socket", "subprocess", "gc", "sqlite3", "urllib", "http",
                                                  "requests", "signal", "multiprocessing", "pty", "__main__")
                              or m.startswith("torch.library")):
                        found.append(f"cell {i}: import {m}")
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
                targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                for t in targets:
                    for sub in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                        b = base_name(sub)
                        if b in patchable and isinstance(sub, (ast.Attribute, ast.Subscript)):
                            found.append(f"cell {i}: assigns {ast.unparse(sub)}")
                        elif isinstance(sub, ast.Name) and sub.id in patchable and sub.id in PATCHABLE:
                            found.append(f"cell {i}: rebinds {sub.id}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") \
                    and node.args and base_name(node.args[0]) in patchable:
                found.append(f"cell {i}: {node.func.id}({ast.unparse(node.args[0])}, ...)")
    return list(dict.fromkeys(found))


def _import_aliases(source: str):
    """The names a cell's imports bind to torch, the course, numpy, math, builtins, sys, os or IPython
    (a frozenset), or "syntax" / "unreadable" (nested too deeply for Python's parser). Cached for cells
    of up to 16 000 characters: most cells are the lesson's own, the same in every submission, and a
    huge cell of one learner must not stay in the judge's memory for the next."""
    return _import_aliases_cached(source) if len(source) <= 16_000 else _read_import_aliases(source)


@functools.lru_cache(maxsize=1024)
def _import_aliases_cached(source: str):
    return _read_import_aliases(source)


def _read_import_aliases(source: str):
    roots = ("torch", "course", "numpy", "math", "builtins", "sys", "os", "IPython")
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "syntax"
    except (RecursionError, MemoryError, ValueError):
        return "unreadable"
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.split(".")[0] in roots}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in roots:
            names |= {a.asname or a.name for a in node.names}
    return frozenset(names)


# -- grading one submission -------------------------------------------------------------------------

# What course.forbidden.Guard and Worker.unforbid say when a learner's code went around the check (as opposed
# to calling a forbidden function): such a notebook is `suspicious` too.
_EVASIONS = ("started a thread or a process", "switched off or covered", "was removed while", "your code replaced",
             "took its data out of PyTorch", "another thread of your code was running", "its profile hook",
             "an operator defined by your code")


class _ForbidHook:
    def __init__(self, session_ref):
        self.session_ref = session_ref

    def __call__(self, names, why, limit=None):
        import contextlib

        @contextlib.contextmanager
        def hook():
            s = self.session_ref()
            s.request("forbid", names=list(names), why=why, limit=None if limit is None else int(limit))
            error = None
            try:
                yield
            except BaseException as exc:  # noqa: BLE001
                error = exc
            called = s.request("unforbid") if s.proc is not None and s.proc.poll() is None else []
            if isinstance(called, list) and called:
                evasions = [str(c)[:300] for c in called if any(m in str(c) for m in _EVASIONS)]
                if evasions and len(s.lies) < 5:        # reaching around the check, not a plain forbidden call
                    s.lies.append(f"went around the check of forbidden calls: {evasions[0]}")
                raise AssertionError(str(called[0])[:2000])
            if error is not None:
                raise error
        return hook()


def _aliases(nb, source, memo: dict | None = None) -> list[str]:
    """Forbidden functions of this lesson taken as values in the learner's cells (course.forbidden)."""
    from course import forbidden

    names = _memo(memo, "lesson_names", lambda: forbidden.lesson_names(source)) if memo is not None else \
        forbidden.lesson_names(source)
    return forbidden.aliases(nb, names, source)


def _message(exc: BaseException, timeout: int) -> str:
    if isinstance(exc, WorkerGone):
        if exc.timeout:
            return f"this cell ran past the time limit ({timeout} s) and was stopped (an infinite loop, or very slow code?)"
        return str(exc)
    if isinstance(exc, NameError):
        return f"{exc}: run (or fix) the cell that defines it"
    if isinstance(exc, AssertionError):
        text = str(exc).strip()
        return f"AssertionError: {text}" if text else "AssertionError (a check failed without a message)"
    text = str(exc).strip()
    name = type(exc).__name__
    return f"{name}: {text}" if text and not isinstance(exc, RemoteError) else (text or name)


class _Outputs:
    """What the feedback page shows of the learner's cells: checked data, capped per cell and per
    notebook. Cells that ran after a test cell show no output and only a builtin error's name: a
    submission that defeats the test's fork could have kept the test's hidden inputs and would print
    them there."""

    PER_CELL = 21_000           # the worker keeps 20 000 characters and says how many more there were
    PER_NOTEBOOK = 200_000

    def __init__(self):
        self.left = self.PER_NOTEBOOK

    def take(self, reply, *, after_a_test: bool) -> dict:
        if not isinstance(reply, dict):
            return {}
        out = reply.get("output") if isinstance(reply.get("output"), str) else ""
        err = reply.get("error") if isinstance(reply.get("error"), dict) else None
        error = None
        if err is not None:
            name = str(err.get("type", "Error"))
            name = name if name.isidentifier() and len(name) <= 60 else "Error"
            error = {"type": name, "message": _cap(err.get("message", ""), 2000)}
            if after_a_test:
                error = {"type": name if name in _BUILTIN_ERRORS else "Error",
                         "message": "(the message is not shown: this cell ran after a test cell)"}
        if after_a_test:
            note = "[output not shown: this cell ran after a test cell, and only outputs of cells before the first " \
                   "test reach this page]" if out else ""
            return {"output": note, "error": error}
        text = _cap(out, self.PER_CELL)
        if len(text) > self.left:
            text = text[:max(0, self.left)] + "\n... [this notebook's output is over the page's limit; the rest is not kept]"
        self.left -= len(text)
        if error is not None:
            self.left -= len(error["message"])
            if self.left < 0:
                error["message"] = "(not kept: over the page's limit)"
        return {"output": text, "error": error}


def grade_submission(spec: dict) -> dict:
    """Grade one notebook. ``spec``: notebook, source (the instructor's notebook), timeout, scratch_base,
    sandbox (bool), limits (dict), notebook_timeout. Returns a plain dict (see course.tools.grading)."""
    t0 = time.perf_counter()
    nb = nbformat.read(spec["notebook"], as_version=4)
    source, memo = _lesson_notebook(spec["source"])
    timeout = int(spec.get("timeout", 60))
    total_deadline = time.monotonic() + int(spec.get("notebook_timeout", 600))
    limits = sandbox.Limits(**spec.get("limits", {}))
    tests = {c.metadata.nbgrader.grade_id: c for c in source.cells
             if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")}
    experiments = {c.get("id") for c in source.cells if "experiment" in c.get("metadata", {}).get("tags", [])}
    context = _memo(memo, "context", lambda: trusted_context(source))
    defined_by_student = solution_sources(nb)
    session = Session(Path(spec["scratch_base"]), use_sandbox=bool(spec.get("sandbox", True)), limits=limits)
    session.files = list(spec.get("files", []))
    session.warm = [str(m) for m in spec.get("warm", [])]
    import weakref
    checks.FORBIDDEN_HOOK = _ForbidHook(weakref.ref(session))
    from course import forbidden
    checks.FORBIDDEN_TAMPERING = forbidden.tampering(nb, source)    # reaching around forbid() fails its tests
    outputs: dict[int, dict] = {}
    results: dict[str, dict] = {}
    executed: list[tuple[int, str]] = []
    events: list[str] = []
    pasted: list[str] = []
    tested = False
    only = set(spec["only_cells"]) if spec.get("only_cells") is not None else None   # see grading._only_cells
    fork = None                 # while test cells run: the stand-ins that existed before the fork
    runs = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and not (
        c.get("metadata", {}).get("nbgrader", {}).get("grade") or c.get("id") in experiments)]
    last_cell = max(runs, default=-1)          # after it, no learner cell runs: tests need no fork
    shown = _Outputs()
    restarts = 0
    phase = {"start": 0.0, "cells": 0.0, "tests": 0.0}

    def restart(reason: str):
        """A fresh worker with the learner's cells so far replayed. A sandbox that fails to start raises
        WorkerGone (the grader's failure); a replayed cell that dies again counts as one more stop, and
        more than MAX_RESTARTS stops raise Exhausted (the learner's)."""
        nonlocal restarts
        while True:
            session.stop(graceful=False)
            restarts += 1
            if restarts > MAX_RESTARTS:
                raise Exhausted(f"the notebook was stopped {restarts} times (it died or ran out of time again "
                                "after each restart); the remaining cells were not graded")
            s0 = time.perf_counter()
            session.start()
            phase["start"] += time.perf_counter() - s0
            try:
                for idx, src in executed:
                    session.deadline = min(time.monotonic() + timeout, total_deadline)
                    try:
                        session.request("cell", source=src, index=idx)
                    finally:
                        session.deadline = None
            except WorkerGone as exc:
                events.append(f"{'timeout' if exc.timeout else 'died'}: replaying cell {idx}")
                continue
            return

    def restart_or_stop(reason: str) -> bool:
        """``restart``; False when the notebook ends here (the event says whose failure it was)."""
        try:
            restart(reason)
            return True
        except Exhausted as exc:
            events.append(f"died too often: {exc}")
        except WorkerGone as exc:
            events.append(f"sandbox: {exc}")
        return False

    try:
        s0 = time.perf_counter()
        session.start()
        phase["start"] += time.perf_counter() - s0
        dead = False
        for idx, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or dead:
                continue
            meta = cell.get("metadata", {}).get("nbgrader", {})
            gid = meta.get("grade_id")
            if gid in tests and gid in results:   # a test cell pasted again: one verdict per test, its first
                pasted.append(f"cell {idx}: test cell {gid} pasted again (ignored)")
                continue
            if gid in tests and only is not None and gid not in only:
                results[gid] = {"passed": False, "message": _NOT_ASKED, "restart": None}
                continue
            if gid in tests:
                tested = True
                c0 = time.perf_counter()
                if fork is None and idx < last_cell:
                    try:
                        fork = _fork_for_tests(session, timeout)
                    except ProcessLimit as exc:
                        results[gid] = {"passed": False, "message": str(exc), "restart": None}
                        events.append(f"died: process limit reached (cell {idx}); the notebook was stopped there")
                        dead = True
                        continue
                    except WorkerGone as exc:
                        results[gid] = {"passed": False, "message": _message(exc, timeout),
                                        "restart": "timeout" if exc.timeout else "died"}
                if gid not in results:
                    if _WATCHDOG.out is not None:      # the judge's own work in this cell: bounded too
                        _WATCHDOG.arm(time.monotonic() + timeout * 1.5 + 2, gid, timeout, tests, results, nb)
                    try:
                        results[gid] = run_test(session, tests[gid], context, defined_by_student, timeout,
                                                total_deadline)
                    finally:
                        _WATCHDOG.disarm()
                phase["tests"] += time.perf_counter() - c0
                if results[gid].get("restart"):
                    fork = None
                    events.append(results[gid]["restart"])
                    dead = not restart_or_stop(results[gid]["restart"])
                continue
            if meta.get("grade") or cell.get("id") in experiments:
                continue
            c0 = time.perf_counter()
            try:
                if fork is not None:
                    fork, known = None, fork
                    _end_tests(session, known, timeout)
                session.deadline = min(time.monotonic() + timeout, total_deadline)
                reply = session.request("cell", source=cell.source, index=idx)
                outputs[idx] = shown.take(reply, after_a_test=tested)
                executed.append((idx, cell.source))
            except WorkerGone as exc:
                what = "timeout" if exc.timeout else "died"
                outputs[idx] = {"output": "", "error": {"type": "CellTimeoutError" if exc.timeout else "DeadKernel",
                                                        "message": _message(exc, timeout)}}
                events.append(f"{what}: cell {idx}")
                dead = not restart_or_stop(what)
            finally:
                session.deadline = None
                phase["cells"] += time.perf_counter() - c0
    except WorkerGone as exc:
        events.append(f"sandbox: {exc}")
    finally:
        session.stop(graceful=True)
        session.close()
        checks.FORBIDDEN_HOOK = None
        tampering, checks.FORBIDDEN_TAMPERING = checks.FORBIDDEN_TAMPERING, []
    cells = _cells(tests, results, nb)
    if session.left_behind > 2000:
        pasted.append(f"left {session.left_behind} files and folders in the sandbox (removed)")
    found = list(dict.fromkeys(pasted + session.lies + suspicious(nb, source) + tampering + _aliases(nb, source, memo)))
    result = {"cells": cells, "outputs": {str(k): v for k, v in outputs.items()}, "events": events[:50],
              "suspicious": found[:50], "phases": {k: round(v, 3) for k, v in phase.items()}}
    if spec.get("release"):
        # The pages are rendered here, in parallel judge processes, not in the grader's one process.
        from course.tools import grading as G

        f0 = time.perf_counter()
        release, _ = _lesson_notebook(spec["release"])
        try:
            result["autograded"] = nbformat.writes(G._graded_notebook(nb, source, release, result, for_student=False))
            result["feedback_html"] = G.render_feedback(G._graded_notebook(nb, source, release, result, for_student=True),
                                                        G._hidden_lines(source, release))
        except Exception as exc:  # noqa: BLE001 - feedback is a courtesy; never lose the grade over it
            result["feedback_error"] = f"{type(exc).__name__}: {exc}"
        result["phases"]["feedback"] = round(time.perf_counter() - f0, 3)
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result


_NOT_ASKED = "not graded: this run grades only the test cells named in $COURSE_GRADE_ONLY_CELLS"


def _cells(tests: dict, results: dict, nb) -> list[dict]:
    cells = []
    for gid, cell in tests.items():
        max_pts = float(cell.metadata.nbgrader.get("points", 0))
        r = results.get(gid)
        if r is None:
            present = any(c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == gid for c in nb.cells)
            msg = "not graded: the notebook was stopped before this cell" if present else \
                "this test cell was deleted from the submission"
            cells.append({"grade_id": gid, "points": 0.0, "max_points": max_pts, "passed": False, "message": msg,
                          "deleted": not present})
        else:
            cells.append({"grade_id": gid, "points": max_pts if r["passed"] else 0.0, "max_points": max_pts,
                          "passed": r["passed"], "message": r["message"], "deleted": False})
    return cells


class _Watchdog:
    """A deadline on the judge's own work in a test cell (its checks and oracles on the learner's answers,
    e.g. attention over a huge tensor the learner returned), which no Python signal can interrupt inside
    a C kernel: a thread watches the clock, and past the cell's limit writes the submission's verdict
    (that cell: timeout, 0; later cells: not graded) on the result channel and ends this judge process
    (its sandboxes die with it); the grader starts a fresh judge for the next submission."""

    def __init__(self):
        import threading

        self.lock = threading.Lock()
        self.armed = None        # (deadline, gid, limit, tests, results, nb) while a test cell runs here
        self.out = None          # the result channel (set by main())

    def arm(self, deadline, gid, limit, tests, results, nb):
        with self.lock:
            self.armed = (deadline, gid, limit, tests, results, nb)

    def disarm(self):
        with self.lock:
            self.armed = None

    def start(self, out):
        import threading

        self.out = out
        threading.Thread(target=self._watch, daemon=True, name="judge-watchdog").start()

    def _watch(self):
        import json

        while True:
            time.sleep(0.25)
            with self.lock:
                if self.armed is None or time.monotonic() < self.armed[0]:
                    continue
                deadline, gid, limit, tests, results, nb = self.armed
                results = dict(results)
                results[gid] = {"passed": False, "message": f"this test ran past the time limit ({limit} s) and was "
                                                           "stopped (the checks on your answers took too long: an "
                                                           "answer much larger than the test asked for?)"}
                verdict = {"cells": _cells(tests, results, nb), "outputs": {},
                           "events": [f"timeout: test cell {gid} (checking its answers ran past the limit)"],
                           "suspicious": [], "phases": {}, "judge_exits": True}
                try:
                    self.out.write(json.dumps(verdict) + "\n")
                    self.out.flush()
                finally:
                    try:
                        _ZYGOTE.kill()
                    finally:
                        os._exit(3)


_WATCHDOG = _Watchdog()


def _hidden_block_lines(src: str) -> set[int]:
    """Line numbers (1-based) between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``."""
    lines, inside = set(), False
    for number, line in enumerate(src.splitlines(), 1):
        if "### BEGIN HIDDEN TESTS" in line:
            inside = True
        elif "### END HIDDEN TESTS" in line:
            inside = False
        elif inside:
            lines.add(number)
    return lines


def run_test(session: Session, cell, context: dict, student_defs: dict, timeout: int, total_deadline: float) -> dict:
    """Run one test cell's trusted code here, the learner's names as stand-ins. Returns its verdict.
    (It talks to a fork of the worker, made by :func:`grade_submission` before it.)"""
    src = cell.source
    ns = dict(context)
    ns.update(getattr(session, "test_defs", {}))
    torch.manual_seed(0)
    random.seed(0)
    try:
        import numpy as np
        np.random.seed(0)
    except ImportError:  # pragma: no cover
        pass
    session.deadline = min(time.monotonic() + timeout, total_deadline)
    filename = f"<test {cell.metadata.nbgrader.grade_id}>"
    session.hidden_lines = (filename, _hidden_block_lines(src))
    injected = []
    try:
        for name in free_names(src):
            if name in ns or hasattr(builtins, name):
                continue
            value = session.request("global", name=name)
            if value is _MISSING:
                continue
            if isinstance(value, Remote) or type(value) is Remote:
                if name in student_defs:
                    object.__getattribute__(value, "_r_extra")["__course_source__"] = student_defs[name]
            ns[name] = value
            injected.append(name)
        before = {k: ns[k] for k in injected}
        code = _compiled(src, filename)
        with torch.random.fork_rng(devices=[]):
            exec(code, ns)
        passed, message, restart = True, "", None
    except WorkerGone as exc:
        passed, restart = False, "timeout" if exc.timeout else "died"
        message = _message(exc, timeout) + (_threads_hint(session) if exc.timeout else "")
    except BaseException as exc:  # noqa: BLE001 - any exception is a failed test
        if isinstance(exc, (KeyboardInterrupt, SystemExit)) and not isinstance(exc, SystemExit):
            raise
        passed, message, restart = False, _message(exc, timeout), None
    session.deadline = None
    if session.hidden_lines[1]:
        session.fork_saw_hidden = True
    session.hidden_lines = None
    # Names the test cell defined stay for later test cells (like a notebook); stand-ins do not (they
    # live in the test's fork).
    keep = getattr(session, "test_defs", {})
    for k, v in ns.items():
        if k in context or k.startswith("__"):
            continue
        if k in injected and before_same(ns, k, locals().get("before", {})):
            continue
        if isinstance(v, Remote) or type(v) is Remote:
            continue
        keep[k] = v
    session.test_defs = keep
    return {"passed": passed, "message": _cap(message, 3000), "restart": restart}


def _fork_for_tests(session: Session, timeout: int) -> set:
    """Before a run of test cells: the worker forks, and the tests talk to the fork, which ends
    before the learner's next cell runs. What the tests send (hidden inputs included) does not survive
    into later cells. Returns the stand-ins that existed before."""
    session.deadline = time.monotonic() + timeout
    try:
        if session.request("test-begin") != "forked":
            raise WorkerGone("the sandbox broke the grading protocol (no fork for the tests)")
    except RemoteError as exc:
        if not str(exc).startswith("NoFork"):
            raise WorkerGone("the sandbox broke the grading protocol (no fork for the tests)") from None
        # Believed only to the claimant's cost: it ends this notebook's grading, nobody else's.
        raise ProcessLimit(f"your code holds every process and thread it may start (the limit is "
                           f"{session.limits.processes}), so the tests could not start (each runs in a process of "
                           "its own); the rest of the notebook was not graded. End the threads and processes your "
                           "code starts.") from None
    finally:
        session.deadline = None
    session.fork_saw_hidden = False        # a fresh fork: no hidden input has reached it yet
    threads = getattr(session, "last_reply", {}).get("threads")      # the worker's word: a hint, nothing more
    session.fork_threads = threads if type(threads) is int and 0 < threads < 100_000 else 0
    return set(session.proxies)


def _threads_hint(session) -> str:
    """Why a test may time out where the notebook does not: the threads the learner's code had started."""
    n = getattr(session, "fork_threads", 0)
    if not n:
        return ""
    return (f" Your code had started {n} thread{'s' if n > 1 else ''} before these tests (a thread pool, an event "
            "loop's executor, a background worker...). Tests call your functions in a copy of your process made "
            "by fork, which has none of those threads, so work handed to them never ends there: start such "
            "threads inside the function that uses them, or do the work without them.")


def _end_tests(session: Session, known: set, timeout: int) -> None:
    session.deadline = time.monotonic() + timeout
    try:
        if session.request("test-end") != "ended":
            raise WorkerGone("the sandbox broke the grading protocol (the tests' fork did not end)")
    finally:
        session.deadline = None
        session.proxies = {k: v for k, v in session.proxies.items() if k in known}


def _cap(text, n: int) -> str:
    text = str(text)
    return text if len(text) <= n else text[:n] + f" ... [{len(text) - n} more characters]"


def before_same(ns, k, before) -> bool:
    return k in before and ns.get(k) is before[k]


JUDGE_MEMORY_MB = 6144     # address space of a judge: what one submission's answers can make it hold


_PARENT: int | None = None      # set by _become_judge: the fork server, known from before the fork


def _guard_self() -> None:
    """Die with the grader (or fork server) that started this judge (its sandbox dies with it:
    bubblewrap runs with --die-with-parent), and hold the judge's own memory to a limit."""
    import resource

    try:
        import ctypes

        parent = _PARENT if _PARENT is not None else os.getppid()
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)     # PR_SET_PDEATHSIG
        if os.getppid() != parent:                                    # the parent went before that
            os._exit(1)
    except (OSError, AttributeError):
        pass
    limit = int(os.environ.get("COURSE_JUDGE_MEMORY_MB", JUDGE_MEMORY_MB)) * 2**20
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        pass


def main() -> None:
    """Serve grading requests as JSON lines on stdin/stdout (used by ``course grade --jobs``)."""
    import json
    import sys

    _guard_self()
    torch.set_num_threads(1)
    # Results go on a private copy of stdout; fd 1 (and sys.stdout) point at stderr, so that whatever else
    # prints while tests run (a library, a test cell) cannot corrupt the result channel.
    sys.stdout.flush()
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _WATCHDOG.start(results)
    for line in sys.stdin:
        spec = json.loads(line)
        try:
            result = grade_submission(spec)
        except Exception as exc:  # noqa: BLE001 - reported, the batch goes on
            result = {"error": f"{type(exc).__name__}: {exc}"}
        with _WATCHDOG.lock:
            results.write(json.dumps(result) + "\n")
            results.flush()
    _ZYGOTE.kill()
    # Everything is written and flushed. Skip the interpreter's own clean-up: with torch loaded it took
    # 0.3-8 s per judge (more on a busy machine), paid at the end of every batch.
    sys.stderr.flush()
    os._exit(0)


# -- the judges' fork server --------------------------------------------------------------------------

def _warm_up(sources) -> None:
    """What every judge needs and would otherwise load for its first submission: for each lesson's
    instructor notebook (``sources``), the parsed notebook, its test cells' context (their imports),
    compiled test cells and forbidden names; then the grading module and the feedback page's templates."""
    from course import forbidden

    for path in sources:
        try:
            nb, memo = _lesson_notebook(path)
            _memo(memo, "context", lambda: trusted_context(nb))
            _memo(memo, "lesson_names", lambda: forbidden.lesson_names(nb))
            for cell in nb.cells:
                gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
                    _free_names(cell.source)
                    _compiled(cell.source, f"<test {gid}>")
        except Exception:  # noqa: BLE001 - a judge that needs it reports the failure itself
            pass
    try:
        from course.tools import grading as G

        page = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# warm"), nbformat.v4.new_code_cell("x = 1")])
        page.metadata["language_info"] = {"name": "python"}
        G.render_feedback(page, set())
    except Exception:  # noqa: BLE001 - an optimisation only
        pass


def serve_forks(ctrl_fd: int) -> None:
    """Fork judges from one warm process (``course grade`` starts it: ``--forks=FD --slots=N``).

    The grader's judges would each import PyTorch, nbformat, the test cells' context and the feedback
    templates (3-5 CPU-seconds each); this process does it once and forks a judge per request. The
    warm sandboxes were launched before those imports (``_EARLY_MANY``, one host uid each), so they
    import their own libraries meanwhile; the first judge of each slot adopts one (:class:`_Foster`).
    Requests on ``ctrl_fd`` (a Unix socket): JSON ``{"op": "fork", "slot": k}`` with two descriptors,
    the judge's stdin and stdout; the answer is ``{"ev": "forked", "pid": ...}`` with a pidfd of the
    judge. A judge is a session of its own and dies with this process, which dies with the grader; when
    a judge ends, the sandbox it adopted is killed. EOF on the socket ends everything."""
    import json
    import socket

    _guard_self()
    torch.set_num_threads(1)
    try:
        sources = json.loads(os.environ.pop("COURSE_JUDGE_SOURCES", "[]"))
    except ValueError:
        sources = []
    _warm_up([str(p) for p in sources] if isinstance(sources, list) else [])
    sys.stdout.flush()                          # nothing buffered here may reach a judge's result pipe
    sys.stderr.flush()
    ctrl = socket.socket(fileno=ctrl_fd)
    ahead = []                                  # sandboxes not yet adopted, one per slot, with a pidfd each
    for early in _EARLY_MANY:
        try:                                    # opened now, while the process is surely ours (unreaped)
            ahead.append((early, os.pidfd_open(early[1][0].pid)))
        except (OSError, AttributeError):       # no pidfds here: the judges start their own sandboxes
            _terminate(early[1][0])
            early[1][1].close()
            sandbox.remove_scratch(early[1][2])
    judges: dict[int, subprocess.Popen | None] = {}   # judge pid -> the sandbox it adopted (None: none)
    sandboxes = [early[1][0] for early, _ in ahead]   # every sandbox launched here, until reaped

    def reap():
        # Only this process's own children, by pid: never waitpid(-1), which would reap a sandbox behind
        # its Popen's back and leave a pid that the system may give to another process.
        for pid in list(judges):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done == pid:
                proc = judges.pop(pid)
                if proc is not None:
                    _terminate(proc)            # the judge's sandbox ends with it
        for proc in list(sandboxes):
            if proc.poll() is not None:
                sandboxes.remove(proc)

    while True:
        ready = select.select([ctrl], [], [], 0.5)[0]
        reap()
        if not ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(ctrl, 1 << 16, 2)
            req = json.loads(data) if data else None
        except (OSError, ValueError):
            req, fds = None, []
        if not isinstance(req, dict) or req.get("op") != "fork" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            if req is None:
                break                              # the grader is done (or gone)
            continue
        slot = int(req.get("slot", 0))
        early, pidfd = ahead[slot] if 0 <= slot < len(ahead) and ahead[slot] is not None else (None, None)
        if early is not None:
            ahead[slot] = None
        server = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                _become_judge(ctrl, fds, early, pidfd, [a for a in ahead if a is not None], server)
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        judges[pid] = None
        if early is not None:
            os.close(pidfd)
            early[1][1].close()                    # the judge holds the sandbox's control socket alone
            judges[pid] = early[1][0]
        try:
            judge_fd = os.pidfd_open(pid)
            socket.send_fds(ctrl, [json.dumps({"ev": "forked", "pid": pid, "slot": slot}).encode()], [judge_fd])
            os.close(judge_fd)
        except OSError:
            os.kill(pid, signal.SIGKILL)
            break
    for proc in judges.values():               # judges die with this process (their parent-death signal)
        if proc is not None:
            _terminate(proc)
    for item in ahead:
        if item is not None:
            _terminate(item[0][1][0])
            sandbox.remove_scratch(item[0][1][2])
    os._exit(0)


def _become_judge(ctrl, fds, early, pidfd, others, server: int) -> None:
    """In a process just forked by :func:`serve_forks`: become an ordinary judge on the two descriptors."""
    global _EARLY, _PARENT
    import io

    _PARENT = server
    ctrl.close()
    for other, other_pidfd in others:            # the other judges' sandboxes are none of this one's business
        other[1][1].close()
        os.close(other_pidfd)
    os.setsid()
    os.dup2(fds[0], 0)
    os.dup2(fds[1], 1)
    for fd in fds:
        os.close(fd)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    sandbox.sandbox_uid.cache_clear()           # a uid of this judge's own for the sandboxes it starts
    if early is not None:
        key, (proc, sock, inbox) = early
        _EARLY = (key, (_Foster(proc.pid, pidfd), sock, inbox))
    main()


if __name__ == "__main__":
    if _FORKS:
        serve_forks(int(_FORKS[0]))
    else:
        main()

"""The sandboxed side of grading: runs one student's notebook cells and answers the judge.

Started by :mod:`course.tools.judge` inside the sandbox (``python -m course.tools.worker``), with
requests on stdin and answers on stdout (see :mod:`course.tools.wire`). Everything here runs as the
student's code does: nothing it says is trusted. It decides no verdict; it only executes cells and
calls, and sends back what they returned.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import time
import traceback

OUTPUT_LIMIT = 20_000      # characters of printed output kept per cell


class _Capped(io.TextIOBase):
    """A text stream that keeps the first ``limit`` characters and counts the rest."""

    def __init__(self, limit: int):
        self.limit, self.parts, self.size, self.dropped = limit, [], 0, 0

    def writable(self):
        return True

    def write(self, s):
        s = str(s)
        room = self.limit - self.size
        if room > 0:
            self.parts.append(s[:room])
            self.size += min(len(s), room)
        self.dropped += max(0, len(s) - max(room, 0))
        return len(s)

    def text(self):
        out = "".join(self.parts)
        return out + (f"\n... [{self.dropped} more characters of output not kept]" if self.dropped else "")


class _NoIPython:
    """What ``get_ipython()`` returns when a cell uses a magic: magics are skipped under grading."""

    def run_line_magic(self, *a, **k):
        return None

    run_cell_magic = system = getoutput = run_line_magic


def _compile(source: str, name: str):
    try:
        return compile(source, name, "exec")
    except SyntaxError:
        try:
            from IPython.core.inputtransformer2 import TransformerManager
        except ImportError:
            raise
        return compile(TransformerManager().transform_cell(source), name, "exec")


class _Exit(BaseException):
    """The judge is done with this submission."""


class Worker:
    def __init__(self, rfd: int, wfd: int):
        from course.tools import wire

        self.wire = wire
        self.rfd, self.wfd = rfd, wfd
        self.ns: dict = {"__name__": "__main__", "__builtins__": __builtins__, "get_ipython": _NoIPython}
        self.objects: dict[int, object] = {}
        self.ids: dict[int, int] = {}
        self.forbidden: list = []
        self.violations: list[str] = []

    # -- handles ------------------------------------------------------------------------------
    def handle_of(self, obj):
        key = id(obj)
        hid = self.ids.get(key)
        if hid is None or self.objects.get(hid) is not obj:
            hid = len(self.objects) + 1
            self.objects[hid] = obj
            self.ids[key] = hid
        cls = obj if isinstance(obj, type) else type(obj)
        mro = [[c.__module__, c.__qualname__] for c in getattr(cls, "__mro__", (cls,))][:20]
        return hid, {"mro": mro, "callable": callable(obj), "is_class": isinstance(obj, type),
                     "name": str(getattr(obj, "__name__", ""))[:100]}

    def resolve(self, v):
        from course.tools.wire import Handle

        if isinstance(v, Handle):
            return self.objects[v.id]
        if type(v) in (list, tuple):
            return type(v)(self.resolve(x) for x in v)
        if type(v) is dict:
            return {k: self.resolve(x) for k, x in v.items()}
        return v

    def answer(self, value):
        import types

        if isinstance(value, (types.GeneratorType, type({}.items()), type({}.keys()), type({}.values()))):
            value = list(value)[:100_000]
        return {"ok": True, "value": value}

    # -- forbidden shortcuts ------------------------------------------------------------------
    # The pieces the forbidden-call check runs on, as they were before any learner's code ran (the
    # worker is imported first): a learner's code that replaces one of them is reported at unforbid.
    @staticmethod
    def _integrity():
        from course import checks, forbidden

        return {"course.forbidden.Guard.__enter__": forbidden.Guard.__dict__.get("__enter__"),
                "course.forbidden.Guard.__exit__": forbidden.Guard.__dict__.get("__exit__"),
                "course.forbidden.Guard.refuse": forbidden.Guard.__dict__.get("refuse"),
                "course.forbidden._Kernels.__torch_dispatch__": forbidden._Kernels.__dict__.get("__torch_dispatch__"),
                "course.forbidden._Functions.__torch_function__": forbidden._Functions.__dict__.get("__torch_function__"),
                "course.checks._targets": checks.__dict__.get("_targets"),
                "course.forbidden.Guard": forbidden.__dict__.get("Guard"),
                "Worker.forbid": Worker.__dict__.get("forbid"), "Worker.unforbid": Worker.__dict__.get("unforbid")}

    def forbid(self, names, why, limit=None):
        """Block the forbidden names (attribute patches) and, below them, every call of those functions
        and of their ATen kernels, and any tensor above ``limit`` elements (:class:`course.forbidden.Guard`),
        until :meth:`unforbid`."""
        from course import checks, forbidden

        saved = []
        for owner, attr in checks._targets(tuple(names)):
            try:
                original = owner.__dict__[attr] if attr in owner.__dict__ else getattr(owner, attr)
                qual = f"{getattr(owner, '__name__', 'torch')}.{attr}"

                def blocked(*a, _q=qual, **k):
                    self.violations.append(f"your code called {_q}: this exercise asks you to {why}.")
                    raise AssertionError(f"{_q} was called: this exercise asks you to {why}.")
                setattr(owner, attr, blocked)
                saved.append((owner, attr, original))
            except (AttributeError, TypeError):
                continue
        original = _PRISTINE or {}
        cls = original.get("course.forbidden.Guard") or forbidden.Guard
        guard = cls(names, why, None if limit is None else int(limit))
        (original.get("course.forbidden.Guard.__enter__") or cls.__enter__)(guard)
        self.forbidden.append((saved, guard))

    def unforbid(self):
        """End the innermost :meth:`forbid`; returns what was violated meanwhile (sentences)."""
        saved, guard = self.forbidden.pop() if self.forbidden else ([], None)
        pristine = _PRISTINE or {}
        if guard is not None:
            (pristine.get("course.forbidden.Guard.__exit__") or type(guard).__exit__)(guard, None, None, None)
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)
        changed = [k for k, v in self._integrity().items() if pristine and pristine.get(k) is not v]
        tampered = [f"your code replaced {', '.join(changed[:3])}, part of the check of forbidden calls: a notebook "
                    "that switches the check off fails the tests that use it."] if changed else []
        found = tampered + self.violations + (guard.violations if guard is not None else [])
        self.violations = []
        return list(dict.fromkeys(found))[:20]

    # -- requests -----------------------------------------------------------------------------
    def run_cell(self, source: str, index: int):
        out = _Capped(OUTPUT_LIMIT)
        start = time.perf_counter()
        error = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                exec(_compile(source, f"<cell {index}>"), self.ns)
            except BaseException as exc:  # noqa: BLE001 - the student's error, reported as data
                if isinstance(exc, SystemExit) and False:  # pragma: no cover
                    pass
                tb = traceback.extract_tb(exc.__traceback__)
                line = next((f.lineno for f in reversed(tb) if f.filename == f"<cell {index}>"), None)
                error = {"type": type(exc).__name__, "message": str(exc)[:2000], "line": line}
        return {"ok": True, "value": {"output": out.text(), "error": error,
                                      "seconds": round(time.perf_counter() - start, 3)}}

    def handle(self, req: dict):
        import torch

        op = req["op"]
        if op == "cell":
            return self.run_cell(req["source"], req["index"])
        if op == "global":
            name = req["name"]
            if name not in self.ns:
                return {"ok": True, "missing": True}
            return self.answer(self.ns[name])
        if op == "forbid":
            self.forbid(req["names"], req["why"], req.get("limit"))
            return {"ok": True, "value": None}
        if op == "unforbid":
            return {"ok": True, "value": self.unforbid()}
        if op == "exit":
            raise _Exit()
        obj = self.objects[req["h"]] if "h" in req else None
        with torch.set_grad_enabled(bool(req.get("grad", True))), contextlib.redirect_stdout(_Capped(0)), \
                contextlib.redirect_stderr(_Capped(0)):
            if op == "getattr":
                return self.answer(getattr(obj, req["name"]))
            if op == "setattr":
                setattr(obj, req["name"], self.resolve(req["value"]))
                return {"ok": True, "value": None}
            if op == "call":
                return self.answer(obj(*self.resolve(req["args"]), **self.resolve(req["kwargs"])))
            if op == "getitem":
                return self.answer(obj[self.resolve(req["key"])])
            if op == "setitem":
                obj[self.resolve(req["key"])] = self.resolve(req["value"])
                return {"ok": True, "value": None}
            if op == "len":
                return {"ok": True, "value": int(len(obj))}
            if op == "iter":
                return self.answer(list(iter(obj))[:100_000])
            if op == "contains":
                return {"ok": True, "value": bool(self.resolve(req["item"]) in obj)}
            if op == "bool":
                return {"ok": True, "value": bool(obj)}
            if op == "repr":
                return {"ok": True, "value": repr(obj)[:2000]}
        raise ValueError(f"unknown request {op!r}")

    def serve(self):
        wire = self.wire
        self.send({"ok": True, "value": "ready"})
        while True:
            try:
                req = wire.decode_request(wire.recv(self.rfd))
            except wire.WireError:
                return
            try:
                reply = self.handle(req)
            except _Exit:
                return
            except BaseException as exc:  # noqa: BLE001 - reported to the judge as the student's error
                reply = {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)[:2000]}}
            self.send(reply)

    def send(self, reply):
        wire = self.wire
        try:
            payload = wire.encode_data(reply, self.handle_of)
        except BaseException as exc:  # noqa: BLE001 - e.g. a value that cannot be sent
            payload = wire.encode_data({"ok": False, "error": {"type": type(exc).__name__,
                                                                "message": f"the answer could not be sent: {exc}"[:500]}},
                                       self.handle_of)
        if len(payload) > wire.MAX_MESSAGE:
            payload = wire.encode_data({"ok": False, "error": {"type": "MemoryError",
                                                                "message": "the answer is too large to send"}}, self.handle_of)
        wire.send(self.wfd, payload)


_PRISTINE: dict = {}       # Worker._integrity() taken at start, before any learner's code ran

SCRATCH = ("/sandbox/work", "/tmp", "/sandbox/home")


def _sweep() -> None:
    """Kill every other process of the sandbox and reap them (called by the zygote, PID 1)."""
    import signal

    for _ in range(50):
        try:
            os.kill(-1, signal.SIGKILL)          # from PID 1: every process in the namespace but itself
        except ProcessLookupError:
            pass
        try:
            while os.waitpid(-1, os.WNOHANG) != (0, 0):
                pass
        except ChildProcessError:
            return
        time.sleep(0.01)


def _wipe() -> None:
    """Empty the scratch folders, whatever the last submission did to their permissions."""
    import shutil

    def force(func, path, _):
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            func(path)
        except OSError:
            pass

    for top in SCRATCH:
        if not os.path.isdir(top):
            continue
        os.chmod(top, 0o700)
        for name in os.listdir(top):
            path = os.path.join(top, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, onerror=force)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass


def _zygote(rfd: int, wfd: int) -> None:
    """Serve many submissions from one warm sandbox: fork a fresh worker for each.

    Runs as PID 1 of the sandbox's namespace, so no submission can signal it, and non-dumpable, so
    none can read or write its memory. Between two submissions every other process is killed and
    the scratch folders are emptied; only then does it answer "ready" again.
    """
    from course.tools import wire

    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None)
        libc.prctl(4, 0, 0, 0, 0)                    # PR_SET_DUMPABLE = 0: nobody reads our memory
        # Die with bubblewrap's process outside (the judge kills it): dropping to the sandbox user
        # cleared the parent-death signal bubblewrap had set, so set it again.
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    ready = wire.encode_data({"ok": True, "value": "zygote-ready"}, lambda o: (0, {}))
    wire.send(wfd, ready)
    while True:
        try:
            req = wire.decode_request(wire.recv(rfd))
        except wire.WireError:
            return
        if req.get("op") != "fork":
            return
        pid = os.fork()
        if pid == 0:
            try:
                os.chdir("/sandbox/work")
                Worker(rfd, wfd).serve()
            finally:
                os._exit(0)
        # Wait for the worker, but end everything the moment the judge goes away (its end of the pipe
        # closes: it killed this sandbox, or died). As PID 1, our exit takes every process with it.
        import select

        watch = select.poll()
        watch.register(rfd, 0)                       # POLLHUP / POLLERR are always reported
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done == pid:
                break
            if any(ev & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, ev in watch.poll(100)):
                _sweep()
                os._exit(0)
        _sweep()
        _wipe()
        wire.send(wfd, ready)


def _warm(lists: list[str]) -> None:
    """Import the modules the lessons import (named by the judge from the instructor's notebooks), so
    that each forked worker finds them loaded. One that fails is left for the notebook to report."""
    import importlib

    for name in (n for names in lists for n in names.split(",") if n):
        try:
            module = importlib.import_module(name)
            for extra in getattr(module, "WARM_IMPORTS", ()):    # what the module imports when used
                importlib.import_module(extra)
        except Exception:  # noqa: BLE001 - the submission's own import says what is wrong
            pass


def main() -> None:
    # The protocol keeps private copies of stdin/stdout; the student's code gets /dev/null for both
    # file descriptors (Python-level prints are captured per cell).
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.stdin = open(os.devnull)
    sys.stdout = sys.stderr = _Capped(0)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401 - warm imports, so cells start fast
    import torch
    import torch.nn  # noqa: F401
    torch.set_num_threads(1)
    import course  # noqa: F401
    from course import checks  # noqa: F401
    _PRISTINE.update(Worker._integrity())
    _warm([a.split("=", 1)[1] for a in sys.argv if a.startswith("--warm=")])
    if "--zygote" in sys.argv and os.getpid() == 1:
        _zygote(rfd, wfd)
    else:
        Worker(rfd, wfd).serve()


if __name__ == "__main__":
    main()

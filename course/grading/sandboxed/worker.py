"""The sandboxed side of grading: runs one student's notebook cells and answers the judge.

Started by :mod:`course.grading.judge` inside the sandbox (``python -m course.grading.sandboxed.worker``), with
requests on stdin and answers on stdout (see :mod:`course.grading.sandboxed.wire`). Everything here runs as the
student's code does: nothing it says is trusted. It decides no verdict; it only executes cells and
calls, and sends back what they returned.
"""

from __future__ import annotations

import stat
import builtins
import contextlib
import gc
import io
import os
import sys
import time
import traceback
from collections import OrderedDict as _OrderedDict

from course.grading.sandboxed import ops, zygote
from course.grading.sandboxed.ops import ATOMS
from course.grading.sandboxed.wire import WorkerOp, WorkerRefusal
from course.grading.sandboxed import wire
from course.grading.sandboxed.wire import Handle

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
            # lazy: only for a cell that is not Python (IPython's magics): a second to import
            from IPython.core.inputtransformer2 import TransformerManager
        except ImportError:
            raise
        return compile(TransformerManager().transform_cell(source), name, "exec")


class _Exit(BaseException):
    """The judge is done with this submission."""


class _NoFork(Exception):
    """The test's fork could not start (the sandbox's process limit is reached)."""



class Worker:
    def __init__(self, rfd: int, wfd: int):
        self.wire = wire
        self.rfd, self.wfd = rfd, wfd
        self.ns: dict = {"__name__": "__main__", "__builtins__": __builtins__, "get_ipython": _NoIPython}
        global _LEARNER_NS
        _LEARNER_NS = self.ns
        self.objects: dict[int, object] = {}
        self.ids: dict[int, int] = {}
        self.next_id = 0
        self.forbidden: list = []
        self.violations: list[str] = []
        self._held = ({}, {}, Worker._integrity)     # serve() replaces it with its snapshot
        self._last_call = None       # inside a seeing block: the last call's tensors and containers
        threading = sys.modules.get("threading")
        self.threads_before = threading.active_count() if threading else 1   # the worker's own, before any cell
        self.threads_at_fork = 0

    # -- handles ------------------------------------------------------------------------------
    def handle_of(self, obj):
        key = id(obj)
        hid = self.ids.get(key)
        if hid is None or self.objects.get(hid) is not obj:
            self.next_id += 1
            hid = self.next_id
            self.objects[hid] = obj
            self.ids[key] = hid
        cls = obj if isinstance(obj, type) else type(obj)
        mro = [[c.__module__, c.__qualname__] for c in getattr(cls, "__mro__", (cls,))][:20]
        return hid, {"mro": mro, "callable": callable(obj), "is_class": isinstance(obj, type),
                     "name": str(getattr(obj, "__name__", ""))[:100]}

    def resolve(self, v):
        if type(v) in ATOMS:
            return v
        if isinstance(v, Handle):
            return self.objects[v.id]
        if type(v) is list:
            return [self.resolve(x) for x in v]
        if type(v) is tuple:
            return tuple([self.resolve(x) for x in v])
        if type(v) is dict:
            return {k: self.resolve(x) for k, x in v.items()}
        if type(v) is _OrderedDict:
            return _OrderedDict((k, self.resolve(x)) for k, x in v.items())
        return v

    def answer(self, value):
        # lazy: after main() has redirected the streams
        import types

        if isinstance(value, (types.GeneratorType, type({}.items()), type({}.keys()), type({}.values()))):
            value = list(value)[:100_000]
        return {"ok": True, "value": value}

    # -- forbidden shortcuts ------------------------------------------------------------------
    # The pieces the forbidden-call check runs on, as they were before any learner's code ran (the
    # worker is imported first): a learner's code that replaces one of them is reported at unforbid.
    @staticmethod
    def _integrity():
        # lazy: the course's library is imported by main() after it has redirected the worker's streams
        from course import checks, forbidden

        return {**forbidden.integrity_pieces(),
                "course.forbidden.integrity_pieces": forbidden.__dict__.get("integrity_pieces"),
                "course.checks.forbidden_targets": checks.__dict__.get("forbidden_targets"),
                "Worker.forbid": Worker.__dict__.get("forbid"), "Worker.unforbid": Worker.__dict__.get("unforbid"),
                "Worker.watched": Worker.__dict__.get("watched"), "Worker.call": Worker.__dict__.get("call"),
                "Worker._integrity": getattr(Worker.__dict__.get("_integrity"), "__func__", None),
                "worker._replaced": globals().get("_replaced"), "worker._code_of": globals().get("_code_of"),
                # what sees a learner's changes to its inputs (checks.seeing_in_place_changes)
                "ops.PIECES": ops.pieces(),
                "wire.tensors": ops.wire_module().__dict__.get("tensors"), "wire.Handle": ops.wire_module().__dict__.get("Handle"),
                **{f"ops.{name}": ops.__dict__.get(name) for name in ops.WATCHED}}

    def forbid(self, names, why, limit=None, pristine=None, work=None):
        """Block the forbidden names (attribute patches) and, below them, every call of those functions
        and of their ATen kernels, any tensor above ``limit`` elements and, with Triton, more than ``work``
        values computed outside its launches (:class:`course.forbidden.Guard`),
        until :meth:`unforbid`. ``pristine``: the check's pieces as they were before any learner's code ran
        (:meth:`serve` holds them)."""
        # lazy: the course's library is imported by main() after it has redirected the worker's streams
        from course import checks, forbidden
        from course.forbidden.violations import Kind, Violation

        saved = []
        for owner, attr in checks.forbidden_targets(tuple(names)):
            try:
                original = owner.__dict__[attr] if attr in owner.__dict__ else getattr(owner, attr)
                qual = f"{getattr(owner, '__name__', 'torch')}.{attr}"

                def blocked(*a, _q=qual, **k):
                    self.violations.append(Violation(Kind.CALLED, f"your code called {_q}: this exercise asks you to {why}."))
                    raise AssertionError(f"{_q} was called: this exercise asks you to {why}.")
                setattr(owner, attr, blocked)
                saved.append((owner, attr, original))
            except (AttributeError, TypeError):
                continue
        original = pristine if pristine is not None else (_PRISTINE or {})
        cls = original.get("course.forbidden.guard.Guard") or forbidden.Guard
        guard = cls(names, why, None if limit is None else int(limit), None if work is None else int(work))
        (original.get("course.forbidden.guard.Guard.__enter__") or cls.__enter__)(guard)
        self.forbidden.append((saved, guard))

    @contextlib.contextmanager
    def watched(self):
        """Around the learner's code in one request, under a closed guard (lesson 00's softmax, lesson 12's
        size limit): no other thread may be running (PyTorch's modes watch this thread only; a test's
        fork starts with one), and the data must stay in PyTorch (:class:`course.forbidden.OutsidePyTorch`);
        under a guard with forbidden modules (lesson 10), their code may not run (:class:`course.forbidden.InModules`)."""
        # lazy: the course's library is imported by main() after it has redirected the worker's streams
        from course import forbidden
        from course.forbidden.violations import Kind, Violation

        guard = self.forbidden[-1][1] if self.forbidden else None
        if guard is None or not (getattr(guard, "closed", False) or getattr(guard, "modules", ())):
            yield
            return
        if getattr(guard, "closed", False) and forbidden.tasks_created() is not None and forbidden.other_threads():
            guard.violations.append(Violation(
                Kind.OTHER_THREAD, "another thread of your code was running when a checked call started: the check "
                                    "watches the thread that calls your function, so this exercise's functions must "
                                    f"do their work in that thread. This exercise asks you to {guard.why}."))
        hook, previous = forbidden.hook_for(guard), sys.getprofile()
        sys.setprofile(hook)
        try:
            yield
        finally:
            if sys.getprofile() is not hook:
                guard.violations.append(Violation(
                    Kind.SWITCHED_OFF, "the check of forbidden calls (its profile hook) was switched off while your "
                                        f"code ran: this exercise asks you to {guard.why}."))
            sys.setprofile(previous)

    def unforbid(self, pristine=None, integrity=None, codes=None):
        """End the innermost :meth:`forbid`; returns what was violated meanwhile (``{kind, text}`` of each violation). ``codes``: the
        pieces' ``__code__`` as :meth:`serve` took them (a swapped code object is a replaced piece)."""
        # lazy: the course's library is imported by main() after it has redirected the worker's streams
        from course.forbidden.violations import Kind, Violation

        saved, guard = self.forbidden.pop() if self.forbidden else ([], None)
        pristine = pristine if pristine is not None else (_PRISTINE or {})
        if guard is not None:
            (pristine.get("course.forbidden.guard.Guard.__exit__") or type(guard).__exit__)(guard, None, None, None)
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)
        changed = _replaced(pristine, codes or {}, integrity or Worker._integrity)
        tampered = [Violation(Kind.REPLACED, f"your code replaced {', '.join(changed[:3])}, part of the check of forbidden "
                              "calls: a notebook that switches the check off fails the tests that use it.")] if changed else []
        found = tampered + self.violations + (guard.violations if guard is not None else [])
        self.violations = []
        unique, seen = [], set()
        for v in found:                            # one of each sentence, in order
            if str(v) not in seen:
                seen.add(str(v))
                unique.append(v)
        unique = unique[:20]
        return [v.to_wire() if isinstance(v, Violation) else Violation(Kind.UNREADABLE, str(v)).to_wire() for v in unique]

    # -- requests -----------------------------------------------------------------------------
    def run_cell(self, source: str, index: int):
        out = _Capped(OUTPUT_LIMIT)
        start = time.perf_counter()
        error = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                exec(_compile(source, f"<cell {index}>"), self.ns)
            except BaseException as exc:  # noqa: BLE001 - the student's error, reported as data
                tb = traceback.extract_tb(exc.__traceback__)
                line = next((f.lineno for f in reversed(tb) if f.filename == f"<cell {index}>"), None)
                error = {"type": type(exc).__name__, "message": str(exc)[:2000], "line": line}
        return {"ok": True, "value": {"output": out.text(), "error": error,
                                      "seconds": round(time.perf_counter() - start, 3)}}

    def handle(self, req: dict):
        # lazy: PyTorch is imported by main() after it has redirected the worker's streams
        import torch

        op = req["op"]
        if op == WorkerOp.CELL:
            return self.run_cell(req["source"], req["index"])
        if op == WorkerOp.GLOBAL:
            name = req["name"]
            if name not in self.ns:
                return {"ok": True, "missing": True}
            return self.answer(self.ns[name])
        if op == WorkerOp.FORBID:
            self.forbid(req["names"], req["why"], req.get("limit"), work=req.get("work"))
            return {"ok": True, "value": None}
        if op == WorkerOp.UNFORBID:
            return {"ok": True, "value": self.unforbid()}
        if op == WorkerOp.EXIT:
            raise _Exit()
        obj = self.objects[req["h"]] if "h" in req else None
        with torch.set_grad_enabled(bool(req.get("grad", True))), contextlib.redirect_stdout(_Capped(0)), \
                contextlib.redirect_stderr(_Capped(0)):
            if op == WorkerOp.GETATTR:
                with self.watched():
                    value = getattr(obj, req["name"])
                return self.answer(value)
            if op == WorkerOp.SETATTR:
                value = self.resolve(req["value"])
                with self.watched():
                    setattr(obj, req["name"], value)
                return {"ok": True, "value": None}
            if op == WorkerOp.CALL:
                return self.call(obj, req)
            if op == WorkerOp.GETITEM:
                key = self.resolve(req["key"])
                with self.watched():
                    value = obj[key]
                return self.answer(value)
            if op == WorkerOp.SETITEM:
                key, value = self.resolve(req["key"]), self.resolve(req["value"])
                with self.watched():
                    obj[key] = value
                return {"ok": True, "value": None}
            if op == WorkerOp.LEN:
                with self.watched():
                    return {"ok": True, "value": int(len(obj))}
            if op == WorkerOp.ITER:
                with self.watched():
                    value = list(iter(obj))[:100_000]
                return self.answer(value)
            if op == WorkerOp.CONTAINS:
                item = self.resolve(req["item"])
                with self.watched():
                    return {"ok": True, "value": bool(item in obj)}
            if op == WorkerOp.BOOL:
                with self.watched():
                    return {"ok": True, "value": bool(obj)}
            if op == WorkerOp.REPR:
                with self.watched():
                    return {"ok": True, "value": repr(obj)[:2000]}
            if op == WorkerOp.ENTER:
                with self.watched():
                    value = type(obj).__enter__(obj)
                return self.answer(value)
            if op == WorkerOp.LEAVE:
                # What the test's block raised: its type only (a builtin's, else Exception), never its message,
                # which could hold a hidden check's values.
                error = req.get("error")
                kind = getattr(builtins, str(error), None) if error else None
                if error and not (isinstance(kind, type) and issubclass(kind, BaseException)):
                    kind = Exception
                with self.watched():
                    suppressed = type(obj).__exit__(obj, kind, kind() if kind else None, None)
                return {"ok": True, "value": bool(suppressed)}
        raise ValueError(f"unknown request {op!r}")

    def call(self, obj, req: dict) -> dict:
        """A call of a learner's function or object, with what it changed in the test's inputs."""
        # Tensors the judge passed are copies: any the call changed in place travel back, so
        # the test sees the change as it would in the notebook.
        # (the judge says when a walk would find nothing: no tensor to watch, no handle to resolve)
        tensors = self.wire.tensors((req["args"], req["kwargs"])) if req.get("tensors", True) else []
        if req.get("handles", True):        # before handles are resolved
            args, kwargs = self.resolve(req["args"]), self.resolve(req["kwargs"])
        else:                               # the request's own fresh copies, as resolve would give
            args, kwargs = req["args"], req["kwargs"]
        before = [(t._version, ops.snapshot(t)) for t in tensors]
        # Inside checks.seeing_in_place_changes the judge also asks which lists and dicts it passed
        # now hold other objects (an entry rebound, added or removed), to make the same change to its own.
        held = ops.paired((req["args"], req["kwargs"]), (args, kwargs), []) if req.get("containers") else []
        shallow = [ops.shallow(c) for c in held]
        with self.watched():
            value = obj(*args, **kwargs)
        reply = self.answer(value)
        changed = [[i, ops.values_now(t)] for i, (t, (version, raw)) in enumerate(zip(tensors, before))
                   if t._version != version or not ops.unchanged(raw, t)]
        if changed:
            reply["mutated"] = changed
        rebound = [[i, ops.holds_now(c, list(tensors) + held)] for i, (c, b) in enumerate(zip(held, shallow))
                   if ops.rebound(c, b)]
        if rebound:              # the judge makes the same change to its own lists and dicts
            reply["rebound"] = rebound
        if req.get("containers"):
            self._last_call = (tensors, held)      # serve() watches them until the test's block ends
            # against what serve() holds (not the module's _PRISTINE, which a notebook can reach), and
            # by code as well as by object: a function whose __code__ was swapped is the same object
            replaced = _replaced(*self._held)
            if replaced:
                reply["tampered"] = replaced[:3]
        return reply

    def test_begin(self) -> bool:
        """Fork: the child serves this test cell's requests, then exits; the parent waits, so nothing the
        test sent survives into later cells. Returns True in the child."""
        threading = sys.modules.get("threading")
        self.threads_at_fork = max(0, threading.active_count() - self.threads_before) if threading else 0
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError as exc:          # EAGAIN: the learner's code holds every process and thread it may have
            os.close(r)
            os.close(w)
            raise _NoFork(str(exc)) from None
        if pid == 0:
            # Nothing the learner's process held before the fork is finalised here: a cycle collected in
            # this child would run its __del__ on state it shares with the parent (an event loop's close()
            # unregisters its wake-up socket from the epoll instance both processes hold, and the parent's
            # next run_until_complete waited forever: a notebook timed out or not, by when the GC ran).
            gc.freeze()
            # OpenMP (GNU libgomp) is not fork-safe: after a learner's torch.set_num_threads(n > 1) and one
            # parallel operator, this child's first parallel region waited for the parent's thread team,
            # which a fork does not copy. One thread here; the parent keeps the learner's setting.
            torch = sys.modules.get("torch")
            try:
                if torch is not None and torch.get_num_threads() > 1:
                    torch.set_num_threads(1)
            except Exception:  # noqa: BLE001 - a learner's torch that cannot say: its own tests show it
                pass
            os.close(r)
            self.test_fd = w
            self.next_id += 1 << 40         # the test's handles never name an object of the parent
            _close_channels(keep={self.rfd, self.wfd, w})
            return True
        os.close(w)
        try:
            ok = os.read(r, 1) == b"1"  # written by the child as it ends (its exit runs on, not waited for)
        except OSError:
            ok = False
        os.close(r)
        if not ok:                      # the test's process died: the worker goes with it (the judge sees that)
            os._exit(1)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:     # reap the ended test processes
                pass
        except ChildProcessError:
            pass
        return False

    def serve(self):
        wire = self.wire
        self.test_fd = None
        # The check of forbidden calls as it was before any learner's code ran (a worker serves before its
        # first cell): its methods and the snapshot it compares against are held by this running frame, as
        # an immutable tuple. A notebook that replaces Worker.forbid/unforbid/handle, or edits the module's
        # _PRISTINE, changes nothing here; unforbid reports the replaced pieces.
        forbid, unforbid, handle, integrity = Worker.forbid, Worker.unforbid, Worker.handle, Worker._integrity
        watch, watches = Worker.watch, []     # inside a seeing block: each call's inputs, until the block ends
        self._plain = plain = ops.pieces()[1]          # taken before any learner's code runs
        snapshot = tuple((_PRISTINE or Worker._integrity()).items())
        codes = tuple((k, _code_of(v)) for k, v in snapshot)
        held_codes, read = dict(codes), getattr
        self._held = (dict(snapshot), dict(codes), integrity)
        self.send({"ok": True, "value": "ready"})
        while True:
            try:
                with plain():             # the protocol's own tensors are not the learner's: no mode sees them
                    req = wire.decode_request(wire.recv(self.rfd))
            except wire.WireError:
                return
            if isinstance(req, dict) and req.get("op") == WorkerOp.TEST_BEGIN:
                try:
                    forked = self.test_fd is not None or self.test_begin()
                except _NoFork as exc:  # the judge ends the notebook: a restart would replay the same cells
                    self.send({"ok": False, "refusal": WorkerRefusal.NO_FORK.value,
                               "error": {"type": "NoFork", "message": str(exc)[:200]}})
                    continue
                if forked:              # the learner's threads at the fork: the judge's hint on a timeout
                    self.send({"ok": True, "value": "forked", "threads": self.threads_at_fork, "pid": os.getpid()})
                continue                # (the parent says nothing: the child answered)
            if isinstance(req, dict) and req.get("op") == WorkerOp.TEST_END:
                self.send({"ok": True, "value": "ended"})
                if self.test_fd is not None:
                    os.write(self.test_fd, b"1")
                    os._exit(0)
                continue
            try:
                op = req.get("op") if isinstance(req, dict) else None
                if op == WorkerOp.FORBID:
                    forbid(self, req["names"], req["why"], req.get("limit"), pristine=dict(snapshot), work=req.get("work"))
                    reply = {"ok": True, "value": None}
                elif op == WorkerOp.UNFORBID:
                    found = unforbid(self, pristine=dict(snapshot), integrity=integrity, codes=dict(codes))
                    # and here, in the running frame (whose code cannot be swapped): an unforbid or a check
                    # whose __code__ was replaced reports nothing itself
                    swapped = [k for k, v in snapshot if held_codes[k] is not read(v, "__code__", None)]
                    if swapped:
                        found = [f"your code replaced the code of {', '.join(swapped[:3])}, part of the check of "
                                 "forbidden calls: a notebook that switches the check off fails the tests that "
                                 "use it."] + list(found)
                    reply = {"ok": True, "value": found}
                else:
                    self._last_call = None
                    reply = handle(self, req)
            except _Exit:
                return
            except BaseException as exc:  # noqa: BLE001 - reported to the judge as the student's error
                reply = {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)[:2000]}}
            try:
                watch(self, req, reply, watches)
            except BaseException as exc:  # noqa: BLE001 - a learner's object that breaks the comparison
                reply = {"ok": False, "error": {"type": type(exc).__name__, "message": str(exc)[:2000]}}
            self.send(reply)

    def watch(self, req, reply, watches: list) -> None:
        """Inside a test's ``checks.seeing_in_place_changes`` block (the judge says so in each request), the
        inputs of every call made in it stay watched until the block ends: a change made later (when the
        test uses what the call returned) travels back with the answer that saw it, as ``later``:
        [[watch, mutated, rebound]], ``watch`` being the number the call's answer gave."""
        if not (isinstance(req, dict) and req.get("seeing")):
            watches.clear()
            self._last_call = None
            return
        def snapshot(tensors, held):
            return (tensors, held, [(t._version, ops.snapshot(t)) for t in tensors], [ops.shallow(c) for c in held],
                    ops.extras(tensors, held))

        later = []
        for n, (tensors, held, before, shallow, extra) in enumerate(watches):
            changed = [[i, ops.values_now(t)] for i, (t, (version, raw)) in enumerate(zip(tensors, before))
                       if t._version != version or not ops.unchanged(raw, t)]
            # a container is sent again when it holds other objects, or when a tensor the learner's code
            # put in it (not one of the call's) changed since
            rebound = [[i, ops.holds_now(c, list(tensors) + held)] for i, (c, b, ex) in enumerate(zip(held, shallow, extra))
                       if ops.rebound(c, b) or ops.extras_changed(ex)]
            if changed or rebound:
                later.append([n, changed, rebound])
                watches[n] = snapshot(tensors, held)
        if self._last_call is not None and len(watches) < 200:
            watches.append(snapshot(*self._last_call))
            reply["watch"] = len(watches) - 1
        self._last_call = None
        if later:
            reply["later"] = later
            # (as on the call path: against serve()'s snapshot, by object and by code)
            replaced = _replaced(*self._held)
            if replaced:
                reply["tampered"] = replaced[:3]

    def send(self, reply):
        wire = self.wire
        try:
            # Encoding makes byte views of the answer's tensors: the grader's work, which neither the check of
            # forbidden calls (its size limit) nor a learner's tensor subclass or mode may see.
            with (getattr(self, "_plain", None) or ops.pieces()[1])():
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


def _code_of(piece):
    """A piece's code object (a class: None; its methods are pieces of their own)."""
    return getattr(piece, "__code__", None)


def _replaced(pristine: dict, codes: dict, integrity) -> list[str]:
    """The names of the check's pieces that are not what they were (another object, or the same function
    with another ``__code__``)."""
    if not pristine:
        return []
    now = integrity()
    # every piece held (a key left out is a replaced piece), by object and by code; the held objects' own
    # code is read without calling anything a notebook could have replaced
    return [k for k, v in pristine.items()
            if now.get(k, _code_of) is not v or (k in codes and codes[k] is not getattr(v, "__code__", None))]
_LEARNER_NS: dict | None = None     # the learner's namespace (Worker.ns), for the lookup below


def _close_channels(keep: set[int]) -> None:
    """In the tests' fork: close every pipe and socket the learner's process held but the grading protocol's
    own (``keep``), so that nothing the tests send can reach another process through them (the sandbox's
    PID 1 has ended every other process anyway). Files stay open: they lead to no process."""

    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in fds:
        if fd in keep or fd < 3:
            continue
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            try:
                os.close(fd)
            except OSError:
                pass


def __getattr__(name: str):
    """The learner's names, looked up on ``__main__`` (this module, as the worker runs): pickle finds a
    class or function the notebook defined there, as in Jupyter, whose namespace is ``__main__``.
    ``torch.save(model)`` of a notebook's own ``nn.Module`` failed with "attribute lookup ... on
    __main__ failed". The worker's own names come first."""
    ns = _LEARNER_NS
    if ns is not None and not name.startswith("__") and name in ns:
        return ns[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    # The protocol keeps private copies of stdin/stdout; the student's code gets /dev/null for both
    # file descriptors (Python-level prints are captured per cell).
    rfd, wfd = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.stdin = open(os.devnull)
    sys.stdout = sys.stderr = _Capped(0)
    # warm-up: imported once in the warm sandbox, after the streams are redirected
    import matplotlib
    matplotlib.use("Agg")
    # warm-up: imported once in the warm sandbox, after the streams are redirected
    import matplotlib.pyplot  # noqa: F401 - warm imports, so cells start fast
    # lazy: PyTorch is imported by main() after it has redirected the worker's streams
    import torch
    import torch.nn  # noqa: F401
    torch.set_num_threads(1)
    # lazy: the course's library is imported by main() after it has redirected the worker's streams
    import course  # noqa: F401
    from course import checks  # noqa: F401
    _PRISTINE.update(Worker._integrity())
    zygote.warm_checks()
    zygote.warm_imports([a.split("=", 1)[1] for a in sys.argv if a.startswith("--warm=")])
    ctrl = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--zygote=")]
    if ctrl and os.getpid() == 1:
        os.close(rfd)
        os.close(wfd)
        keep: dict[str, set] = {}
        for arg in (a.split("=", 1)[1] for a in sys.argv if a.startswith("--keep=")):
            top, _, name = arg.rpartition("/")
            keep.setdefault(top, set()).add(name)
        zygote.serve_sandbox(int(ctrl[0]), {k: frozenset(v) for k, v in keep.items()}, Worker)
    else:
        Worker(rfd, wfd).serve()


if __name__ == "__main__":
    main()

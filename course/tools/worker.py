"""The sandboxed side of grading: runs one student's notebook cells and answers the judge.

Started by :mod:`course.tools.judge` inside the sandbox (``python -m course.tools.worker``), with
requests on stdin and answers on stdout (see :mod:`course.tools.wire`). Everything here runs as the
student's code does: nothing it says is trusted. It decides no verdict; it only executes cells and
calls, and sends back what they returned.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import sys
import time
import traceback
from collections import OrderedDict as _OrderedDict

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


class _NoFork(Exception):
    """The test's fork could not start (the sandbox's process limit is reached)."""


_PIECES = None      # PyTorch's own C pieces the comparisons below use, taken before any learner's code runs


def _pieces() -> tuple:
    """(TensorBase, DisableTorchFunction, equal, uint8): C-level, so that a notebook that replaces
    ``torch.equal``, a tensor method, or a tensor's class (a subclass whose ``detach`` lies) cannot
    change what a comparison sees. Taken once, in the warm sandbox; the integrity check holds them."""
    global _PIECES
    if _PIECES is None:
        import torch

        from torch.utils._python_dispatch import _disable_current_modes

        class plain:
            """Neither a torch-function override nor a dispatch mode (a learner's, left switched on) sees
            or answers what runs inside."""

            def __enter__(self, _no_function=torch._C.DisableTorchFunction, _no_modes=_disable_current_modes):
                self.parts = (_no_function(), _no_modes())
                for part in self.parts:
                    part.__enter__()

            def __exit__(self, *exc):
                for part in reversed(self.parts):
                    part.__exit__(*exc)

        _PIECES = (torch._C.TensorBase, plain, torch._C._VariableFunctions.equal, torch.uint8)
    return _PIECES


def _raw(t):
    """What a tensor is now: its exact class, dtype, shape and a copy of its bytes."""
    base, plain, _, uint8 = _PIECES or _pieces()
    with plain():
        d = base.detach(t)
        n = base.numel(d)
        return (type(t), d.dtype, tuple(d.shape),
                base.clone(base.view(base.reshape(base.contiguous(d), (-1,)), uint8)) if n else None)


def _same(before, t) -> bool:
    _, plain, equal, _ = _PIECES or _pieces()
    kind, dtype, shape, raw = before
    now = _raw(t)
    with plain():
        return now[0] is kind and now[1] == dtype and now[2] == shape and (raw is None or bool(equal(now[3], raw)))


def _now(t):
    """A tensor's values now, as a plain tensor (whatever its class says)."""
    base, plain, _, _ = _PIECES or _pieces()
    with plain():
        return base.detach(t)


def _comparable(v) -> bool:
    """A plain dense CPU tensor (of any class), whose bytes :func:`_raw` can read; any other (sparse,
    quantized, nested, meta, a conjugate view) is watched by identity only."""
    base, plain, _, _ = _PIECES or _pieces()
    if not issubclass(type(v), base):
        return False
    try:
        with plain():
            return (str(base.layout.__get__(v)) == "torch.strided" and not base.is_quantized.__get__(v)
                    and not base.is_nested.__get__(v) and not base.is_meta.__get__(v) and not base.is_conj(v)
                    and not base.is_neg(v) and base.device.__get__(v).type == "cpu")
    except Exception:  # noqa: BLE001 - whatever cannot be read is compared by identity
        return False


def _extra(tensors: list, held: list) -> list:
    """Per container: what the learner's code put in it that is not the call's own (a copy in place of
    an input, a new dict holding one), down to 20 levels: each tensor with what it is now, each new list
    or dict with what it holds, so that a later change to them is seen."""
    known = {id(t) for t in tensors} | {id(c) for c in held}

    def reach(v, out, depth):
        if id(v) in known or depth > 20 or len(out) > 10_000:
            return
        kind = type(v)
        if kind is dict or kind is _OrderedDict or kind is list or kind is tuple:
            if kind is not tuple:
                out.append(("c", v, _shallow(v)))
            for item in (v.values() if isinstance(v, dict) else v):
                reach(item, out, depth + 1)
        elif _comparable(v):
            out.append(("t", v, _raw(v)))

    found = []
    for c in held:
        out: list = []
        for item in (c.values() if isinstance(c, dict) else c):
            reach(item, out, 0)
        found.append(out)
    return found


def _extra_changed(extra: list) -> bool:
    return any(not _same(then, v) if what == "t" else _rebound(v, then) for what, v, then in extra)


_ATOMS = frozenset({str, int, float, bool, type(None), bytes, complex})


def _wire_module():
    from course.tools import wire

    return wire


def _paired(sent, given, out: list, depth: int = 0) -> list:
    """The lists and dicts (those exact types, and OrderedDict) the learner's code was given, in the order
    the judge walks the ones it sent (``sent``: the request as it arrived; ``given``: the same, with its
    handles resolved): depth first, none below a handle (the judge sent no container there)."""
    if depth >= 50 or isinstance(sent, _wire_module().Handle):
        return out
    kind = type(sent)
    if kind is list or kind is tuple:
        if kind is list:
            out.append(given)
        for a, b in zip(sent, given):
            _paired(a, b, out, depth + 1)
    elif kind is dict or kind is _OrderedDict:
        out.append(given)
        for k, v in sent.items():
            _paired(v, given[k], out, depth + 1)
    return out


def _now_holds(container, known: list) -> list:
    """What a changed container holds, for the judge to put in its own: each item either ["o", j], the
    j-th of ``known`` (the call's tensors, then its containers), or ["v", value], a new value."""
    index = {id(o): j for j, o in enumerate(known)}

    def ref(v):
        j = index.get(id(v))
        return ["o", j] if j is not None and known[j] is v else ["v", v]

    if isinstance(container, dict):
        return [[k, ref(v)] for k, v in container.items()]
    return [ref(v) for v in container]


def _shallow(container) -> list:
    """What a container holds, by identity: (key, value) pairs of a dict, the items of a list."""
    return list(container.items()) if isinstance(container, dict) else list(container)


def _rebound(container, before: list) -> bool:
    """Whether the container holds other objects than ``before`` (an entry replaced, added or removed)."""
    now = _shallow(container)
    if len(now) != len(before):
        return True
    if isinstance(container, dict):
        return any(k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(now, before))
    return any(v is not v0 for v, v0 in zip(now, before))


class Worker:
    def __init__(self, rfd: int, wfd: int):
        from course.tools import wire

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
        self._held = ({}, Worker._integrity, {})     # serve() replaces it with its snapshot
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
        from course.tools.wire import Handle

        if type(v) in _ATOMS:
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
                "course.forbidden.OutsidePyTorch": forbidden.__dict__.get("OutsidePyTorch"),
                "course.forbidden.OutsidePyTorch.__call__": forbidden.OutsidePyTorch.__dict__.get("__call__"),
                "course.forbidden.other_threads": forbidden.__dict__.get("other_threads"),
                "course.forbidden._tasks_created": forbidden.__dict__.get("_tasks_created"),
                "Worker.forbid": Worker.__dict__.get("forbid"), "Worker.unforbid": Worker.__dict__.get("unforbid"),
                "Worker.watched": Worker.__dict__.get("watched"),
                # what sees a learner's changes to its inputs (checks.seeing_in_place_changes)
                "worker._raw": globals().get("_raw"), "worker._same": globals().get("_same"),
                "worker._paired": globals().get("_paired"), "worker._now_holds": globals().get("_now_holds"),
                "worker._shallow": globals().get("_shallow"), "worker._rebound": globals().get("_rebound"),
                "worker._extra": globals().get("_extra"), "worker._now": globals().get("_now"),
                "worker._extra_changed": globals().get("_extra_changed"), "worker._comparable": globals().get("_comparable"),
                "worker._PIECES": _pieces(),
                "wire.tensors": _wire_module().__dict__.get("tensors"), "wire.Handle": _wire_module().__dict__.get("Handle")}

    def forbid(self, names, why, limit=None, pristine=None):
        """Block the forbidden names (attribute patches) and, below them, every call of those functions
        and of their ATen kernels, and any tensor above ``limit`` elements (:class:`course.forbidden.Guard`),
        until :meth:`unforbid`. ``pristine``: the check's pieces as they were before any learner's code ran
        (:meth:`serve` holds them)."""
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
        original = pristine if pristine is not None else (_PRISTINE or {})
        cls = original.get("course.forbidden.Guard") or forbidden.Guard
        guard = cls(names, why, None if limit is None else int(limit))
        (original.get("course.forbidden.Guard.__enter__") or cls.__enter__)(guard)
        self.forbidden.append((saved, guard))

    @contextlib.contextmanager
    def watched(self):
        """Around the learner's code in one request, under a closed guard (lesson 00's softmax, lesson 12's
        size limit): no other thread may be running (PyTorch's modes watch this thread only; a test's
        fork starts with one), and the data must stay in PyTorch (:class:`course.forbidden.OutsidePyTorch`)."""
        import sys

        from course import forbidden

        guard = self.forbidden[-1][1] if self.forbidden else None
        if guard is None or not getattr(guard, "closed", False):
            yield
            return
        if forbidden._tasks_created() is not None and forbidden.other_threads():
            guard.violations.append("another thread of your code was running when a checked call started: the check "
                                    "watches the thread that calls your function, so this exercise's functions must "
                                    f"do their work in that thread. This exercise asks you to {guard.why}.")
        hook, previous = forbidden.OutsidePyTorch(guard), sys.getprofile()
        sys.setprofile(hook)
        try:
            yield
        finally:
            if sys.getprofile() is not hook:
                guard.violations.append("the check of forbidden calls (its profile hook) was switched off while your "
                                        f"code ran: this exercise asks you to {guard.why}.")
            sys.setprofile(previous)

    def unforbid(self, pristine=None, integrity=None):
        """End the innermost :meth:`forbid`; returns what was violated meanwhile (sentences)."""
        saved, guard = self.forbidden.pop() if self.forbidden else ([], None)
        pristine = pristine if pristine is not None else (_PRISTINE or {})
        if guard is not None:
            (pristine.get("course.forbidden.Guard.__exit__") or type(guard).__exit__)(guard, None, None, None)
        for owner, attr, original in reversed(saved):
            setattr(owner, attr, original)
        changed = [k for k, v in (integrity or Worker._integrity)().items() if pristine and pristine.get(k) is not v]
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
                with self.watched():
                    value = getattr(obj, req["name"])
                return self.answer(value)
            if op == "setattr":
                value = self.resolve(req["value"])
                with self.watched():
                    setattr(obj, req["name"], value)
                return {"ok": True, "value": None}
            if op == "call":
                # Tensors the judge passed are copies: any the call changed in place travel back, so
                # the test sees the change as it would in the notebook.
                # (the judge says when a walk would find nothing: no tensor to watch, no handle to resolve)
                tensors = self.wire.tensors((req["args"], req["kwargs"])) if req.get("tensors", True) else []
                if req.get("handles", True):        # before handles are resolved
                    args, kwargs = self.resolve(req["args"]), self.resolve(req["kwargs"])
                else:                               # the request's own fresh copies, as resolve would give
                    args, kwargs = req["args"], req["kwargs"]
                before = [(t._version, _raw(t)) for t in tensors]
                # Inside checks.seeing_in_place_changes the judge also asks which lists and dicts it passed
                # now hold other objects (an entry rebound, added or removed), to make the same change to its own.
                held = _paired((req["args"], req["kwargs"]), (args, kwargs), []) if req.get("containers") else []
                shallow = [_shallow(c) for c in held]
                with self.watched():
                    value = obj(*args, **kwargs)
                reply = self.answer(value)
                changed = [[i, _now(t)] for i, (t, (version, raw)) in enumerate(zip(tensors, before))
                           if t._version != version or not _same(raw, t)]
                if changed:
                    reply["mutated"] = changed
                rebound = [[i, _now_holds(c, list(tensors) + held)] for i, (c, b) in enumerate(zip(held, shallow))
                           if _rebound(c, b)]
                if rebound:              # the judge makes the same change to its own lists and dicts
                    reply["rebound"] = rebound
                if req.get("containers"):
                    self._last_call = (tensors, held)      # serve() watches them until the test's block ends
                    # against what serve() holds (not the module's _PRISTINE, which a notebook can reach), and
                    # by code as well as by object: a function whose __code__ was swapped is the same object
                    pristine, integrity, codes = self._held
                    replaced = [k for k, v in integrity().items() if pristine and (
                        pristine.get(k) is not v or codes.get(k) is not getattr(v, "__code__", None))]
                    if replaced:
                        reply["tampered"] = replaced[:3]
                return reply
            if op == "getitem":
                key = self.resolve(req["key"])
                with self.watched():
                    value = obj[key]
                return self.answer(value)
            if op == "setitem":
                key, value = self.resolve(req["key"]), self.resolve(req["value"])
                with self.watched():
                    obj[key] = value
                return {"ok": True, "value": None}
            if op == "len":
                with self.watched():
                    return {"ok": True, "value": int(len(obj))}
            if op == "iter":
                with self.watched():
                    value = list(iter(obj))[:100_000]
                return self.answer(value)
            if op == "contains":
                item = self.resolve(req["item"])
                with self.watched():
                    return {"ok": True, "value": bool(item in obj)}
            if op == "bool":
                with self.watched():
                    return {"ok": True, "value": bool(obj)}
            if op == "repr":
                with self.watched():
                    return {"ok": True, "value": repr(obj)[:2000]}
        raise ValueError(f"unknown request {op!r}")

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
        snapshot = tuple((_PRISTINE or Worker._integrity()).items())
        self._held = (dict(snapshot), integrity, {k: getattr(v, "__code__", None) for k, v in snapshot})
        self.send({"ok": True, "value": "ready"})
        while True:
            try:
                req = wire.decode_request(wire.recv(self.rfd))
            except wire.WireError:
                return
            if isinstance(req, dict) and req.get("op") == "test-begin":
                try:
                    forked = self.test_fd is not None or self.test_begin()
                except _NoFork as exc:  # the judge ends the notebook: a restart would replay the same cells
                    self.send({"ok": False, "error": {"type": "NoFork", "message": str(exc)[:200]}})
                    continue
                if forked:              # the learner's threads at the fork: the judge's hint on a timeout
                    self.send({"ok": True, "value": "forked", "threads": self.threads_at_fork})
                continue                # (the parent says nothing: the child answered)
            if isinstance(req, dict) and req.get("op") == "test-end":
                self.send({"ok": True, "value": "ended"})
                if self.test_fd is not None:
                    os.write(self.test_fd, b"1")
                    os._exit(0)
                continue
            try:
                op = req.get("op") if isinstance(req, dict) else None
                if op == "forbid":
                    forbid(self, req["names"], req["why"], req.get("limit"), pristine=dict(snapshot))
                    reply = {"ok": True, "value": None}
                elif op == "unforbid":
                    reply = {"ok": True, "value": unforbid(self, pristine=dict(snapshot), integrity=integrity)}
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
            return (tensors, held, [(t._version, _raw(t)) for t in tensors], [_shallow(c) for c in held],
                    _extra(tensors, held))

        later = []
        for n, (tensors, held, before, shallow, extra) in enumerate(watches):
            changed = [[i, _now(t)] for i, (t, (version, raw)) in enumerate(zip(tensors, before))
                       if t._version != version or not _same(raw, t)]
            # a container is sent again when it holds other objects, or when a tensor the learner's code
            # put in it (not one of the call's) changed since
            rebound = [[i, _now_holds(c, list(tensors) + held)] for i, (c, b, ex) in enumerate(zip(held, shallow, extra))
                       if _rebound(c, b) or _extra_changed(ex)]
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
            pristine, integrity, codes = self._held
            replaced = [k for k, v in integrity().items() if pristine and (
                pristine.get(k) is not v or codes.get(k) is not getattr(v, "__code__", None))]
            if replaced:
                reply["tampered"] = replaced[:3]

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
_LEARNER_NS: dict | None = None     # the learner's namespace (Worker.ns), for the lookup below


def __getattr__(name: str):
    """The learner's names, looked up on ``__main__`` (this module, as the worker runs): pickle finds a
    class or function the notebook defined there, as in Jupyter, whose namespace is ``__main__``.
    ``torch.save(model)`` of a notebook's own ``nn.Module`` failed with "attribute lookup ... on
    __main__ failed". The worker's own names come first."""
    ns = _LEARNER_NS
    if ns is not None and not name.startswith("__") and name in ns:
        return ns[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


SCRATCH = ("/sandbox/work", "/sandbox/home", "/tmp")
INBOX = "/sandbox/inbox"            # the lesson's data files, bound read-only; copied into work/ per submission


def _sweep(limit: float = 10.0) -> bool:
    """Kill every other process of the sandbox and reap them all (called by the zygote, PID 1).
    True when none is left."""
    import signal

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
    import stat

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


def _copy_inbox(names) -> None:
    import shutil

    for name in names:
        if isinstance(name, str) and name and "/" not in name and name not in (".", ".."):
            try:
                shutil.copyfile(os.path.join(INBOX, name), os.path.join("/sandbox/work", name))
            except OSError:
                pass


def _ignore_signals() -> None:
    import signal

    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            continue
        try:
            signal.signal(sig, signal.SIG_IGN)
        except (OSError, ValueError, RuntimeError):
            pass


def _default_signals() -> None:
    import signal

    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass


def _zygote(ctrl_fd: int, keep: dict[str, frozenset]) -> None:
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
    import json
    import select
    import socket

    try:
        import ctypes
        import signal

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

    say(ev="ready", clean=_wipe(keep)[0])
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
        if req.get("op") != "fork" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        _copy_inbox(req.get("files", []))
        pid = os.fork()
        if pid == 0:
            try:
                ctrl.close()                         # before any student code: the worker never holds it
                os.chdir("/sandbox/work")
                _default_signals()
                Worker(fds[0], fds[1]).serve()
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)
        say(ev="started")
        exited = False
        while True:
            if not exited:
                try:
                    done, status = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done, status = pid, 0
                if done == pid:
                    exited = True
                    say(ev="exited", status=status)
            ready, _, _ = select.select([ctrl], [], [], 0.05 if not exited else None)
            if not ready:
                continue
            try:
                data = ctrl.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                _sweep(2)
                os._exit(0)
            if json.loads(data).get("op") == "end":
                break
        swept = _sweep()
        clean, removed = _wipe(keep) if swept else (False, 0)
        say(ev="clean" if clean else "dirty", removed=removed)


def _warm_checks() -> None:
    """Run the check of forbidden calls once, on a small tensor: its first use loads some 800 modules of
    PyTorch's dispatch machinery (about 2 s). Done before the zygote forks, every worker starts with them
    loaded instead of paying it again per submission."""
    import torch

    from course import forbidden

    try:
        with forbidden.Guard(("softmax",), "warm up", limit=1 << 30):
            torch.ones(2, 2).tril().sum()
    except Exception:  # noqa: BLE001 - a check that fails here fails again, visibly, where a test uses it
        pass


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
    _warm_checks()
    _warm([a.split("=", 1)[1] for a in sys.argv if a.startswith("--warm=")])
    ctrl = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--zygote=")]
    if ctrl and os.getpid() == 1:
        os.close(rfd)
        os.close(wfd)
        keep: dict[str, set] = {}
        for arg in (a.split("=", 1)[1] for a in sys.argv if a.startswith("--keep=")):
            top, _, name = arg.rpartition("/")
            keep.setdefault(top, set()).add(name)
        _zygote(int(ctrl[0]), {k: frozenset(v) for k, v in keep.items()})
    else:
        Worker(rfd, wfd).serve()


if __name__ == "__main__":
    main()

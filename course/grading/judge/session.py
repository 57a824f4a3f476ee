"""One submission's worker in its sandbox, and the warm sandbox (a "zygote") it is forked from: start,
requests with deadlines, stop; nothing the worker says is believed beyond its own grading."""

from __future__ import annotations

import json
import pickle
import shutil
import socket
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from course import checks, forbidden
from course.grading import cgroups, sandbox
from course.grading.pidfd import PidfdProcess
from course.grading.judge.errors import WITHHELD, BUILTIN_ERRORS, NoFork, ProcessLimit, WorkerGone, rebuild_error
from course.grading.judge.remote import Remote, copy_back, mirror, trusted_class, TRUSTED_MODULES
from course.grading.sandboxed import wire
from course.grading.sandboxed.wire import WorkerOp, ZygoteEvent, ZygoteOp
from course.forbidden.violations import Violation

# -- one worker in its sandbox ---------------------------------------------------------------------

class Foster(PidfdProcess):
    """A sandbox this judge owns but did not start: the judges' fork server launched it before the judge
    was forked (:func:`serve_forks`), so it is the server's child, watched and killed through a pidfd (the
    server reaps it)."""

    def __init__(self, pid: int, pidfd: int):
        super().__init__(pid, pidfd, "sandbox")


def terminate(proc) -> None:
    """Kill a worker or sandbox process (and its process group), close its pipes, reap it."""
    if proc is None:
        return
    if isinstance(proc, Foster):
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
    cgroups.remove_group_later(getattr(proc, "cgroup", None))     # its groups, once its processes are gone


class Zygote:
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
        self.early = None        # a warm sandbox launched as the judge started: (key, (process, socket, inbox))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.ctrl is not None

    def start(self, scratch_base: Path, warm, limits, deadline: float):
        self.kill()
        early, self.early = self.early, None
        if early is not None and early[0] == sandbox.prestart_key(scratch_base, warm, limits):
            self.proc, self.ctrl, self.inbox = early[1]         # launched when this judge started
        else:
            if early is not None:                               # not the sandbox this submission needs
                terminate(early[1][0])
                early[1][1].close()
                sandbox.remove_scratch(early[1][2])
            self.proc, self.ctrl, self.inbox = sandbox.launch_zygote(scratch_base, warm, limits)
        self.key = sandbox.prestart_key(scratch_base, warm, limits)
        msg = self.hear(deadline)
        if msg.get("ev") != ZygoteEvent.READY or msg.get("clean") is not True:
            raise WorkerGone(f"the sandbox did not start ({msg})")

    def hear(self, deadline: float | None) -> dict:
        """The next message of the sandbox's PID 1 (a WorkerGone if none by the deadline)."""

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

        try:
            socket.send_fds(self.ctrl, [json.dumps(msg).encode()], list(fds))
        except OSError:
            raise WorkerGone("the sandbox stopped") from None

    def kill(self, *, wait: bool = True):
        """End the sandbox. ``wait=False``: signal it and go on (it dies with its PID 1; a sandbox of thousands of
        processes takes seconds to, and the notebook's ceiling must not wait for that)."""
        if not wait and isinstance(self.proc, Foster):
            self.proc.kill()
        elif not wait and self.proc is not None and self.proc.poll() is None:
            for kill in (lambda: os.killpg(self.proc.pid, signal.SIGKILL), self.proc.kill):
                try:
                    kill()
                except (ProcessLookupError, PermissionError):
                    pass
        else:
            terminate(self.proc)
        self.proc = None
        if self.ctrl is not None:
            self.ctrl.close()
            self.ctrl = None
        if self.inbox is not None:
            sandbox.remove_scratch(self.inbox)
            self.inbox = None


ZYGOTE = Zygote()


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
        self.left_running = 0                # processes still running when tests began (ended then)
        self.started_in_tests = 0            # processes started while tests ran (ended before the next test)
        self.last_pid = 0                    # the sandbox's last PID at the last fence or census
        # Hidden inputs have reached the learner's code (a request left while a hidden test line was running):
        # from then on, for the rest of this submission, the learner's exceptions keep their type and lose their
        # text. For the whole submission, not one fork: a fork's memory ends with it, but files and shared
        # memory made before it do not (a red team carried hidden inputs to the next fork both ways).
        self.saw_hidden = False
        self.hidden_lines = None             # while a test cell runs: (its filename, its hidden line numbers)
        # The notebook's deadline (``until``) and that plus one cell's limit (``hard_until``), both set by
        # SubmissionRun: a fence waits no longer than the first, the clean-up at the end no longer than the second.
        self.until = self.hard_until = float("inf")
        self.worker_woke = False             # the stopped worker ran since the tests' fork began (PID 1 saw it)
        self.native: list[str] = []          # machine code the learner's processes loaded from scratch (PID 1 saw it)
        self.woke_count = 0
        self.lies: list[str] = []            # what the worker claimed that cannot be true
        self.watches: dict = {}              # inside a seeing block: each call's inputs, by the number the worker gave
        # What the test cells leave for the next ones and what the judge learns of the learner's process while they
        # run, declared here (run.py reads and sets them):
        self.test_defs: dict = {}            # names a test cell defined, for the later test cells (as in a notebook)
        self.pending = None                  # (op, handle) of the request in flight
        self.timed_out_in = None             # (op, handle) of the first request of a test cell that ran out of time
        self.ran_triton = False              # the running test cell's checks launched the learner's Triton kernels
        self.fork_threads = 0                # threads of the learner's process when the tests forked (a hint)
        self.last_reply = wire.WorkerReply(ok=False)     # the worker's last answer
        # The check of forbidden calls (names, why, limit) while a test's block of it runs, and the learner's
        # objects made under it: using one after the block runs under the same check again (an answer that
        # computes its values only when the test reads them is checked where it computes).
        self.checking: list[tuple] = []
        self.checked: dict[int, tuple] = {}

    def _close_pipes(self):
        for fd in (self.rfd, self.wfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.rfd = self.wfd = None

    def start(self, until: float = float("inf")):
        """A fresh worker for this submission, within ``start_timeout`` and never past ``until`` (the notebook's own
        deadline, on a restart)."""

        self.proxies = {}
        self.checked, self.checking = {}, []
        self.exited = False
        self.deadline = min(time.monotonic() + self.start_timeout, until)
        try:
            if self.use_sandbox:
                # A judge that lives on (a Dask worker's) may get a submission with other limits or modules.
                if not ZYGOTE.alive() or ZYGOTE.key != sandbox.prestart_key(self.scratch_base, self.warm, self.limits):
                    ZYGOTE.start(self.scratch_base, self.warm, self.limits, self.deadline)
                names = []
                for old in ZYGOTE.inbox.iterdir():
                    old.unlink()
                for extra in self.files:             # data files that travel with the lesson
                    p = Path(extra)
                    if p.is_file():
                        shutil.copyfile(p, ZYGOTE.inbox / p.name)
                        os.chmod(ZYGOTE.inbox / p.name, 0o644)
                        names.append(p.name)
                # Fresh pipes for this submission only: nothing a previous worker wrote can reach the judge.
                req_r, req_w = os.pipe()
                ans_r, ans_w = os.pipe()
                try:
                    ZYGOTE.tell(fds=(req_r, ans_w), op=ZygoteOp.FORK, files=names)
                finally:
                    os.close(req_r)
                    os.close(ans_w)
                self.rfd, self.wfd, self.proc = ans_r, req_w, ZYGOTE.proc
                os.set_blocking(self.wfd, False)
                msg = ZYGOTE.hear(self.deadline)
                if msg.get("ev") != ZygoteEvent.STARTED:
                    raise WorkerGone("the sandbox did not start a worker")
            else:
                self.own_scratch = self.own_scratch or sandbox.prepare_scratch(self.scratch_base)
                for extra in self.files:
                    p = Path(extra)
                    if p.is_file():
                        shutil.copy2(p, self.own_scratch / "work" / p.name)
                env = {k: v for k, v in os.environ.items() if not k.startswith(("COURSE_METRICS",))}
                env.update({"NBGRADER_EXECUTION": "autograde", "COURSE_HEADLESS": "1", "MPLBACKEND": "Agg",
                            "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0",
                            "PYTHONPATH": sandbox.package_path()})
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
            if graceful and ZYGOTE.alive():
                try:
                    # the clean-up is the notebook's cost: bounded by its deadline (and its cell's limit past it)
                    deadline = min(time.monotonic() + 30, self.hard_until - 2)     # 2 s: ending it, the pages
                    ZYGOTE.tell(op=ZygoteOp.END, limit=round(max(0.5, deadline - time.monotonic() - 0.5), 3))
                    while True:
                        msg = ZYGOTE.hear(deadline)
                        if type(msg.get("removed")) is int:
                            self.left_behind = msg["removed"]
                        if msg.get("ev") == ZygoteEvent.CLEAN:
                            self.proc = None
                            return
                        if msg.get("ev") != ZygoteEvent.EXITED:
                            break
                except WorkerGone:
                    pass
            ZYGOTE.kill(wait=not graceful)     # a sandbox that could not be emptied in time: not waited for
            self.proc = None
            return
        terminate(self.proc)
        self.proc = None
        self.rfd = self.wfd = None

    # -- while tests run, nothing of the learner's runs but the function under test ----------------------
    def fence(self, fork: int | None) -> None:
        """The tests begin: the sandbox's PID 1 stops the worker (when the tests talk to its ``fork``) and
        ends every other process, so that only the function under test runs, in one process."""
        self._fence(ZygoteOp.FENCE, fork=fork if type(fork) is int else 0, before_tests=True)

    def census(self) -> tuple[int, int]:
        """End every process that is neither the (stopped) worker nor the tests' fork: ``(how many there
        were, the last PID the sandbox handed out)``; a later reading with another last PID means a process
        or a thread started in between."""
        ended = self._fence(ZygoteOp.CENSUS)
        return ended, self.last_pid

    def resume(self) -> None:
        """The tests are over: their fork has ended, every other process too, and the worker goes on."""
        self._fence(ZygoteOp.RESUME)

    def _fence(self, op: ZygoteOp, *, before_tests: bool = False, **kw) -> int:
        if not self.use_sandbox or ZYGOTE.ctrl is None:
            return 0
        ZYGOTE.tell(op=op, **kw)
        try:
            msg = ZYGOTE.hear(min(time.monotonic() + 30, self.until))      # never past the notebook's own deadline
        except WorkerGone:
            ZYGOTE.kill(wait=False)    # mid-fence, its PID 1 cannot be spoken to again: a fresh sandbox next
            raise
        if msg.get("ev") == ZygoteEvent.EXITED:
            self.exited = True
            raise WorkerGone("the sandbox running the notebook died (os._exit, a crash, or out of memory)")
        ended = msg.get("ended")
        if msg.get("ev") != ZygoteEvent.FENCED or type(ended) is not int or ended < 0:
            raise WorkerGone("the sandbox broke the grading protocol (no answer to a fence)")
        if op == ZygoteOp.FENCE and kw.get("fork") and msg.get("fork") != kw["fork"]:
            raise WorkerGone("the sandbox broke the grading protocol (the tests' process was not where it said)")
        if msg.get("clean") is not True:
            raise ProcessLimit("your code starts processes faster than the grader can end them; the rest of the "
                               "notebook was not graded. The tests call your functions in one process: end the "
                               "processes your code starts.")
        self.last_pid = msg.get("last_pid") if type(msg.get("last_pid")) is int else 0
        native = msg.get("native")
        if type(native) is list and native and all(type(p) is str for p in native):
            self.native = [p[:200] for p in native[:5]]
        if op == ZygoteOp.FENCE:
            self.worker_woke = False
        elif msg.get("woke") is True and not self.worker_woke:
            self.worker_woke = True
            self.woke_count += 1
        if ended and before_tests:
            self.left_running += ended
        elif ended:
            self.started_in_tests += ended
        return ended

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
        if not self.use_sandbox or ZYGOTE.ctrl is None:
            return
        if select.select([ZYGOTE.ctrl], [], [], timeout)[0]:
            msg = ZYGOTE.hear(time.monotonic() + 1)
            self.exited = True
            raise WorkerGone("the sandbox running the notebook died (os._exit, a crash, or out of memory)"
                             if msg.get("ev") == ZygoteEvent.EXITED else "the sandbox stopped")

    def _read(self):
        deadline = self.deadline if self.deadline is not None else time.monotonic() + 600
        watch = [self.rfd] + ([ZYGOTE.ctrl] if self.use_sandbox and ZYGOTE.ctrl is not None else [])
        left = deadline - time.monotonic()
        ready = select.select(watch, [], [], max(0.0, left))[0] if left > 0 else []
        if not ready:
            raise self._out_of_time()
        if self.rfd not in ready:
            self._watch_zygote(0)
        try:
            payload = wire.recv(self.rfd, deadline=deadline)
            return wire.decode_data(payload, self._make_remote)
        except wire.WireTimeout:
            raise self._out_of_time() from None
        except wire.WireError as exc:
            self._watch_zygote(2)
            if self.proc.poll() is not None or self.exited:
                raise WorkerGone("the sandbox running the notebook died (os._exit, a crash, or out of memory)") from None
            raise WorkerGone(f"the sandbox broke the grading protocol ({exc})") from None

    def _out_of_time(self) -> WorkerGone:
        """The time limit, reached in the request now pending: remembered (the first of a test's requests to run
        out of time names what the learner's code was doing; the requests that end the check after it fail too)."""
        if self.timed_out_in is None:
            self.timed_out_in = self.pending
        return WorkerGone("ran past the time limit", timeout=True)

    def _make_remote(self, hid, info):
        proxy = self.proxies.get(hid)
        mro = info.get("mro") if isinstance(info, dict) else None
        if proxy is None and mro and str(mro[0][0]).split(".")[0] in TRUSTED_MODULES:
            claimed = trusted_class(*mro[0])
            if claimed is not None and issubclass(claimed, torch.Tensor) and len(self.lies) < 5:
                # Real tensors travel as data, never as handles: this object lies about its class.
                self.lies.append(f"an object of the learner's code claims to be {mro[0][0]}.{mro[0][1]}")
        if proxy is None:
            proxy = self.proxies[hid] = Remote(self, hid, info if isinstance(info, dict) else {})
            if self.checking and len(self.checked) < 100_000:
                self.checked[hid] = self.checking[-1]
        return proxy

    def forbid(self, names, why, limit=None, work=None) -> None:
        """Start the check of forbidden calls in the worker (a test's ``checks.forbid`` block)."""
        self.request(WorkerOp.FORBID, names=list(names), why=why, limit=None if limit is None else int(limit),
                     work=None if work is None else int(work))
        self.checking.append((tuple(names), why, limit, work))
        if forbidden.TRITON in names:          # the test runs the learner's Triton kernels (a hint if it hangs)
            self.ran_triton = True

    def unforbid(self) -> list:
        """End it: what the worker saw violated meanwhile, as :class:`course.forbidden.violations.Violation` values
        (each checked on receipt: a kind the judge does not know is ``UNREADABLE``)."""
        if self.checking:
            self.checking.pop()
        called = self.request(WorkerOp.UNFORBID)
        return [Violation.from_wire(c) for c in called[:20]] if isinstance(called, list) else []

    def _checked_again(self, hid, op, kw):
        """A request on an object made under the check, after its block ended: under the check again."""
        names, why, limit, work = self.checked[hid]
        self.forbid(names, why, limit, work)
        try:
            value = self.request(op, h=hid, **kw)
        finally:
            called = self.unforbid() if self.proc is not None and self.proc.poll() is None else []
        if called:
            raise AssertionError(str(called[0])[:2000])
        return value

    def request(self, op, *, mutable=None, held=None, **kw):
        """Send one request; the answer, as data. ``mutable``: the judge's own tensors passed in the
        call (in the order the worker walks them), to receive the changes the call made to them."""
        if not isinstance(op, WorkerOp):          # the protocol's requests are declared: never a string
            raise TypeError(f"a request to the worker is a WorkerOp, not {op!r}")
        if self._dead() or self.wfd is None:
            raise WorkerGone("the sandbox running the notebook died (os._exit, a crash, or out of memory)")
        if not self.saw_hidden and self.at_hidden_line():
            self.saw_hidden = True
        if not self.checking and kw.get("h") in self.checked:
            return self._checked_again(kw.pop("h"), op, dict(kw, mutable=mutable, held=held))
        seeing = checks.in_place_changes_seen()
        if seeing:
            kw["seeing"] = True        # the worker watches this block's inputs until a request comes without it
        else:
            self.watches = {}
        self.pending = (op, kw.get("h"))          # what the worker was doing, should it run out of time
        try:
            payload = wire.encode_request({"op": op.value, **kw})
        except pickle_errors() as exc:
            raise TypeError(f"this value cannot be sent to the learner's code: {exc}") from None
        deadline = self.deadline if self.deadline is not None else time.monotonic() + 600
        try:
            wire.send(self.wfd, payload, deadline=deadline)
        except wire.WireTimeout:
            raise self._out_of_time() from None
        except (BrokenPipeError, OSError):
            raise WorkerGone("the sandbox running the notebook died (os._exit, a crash, or out of memory)") from None
        try:
            reply = wire.WorkerReply.parse(self._read())
        except wire.WireError:
            raise WorkerGone("the sandbox broke the grading protocol (a malformed answer)") from None
        if mutable and reply.mutated is not None and seeing:
            copy_back(mutable, reply.mutated)      # only where a test checks its inputs (else: thrown away)
        if seeing:
            if reply.tampered:
                if len(self.lies) < 5:
                    self.lies.append(f"replaced {', '.join(map(str, reply.tampered))}, the check of changes to inputs")
                raise AssertionError("your code replaced part of the grader's check of changes to a function's inputs.")
            if kw.get("containers") and reply.rebound and held is not None:
                # An entry of a list or dict the test passed was replaced, added or removed: the same change
                # to the test's own, so that its assertions see what they would in the notebook.
                mirror(list(mutable or []) + list(held), held, reply.rebound)
            # A change made after its call (by what the call returned, when the test used it) comes with the
            # answer that saw it: the same change to that call's inputs.
            for entry in reply.later or []:
                watched = self.watches.get(entry[0]) if isinstance(entry, list) and len(entry) == 3 else None
                if watched is not None:
                    tensors, containers = watched
                    if tensors and isinstance(entry[1], list):
                        copy_back(tensors, entry[1])
                    if containers and isinstance(entry[2], list) and entry[2]:
                        mirror(list(tensors) + list(containers), containers, entry[2])
            if kw.get("containers") and reply.watch is not None:
                self.watches[reply.watch] = (list(mutable or []), list(held or []))
        self.last_reply = reply
        if reply.ok:
            return reply.value if not reply.missing else MISSING
        if reply.refusal == wire.WorkerRefusal.NO_FORK:
            raise NoFork(str((reply.error or {}).get("message", ""))[:200])
        error = rebuild_error(self._withheld(reply.error or {}))
        error.from_learner = True        # raised by the learner's code (explain.py words the failure so)
        raise error

    def at_hidden_line(self) -> bool:
        """A hidden line of the running test cell is on the stack (a visible helper called from the hidden part
        counts: the inputs it sends are the hidden part's)."""
        if not self.hidden_lines:
            return False
        filename, lines = self.hidden_lines
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_filename == filename and frame.f_lineno in lines:
                return True
            frame = frame.f_back
        return False

    def _withheld(self, info):
        """A learner's exception raised once hidden inputs have reached the learner's code keeps its type, not
        its message: the message is the learner's to write, and could repeat the hidden inputs onto the
        feedback page."""
        # The type's name is the learner's to choose too: only a builtin exception's name is kept.
        kind = info.get("type") if isinstance(info, dict) else None
        if self.saw_hidden or not isinstance(info, dict):
            return {"type": kind if kind in BUILTIN_ERRORS else "an exception of a class your code defined",
                    "message": WITHHELD}
        return info


def pickle_errors():

    return (pickle.PicklingError, AttributeError, TypeError)


MISSING = object()

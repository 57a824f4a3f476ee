"""The local judges of a batch: ``jobs`` judge processes forked from one warm fork server, each grading one
notebook at a time (the Dask executor, :mod:`course.grading.dask`, has the same interface)."""

from __future__ import annotations

import select
import signal
import socket
import json
import os
import subprocess
import sys
import threading
import time

from course.grading.pidfd import PidfdProcess
from course.grading.protocol import FORK, FORKED, ProtocolError, Reply, Spec
from course.grading import sandbox

class ForkedJudge(PidfdProcess):
    """A judge forked by the judges' fork server (:func:`course.grading.judge.serve_forks`): not this
    process's child, so it is watched and killed through a pidfd, with its two pipes."""

    def __init__(self, pid: int, pidfd: int, stdin_fd: int, stdout_fd: int):
        super().__init__(pid, pidfd, "judge")
        self.stdin = os.fdopen(stdin_fd, "w", encoding="utf-8")
        self.stdout = os.fdopen(stdout_fd, "r", encoding="utf-8")

    def release(self):
        for thing in (self.stdin, self.stdout):
            try:
                thing.close()
            except OSError:
                pass
        self.close()


class Judges:
    """``jobs`` judge processes, each grading one notebook at a time. They are forked from one warm
    process, the fork server (``python -m course.grading.judge --forks=FD``), which imports everything
    once and launches their warm sandboxes first; a judge that dies is forked again from it in
    milliseconds. Where pidfds are missing (not Linux, or an old kernel) or the server fails, each
    judge is a ``python -m course.grading.judge`` of its own, as before."""

    def __init__(self, jobs: int, prestart: dict | None = None, sources: list | None = None):
        self.jobs = max(1, int(jobs))
        self.prestart = prestart           # the warm sandbox each judge launches first (sandbox.prestart_from_env)
        self.sources = [str(p) for p in sources or []]    # the lessons' instructor notebooks, read ahead
        self.procs: dict[int, object] = {}
        self.first: list[tuple] = []       # per judge process: (started, asked, answered, phases) of its first submission
        self._started: dict[int, float] = {}
        self.server = self._sock = None    # the fork server and the socket to it
        self._asked: list[tuple] = []      # fork requests not yet answered: (slot, stdin write end, stdout read end)
        self._lock = threading.Lock()
        self._closed = False

    def _env(self) -> dict:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONSAFEPATH="1")
        # The judges import the course package this process imports, whatever folder the command was run in.
        env["PYTHONPATH"] = os.pathsep.join([sandbox.package_path()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.pop(sandbox.PRESTART_ENV, None)
        if self.prestart is not None:
            env[sandbox.PRESTART_ENV] = json.dumps(self.prestart)
        return env

    def _start_server(self) -> None:

        if not (hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal") and hasattr(socket, "send_fds")):
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = self._env()
        env["COURSE_JUDGE_SOURCES"] = json.dumps(self.sources)
        try:
            self.server = subprocess.Popen([sys.executable, "-m", "course.grading.judge", f"--forks={theirs.fileno()}",
                                            f"--slots={self.jobs}"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL, env=env, pass_fds=[theirs.fileno()],
                                           start_new_session=True)
        except OSError:
            ours.close()
            return
        finally:
            theirs.close()
        ours.settimeout(300)               # its imports take seconds; a server that never answers is given up
        self._sock = ours

    def _stop_server(self, wait: float = 10) -> None:
        asked, self._asked = self._asked, []
        for _, a, b in asked:              # forks asked for and never answered
            os.close(a)
            os.close(b)
        if self._sock is not None:
            try:
                self._sock.shutdown(2)     # EOF for the server, and wakes a thread waiting on its answer
            except OSError:
                pass
            self._sock.close()             # the server kills what is left and exits
            self._sock = None
        if self.server is not None:
            try:
                self.server.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                os.killpg(self.server.pid, 9)
                self.server.wait()
            self.server = None

    def _ask_fork(self, slot: int) -> None:

        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        try:
            socket.send_fds(self._sock, [json.dumps({"op": FORK, "slot": slot}).encode()], [in_r, out_w])
        except OSError:
            for fd in (in_w, out_r):
                os.close(fd)
            raise
        finally:
            os.close(in_r)                 # the server has its own copies now
            os.close(out_w)
        self._asked.append((slot, in_w, out_r))

    def _forked(self, slot: int):
        """The judge forked for ``slot`` (asked for before), or None if the server failed."""

        while self._asked:
            try:
                data, fds, _, _ = socket.recv_fds(self._sock, 4096, 1)
                answer = json.loads(data)
            except Exception:  # noqa: BLE001 - no answer (the server failed, or the batch is being stopped)
                answer, fds = None, []
            try:
                asked_slot, in_w, out_r = self._asked.pop(0)
            except IndexError:                       # the batch was stopped meanwhile (close took them)
                for fd in fds:
                    os.close(fd)
                return None
            if not isinstance(answer, dict) or answer.get("ev") != FORKED or len(fds) != 1:
                for fd in (in_w, out_r, *fds):
                    os.close(fd)
                self._stop_server()
                return None
            judge = ForkedJudge(int(answer["pid"]), fds[0], in_w, out_r)
            if asked_slot == slot:
                return judge
            self.procs[asked_slot] = judge
        return None

    def _proc(self, slot: int):
        with self._lock:
            if self._closed:
                raise RuntimeError("grading was stopped before this submission's judge started")
            p = self.procs.get(slot)
            if p is not None and p.poll() is None:
                return p
            if p is not None and isinstance(p, ForkedJudge):
                p.release()
            p = None
            if self._sock is not None:
                if not any(s == slot for s, _, _ in self._asked):
                    try:
                        self._ask_fork(slot)
                    except OSError:
                        self._stop_server()
                if self._sock is not None:
                    p = self._forked(slot)
            if p is None:
                if self._closed:
                    raise RuntimeError("grading was stopped before this submission's judge started")
                p = subprocess.Popen([sys.executable, "-m", "course.grading.judge"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=self._env(),
                                     start_new_session=True)
            self.procs[slot] = p
            self._started.setdefault(slot, time.perf_counter())
            return p

    def start_all(self) -> None:
        """Start the fork server now and ask for every judge (they are forked once its imports are done,
        while the batch is prepared here); without a server, start every judge process."""
        t = time.perf_counter()
        self._start_server()
        with self._lock:
            for slot in range(self.jobs):
                self._started[slot] = t
                if self._sock is not None:
                    try:
                        self._ask_fork(slot)
                    except OSError:
                        self._stop_server()
        if self._sock is None:
            for slot in range(self.jobs):
                self._proc(slot)

    def grade(self, slot: int, spec: Spec) -> Reply:
        asked = time.perf_counter()
        p = self._proc(slot)                         # waits for the fork server's imports, the first time
        started = self._started.pop(slot, None)      # set when this is the judge process's first submission
        answer = self._ask(slot, p, spec)
        if started is not None:
            self.first.append((started, asked, time.perf_counter(), answer.phases))
        return answer

    def _ask(self, slot: int, p, spec: Spec) -> Reply:

        limit = float(spec.notebook_timeout) * 2 + 300     # the judge enforces its own limits first
        try:
            p.stdin.write(spec.encode() + "\n")
            p.stdin.flush()
            ready, _, _ = select.select([p.stdout], [], [], limit)
            line = p.stdout.readline() if ready else ""
        except (BrokenPipeError, OSError, ValueError):
            line = ""
        if not line:
            self._kill(slot)
            return Reply(error="the judge process stopped or stalled unexpectedly")
        try:
            answer = Reply.decode(line)
        except ProtocolError as exc:
            self._kill(slot)
            return Reply(error=f"the judge process answered something unreadable ({str(exc)[:200]})")
        if answer.judge_exits:                                       # its watchdog stopped it: a fresh one next
            # Reaped in the background: a judge whose sandbox takes seconds to die (thousands of processes) must
            # not make this submission's result wait, nor count them in its time (the notebook's ceiling).
            with self._lock:
                gone = self.procs.pop(slot, None)           # taken now: the slot's next submission gets a new judge
            threading.Thread(target=self._end, args=(gone,), daemon=True, name="judge-reaper").start()
        return answer

    def _kill(self, slot: int) -> None:
        with self._lock:
            p = self.procs.pop(slot, None)
        self._end(p)

    def _end(self, p) -> None:
        """Kill one judge process (and its sandboxes) and reap it."""
        if p is None:
            return
        if isinstance(p, ForkedJudge):                # a session of its own, its sandboxes die with it
            if p.poll() is None:                      # alive, so its pid (its process group's id) is its own
                try:
                    os.killpg(p.pid, 9)
                except (ProcessLookupError, PermissionError):
                    pass
            p.kill()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            p.release()
            return
        try:
            os.killpg(p.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self, hurry: bool = False):
        """End every judge: told to stop (they end side by side once idle), or with ``hurry`` (the batch
        was interrupted: they may be mid-submission) killed at once. Never waits on a grading thread: a
        thread still waiting for a fork gets no judge (``_proc`` refuses once closed)."""
        self._closed = True
        procs = list(dict(self.procs).values())      # a copy made at once, without the lock a fork may hold
        for p in procs:                               # every judge told first: they end side by side
            try:
                p.stdin.close()
            except (OSError, ValueError):
                pass
        for p in procs:
            try:
                if hurry:
                    raise subprocess.TimeoutExpired("judge", 0)
                p.wait(timeout=10)
            except Exception:  # noqa: BLE001
                if isinstance(p, ForkedJudge) and p.poll() is None:
                    try:
                        os.killpg(p.pid, 9)
                    except (ProcessLookupError, PermissionError):
                        pass
                p.kill()
        self._stop_server(wait=3 if hurry else 10)    # the judges it forked die with it, their sandboxes with them

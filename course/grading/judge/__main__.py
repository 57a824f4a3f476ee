"""A judge process: ``python -m course.grading.judge`` serves grading requests as JSON lines on stdin and
stdout; ``--forks=FD --slots=N`` makes it the judges' fork server, which forks warm judges on request.

A judge started by the grader launches its warm sandbox first, before importing torch: the sandbox's
Python imports its own libraries meanwhile, on another core when there is one. The fork server launches
one per judge it will fork, each as a uid of its own.
"""

from __future__ import annotations

import ctypes
import io
import json
import resource
import socket
import os
import select
import signal
import subprocess
import sys

from course.grading import sandbox

_FORKS = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--forks=")] if __name__ == "__main__" else []
if _FORKS:
    _AHEAD = min(8, max(1, int(next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--slots=")), "1"))))
    _EARLY_MANY = sandbox.prestart_from_env([sandbox.fresh_uid() if os.geteuid() == 0 else None for _ in range(_AHEAD)])
else:
    _EARLY_MANY = []
_EARLY = sandbox.prestart_from_env() if __name__ == "__main__" and not _FORKS else None

# Only now the heavy imports: the warm sandbox above is importing its own meanwhile.
import nbformat  # noqa: E402
import torch  # noqa: E402

from course.grading.judge.lesson import compiled, free_names, lesson_notebook, memoised, trusted_context  # noqa: E402
from course.grading.judge.run import grade_submission  # noqa: E402
from course.grading.judge.session import ZYGOTE, Foster, terminate  # noqa: E402
from course.grading.judge.watchdog import WATCHDOG  # noqa: E402
from course.grading.protocol import FORK, FORKED, Reply, Spec  # noqa: E402

ZYGOTE.early = _EARLY        # the warm sandbox launched above, adopted by the first submission that fits


JUDGE_MEMORY_MB = 6144     # address space of a judge: what one submission's answers can make it hold


_PARENT: int | None = None      # set by _become_judge: the fork server, known from before the fork


def _guard_self() -> None:
    """Die with the grader (or fork server) that started this judge (its sandbox dies with it:
    bubblewrap runs with --die-with-parent), and hold the judge's own memory to a limit."""

    try:
        parent = _PARENT if _PARENT is not None else os.getppid()
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)     # PR_SET_PDEATHSIG
        if os.getppid() != parent:                                    # the parent went before that
            os._exit(1)
    except (OSError, AttributeError):
        pass
    limit = JUDGE_MEMORY_MB * 2**20
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ValueError, OSError):
        pass


def main() -> None:
    """Serve grading requests as JSON lines on stdin/stdout (used by ``course grade --jobs``)."""
    _guard_self()
    torch.set_num_threads(1)
    # Results go on a private copy of stdout; fd 1 (and sys.stdout) point at stderr, so that whatever else
    # prints while tests run (a library, a test cell) cannot corrupt the result channel.
    sys.stdout.flush()
    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    WATCHDOG.start(results)
    for line in sys.stdin:
        try:
            result = grade_submission(Spec.decode(line))
        except Exception as exc:  # noqa: BLE001 - reported, the batch goes on
            result = Reply(error=f"{type(exc).__name__}: {exc}")
        with WATCHDOG.lock:
            results.write(result.encode() + "\n")
            results.flush()
    ZYGOTE.kill()
    # Everything is written and flushed. Skip the interpreter's own clean-up: with torch loaded it took
    # 0.3-8 s per judge (more on a busy machine), paid at the end of every batch.
    sys.stderr.flush()
    os._exit(0)


# -- the judges' fork server --------------------------------------------------------------------------

def _warm_up(sources) -> None:
    """What every judge needs and would otherwise load for its first submission: for each lesson's
    instructor notebook (``sources``), the parsed notebook, its test cells' context (their imports),
    compiled test cells and forbidden names; then the grading module and the feedback page's templates."""
    # warm-up: loaded by the fork server before it forks, for every judge
    from course.grading.judge import reading

    for path in sources:
        try:
            nb, memo = lesson_notebook(path)
            memoised(memo, "context", lambda: trusted_context(nb))
            memoised(memo, "lesson_names", lambda: reading.lesson_names(nb))
            for cell in nb.cells:
                gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
                    free_names(cell.source)
                    compiled(cell.source, f"<test {gid}>")
        except Exception:  # noqa: BLE001 - a judge that needs it reports the failure itself
            pass
    try:
        # warm-up: loaded by the fork server before it forks, for every judge
        from course.grading import feedback

        page = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# warm"), nbformat.v4.new_code_cell("x = 1")])
        page.metadata["language_info"] = {"name": "python"}
        feedback.render_feedback(page)
    except Exception:  # noqa: BLE001 - an optimisation only
        pass


def serve_forks(ctrl_fd: int) -> None:
    """Fork judges from one warm process (``course grade`` starts it: ``--forks=FD --slots=N``).

    The grader's judges would each import PyTorch, nbformat, the test cells' context and the feedback
    templates (3-5 CPU-seconds each); this process does it once and forks a judge per request. The
    warm sandboxes were launched before those imports (``_EARLY_MANY``, one host uid each), so they
    import their own libraries meanwhile; the first judge of each slot adopts one (:class:`Foster`).
    Requests on ``ctrl_fd`` (a Unix socket): JSON ``{"op": "fork", "slot": k}`` with two descriptors,
    the judge's stdin and stdout; the answer is ``{"ev": "forked", "pid": ...}`` with a pidfd of the
    judge. A judge is a session of its own and dies with this process, which dies with the grader; when
    a judge ends, the sandbox it adopted is killed. EOF on the socket ends everything."""

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
            terminate(early[1][0])
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
                    terminate(proc)            # the judge's sandbox ends with it
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
        if not isinstance(req, dict) or req.get("op") != FORK or len(fds) != 2:
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
            socket.send_fds(ctrl, [json.dumps({"ev": FORKED, "pid": pid, "slot": slot}).encode()], [judge_fd])
            os.close(judge_fd)
        except OSError:
            os.kill(pid, signal.SIGKILL)
            break
    for proc in judges.values():               # judges die with this process (their parent-death signal)
        if proc is not None:
            terminate(proc)
    for item in ahead:
        if item is not None:
            terminate(item[0][1][0])
            sandbox.remove_scratch(item[0][1][2])
    os._exit(0)


def _become_judge(ctrl, fds, early, pidfd, others, server: int) -> None:
    """In a process just forked by :func:`serve_forks`: become an ordinary judge on the two descriptors."""
    global _PARENT

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
        ZYGOTE.early = (key, (Foster(proc.pid, pidfd), sock, inbox))
    main()


if __name__ == "__main__":
    if _FORKS:
        serve_forks(int(_FORKS[0]))
    else:
        main()

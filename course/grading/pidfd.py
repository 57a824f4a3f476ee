"""A process watched and killed through a pidfd: a process this one did not start (the judges' fork server started
it), with ``Popen``'s interface as the grader uses it. A pidfd names that process and no other, even once it has
ended and been reaped by its parent, so no signal ever reaches a process that took its pid."""

from __future__ import annotations

import os
import select
import signal
import subprocess

__all__ = ["PidfdProcess"]


class PidfdProcess:
    """``pid`` and its ``pidfd`` (this object's to close, :meth:`close`). ``returncode`` is -SIGKILL once it has
    ended: its status is its parent's to collect."""

    stdin = stdout = None

    def __init__(self, pid: int, pidfd: int, what: str = "process"):
        self.pid, self.pidfd, self.returncode, self.what = pid, pidfd, None, what

    def poll(self):
        if self.returncode is None and select.select([self.pidfd], [], [], 0)[0]:
            self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            if not select.select([self.pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.what, timeout)
            self.returncode = -signal.SIGKILL
        return self.returncode

    def kill(self):
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except (ProcessLookupError, OSError):
            pass

    def close(self):
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1

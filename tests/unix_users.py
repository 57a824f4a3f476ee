"""Real Unix accounts for the tests that need learners (the exchange's, the hub's): made, used and removed one
test at a time across pytest's workers (a file lock), since the accounts have fixed names and every such test
opens the checkout's folders for traversal (o+x) until it ends, which another test's end would take back."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def unix_accounts(names):
    """Make the accounts ``names`` (home 0700, bash) and open this checkout and its venv for traversal; undo both
    at the end. Held by one test at a time on this machine."""
    with FileLock(str(Path(tempfile.gettempdir()) / "course-tests-unix-accounts.lock")):
        opened, made = [], []
        try:
            for folder in {*Path(sys.prefix).resolve().parents, *ROOT.resolve().parents, ROOT.resolve()}:
                mode = folder.stat().st_mode
                if not mode & 0o001:
                    folder.chmod(mode | 0o001)
                    opened.append((folder, mode))
            for name in names:
                subprocess.run(["userdel", "-r", name], capture_output=True)        # a crashed earlier run
                shutil.rmtree(f"/home/{name}", ignore_errors=True)      # its home, which useradd would not chown
                subprocess.run(["useradd", "-m", "-K", "HOME_MODE=0700", "-s", "/bin/bash", name], check=True,
                               capture_output=True)
                made.append(name)
            yield made
        finally:
            for name in made:
                subprocess.run(["userdel", "-r", name], capture_output=True)
            for folder, mode in opened:
                folder.chmod(mode)

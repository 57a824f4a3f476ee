"""Reading and writing where a learner can write, never through a link and never by a name twice.

The grader and the exchange run with the instructor's rights (often root); a learner controls whatever
she may write: her folders in the exchange's ``inbound/``, and anything a submissions folder holds. A
path opened by its name is resolved afresh at every open, so a check made on it (``lstat``, an owner)
says nothing of what the next open finds: a folder swapped for a link between the two, or a link in any
parent folder, sends the open elsewhere. Everything here is opened **relative to a descriptor already
held**, one component at a time, each with ``O_NOFOLLOW`` (a link at any depth is refused, never
followed), and checked on the open descriptor (``fstat``): its kind, its owner, its number of names.
What the check saw is what is read.

* :func:`open_folder` opens a folder below a trusted base, component by component;
* :func:`read_tree` reads a learner's folder from its descriptor: each plain file of hers, with what was
  refused and why (a link, a hard link, a special file, another owner's file, too many or too large);
* :func:`read_file` reads one plain file below a trusted base.

Refusals are values (:class:`Refusal`), so one bad entry never stops the honest files beside it.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
import pwd

__all__ = ["Refusal", "Tree", "open_folder", "read_tree", "read_file", "entry_problem"]

MAX_DEPTH = 32                      # folders below a submission's own: a lesson needs one or two
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Refusal:
    """One entry not read: its path below the folder read, and why, in words."""

    path: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.why}" if self.path else self.why


@dataclass
class Tree:
    """What :func:`read_tree` read: ``files`` (relative path -> bytes), ``folders`` (relative paths, parents
    first), ``refused`` (what was not read), ``latest`` (the latest ``ctime`` of everything read, taken on
    the open descriptors after reading: a file rewritten while it was read is timed by its rewrite)."""

    files: dict[str, bytes] = field(default_factory=dict)
    folders: list[str] = field(default_factory=list)
    refused: list[Refusal] = field(default_factory=list)
    latest: float = 0.0
    size: int = 0


def _account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def entry_problem(st: os.stat_result, owner: int | None, *, folder: bool | None = None) -> str | None:
    """Why an opened entry (``fstat`` of its descriptor) is not a learner's own plain file or folder."""
    is_dir, is_reg = stat.S_ISDIR(st.st_mode), stat.S_ISREG(st.st_mode)
    if folder is True and not is_dir:
        return "is not a folder"
    if folder is False and not is_reg:
        return "is not a plain file (a pipe, a device, a socket or a folder)"
    if not (is_dir or is_reg):
        return "is a special file (a pipe, a device or a socket)"
    if is_reg and st.st_nlink > 1:
        return f"is a hard link ({st.st_nlink} names for one file, one of them elsewhere)"
    if owner is not None and st.st_uid != owner:
        return f"belongs to {_account(st.st_uid)!r}, not to {_account(owner)!r}"
    return None


def _opened(name: str, dir_fd: int, flags: int) -> tuple[int | None, str]:
    """``os.open(name, flags, dir_fd=dir_fd)``, or ``(None, why)``: a link is refused, never followed."""
    try:
        return os.open(name, flags, dir_fd=dir_fd), ""
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            return None, "is a symbolic link (links are never followed)"
        if exc.errno == errno.ENOTDIR:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError:
                return None, "is not a folder"
            return None, ("is a symbolic link (links are never followed)" if stat.S_ISLNK(st.st_mode)
                          else "is not a folder")
        if exc.errno == errno.ENOENT:
            return None, "does not exist (or was removed while it was read)"
        return None, f"cannot be opened ({exc.strerror or exc})"


def open_folder(base: Path | int, parts: list[str] | tuple[str, ...], *, owner: int | None = None) -> tuple[int | None, str]:
    """A descriptor of ``base/parts[0]/parts[1]/...``, each component opened below the one before with
    ``O_NOFOLLOW`` and checked on its descriptor (a folder, of ``owner`` when given), or ``(None, why)``.
    ``base`` is trusted (the instructor's own folder: opened by its name) or a descriptor (kept open)."""
    if isinstance(base, int):
        fd = os.dup(base)
    else:
        try:
            fd = os.open(os.fspath(base), os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            return None, f"{base}: cannot be opened ({exc.strerror or exc})"
    shown = []
    for part in parts:
        shown.append(part)
        if part in ("", ".", "..") or "/" in part:
            os.close(fd)
            return None, f"{'/'.join(shown)}: is not a folder's name"
        child, why = _opened(part, fd, _DIR)
        os.close(fd)
        if child is None:
            return None, f"{'/'.join(shown)}: {why}"
        problem = entry_problem(os.fstat(child), owner, folder=True)
        if problem:
            os.close(child)
            return None, f"{'/'.join(shown)}: {problem}"
        fd = child
    return fd, ""


def read_file(dir_fd: int, name: str, *, owner: int | None = None, max_bytes: int) -> tuple[bytes | None, str]:
    """The bytes of the plain file ``name`` in the open folder ``dir_fd`` (of ``owner`` when given, one name,
    at most ``max_bytes``), or ``(None, why)``."""
    fd, why = _opened(name, dir_fd, _FILE)
    if fd is None:
        return None, why
    try:
        problem = entry_problem(os.fstat(fd), owner, folder=False)
        if problem:
            return None, problem
        if os.fstat(fd).st_size > max_bytes:
            return None, f"is larger than {max_bytes // 2**20 or 1} MiB"
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            return None, f"grew past {max_bytes // 2**20 or 1} MiB while it was read"
        return data, ""
    finally:
        os.close(fd)


def read_tree(folder_fd: int, *, owner: int | None, max_files: int, max_bytes: int, max_depth: int = MAX_DEPTH,
              keep_bytes: bool = True) -> Tree:
    """Every plain file and folder below the open folder ``folder_fd``, read through descriptors only.

    An entry that is a link, a hard link, a special file, or not ``owner``'s (when given) is refused and
    listed, and what is beside it is still read. Past ``max_files`` entries, ``max_bytes`` in all or ``max_depth``
    folders deep, the rest is refused. Walked with a stack of its own, not by recursion: no nesting a learner
    makes can exhaust the reader's. ``keep_bytes=False`` opens and checks every file but reads none (the
    sizes and times come from ``fstat``). ``folder_fd`` stays open (the caller's)."""
    tree = Tree(latest=os.fstat(folder_fd).st_ctime)
    count = 0
    stack = [(os.dup(folder_fd), "", 0)]
    try:
        while stack:
            fd, rel, depth = stack.pop()
            try:
                try:
                    names = sorted(os.listdir(fd))
                except OSError as exc:
                    tree.refused.append(Refusal(rel, f"cannot be listed ({exc.strerror or exc})"))
                    continue
                for name in names:
                    path = f"{rel}/{name}" if rel else name
                    count += 1
                    if count > max_files:
                        tree.refused.append(Refusal(path, f"is past the {max_files} files a submission may hold"))
                        continue
                    try:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    except OSError as exc:
                        tree.refused.append(Refusal(path, f"cannot be read ({exc.strerror or exc})"))
                        continue
                    is_dir = stat.S_ISDIR(st.st_mode)
                    if is_dir and depth + 1 > max_depth:
                        tree.refused.append(Refusal(path, f"is nested more than {max_depth} folders deep"))
                        continue
                    child, why = _opened(name, fd, _DIR if is_dir else _FILE)
                    if child is None:
                        tree.refused.append(Refusal(path, why))
                        continue
                    keep_open = False
                    try:
                        opened = os.fstat(child)
                        problem = entry_problem(opened, owner)
                        if problem:
                            tree.refused.append(Refusal(path, problem))
                            continue
                        if stat.S_ISDIR(opened.st_mode):
                            tree.folders.append(path)
                            stack.append((child, path, depth + 1))
                            keep_open = True
                        else:
                            left = max_bytes - tree.size
                            if not keep_bytes:
                                size = opened.st_size
                                data = b""
                            else:
                                with os.fdopen(child, "rb", closefd=False) as fh:
                                    data = fh.read(left + 1)
                                size = len(data)
                            if size > left:
                                tree.refused.append(Refusal(path, f"is past the {max_bytes // 2**20} MiB a submission "
                                                                  "may hold"))
                                continue
                            tree.size += size
                            tree.files[path] = data
                        tree.latest = max(tree.latest, os.fstat(child).st_ctime)
                    finally:
                        if not keep_open:
                            os.close(child)
            finally:
                os.close(fd)
    finally:
        for fd, _, _ in stack:                  # what is left open after an error
            os.close(fd)
    tree.folders.sort(key=lambda f: (f.count("/"), f))
    tree.latest = max(tree.latest, os.fstat(folder_fd).st_ctime)
    return tree

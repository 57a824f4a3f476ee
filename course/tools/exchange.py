"""Collecting from nbgrader's exchange by identity, not by name.

nbgrader's own collect takes a submission's student and time from its folder's name,
``inbound/<student>+<lesson>+<timestamp>``: any learner who may write to the exchange could hand in for
another (it only logs a warning about the owner) and date a submission in the year 2999, which then
outranks the victim's real ones and every due date. :class:`CourseCollect` is nbgrader's collect with
three changes, plugged in through nbgrader's exchange API (``c.ExchangeFactory.collect``, written into
every grading workspace's ``nbgrader_config.py``, so ``course workshop collect`` and the formgrader's
Collect button both use it); the folder layout is nbgrader's, so the Assignment List still works:

* **who**: a submission counts only when its folder, and everything in it, belongs to the Unix account the
  name says (the hub's identity: on a JupyterHub every learner is a Unix user). Anything else is refused
  and reported; the named learner's own submissions are collected as usual.
* **when**: a submission's time is when its files were last changed (the latest ``ctime`` in it, which no
  user can set back), never the name's timestamp: a forged date neither outranks a real submission nor
  passes a due date.
* **what**: files are copied by descriptor, never through a link, and only plain files and folders of
  that account (at most :data:`MAX_FILES`, :data:`MAX_BYTES` in all).

On one machine where every learner uses the same account (a demo), names cannot be told apart by owner:
``CourseCollect.same_account = True`` (``course workshop collect --same-account``) then trusts the names,
still times submissions by ``ctime`` and still never follows a link.
"""

from __future__ import annotations

import datetime
import glob
import json
import os
import stat
from collections import defaultdict
from pathlib import Path

from nbgrader.exchange.default.collect import ExchangeCollect
from traitlets import Bool

__all__ = ["CourseCollect", "verify", "refused_report", "MAX_FILES", "MAX_BYTES"]

MAX_FILES = 1000                     # entries in one submission folder
MAX_BYTES = 512 * 2**20              # bytes of files in one submission folder


def _account(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def verify(folder: Path, student: str, *, same_account: bool = False) -> tuple[datetime.datetime | None, str]:
    """``(time, "")`` for a submission folder that belongs to ``student`` (its time: the latest ``ctime`` in
    it, UTC), else ``(None, why)``. Never follows a link."""
    import pwd

    try:
        top = os.lstat(folder)
    except OSError as exc:
        return None, f"cannot read it ({exc.strerror})"
    if not stat.S_ISDIR(top.st_mode):
        return None, "it is not a folder (a link or a file)"
    if same_account:
        uid = top.st_uid
    else:
        try:
            uid = pwd.getpwnam(student).pw_uid
        except KeyError:
            return None, (f"there is no account called {student!r} on this machine, so nobody can show they are "
                          f"{student!r} (on one account for everyone, collect with --same-account)")
        if top.st_uid != uid:
            return None, (f"it belongs to {_account(top.st_uid)!r}, not to {student!r}: one learner cannot hand "
                          "in for another")
    latest, count, size = top.st_ctime, 0, 0
    for here, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            count += 1
            if count > MAX_FILES:
                return None, f"it holds more than {MAX_FILES} files"
            try:
                st = os.lstat(os.path.join(here, name))
            except OSError as exc:
                return None, f"cannot read {name} ({exc.strerror})"
            if stat.S_ISLNK(st.st_mode) or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                return None, f"{name} is a link or a special file (only the learner's own files are collected)"
            if st.st_uid != uid:
                return None, f"{name} belongs to {_account(st.st_uid)!r}, not to {student!r}"
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                return None, f"{name} is a hard link (another name for a file elsewhere)"
            size += st.st_size if stat.S_ISREG(st.st_mode) else 0
            latest = max(latest, st.st_ctime)
    if size > MAX_BYTES:
        return None, f"it holds {size / 2**20:.0f} MiB, more than the {MAX_BYTES // 2**20} MiB a submission may"
    return _utc(latest), ""


def _utc(seconds: float) -> datetime.datetime:
    """A ``ctime`` as a naive UTC datetime (as nbgrader's gradebook keeps times)."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).replace(tzinfo=None)


def _copy(src: Path, dest: Path, uid: int | None) -> float:
    """Copy the folder ``src`` to ``dest``, each file opened with ``O_NOFOLLOW`` and checked again on the
    open descriptor (a plain file of ``uid``): a file swapped for a link after :func:`verify` is refused.

    Returns the latest ``ctime`` of what was copied, read on each open file after its copy: a file rewritten
    after :func:`verify` timed the folder (a learner watching their own folder for the collector) is timed
    by its rewrite, not by the folder's earlier state."""
    dest.mkdir(parents=True, exist_ok=True)
    latest = os.lstat(src).st_ctime
    for here, dirs, files in os.walk(src, followlinks=False):
        rel = Path(here).relative_to(src)
        for name in dirs:
            (dest / rel / name).mkdir(exist_ok=True)
        for name in files:
            fd = os.open(os.path.join(here, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid) or st.st_nlink > 1:
                    raise PermissionError(f"{name} changed into something that is not the learner's own file")
                with os.fdopen(fd, "rb", closefd=False) as fh, open(dest / rel / name, "wb") as out:
                    remaining = MAX_BYTES
                    while chunk := fh.read(1 << 20):
                        remaining -= len(chunk)
                        if remaining < 0:
                            raise PermissionError(f"{name} grew past {MAX_BYTES // 2**20} MiB")
                        out.write(chunk)
                latest = max(latest, os.fstat(fd).st_ctime)
            finally:
                os.close(fd)
    return latest


def refused_report(root: Path, lesson: str) -> Path:
    """Where :class:`CourseCollect` writes what it refused for ``lesson`` (JSON: [{folder, student, why}])."""
    return Path(root) / "collect" / f"refused-{lesson}.json"


class CourseCollect(ExchangeCollect):
    """nbgrader's collect, by identity and verified time (see the module's docstring)."""

    same_account = Bool(False, help="Every learner uses the same Unix account (a demo on one machine): trust the "
                                    "names in the exchange, since owners cannot tell learners apart.").tag(config=True)

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.isdir(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        student_id = self.coursedir.student_id if self.coursedir.student_id else "*"
        pattern = os.path.join(self.inbound_path, f"{glob.escape(student_id) if student_id != '*' else '*'}+"
                                                  f"{glob.escape(self.coursedir.assignment_id)}+*")
        self.refused, records = [], []
        for path in sorted(glob.glob(pattern)):
            name = os.path.basename(path)
            parts = name.rsplit("+", 3)
            if len(parts) < 3:
                self.refused.append({"folder": name, "student": "", "why": "not a submission's name"})
                continue
            when, why = verify(Path(path), parts[0], same_account=self.same_account)
            if why:
                self.refused.append({"folder": name, "student": parts[0], "why": why})
                self.log.warning("refused %s: %s", name, why)
                continue
            records.append({"username": parts[0], "filename": name, "timestamp": when})
        self._duedate()
        latest = []
        for student, mine in sorted(self._grouped(records).items()):
            mine.sort(key=lambda r: r["timestamp"], reverse=True)
            on_time = [r for r in mine if self.duedate is None or r["timestamp"] <= self.duedate]
            latest.append(on_time[0] if (self.before_duedate and on_time) else mine[0])
        self.src_records = latest
        report = refused_report(Path(self.coursedir.root), self.coursedir.assignment_id)
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(self.refused, indent=1) + "\n", encoding="utf-8")

    @staticmethod
    def _grouped(records):
        groups = defaultdict(list)
        for record in records:
            groups[record["username"]].append(record)
        return groups

    def _duedate(self):
        from nbgrader.api import Gradebook, MissingEntry

        with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
            try:
                self.duedate = gb.find_assignment(self.coursedir.assignment_id).duedate
            except MissingEntry:
                self.duedate = None

    def copy_files(self):
        """Each learner's chosen submission into ``submitted/<student>/<lesson>/`` (replacing what was collected
        before, unless it is that very submission): the choice is :meth:`init_src`'s, by verified time."""
        import shutil

        for rec in self.src_records:
            student = rec["username"]
            src = Path(self.inbound_path) / rec["filename"]
            dest = Path(self.coursedir.format_path(self.coursedir.submitted_directory, student,
                                                   self.coursedir.assignment_id))
            mark = dest / ".course-collected.json"
            try:
                if json.loads(mark.read_text(encoding="utf-8")).get("folder") == rec["filename"]:
                    self.log.info("Already collected: %s %s", student, self.coursedir.assignment_id)
                    continue
            except (OSError, ValueError, AttributeError):
                pass
            if dest.exists():
                shutil.rmtree(dest)
            uid = None if self.same_account else os.lstat(src).st_uid
            try:
                copied = _copy(src, dest, uid)
            except OSError as exc:            # changed between the check and the copy: refused too
                shutil.rmtree(dest, ignore_errors=True)
                self.refused.append({"folder": rec["filename"], "student": student, "why": str(exc)})
                continue
            when = max(rec["timestamp"], _utc(copied))
            if when > rec["timestamp"]:       # rewritten while being collected: its time is the rewrite's
                self.log.warning("%s changed while it was collected: timed %s, not %s", rec["filename"], when,
                                 rec["timestamp"])
            mark.write_text(json.dumps({"folder": rec["filename"], "time": when.isoformat() + "Z",
                                        **({"late": True} if self.duedate is not None and when > self.duedate
                                           else {})}) + "\n", encoding="utf-8")
            self.log.info("Collected submission: %s %s", student, self.coursedir.assignment_id)
        report = refused_report(Path(self.coursedir.root), self.coursedir.assignment_id)
        report.write_text(json.dumps(self.refused, indent=1) + "\n", encoding="utf-8")

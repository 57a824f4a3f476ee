"""Collecting from nbgrader's exchange by identity, not by name.

nbgrader's own collect takes a submission's student and time from its folder's name,
``inbound/<student>+<lesson>+<timestamp>``: any learner who may write to the exchange could hand in for
another (it only logs a warning about the owner) and date a submission in the year 2999, which then
outranks the victim's real ones and every due date. :class:`CourseCollect` is nbgrader's collect with
three changes, plugged in through nbgrader's exchange API (``c.ExchangeFactory.collect``, written into
every grading workspace's ``nbgrader_config.py``, so ``course workshop collect`` and the formgrader's
Collect button both use it); the folder layout is nbgrader's, so the Assignment List still works:

* **who**: a submission counts only when its folder belongs to the Unix account the name says (the hub's
  identity: on a JupyterHub every learner is a Unix user); anything else is refused and reported. Inside
  it, only that account's own plain files are collected: an entry of another owner is left out, reported.
* **when**: a submission's time is when its files were last changed (the latest ``ctime`` in it, which no
  user can set back), never the name's timestamp: a forged date neither outranks a real submission nor
  passes a due date.
* **what**: the folder is read through descriptors only (:mod:`course.grading.owned`): each component opened
  below the one before with ``O_NOFOLLOW`` and checked on the open descriptor, so a link at any depth (the
  notebook, a folder inside, the submission's folder itself, or one swapped in while collect runs) is never
  followed, and a hard link, a special file or a file of another account is never read. What is left out is
  named in the report; the learner's own files beside it are collected (at most :data:`MAX_FILES`,
  :data:`MAX_BYTES` in all).

The exchange's own folders (the course's, ``inbound/``, ``outbound/``, ``feedback/``) are made and checked by
:func:`secure_course_folder` before collect, release and the return of feedback use them: the exchange's
root is writable by every account, so a learner could otherwise make one of them first, as a link or as her
own folder. :class:`CourseReleaseAssignment` and :class:`CourseReleaseFeedback` plug that check into
nbgrader's release and release_feedback (the formgrader's buttons included).

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
from nbgrader.exchange.default.list import ExchangeList
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment as ReleaseAssignment
from nbgrader.exchange.default.release_feedback import ExchangeReleaseFeedback as ReleaseFeedback
from traitlets import Bool

__all__ = ["CourseCollect", "CourseList", "CourseReleaseAssignment", "CourseReleaseFeedback", "verify", "read_submission",
           "secure_course_folder", "refused_report", "MAX_FILES", "MAX_BYTES"]

MAX_FILES = 1000                     # entries in one submission folder
MAX_BYTES = 512 * 2**20              # bytes of files in one submission folder


def _account(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _owner_of(student: str, top: os.stat_result, same_account: bool) -> tuple[int | None, str]:
    """The uid whose files a submission named for ``student`` may hold, or ``(None, why)``."""
    import pwd

    if same_account:
        return top.st_uid, ""
    try:
        uid = pwd.getpwnam(student).pw_uid
    except KeyError:
        return None, (f"there is no account called {student!r} on this machine, so nobody can show they are "
                      f"{student!r} (on one account for everyone, collect with --same-account)")
    if top.st_uid != uid:
        return None, (f"it belongs to {_account(top.st_uid)!r}, not to {student!r}: one learner cannot hand "
                      "in for another")
    return uid, ""


def read_submission(folder: Path, student: str, *, same_account: bool = False, keep_bytes: bool = True):
    """A submission folder read with :mod:`course.grading.owned` (descriptors only, never a link): ``(tree,
    why)``. ``why`` says why the whole folder is refused (not a folder, not ``student``'s); otherwise
    ``tree.refused`` lists the entries left out (links, hard links, special files, another owner's files, past
    :data:`MAX_FILES` or :data:`MAX_BYTES`), and the learner's own files beside them are in ``tree.files``.
    ``keep_bytes=False`` opens and checks every file (their times are taken on the open descriptors) and reads
    none."""
    from course.grading import owned

    fd, why = owned.open_folder(folder.parent, [folder.name])
    if fd is None:
        return None, why.split(": ", 1)[-1].replace("is a symbolic link", "it is a link").replace(
            "is not a folder", "it is not a folder (a link or a file)")
    try:
        uid, why = _owner_of(student, os.fstat(fd), same_account)
        if uid is None:
            return None, why
        return owned.read_tree(fd, owner=uid, max_files=MAX_FILES, max_bytes=MAX_BYTES, keep_bytes=keep_bytes), ""
    finally:
        os.close(fd)


def verify(folder: Path, student: str, *, same_account: bool = False) -> tuple[datetime.datetime | None, str]:
    """``(time, "")`` for a submission folder that belongs to ``student`` (its time: the latest ``ctime`` of
    what it holds, UTC), else ``(None, why)``. Never follows a link; entries that are not the learner's own
    plain files are left out (:func:`read_submission`), not counted in the time."""
    tree, why = read_submission(folder, student, same_account=same_account, keep_bytes=False)
    return (None, why) if tree is None else (_utc(tree.latest), "")


def _utc(seconds: float) -> datetime.datetime:
    """A ``ctime`` as a naive UTC datetime (as nbgrader's gradebook keeps times)."""
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).replace(tzinfo=None)


def write_tree(tree, dest: Path) -> None:
    """What :func:`read_submission` read, written under ``dest`` (a new folder of the instructor's): it
    replaces ``dest`` in one rename, so a collect that stops half-way leaves the earlier copy."""
    import shutil
    import tempfile

    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.collecting-", dir=dest.parent))
    try:
        for rel in tree.folders:
            (staging / rel).mkdir(parents=True, exist_ok=True)
        for rel, data in tree.files.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_bytes(data)
        if dest.exists():
            shutil.rmtree(dest)
        os.rename(staging, dest)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def refused_report(root: Path, lesson: str) -> Path:
    """Where :class:`CourseCollect` writes what it refused for ``lesson`` (JSON: [{folder, student, why}])."""
    return Path(root) / "collect" / f"refused-{lesson}.json"


# The exchange's own folders, as nbgrader makes them: (name below the course folder, mode). Learners write in
# inbound/ only (0733: they may add a folder there, and neither list nor read the others').
COURSE_FOLDERS = (("", 0o755), ("outbound", 0o755), ("inbound", 0o2733), ("feedback", 0o711))


def secure_course_folder(root: Path, course_id: str, *, groupshared: bool = False) -> None:
    """Make (or check) the exchange's folders for ``course_id`` as the instructor's own, before nbgrader
    writes, reads or removes anything in them with the instructor's rights.

    The exchange's root is writable by every account (mode 1777, like /tmp), so a learner could make the
    course folder first, or any folder in it, as a link (to a folder of root's, which nbgrader's own check of
    the owner follows) or as a folder of hers, and have the next release, collect or return write, read or
    remove there. So, without following a link at any step:

    * the root must be a folder of root's or of this account's: the owner of a sticky folder may rename what
      others put in it (the course folder, swapped for a link between a check and nbgrader's next step), so a
      root a learner owns is refused; and one that others may write must have the sticky bit;
    * each of the course's folders is made here with ``mkdir`` (which never follows a link), then checked: a
      real folder, of this account (or root), that no one else may write but ``inbound/`` (0733, as nbgrader
      means it). Once the course folder is this account's (0755) under such a root, nobody else can rename,
      replace or add anything in it, or in ``outbound/`` and ``feedback/`` below it.

    ``groupshared`` (nbgrader's ``CourseDirectory.groupshared``, several instructors sharing a group): folders
    of another member of one's groups, and writable by the group, are accepted. Raises ``PermissionError``
    saying which folder is wrong and what to do."""
    root = Path(root)
    me = os.geteuid()
    mine = (0, me)
    groups = set(os.getgroups()) | {os.getegid()}

    def owned_here(st) -> bool:
        return st.st_uid in mine or (groupshared and st.st_gid in groups)

    try:
        top = os.lstat(root)
    except OSError as exc:
        raise PermissionError(f"the exchange {root} cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISLNK(top.st_mode) or not stat.S_ISDIR(top.st_mode):
        raise PermissionError(f"the exchange {root} is not a folder (a link?): make it a folder of its own")
    if not owned_here(top):
        raise PermissionError(f"the exchange {root} belongs to {_account(top.st_uid)!r}, not to you ({_account(me)!r}) "
                              f"or root: its owner could rename the course's folders in it while nbgrader works; make it "
                              f"yours (chown) or use another exchange")
    writable_by_others = top.st_mode & 0o002 or (top.st_mode & 0o020 and not groupshared)
    if writable_by_others and not top.st_mode & stat.S_ISVTX:
        raise PermissionError(f"the exchange {root} is writable by others without the sticky bit (mode "
                              f"{stat.S_IMODE(top.st_mode):o}): any of them could rename the course's folder away; "
                              f"chmod 1777 {root}")
    for name, mode in COURSE_FOLDERS:
        path = root / course_id / name if name else root / course_id
        try:
            os.mkdir(path)
            os.chmod(path, mode | (0o2020 if groupshared and name != "inbound" else 0))
        except FileExistsError:
            pass
        st = os.lstat(path)
        shown = f"{course_id}/{name}" if name else course_id
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise PermissionError(f"the exchange's folder {shown} is a link or a file, not a folder (made by a "
                                  f"learner's account?): remove {path}, then run the command again")
        if not owned_here(st):
            raise PermissionError(f"the exchange's folder {shown} belongs to {_account(st.st_uid)!r}, not to you "
                                  f"({_account(me)!r}) or root: a learner's account may have made it first; remove {path}, "
                                  "then run the command again")
        others = 0o002 if groupshared else 0o022
        if name != "inbound" and st.st_mode & others:
            raise PermissionError(f"the exchange's folder {shown} is writable by others (mode "
                                  f"{stat.S_IMODE(st.st_mode):o}): chmod {mode:o} {path}")


def _secured(app) -> None:
    """:func:`secure_course_folder` for an nbgrader exchange command, or the command fails with the reason."""
    try:
        secure_course_folder(Path(app.root), app.coursedir.course_id, groupshared=bool(app.coursedir.groupshared))
    except PermissionError as exc:
        app.fail(str(exc))


class CourseReleaseAssignment(ReleaseAssignment):
    """nbgrader's release_assignment, into exchange folders made and checked by :func:`secure_course_folder`."""

    def init_dest(self):
        _secured(self)
        super().init_dest()


class CourseList(ExchangeList):
    """nbgrader's list; before it removes a released lesson (unrelease, as the instructor), the exchange's folders
    are made and checked by :func:`secure_course_folder` (listing, as a learner does, is left as it is)."""

    def remove_files(self):
        _secured(self)
        return super().remove_files()


class CourseReleaseFeedback(ReleaseFeedback):
    """nbgrader's release_feedback, into exchange folders made and checked by :func:`secure_course_folder`."""

    def init_dest(self):
        _secured(self)
        super().init_dest()


class CourseCollect(ExchangeCollect):
    """nbgrader's collect, by identity and verified time (see the module's docstring)."""

    same_account = Bool(False, help="Every learner uses the same Unix account (a demo on one machine): trust the "
                                    "names in the exchange, since owners cannot tell learners apart.").tag(config=True)

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        if not os.path.lexists(self.inbound_path):
            self.fail(f"Course not found: {self.inbound_path}")
        _secured(self)
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
        before, unless it is that very submission): the choice is :meth:`init_src`'s, by verified time. The folder
        is read again here, through descriptors only (:func:`read_submission`): what this copy reads is what its
        checks saw, whatever the folder became since :meth:`init_src`. Entries that are not the learner's own plain
        files are left out and reported; her own files beside them are collected."""
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
            tree, why = read_submission(src, student, same_account=self.same_account)
            if tree is None:              # changed between the choice and the copy: refused too
                self.refused.append({"folder": rec["filename"], "student": student, "why": why})
                continue
            for entry in tree.refused:
                self.refused.append({"folder": rec["filename"], "student": student,
                                     "why": f"{entry.path} {entry.why}: left out (the rest was collected)"})
            write_tree(tree, dest)
            when = max(rec["timestamp"], _utc(tree.latest))
            if when > rec["timestamp"]:       # rewritten while being collected: its time is the rewrite's
                self.log.warning("%s changed while it was collected: timed %s, not %s", rec["filename"], when,
                                 rec["timestamp"])
            mark.write_text(json.dumps({"folder": rec["filename"], "time": when.isoformat() + "Z",
                                        **({"late": True} if self.duedate is not None and when > self.duedate
                                           else {}),
                                        **({"left_out": [str(e) for e in tree.refused]} if tree.refused else {})})
                            + "\n", encoding="utf-8")
            self.log.info("Collected submission: %s %s", student, self.coursedir.assignment_id)
        report = refused_report(Path(self.coursedir.root), self.coursedir.assignment_id)
        report.write_text(json.dumps(self.refused, indent=1) + "\n", encoding="utf-8")

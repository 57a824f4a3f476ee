"""``course workshop``: hand lessons out to a room and take them back, with nbgrader's own exchange.

The cycle, host and learners on one machine (or one JupyterHub) sharing an exchange folder::

    host     course workshop release 00 01        lessons go to the exchange (nbgrader release_assignment)
    learner  Assignment List: Fetch, work, Submit  (or `nbgrader fetch_assignment` / `nbgrader submit`)
    host     course workshop collect              submissions land in GRADES/submitted/ (nbgrader collect)
    host     course workshop grade                `course grade GRADES/submitted --out GRADES` (sandboxed)
    host     course workshop return               feedback goes to the exchange (nbgrader release_feedback)
    learner  Assignment List: Fetch Feedback      (or `nbgrader fetch_feedback`)

GRADES is the one grading workspace (``autograde/workspace`` unless ``--grades`` or ``$COURSE_GRADES``
say otherwise): its gradebook is the one the instructor lab's formgrader shows. The exchange is
``.state/exchange`` in the checkout unless ``--exchange`` or ``$COURSE_EXCHANGE`` say otherwise; the
course id is ``attention-course`` unless ``--course-id`` or ``$COURSE_ID`` say otherwise. Learners
must use the same exchange and course id (``course lab --exchange ... --course-id ...``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from course.commands import lab
from course.commands.lessons import all_lessons, resolve
from course.tools.workspace import quiet_logs

__all__ = ["release", "collect", "grade", "give_back", "status"]


def _workspace(grades=None, exchange=None, cid=None, lessons=None):
    """The grading workspace, after the exchange's folders are made and checked as the instructor's own
    (:func:`course.tools.exchange.secure_course_folder`): before any nbgrader step (an unrelease removes files)."""
    from course.tools.exchange import secure_course_folder

    exchange_path = lab.ensure_exchange(lab.exchange_root(exchange))
    try:
        secure_course_folder(exchange_path, lab.course_id(cid))
    except PermissionError as exc:
        raise SystemExit(f"course workshop: {exc}") from None
    return lab.prepare_gradebook(lab.grades_dir(grades), exchange_path, lab.course_id(cid), lessons)


def _run(ws, what: str, *args, **api) -> None:
    with quiet_logs():
        result = getattr(ws.api(**api), what)(*args)
    if not result or not result.get("success"):
        log = (result or {}).get("error") or (result or {}).get("log") or "no log"
        raise SystemExit(f"course workshop: nbgrader {what} {' '.join(map(str, args))} failed:\n{log}")


def release(lesson_names, *, grades=None, exchange=None, cid=None) -> list[str]:
    """Release lessons (all when none named) to the exchange; releasing again replaces them."""
    lessons = resolve(lesson_names or None)
    ws = _workspace(grades, exchange, cid, lessons)
    for l in lessons:
        released = ws.exchange / ws.course_id / "outbound" / l.id
        if released.exists():
            _run(ws, "unrelease", l.id)
        _run(ws, "release_assignment", l.id)
        print(f"released {l.id} to {released}")
    return [l.id for l in lessons]


def collect(lesson_names, *, grades=None, exchange=None, cid=None, same_account: bool = False) -> dict[str, list[str]]:
    """Copy every learner's latest submission into GRADES/submitted/<student>/<lesson>/, by identity and
    verified time (:class:`course.tools.exchange.CourseCollect`). A submission that is not its named learner's
    (another owner, a link, a forged folder) is refused and named here; the others are collected all the
    same. Raises ``SystemExit(1)`` after collecting when anything was refused. ``same_account``: every
    learner shares one Unix account (a demo): the names are trusted."""
    from course.grading.results import shown
    from course.tools.exchange import refused_report

    lessons = resolve(lesson_names or None)
    ws = _workspace(grades, exchange, cid, lessons)
    found, refused = {}, []
    for l in lessons:
        inbound = ws.exchange / ws.course_id / "inbound"
        if not any(inbound.glob(f"*+{l.id}+*")):
            continue
        report = refused_report(ws.path, l.id)
        report.unlink(missing_ok=True)
        _run(ws, "collect", l.id, same_account=same_account)
        try:
            refused += json.loads(report.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            pass
        students = sorted(p.parent.name for p in (ws.path / "submitted").glob(f"*/{l.id}") if p.is_dir())
        found[l.id] = students
        print(f"collected {l.id}: {len(students)} submission(s) ({', '.join(shown(s) for s in students)})")
    if not found:
        print("course workshop: nothing submitted yet.")
    for entry in refused:
        print(shown(f"REFUSED {entry.get('folder')}: {entry.get('why')}"))
    if refused:
        raise SystemExit(f"course workshop collect: {len(refused)} folder(s) or file(s) refused (listed above): not "
                         "their named learner's own, links, or past a submission's limits. Everything else was collected.")
    return found


def grade(lesson_names, *, grades=None, exchange=None, cid=None, options=None, **settings):
    """``course grade GRADES/submitted --out GRADES``: sandboxed, scores into the gradebook. ``options``: a
    :class:`course.grading.batch.Options` (or its fields as keywords); the lessons are the ones named."""
    import dataclasses

    from course.grading.batch import Options, grade as grade_all

    lessons = resolve(lesson_names or None)
    ws = _workspace(grades, exchange, cid, lessons)
    submitted = ws.path / "submitted"
    if not submitted.is_dir():
        raise SystemExit("course workshop: nothing collected yet (run `course workshop collect` first).")
    options = dataclasses.replace(options or Options(**settings),
                                  lessons=tuple(l.id for l in lessons) if lesson_names else None)
    return grade_all(submitted, ws.path, options)


def give_back(lesson_names, *, grades=None, exchange=None, cid=None) -> dict[str, list[str]]:
    """Release each graded submission's feedback page to the exchange (nbgrader release_feedback)."""
    lessons = resolve(lesson_names or None)
    ws = _workspace(grades, exchange, cid, lessons)
    returned = {}
    for l in lessons:
        students, secrets, skipped = [], {}, []
        for page in sorted((ws.path / "feedback").glob(f"*/{l.id}/{l.id}.html")):
            student = page.parent.parent.name
            skipped.append(student)                 # until its keys are checked and copied below
            # nbgrader matches feedback to a submission by the secret and time nbgrader submit wrote: both are the
            # learner's files, read and checked here (one bad pair stopped release_feedback for everyone).
            keys, why = submission_keys(ws.path / "submitted" / student / l.id)
            if why:
                print(f"  {student}/{l.id}: {why}: skipped")
                continue
            secrets.setdefault(keys["submission_secret.txt"], []).append((student, page, keys))
        for secret, holders in secrets.items():
            if len(holders) > 1:         # a page is released under its secret's hash: one would replace the other
                print(f"  {', '.join(s for s, _, _ in holders)}/{l.id}: the same submission secret in {len(holders)} "
                      "submissions (copied from another learner's?): none of them returned; ask each to submit again")
                continue
            student, page, keys = holders[0]
            for n, text in keys.items():              # the bytes checked, not the files read again by name
                (page.parent / n).unlink(missing_ok=True)
                (page.parent / n).write_text(text, encoding="utf-8")
            skipped.remove(student)
            # nbgrader's exchange gives each learner their page by name, not by owner: it is copied
            # (mode and all) to a file named by the submission's secret in a folder learners may
            # enter but not list (0711). The grader writes pages 0600, which only the host could read
            # back, and a learner's fetch_feedback would fail; any reader may open it, none can find it.
            page.chmod(0o644)
            students.append(student)
        if students:                    # nbgrader's release_feedback reads every page's keys: the skipped are left out
            _run(ws, "release_feedback", l.id, exclude=tuple(skipped))
            returned[l.id] = students
            print(f"returned feedback on {l.id} to {len(students)} learner(s) ({', '.join(students)})")
    if not returned:
        print("course workshop: no graded submission to return yet (collect and grade first).")
    return returned


SECRET = re.compile(r"[0-9a-f]{32,256}")     # nbgrader submit writes secrets.token_hex(64)


def submission_keys(submitted: Path) -> tuple[dict[str, str], str]:
    """``({"timestamp.txt": ..., "submission_secret.txt": ...}, "")`` for a collected submission whose two keys are
    what ``nbgrader submit`` writes, else ``({}, why)``. Both files are the learner's own: an empty or odd secret
    made nbgrader's release_feedback stop for every learner after this one. Read through descriptors, never a link
    (:mod:`course.grading.owned`)."""
    import os

    from nbgrader.utils import parse_utc

    from course.grading import owned

    fd, why = owned.open_folder(submitted.parent, [submitted.name])
    if fd is None:
        return {}, f"not submitted through the exchange ({why})"
    texts = {}
    try:
        for name in ("timestamp.txt", "submission_secret.txt"):
            data, why = owned.read_file(fd, name, max_bytes=1024)
            if data is None:
                return {}, (f"not submitted through the exchange ({name} missing)" if "does not exist" in why
                            else f"{name} is not one written by nbgrader submit ({why})")
            texts[name] = data.decode("utf-8", errors="replace")
    finally:
        os.close(fd)
    if not SECRET.fullmatch(texts["submission_secret.txt"].strip()):
        return {}, "its submission_secret.txt is not one written by nbgrader submit (ask the learner to submit again)"
    try:
        parse_utc(texts["timestamp.txt"].strip())
    except Exception:  # noqa: BLE001 - dateutil raises several kinds
        return {}, "its timestamp.txt is not a time (ask the learner to submit again)"
    return texts, ""


def status(*, grades=None, exchange=None, cid=None) -> None:
    """What is released, submitted, collected and graded, and, once graded, how the room did: each lesson's mean
    score, the test most of it missed (its rule in the notebook's words) and how many submissions need a look."""
    from course.grading.results import shown

    exchange_path = lab.exchange_root(exchange)
    cid = lab.course_id(cid)
    grades_path = lab.grades_dir(grades)
    course = exchange_path / cid
    print(f"course id {cid}; exchange {exchange_path}; grading workspace {grades_path}")
    from course.grading.report import data as report_data

    report = report_data.load(grades_path, lab.root()) if (grades_path / "results.json").is_file() else None
    for l in all_lessons():
        released = (course / "outbound" / l.id).is_dir()
        inbound = len({p.name.split("+")[0] for p in (course / "inbound").glob(f"*+{l.id}+*")}) if course.is_dir() else 0
        collected = len(list((grades_path / "submitted").glob(f"*/{l.id}")))
        graded = len(list((grades_path / "feedback").glob(f"*/{l.id}/{l.id}.html")))
        print(f"  {l.id:<28} {'released' if released else '-':<9} submitted by {inbound}, collected {collected}, graded {graded}")
        rows = [r for r in report.of(l.id) if r.get("status") not in report_data.REFUSED] if report else []
        if rows:                  # the room at a glance: how it went, and what most of it missed
            mean = sum(float(r.get("score", 0)) for r in rows) / len(rows)
            lesson = report.lessons.get(l.id)
            shares = [(report_data.difficulty_and_discrimination(rows, t.grade_id)[0], t) for t in lesson.tests] \
                if lesson else []
            worst = min(((p, t) for p, t in shares if p is not None), key=lambda pt: pt[0], default=(None, None))
            said = f"mean {mean:.1f} / {lesson.max_score:g}" if lesson and lesson.max_score else f"mean {mean:.1f}"
            if worst[1] is not None and worst[0] < 1:
                said += (f"; most missed: {worst[1].grade_id} (passed by {worst[0]:.0%}): "
                         f"{shown(worst[1].rule)[:90]}")
            flagged = sum(1 for r in report.of(l.id) if r.get("status") != "graded")
            print(f"  {'':<28} {said}" + (f"; {flagged} need a look (course report)" if flagged else ""))

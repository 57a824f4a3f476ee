"""The workshop exchange trusts identity, not names (the trust issue's "one learner replaces another's
submission"), with real Unix users, as a JupyterHub has them.

Alice submits an honest, finished lesson with `nbgrader submit`, as herself. Mallory, another learner of
the same exchange, then tries three things nbgrader's own collect let through:

* impersonation: a folder ``inbound/<alice>+<lesson>+<a time in 2999>`` of her own, holding an untouched
  notebook (nbgrader's collect took it as Alice's newest submission: Alice scored 0);
* a foreign folder: one named for Alice, holding a link to Alice's notebook in Alice's home (a root
  collector following it would read a file Mallory may not);
* a forged time for herself: a submission of her own dated 2999, then a real one; the real one is later;
* links in her own real submission, beside her finished notebook: to a file only root may read, a folder that is
  a link to root's folder, a hard link to that file.

`course workshop collect` refuses the first two and each link, names them and exits non-zero; it collects Alice's
real submission (graded full marks) and Mallory's latest real one, timed by the files' own ``ctime``, without the
links: her notebook gets full marks, and nothing only root may read reaches any file the grader writes.

Needs root (the learners are Unix users it creates; CI runs as root) and useradd.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from planting import build_submission
from test_hub import learner_python
from unix_users import unix_accounts

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
LESSON = "00_softmax_lookup"
COURSE = "exchange-test"
ALICE, MALLORY = "crsx-alice", "crsx-mallory"
SECRET_MARK = b"INSTRUCTOR-ONLY-5f1c9e"                 # stands for the reference solution
SECRET_TEXT = f"{{\"cells\": [], \"note\": \"{SECRET_MARK.decode()}\"}}"


def _why_not() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root: the learners are Unix users this test creates (CI runs as root)"
    for tool in ("useradd", "userdel", "runuser"):
        if shutil.which(tool) is None:
            return f"needs {tool} (the learners' accounts)"
    return None


@pytest.fixture
def learners():
    why = _why_not()
    if why:
        pytest.skip(why)
    with unix_accounts((ALICE, MALLORY)):
        yield


def as_user(name: str, *cmd: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": f"/home/{name}", "USER": name,
           "LOGNAME": name, "LANG": "C.UTF-8"}
    return subprocess.run(["runuser", "-u", name, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *cmd],
                          capture_output=True, text=True, timeout=300, cwd=cwd or f"/home/{name}")


def test_the_exchange_trusts_identity_not_names(learners, tmp_path):
    work = Path(tempfile.mkdtemp(prefix="course-exchange-"))
    work.chmod(0o755)
    try:
        exchange, grades = work / "exchange", work / "grades"
        env = dict(os.environ, COURSE_EXCHANGE=str(exchange), COURSE_GRADES=str(grades), COURSE_ID=COURSE)

        def host(*args):
            return subprocess.run([sys.executable, "-m", "course.commands.cli", "workshop", *args], cwd=ROOT, env=env,
                                  capture_output=True, text=True, timeout=900)

        r = host("release", LESSON)
        assert r.returncode == 0, r.stdout + r.stderr
        python = learner_python(work, ALICE)          # one the learners' accounts can run, with the course
        nbg = [python, "-m", "nbgrader"]
        where = ["--course", COURSE, f"--Exchange.root={exchange}"]

        # Alice: fetch, answer every exercise (the reference), submit: as herself.
        r = as_user(ALICE, *nbg, "fetch_assignment", LESSON, *where)
        assert r.returncode == 0, r.stdout + r.stderr
        mine = Path(f"/home/{ALICE}/{LESSON}/{LESSON}.ipynb")
        nbformat.write(build_submission(LESSON), str(mine))
        shutil.chown(mine, ALICE, ALICE)
        r = as_user(ALICE, *nbg, "submit", LESSON, *where)
        assert r.returncode == 0, r.stdout + r.stderr

        inbound = exchange / COURSE / "inbound"
        untouched = nbformat.writes(build_submission(LESSON, fill=False))
        forged = f"{ALICE}+{LESSON}+2999-01-01 00:00:00.000000 UTC"
        linked = f"{ALICE}+{LESSON}+2998-01-01 00:00:00.000000 UTC"
        own_old = f"{MALLORY}+{LESSON}+2999-06-01 00:00:00.000000 UTC"
        script = (
            "import os, sys, time\n"
            "inbound, lesson, forged, linked, own_old, untouched, alice_nb = sys.argv[1:8]\n"
            "for name, text in ((forged, untouched), (own_old, untouched)):\n"
            "    os.makedirs(os.path.join(inbound, name))\n"
            "    open(os.path.join(inbound, name, lesson + '.ipynb'), 'w').write(text)\n"
            "    open(os.path.join(inbound, name, 'timestamp.txt'), 'w').write(name.split('+')[2])\n"
            "os.makedirs(os.path.join(inbound, linked))\n"
            "os.symlink(alice_nb, os.path.join(inbound, linked, lesson + '.ipynb'))\n"
        )
        payload = tmp_path / "untouched.ipynb"
        payload.write_text(untouched)
        payload.chmod(0o644)
        tmp_path.chmod(0o755)
        r = as_user(MALLORY, python, "-c", script, str(inbound), LESSON, forged, linked, own_old, untouched,
                    str(mine), cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        # Mallory's real submission, after her forged-date one: her latest. Her own notebook is finished; beside it,
        # in her own folder, she puts what would read the instructor's files: a link to a file only root may read, a
        # folder that is a link to root's folder, and (as a machine without protected hard links would let her) a hard
        # link to that file. Collect refuses each of them, says so, and collects her notebook.
        r = as_user(MALLORY, *nbg, "fetch_assignment", LESSON, *where)
        assert r.returncode == 0, r.stdout + r.stderr
        hers = Path(f"/home/{MALLORY}/{LESSON}/{LESSON}.ipynb")
        nbformat.write(build_submission(LESSON), str(hers))
        shutil.chown(hers, MALLORY, MALLORY)
        r = as_user(MALLORY, *nbg, "submit", LESSON, *where)
        assert r.returncode == 0, r.stdout + r.stderr
        secret_dir = work / "instructor-only"
        secret_dir.mkdir(mode=0o700)
        secret = secret_dir / "solution.ipynb"
        secret.write_text(SECRET_TEXT)
        secret.chmod(0o600)
        (secret_dir / "other.ipynb").write_text(SECRET_TEXT)
        own_real = max((p for p in inbound.iterdir() if p.name.startswith(f"{MALLORY}+") and p.name != own_old),
                       key=lambda p: p.stat().st_ctime)
        r = as_user(MALLORY, "ln", "-s", str(secret), str(own_real / "solution.ipynb"), cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        r = as_user(MALLORY, "ln", "-s", str(secret_dir), str(own_real / "answers"), cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        os.link(secret, own_real / "hard.ipynb")              # root makes the hard link she could make without the sysctl

        r = host("collect", LESSON)
        said = r.stdout + r.stderr
        assert r.returncode != 0, said                                    # something was refused: it says so
        assert forged in said and "not to" in said and linked in said, said
        report = json.loads((grades / "collect" / f"refused-{LESSON}.json").read_text())
        assert sorted({e["folder"] for e in report}) == sorted([forged, linked, own_real.name]), report
        left_out = sorted(e["why"].split(" ")[0] for e in report if e["folder"] == own_real.name)
        assert left_out == ["answers", "hard.ipynb", "solution.ipynb"], report
        assert "symbolic link" in said and "hard link" in said, said

        collected = grades / "submitted" / ALICE / LESSON / f"{LESSON}.ipynb"
        assert collected.read_text() == mine.read_text()               # Alice's own, real submission
        chosen = json.loads((grades / "submitted" / MALLORY / LESSON / ".course-collected.json").read_text())
        assert chosen["folder"] != own_old and not chosen["time"].startswith("2999"), chosen   # her real, later one

        from course.grading import sandbox

        unsafe = [] if sandbox.available()[0] else ["--unsafe-no-sandbox"]
        r = host("grade", LESSON, "--jobs", "1", *unsafe)
        rows = {row["student"]: row for row in csv.DictReader(open(grades / "grades.csv", encoding="utf-8"))}
        assert float(rows[ALICE]["score"]) == float(rows[ALICE]["max_score"]) > 0, (rows, r.stdout[-2000:])
        # Mallory's honest work is graded; nothing she could not read reached anything the grader wrote.
        assert float(rows[MALLORY]["score"]) == float(rows[MALLORY]["max_score"]), (rows, r.stdout[-2000:])
        leaked = [str(f) for f in grades.rglob("*") if f.is_file() and SECRET_MARK in f.read_bytes()]
        assert not leaked, leaked
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_folder_swapped_for_a_link_during_collect_is_never_followed(learners, tmp_path):
    """Collect chooses a submission (``verify``, in init_src), then copies it (``read_submission``, in copy_files):
    a learner watching her own folder can swap it for a link to a folder she cannot read in between, or while it
    is read. Swapped before the copy: refused, named. Swapped while it is read: what is read is the folder that was
    opened (through its descriptor), never what the link points to."""
    from course.grading import owned
    from course.tools import exchange

    work = Path(tempfile.mkdtemp(prefix="course-swap-"))
    work.chmod(0o755)
    try:
        inbound = work / "inbound"
        inbound.mkdir()
        inbound.chmod(0o2733)
        private = work / "instructor-only"
        private.mkdir(mode=0o700)
        (private / f"{LESSON}.ipynb").write_text(SECRET_TEXT)
        name = f"{MALLORY}+{LESSON}+2026-12-01 10:00:00.000000 UTC"
        folder = inbound / name
        make = ("import os, sys\nos.makedirs(sys.argv[1])\nopen(os.path.join(sys.argv[1], sys.argv[2]), 'w').write('mine')\n")
        r = as_user(MALLORY, "/usr/bin/python3", "-c", make, str(folder), f"{LESSON}.ipynb", cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        when, why = exchange.verify(folder, MALLORY)
        assert why == "" and when is not None

        # Swapped between the choice and the copy.
        r = as_user(MALLORY, "/bin/sh", "-c", f'mv "{folder}" "{folder}.old" && ln -s "{private}" "{folder}"', cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        tree, why = exchange.read_submission(folder, MALLORY)
        assert tree is None and "link" in why, (tree, why)

        # Swapped while it is read: the descriptor held is the folder as opened.
        r = as_user(MALLORY, "/bin/sh", "-c", f'rm "{folder}" && mv "{folder}.old" "{folder}"', cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        fd, why = owned.open_folder(inbound, [name])
        assert fd is not None, why
        try:
            r = as_user(MALLORY, "/bin/sh", "-c", f'mv "{folder}" "{folder}.old" && ln -s "{private}" "{folder}"', cwd="/")
            assert r.returncode == 0, r.stdout + r.stderr
            tree = owned.read_tree(fd, owner=os.lstat(f"{folder}.old").st_uid, max_files=10, max_bytes=2**20)
        finally:
            os.close(fd)
        assert tree.files == {f"{LESSON}.ipynb": b"mine"} and not tree.refused, tree
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_exchange_folders_a_learner_made_first_stop_release_and_return(learners, tmp_path):
    """The exchange's root is writable by every account (1777): a learner may make the course's folder, or its
    feedback folder, before the instructor does, as a link to a folder of root's (nbgrader's own check follows
    it) or as her own. Release, collect and return then refuse to use it, and say which folder and what to do,
    before nbgrader does anything (its unrelease removed a folder of root's through such a link). An exchange
    whose root a learner owns is refused too: in a sticky folder its owner may rename the instructor's folders."""
    from course.tools import exchange

    work = Path(tempfile.mkdtemp(prefix="course-premade-"))
    work.chmod(0o755)
    try:
        root = work / "exchange"
        root.mkdir()
        root.chmod(0o1777)
        target = work / "roots-folder"
        target.mkdir()
        r = as_user(MALLORY, "ln", "-s", str(target), str(root / COURSE), cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        with pytest.raises(PermissionError, match="is a link or a file"):
            exchange.secure_course_folder(root, COURSE)
        assert list(target.iterdir()) == []                      # nothing was made through the link
        (root / COURSE).unlink()
        r = as_user(MALLORY, "mkdir", str(root / COURSE), cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        with pytest.raises(PermissionError, match=f"belongs to '{MALLORY}'"):
            exchange.secure_course_folder(root, COURSE)
        os.rmdir(root / COURSE)
        exchange.secure_course_folder(root, COURSE)             # made by the instructor: fine, and made once
        r = as_user(MALLORY, "mkdir", str(root / COURSE / "x"), cwd="/")
        assert r.returncode != 0                                # the course's folder is the instructor's
        assert oct(os.lstat(root / COURSE / "inbound").st_mode & 0o7777) == oct(0o2733)
        os.chmod(root, 0o777)                                   # world-writable without the sticky bit
        with pytest.raises(PermissionError, match="sticky"):
            exchange.secure_course_folder(root, COURSE)
        os.chmod(root, 0o1777)

        # Before the first release, a link where the course's folder goes, whose outbound/ is a folder of root's:
        # release refuses before nbgrader's unrelease removes anything, and nothing of that folder moves.
        fresh = work / "fresh-exchange"
        fresh.mkdir()
        fresh.chmod(0o1777)
        victim = work / "roots-lessons"
        (victim / "outbound" / LESSON).mkdir(parents=True)
        (victim / "outbound" / LESSON / "keep.txt").write_text("root's")
        os.chmod(victim / "outbound" / LESSON / "keep.txt", 0o600)
        r = as_user(MALLORY, "ln", "-s", str(victim), str(fresh / COURSE), cwd="/")
        assert r.returncode == 0, r.stdout + r.stderr
        env = dict(os.environ, COURSE_EXCHANGE=str(fresh), COURSE_GRADES=str(work / "grades"), COURSE_ID=COURSE)
        r = subprocess.run([sys.executable, "-m", "course.commands.cli", "workshop", "release", LESSON], cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode != 0 and "is a link" in r.stdout + r.stderr, r.stdout + r.stderr
        assert (victim / "outbound" / LESSON / "keep.txt").read_text() == "root's"
        assert oct(os.stat(victim / "outbound" / LESSON / "keep.txt").st_mode & 0o777) == oct(0o600)

        # An exchange whose root a learner owns: its owner could rename the course's folders at will. Refused.
        hers = work / "hers"
        hers.mkdir()
        shutil.chown(hers, MALLORY, MALLORY)
        hers.chmod(0o1777)
        with pytest.raises(PermissionError, match=f"belongs to '{MALLORY}'"):
            exchange.secure_course_folder(hers, COURSE)
        assert not (hers / COURSE).exists()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_file_rewritten_after_the_check_is_timed_by_its_rewrite(tmp_path):
    """Collect times a folder (verify), then copies it: a learner watching their own folder can rewrite the
    notebook in between. The time recorded is the latest ctime of what was copied, read on the open files."""
    import time

    from course.tools import exchange

    folder = tmp_path / "mallory+lesson+2026-01-01 00:00:00.000000 UTC"
    folder.mkdir()
    (folder / "lesson.ipynb").write_text("early")
    checked, why = exchange.verify(folder, "mallory", same_account=True)
    assert why == "" and checked is not None
    time.sleep(0.05)
    (folder / "lesson.ipynb").write_text("written after the check")
    tree, why = exchange.read_submission(folder, "mallory", same_account=True)
    assert why == "" and not tree.refused
    exchange.write_tree(tree, tmp_path / "collected")
    assert exchange._utc(tree.latest) > checked
    assert (tmp_path / "collected" / "lesson.ipynb").read_text() == "written after the check"


def test_feedback_is_returned_only_under_a_secret_nbgrader_submit_could_have_written(tmp_path, monkeypatch, capsys):
    """`course workshop return` reads each learner's submission_secret.txt and timestamp.txt: an empty secret
    stopped nbgrader's release_feedback for every learner after it, and a secret copied from another learner
    would release one page over the other's. Both are skipped, with a line; the others are returned."""
    import secrets
    import types

    from course.tools import workshop

    L = "00_softmax_lookup"
    good = {"alice": secrets.token_hex(64), "bob": secrets.token_hex(64)}
    keys = {**good, "eve": "", "mallory": good["bob"], "zed": "not-a-secret"}
    for student, secret in keys.items():
        sub = tmp_path / "submitted" / student / L
        sub.mkdir(parents=True)
        (sub / "submission_secret.txt").write_text(secret)
        (sub / "timestamp.txt").write_text("2026-11-28 08:00:00.000000 UTC" if student != "zed" else "soon")
        page = tmp_path / "feedback" / student / L / f"{L}.html"
        page.parent.mkdir(parents=True)
        page.write_text("<p>feedback</p>")
    ran = []
    monkeypatch.setattr(workshop, "_workspace", lambda *a, **k: types.SimpleNamespace(path=tmp_path))
    monkeypatch.setattr(workshop, "_run", lambda ws, what, *args, **kw: ran.append((what, args, sorted(kw["exclude"]))))
    returned = workshop.give_back([L])
    said = capsys.readouterr().out
    # nbgrader's release_feedback reads the keys of every page it is not told to leave out
    assert returned == {L: ["alice"]} and ran == [("release_feedback", (L,), ["bob", "eve", "mallory", "zed"])], said
    assert not (tmp_path / "feedback" / "bob" / L / "submission_secret.txt").exists()
    assert not (tmp_path / "feedback" / "mallory" / L / "submission_secret.txt").exists()
    for student in ("eve", "zed", "bob, mallory"):
        assert f"{student}/{L}" in said, said


def test_deep_folders_and_huge_files_in_a_submission_stall_nothing(tmp_path):
    """A learner's folder nested 995 deep stopped collect for everyone (a RecursionError out of the reader), and a
    500 MiB sparse file cost a second and its size in memory at every check. The reader walks with a stack of its
    own and refuses what is nested past 32 folders; the check reads no file (keep_bytes=False); both are left out,
    reported, and the notebook beside them is collected."""
    import os

    from course.tools import exchange

    folder = tmp_path / "mallory+lesson+2026-01-01 00:00:00.000000 UTC"
    folder.mkdir()
    fd = os.open(folder, os.O_RDONLY)
    for _ in range(995):                              # each level made below the one before (paths get long)
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
    (folder / "lesson.ipynb").write_text("mine")
    with open(folder / "big.bin", "wb") as fh:
        fh.truncate(600 * 2**20)                      # sparse: costs no disk
    try:
        for keep in (False, True):
            tree, why = exchange.read_submission(folder, "mallory", same_account=True, keep_bytes=keep)
            assert why == "" and "lesson.ipynb" in tree.files, (why, tree)
            said = " ".join(str(r) for r in tree.refused)
            assert "nested more than 32 folders deep" in said and "big.bin" in said, said
        assert os.path.getsize(folder / "big.bin") == 600 * 2**20
    finally:                                          # shutil.rmtree (pytest's clean-up) recurses: undone here
        subprocess.run(["rm", "-rf", str(folder)], check=False)

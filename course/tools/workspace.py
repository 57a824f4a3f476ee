"""An nbgrader course directory (a "workspace") that the `course` command drives.

nbgrader wants ``source/``, ``release/``, ``submitted/``, ``autograded/`` and a gradebook under one
root. `course release` uses a throw-away workspace; `course grade` uses the instructor's ``--out``
folder, so grading state never lands in the repository.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import shutil
from pathlib import Path

from course.commands.lab import tool_environment
from course.commands.lessons import root as course_root

__all__ = ["Workspace", "tool_environment"]

CONFIG_TEMPLATE = '''# Written by the `course` command: nbgrader settings for this workspace.
c = get_config()  # noqa: F821
load_subconfig({base!r})
c.CourseDirectory.root = {root!r}
c.CourseDirectory.db_url = {db!r}
c.Execute.timeout = {timeout}
c.CourseDirectory.course_id = {course_id!r}
c.Exchange.root = {exchange!r}
# Collect by the submission's owner and its files' own times, never by the name's (course/tools/exchange.py).
c.ExchangeFactory.collect = "course.tools.exchange.CourseCollect"
# Release and return into exchange folders made and checked as the instructor's own (a learner may write the root).
c.ExchangeFactory.release_assignment = "course.tools.exchange.CourseReleaseAssignment"
c.ExchangeFactory.release_feedback = "course.tools.exchange.CourseReleaseFeedback"
c.ExchangeFactory.list = "course.tools.exchange.CourseList"
# nbgrader's own autograde (the formgrader's lightning button) would run a submission unsandboxed, as you:
# refused, with a sentence that says to grade with `course grade` (course/tools/nbgrader_guard.py).
from course.tools.nbgrader_guard import autograde_preprocessors  # noqa: E402
c.Autograde.sanitize_preprocessors = autograde_preprocessors()
'''


class Workspace:
    """An nbgrader course root at ``path`` whose ``source/`` mirrors the course's ``solutions/``."""

    def __init__(self, path: Path, *, timeout: int = 60, exchange: Path | None = None, course_id: str | None = None,
                 db_url: str | None = None):
        self.path = Path(path).resolve()
        self.timeout = int(timeout)
        self.db_path = self.path / "gradebook.db"
        saved = self._settings()
        # The gradebook: SQLite in the workspace, unless a database URL (e.g. PostgreSQL, nbgrader's
        # CourseDirectory.db_url) is given, or was given when this workspace was last prepared.
        self.db_url = db_url or saved.get("db_url") or f"sqlite:///{self.db_path}"
        # The course id and exchange (workshops: release, collect, feedback). Given, else what this
        # workspace was last prepared with (so `course grade` keeps a workshop's settings), else
        # $COURSE_EXCHANGE / $COURSE_ID or the defaults of `course lab`.
        from course.commands import lab

        self.exchange = Path(exchange).resolve() if exchange else (
            lab.exchange_root() if os.environ.get("COURSE_EXCHANGE") or "exchange" not in saved
            else Path(saved["exchange"]))
        self.course_id = course_id or (lab.course_id() if os.environ.get("COURSE_ID") or "course_id" not in saved
                                       else saved["course_id"])

    def _settings(self) -> dict:
        import json

        try:
            return json.loads((self.path / ".course-settings.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}

    def prepare(self, lesson_ids: list[str]) -> "Workspace":
        """Create the folder, its nbgrader_config.py, and a fresh ``source/<id>/`` per lesson."""
        tool_environment()
        self.path.mkdir(parents=True, exist_ok=True)
        base = course_root() / "autograde" / "nbgrader_config.py"
        (self.path / "nbgrader_config.py").write_text(
            CONFIG_TEMPLATE.format(base=str(base), root=str(self.path), db=self.db_url, timeout=self.timeout,
                                   course_id=self.course_id, exchange=str(self.exchange)),
            encoding="utf-8")
        import json

        (self.path / ".course-settings.json").write_text(
            json.dumps({"course_id": self.course_id, "exchange": str(self.exchange),
                        **({} if self.db_url.startswith("sqlite:") else {"db_url": self.db_url})}, indent=1) + "\n", encoding="utf-8")
        for lesson_id in lesson_ids:
            src = course_root() / "solutions" / lesson_id
            dst = self.path / "source" / lesson_id
            if dst.exists():
                shutil.rmtree(dst)
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
        return self

    def api(self, *, same_account: bool = False, exclude: tuple[str, ...] = ()):
        """An ``NbGraderAPI`` bound to this workspace (its config file and gradebook). ``same_account``: every
        learner uses one Unix account, so collect trusts the names (:class:`course.tools.exchange.CourseCollect`).
        ``exclude``: students nbgrader's commands leave out (``CourseDirectory.student_id_exclude``)."""
        in_process_alembic_head()
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config.loader import PyFileConfigLoader

        cfg = PyFileConfigLoader("nbgrader_config.py", path=str(self.path)).load_config()
        if same_account:
            cfg.CourseCollect.same_account = True
        if exclude:
            cfg.CourseDirectory.student_id_exclude = ",".join(exclude)
        coursedir = CourseDirectory(config=cfg)
        return NbGraderAPI(coursedir=coursedir, config=cfg)

    def generate_cached(self, lesson_id: str) -> Path:
        """``generate`` once per version of the lesson: skipped when ``source/<id>/`` is unchanged since
        the last time (its hash is kept in ``.course-generated.json``) and the release exists."""
        import json

        try:
            seen = json.loads((self.path / ".course-generated.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            seen = {}
        released = self.path / "release" / lesson_id / f"{lesson_id}.ipynb"
        if seen.get(lesson_id) == self._generated_key(lesson_id) and released.is_file() and self._gradebook_has(lesson_id):
            return released
        path = self.generate(lesson_id)
        self.mark_generated(lesson_id)
        return path

    def _generated_key(self, lesson_id: str) -> str:
        import hashlib

        # another gradebook: generate into it too
        return hashlib.sha256(self.db_url.encode() + b"\0" + self.source_digest(lesson_id).encode()).hexdigest()

    def source_digest(self, lesson_id: str) -> str:
        """SHA-256 of ``source/<id>/`` (every file's path and bytes): the lesson's version."""
        import hashlib

        digest = hashlib.sha256()
        src = self.path / "source" / lesson_id
        for f in sorted(p for p in src.rglob("*") if p.is_file()):
            digest.update(str(f.relative_to(src)).encode() + b"\0" + f.read_bytes())
        return digest.hexdigest()

    def mark_generated(self, lesson_id: str) -> None:
        """Record that ``release/<id>/`` and the gradebook hold this version of the lesson (as
        :meth:`generate_cached` does after generating it), e.g. after copying them from a cache."""
        import json

        stamp = self.path / ".course-generated.json"
        try:
            seen = json.loads(stamp.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            seen = {}
        seen[lesson_id] = self._generated_key(lesson_id)
        stamp.write_text(json.dumps(seen, indent=1), encoding="utf-8")

    def _gradebook_has(self, lesson_id: str) -> bool:
        if self.db_url == f"sqlite:///{self.db_path}":
            return self.db_path.is_file()
        from nbgrader.api import Gradebook, MissingEntry

        in_process_alembic_head()
        try:
            with Gradebook(self.db_url) as gb:
                gb.find_assignment(lesson_id)
            return True
        except MissingEntry:
            return False

    def generate(self, lesson_id: str) -> Path:
        """nbgrader generate_assignment: the student version lands in ``release/<id>/``."""
        with quiet_logs():
            result = self.api().generate_assignment(lesson_id, force=True, create=True)
        if not result.get("success"):
            raise RuntimeError(f"nbgrader could not generate {lesson_id}:\n{result.get('error') or result.get('log')}")
        return self.path / "release" / lesson_id / f"{lesson_id}.ipynb"


def in_process_alembic_head() -> None:
    """nbgrader stamps a new gradebook with the head revision of its database migrations by running
    the ``alembic heads`` command: a new Python process that imports nbgrader again (2 to 13 s of a
    batch's start-up, every new grading workspace, e.g. every shard), and that fails where ``alembic``
    is not on PATH. This reads the same revision with alembic's API, in this process, once; nbgrader
    calls it as before (tests/test_grading_scale.py compares the two)."""
    import nbgrader.api as api

    if getattr(api.get_alembic_version, "in_process", False):
        return

    @functools.lru_cache(maxsize=None)
    def get_alembic_version() -> str:
        from alembic.config import Config
        from alembic.script import ScriptDirectory
        from nbgrader.dbutil import ALEMBIC_DIR

        config = Config()
        config.set_main_option("script_location", ALEMBIC_DIR)
        return ScriptDirectory.from_config(config).get_current_head()

    get_alembic_version.in_process = True
    api.get_alembic_version = get_alembic_version


@contextlib.contextmanager
def quiet_logs():
    """Silence nbgrader's chatty INFO logging on the terminal (its API captures the log anyway)."""
    logger = logging.getLogger("traitlets")
    level = logger.level
    logger.setLevel(logging.WARNING)
    sink = io.StringIO()
    try:
        with contextlib.redirect_stderr(sink):
            yield sink
    finally:
        logger.setLevel(level)

"""nbgrader's ``generate_assignment`` for the lessons of a batch, once per lesson version, shared between
grading folders through a cache."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from course.tools.workspace import Workspace
from course.commands.lab import state_dir
from course.commands.lessons import root
from importlib.metadata import version as _version

def load_gradebook_library() -> None:
    try:
        # lazy: nbgrader's gradebook library, a second to import, loads in a thread while the judges start
        from course.tools.workspace import in_process_alembic_head

        in_process_alembic_head()
    except Exception:  # noqa: BLE001 - imported again, with its error, where it is used
        pass


def _assignment_cache(cache: Path | None) -> Path:
    """Where generated assignments are kept between grading folders: ``cache`` (``$COURSE_GRADE_CACHE``,
    read by the command line), else ``.state/grading-cache`` in the checkout (ignored by git; delete it at
    will)."""
    return Path(cache).expanduser().resolve() if cache else state_dir() / "grading-cache"


def generate_assignments(ws: Workspace, lessons: list[str], *, fresh: bool, cache: Path | None = None) -> bool:
    """nbgrader's ``generate_assignment`` for each lesson into ``ws`` (its ``release/`` and gradebook),
    once per lesson version (:meth:`Workspace.generate_cached`). A new grading folder with an SQLite
    gradebook (every shard, every fresh ``--out``) copies them from the assignment cache when this set
    of lesson versions was generated before (the gradebook then holds the assignments and no student),
    else generates them and stores them there. True when they came from the cache."""
    sqlite = fresh and ws.db_url == f"sqlite:///{ws.db_path}" and not ws.db_path.exists()
    folder = None
    if sqlite:
        # `import nbgrader` takes a second (its server extensions): its version, from the metadata
        key = hashlib.sha256(f"{_version('nbgrader')}\0{ws.course_id}\0".encode())
        config = root() / "autograde" / "nbgrader_config.py"      # the settings generate_assignment reads
        key.update(config.read_bytes() if config.is_file() else b"")
        for lesson in sorted(lessons):
            key.update(f"\0{lesson}\0{ws.source_digest(lesson)}".encode())
        folder = _assignment_cache(cache) / key.hexdigest()[:40]
        if (folder / "gradebook.db").is_file() and all((folder / "release" / l).is_dir() for l in lessons):
            try:
                tmp = ws.path / ".gradebook.db.cached"
                shutil.copyfile(folder / "gradebook.db", tmp)
                for lesson in lessons:
                    dst = ws.path / "release" / lesson
                    if dst.exists():
                        shutil.rmtree(dst)
                    shutil.copytree(folder / "release" / lesson, dst)
                os.replace(tmp, ws.db_path)
                for lesson in lessons:
                    ws.mark_generated(lesson)
                return True
            except OSError:
                pass                         # generated below as without a cache
    for lesson in lessons:
        ws.generate_cached(lesson)
    if folder is not None:
        try:                                 # built aside, then renamed: shards storing at once cannot mix
            folder.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=folder.parent))
            shutil.copyfile(ws.db_path, tmp / "gradebook.db")
            for lesson in lessons:
                shutil.copytree(ws.path / "release" / lesson, tmp / "release" / lesson)
            try:
                os.rename(tmp, folder)
            except OSError:                  # another run stored it first
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass                             # the cache is an optimisation: grading goes on without it
    return False

"""``course lab``: JupyterLab for a learner, an instructor or a workshop participant, set up for this course.

Each kind of lab gets its own Jupyter configuration folder (on ``JUPYTER_CONFIG_PATH``, so the user's
own Jupyter settings still apply) holding:

* ``nbgrader_config.py``: the course id and the exchange (where a workshop host releases lessons and
  collects submissions), so nbgrader's Assignment List works; for an instructor also the grading
  workspace (one gradebook: the one ``course grade --out`` writes, ``autograde/workspace`` unless
  told otherwise), so the formgrader lists every lesson with its points and shows what was graded;
* ``labconfig/page_config.json`` and ``jupyter_server_config.json``: what a learner does not need
  (the formgrader, the course list, "create assignment") is switched off in the browser and on the
  server, so nothing broken or empty is shown.

Settings, from the strongest: the command's options, then ``COURSE_EXCHANGE``, ``COURSE_ID`` and
``COURSE_GRADES``, then the defaults below.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from course.commands.lessons import all_lessons, root

__all__ = ["DEFAULT_COURSE_ID", "exchange_root", "course_id", "grades_dir", "lab_command", "split_root_dir",
           "learner_config", "instructor_config", "prepare_gradebook"]

DEFAULT_COURSE_ID = "attention-course"

# Lab plugins and server extensions a learner does not use (an empty formgrader, a course list that
# looks for a local formgrader, the instructor's "create assignment" toolbar).
LEARNER_DISABLED_PLUGINS = ["@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:course-list",
                            "@jupyter/nbgrader:create-assignment"]
LEARNER_DISABLED_SERVER = ["nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"]

# Options of `jupyter lab` that name the folder it serves; the course sets one, so a user's choice replaces it.
ROOT_DIR_OPTIONS = ("--notebook-dir", "--ServerApp.root_dir", "--ServerApp.notebook_dir", "--NotebookApp.notebook_dir",
                    "--root-dir")


def tool_environment() -> None:
    """Make nbgrader's helper programs (alembic) and the venv's kernel findable from any shell.
    (Here, not in workspace.py, because learners' copies from `course dist` have no workspace.py.)"""
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    if bindir not in path.split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + path


def state_dir() -> Path:
    return root() / ".state"


def exchange_root(value: str | os.PathLike | None = None) -> Path:
    """Where released lessons, submissions and feedback travel: ``--exchange``, ``$COURSE_EXCHANGE``,
    else ``.state/exchange`` in the checkout."""
    value = value or os.environ.get("COURSE_EXCHANGE")
    return Path(value).expanduser().resolve() if value else state_dir() / "exchange"


def course_id(value: str | None = None) -> str:
    return value or os.environ.get("COURSE_ID") or DEFAULT_COURSE_ID


def grades_dir(value: str | os.PathLike | None = None) -> Path:
    """The one grading workspace (gradebook, submitted/, autograded/, feedback/): ``--grades``,
    ``$COURSE_GRADES``, else ``autograde/workspace`` (what ``make grade`` writes)."""
    value = value or os.environ.get("COURSE_GRADES")
    return Path(value).expanduser().resolve() if value else root() / "autograde" / "workspace"


def ensure_exchange(path: Path) -> Path:
    """Create the exchange so that every local account can use it (nbgrader's own layout: inbound and
    feedback are per-student inside, with their own permissions)."""
    created = not path.exists()
    path.mkdir(parents=True, exist_ok=True)
    if created:
        try:
            os.chmod(path, 0o1777)       # like /tmp: anyone may add, nobody may remove others' files
        except OSError:
            pass
    return path


def _config_dir(kind: str, *settings) -> Path:
    """A folder for this kind of lab's generated configuration (rewritten at every start), one per set
    of settings: labs running side by side with different exchanges never read each other's."""
    import hashlib

    kind = f"{kind}-{hashlib.sha1(repr(settings).encode()).hexdigest()[:10]}"
    base = state_dir() / "lab"
    try:
        base.mkdir(parents=True, exist_ok=True)
        probe = base / f".probe-{os.getpid()}"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError:                      # a read-only checkout (a shared workshop install)
        import tempfile

        base = Path(tempfile.gettempdir()) / f"course-lab-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    folder = base / kind
    (folder / "labconfig").mkdir(parents=True, exist_ok=True)
    return folder


def _nbgrader_lines(exchange: Path, cid: str) -> list[str]:
    return [
        "# Written by `course lab` at every start: edit the course's options instead.",
        "c = get_config()  # noqa: F821",
        f"load_subconfig({str(root() / 'autograde' / 'nbgrader_config.py')!r})",
        f"c.CourseDirectory.course_id = {cid!r}",
        f"c.Exchange.root = {str(exchange)!r}",
        "c.Exchange.assignment_dir = '.'",
    ]


def learner_config(exchange: Path, cid: str, serve: Path) -> Path:
    """The learner's configuration folder: nbgrader knows the course and its exchange, and fetches
    lessons into the folder JupyterLab serves; the instructor's panels are off."""
    folder = _config_dir("learner", str(exchange), cid, str(serve))
    lines = _nbgrader_lines(exchange, cid)
    # nbgrader resolves a relative assignment folder against the server's working directory, not the
    # folder it serves: name it, or a fetched lesson lands wherever `course lab` was started.
    lines[-1] = f"c.Exchange.assignment_dir = {str(serve)!r}"
    (folder / "nbgrader_config.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {p: True for p in LEARNER_DISABLED_PLUGINS}}, indent=1), encoding="utf-8")
    (folder / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {e: False for e in LEARNER_DISABLED_SERVER}}}, indent=1),
        encoding="utf-8")
    return folder


def prepare_gradebook(grades: Path, exchange: Path, cid: str, lessons=None, *, quiet: bool = True):
    """The grading workspace with every lesson (discovered from ``solutions/``) in its gradebook, with
    points: ``source/<id>/`` refreshed, ``generate_assignment`` run when a lesson changed."""
    from course.tools.workspace import Workspace

    ids = [l.id for l in (lessons or all_lessons())]
    ws = Workspace(grades, exchange=exchange, course_id=cid).prepare(ids)
    for i in ids:
        if not quiet:
            print(f"  gradebook: {i}", flush=True)
        ws.generate_cached(i)
    return ws


def instructor_config(grades: Path, exchange: Path, cid: str) -> Path:
    """The instructor's configuration folder: nbgrader's course root is the grading workspace."""
    folder = _config_dir("instructor", str(grades), str(exchange), cid)
    lines = ["# Written by `course lab --instructor` at every start.", "c = get_config()  # noqa: F821",
             f"load_subconfig({str(grades / 'nbgrader_config.py')!r})"]
    (folder / "nbgrader_config.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": {}}), encoding="utf-8")
    (folder / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {e: True for e in LEARNER_DISABLED_SERVER}}}, indent=1),
        encoding="utf-8")
    return folder


def split_root_dir(extra: list[str]) -> tuple[str | None, list[str]]:
    """Take every spelling of "the folder to serve" out of ``extra``; the last one wins (no
    "root_dir only accepts one value" from Jupyter)."""
    chosen, rest, i = None, [], 0
    while i < len(extra):
        arg = extra[i]
        name, eq, value = arg.partition("=")
        if name in ROOT_DIR_OPTIONS:
            if not eq:
                if i + 1 >= len(extra):
                    raise SystemExit(f"course lab: {name} needs a folder")
                value = extra[i + 1]
                i += 1
            chosen = value
        else:
            rest.append(arg)
        i += 1
    return chosen, rest


def lab_command(*, instructor: bool = False, notebook_dir: str | None = None, extra: list[str] | None = None,
                exchange: str | None = None, cid: str | None = None, grades: str | None = None,
                port: int | None = None, ip: str | None = None, token: str | None = None,
                no_browser: bool = False) -> tuple[list[str], dict[str, str], Path]:
    """The ``jupyter lab`` command line, its environment and the folder it serves."""
    tool_environment()
    from_extra, extra = split_root_dir(list(extra or []))
    folder = notebook_dir or from_extra
    exchange_path = ensure_exchange(exchange_root(exchange))
    cid = course_id(cid)
    if instructor:
        ws = prepare_gradebook(grades_dir(grades), exchange_path, cid)
        config = instructor_config(ws.path, exchange_path, cid)
        default_folder = root()
    else:
        default_folder = root() / "notebooks"
    serve = Path(folder).expanduser().resolve() if folder else default_folder
    if not serve.is_dir():
        raise SystemExit(f"course lab: {serve} is not a folder")
    if not instructor:
        config = learner_config(exchange_path, cid, serve)
    if instructor and not ws.path.is_relative_to(serve):
        raise SystemExit(f"course lab: the grading workspace {ws.path} must be inside the folder JupyterLab serves "
                         f"({serve}), or the formgrader cannot open its notebooks. Serve a folder that holds both "
                         "(--notebook-dir), or grade into one inside it (--grades).")
    cmd = [sys.executable, "-m", "jupyter", "lab", f"--ServerApp.root_dir={serve}"]
    if port is not None:
        cmd.append(f"--port={port}")
    if ip:
        cmd.append(f"--ip={ip}")
    if token is not None:
        cmd.append(f"--IdentityProvider.token={token}")
    if no_browser:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0 and "--allow-root" not in extra:
        cmd.append("--allow-root")   # containers and workshop VMs often run as root
    cmd += extra
    env = dict(os.environ)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join([str(config)] + [p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p])
    env["COURSE_ROOT"] = str(root())
    return cmd, env, serve


def describe(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)

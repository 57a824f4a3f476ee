"""The course on a JupyterHub: learner labs for learners, the instructor lab for the instructors.

A hub's ``jupyterhub_config.py`` (TLJH: deploy/tljh/course.py, installed in
``/opt/tljh/config/jupyterhub_config.d/``; the loopback test: tests/test_hub.py) calls::

    from course.commands import hub
    hub.configure(c, exchange="/srv/nbgrader/exchange", config_dir="/srv/course-lab-config",
                  instructors={"instructor"}, grades="/home/jupyter-instructor/grades",
                  python="/opt/course/learner/bin/python")

This module imports only the standard library (and course.commands.lab), so a hub's own environment
can import it from the handout folder without the course's dependencies. On Zero to JupyterHub the
image holds both folders (:func:`write_configs`, deploy/z2jh/Dockerfile) and the hub only picks one
per user (deploy/z2jh/values.yaml).

Every user server then starts ``jupyterhub-singleuser`` with a Jupyter configuration folder on
``JUPYTER_CONFIG_PATH``, the same settings ``course lab`` writes (course/commands/lab.py):

* learners: nbgrader knows the course id and the exchange, fetches lessons into the user's home
  (the Assignment List and Validate work); the formgrader, the course list and "create assignment"
  are off, in the browser and on the server;
* instructors (``instructors``): nbgrader's course root is the grading workspace ``grades`` (the
  one ``course workshop`` fills), the formgrader is on.

nbgrader's exchange is a folder: every learner must be a distinct Unix user (TLJH, or a
LocalProcessSpawner/SystemdSpawner hub), since nbgrader names a submission after the Unix account
and keeps learners apart with file permissions. deploy/z2jh/README.md says how Kubernetes does it
(a uid per learner).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from course.commands import lab

__all__ = ["write_configs", "configure"]


def _write(folder: Path, nbgrader_lines: list[str], disabled_plugins: list[str], server_extensions: dict) -> Path:
    (folder / "labconfig").mkdir(parents=True, exist_ok=True)
    (folder / "nbgrader_config.py").write_text("\n".join(nbgrader_lines) + "\n", encoding="utf-8")
    (folder / "labconfig" / "page_config.json").write_text(
        json.dumps({"disabledExtensions": {p: True for p in disabled_plugins}}, indent=1), encoding="utf-8")
    (folder / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": server_extensions}}, indent=1), encoding="utf-8")
    for path in [folder, *folder.rglob("*")]:          # every user's server reads them
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def write_configs(config_dir, *, exchange, course_id: str | None = None, grades=None) -> dict[str, Path]:
    """Write ``learner/`` (and ``instructor/`` when ``grades`` is given) Jupyter configuration folders
    under ``config_dir``; returns them by kind. The exchange is created (mode 1777) if missing."""
    config_dir = Path(config_dir)
    exchange = lab.ensure_exchange(Path(exchange))
    cid = lab.course_id(course_id)
    base = [
        "# Written by course.commands.hub.configure at every hub start.",
        "import os",
        "c = get_config()  # noqa: F821",
        f"load_subconfig({str(lab.root() / 'autograde' / 'nbgrader_config.py')!r})",
        f"c.CourseDirectory.course_id = {cid!r}",
        f"c.Exchange.root = {str(exchange)!r}",
    ]
    # Lessons are fetched into the user's home, the folder the user server serves.
    learner = base + ["c.Exchange.assignment_dir = os.path.expanduser('~')"]
    folders = {"learner": _write(config_dir / "learner", learner, lab.LEARNER_DISABLED_PLUGINS,
                                 {e: False for e in lab.LEARNER_DISABLED_SERVER})}
    if grades is not None:
        grades = Path(grades)
        instructor = base + [f"load_subconfig({str(grades / 'nbgrader_config.py')!r})",
                             f"c.CourseDirectory.root = {str(grades)!r}"]
        folders["instructor"] = _write(config_dir / "instructor", instructor, [],
                                       {e: True for e in lab.LEARNER_DISABLED_SERVER})
    return folders


def configure(c, *, exchange, config_dir, course_id: str | None = None, instructors=(), grades=None,
              python: str | None = None, instructor_python: str | None = None) -> dict[str, Path]:
    """Set a JupyterHub configuration ``c`` up for the course (see the module's docstring).

    ``python`` is the interpreter of the learners' environment (the ``course dist`` handout installed
    in a venv or an image); default: this one. ``instructor_python``, if given, runs the instructors'
    servers instead (the instructor's copy of the repository, with ``course workshop``); default:
    ``python``.
    """
    folders = write_configs(config_dir, exchange=exchange, course_id=course_id, grades=grades)
    python = python or sys.executable
    cid = lab.course_id(course_id)
    instructors = set(instructors)
    c.Spawner.cmd = [python, "-m", "jupyterhub.singleuser"]
    c.Spawner.default_url = "/lab"
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # A user server started as root (a container's only user) refuses to run without it, and the
        # hub shows only a 500; harmless for servers that run as their own user.
        c.Spawner.args.append("--allow-root")
    common = {"COURSE_EXCHANGE": str(exchange), "COURSE_ID": cid,
              "PATH": os.pathsep.join([str(Path(python).parent), "/usr/local/bin", "/usr/bin", "/bin"])}

    def pre_spawn(spawner):
        kind = "instructor" if spawner.user.name in instructors and "instructor" in folders else "learner"
        env = dict(common, JUPYTER_CONFIG_PATH=str(folders[kind]))
        if kind == "instructor":
            env["COURSE_GRADES"] = str(grades)
            if instructor_python:
                spawner.cmd = [instructor_python, "-m", "jupyterhub.singleuser"]
                env["PATH"] = os.pathsep.join([str(Path(instructor_python).parent), common["PATH"]])
        spawner.environment = {**spawner.environment, **env}    # a copy: never the shared default

    c.Spawner.pre_spawn_hook = pre_spawn
    return folders

"""The learner's copy (`course dist`) works as its README says, the README's commands run as typed.

A handout is built, then its README is followed in a fresh venv: the set-up lines, `make check` on
the untouched and on a filled-in notebook, `course --help`, an instructor's command, `make lab`
(served, with nbgrader's Validate extension) and `make doctor`. A second test follows the Colab
paragraph as far as it goes offline: `pip install -e .` alone, then one notebook's public tests.

Installing the dependencies (torch, JupyterLab, nbgrader...) into a fresh venv takes minutes; this
suite's budget is about a minute. So each fresh venv shares this test environment's installed
packages (a ``.pth`` line naming its site-packages, which is what ``--system-site-packages`` does
for a base interpreter) and its Jupyter data files (JupyterLab's app, the labextensions, the server
extension configs, the console scripts such as jupyter-lab), and pip runs offline: ``PIP_NO_INDEX=1`` and no build isolation, so setuptools
comes from the same place (the venv's own old setuptools, which Python 3.11's venv adds, is removed
so that it does not shadow it). Everything else is the learner's: the README's commands as typed,
the handout's pyproject, constraints and Makefile (pip still checks every requirement and constraint
against what it finds, and fails offline if one is not met), the kernel the set-up registers, the
learner's own HOME. What is not tested here is pip downloading the packages, which `make setup` in
the repository does with the same constraints.
"""

from __future__ import annotations

import ast
import importlib.util
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.request
from importlib import metadata
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
HOST_PURELIB = sysconfig.get_paths()["purelib"]
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="needs make (the handout's Makefile)")


# -- the handout and a learner's shell -----------------------------------------------------------------

def readme_commands(handout: Path) -> dict:
    """The commands the handout's README gives, read from its text."""
    text = (handout / "README.md").read_text(encoding="utf-8")
    setup = re.search(r"## Set up.*?```\n(.*?)```", text, re.S).group(1).strip().splitlines()
    return {
        "setup": setup,
        "make_check": re.search(r"`(make check NOTEBOOK=\S+)`", text).group(1),
        "course_check": re.search(r"`(\.venv/bin/course check \S+)`", text).group(1),
        "lab": re.search(r"`(make lab)`", text).group(1),
        "doctor": re.search(r"`(make doctor)`", text).group(1),
        "help": re.search(r"`(\.venv/bin/course --help)`", text).group(1),
        "colab": re.search(r"On Colab: upload this folder, run `([^`]+)` in it", text).group(1),
    }


def learner_env(tmp: Path) -> dict:
    """A learner's shell: their own HOME, `python3` this test's Python version, nothing of the
    repository's settings (COURSE_ROOT, Jupyter folders), pip offline (see the module docstring)."""
    shim = tmp / "shim"
    shim.mkdir(exist_ok=True)
    for name in ("python3", "python"):
        with contextlib.suppress(FileExistsError):
            (shim / name).symlink_to(getattr(sys, "_base_executable", sys.executable))
    (tmp / "home").mkdir(exist_ok=True)
    drop = ("COURSE_", "JUPYTER_", "PYTEST", "PIP_", "NBGRADER_")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(drop) and k not in ("IPYTHONDIR", "MPLCONFIGDIR", "MPLBACKEND", "XDG_CACHE_HOME",
                                                   "TORCH_HOME", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(HOME=str(tmp / "home"), PATH=str(shim) + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
               PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", HF_HUB_OFFLINE="1",
               PIP_NO_BUILD_ISOLATION="0")     # pip's inverted spelling of --no-build-isolation
    return env


def share_host_packages(venv: Path, env: dict) -> None:
    """Give a just-created venv this test environment's packages and Jupyter data files."""
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True, env=env).stdout.strip())
    (site / "_host_packages.pth").write_text(HOST_PURELIB + "\n", encoding="utf-8")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "uninstall", "--quiet", "--yes", "setuptools"],
                   capture_output=True, env=env, check=True)
    bindir = venv / "bin"
    for dist in metadata.distributions(path=[HOST_PURELIB]):   # the scripts pip would have written (jupyter-lab...)
        for ep in dist.entry_points:
            if ep.group == "console_scripts" and dist.metadata["Name"] != "course" and not (bindir / ep.name).exists():
                head, _, rest = ep.attr.partition(".")
                (bindir / ep.name).write_text(f"#!{bindir / 'python'}\nimport sys\nfrom {ep.module} import {head}\n"
                                              f"sys.exit({ep.attr}())\n", encoding="utf-8")
                (bindir / ep.name).chmod(0o755)
    host = Path(sys.prefix)
    share = venv / "share" / "jupyter"
    share.mkdir(parents=True, exist_ok=True)
    for item in (host / "share" / "jupyter").iterdir():
        if item.name != "kernels":                     # the set-up registers the venv's own kernel
            (share / item.name).symlink_to(item)
    if (host / "etc" / "jupyter").is_dir():
        (venv / "etc").mkdir(exist_ok=True)
        (venv / "etc" / "jupyter").symlink_to(host / "etc" / "jupyter")


def sh(command: str, cwd: Path, env: dict, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def fill_in(notebook: Path, lesson: str) -> None:
    """Copy the solution's answer cells into the student notebook, by grade_id."""
    nb = nbformat.read(str(notebook), as_version=4)
    solution = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    answers = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in solution.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    filled = 0
    for c in nb.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if c.metadata.get("nbgrader", {}).get("solution") and gid in answers:
            c.source = answers[gid]
            filled += 1
    assert filled, f"no answer cell of {lesson} found to fill in"
    nbformat.write(nb, str(notebook))


def public_tests(notebook: Path) -> tuple[int, set[str]]:
    """(number of test cells, names the exercises ask for) of a student notebook."""
    nb = nbformat.read(str(notebook), as_version=4)
    tests = sum(1 for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code")
    names = {n.name for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"
             for n in ast.parse(c.source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return tests, names


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- the command in the repository and in a learner's copy (fast, in-process) -----------------------------

def test_course_help_in_the_repository_lists_every_command():
    from course.commands import cli

    help_text = cli.build_parser().format_help()
    assert set(re.findall(r"^    (\w+) ", help_text, re.M)) == {"run", "release", "report", "check", "grade", "dist", "doctor",
                                                                  "lab", "workshop"}, help_text


def test_learner_copy_offers_only_the_learners_commands(monkeypatch, capsys):
    """Without the instructor's modules (what `course dist` leaves out), --help lists check, doctor and
    lab, and an instructor's command is one line on stderr, exit 2, before any argument is parsed."""
    from course.commands import cli

    absent = {module for module, _ in cli.INSTRUCTOR_COMMANDS.values()}
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in absent else find_spec(name, *a))
    help_text = cli.build_parser().format_help()
    assert set(re.findall(r"^    (\w+) ", help_text, re.M)) == {"check", "doctor", "lab"}, help_text
    assert "--instructor" not in cli.build_parser()._subparsers._group_actions[0].choices["lab"].format_help()
    for command, (_, what) in cli.INSTRUCTOR_COMMANDS.items():
        assert cli.main([command, "--some-option"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and len(err.strip().splitlines()) == 1 and what in err and "instructor's copy" in err, err
    assert cli.main(["lab", "--instructor"]) == 2
    assert "instructor's copy" in capsys.readouterr().err


# Where Jupyter, IPython, matplotlib and torch keep their state in a home folder, by default.
HOME_STATE = (".jupyter", ".ipython", ".local/share/jupyter", ".config/matplotlib", ".cache/matplotlib", ".cache/torch",
              ".cache/huggingface")


def home_state(home: Path) -> set[str]:
    """The files and folders Jupyter, IPython, matplotlib and torch keep in ``home`` by default."""
    return {str(p.relative_to(home)) for sub in HOME_STATE if (home / sub).exists()
            for p in [home / sub, *(home / sub).rglob("*")]}


def test_handout_ships_an_assistant_policy(built_handout):
    """AGENTS.md (and CLAUDE.md pointing at it) tells a learner's AI coding assistant, in the course's words,
    to explain, hint and review, never to write the graded solution; the README says it is there."""
    agents = (built_handout / "AGENTS.md").read_text(encoding="utf-8")
    for words in ("**Explain.**", "**Hint.**", "**Review.**", "Do not write, complete or rewrite the body of a graded exercise",
                  "raise NotImplementedError", "hidden tests"):
        assert words in agents, f"AGENTS.md does not say {words!r}"
    assert "AGENTS.md" in (built_handout / "CLAUDE.md").read_text(encoding="utf-8")
    readme = (built_handout / "README.md").read_text(encoding="utf-8")
    assert "AGENTS.md" in readme and ".state/" in readme
    makefile = (built_handout / "Makefile").read_text(encoding="utf-8")
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR", "MPLCONFIGDIR"):
        assert f"export {var}" in makefile and "$(STATE)/" in makefile, var


LEARNER_TOOLS = {"__init__", "cli", "checker", "doctor", "lab", "lessons", "hub"}   # hub: a JupyterHub reads it from the handout (deploy/)


def test_handout_ships_the_learners_tools_and_they_import(handout, tmp_path):
    """The learner's copy holds the modules its commands need (course/commands/), each importable there on its
    own, and nothing of the instructor's folders (course/tools/, course/grading/)."""
    shipped = {p.stem for p in (handout / "course" / "commands").glob("*.py")}
    assert shipped == LEARNER_TOOLS, (f"course/commands/ in the learner's copy: {sorted(shipped)}: a learner's command "
                                      "goes in course/commands/ (and here), an instructor's in course/tools/.")
    assert not (handout / "course" / "tools").exists() and not (handout / "course" / "grading").exists()
    code = ("import importlib, course\n"
            f"assert course.__file__.startswith({str(handout)!r}), course.__file__\n"
            f"for m in {sorted(LEARNER_TOOLS - {'__init__'})!r}:\n"
            "    importlib.import_module('course.commands.' + m)\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COURSE_")}
    env["PYTHONPATH"] = str(handout)
    proc = subprocess.run([sys.executable, "-c", code], cwd=handout, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_course_check_on_a_missing_notebook_is_exit_2(tmp_path, capsys):
    """Exit 1 means "a test failed" (make check turns it into 0: the report is the answer); a notebook
    that cannot be checked at all is 2, which make check passes on."""
    from course.commands import cli

    assert cli.main(["check", str(tmp_path / "missing.ipynb")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "broken.ipynb").write_text("{not json", encoding="utf-8")
    assert cli.main(["check", str(tmp_path / "broken.ipynb")]) == 2
    assert "is not a valid notebook" in capsys.readouterr().err


# -- the README, followed as typed ---------------------------------------------------------------------

@pytest.mark.slow
@needs_make
def test_handout_readme_as_typed(handout, tmp_path):
    cmds = readme_commands(handout)
    env = learner_env(tmp_path)

    # Set up: the README's lines in order (the host's packages shared right after the venv exists).
    assert cmds["setup"][0] == "python3 -m venv .venv", cmds["setup"]
    for i, line in enumerate(cmds["setup"]):
        proc = sh(line, handout, env)
        assert proc.returncode == 0, f"{line}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        if i == 0:
            share_host_packages(handout / ".venv", env)
    # "(or `make setup`, which does exactly that)": its recipe is the README's lines, and it now has nothing to do.
    makefile = (handout / "Makefile").read_text(encoding="utf-8")
    recipe = [l.strip() for l in makefile.split("$(BIN)/course: pyproject.toml constraints.txt\n")[1].split("\n")
              if l.startswith("\t")][:len(cmds["setup"])]
    normalise = lambda l: (l.replace("$(PYTHON) ", "python3 ", 1).replace("$(BIN)/", ".venv/bin/")
                           .replace(" --quiet", "").replace(" >/dev/null", ""))
    assert [normalise(l) for l in recipe] == cmds["setup"], recipe
    assert sh("make -q setup", handout, env).returncode == 0, "make setup would redo the set-up just done"
    sys_path = sh(".venv/bin/python -c 'import course, sys; print(course.__file__)'", handout, env)
    assert Path(sys_path.stdout.strip()).resolve() == (handout / "course" / "__init__.py").resolve(), sys_path

    # course --help lists a learner's commands only; an instructor's command says what it is and where it lives.
    proc = sh(cmds["help"], handout, env)
    assert proc.returncode == 0, proc.stderr
    listed = set(re.findall(r"^    (\w+) ", proc.stdout, re.M))
    assert listed == {"check", "doctor", "lab"}, proc.stdout
    for command in ("run", "release", "grade", "dist", "workshop"):
        proc = sh(f".venv/bin/course {command} x", handout, env)
        assert proc.returncode == 2 and proc.stdout == "", (command, proc.stdout, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "instructor's copy" in proc.stderr, proc.stderr
    proc = sh(".venv/bin/course lab --instructor", handout, env)
    assert proc.returncode == 2 and "instructor's copy" in proc.stderr, proc.stderr

    home_before = home_state(Path(env["HOME"]))        # what the commands typed outside make left there

    # make check on the untouched notebook: exit 0, "0 of N public tests passed", what is not implemented.
    notebook = handout / cmds["make_check"].split("NOTEBOOK=")[1]
    lesson = notebook.parent.name
    n_tests, names = public_tests(notebook)
    proc = sh(cmds["make_check"], handout, env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert f"0 of {n_tests} public tests passed" in proc.stdout, out[-3000:]
    unimplemented = re.search(r"^Not implemented yet: (.*)\.$", proc.stdout, re.M)
    assert unimplemented and set(unimplemented.group(1).split(", ")) == names, out[-3000:]

    # make check on a filled-in notebook: every public test passes. (`.venv/bin/course check NOTEBOOK`,
    # which the README also gives, is what make check runs; a kernel costs seconds, so it runs once.)
    assert cmds["course_check"].split()[-1] == cmds["make_check"].split("NOTEBOOK=")[1]
    assert "\t@$(BIN)/course check $(NOTEBOOK) || [ $$? -eq 1 ]\n" in makefile
    fill_in(notebook, lesson)
    proc = sh(cmds["make_check"], handout, env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert f"{n_tests} of {n_tests} public tests passed" in proc.stdout, proc.stdout[-3000:]
    assert proc.stdout.count("PASS ") == n_tests and "FAIL" not in proc.stdout

    # make doctor reports the machine.
    proc = sh(cmds["doctor"], handout, env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    for line in ("python ", "torch ", "GPU ", "SDPA backends ", "kernel python3 ", "labextension    @jupyter/nbgrader: enabled",
                 "server ext      nbgrader: enabled", "All checks passed."):
        assert line in proc.stdout, f"{line!r} missing from make doctor:\n{proc.stdout}"
    assert f"lessons         {len(list((handout / 'notebooks').iterdir()))}: " in proc.stdout, proc.stdout

    # make lab serves the learner's lab on notebooks/, with nbgrader's Validate extension, then stops.
    port, token = _free_port(), "handout-test"
    log = open(tmp_path / "lab.log", "w", encoding="utf-8")
    lab = subprocess.Popen(f'{cmds["lab"]} ARGS="--no-browser --ip 127.0.0.1 --port {port} --token {token}"', shell=True,
                           cwd=handout, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def get(path: str):
        req = urllib.request.Request(f"{url}/{path}", headers={"Authorization": f"token {token}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode("utf-8")

    try:
        deadline = time.time() + 180
        while True:
            try:
                get("api/status")
                break
            except OSError:
                if lab.poll() is not None or time.time() > deadline:
                    pytest.fail(f"make lab did not start:\n{(tmp_path / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.5)
        status, page = get("lab")
        assert status == 200
        config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                      page, re.S).group(1))
        assert "@jupyter/nbgrader" in {e["name"] for e in config["federated_extensions"]}, config["federated_extensions"]
        disabled = config.get("disabledExtensions", [])
        assert "@jupyter/nbgrader:validate-assignment" not in disabled and "@jupyter/nbgrader:formgrader" in disabled
        import nbgrader

        status, body = get(f"nbgrader_version?version={nbgrader.__version__}")    # Validate's server side
        assert status == 200 and json.loads(body)["success"], body
        status, body = get("api/contents")
        assert {c["name"] for c in json.loads(body)["content"]} >= {lesson}, body
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(lab.pid, signal.SIGTERM)
        try:
            lab.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(lab.pid, signal.SIGKILL)
            lab.wait()
        log.close()
    # make exits at once; Jupyter's server finishes its own shutdown (kernels, extensions) a moment later,
    # longer on a busy machine: the port must close within half a minute
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        except OSError:
            break
        if time.time() > deadline:
            pytest.fail("the lab still serves 30 s after it was stopped")
        time.sleep(0.5)

    # make check, make doctor and make lab kept Jupyter's, IPython's and matplotlib's state in the handout's
    # .state/, as the repository's Makefile does: nothing of theirs in the learner's home.
    written = sorted(home_state(Path(env["HOME"])) - home_before)
    assert not written, f"the handout's make wrote to the learner's home: {written[:10]}"
    assert (handout / ".state" / "jupyter" / "runtime").is_dir() and any((handout / ".state").rglob("*")), \
        "the handout's make left nothing in .state/"


@pytest.mark.slow
def test_handout_colab_paragraph(handout, tmp_path):
    """"On Colab: upload this folder, run `pip install -e .` in it, and open a notebook from notebooks/":
    a Python that already has torch (here: a venv with this environment's packages), the handout
    installed alone (no constraints.txt), then a filled-in notebook's public tests."""
    cmds = readme_commands(handout)
    assert cmds["colab"] == "pip install -e .", cmds["colab"]
    env = learner_env(tmp_path)
    host = tmp_path / "colab-python"
    proc = sh(f"python3 -m venv {host}", tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    share_host_packages(host, env)
    env["PATH"] = str(host / "bin") + os.pathsep + env["PATH"]          # Colab's `pip` and `python`
    proc = sh(cmds["colab"], handout, env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    notebook = handout / cmds["make_check"].split("NOTEBOOK=")[1]
    fill_in(notebook, notebook.parent.name)
    n_tests, _ = public_tests(notebook)
    proc = sh(f"python -m course.commands.cli check {notebook.relative_to(handout)}", handout, env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert f"{n_tests} of {n_tests} public tests passed" in proc.stdout, proc.stdout[-3000:]
    where = sh("python -c 'import course; print(course.__file__)'", tmp_path, env).stdout.strip()
    assert Path(where).resolve() == (handout / "course" / "__init__.py").resolve(), where

"""A workshop room on a real JupyterHub, on loopback: three learners, one lesson, out and back.

JupyterHub (its dummy authenticator, the local-process spawner, configurable-http-proxy from npm)
runs as root with the course's settings (course.commands.hub.configure, as deploy/tljh uses them).
The three learners are real Unix users, created here, as on The Littlest JupyterHub: nbgrader's
exchange tells learners apart by their accounts. Each learner logs in through the hub's login form,
gets an API token, starts a server and, through that server's REST API (what the Assignment List's
and Validate's buttons call), fetches the lesson, fills it in (or not), validates it and submits it.
The host releases, collects, grades (`course workshop grade`, sandboxed) and returns the feedback;
each learner fetches their own feedback and reaches no one else's. No log has a traceback.

Needs root (CI runs as root; the learners' accounts), useradd, node and npm (configurable-http-proxy
is installed into .state/cache/node once) and the grader's bubblewrap sandbox; skips with a one-line
reason otherwise. The learners' servers run an interpreter their accounts can reach: this one, or,
where it lives in a folder only root may enter (pyenv under /root), a venv of the system's Python of
the same version sharing this environment's packages (as TLJH's learners share /opt/course/learner);
skipped with a reason if neither runs for a learner.
"""

from __future__ import annotations

import csv
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from urllib.parse import quote

import nbformat
import pytest

from unix_users import unix_accounts

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

LESSON = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())[0]
COURSE = "hub-test"
LEARNERS = ("crshub-ann", "crshub-ben", "crshub-cat")     # ann hands in the untouched lesson, the others finish it
PASSWORD = "workshop"
CHP_VERSION = "4.6.3"
CHP_DIR = ROOT / ".state" / "cache" / "node" / f"configurable-http-proxy-{CHP_VERSION}"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _why_not() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root: the learners are Unix users this test creates (CI runs as root)"
    for tool in ("useradd", "userdel", "node", "npm"):
        if shutil.which(tool) is None:
            return f"needs {tool} (the learners' accounts, configurable-http-proxy from npm)"
    try:
        import jupyterhub  # noqa: F401
        import requests  # noqa: F401
    except ImportError as e:
        return f"needs jupyterhub ({e}); pip install -e '.[test]'"
    from course.grading import sandbox

    ok, why = sandbox.available()
    if not ok:
        return f"needs the grader's sandbox (course grade runs each submission in bubblewrap): {why}"
    return None


@pytest.fixture(scope="module")
def chp() -> str:
    """configurable-http-proxy, installed from npm into .state/cache once."""
    why = _why_not()
    if why:
        pytest.skip(why)
    exe = CHP_DIR / "node_modules" / ".bin" / "configurable-http-proxy"
    if not exe.exists():
        CHP_DIR.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["npm", "install", "--no-fund", "--no-audit", "--prefix", str(CHP_DIR),
                            f"configurable-http-proxy@{CHP_VERSION}"], capture_output=True, text=True, timeout=300)
        if r.returncode != 0 or not exe.exists():
            pytest.skip(f"npm could not install configurable-http-proxy: {(r.stderr or r.stdout).strip()[-200:]}")
    return str(exe)


def filled(nb: dict) -> dict:
    """The lesson with every exercise answered by the solution's code (matched by grade_id)."""
    nb = nbformat.from_dict(nb)
    sol = nbformat.read(str(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    answers = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in sol.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    for c in nb.cells:
        meta = c.metadata.get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            c.source = answers[meta["grade_id"]]
    return nb


def _runs_for(user: str, python: str) -> bool:
    r = subprocess.run(["runuser", "-u", user, "--", python, "-c", "import course, jupyterhub.singleuser, nbgrader"],
                       capture_output=True, cwd="/", timeout=120)
    return r.returncode == 0


def learner_python(work: Path, user: str) -> str:
    """An interpreter the learners' accounts can run, with the course installed.

    This one, if they can. A venv whose interpreter lives in a folder only root may enter (pyenv
    under /root, as on this project's machines) is out of their reach: then a venv made from the
    system's Python of the same version, sharing this venv's packages (a .pth file), stands in for
    the shared user environment TLJH installs in /opt/tljh/user.
    """
    if _runs_for(user, sys.executable):
        return sys.executable
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(version, path="/usr/local/bin:/usr/bin:/bin")
    if system is None:
        pytest.skip(f"the learners cannot run {sys.executable} and there is no system {version} to share its packages")
    venv = work / "learner-venv"
    subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    import site

    mine = [p for p in site.getsitepackages() if p.startswith(sys.prefix)][0]
    theirs = venv / "lib" / version / "site-packages"
    (theirs / "course-env.pth").write_text(f"import site; site.addsitedir({mine!r})\n", encoding="utf-8")
    # JupyterLab's app folder, the lab and server extensions' settings (nbgrader's), from this venv;
    # not its kernel spec, which names this interpreter: the learners get ipykernel's own.
    (venv / "share" / "jupyter").mkdir(parents=True)
    for name in ("lab", "labextensions", "nbconvert"):
        (venv / "share" / "jupyter" / name).symlink_to(Path(sys.prefix) / "share" / "jupyter" / name)
    (venv / "etc").mkdir(exist_ok=True)
    (venv / "etc" / "jupyter").symlink_to(Path(sys.prefix) / "etc" / "jupyter")
    python = str(venv / "bin" / "python")
    if not _runs_for(user, python):
        pytest.skip(f"the learners cannot run {sys.executable}, nor {system} with its packages")
    return python


class Hub:
    def __init__(self, work: Path, chp: str, python: str):
        self.work, self.port, self.token = work, _port(), secrets.token_hex(16)
        self.url = f"http://127.0.0.1:{self.port}"
        self.exchange, self.grades = work / "exchange", work / "grades"
        self.log = work / "hub.log"
        config = work / "jupyterhub_config.py"
        config.write_text(textwrap.dedent(f"""
            from course.commands import hub
            c = get_config()  # noqa: F821
            c.JupyterHub.bind_url = {self.url!r}
            c.JupyterHub.hub_ip = "127.0.0.1"
            c.JupyterHub.hub_port = {_port()}
            c.ConfigurableHTTPProxy.command = [{chp!r}]
            c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{_port()}"
            c.ConfigurableHTTPProxy.pid_file = {str(work / "proxy.pid")!r}
            c.JupyterHub.db_url = "sqlite:///{work / 'hub.sqlite'}"
            c.JupyterHub.cookie_secret_file = {str(work / "cookie_secret")!r}
            c.JupyterHub.authenticator_class = "dummy"
            c.DummyAuthenticator.password = {PASSWORD!r}
            c.Authenticator.allowed_users = {set(LEARNERS)!r}
            c.JupyterHub.spawner_class = "localprocess"     # each server runs as its learner's Unix user
            c.Spawner.start_timeout = 120
            c.Spawner.http_timeout = 120
            c.JupyterHub.services = [{{"name": "host", "api_token": {self.token!r}}}]
            c.JupyterHub.load_roles = [{{"name": "host", "scopes": ["admin:users", "admin:servers"], "services": ["host"]}}]
            hub.configure(c, exchange={str(self.exchange)!r}, config_dir={str(work / "lab-config")!r},
                          course_id={COURSE!r}, python={python!r})
        """), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "COURSE_"))}
        self.proc = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=work, env=env,
                                     stdout=open(self.log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        self.wait(lambda: self.api("get", "/hub/api/").ok, "the hub to answer")

    def wait(self, ready, what: str, timeout: float = 120) -> None:
        import requests

        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.proc.poll() is None, f"the hub exited while waiting for {what}:\n{self.log_text()[-3000:]}"
            try:
                if ready():
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise AssertionError(f"timed out waiting for {what}:\n{self.log_text()[-3000:]}")

    def api(self, method: str, path: str, token: str | None = None, **kw):
        import requests

        return requests.request(method, self.url + path, headers={"Authorization": f"token {token or self.token}"},
                                timeout=120, **kw)

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)     # the hub stops its proxy and the user servers
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def login(hub: Hub, name: str) -> str:
    """Log in through the hub's login form (the dummy authenticator) and ask for an API token."""
    import requests

    s = requests.Session()
    s.get(f"{hub.url}/hub/login", timeout=30).raise_for_status()
    xsrf = s.cookies.get("_xsrf")
    r = s.post(f"{hub.url}/hub/login", data={"username": name, "password": PASSWORD, "_xsrf": xsrf},
               allow_redirects=False, timeout=30)
    assert r.status_code == 302, f"{name} could not log in: {r.status_code} {r.text[:300]}"
    bad = requests.post(f"{hub.url}/hub/login", data={"username": name, "password": "wrong", "_xsrf": xsrf},
                        cookies=s.cookies, allow_redirects=False, timeout=30)
    assert bad.status_code != 302, "the hub let a wrong password in"
    s.get(f"{hub.url}/hub/home", timeout=30).raise_for_status()       # the logged-in session's page
    xsrf = [c.value for c in s.cookies if c.name == "_xsrf"][-1]      # login issues a fresh XSRF cookie
    r = s.post(f"{hub.url}/hub/api/users/{name}/tokens", json={"note": "workshop test"},
               headers={"X-XSRFToken": xsrf}, timeout=30)
    assert r.status_code in (200, 201), f"{name}: no token: {r.status_code} {r.text[:300]}"
    return r.json()["token"]


def _course(*args) -> str:
    r = subprocess.run([sys.executable, "-m", "course.commands.cli", "workshop", *args, "--course-id", COURSE], cwd=ROOT,
                       capture_output=True, text=True, timeout=600, env=os.environ)
    assert r.returncode == 0, f"course workshop {' '.join(args)}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout


@pytest.fixture
def room(chp):
    work = Path(tempfile.mkdtemp(prefix="course-hub-"))
    work.chmod(0o755)                     # the learners' servers read their configuration here
    hub = None
    try:
        # The learners' accounts read the course's checkout and its venv, as a hub's shared environment is
        # readable by every learner: a checkout in a folder only root may enter (a `mktemp -d` clone is 0700)
        # is opened for traversal (o+x on its folders, nothing listed or written) until the test ends.
        with unix_accounts(LEARNERS) as made:
            try:
                hub = Hub(work, chp, learner_python(work, made[0]))
                yield hub
            finally:
                if hub is not None:
                    hub.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_workshop_on_a_hub(room, monkeypatch):
    hub = room
    monkeypatch.setenv("COURSE_EXCHANGE", str(hub.exchange))
    monkeypatch.setenv("COURSE_GRADES", str(hub.grades))
    t0 = time.monotonic()
    phase = lambda what: print(f"[hub test] {what}: {time.monotonic() - t0:.0f} s", flush=True)  # noqa: E731
    tokens = {name: login(hub, name) for name in LEARNERS}

    # every learner starts a server: a learner lab (Assignment List and Validate, no formgrader)
    for name, token in tokens.items():
        r = hub.api("post", f"/hub/api/users/{name}/server", token)
        assert r.status_code in (201, 202), f"{name}: {r.status_code} {r.text[:300]}\n{hub.log_text()[-3000:]}"
    for name, token in tokens.items():
        hub.wait(lambda: hub.api("get", f"/hub/api/users/{name}", token).json()["servers"].get("", {}).get("ready"),
                 f"{name}'s server")
    for name, token in tokens.items():
        page = hub.api("get", f"/user/{name}/lab", token)
        assert page.status_code == 200, page.status_code
        data = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                    page.text, re.S).group(1))
        disabled = data.get("disabledExtensions", [])
        assert "@jupyter/nbgrader:formgrader" in disabled, f"the learner lab shows the formgrader: {disabled}"
        assert "@jupyter/nbgrader:assignment-list" not in disabled and "@jupyter/nbgrader:validate-assignment" not in disabled
        assert any(e.get("name") == "@jupyter/nbgrader" for e in data.get("federated_extensions", [])), \
            "nbgrader's lab extension (Assignment List, Validate) is not installed in the learner lab"
        assert hub.api("get", f"/user/{name}/formgrader", token).status_code == 404
        listing = hub.api("get", f"/user/{name}/assignments", token, params={"course_id": COURSE})
        assert listing.status_code == 200 and listing.json()["success"], listing.text[:300]
        # one learner's token opens no other learner's server
        other = LEARNERS[(LEARNERS.index(name) + 1) % len(LEARNERS)]
        assert hub.api("get", f"/user/{other}/api/contents", token).status_code in (403, 404)

    phase("servers up")
    assert f"released {LESSON}" in _course("release", LESSON)
    phase("released")

    nb_path = f"/api/contents/{LESSON}/{LESSON}.ipynb"
    for name, token in tokens.items():
        r = hub.api("post", f"/user/{name}/assignments/fetch", token, data={"course_id": COURSE, "assignment_id": LESSON})
        assert r.status_code == 200, f"{name} fetch: {r.status_code} {r.text[:300]}"
        model = hub.api("get", f"/user/{name}{nb_path}", token).json()
        assert model["type"] == "notebook", model
        assert Path(f"/home/{name}/{LESSON}/{LESSON}.ipynb").stat().st_uid == __import__("pwd").getpwnam(name).pw_uid
        if name != LEARNERS[0]:
            r = hub.api("put", f"/user/{name}{nb_path}", token,
                        json={"type": "notebook", "format": "json", "content": filled(model["content"])})
            assert r.status_code == 200, r.text[:300]
        if name != LEARNERS[2]:          # Validate runs the lesson: once untouched, once finished is enough
            v = hub.api("post", f"/user/{name}/assignments/validate", token, data={"path": f"{LESSON}/{LESSON}.ipynb"})
            assert v.status_code == 200 and v.json()["success"], v.text[:500]
            value = v.json()["value"]
            if name == LEARNERS[0]:
                assert value.get("failed"), f"Validate passed an untouched lesson: {value}"
            else:
                assert not value.get("failed") and not value.get("errored"), f"Validate failed the solution: {value}"
        r = hub.api("post", f"/user/{name}/assignments/submit", token, data={"course_id": COURSE, "assignment_id": LESSON})
        assert r.status_code == 200 and r.json().get("success"), f"{name} submit: {r.text[:300]}"

    phase("fetched, validated, submitted")
    out = _course("collect", LESSON)
    assert f"{len(LEARNERS)} submission(s)" in out, out
    _course("grade", LESSON, "--jobs", "2")                  # sandboxed: the fixture skipped where it cannot be
    rows = {r["student"]: r for r in csv.DictReader(open(hub.grades / "grades.csv", encoding="utf-8"))}
    assert set(rows) == set(LEARNERS), rows
    assert float(rows[LEARNERS[0]]["score"]) == 0
    for name in LEARNERS[1:]:
        assert float(rows[name]["score"]) == float(rows[name]["max_score"]) > 0, rows[name]
    phase("collected and graded")
    out = _course("return", LESSON)
    assert all(n in out for n in LEARNERS), out

    for name, token in tokens.items():
        r = hub.api("post", f"/user/{name}/assignments/fetch_feedback", token,
                    data={"course_id": COURSE, "assignment_id": LESSON})
        assert r.status_code == 200, r.text[:300]
        assert not any(other in r.text for other in LEARNERS if other != name), "a learner's listing names another learner"
        stamps = hub.api("get", f"/user/{name}/api/contents/{LESSON}/feedback", token).json()["content"]
        pages = [f["path"] for st in stamps if st["type"] == "directory"
                 for f in hub.api("get", f"/user/{name}/api/contents/{quote(st['path'])}", token).json()["content"]
                 if f["name"].endswith(".html")]
        assert len(pages) == 1, f"{name} has {len(pages)} feedback pages: {stamps}\n{hub.log_text()[-4000:]}"
        page = hub.api("get", f"/user/{name}/api/contents/{quote(pages[0])}", token, params={"format": "text", "type": "file"})
        assert page.status_code == 200, f"{name}: {pages[0]}: {page.status_code} {page.text[:200]}"
        text = page.json()["content"]
        assert "course-feedback" in text and f"{float(rows[name]['score']):g}" in text
        for other in LEARNERS:
            if other != name:
                assert other not in text
                # and no file of another learner is readable by this one (homes are 0700)
                peek = subprocess.run(["runuser", "-u", name, "--", "ls", f"/home/{other}"], capture_output=True)
                assert peek.returncode != 0, f"{name} can list {other}'s home"
        # the released pages are named by each submission's secret, in a folder no learner may list
        released = hub.exchange / COURSE / "feedback"
        assert len(list(released.glob("*.html"))) == len(LEARNERS)
        peek = subprocess.run(["runuser", "-u", name, "--", "ls", str(released)], capture_output=True)
        assert peek.returncode != 0, f"{name} can list every learner's released feedback"

    phase("feedback fetched")
    hub.stop()
    log = hub.log_text()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000:][:5000]

"""The course in a real browser: JupyterLab as a learner, an instructor and a workshop host see it.

Playwright drives Debian's Chromium (``apt-get install chromium``; ``$COURSE_CHROMIUM`` names another
binary); no browser is downloaded. Without a browser (or without the ``playwright`` package) every
test here is skipped and says why.

Each xdist worker starts one learner lab (``course lab``, the real command) on a throw-away copy of
``notebooks/`` and ``solutions/``, with Jupyter's and IPython's folders in a temporary directory and
``COURSE_PROFILE=smoke``. Lessons are discovered from ``solutions/``, one test each, so xdist spreads
them.

`make test` drives the pages of four lessons that have every kind of control between them
(tests/browser_pages.py says which and why); every lesson's widget is also moved, control by control,
in the notebooks `make run` executes. ``make test-browser`` (``COURSE_BROWSER_LESSONS=all``) drives
every lesson's page, and ``COURSE_BROWSER_LESSONS=08_transformer,10_bert`` the ones named.

A failing test saves a screenshot under ``$COURSE_BROWSER_ARTIFACTS`` (default: a
``browser-artifacts`` folder in pytest's temporary directory) and names it in its message.
``COURSE_DOCS_SCREENSHOTS=docs`` also writes the docs' screenshots there.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from course.commands.lessons import all_lessons  # noqa: E402

from browser_pages import EVERY_CONTROL  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LESSONS = [l.id for l in all_lessons(ROOT)]
_chosen = os.environ.get("COURSE_BROWSER_LESSONS", "").strip()
PAGES = LESSONS if _chosen == "all" else [l for l in LESSONS if l in (_chosen.split(",") if _chosen else EVERY_CONTROL)]
TOKEN = "course-browser-test"
STUB_WORDS = "Write your solution here"


def find_chromium() -> str | None:
    env = os.environ.get("COURSE_CHROMIUM")
    if env:
        return env if Path(env).exists() else None
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


CHROMIUM = find_chromium()
if CHROMIUM is None:
    pytest.skip("no Chromium installed: the real-browser tests need one (Debian: apt-get install chromium; "
                "or set COURSE_CHROMIUM to a Chrome/Chromium binary). .ci/run installs it.", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed "
                               "(pip install -e '.[test]' with constraints.txt)")


# --------------------------------------------------------------------------------------------- helpers

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _artifacts() -> Path:
    folder = Path(os.environ.get("COURSE_BROWSER_ARTIFACTS") or Path(tempfile.gettempdir()) / "course-browser-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _docs_shot(page, name: str, locator=None) -> None:
    folder = os.environ.get("COURSE_DOCS_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        (locator or page).screenshot(path=str(Path(folder) / name))


def jupyter_env(base: Path) -> dict:
    """Jupyter, IPython and matplotlib write only under ``base``; JupyterLab shows every cell (no
    windowing, so outputs are in the page), never autosaves, and asks nothing about news."""
    env = dict(os.environ)
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                     ("IPYTHONDIR", "ipython"), ("MPLCONFIGDIR", "mpl"), ("XDG_CACHE_HOME", "cache")):
        (base / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(base / sub)
    env.pop("JUPYTER_CONFIG_PATH", None)
    settings = base / "config" / "lab" / "user-settings" / "@jupyterlab"
    for plugin, value in (("notebook-extension/tracker", {"windowingMode": "none"}),
                          ("apputils-extension/notification", {"fetchNews": "false", "checkForUpdates": False}),
                          ("docmanager-extension/plugin", {"autosave": False})):
        f = settings / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(value), encoding="utf-8")
    env.update(COURSE_PROFILE="smoke", HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1", COURSE_ROOT=str(ROOT))
    env.pop("NBGRADER_EXECUTION", None)
    env.pop("COURSE_HEADLESS", None)
    env.pop("MPLBACKEND", None)          # tests set Agg; the lab shows plots inline
    return env



_KERNEL_SHUTDOWN_RACE = re.compile(
    r"(?:Exception ignored in: <coroutine object Kernel\.[^\n]*|\[IPKernelApp\] ERROR \| Exception in control handler:)\n"
    r"Traceback \(most recent call last\):\n(?:[ \t][^\n]*\n)*[\w.]+(?:Error|Exception)\b[^\n]*\n?")


def _only_kernel_frames(block: str) -> bool:
    files = re.findall(r'File "([^"]+)"', block)
    return bool(files) and all(re.search(r"/(ipykernel|zmq|tornado|asyncio)/|/warnings\.py$|^zmq/", f) for f in files)

class Lab:
    """One ``course lab`` server, its log kept in a file."""

    def __init__(self, base: Path, args: list[str], env: dict, timeout: float = 300):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = base / f"server-{self.port}.log"
        self._log = open(self.log_path, "w", encoding="utf-8")
        cmd = [sys.executable, "-m", "course.commands.cli", "lab", "--no-browser", "--port", str(self.port),
               "--token", TOKEN, "--ip", "127.0.0.1", "--LabApp.expose_app_in_browser=True",
               "--ServerApp.open_browser=False", *args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.time() + timeout
        while True:
            try:
                self.api("GET", "api/status")
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"course lab did not start:\n{self.log()[-3000:]}")
                time.sleep(0.5)

    def api(self, method: str, path: str):
        req = urllib.request.Request(f"{self.url}/{path}", method=method, headers={"Authorization": f"token {TOKEN}"})
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
        return json.loads(body) if body else None

    def close_sessions(self, path: str | None = None) -> None:
        for s in self.api("GET", "api/sessions") or []:
            if path is None or s.get("path") == path:
                with contextlib.suppress(OSError):
                    self.api("DELETE", f"api/sessions/{s['id']}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def problems(self) -> list[str]:
        """Tracebacks and errors in the server log (and nbgrader's 'no config' warning)."""
        # A kernel being shut down (the test closes its session, or stops the server) may log a traceback
        # on its way out: ipykernel's shutdown races ("Exception ignored in: <coroutine object
        # Kernel.dispatch_control ...>" ... "Event loop is closed"; "Exception in control handler" ...
        # delete_subshell_request ... ZMQError). Such a block is forgiven only when every frame in it is
        # ipykernel's, zmq's, tornado's or asyncio's own; any other traceback fails the test.
        text = _KERNEL_SHUTDOWN_RACE.sub(lambda m: "" if _only_kernel_frames(m.group(0)) else m.group(0), self.log())
        bad = [l for l in text.splitlines()
               if "Traceback" in l or l.startswith("[E ") or "No nbgrader_config.py file found" in l]
        return bad

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
        self._log.close()


def filled_notebook(lesson: str) -> nbformat.NotebookNode:
    """The student notebook with every exercise filled in from the solution (by grade_id)."""
    student = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    solution = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
    answers = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in solution.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    for c in student.cells:
        gid = c.metadata.get("nbgrader", {}).get("grade_id")
        if c.metadata.get("nbgrader", {}).get("solution") and gid in answers:
            c.source = answers[gid]
    return student


@pytest.fixture(scope="session")
def browser():
    pw = sync_api.sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
    yield b
    b.close()
    pw.stop()


@pytest.fixture(scope="session")
def learner(tmp_path_factory):
    """A learner lab on a copy of notebooks/ and solutions/, with its own exchange."""
    base = tmp_path_factory.mktemp("learner-lab")
    served = base / "course"
    for sub in ("notebooks", "solutions"):
        shutil.copytree(ROOT / sub, served / sub, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"))
    nbformat.write(filled_notebook(LESSONS[0]), str(served / "notebooks" / LESSONS[0] / "filled.ipynb"))
    (served / "workshop").mkdir()
    env = jupyter_env(base / "jupyter")
    env["COURSE_EXCHANGE"] = str(base / "exchange")
    env["COURSE_GRADES"] = str(base / "grades")
    lab = Lab(base, ["--notebook-dir", str(served)], env)
    lab.base, lab.served, lab.env = base, served, env
    yield lab
    lab.stop()


def _attachment_probe(message) -> bool:
    """JupyterLab puts a rendered Markdown image in the page with its ``attachment:`` address before it resolves it
    to the cell's attachment, and Chromium logs the first load as an unknown scheme: the lesson's diagrams (cell
    attachments) show all the same (tests/test_browser.py::test_diagrams_show_in_jupyterlab_and_in_the_notebook_alone)."""
    return "ERR_UNKNOWN_URL_SCHEME" in message.text


class Watched:
    """A page whose console errors and page errors are collected; a screenshot is kept on failure."""

    def __init__(self, page, name: str):
        self.page, self.name, self.errors = page, re.sub(r"[^\w.-]+", "_", name), []
        page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                if m.type == "error" and not _attachment_probe(m) else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))

    def fail(self, message: str):
        shot = _artifacts() / f"{self.name}.png"
        with contextlib.suppress(Exception):
            self.page.screenshot(path=str(shot), full_page=True)
        pytest.fail(f"{message}\n(screenshot: {shot})", pytrace=False)

    def check(self, ok, message: str):
        if not ok:
            self.fail(message)


@contextlib.contextmanager
def watched_page(browser, name: str, lab: Lab, ctx=None):
    """A new page, in a context of its own, or in ``ctx`` (closed with the page: the context stays)."""
    own = ctx is None
    ctx = ctx or browser.new_context(viewport={"width": 1400, "height": 1000})
    page = ctx.new_page()
    page.set_default_timeout(60_000)
    w = Watched(page, name)
    try:
        try:
            yield w
        except (sync_api.Error, AssertionError) as exc:
            if isinstance(exc, pytest.fail.Exception):
                raise
            w.fail(f"{type(exc).__name__}: {exc}")
        w.check(not w.errors, "the page reported errors:\n" + "\n".join(w.errors[:10]))
        problems = lab.problems()
        w.check(not problems, "the Jupyter server log has errors or tracebacks:\n" + "\n".join(problems[:10])
                + f"\n(log: {lab.log_path})")
    finally:
        (ctx.close if own else page.close)()


# Spinners and transitions repaint the page many times a second while a kernel is busy: in a browser
# without a GPU every frame is drawn by the CPU, beside the kernel the test waits for.
NO_ANIMATIONS = """document.addEventListener('DOMContentLoaded', () => {
  const s = document.createElement('style');
  s.textContent = '*, *::before, *::after { animation: none !important; transition: none !important; }';
  document.head.appendChild(s); });"""


@pytest.fixture(scope="session")
def lesson_context(browser):
    """One browser context for the 13 lessons' pages (a new page each): JupyterLab's scripts load from
    its cache, which saved a fifth of those tests' CPU time (4 lessons: 155 -> 121 CPU-s)."""
    ctx = browser.new_context(viewport={"width": 1000, "height": 700}, reduced_motion="reduce")
    ctx.add_init_script(NO_ANIMATIONS)
    yield ctx
    ctx.close()


JS_CURRENT = "(p) => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;" \
             " return !!(w && w.context && w.context.path === p && w.sessionContext && w.sessionContext.session" \
             " && w.sessionContext.session.kernel && w.sessionContext.session.kernel.status === 'idle'); }"
JS_DONE = """() => { const w = window.jupyterapp.shell.currentWidget;
  const cs = w.content.widgets.filter(c => c.model.type === 'code');
  const errored = cs.some(c => c.model.outputs.toJSON().some(o => o.output_type === 'error'));
  const done = cs.every(c => c.model.executionCount != null) || errored;
  return done && cs.every(c => c.model.executionState !== 'running') && w.sessionContext.session.kernel.status === 'idle'; }"""
JS_OUTPUTS = """() => window.jupyterapp.shell.currentWidget.content.widgets
  .filter(c => c.model.type === 'code').map(c => ({source: c.model.sharedModel.getSource(), outputs: c.model.outputs.toJSON()}))"""


def open_notebook(w: Watched, lab: Lab, path: str):
    lab.close_sessions(path)
    w.page.goto(f"{lab.url}/lab/tree/{path}?token={TOKEN}&reset")
    w.page.wait_for_function(JS_CURRENT, arg=path, timeout=120_000)


def run_all(w: Watched, timeout_s: float = 240) -> list[dict]:
    w.page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    w.page.wait_for_function(JS_DONE, timeout=timeout_s * 1000, polling=500)
    return w.page.evaluate(JS_OUTPUTS)


def validate_passes(w: Watched) -> None:
    """Click the notebook's Validate button; nbgrader must say the notebook passes all the tests."""
    page = w.page
    page.locator(".jp-NotebookPanel:visible .jp-Toolbar").get_by_text("Validate", exact=True).click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=180_000)
    page.wait_for_function("() => /passes all the tests|failed|error/i.test(document.querySelector('.jp-Dialog').innerText)",
                           timeout=180_000)
    text = dialog.inner_text()
    w.check("passes all the tests" in text, f"Validate on the filled-in notebook did not pass:\n{text[:1500]}")
    dialog.get_by_role("button").last.click()


def png_ink(src: str) -> float:
    """Fraction of an image's pixels that differ from its background (0.0: a blank image)."""
    from course.widgets import ink

    data = src.split(",", 1)[1] if src.startswith("data:") else base64.b64encode(urllib.request.urlopen(src).read()).decode()
    return ink(data)


def images(locator) -> list[str]:
    return locator.locator("img").evaluate_all("els => els.map(e => e.src)")


# ----------------------------------------------------------------------------------------------- tests

def test_student_notebook_stub_and_validate(browser, learner):
    """A student notebook opens with the Validate button and the Nbgrader menu; Run All stops at the
    first exercise with the stub's words; Validate lists the unimplemented exercises, and passes a
    filled-in notebook."""
    lesson = LESSONS[0]
    path = f"notebooks/{lesson}/{lesson}.ipynb"
    with watched_page(browser, f"student-{lesson}", learner) as w:
        page = w.page
        open_notebook(w, learner, path)
        toolbar = page.locator(".jp-NotebookPanel:visible .jp-Toolbar")
        w.check(toolbar.get_by_text("Validate", exact=True).count() == 1, "no Validate button in the notebook toolbar")
        page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
        w.check(page.locator(".lm-Menu-itemLabel", has_text="Assignment List").count() >= 1,
                "the Nbgrader menu has no Assignment List")
        page.keyboard.press("Escape")
        cells = run_all(w)
        errors = [o for c in cells for o in c["outputs"] if o["output_type"] == "error"]
        w.check(errors, "Run All on the untouched notebook raised no error")
        first = errors[0]
        w.check(first["ename"] == "NotImplementedError" and STUB_WORDS in first["evalue"],
                f"the first error should be the stub's worded NotImplementedError, got {first['ename']}: {first['evalue']!r}")
        shown = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").first.inner_text()
        w.check(STUB_WORDS in shown, f"the page does not show the stub's words; it shows {shown[:300]!r}")

        toolbar.get_by_text("Validate", exact=True).click()
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(timeout=180_000)
        page.wait_for_function("() => !document.querySelector('.jp-Dialog') || "
                               "!/Validating/.test(document.querySelector('.jp-Dialog').innerText)", timeout=180_000)
        text = dialog.inner_text()
        w.check("Validation failed" in text or "failed" in text, f"Validate did not report failures:\n{text[:800]}")
        w.check(STUB_WORDS in text or "NotImplementedError" in text or "not implemented" in text,
                f"Validate's report does not say the exercises are unimplemented:\n{text[:800]}")
        dialog.get_by_role("button").last.click()

        filled = f"notebooks/{lesson}/filled.ipynb"
        open_notebook(w, learner, filled)
        validate_passes(w)
        learner.close_sessions()


def _diagram_count(lesson: str) -> int:
    nb = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    return sum(len(re.findall(r"\]\(attachment:[^)]+\.png\)", c.source)) for c in nb.cells if c.cell_type == "markdown")


def test_diagrams_show_in_jupyterlab_and_in_the_notebook_alone(browser, learner, tmp_path):
    """The lessons' diagrams are cell attachments: JupyterLab shows every one of lesson 05's (rendered Markdown,
    loaded, not blank); and each student notebook copied alone into an empty folder (as Colab, or a learner
    who downloads one file, has it), converted by nbconvert and opened from the disk with every request
    refused, shows all of its diagrams: nothing is read from beside the notebook or from the network."""
    lesson = "05_self_attention"
    with watched_page(browser, f"diagrams-{lesson}", learner) as w:
        open_notebook(w, learner, f"notebooks/{lesson}/{lesson}.ipynb")
        page = w.page
        page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets.forEach(c => c.inViewport = true)")
        want = _diagram_count(lesson)
        page.wait_for_function("(n) => [...document.querySelectorAll('.jp-MarkdownOutput img')]"
                               ".filter(i => i.complete && i.naturalWidth > 100).length >= n", arg=want, timeout=60_000)
        loaded = page.locator(".jp-MarkdownOutput img").evaluate_all("els => els.filter(e => e.naturalWidth > 100).map(e => e.src)")
        w.check(len(loaded) >= want, f"JupyterLab shows {len(loaded)} of lesson 05's {want} diagrams")
        w.check(all(png_ink(src) > 0.01 for src in loaded), "a diagram shows blank in JupyterLab")
        learner.close_sessions()

    from nbconvert import HTMLExporter

    ctx = browser.new_context()
    ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
    page = ctx.new_page()
    try:
        for lesson in LESSONS:
            want = _diagram_count(lesson)
            if not want:
                continue
            alone = tmp_path / lesson
            alone.mkdir()
            shutil.copy2(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", alone / f"{lesson}.ipynb")
            html, _ = HTMLExporter().from_notebook_node(nbformat.read(str(alone / f"{lesson}.ipynb"), as_version=4))
            (alone / "page.html").write_text(html, encoding="utf-8")
            page.goto((alone / "page.html").as_uri())
            shown = page.evaluate("[...document.images].filter(i => i.complete && i.naturalWidth > 100).length")
            assert shown >= want, f"{lesson}, the notebook alone: {shown} of its {want} diagrams show"
    finally:
        ctx.close()


def _change(control, kind: str, page) -> str | None:
    """Move one control to another value; returns a description, or None when it cannot move."""
    if kind == "select":
        values = control.locator("option").evaluate_all("els => els.map(e => e.value)")
        labels = control.locator("option").all_inner_texts()
        current = control.input_value()
        others = [i for i, v in enumerate(values) if v != current]
        if not others:
            return None
        control.select_option(index=others[0])
        return f"dropdown -> {labels[others[0]]!r}"
    if kind == "text":
        value = control.input_value()
        words = value.replace(",", " ").split()
        new = " ".join(reversed(words)) if len(set(words)) > 1 else "what a great movie"
        control.click()
        control.fill(new)
        control.press("Enter")
        return f"text -> {new!r}"
    readout = control.locator(".widget-readout").first
    handle = control.locator(".noUi-handle").first
    before = readout.inner_text()
    handle.focus()
    handle.press("ArrowRight")
    page.wait_for_timeout(100)
    if readout.inner_text() == before:
        handle.press("ArrowLeft")
        page.wait_for_timeout(100)
    after = readout.inner_text()
    return None if after == before else f"slider {before} -> {after}"


def _snapshot(box) -> tuple:
    """What a widget shows: its images and its printed text."""
    out = box.locator(".jp-OutputArea-output")
    return tuple(images(box)), tuple(t for t in out.all_inner_texts() if t.strip())


def _wait_redraw(page, box, old: tuple, timeout_s: float = 60) -> tuple:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        now = _snapshot(box)
        if now != old and (now[0] or now[1]):
            page.wait_for_timeout(250)
            if _snapshot(box) == now:
                return now
        page.wait_for_timeout(100)
    return _snapshot(box)


@pytest.mark.parametrize("lesson", PAGES)
def test_solution_notebook_in_browser(browser, learner, lesson, lesson_context):
    """Every solution notebook runs in the smoke profile with no error output and nothing stray; every
    plot is a non-blank image; widgets are live and each control redraws another non-blank image."""
    path = f"solutions/{lesson}/{lesson}.ipynb"
    with watched_page(browser, f"solution-{lesson}", learner, lesson_context) as w:
        page = w.page
        open_notebook(w, learner, path)
        cells = run_all(w)
        bad = []
        for c in cells:
            for o in c["outputs"]:
                if o["output_type"] == "error":
                    bad.append(f"error {o['ename']}: {o['evalue'][:200]} in\n{c['source'][:200]}")
                elif o["output_type"] == "stream" and o.get("name") == "stderr":
                    bad.append(f"stderr {''.join(o['text'])[:200]!r} in\n{c['source'][:200]}")
                elif o["output_type"] == "execute_result":
                    plain = "".join(o.get("data", {}).get("text/plain", ""))
                    if plain.startswith("<function") or re.fullmatch(r"-?[\d.e+-]+", plain.strip()):
                        bad.append(f"stray value {plain[:80]!r} shown by\n{c['source'][-200:]}")
        w.check(not bad, f"{lesson}: outputs the lesson does not mean:\n" + "\n---\n".join(bad[:6]))
        w.check(page.get_by_text("Error displaying widget").count() == 0, f"{lesson}: 'Error displaying widget'")
        outputs = page.locator(".jp-NotebookPanel:visible .jp-OutputArea-output")
        srcs = images(outputs)
        n_images = sum(1 for c in cells for o in c["outputs"] if "image/png" in o.get("data", {}))
        w.check(len(srcs) >= n_images and srcs, f"{lesson}: {n_images} images in the outputs, {len(srcs)} on the page")
        blank = [i for i, s in enumerate(srcs) if png_ink(s) < 0.005]
        w.check(not blank, f"{lesson}: plots {blank} of {len(srcs)} are blank")
        n_widgets = sum(c["source"].count("widgets.interact(") for c in cells)
        boxes = page.locator(".jp-NotebookPanel:visible .widget-interact")
        w.check(boxes.count() >= n_widgets, f"{lesson}: {n_widgets} widgets.interact calls, {boxes.count()} live widgets")
        for b in range(boxes.count()):
            box = boxes.nth(b)
            box.scroll_into_view_if_needed()
            before = _snapshot(box)
            w.check(before[0] or before[1], f"{lesson}: widget {b} shows nothing before any change")
            if before[0]:
                w.check(png_ink(before[0][-1]) >= 0.005, f"{lesson}: widget {b} shows a blank plot before any change")
            # Sliders first, text boxes last: a typed text may take over what the others show (lesson 01).
            controls = [(c, "slider") for c in box.locator(".widget-slider").all()]
            controls += [(c, "select") for c in box.locator("select").all()]
            controls += [(c, "text") for c in box.locator("input[type=text]").all()]
            w.check(controls, f"{lesson}: widget {b} has no control")
            moved = 0
            for control, kind in controls:
                what = _change(control, kind, page)
                if what is None:
                    continue            # a slider with a single value in the smoke profile
                moved += 1
                wait = 30 if before[0] else 10      # a widget that only prints may print the same again
                after = _wait_redraw(page, box, before, timeout_s=wait)
                for _ in range(2):      # some neighbouring values show the same (top_k 0 and 1 on a tiny model)
                    if after != before:
                        break
                    what = _change(control, kind, page) or what
                    after = _wait_redraw(page, box, before, timeout_s=wait)
                # A widget that only prints may show the same text for neighbouring values (top_k 0
                # and 1 of a barely trained model); one that plots must redraw.
                w.check(after != before or not before[0], f"{lesson}: widget {b}: {what} did not redraw")
                if after[0]:
                    # A blank redraw was two redraws racing on two kernel threads (tests/test_widgets_threads.py).
                    w.check(png_ink(after[0][-1]) >= 0.005, f"{lesson}: widget {b}: {what} drew a blank image")
                before = after
            w.check(moved, f"{lesson}: widget {b}: no control could be moved")
        learner.close_sessions(path)


@pytest.mark.skipif(not os.environ.get("COURSE_DOCS_SCREENSHOTS"),
                    reason="writes the README's learner screenshot only; set COURSE_DOCS_SCREENSHOTS=docs to run it")
def test_learner_lab_screenshot(browser, tmp_path_factory):
    """The README's picture of a learner's lab: `course lab` on a learner's own folder (laid out as
    notebooks/ is) holding lesson 05's student notebook with every exercise filled in. It runs with no
    error, Validate passes it, and its widget draws a non-blank heatmap."""
    lesson = next(l for l in LESSONS if l.startswith("05"))
    base = tmp_path_factory.mktemp("learner-docs")
    served = base / "notebooks"
    (served / lesson).mkdir(parents=True)
    path = f"{lesson}/{lesson}.ipynb"
    nbformat.write(filled_notebook(lesson), str(served / path))
    env = jupyter_env(base / "jupyter")
    env["COURSE_EXCHANGE"] = str(base / "exchange")
    lab = Lab(base, ["--notebook-dir", str(served)], env)
    try:
        with watched_page(browser, "learner-docs", lab) as w:
            page = w.page
            open_notebook(w, lab, path)
            cells = run_all(w)
            errors = [o for c in cells for o in c["outputs"] if o["output_type"] == "error"]
            w.check(not errors, f"the filled-in notebook raised {[e['ename'] for e in errors]}")
            box = page.locator(".jp-NotebookPanel:visible .widget-interact").first
            box.scroll_into_view_if_needed()
            shown = _snapshot(box)[0]
            w.check(shown and png_ink(shown[-1]) >= 0.005, "the widget shows no heatmap")
            validate_passes(w)
            box.scroll_into_view_if_needed()
            _docs_shot(page, "learner-lab.png")
            lab.close_sessions()
    finally:
        lab.stop()


def test_workshop_assignment_list(browser, learner):
    """A host releases lessons with `course workshop release`; the learner's Assignment List shows them
    and fetches one into the learner's folder."""
    released = LESSONS[:2]
    env = dict(learner.env)
    run = subprocess.run([sys.executable, "-m", "course.commands.cli", "workshop", "release", *released],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    with watched_page(browser, "assignment-list", learner) as w:
        page = w.page
        page.goto(f"{learner.url}/lab?token={TOKEN}&reset")
        page.wait_for_function("() => !!(window.jupyterapp && window.jupyterapp.commands.hasCommand('nbgrader:open-assignment-list'))")
        page.evaluate("() => window.jupyterapp.commands.execute('nbgrader:open-assignment-list')")
        panel = page.locator("#released_assignments_list")
        for lesson in released:
            panel.get_by_text(lesson).first.wait_for(timeout=60_000)
        text = page.locator(".jp-MainAreaWidget:visible").inner_text()
        w.check("Error" not in text and "does not exist" not in text, f"the Assignment List shows an error:\n{text[:800]}")
        _docs_shot(page, "workshop-assignment-list.png")
        panel.locator(".list_item", has_text=released[0]).get_by_role("button", name="Fetch").click()
        page.locator("#fetched_assignments_list").get_by_text(released[0]).first.wait_for(timeout=60_000)
    assert (learner.served / released[0] / f"{released[0]}.ipynb").is_file(), "the fetched lesson is not in the learner's folder"


@pytest.fixture(scope="module")
def instructor(tmp_path_factory):
    base = tmp_path_factory.mktemp("instructor-lab")
    served = base / "course"
    shutil.copytree(ROOT / "solutions", served / "solutions", ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    env = jupyter_env(base / "jupyter")
    env["COURSE_EXCHANGE"] = str(base / "exchange")
    lab = Lab(base, ["--instructor", "--notebook-dir", str(served), "--grades", str(served / "grades")], env, timeout=900)
    lab.base, lab.served, lab.env = base, served, env
    yield lab
    lab.stop()


def test_formgrader_lists_every_lesson(browser, instructor):
    """The instructor lab's formgrader lists every lesson, with its points, on the gradebook that
    `course grade --out` writes; a graded submission shows up in it."""
    lesson = LESSONS[0]
    subs = instructor.base / "submissions" / "alice" / lesson
    subs.mkdir(parents=True)
    shutil.copy(ROOT / "solutions" / lesson / f"{lesson}.ipynb", subs / f"{lesson}.ipynb")
    from course.grading import sandbox

    unsafe = [] if sandbox.available()[0] else ["--unsafe-no-sandbox"]
    run = subprocess.run([sys.executable, "-m", "course.commands.cli", "grade", str(instructor.base / "submissions"),
                          "--out", str(instructor.served / "grades"), "--jobs", "1", *unsafe],
                         cwd=ROOT, env=instructor.env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    with watched_page(browser, "formgrader", instructor) as w:
        page = w.page
        page.goto(f"{instructor.url}/formgrader?token={TOKEN}")
        table = page.locator("#main-table")
        table.get_by_text(LESSONS[-1]).first.wait_for(timeout=60_000)
        text = table.inner_text()
        missing = [l for l in LESSONS if l not in text]
        w.check(not missing, f"the formgrader does not list {missing}")
        _docs_shot(page, "formgrader.png")
        page.goto(f"{instructor.url}/formgrader/gradebook?token={TOKEN}")
        grades = page.locator("#main-table")
        grades.get_by_text(LESSONS[-1]).first.wait_for(timeout=60_000)
        text = grades.inner_text()
        rows = {m.group(1): (int(m.group(2)), float(m.group(3)), float(m.group(4))) for m in
                re.finditer(r"^(\S+)\s+\S+\s+(\d+)\s+([\d.]+)\s*/\s*([\d.]+)", text, re.M)}
        no_points = [l for l in LESSONS if l not in rows or rows[l][2] <= 0]
        w.check(not no_points, f"the formgrader's gradebook shows no points for {no_points}:\n{text[:800]}")
        _, avg, most = rows[lesson]
        w.check(avg == most, f"the gradebook does not show alice's full score on {lesson}: {rows[lesson]}")
        counted = page.request.get(f"{instructor.url}/formgrader/api/assignment/{lesson}?token={TOKEN}").json()
        w.check(counted.get("num_submissions") == 1,
                f"the formgrader counts {counted.get('num_submissions')} submissions of {lesson}, not 1")
        page.goto(f"{instructor.url}/formgrader/manage_students?token={TOKEN}")
        page.locator("#main-table").get_by_text("alice").first.wait_for(timeout=60_000)
        page.goto(f"{instructor.url}/lab/tree/solutions/{lesson}/{lesson}.ipynb?token={TOKEN}&reset")
        page.wait_for_function(JS_CURRENT, arg=f"solutions/{lesson}/{lesson}.ipynb", timeout=120_000)
        instructor.close_sessions()


def _tree(folder: Path) -> dict[str, str]:
    import hashlib

    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and ".ipynb_checkpoints" not in p.parts}


def test_formgrader_runs_nothing_a_hostile_submission_wrote(browser, instructor):
    """The trust issue's "script in the instructor's formgrader": a submission with script in every field a
    notebook has (tests/hostile.py: a forged nbgrader cell whose grade_id holds markup, Markdown, raw cells,
    attachments, outputs of every MIME type, widget state, metadata), graded beside an honest one, then
    opened by the logged-in instructor in the formgrader, as its feedback page and in the lab: no script
    runs (no request for the payloads' URL, no dialog, nothing set on the page), and the gradebook and every
    file of the grading folder are unchanged afterwards."""
    from hostile import MARK, hostile, payload
    from planting import WRONG_05, build_submission, solution_sources, write_submission

    from course.grading import sandbox

    lesson = "05_self_attention"
    subs = instructor.base / "hostile-submissions"
    write_submission(subs, "mallory", lesson,
                     hostile(build_submission(lesson, {"scaled_dot_product_attention": WRONG_05})))
    write_submission(subs, "honest", lesson, build_submission(lesson))
    # For the class report: a copy of the honest answer with a payload in a comment (its code is shown beside the
    # honest one's, as a similar pair) and in the message of an error it raises (withheld from the results: the
    # cell had given it hidden inputs).
    copied = solution_sources(lesson)
    copied["SelfAttention"] = f"# {payload('report-code')}\n" + copied["SelfAttention"]
    copied["causal_mask"] = f"def causal_mask(T):\n    raise ValueError({payload('report-message')!r})\n"
    write_submission(subs, "mallory2", lesson, build_submission(lesson, copied))
    grades = instructor.served / "grades"
    unsafe = [] if sandbox.available()[0] else ["--unsafe-no-sandbox"]
    run = subprocess.run([sys.executable, "-m", "course.commands.cli", "grade", str(subs), "--out", str(grades),
                          "--jobs", "2", *unsafe], cwd=ROOT, env=instructor.env, capture_output=True, text=True,
                         timeout=900)
    assert "mallory" in run.stdout and (grades / "autograded" / "mallory" / lesson / f"{lesson}.ipynb").is_file(), \
        run.stdout[-3000:] + run.stderr[-2000:]
    before = _tree(grades)
    asked, dialogs = [], []
    with watched_page(browser, "formgrader-hostile", instructor) as w:
        page = w.page
        page.on("request", lambda r: asked.append(r.url))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(f"{instructor.url}/formgrader?token={TOKEN}")
        listed = page.request.get(f"{instructor.url}/formgrader/api/submitted_notebooks/{lesson}/{lesson}"
                                  f"?token={TOKEN}").json()
        ids = {s["student"]: s["id"] for s in listed}
        w.check("mallory" in ids, f"the formgrader lists no submission of mallory: {listed}")
        seen = {}
        for name, url in (("formgrader", f"{instructor.url}/formgrader/submissions/{ids['mallory']}/?index=0&token={TOKEN}"),
                          ("feedback", f"{instructor.url}/files/grades/feedback/mallory/{lesson}/{lesson}.html?token={TOKEN}"),
                          ("lab", f"{instructor.url}/lab/tree/grades/autograded/mallory/{lesson}/{lesson}.ipynb"
                                  f"?token={TOKEN}&reset")):
            page.goto(url)
            page.wait_for_load_state("networkidle", timeout=120_000)
            if name == "lab":
                page.wait_for_function(JS_CURRENT.replace(" && w.sessionContext && w.sessionContext.session"
                                                          " && w.sessionContext.session.kernel && "
                                                          "w.sessionContext.session.kernel.status === 'idle'", ""),
                                       arg=f"grades/autograded/mallory/{lesson}/{lesson}.ipynb", timeout=120_000)
                page.wait_for_timeout(3000)
            seen[name] = page.evaluate("() => window.__course_pwned || null")
            # A refused payload may log an error; nbgrader's formgrader asks a CDN for MathJax, which an
            # offline machine cannot reach (the page works without it).
            w.errors[:] = [e for e in w.errors if MARK not in e and "ERR_NAME_NOT_RESOLVED" not in e
                           and "MathJax is not defined" not in e]
        instructor.close_sessions()
    ran = {name: where for name, where in seen.items() if where}
    # A payload that ran, or markup that rendered, would load /course-pwned... itself. (JupyterLab looks up
    # path-like words of a text output with api/resolvePath, to link them to files: a lookup, not a load.)
    fetched = [u for u in asked if urllib.parse.urlparse(u).path.lstrip("/").startswith(MARK)]
    assert not ran and not fetched and not dialogs, (ran, fetched[:5], dialogs[:5])
    after = _tree(grades)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert not changed, f"opening the hostile submission changed {changed[:10]}"
    _class_report_offline(browser, grades / "report", lesson)


def _class_report_offline(browser, folder: Path, lesson: str) -> None:
    """The class report `course grade` wrote beside the hostile submissions, opened from the disk with every
    request but the pages' own refused: each page loads with its plots (PNG data, drawn), shows the pair of
    similar submissions (their code, payload comment included, escaped) and the suspicious one, asks for nothing,
    and runs none of the payloads."""
    from hostile import MARK

    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    asked, dialogs, errors = [], [], []
    ctx.route("**/*", lambda r: (asked.append(r.request.url), r.continue_() if r.request.url.startswith(("file://",
                                 "data:")) else r.abort()))
    page = ctx.new_page()
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        for name, plots in (("index.html", 1), (f"{lesson}.html", 2)):
            page.goto((folder / name).as_uri())
            page.wait_for_load_state("load")
            drawn = page.evaluate("[...document.images].filter(i => i.complete && i.naturalWidth > 100).length")
            assert drawn >= plots, f"{name}: {drawn} plots drawn, {plots} expected"
            assert page.evaluate("() => window.__course_pwned || null") is None, name
            if name != "index.html":
                text = page.inner_text("body")
                assert "honest and mallory2" in text and "suspicious" in text, text[-3000:]
                assert "report-code" in page.content(), "the similar pair's code is not shown"
                _docs_shot(page, "class-report.png")
    finally:
        ctx.close()
    outside = [u for u in asked if not u.startswith(("file://", "data:"))]
    assert not outside and not dialogs and not errors, (outside[:5], dialogs[:5], errors[:5])
    assert not any(MARK in u for u in asked)

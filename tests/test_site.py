"""The course as a website: `make site` in a fresh clone, after `make run`'s smoke profile, read in Chromium.

The fresh clone and its `make run PROFILE=smoke` are conftest.py's ``smoke_run`` (shared with
tests/test_newcomer.py). MyST's book theme is built once, in this checkout (`make site-theme`: npm ci
from the npm registry, then its build, into .state/book-theme/), and the clone's `make site` is given
that folder (``THEME=``), as the clone's .venv is this checkout's. Then the site is served on loopback
and Chromium (Playwright, Debian's Chromium as in tests/test_browser.py) reads every page:

* every page loads with no error, and nothing is requested from anywhere but the site itself;
* every link and every image resolves;
* math is typeset (KaTeX's markup, its style sheet and its fonts, all from the site);
* each lesson's page shows at least one of its plots, not blank, and its exercises as the learner's stubs;
* no page holds a solution line or a hidden test: `course dist`'s audit on the built pages.

It costs minutes (`make run`'s smoke profile in the clone, then the site's build and its pages in Chromium),
so it runs in its own target, `make test-site` (which sets ``COURSE_TEST_SITE=1``), not in `make test`.
Without that variable, node and npm, Chromium or the playwright package, the test skips and says which.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from course.commands.lessons import all_lessons  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LESSONS = [lesson.id for lesson in all_lessons(ROOT)]
THEME = ROOT / ".state" / "book-theme"

if not os.environ.get("COURSE_TEST_SITE"):
    pytest.skip("the website's test runs in `make test-site` (minutes: a smoke make run, the site's build, Chromium)",
                allow_module_level=True)
if shutil.which("node") is None or shutil.which("npm") is None:
    pytest.skip("no node/npm: `make site` builds MyST's theme with them (Debian: apt-get install nodejs npm)",
                allow_module_level=True)
CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                os.environ.get("COURSE_CHROMIUM"))
if not CHROMIUM:
    pytest.skip("no Chromium installed (Debian: apt-get install chromium; or set COURSE_CHROMIUM)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")


@pytest.fixture(scope="module")
def site(smoke_run, tmp_path_factory):
    """`make site` in the fresh clone, from its `make run PROFILE=smoke`: the built site's folder."""
    from filelock import FileLock

    assert smoke_run.returncode == 0, smoke_run.stdout[-2000:] + smoke_run.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COURSE_", "JUPYTER_", "PYTEST"))}
    with FileLock(str(ROOT / ".state" / "book-theme.lock")):     # this checkout's theme, built once
        proc = subprocess.run(["make", "-o", ".venv/.installed", "site-theme"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, "make site-theme:\n" + proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = subprocess.run(["make", "-o", ".venv/.installed", "site", f"THEME={THEME}"], cwd=smoke_run.clone, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, "make site:\n" + proc.stdout[-3000:] + proc.stderr[-5000:]
    assert "Checked: nothing loaded from the network, no solution, no hidden test." in proc.stdout, proc.stdout
    return smoke_run.clone / "_build" / "site"


@pytest.fixture(scope="module")
def served(site):
    """The site on loopback, as any static server would serve it."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = _QuietServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass                                     # a browser that closes a connection early: not the site's doing


def _pages(site: Path) -> list[str]:
    """Every page's path on the site ('' is the home page)."""
    return sorted(p.parent.relative_to(site).as_posix().removeprefix(".") for p in site.rglob("index.html"))


def _slug(lesson: str) -> str:
    """A lesson's page on the site, as MyST names it: its number (an ordering prefix) dropped."""
    return "lessons/" + re.sub(r"^\d+_", "", lesson).replace("_", "-")


def _diagrams(lesson: str) -> list:
    """The diagrams the lesson's student notebook shows (by the registered alt text)."""
    import nbformat

    from course.tools.learner.build import IMAGE
    from course.tools.learner.lessons import all_diagrams

    nb = nbformat.read(str(ROOT / "notebooks" / lesson / f"{lesson}.ipynb"), as_version=4)
    names = {name for c in nb.cells if c.cell_type == "markdown" for _, name in IMAGE.findall(c.source)}
    return [d for d in all_diagrams().values() if d.name in names]


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_site_pages_links_images_math_plots_and_no_solution(site, served):
    pages = _pages(site)
    lesson_pages = {lesson: _slug(lesson) if _slug(lesson) in pages else None for lesson in LESSONS}
    assert all(lesson_pages.values()), f"lessons without a page: {[l for l, p in lesson_pages.items() if not p]}"
    for doc in ("learners", "instructors", "workshops", "benchmarks", "design", "threat-model"):
        assert any(p.endswith(doc) for p in pages), f"no page for docs/{doc}.md among {pages}"

    problems, checked_links, diagrams_seen = [], {}, {}
    pw = sync_api.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
    ctx = browser.new_context(viewport={"width": 1200, "height": 900})
    outside = []

    def route(r):                                # nothing may come from anywhere but the site
        if r.request.url.startswith(served):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    ctx.route("**/*", route)
    try:
        for path in pages:
            page = ctx.new_page()
            errors = []
            page.on("pageerror", lambda e, errors=errors: errors.append(f"page error: {e}"))
            page.on("console", lambda m, errors=errors: errors.append(f"console: {m.text}") if m.type == "error" else None)
            failed = []
            page.on("requestfailed", lambda r, failed=failed: failed.append(r.url))
            page.on("response", lambda r, failed=failed: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
            url = f"{served}/{path}/" if path else f"{served}/"
            response = page.goto(url, wait_until="networkidle", timeout=120_000)
            where = path or "(home)"
            if response is None or response.status != 200:
                problems.append(f"{where}: status {response and response.status}")
                continue
            page.evaluate("document.querySelectorAll('img').forEach(i => i.loading = 'eager')")
            page.wait_for_function("[...document.images].every(i => i.complete)", timeout=60_000)
            page.evaluate("document.fonts.ready")
            problems += [f"{where}: {e}" for e in errors]
            problems += [f"{where}: request failed: {u}" for u in failed if served in u or "://" not in u]

            # Every image shows something; every link resolves.
            broken = page.evaluate("[...document.images].filter(i => !i.naturalWidth).map(i => i.src)")
            problems += [f"{where}: image does not load: {src}" for src in broken]
            for href in page.evaluate("[...document.querySelectorAll('a[href]')].map(a => a.href)"):
                if not href.startswith(served):
                    continue                      # outside links (GitHub, papers) are text: nothing is loaded
                target = urllib.parse.urldefrag(href)[0]
                if target not in checked_links:
                    checked_links[target] = _status(target)
                if checked_links[target] != 200:
                    problems.append(f"{where}: link to {href} gives {checked_links[target]}")
                fragment = urllib.parse.urldefrag(href)[1]
                if fragment and target == url and not page.locator(f"[id='{fragment}']").count():
                    problems.append(f"{where}: link to #{fragment}, which is not on the page")

            # Math typeset by KaTeX, with its style and fonts from the site.
            text = page.inner_text("body")
            if path in lesson_pages.values():
                katex = page.locator(".katex").count()
                if not katex:
                    problems.append(f"{where}: no typeset math (no KaTeX markup)")
                elif not page.evaluate("getComputedStyle(document.querySelector('.katex')).fontFamily.includes('KaTeX')"):
                    problems.append(f"{where}: KaTeX's style sheet is not applied")
                elif not page.evaluate("document.fonts.check('1em KaTeX_Main')"):
                    problems.append(f"{where}: KaTeX's fonts are not loaded")
                if re.search(r"(?<!\\)\$\$|\\frac\{|\\sqrt\{", text):
                    problems.append(f"{where}: raw TeX in the page's text")

            # A lesson: its plots, its stubs, no hidden test.
            lesson = next((l for l, p in lesson_pages.items() if p == path), None)
            if lesson:
                plots = page.evaluate("[...document.images].filter(i => i.naturalWidth > 100 && /\\.png/.test(i.src))"
                                      ".map(i => i.src)")
                if not plots:
                    problems.append(f"{lesson}: its page shows no plot")
                else:
                    from course.widgets import BLANK, ink

                    with urllib.request.urlopen(plots[0], timeout=30) as r:
                        if ink(base64.b64encode(r.read()).decode()) < BLANK:
                            problems.append(f"{lesson}: its first plot is blank")
                # Its diagrams (cell attachments in the notebook), each shown and loaded, with its alt text.
                shown = page.evaluate("[...document.images].filter(i => i.naturalWidth > 100).map(i => i.alt)")
                missing = [d.name for d in _diagrams(lesson) if not any(" ".join(d.alt.split()[:8]) in " ".join(
                    (a or "").split()) for a in shown)]
                if missing:
                    problems.append(f"{lesson}: its page does not show the diagrams {missing}")
                diagrams_seen[lesson] = len(_diagrams(lesson)) - len(missing)
                if "Write your solution here" not in text:
                    problems.append(f"{lesson}: its page does not show the exercises' stubs")
                if "BEGIN HIDDEN TESTS" in text or "BEGIN SOLUTION" in text:
                    problems.append(f"{lesson}: its page shows a hidden test or a solution marker")
            page.close()
    finally:
        with contextlib.suppress(Exception):
            ctx.close()
            browser.close()
        pw.stop()
    problems += [f"requested from outside the site: {u}" for u in sorted(set(outside))]
    print("diagrams shown per lesson page:", diagrams_seen)
    assert not problems, f"{len(problems)} problems on the site ({len(pages)} pages):\n" + "\n".join(problems[:40])

    # No page holds a solution line or a hidden-test line: course dist's audit, on the built pages.
    from course.tools.dist import audit

    leaks = audit(site, ROOT)
    assert not leaks, "the site shows what learners must not see:\n" + "\n".join(leaks)

"""Build the course as a static website with Jupyter Book 2 (MyST): ``make site``.

Pages:

* the README (the home page), the guides of ``docs/``, CONTRIBUTING and the CHANGELOG, as they are;
* one page per lesson: its **student** notebook (the stubs and the visible tests a learner gets, never
  a hidden test), where each cell tagged ``experiment`` carries the outputs that cell produced in
  ``make run``'s executed notebook (``results/<lesson>.ipynb``; plots, tables, numbers). Cells are
  matched by id, which ``course release`` keeps. No other cell has outputs.

Jupyter Book 2 renders pages with a theme, a small web server that mystmd starts and crawls. Its
themes are normally downloaded when a site is built; this course builds its own copy of MyST's book
theme from ``book/theme/`` (``make site`` runs ``npm ci`` and the theme's build once, into
``.state/book-theme/``), so building the site reaches no network and the pages load nothing from it.

The staged pages go to ``_build/book/``, the site to ``--out`` (``_build/site/``). Then
``course dist``'s audit (:func:`course.tools.dist.audit`) reads every page the site holds: no solution
line, no hidden-test line. Serve the folder with any static server:
``.venv/bin/python -m http.server -d _build/site``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course.commands.lessons import all_lessons  # noqa: E402

TITLE = "Attention and Transformers, step by step"
# Pages in the order of the site's table of contents (the README is the home page).
GUIDES = ["docs/learners.md", "docs/notation.md", "docs/glossary.md",
          "docs/instructors.md", "docs/workshops.md", "deploy/tljh/README.md", "deploy/z2jh/README.md",
          "docs/benchmarks.md", "docs/design.md", "docs/threat-model.md", "docs/gpu-2026-11-25.md", "book/README.md"]
OTHERS = ["CONTRIBUTING.md", "CHANGELOG.md"]
# What an experiment cell's outputs may carry onto a page: pictures, tables and text. Widget views
# (their state lives in a kernel) and scripts are left out.
KEEP_MIME = ("image/png", "image/jpeg", "image/svg+xml", "text/html", "text/markdown", "text/plain")


class SiteError(Exception):
    """Why the site cannot be built, in words (the command prints it and exits 1)."""


def lesson_page(student: Path, executed: Path) -> dict:
    """The student notebook, with each experiment cell's outputs taken from the executed notebook."""
    nb = json.loads(student.read_text(encoding="utf-8"))
    ran = json.loads(executed.read_text(encoding="utf-8"))
    outputs = {c.get("id"): c.get("outputs", []) for c in ran["cells"] if c["cell_type"] == "code"}
    shown = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        cell["outputs"], cell["execution_count"] = [], None
        if "experiment" not in cell.get("metadata", {}).get("tags", []):
            continue
        for out in outputs.get(cell.get("id"), []):
            if out["output_type"] == "stream" and out.get("name") == "stdout":
                cell["outputs"].append({"output_type": "stream", "name": "stdout", "text": out["text"]})
            elif out["output_type"] in ("display_data", "execute_result"):
                data = {k: v for k, v in out.get("data", {}).items() if k in KEEP_MIME}
                if any(k.startswith("image/") for k in data):
                    data.pop("text/plain", None)        # a figure's repr, "<Figure size 640x480 ...>"
                if data:
                    cell["outputs"].append({"output_type": "display_data", "data": data, "metadata": {}})
        shown += bool(cell["outputs"])
    if not shown:
        raise SiteError(f"{executed} has no output in any experiment cell of {student.name}: was it executed?")
    return nb


def front_page() -> str:
    """The site's home page: what the course is, then the learner's path (from docs/learners.md), then the way in."""
    learners = (ROOT / "docs" / "learners.md").read_text(encoding="utf-8")
    path = learners.split("## Your path through the course", 1)[1].split("\n## ", 1)[0]
    path = re.sub(r"\]\((notation|glossary)\.md\)", r"](docs/\1.md)", path)
    path = re.sub(r"<!-- learner-path:(begin|end)[^>]*-->\n?", "", path)
    for lesson in all_lessons(ROOT):                     # each row of the path links to its lesson's page
        path = re.sub(rf"^\| ({lesson.id[:2]} [^|]*?) \|", rf"| [\1](lessons/{lesson.id}.ipynb) |", path, flags=re.M)
    intro = (ROOT / "README.md").read_text(encoding="utf-8").split("\n\n")[1]
    return "\n".join([
        f"# {TITLE}", "", intro, "",
        "Start with lesson 00 in the table below, read the [set-up](docs/learners.md) when you want to run the "
        "lessons yourself, and see [About the course](README.md) for what it is and how it is built.", "",
        "## Your path through the course", path.rstrip(), ""])


def myst_yml(lessons: list[str], theme: Path) -> str:
    toc = ["    - file: index.md", "    - file: README.md", "      title: About the course", "    - title: Lessons",
           "      children:"]
    toc += [f"        - file: lessons/{lesson}.ipynb" for lesson in lessons]
    toc += ["    - title: Guides", "      children:"] + [f"        - file: {g}" for g in GUIDES]
    toc += [f"    - file: {o}" for o in OTHERS]
    return "\n".join([
        "# Written by book/build.py for each build: edit that file, not this one.",
        "version: 1",
        "project:",
        f"  title: {TITLE}",
        "  github: null",
        "  jupyter: false",
        "  toc:",
        *toc,
        "site:",
        f"  title: {TITLE}",
        f"  template: {theme}",
        "  options:",
        "    folders: true",
        "    logo_text: Attention and Transformers",
        "",
    ])


def stage(results: Path, dest: Path, theme: Path) -> list[str]:
    """Write the pages and myst.yml into ``dest``; returns the lessons staged."""
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "lessons").mkdir(parents=True)
    missing, lessons = [], []
    for lesson in all_lessons(ROOT):
        executed = results / f"{lesson.id}.ipynb"
        if not executed.is_file():
            missing.append(lesson.id)
            continue
        page = lesson_page(lesson.student, executed)
        (dest / "lessons" / f"{lesson.id}.ipynb").write_text(json.dumps(page, indent=1), encoding="utf-8")
        lessons.append(lesson.id)
    if missing:
        raise SiteError(f"no executed notebook in {results}/ for {', '.join(missing)}: run `make run` first "
                        "(`make run PROFILE=smoke` takes seconds per lesson), or name its folder with OUT=")
    for rel in ["README.md", *GUIDES, *OTHERS]:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dest / rel)
    for picture in (ROOT / "docs").glob("*.png"):
        shutil.copy2(picture, dest / "docs" / picture.name)
    (dest / "index.md").write_text(front_page(), encoding="utf-8")
    (dest / "myst.yml").write_text(myst_yml(lessons, theme), encoding="utf-8")
    return lessons


def run_jupyter_book(staged: Path) -> None:
    """``jupyter-book build --html`` in the staged folder, with this machine's node and no download."""
    if shutil.which("node") is None:
        raise SiteError("`make site` needs node 18 or newer (Debian: apt-get install nodejs npm); none was found.")
    env = {**os.environ, "JB_ALLOW_NODEENV": "0", "BROWSER": "none", "NO_COLOR": "1",
           "npm_config_cache": str(ROOT / ".state" / "npm"), "npm_config_update_notifier": "false"}
    jupyter_book = Path(sys.executable).parent / "jupyter-book"
    proc = subprocess.run([str(jupyter_book), "build", "--html", "--ci"], cwd=staged, env=env,
                          capture_output=True, text=True, timeout=1800)
    log = proc.stdout + proc.stderr
    (staged / "build.log").write_text(log, encoding="utf-8")
    if proc.returncode != 0 or not (staged / "_build" / "html" / "index.html").is_file():
        raise SiteError(f"jupyter-book build failed (exit {proc.returncode}); its log: {staged / 'build.log'}\n"
                        + log[-3000:])


# Links the theme writes that would leave the machine: none may stay on a page.
EXTERNAL = re.compile(r"""(?:src|href)\s*=\s*["'](?:https?:)?//[^"']+["']""")


def external_loads(site: Path) -> list[str]:
    """Resources a page would load from the network (scripts, styles, pictures, fonts), by page."""
    found = []
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(encoding="utf-8", errors="replace")
        for tag in re.findall(r"<(?:script|link|img|iframe|source)\b[^>]*>", text):
            if re.search(r"""(?:src|href)\s*=\s*["'](?:https?:)?//""", tag) and 'rel="canonical"' not in tag \
                    and not re.search(r'rel="(?:dns-prefetch|preconnect)"', tag):
                found.append(f"{page.relative_to(site)}: {tag[:160]}")
    for css in sorted(site.rglob("*.css")):
        for url in re.findall(r"url\(\s*['\"]?((?:https?:)?//[^'\")]+)", css.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{css.relative_to(site)}: url({url})")
    return found


def build(results: Path, theme: Path, out: Path) -> None:
    t0 = time.perf_counter()
    results, theme, out = results.resolve(), theme.resolve(), out.resolve()
    if not (theme / "template.yml").is_file() or not (theme / "build" / "index.js").is_file():
        raise SiteError(f"the theme is not built in {theme}: `make site` builds it (npm ci, then its build)")
    staged = ROOT / "_build" / "book"
    lessons = stage(results, staged, theme)
    print(f"book/build.py: {len(lessons)} lesson pages from {results}/, {len(GUIDES) + len(OTHERS) + 1} docs pages", flush=True)
    run_jupyter_book(staged)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(staged / "_build" / "html", out)
    leaving = external_loads(out)
    if leaving:
        raise SiteError("pages that would load from the network:\n  " + "\n  ".join(leaving[:20]))
    from course.tools.dist import audit

    problems = audit(out, ROOT)
    if problems:
        raise SiteError("the site holds what learners must not see (course dist's audit):\n  " + "\n  ".join(problems))
    pages = len(list(out.rglob("*.html")))
    print(f"book/build.py: {pages} pages in {out}/ in {time.perf_counter() - t0:.0f} s. Checked: nothing loaded from "
          f"the network, no solution, no hidden test. Serve it: {Path(sys.executable).parent}/python -m http.server -d {out}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default="results", help="make run's folder of executed notebooks (default results/)")
    ap.add_argument("--theme", default=str(ROOT / ".state" / "book-theme"), help="the built book theme")
    ap.add_argument("--out", default="_build/site", help="where the site goes (default _build/site/)")
    args = ap.parse_args(argv)
    try:
        build(Path(args.results), Path(args.theme), Path(args.out))
    except SiteError as exc:
        print(f"make site: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

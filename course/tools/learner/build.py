"""``course learner-layer``: write each lesson's learner's layer into its solution notebook, from its sources.

What it writes (and, with ``--check``, only compares):

* **diagrams**: every ``![...](attachment:<name>.png)`` in a lesson's Markdown gets the diagram ``<name>`` drawn
  from ``lessons/lNN.py`` as a cell attachment (the picture travels inside the notebook: JupyterLab, Colab, which
  sees no neighbouring file, the website and the handout all show it), and its registered alt text;
* **front matter**: the cell tagged ``front-matter`` (the second cell), from the lesson's :class:`Front` and a
  study time estimated from the lesson itself (:func:`study_time`);
* **over seeds**: each Markdown cell tagged ``over-seeds`` (its metadata ``course.over_seeds`` names metrics)
  gets a collapsed table of those metrics over seeds 0-2, read from ``docs/measured/<lesson>.json`` (written by
  ``--measured REPORT``: the ``report.json`` of ``course run LESSON --profile standard --seeds 0 1 2``);
* **the learner's path**: the table of lessons in ``docs/learners.md`` between its markers.

Then ``course release`` carries the solution notebooks' Markdown into the student notebooks.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import re
from pathlib import Path

import nbformat

from course.commands.lessons import all_lessons, root
from course.tools.learner.lessons import Front, all_diagrams, all_fronts

__all__ = ["build", "study_time", "render_front", "IMAGE", "FRONT_TAG", "OVER_SEEDS_TAG"]

IMAGE = re.compile(r"!\[([^\]]*)\]\(attachment:([A-Za-z0-9_.-]+)\.png\)")
FRONT_TAG, OVER_SEEDS_TAG = "front-matter", "over-seeds"
PATH_BEGIN, PATH_END = "<!-- learner-path:begin (written by `course learner-layer`) -->", "<!-- learner-path:end -->"
SOLUTION = re.compile(r"### BEGIN SOLUTION(.*?)### END SOLUTION", re.S)

# How study time is estimated from a lesson (docs/learners.md says so to the learner).
READING_WPM = 80                 # words of the lesson's text per minute: technical prose with formulas, read closely
MINUTES_PER_LINE = 2             # per line of code the learner writes (the reference's), tests and fixes included
MINUTES_PER_DEFINITION = 10      # per function or class: its specification, its example, its visible tests
MINUTES_PER_EXPERIMENT = 3       # per experiment cell: the prediction, reading the result (besides its run time)


def _words(nb) -> int:
    return sum(len(re.sub(r"<[^>]+>|!\[[^\]]*\]\([^)]*\)", " ", c.source).split()) for c in nb.cells
               if c.cell_type == "markdown" and FRONT_TAG not in c.get("metadata", {}).get("tags", []))


def study_time(solution_nb, item: Front) -> dict:
    """The study time of a lesson, from its own content: ``{"reading", "coding", "experiments", "running", "low",
    "high"}`` in minutes (low and high: the estimate -20 % and +25 %, rounded to half hours)."""
    reading = _words(solution_nb) / READING_WPM
    lines = definitions = experiments = 0
    for cell in solution_nb.cells:
        meta = cell.get("metadata", {})
        if cell.cell_type == "code" and meta.get("nbgrader", {}).get("solution"):
            definitions += 1
            for block in SOLUTION.findall(cell.source):
                lines += sum(1 for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#"))
        if cell.cell_type == "code" and "experiment" in meta.get("tags", []):
            experiments += 1
    coding = lines * MINUTES_PER_LINE + definitions * MINUTES_PER_DEFINITION
    total = reading + coding + experiments * MINUTES_PER_EXPERIMENT + item.standard_minutes
    return {"reading": round(reading), "coding": round(coding), "experiments": experiments * MINUTES_PER_EXPERIMENT,
            "running": item.standard_minutes, "low": max(0.5, math.floor(total * 0.8 / 30) / 2),
            "high": max(1.0, math.ceil(total * 1.25 / 30) / 2)}


def _hours(h: float) -> str:
    whole, half = int(h), h - int(h) >= 0.5
    if whole == 0:
        return "½"
    return f"{whole}½" if half else f"{whole}"


def _minutes(m: float) -> str:
    m = int(round(m))
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{m} min"


def render_front(item: Front, titles: dict[str, str], est: dict) -> str:
    """The front-matter cell's Markdown."""
    needs = []
    if item.lessons:
        named = [f"{lid[:2]} ({titles.get(lid, lid).split(':')[0]})" for lid in item.lessons]
        needs.append(("lesson " if len(named) == 1 else "lessons ") + (", ".join(named[:-1]) + " and " + named[-1]
                                                                       if len(named) > 1 else named[0]))
    needs.append(item.needs)
    running = (f"{item.standard_minutes:g} min" if item.standard_minutes >= 1 else "under a minute")
    lines = [
        f"**At a glance.** {'Core lesson (on the main path)' if item.level == 'core' else 'Optional lesson'} · "
        f"about {_hours(est['low'])} to {_hours(est['high'])} hours of study · its standard run takes "
        f"{running} on a laptop CPU.",
        "",
        "**After this lesson you will be able to**",
        "",
        *[f"{i}. {o}" for i, o in enumerate(item.objectives, 1)],
        "",
        f"**You need** {'; '.join(needs)}.",
        "",
        f"**Study time**, estimated from the lesson itself: about {_minutes(est['reading'])} to read it closely, "
        f"{_minutes(est['coding'])} to write and test your code, {_minutes(est['experiments'])} for the predictions "
        f"and the results, and the runs themselves. Slower or faster is normal; the course's docs/learners.md "
        "says how the estimate is made.",
        "",
        f"**On a CPU:** {item.runs_long or 'nothing here runs long; every cell finishes in seconds.'}",
    ]
    return "\n".join(lines)


def _over_seeds(lesson: str, metrics: list[str], measured: dict | None) -> str:
    if not measured:
        raise ValueError(f"{lesson}: a cell asks for metrics over seeds, and docs/measured/{lesson}.json does not exist "
                         f"(run `course run {lesson} --profile standard --seeds 0 1 2 --out R`, then "
                         f"`course learner-layer --measured R/report.json`)")
    rows = []
    for name in metrics:
        m = measured["metrics"].get(name)
        if m is None:
            raise ValueError(f"{lesson}: docs/measured/{lesson}.json has no metric {name!r}")
        values = " / ".join(_fmt(v) for v in m["values"].values())
        target = measured.get("targets", {}).get(name, "")
        rows.append(f"<tr><td><code>{name}</code></td><td>{_fmt(m['mean'])} ± {_fmt(m['sd'])}</td><td>{values}</td>"
                    f"<td>{target}</td></tr>")
    seeds = ", ".join(str(s) for s in measured["seeds"])
    return "\n".join([
        "<details>",
        f"<summary><b>Over seeds {seeds}</b>: what the same run gives with other seeds (standard profile)</summary>",
        "",
        "<table><tr><th>metric</th><th>mean ± sd</th><th>seed by seed</th><th>target</th></tr>",
        *rows,
        "</table>",
        "",
        f"<p>{_measured_on(measured)} Your numbers "
        "differ with the seed, the profile and the machine; what should hold on every seed is the target.</p>",
        "</details>",
    ])


def _measured_on(measured: dict) -> str:
    """The box's footer: "Standard profile, seeds 0-2, on a 2-core x86-64 CPU, 2026-12-07." (what was measured and
    where, not the command that measured it)."""
    command = measured.get("command", "").split()
    profile = command[command.index("--profile") + 1] if "--profile" in command[:-1] else "standard"
    seeds = [int(s) for s in measured["seeds"]]
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        seed_text = f"seeds {seeds[0]}-{seeds[-1]}"
    else:
        seed_text = ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(str(s) for s in seeds)
    machine = str(measured.get("machine") or "a CPU")
    m = re.fullmatch(r"\s*([\w-]+),\s*(\d+) cores?\s*", machine)
    where = f"a {m.group(2)}-core {m.group(1).replace('_', '-')} CPU" if m else machine
    return f"{profile.capitalize()} profile, {seed_text}, on {where}, {measured['date']}."


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    v = float(v)
    if v == 0 or 1e-3 <= abs(v) < 1e4:
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.1f}"
    return f"{v:.2e}"


def import_measured(report: Path, base: Path) -> list[str]:
    """``docs/measured/<lesson>.json`` for each lesson of a ``course run --seeds`` report; returns the lessons."""
    data = json.loads(Path(report).read_text(encoding="utf-8"))
    written = []
    for lesson in data.get("lessons", []):
        machine = data.get("machine") or "a CPU"
        keep = {
            "lesson": lesson["id"],
            "command": f"course run {lesson['id']} --profile {lesson.get('profile', 'standard')} --seeds "
                       + " ".join(str(s) for s in lesson["seeds"]),
            "machine": machine if isinstance(machine, str) else "a CPU",
            "date": str(data.get("created") or data.get("date") or datetime.date.today().isoformat())[:10],
            "seeds": lesson["seeds"],
            "status": lesson.get("status"),
            "metrics": {k: {"mean": v["mean"], "sd": v["sd"], "values": v["values"]} for k, v in lesson["metrics"].items()},
            "targets": {t["metric"]: t["target"] for t in lesson.get("targets", [])},
        }
        path = base / "docs" / "measured" / f"{lesson['id']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(keep, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        written.append(lesson["id"])
    return written


def _lesson_notebook(nb, lesson: str, diagrams: dict, fronts: dict, titles: dict, base: Path) -> tuple[object, list[str]]:
    """The solution notebook with its learner's layer written in; and the problems found."""
    problems = []
    mine = {name: d for name, d in diagrams.items() if d.lesson == lesson}
    used = set()
    measured_path = base / "docs" / "measured" / f"{lesson}.json"
    measured = json.loads(measured_path.read_text(encoding="utf-8")) if measured_path.is_file() else None
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        names = IMAGE.findall(cell.source)
        if names:
            attachments = {}
            for _, name in names:
                d = mine.get(name)
                if d is None:
                    problems.append(f"{lesson}: the Markdown names a diagram {name!r} that lessons/ does not draw for it")
                    continue
                used.add(name)
                attachments[f"{name}.png"] = {"image/png": base64.b64encode(d.draw().png()).decode("ascii")}
            cell.source = IMAGE.sub(lambda m: f"![{mine[m.group(2)].alt}](attachment:{m.group(2)}.png)"
                                    if m.group(2) in mine else m.group(0), cell.source)
            cell["attachments"] = attachments
        elif "attachments" in cell:
            del cell["attachments"]
        if OVER_SEEDS_TAG in tags:
            metrics = cell.get("metadata", {}).get("course", {}).get("over_seeds", [])
            try:
                cell.source = _over_seeds(lesson, metrics, measured)
            except ValueError as exc:
                problems.append(str(exc))
    for name in sorted(set(mine) - used):
        problems.append(f"{lesson}: the diagram {name!r} is drawn but no Markdown cell shows it")
    item = fronts.get(lesson)
    if item is not None:
        text = render_front(item, titles, study_time(nb, item))
        at = [i for i, c in enumerate(nb.cells) if FRONT_TAG in c.get("metadata", {}).get("tags", [])]
        if not at:
            cell = nbformat.v4.new_markdown_cell(text, metadata={"tags": [FRONT_TAG]})
            cell["id"] = f"{lesson[:2]}-front-matter"
            nb.cells.insert(1, cell)
        else:
            nb.cells[at[0]].source = text
    return nb, problems


def path_table(fronts: dict, titles: dict, base: Path) -> str:
    """The learner's path as a Markdown table: every lesson, core or optional, what it needs, its study time."""
    rows = ["| lesson | core or optional | builds on | study time |", "| --- | --- | --- | --- |"]
    for lesson in all_lessons(base):
        item = fronts.get(lesson.id)
        if item is None:
            rows.append(f"| {lesson.id[:2]} {titles.get(lesson.id, lesson.id)} | | | |")
            continue
        nb = nbformat.read(str(lesson.solution), as_version=4)
        est = study_time(nb, item)
        rows.append(f"| {lesson.id[:2]} {titles.get(lesson.id, lesson.id)} | {item.level} | "
                    f"{', '.join(x[:2] for x in item.lessons) or '—'} | {_hours(est['low'])}–{_hours(est['high'])} h |")
    return "\n".join(rows)


def build(lesson_ids: list[str] | None = None, *, check: bool = False, base: Path | None = None) -> list[str]:
    """Write (or, with ``check``, compare) the learner's layer of the lessons named (all by default). Returns the
    problems: a lesson whose committed notebook differs (in check mode), a diagram named but not drawn, a box with
    no measurement."""
    base = base or root()
    diagrams, fronts = all_diagrams(), all_fronts()
    lessons = [lesson for lesson in all_lessons(base) if not lesson_ids or lesson.id in lesson_ids]
    titles = {lesson.id: lesson.title for lesson in all_lessons(base)}
    problems = []
    for lesson in lessons:
        text = lesson.solution.read_text(encoding="utf-8")
        nb = nbformat.reads(text, as_version=4)
        nb, found = _lesson_notebook(nb, lesson.id, diagrams, fronts, titles, base)
        problems += found
        new = nbformat.writes(nb) + "\n"
        if new != text:
            if check:
                problems.append(f"{lesson.id}: its learner's layer is not up to date: run `course learner-layer "
                                f"{lesson.id}`, then `course release {lesson.id}`, and commit")
            else:
                lesson.solution.write_text(new, encoding="utf-8")
    doc = base / "docs" / "learners.md"
    if doc.is_file() and not lesson_ids:
        text = doc.read_text(encoding="utf-8")
        if PATH_BEGIN in text and PATH_END in text:
            head, rest = text.split(PATH_BEGIN, 1)
            _, tail = rest.split(PATH_END, 1)
            new = f"{head}{PATH_BEGIN}\n{path_table(fronts, titles, base)}\n{PATH_END}{tail}"
            if new != text:
                if check:
                    problems.append("docs/learners.md: the learner's path table is not up to date: run "
                                    "`course learner-layer` and commit")
                else:
                    doc.write_text(new, encoding="utf-8")
    return problems

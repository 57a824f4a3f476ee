"""Bad submissions get a clear status and the score an instructor would expect; others are unaffected."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from planting import build_submission, results_by_key, write_submission

COURSE = str(Path(sys.executable).parent / "course")
LESSON = "00_softmax_lookup"
pytestmark = pytest.mark.slow


def _grade(subs: Path, out: Path, timeout: int = 60, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([COURSE, "grade", str(subs), "--out", str(out), "--timeout", str(timeout), *extra],
                          capture_output=True, text=True, timeout=1200)


def _grade_bad_bank(folder: Path):
    subs = folder / "bad-submissions"
    write_submission(subs, "good", LESSON, build_submission(LESSON))
    bad = subs / "invalid-json" / LESSON
    bad.mkdir(parents=True)
    (bad / f"{LESSON}.ipynb").write_text('{"cells": [ {"cell_type": "code", "sour', encoding="utf-8")
    (subs / "missing-notebook" / LESSON).mkdir(parents=True)
    (subs / "missing-notebook" / LESSON / "notes.txt").write_text("I forgot to upload it")
    renamed = subs / "misnamed" / LESSON
    renamed.mkdir(parents=True)
    nbformat.write(build_submission(LESSON), str(renamed / f"{LESSON} (1).ipynb"))
    write_submission(subs, "infinite-loop", LESSON, build_submission(LESSON, {"soft_lookup": "while True:\n    pass"}))
    nb = build_submission(LESSON)
    nb.cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_softmax_stable"]
    write_submission(subs, "deleted-test-cell", LESSON, nb)
    write_submission(subs, "stderr-writer", LESSON, build_submission(LESSON, {"softmax": """
        import sys
        def softmax(x, dim=-1):
            print("debug: softmax called", file=sys.stderr)
            e = (x - x.amax(dim=dim, keepdim=True)).exp()
            return e / e.sum(dim=dim, keepdim=True)
    """}))
    write_submission(subs, "kernel-death", LESSON, build_submission(LESSON, {"soft_lookup": "import os\nos._exit(1)"}))
    # an exception whose text holds a lone surrogate, which no UTF-8 file can hold as it is
    write_submission(subs, "surrogate-message", LESSON, build_submission(LESSON, {"softmax": """
        def softmax(x, dim=-1):
            raise ValueError("bad \\udc80 char")
    """}))
    out = folder / "bad-graded"
    proc = _grade(subs, out, timeout=10)
    return proc, results_by_key(out / "results.json"), out


def _r(bank, student):
    return bank[1][(student, LESSON)]


def _grader_finishes_and_flags_what_needs_a_look(bad_bank):
    proc, results, out = bad_bank
    assert proc.returncode == 1, proc.stdout + proc.stderr       # some submissions need a look
    assert "need a look" in proc.stdout
    rows = list(csv.DictReader(open(out / "grades.csv")))
    assert {r["student"] for r in rows} == {s for s, _ in results}
    assert len(rows) == 9


def _good_submission_unaffected(bad_bank):
    r = _r(bad_bank, "good")
    assert r["status"] == "graded" and r["score"] == r["max_score"] > 0


def _invalid_json(bad_bank):
    r = _r(bad_bank, "invalid-json")
    assert r["status"] == "invalid-notebook" and r["score"] == 0
    assert "not a valid notebook" in r["detail"]


def _missing_notebook(bad_bank):
    r = _r(bad_bank, "missing-notebook")
    assert r["status"] == "missing-notebook" and r["score"] == 0
    assert f"expected {LESSON}.ipynb" in r["detail"] and "found nothing" in r["detail"]


def _misnamed_notebook_is_graded(bad_bank):
    r = _r(bad_bank, "misnamed")
    assert r["status"] == "graded" and r["score"] == r["max_score"]
    assert "expected the name" in r["detail"]


def _infinite_loop_is_stopped_and_the_rest_graded(bad_bank):
    r = _r(bad_bank, "infinite-loop")
    assert r["status"] == "timeout", r["detail"]
    cells = {c["grade_id"]: c for c in r["cells"]}
    assert cells["test_softmax_basic"]["passed"]             # softmax was fine: its tests still count
    assert not cells["test_soft_lookup_values"]["passed"]
    assert 0 < r["score"] < r["max_score"]


def _deleted_test_cell_scores_zero_there(bad_bank):
    r = _r(bad_bank, "deleted-test-cell")
    assert r["status"] == "test-cells-deleted"
    cells = {c["grade_id"]: c for c in r["cells"]}
    assert cells["test_softmax_stable"]["points"] == 0
    assert r["score"] == r["max_score"] - cells["test_softmax_stable"]["max_points"]


def _stderr_output_costs_nothing(bad_bank):
    r = _r(bad_bank, "stderr-writer")
    assert r["status"] == "graded" and r["score"] == r["max_score"], r["cells"]


def _kernel_death_is_reported(bad_bank):
    r = _r(bad_bank, "kernel-death")
    assert r["status"] == "kernel-died", r["detail"]
    assert "died" in r["detail"]
    cells = {c["grade_id"]: c for c in r["cells"]}
    assert cells["test_softmax_basic"]["passed"]                # restarted: the cells before still count
    assert not cells["test_soft_lookup_values"]["passed"] and r["score"] < r["max_score"]


def test_bad_submissions(tmp_path):
    """One grading run over a bank of broken submissions: each gets its status, the good one full marks."""
    bank = _grade_bad_bank(tmp_path)
    _grader_finishes_and_flags_what_needs_a_look(bank)
    _good_submission_unaffected(bank)
    _invalid_json(bank)
    _missing_notebook(bank)
    _misnamed_notebook_is_graded(bank)
    _infinite_loop_is_stopped_and_the_rest_graded(bank)
    _deleted_test_cell_scores_zero_there(bank)
    _stderr_output_costs_nothing(bank)
    _kernel_death_is_reported(bank)
    _a_surrogate_in_a_message_is_graded(bank)


def _a_surrogate_in_a_message_is_graded(bank):
    """It used to stop the writing of the autograded notebook (UnicodeEncodeError), and the submission was a
    grader-error with no grade: now it is graded (0 for the cells that call softmax) and its page is written."""
    r = _r(bank, "surrogate-message")
    assert r["status"] == "graded" and r["score"] < r["max_score"], (r["status"], r["detail"])
    assert Path(r["feedback"]).is_file()


def test_regrading_is_idempotent(tmp_path):
    subs = tmp_path / "subs"
    write_submission(subs, "alice", LESSON, build_submission(LESSON))
    unstable = "def softmax(x, dim=-1):\n    e = x.exp()\n    return e / e.sum(dim, keepdim=True)"
    write_submission(subs, "bob", LESSON, build_submission(LESSON, {"softmax": unstable}))
    write_submission(subs, "carol", LESSON, build_submission(LESSON, {"soft_lookup": "def soft_lookup(*a, **k):\n    return 0"}))
    out = tmp_path / "out"
    first = _grade(subs, out, 60, "--jobs", "1")          # one at a time
    grades1 = (out / "grades.csv").read_text()
    cells1 = [(r["student"], [(c["grade_id"], c["points"]) for c in r["cells"]]) for r in json.loads((out / "results.json").read_text())]
    second = _grade(subs, out, 60, "--jobs", "3", "--regrade")   # in parallel, everything graded again
    assert first.returncode == second.returncode == 0, second.stdout + second.stderr
    assert (out / "grades.csv").read_text() == grades1
    third = _grade(subs, out, 60)                           # a re-run resumes: nothing changed, results kept
    assert third.returncode == 0 and "submissions" in third.stdout
    assert (out / "grades.csv").read_text() == grades1
    cells2 = [(r["student"], [(c["grade_id"], c["points"]) for c in r["cells"]]) for r in json.loads((out / "results.json").read_text())]
    assert cells1 == cells2
    assert (subs / "alice" / LESSON / f"{LESSON}.ipynb").is_file()      # the submissions are untouched


def test_not_a_folder(tmp_path):
    proc = _grade(tmp_path / "nope", tmp_path / "out")
    assert proc.returncode != 0 and "is not a folder" in (proc.stdout + proc.stderr)


def test_warm_sandbox_imports_what_the_lessons_import(tmp_path):
    """The warm sandbox imports the lessons' own modules once per batch (transformers' model code
    for 09-11 took 5 s per submission); names that are not module paths never reach its command."""
    from course.grading import sandbox
    from course.grading.notebooks import imported_modules as _imported_modules

    source = nbformat.read(str(Path(__file__).parents[1] / "solutions" / "11_vit" / "11_vit.ipynb"), as_version=4)
    found = _imported_modules(source)
    assert {"torch", "course.oracles.vit", "course.checks_11"} <= found
    if sandbox.available()[0]:
        cmd = sandbox.worker_command(zygote=True, ctrl_fd=3, warm=["course.oracles.bert", "x; rm -rf /", "--y"])
        assert "--warm=course.oracles.bert" in cmd and not any("rm -rf" in c or "--y" in c for c in cmd)
    code = ("import sys; from course.grading.sandboxed.zygote import warm_imports; warm_imports(['course.oracles.bert,no.such.module']); "
            "print('transformers.models.bert.modeling_bert' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "True"


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _sandboxes_of(pid: int) -> set[int]:
    """The bubblewrap processes whose parent is ``pid``."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*"):
        child = int(stat.name)
        if _parent(child) == pid:
            try:
                if b"bwrap" in (stat / "cmdline").read_bytes().split(b"\0")[0]:
                    found.add(child)
            except OSError:
                pass
    return found


def test_forked_judges_share_one_warm_parent_and_their_sandboxes_end_with_them(tmp_path):
    """`course grade`'s judges are forked from one fork server, which launched a warm sandbox per judge
    before its imports. A judge that is killed takes its sandbox with it, and its slot gets a new judge
    forked from the same warm parent; closing ends the server and everything it started."""
    import time

    from course.grading import pool, sandbox

    if not sandbox.available()[0]:
        pytest.skip("bubblewrap is not available here: " + sandbox.available()[1])
    judges = pool.Judges(2, {"scratch_base": str(tmp_path), "warm": [], "limits": {"memory_mb": 3000}})
    judges.start_all()
    server = judges.server.pid if judges.server is not None else None
    try:
        if server is None:
            pytest.skip("no pidfds here: each judge is a process of its own")
        a, b = judges._proc(0), judges._proc(1)
        assert isinstance(a, pool.ForkedJudge) and isinstance(b, pool.ForkedJudge) and a.pid != b.pid
        assert _parent(a.pid) == _parent(b.pid) == server
        assert len(_sandboxes_of(server)) == 2                  # launched ahead, one for each judge
        judges._kill(0)
        deadline = time.monotonic() + 15
        while len(_sandboxes_of(server)) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(_sandboxes_of(server)) == 1, "the killed judge's sandbox outlived it"
        c = judges._proc(0)
        assert c.pid not in (a.pid, b.pid) and _parent(c.pid) == server and c.poll() is None
    finally:
        judges.close()
    assert _parent(server) is None or not Path(f"/proc/{server}").exists()
    assert not _sandboxes_of(server)


def test_a_judge_adopts_the_sandbox_it_launched_as_it_started(tmp_path, monkeypatch):
    """Each judge launches its warm sandbox before its own imports (the grader describes it in
    $COURSE_JUDGE_PRESTART) and its first submission adopts it; a submission that needs another sandbox
    (other modules, other limits) gets a new one, and the launched one is stopped."""
    import time

    from course.grading import sandbox
    from course.grading.judge import session

    if not sandbox.available()[0]:
        pytest.skip("bubblewrap is not available here: " + sandbox.available()[1])
    limits = sandbox.Limits(memory_mb=3000)
    want = {"scratch_base": str(tmp_path), "warm": ["course.masks"], "limits": {"memory_mb": 3000}}
    for warm, adopted in ((["course.masks"], True), (["course.plots"], False)):
        monkeypatch.setenv(sandbox.PRESTART_ENV, json.dumps(want))
        early = sandbox.prestart_from_env()
        assert sandbox.PRESTART_ENV not in os.environ and early is not None
        monkeypatch.setattr(session.ZYGOTE, "early", early)
        try:
            session.ZYGOTE.start(tmp_path, warm, limits, time.monotonic() + 120)
            assert session.ZYGOTE.alive() and (session.ZYGOTE.proc is early[1][0]) == adopted
            if not adopted:
                assert early[1][0].wait(timeout=10) is not None and not early[1][2].exists()
        finally:
            session.ZYGOTE.kill()
    monkeypatch.setenv(sandbox.PRESTART_ENV, "{not json")
    assert sandbox.prestart_from_env() is None          # an optimisation only: the judge starts as before


# -- issue 19: the protocol, straight through the judge ----------------------------------------------

def _lesson(tmp_path, solution: str, test: str, after: str = "", before: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A one-exercise lesson (source with its test) and a submission of ``solution``; ``before``: the
    learner's cells between the solution and the test, ``after``: one after the test."""
    def nb(sol):
        book = nbformat.v4.new_notebook()
        book.cells = [nbformat.v4.new_code_cell("import torch"),
                      nbformat.v4.new_code_cell(sol, metadata={"nbgrader": {"solution": True, "grade": False,
                                                                             "grade_id": "f", "locked": False}}),
                      *[nbformat.v4.new_code_cell(src) for src in before],
                      nbformat.v4.new_code_cell(test, metadata={"nbgrader": {"solution": False, "grade": True,
                                                                              "grade_id": "test_f", "points": 1,
                                                                              "locked": True}})]
        if after:
            book.cells.append(nbformat.v4.new_code_cell(after))
        return book
    source, sub = tmp_path / "source.ipynb", tmp_path / "sub.ipynb"
    nbformat.write(nb("def f(*a):\n    raise NotImplementedError"), str(source))
    nbformat.write(nb(solution), str(sub))
    return source, sub


@pytest.fixture(scope="module")
def judge_scratch(tmp_path_factory):
    """One scratch folder for this file's straight-through judge tests, hence one warm sandbox that has
    imported torch, as a judge keeps one for a whole batch: each submission still gets a fresh worker
    forked from it, and the sandbox ends every other process and empties its folders between them (a
    test that needs other limits starts another). ~1 CPU-second a test instead of ~4."""
    from course.grading.judge import session

    yield tmp_path_factory.mktemp("judge-scratch")
    session.ZYGOTE.kill()


def _judge(judge_scratch, source, sub, **spec):
    from course.grading import sandbox
    from course.grading.judge import run as judge

    if not sandbox.available()[0]:
        pytest.skip("bubblewrap is not available here: " + sandbox.available()[1])
    return judge.grade_submission({"notebook": str(sub), "source": str(source), "timeout": 30,
                                   "scratch_base": str(judge_scratch), "sandbox": True, "warm": ["torch"],
                                   **spec}).to_json()


MUTATION_TEST = """
x = torch.ones(3)
states = [{"w": torch.zeros(2)}, {"w": torch.zeros(2)}]
x_before, w_before = x.clone(), states[1]["w"].clone()
from course import checks
with checks.seeing_in_place_changes():
    f(x, states)
assert torch.equal(x, x_before), "f changed its input x in place"
assert torch.equal(states[1]["w"], w_before), "f changed a state_dict it was given"
"""


@pytest.mark.parametrize("solution, passes", [
    ("def f(x, states):\n    return x * 2, [dict(s) for s in states]", True),
    ("def f(x, states):\n    x.mul_(2)\n    return x", False),                           # in place, on the argument
    ("def f(x, states):\n    states[1]['w'].add_(1)\n    return x + 1", False),         # in place, nested
    ("def f(x, states):\n    x.data.mul_(2)\n    return x", False),                      # behind autograd's back
    ("def f(x, states):\n    states[1]['w'] = states[1]['w'] + 1\n    return x", False),    # an entry rebound
    ("def f(x, states):\n    states[1] = {'w': torch.ones(2)}\n    return x", False),       # an item replaced
    ("def f(x, states):\n    states.pop()\n    return x", False),                           # an item removed
    ("def f(x, states):\n    states.append({})\n    return x", True),                       # added: x, states[1] unchanged
    ("def f(x, states):\n    states[1]['extra'] = 1\n    return x", True),                  # as in the notebook
    ("def f(x, states):\n    out = dict(states[1])\n    out['w'] = out['w'] + 1\n    return x", True),   # a new dict
    # the check's own pieces, replaced by a name the scans do not read: the change is still seen
    ("import sys\nvars(sys.modules['_'.join(['', '', 'main', '', ''])]).update(_same=lambda *a: True)\n"
     "def f(x, states):\n    x.data.mul_(2)\n    return x", False),
    ("import sys\nsetattr(vars(sys.modules['_'.join(['', '', 'main', '', ''])])['_rebound'], '__co' + 'de__', "
     "(lambda c, b: False).__code__)\ndef f(x, states):\n    states[1]['w'] = states[1]['w'] + 1\n    return x", False),
    # PyTorch's own pieces the comparison uses, replaced (a red team's): the comparison uses C-level ones
    ("import torch\n_real = torch.equal\ndef _eq(a, b):\n    if a.dtype is torch.uint8 and b.dtype is torch.uint8 "
     "and a.dim() == 1:\n        return True\n    return _real(a, b)\nvars(torch)['equal'] = _eq\n"
     "def f(x, states):\n    x.data.mul_(2)\n    return x", False),
    ("import torch\nclass Frozen(torch.Tensor):\n    @property\n    def _version(self):\n        return self.__dict__['_fv']\n"
     "    def detach(self):\n        return self.__dict__['_frozen'].detach()\n"
     "def f(x, states):\n    x._frozen = x.detach().clone()\n    x._fv = x._version\n    x.__class__ = Frozen\n"
     "    torch.Tensor.add_(x, 1.0)\n    return None", False),
    # a dispatch mode left switched on that answers the comparison's `equal` (a red team's)
    ("import torch\n_u = vars(torch.utils)['_py' + 'thon_dispatch']\n_Base = vars(_u)['TorchDisp' + 'atchMode']\n"
     "def _d(self, func, types, args=(), kwargs=None):\n    if str(func) == 'aten.equal.default' and args[0].dtype == "
     "torch.uint8:\n        return True\n    return func(*args, **(kwargs or {}))\n"
     "_Quiet = type('_Quiet', (_Base,), {'__torch' + '_dispatch__': _d})\n_Quiet().__enter__()\n"
     "def f(x, states):\n    x.data.mul_(2)\n    return x", False),
])
def test_a_learners_in_place_change_reaches_the_test(tmp_path, judge_scratch, solution, passes):
    """Tensors passed to learner code are copies in the sandbox; the changes a call makes to them in
    place come back to the test's own tensors, so `assert torch.equal(x, x_before)` sees what it would
    see in the notebook."""
    source, sub = _lesson(tmp_path, solution, MUTATION_TEST)
    result = _judge(judge_scratch, source, sub)
    assert [c["passed"] for c in result["cells"]] == [passes], result


STATE_DICT_TEST = MUTATION_TEST.replace('states = [{"w": torch.zeros(2)}, {"w": torch.zeros(2)}]',
                                         'import collections\nstates = [collections.OrderedDict(w=torch.zeros(2)), '
                                         'collections.OrderedDict(w=torch.zeros(2))]')


@pytest.mark.parametrize("solution, passes", [
    ("def f(x, states):\n    return x, [dict(s) for s in states]", True),
    ("def f(x, states):\n    states[1]['w'].add_(1)\n    return x", False),
    ("def f(x, states):\n    states[1]['w'] = torch.ones(2)\n    return x", False),
])
def test_a_change_inside_a_state_dict_reaches_the_test(tmp_path, judge_scratch, solution, passes):
    """state_dict() returns an OrderedDict: the tensors in one passed to learner code are watched as a
    dict's are, and so are its entries (lesson 08's average_checkpoints takes a list of them)."""
    source, sub = _lesson(tmp_path, solution, STATE_DICT_TEST)
    result = _judge(judge_scratch, source, sub)
    assert [c["passed"] for c in result["cells"]] == [passes], result


DEFERRED_TEST = MUTATION_TEST.replace("    f(x, states)\n",
                                      "    out = f(x, states)\n    seen = list(out)     # the test uses what f returned\n")
LAZY = """
class Lazy:
    def __init__(self, x, states):
        self.x, self.states = x, states
    def __iter__(self):
{work}        return iter([1, 2])
def f(x, states):
    return Lazy(x, states)
"""


@pytest.mark.parametrize("work, passes", [
    ("", True),                                                                   # changes nothing, ever
    ("        self.x.mul_(2)\n", False),                                          # in place, when iterated
    ("        self.states[1]['w'] = self.states[1]['w'] + 1\n", False),           # an entry rebound, when iterated
    ("        self.states[1]['w'].add_(1)\n", False),                             # nested, in place, when iterated
])
def test_a_change_made_after_the_call_reaches_the_test(tmp_path, judge_scratch, work, passes):
    """Inside `checks.seeing_in_place_changes()` a call's inputs stay watched until the block ends: a
    function that returns an object which changes the inputs later, when the test uses it, is seen as in
    the notebook (a red team's `average_checkpoints` scored 41/41 graded that way, and failed in the notebook)."""
    source, sub = _lesson(tmp_path, LAZY.format(work=work), DEFERRED_TEST)
    result = _judge(judge_scratch, source, sub)
    assert [c["passed"] for c in result["cells"]] == [passes], result


SWAP_THEN_CHANGE = """
class Lazy:
    def __init__(self, x, states):
        self.states = states
        states[1]['w'] = states[1]['w'].clone()      # the same values, a new tensor: nothing to see yet
    def __iter__(self):
        self.states[1]['w'].add_(1)                  # then a change to that new tensor, when iterated
        return iter([1, 2])
def f(x, states):
    return Lazy(x, states)
"""


SWAP_DEEPER_THEN_CHANGE = """
class Lazy:
    def __init__(self, w):
        self.w = w
    def __iter__(self):
        self.w.add_(1)
        return iter([1, 2])
def f(x, states):
    w = states[1]['w'].clone()
    states[1] = {'w': w}                             # an equal copy, in a new dict
    return Lazy(w)
"""


@pytest.mark.parametrize("solution", [SWAP_THEN_CHANGE, SWAP_DEEPER_THEN_CHANGE], ids=["entry", "in-a-new-dict"])
def test_a_later_change_to_a_tensor_the_call_put_in_an_input_reaches_the_test(tmp_path, judge_scratch, solution):
    """Red teams': the call puts a copy in place of an input's tensor (equal values: nothing to see yet),
    directly or inside a new dict, and the returned object changes that copy later. What the call put
    in a watched container is watched too, however deep."""
    source, sub = _lesson(tmp_path, solution, DEFERRED_TEST)
    result = _judge(judge_scratch, source, sub)
    assert [c["passed"] for c in result["cells"]] == [False], result


@pytest.mark.parametrize("added", ["(x * 2).to_sparse()", "torch.ones(2, dtype=torch.complex64).conj()"])
def test_an_unusual_tensor_added_to_an_input_list_keeps_a_correct_function_correct(tmp_path, judge_scratch, added):
    """A red team's: a tensor the watch cannot read as bytes (sparse, a conjugate view) put into an
    input list (allowed, as appending {} is) made the worker's comparison raise; it is watched by identity."""
    source, sub = _lesson(tmp_path, f"import torch\ndef f(x, states):\n    states.append({added})\n    return x",
                          DEFERRED_TEST.replace("seen = list(out)", "seen = out"))
    result = _judge(judge_scratch, source, sub)
    assert [c["passed"] for c in result["cells"]] == [True], result


BENT_REFERENCE_TEST = """
q = torch.ones(3)
out = f(q)
assert torch.equal(out, 2 * q), f"f(q) should be 2 q; got {out}"
"""


@pytest.mark.parametrize("solution, passes", [
    ("def f(q):\n    return 2 * q", True),
    ("def f(q):\n    q.mul_(2)\n    return q", True),                # in place on its argument, the right answer
    ("def f(q):\n    q.zero_()\n    return q.clone()", False),       # zeroes q so that the reference 2 q is 0 too
])
def test_a_learners_in_place_change_cannot_bend_a_reference(tmp_path, judge_scratch, solution, passes):
    """Outside `checks.seeing_in_place_changes()`, what the learner's code does to a test's tensors is
    thrown away: a reference the test computes after the call, from its own tensors, is the one the test
    meant (in the notebook, the second bad function passes this test: it cheats only itself)."""
    source, sub = _lesson(tmp_path, solution, BENT_REFERENCE_TEST)
    result = _judge(judge_scratch, source, sub)
    assert [c["passed"] for c in result["cells"]] == [passes], result


def test_what_a_test_sends_does_not_survive_into_later_cells(tmp_path, judge_scratch):
    """Test cells talk to a fork of the learner's process: a function that records its calls has
    recorded nothing when a later cell looks; and a later cell's output is not shown on the page."""
    solution = "seen = []\ndef f(x):\n    seen.append(x.tolist())\n    return x"
    test = "f(torch.tensor([4.0, 2.0, 4242.0]))"
    after = "print('LATER', len(seen), seen)\nassert not seen, 'the test leaked'"
    source, sub = _lesson(tmp_path, solution, test, after)
    result = _judge(judge_scratch, source, sub)
    assert result["cells"][0]["passed"], result
    later = result["outputs"]["3"]
    assert later["error"] is None, later                      # the later cell saw an empty list
    assert "4242" not in json.dumps(result["outputs"]), result["outputs"]


LOOP_PER_PROCESS = """
import asyncio, gc, os
_loops = {}
def f(x):
    if os.getpid() not in _loops:      # a loop made in another process is of no use here
        _loops.clear()
        _loops[os.getpid()] = asyncio.new_event_loop()
        gc.collect()
    loop = _loops[os.getpid()]
    return loop.run_until_complete(loop.run_in_executor(None, lambda: x * 2))
f(torch.ones(1))
"""


def test_a_test_does_not_finalise_what_the_learners_process_holds(tmp_path, judge_scratch):
    """A test's fork of the learner's process runs no finaliser of an object made before it: an event
    loop collected there unregistered its wake-up socket from the epoll instance both processes share,
    and the learner's next cell waited for ever (a timeout, or not, by when the garbage collector ran)."""
    after = "assert f(torch.ones(1)).item() == 2.0"
    source, sub = _lesson(tmp_path, LOOP_PER_PROCESS, "assert f(torch.ones(2)).tolist() == [2.0, 2.0]", after)
    result = _judge(judge_scratch, source, sub, timeout=10)
    assert result["cells"][0]["passed"], result
    later = result["outputs"]["3"]
    assert later["error"] is None and not result.get("events"), (later, result.get("events"))


def test_a_learners_torch_threads_do_not_hang_the_tests(tmp_path, judge_scratch):
    """torch.set_num_threads(2) in a learner's cell, then a parallel operator: a fork's first parallel
    region waited for OpenMP's thread team, which the fork does not copy (a timeout on honest code)."""
    solution = ("torch.set_num_threads(2)\na = torch.randn(512, 512)\nb = a @ a\n"
                "def f():\n    return float((a @ a).sum())")
    source, sub = _lesson(tmp_path, solution, "assert abs(f() - float(b.sum())) < 1e-2 * float(b.abs().sum())",
                          "assert torch.get_num_threads() == 2")
    result = _judge(judge_scratch, source, sub, timeout=10)
    assert result["cells"][0]["passed"] and not result["events"], result
    assert result["outputs"]["3"]["error"] is None, result["outputs"]   # the learner's own setting is kept


def test_a_test_that_waits_on_the_learners_threads_says_why(tmp_path, judge_scratch):
    """A thread pool made in a learner's cell has no threads in the tests' fork: its work never runs there.
    The timeout's message says so, and what to do."""
    solution = ("from concurrent.futures import ThreadPoolExecutor\nPOOL = ThreadPoolExecutor(2)\n"
                "POOL.submit(int).result()\ndef f(x):\n    return POOL.submit(lambda: x * 2).result()")
    source, sub = _lesson(tmp_path, solution, "assert f(torch.ones(1)).item() == 2.0", "x = 1")   # a cell after: a fork
    result = _judge(judge_scratch, source, sub, timeout=4)
    cell = result["cells"][0]
    assert not cell["passed"] and "thread" in cell["message"] and "inside the function" in cell["message"], cell
    (tmp_path / "plain").mkdir()
    plain, sub2 = _lesson(tmp_path / "plain", "import time\ndef f(x):\n    time.sleep(30)\n    return x",
                          "assert f(torch.ones(1)).item() == 1.0", "x = 1")
    cell = _judge(judge_scratch, plain, sub2, timeout=4)["cells"][0]
    assert not cell["passed"] and "thread" not in cell["message"], cell      # no threads: no such hint


def test_a_timeout_names_the_learners_function_it_ran_in(tmp_path, judge_scratch):
    """A test cell that runs out of time while it calls a function (or an object of a class) the notebook defines
    says which, in the learner's words; an object's own self-description (its ``__name__``, made from what the
    test passed) is never shown."""
    solution = ("class Looping(torch.nn.Module):\n    def forward(self, x):\n        while x.sum() > -1:\n            pass\n"
                "def f(x):\n    while x.sum() > -1:\n        x = x + 0\n    return x\n"
                "def make(n):\n    m = Looping()\n    m.__name__ = 'SECRET' + str(n)\n    return m")
    cases = [("assert f(torch.ones(1)).item() == 1.0", "while your f was running"),
             ("m = Looping()\nm(torch.ones(1))", "while your Looping object was running"),
             ("m = make(4321)\nm(torch.ones(1))", None),           # a name made from the test's input: not shown
             # inside a check of forbidden calls, whose own closing request runs out of time after the call did
             ("from course import checks\nwith checks.forbid(f, 'softmax', why='write it'):\n    f(torch.ones(1))",
              "while your f was running"),
             # a check of Triton kernels (lesson 16): a store without its mask can hang the interpreter too
             ("from course import checks, forbidden\nwith checks.forbid(f, 'softmax', forbidden.TRITON, why='write it'):\n"
              "    f(torch.ones(1))", "while your f was running")]
    for i, (test, said) in enumerate(cases):
        (tmp_path / str(i)).mkdir()
        source, sub = _lesson(tmp_path / str(i), solution, test, "x = 1")
        cell = _judge(judge_scratch, source, sub, timeout=3)["cells"][0]
        assert not cell["passed"] and "time limit" in cell["message"], cell
        assert "SECRET" not in cell["message"] and "4321" not in cell["message"], cell
        if said:
            assert said in cell["message"] and "never end" in cell["message"], cell
        else:
            assert "while your" not in cell["message"], cell
        assert ("tl.store that reaches past its tensor" in cell["message"]) == ("TRITON" in test), cell


def test_native_code_a_notebook_writes_fails_the_checks_of_forbidden_calls(tmp_path, judge_scratch):
    """Machine code a notebook compiles or writes into its scratch folders runs below the dispatcher (red team,
    fifth round: a C++ extension calling at::cpu::_softmax scored 13/13 on lesson 00). The sandbox's PID 1 reads
    the learner's processes' memory maps: an executable file from a writable folder (here Python's own
    extension module, copied to /tmp and loaded from there) fails every check of forbidden calls and is
    reported; the same honest function without it passes, and the next submission starts clean."""
    import importlib

    found = [m.__file__ for m in map(importlib.import_module, ("_bisect", "_json", "_random", "math", "_struct"))
             if str(getattr(m, "__file__", "")).endswith(".so")]
    if not found:
        pytest.skip("this Python has its extension modules built in (no .so file to copy)")
    name = os.path.basename(found[0]).split(".")[0]
    load = (f"import importlib.util, os, shutil\nos.makedirs('/tmp/native', exist_ok=True)\n"
            f"dst = shutil.copy({found[0]!r}, '/tmp/native/')\n"
            f"spec = importlib.util.spec_from_file_location({name!r}, dst)\n"
            "native = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(native)\n")
    honest = "def f(x):\n    e = torch.exp(x - x.max())\n    return e / e.sum()\n"
    test = ("from course import checks\nwith checks.forbid(f, 'softmax', why='write the softmax yourself'):\n"
            "    out = f(torch.ones(2))\nassert torch.allclose(out, torch.full((2,), 0.5))")
    for i, (solution, passes) in enumerate([(load + honest, False), (honest, True)]):
        (tmp_path / str(i)).mkdir()
        source, sub = _lesson(tmp_path / str(i), solution, test)
        result = _judge(judge_scratch, source, sub)
        cell = result["cells"][0]
        assert cell["passed"] is passes, cell
        if not passes:
            assert "runs native code it compiled or wrote itself (/tmp/native/" in cell["message"], cell
            assert any("runs native code" in s for s in result["suspicious"]), result


def test_a_learners_own_classes_and_functions_pickle_as_in_jupyter(tmp_path, judge_scratch):
    """Jupyter runs a notebook in ``__main__``: ``torch.save`` of a whole model whose class the notebook
    defines, or pickling one of its functions, works there, and so under grading."""
    solution = ("import pickle\nclass Tiny(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                "        self.w = torch.nn.Parameter(torch.full((2,), 3.0))\n    def forward(self, x):\n"
                "        return x * self.w\ntorch.save(Tiny(), 'tiny.pt')\nmodel = torch.load('tiny.pt', weights_only=False)\n"
                "def double(x):\n    return 2 * x\nagain = pickle.loads(pickle.dumps(double))\n"
                "def f(x):\n    return again(model(x)).detach()")
    source, sub = _lesson(tmp_path, solution, "assert f(torch.ones(2)).tolist() == [6.0, 6.0]")
    result = _judge(judge_scratch, source, sub, timeout=20)
    assert result["cells"][0]["passed"] and result["outputs"]["1"]["error"] is None, (result["cells"], result["outputs"])


def test_the_lessons_files_reach_the_working_folder(tmp_path, judge_scratch):
    """The scratch folders are the sandbox's own tmpfs mounts; the lesson's data files still reach
    the working folder of every submission (through a read-only inbox)."""
    data = tmp_path / "lesson-files" / "table.txt"
    data.parent.mkdir()
    data.write_text("42")
    source, sub = _lesson(tmp_path, "def f():\n    return int(open('table.txt').read())",
                          "assert f() == 42, f()")
    result = _judge(judge_scratch, source, sub, files=[str(data)])
    assert result["cells"][0]["passed"], result


def test_a_sandbox_that_fails_is_a_grader_error_not_a_zero(tmp_path, monkeypatch):
    """When the sandbox itself cannot start or restart, the submission is `grader-error` (0 points until it is
    graded again, and a re-run grades it again), never a `graded` 0 the instructor would trust."""
    from course.grading import batch, pool
    from course.grading.protocol import Reply

    subs = tmp_path / "subs"
    write_submission(subs, "alice", LESSON, build_submission(LESSON))
    calls = []

    def broken(self, slot, spec):
        calls.append(spec.notebook)
        nb = nbformat.read(spec.source, as_version=4)
        cells = [{"grade_id": c.metadata.nbgrader.grade_id, "points": c.metadata.nbgrader.points,
                  "max_points": c.metadata.nbgrader.points, "passed": True, "message": ""}
                 for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade") and c.cell_type == "code"]
        return Reply.decode({"cells": cells, "events": [
            {"kind": "sandbox", "text": "sandbox: the sandbox did not start (bwrap: setting up uid map)"}]})

    monkeypatch.setattr(pool.Judges, "grade", broken)
    for _ in range(2):
        batch.grade(subs, tmp_path / "out", unsafe_no_sandbox=True, jobs=1)
        r = results_by_key(tmp_path / "out" / "results.json")[("alice", LESSON)]
        assert r["status"] == "grader-error" and r["score"] == 0, r
        assert "sandbox failed" in r["detail"], r["detail"]
        # Every cell is 0 where the instructor looks: results.json, grades.csv and nbgrader's gradebook.
        assert all(c["points"] == 0 and not c["passed"] for c in r["cells"]), r["cells"]
        from nbgrader.api import Gradebook
        with Gradebook(f"sqlite:///{tmp_path / 'out' / 'gradebook.db'}") as gb:
            assert gb.find_submission(LESSON, "alice").score == 0
    assert len(calls) == 2                                     # the re-run graded it again


HOLD_EVERY_THREAD = """
import threading, time
threading.stack_size(64 * 1024)
held = []
while True:
    try:
        t = threading.Thread(target=time.sleep, args=(3600,), daemon=True)
        t.start()
        held.append(t)
    except RuntimeError:
        break
def f():
    return 1
"""


def test_a_notebook_at_its_process_limit_ends_without_restarts(tmp_path, judge_scratch):
    """A learner's cell that holds every thread its sandbox may have leaves no room for the tests' fork.
    Restarting would replay that cell into the same state (six times, each a new sandbox and a replay):
    the notebook ends at the first test instead, with a message that says why."""
    source, sub = _lesson(tmp_path, HOLD_EVERY_THREAD, "assert f() == 1", after="x = 1")
    result = _judge(judge_scratch, source, sub, timeout=5, limits={"processes": 48})
    cell = result["cells"][0]
    assert not cell["passed"] and "every process and thread" in cell["message"], result
    assert result["events"] == [{"kind": "died", "text": "died: process limit reached (cell 2); the notebook was stopped "
                                                          "there"}], result["events"]


KILL_WHAT_RUNS_NEXT = """
import os, signal, time
if os.fork() == 0:                       # a daemon that kills every other process of its sandbox, again and again
    os.setsid()
    time.sleep(1.0)                      # once this cell has ended: it kills what runs next, not its own cell
    me, end = os.getpid(), time.time() + 60
    while time.time() < end:
        for p in os.listdir("/proc"):
            if p.isdigit() and int(p) not in (1, me):
                try:
                    os.kill(int(p), signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.02)
    os._exit(0)
def f():
    return 1
"""


def test_a_notebook_that_keeps_killing_itself_is_its_own_doing(tmp_path, judge_scratch, monkeypatch):
    """A learner's cell leaves a process that kills whatever runs next. Each restart replays that cell, so
    the notebook dies again and again: past MAX_RESTARTS it ends as the learner's doing (`kernel-died`,
    the remaining cells 0), never `grader-error`, which would ask the instructor to grade it again forever.
    (Once tests begin, the sandbox's PID 1 ends such a process: here it kills the learner's cells before them.)"""
    from course.grading.judge import run

    monkeypatch.setattr(run, "MAX_RESTARTS", 1)
    slow = "import time\ntime.sleep(2)\n"            # the daemon starts killing 1 s after its cell: these are still running
    source, sub = _lesson(tmp_path, KILL_WHAT_RUNS_NEXT, "assert f() == 1", before=(slow + "x = 1", slow + "y = 1"))
    result = _judge(judge_scratch, source, sub, timeout=10)
    events = result["events"]
    assert not any(e["kind"] == "sandbox" for e in events), events
    assert any(e["kind"] == "died" and e["text"].startswith("died too often: the notebook was stopped 2 times")
               for e in events), events
    assert not result["cells"][0]["passed"], result["cells"]


def test_the_worker_loads_the_forbidden_call_check_before_it_forks():
    """The check of forbidden calls loads some 800 modules the first time it runs (about 2 s): the worker
    runs it once before the zygote forks, so no submission pays that again (it did, once per submission)."""
    code = ("import sys, torch\nfrom course import forbidden\nfrom course.grading.sandboxed import zygote\nzygote.warm_checks()\n"
            "before = set(sys.modules)\n"
            "with forbidden.Guard(('scaled_dot_product_attention',), 'test', limit=1000):\n"
            "    q = torch.randn(1, 4, 8)\n    (q @ q.transpose(-2, -1)).softmax(-1) @ q\n"
            "print(sorted(set(sys.modules) - before)[:5])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stdout[-1000:] + proc.stderr[-2000:]


def _cmdline(proc: Path) -> str:
    """A process's command line, or "" when it ended while /proc was being listed (other tests' processes)."""
    try:
        return (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


def test_a_test_cell_whose_checks_run_past_the_limit_ends_its_judge_not_the_batch(tmp_path):
    """The judge's own work on a learner's answer (here attention over a sequence as long as the learner's
    function says: minutes of one C kernel) ends at the watchdog's deadline (1.5 x the cell's limit + 2 s):
    that cell gets a timeout verdict, the judge says it exits and does, before it reads the next student
    (whom the grader gives to a fresh judge), and leaves no process of the sandbox behind."""
    import os
    import select

    from course.grading import sandbox

    if not sandbox.available()[0]:
        pytest.skip("bubblewrap is not available here: " + sandbox.available()[1])
    test = ("import torch.nn.functional as F\nq = torch.randn(1, 1, f(), 64)\n"
            "F.scaled_dot_product_attention(q, q, q)")
    source, sub = _lesson(tmp_path, "def f():\n    return 160_000", test)     # minutes here, on one thread
    honest = tmp_path / "honest.ipynb"
    nbformat.write(nbformat.read(str(sub), as_version=4), str(honest))
    spec = {"source": str(source), "timeout": 2, "scratch_base": str(tmp_path), "sandbox": True}
    judge = subprocess.Popen([sys.executable, "-m", "course.grading.judge"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        judge.stdin.write(json.dumps({**spec, "notebook": str(sub)}) + "\n" +
                          json.dumps({**spec, "notebook": str(honest)}) + "\n")
        judge.stdin.flush()
        ready = select.select([judge.stdout], [], [], 240)[0]      # the kernel alone runs for minutes
        verdict = json.loads(judge.stdout.readline()) if ready else {}
        assert verdict.get("judge_exits") and verdict["events"][0]["text"].startswith("timeout: test cell test_f"), verdict
        assert verdict["cells"][0]["points"] == 0
        assert judge.wait(timeout=60) == 3 and judge.stdout.read() == ""   # the next student was not graded here
        left = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and str(tmp_path) in _cmdline(p)]
        assert not left, left
    finally:
        if judge.poll() is None:
            os.killpg(judge.pid, 9)


def test_a_learners_exception_does_not_carry_hidden_inputs_to_the_page(tmp_path, judge_scratch):
    """A learner's exception raised while a hidden check runs (or after one has sent its inputs to the
    same fork) keeps its type on the page, not its message, which the learner writes and could fill
    with the hidden inputs it saw."""
    solution = ("seen = []\ndef f(x):\n    seen.append(x.tolist())\n    if len(seen) > 1:\n"
                "        raise ValueError('LEAK ' + repr(seen))\n    return x")
    test = ("assert f(torch.tensor([1.0])).tolist() == [1.0]\n### BEGIN HIDDEN TESTS\n"
            "assert f(torch.tensor([4242.0])).tolist() == [4242.0]\n### END HIDDEN TESTS\n")
    source, sub = _lesson(tmp_path, solution, test)
    result = _judge(judge_scratch, source, sub)
    (cell,) = result["cells"]
    assert not cell["passed"] and "ValueError" in cell["message"] and "hidden check" in cell["message"], cell
    assert "4242" not in json.dumps(result), cell["message"]


def test_intake_refuses_a_notebook_of_too_many_cells(tmp_path):
    """Rendering feedback for a notebook padded with cells took minutes (120 000 cells: 217 s); such a
    notebook is refused unread, with what to do."""
    from course.grading import intake

    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_markdown_cell("x") for _ in range(intake.MAX_CELLS + 1)]
    path = tmp_path / "many.ipynb"
    nbformat.write(book, str(path))
    nb, why = intake.read_notebook(path)
    assert nb is None and f"at most {intake.MAX_CELLS}" in why, why
    book.cells = book.cells[:10]
    nbformat.write(book, str(path))
    assert intake.read_notebook(path)[0] is not None


def test_what_a_submission_names_cannot_act_in_a_spreadsheet_a_terminal_or_the_formgrader():
    """A student folder named like a formula stays text in grades.csv; escape sequences in names are
    shown, not obeyed, in the terminal; a learner's Markdown (an <img onerror=...>) reaches the
    instructor's autograded notebook as plain text, never as HTML."""
    from course.grading import feedback, results

    row = [results.spreadsheet_text(v) for v in ('=HYPERLINK("http://x","click")', "+1", "-2", "@SUM(A1)", "ada")]
    assert row == ["'" + v for v in ('=HYPERLINK("http://x","click")', "+1", "-2", "@SUM(A1)")] + ["ada"]
    assert "\x1b" not in results.shown("evil\x1b[1A\x1b[2K") and "\\x1b[1A" in results.shown("evil\x1b[1A")

    release = nbformat.v4.new_notebook()
    release.cells = [nbformat.v4.new_markdown_cell("# Lesson"), nbformat.v4.new_code_cell("x = 1")]
    sub = nbformat.v4.new_notebook()
    sub.cells = [nbformat.v4.new_markdown_cell("# Lesson"), nbformat.v4.new_code_cell("x = 1"),
                 nbformat.v4.new_markdown_cell('<img src=x onerror="alert(1)"> ``` [a](javascript:alert(1))')]
    out = feedback.graded_notebook(sub, release, release, {"cells": [], "outputs": {}}, for_student=False)
    assert out.cells[0].source == "# Lesson"                                   # the lesson's own text as it was
    fenced = out.cells[2].source
    assert fenced.startswith("````text\n") and fenced.endswith("\n````"), fenced


def test_a_partial_grade_for_the_tests_of_tests_is_never_kept_for_a_full_one(tmp_path, monkeypatch):
    """A partial grade (``Options.only_cells``: tests/test_grading.py's planted bugs graded on their named
    cells): its digest names the cells, so a run without it grades that submission again."""
    from course.grading import batch as grading
    from course.grading.notebooks import sha256_of

    folder = tmp_path / "ada" / "00_softmax_lookup"
    folder.mkdir(parents=True)
    (folder / "00_softmax_lookup.ipynb").write_text("{}")
    digest = sha256_of(folder / "00_softmax_lookup.ipynb") + ":v1"
    partial = {"sha256": digest + grading._only_suffix(["test_a"]), "status": "graded"}
    assert not grading._needs_judge(partial, folder, "00_softmax_lookup", "v1" + grading._only_suffix(["test_a"]))
    assert grading._needs_judge(partial, folder, "00_softmax_lookup", "v1")
    assert not grading._needs_judge({"sha256": digest, "status": "graded"}, folder, "00_softmax_lookup", "v1")


def test_the_protocols_own_tensors_do_not_count_against_a_size_limit(tmp_path, judge_scratch):
    """The check of forbidden calls with a size limit (lesson 12's "no T x T matrix", lesson 16's) measures the
    learner's tensors, not the grader's own: an input larger than the limit sent into the call, and the byte
    view that encodes an answer, once failed a correct function (found writing lesson 16). A function that
    makes a tensor over the limit itself still fails."""
    test = ("from course import checks\n"
            "x = torch.arange(4000.0)\n"
            "with checks.forbid(f, 'softmax', why='keep every tensor small', limit=1000):\n"
            "    out = f(x)\n"
            "assert out.shape == (10,) and out.tolist() == list(range(10)), out\n")
    source, sub = _lesson(tmp_path, "def f(x):\n    return x[:10].clone()", test)
    (cell,) = _judge(judge_scratch, source, sub)["cells"]
    assert cell["passed"], cell["message"]
    source, sub = _lesson(tmp_path, "def f(x):\n    return (x * 2)[:10]", test)        # 4000 new elements
    (cell,) = _judge(judge_scratch, source, sub)["cells"]
    assert not cell["passed"] and "1000" in cell["message"], cell["message"]


CONTEXT_MANAGER = '''
import contextlib

@contextlib.contextmanager
def f(box):
    box["on"] = True
    try:
        yield box
    finally:
        box["on"] = False
'''


def test_a_test_enters_and_leaves_a_learners_context_manager(tmp_path, judge_scratch):
    """A graded API may be a context manager (lesson 14's ``ablate_heads``): a test's ``with`` enters and leaves
    it in the sandbox, on the exception path too (the learner's ``finally`` runs, and an exception it does not
    suppress reaches the test); it failed with "'Remote' object does not support the context manager
    protocol"."""
    test = ("box = {'on': False}\n"
            "with f(box) as inside:\n"
            "    assert inside['on'] is True, inside\n"
            "try:\n"
            "    with f(box):\n"
            "        raise KeyError('x')\n"
            "except KeyError:\n"
            "    pass\n"
            "else:\n"
            "    raise AssertionError('the exception was swallowed')\n")
    source, sub = _lesson(tmp_path, CONTEXT_MANAGER, test)
    (cell,) = _judge(judge_scratch, source, sub)["cells"]
    assert cell["passed"], cell["message"]


def test_a_stopped_process_is_not_seen_to_wake_while_a_busy_machine_lets_its_threads_settle():
    """The zygote tells a woken worker (SIGCONT from the tests' fork) by the kernel's count of the time each of
    its threads ran, from a baseline taken once the stop has settled. A CPU-bound process with three busy threads,
    stopped 20 times: never seen to run while stopped; woken once by SIGCONT: seen. (An honest planted bug was
    once reported as having woken its worker on a loaded machine; the cause was not reproduced.)"""
    import signal
    import subprocess
    import sys
    import time

    from course.grading.sandboxed.zygote import ran_since, runtime, settled_runtime, stopped

    busy = ("import threading\n"
            "def spin():\n    while True: pass\n"
            "for _ in range(3): threading.Thread(target=spin, daemon=True).start()\n"
            "spin()\n")
    proc = subprocess.Popen([sys.executable, "-c", busy])
    try:
        time.sleep(0.3)
        for _ in range(20):
            os.kill(proc.pid, signal.SIGSTOP)
            assert stopped(proc.pid)
            base = settled_runtime(proc.pid)
            time.sleep(0.02)
            assert not ran_since(base, runtime(proc.pid)), "a stopped process was seen to run"
            os.kill(proc.pid, signal.SIGCONT)
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGSTOP)
        assert stopped(proc.pid)
        base = settled_runtime(proc.pid)
        os.kill(proc.pid, signal.SIGCONT)             # what a woken worker does: it runs
        time.sleep(0.05)
        os.kill(proc.pid, signal.SIGSTOP)
        assert stopped(proc.pid)
        assert ran_since(base, settled_runtime(proc.pid)), "a woken process was not seen to run"
    finally:
        proc.kill()
        proc.wait()

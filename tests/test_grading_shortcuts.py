"""Answers handed out and forbidden shortcuts (the grading-trust issue, second round), graded in one batch.

One `course grade` call grades, beside honest submissions and a wrong control per lesson:

* lesson 05: a submission that imports the instructor's reference answers (and reads them from the
  checkout), notebooks that are symbolic links to the solution or to another student's notebook, a
  lesson folder that is a link, a hard link and a named pipe;
* lesson 00: ``torch.softmax`` reached through an alias taken outside the function, through
  ``torch.ops.aten._softmax``, after switching the runtime check off, in another thread, inside a custom
  operator of the learner's own, and after replacing the worker's check on its class;
* lesson 12: an alias of ``F.scaled_dot_product_attention`` (also run in another thread), naive attention
  on tensors unwrapped with ``as_subclass``, and naive attention after stripping the size guard;
* honest alternatives (einsum, loops, logsumexp, query blocks) that must keep full marks.

Proven: no attack scores more than its lesson's wrong control, each is reported (``suspicious`` or
``invalid-notebook``), the honest ones keep full marks with status ``graded``, no feedback page shows
the reference solution, and nothing of the checkout's instructor side is readable in the sandbox.
The fast tests below check the pieces one by one (intake, the dispatch-level guard, the static reading,
the sandbox's package).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

from planting import WRONG_05, build_submission, load_planted, results_by_key, write_submission

COURSE = str(Path(sys.executable).parent / "course")
ROOT = Path(__file__).resolve().parents[1]
L00, L05, L12 = "00_softmax_lookup", "05_self_attention", "12_efficient_attention"


REFERENCES_05 = WRONG_05 + '''
import os
try:
    from course.tools.references import refs_05
    scaled_dot_product_attention = refs_05.reference_attention
    print("IMPORTED", "THE", "REFERENCES")
except Exception as exc:
    print("no references:", type(exc).__name__)
for _p in ["{repo}/course/tools/references/refs_05.py", "{repo}/solutions/05_self_attention/05_self_attention.ipynb",
           "{repo}/course/grading/judge/run.py", "{repo}/tests/planting.py"]:
    try:
        print("R" + "EAD:", _p, open(_p).read()[:400])
    except OSError as exc:
        print("cannot read", _p, type(exc).__name__)
try:
    print("LI" + "STED:", sorted(os.listdir("{repo}")), sorted(os.listdir("{repo}/course")),
          sorted(os.listdir("{repo}/course/grading")))
except OSError as exc:
    print("cannot list", type(exc).__name__)
'''

WRONG_00 = '''
def softmax(x, dim=-1):
    e = x.exp()                                          # wrong: no max subtraction
    return e / e.sum(dim=dim, keepdim=True)
'''

WORKER_PATCH = '''
import __main__ as _m
_W = vars(_m)["Wor" + "ker"]
setattr(_W, "for" + "bid", lambda self, names, why, limit=None, **kw: None)
setattr(_W, "unfor" + "bid", lambda self, **kw: [])
'''

ATTACKS_00 = {
    "alias": '''
import torch
_f = torch.softmax                                       # taken outside the function
def softmax(x, dim=-1):
    return _f(x, dim)
''',
    "aten": '''
import torch
def softmax(x, dim=-1):
    return torch.ops.aten._softmax(x, dim, False)
''',
    "switch-off": '''
import torch
import course.checks as _c
_c.forbidden_targets = lambda names: []                  # the name-level blocking: nothing to block
import course.forbidden as _fb
_fb.Guard.__enter__ = lambda self: self                  # the dispatch-level guard: never installed
_fb.Guard.__exit__ = lambda self, *a: False
def softmax(x, dim=-1):
    return getattr(torch, "soft" + "max")(x, dim)
''',
    # PyTorch's modes watch one thread: work done in another one is caught at run time (a new task in the
    # sandbox while the check is on); the static reading also flags `threading`
    "thread": '''
import threading
_f = getattr(torch, "softmax")
def softmax(x, dim=-1):
    box = []
    t = threading.Thread(target=lambda: box.append(_f(x, dim)))
    t.start()
    t.join()
    return box[0]
''',
    # ... through a module the static reading does not flag: only the run-time check sees it
    "asyncio-thread": '''
import asyncio
_f = torch.__dict__["soft" + "max"]
def softmax(x, dim=-1):
    return asyncio.run(asyncio.to_thread(_f, x, dim))
''',
    # ... on a helper thread started before the check is on (reading `softmax.__name__` starts it), so that
    # no new task appears while it is on: a checked call may not start while another thread runs
    "prewarmed-thread": '''
import asyncio
import os


class _Pooled:
    def __init__(self, fn):
        self._fn, self._loop = fn, None

    def _ready(self):
        if self._loop is None or self._loop[0] != os.getpid():
            loop = asyncio.new_event_loop()
            loop.run_until_complete(loop.run_in_executor(None, int))     # one helper thread, idle afterwards
            self._loop = (os.getpid(), loop)
        return self._loop[1]

    @property
    def __name__(self):
        self._ready()
        return self._fn.__name__

    def __call__(self, *args, **kwargs):
        loop = self._ready()
        return loop.run_until_complete(loop.run_in_executor(None, lambda: self._fn(*args, **kwargs)))


_original = vars(torch)["soft" + "max"]


def _library(x, dim=-1):
    return _original(x, dim=dim)


softmax = _Pooled(_library)
''',
    # an operator of the learner's own, whose body calls the fused softmax below the modes (red team 4)
    "custom-op": '''
_torch_softmax = vars(torch)["soft" + "max"]
@torch.library.custom_op("student::sm", mutates_args=())
def _sm(x: torch.Tensor, dim: int) -> torch.Tensor:
    return _torch_softmax(x, dim)
def softmax(x, dim=-1):
    return _sm(x, dim)
''',
    # the worker's own check replaced on its class, reached through __main__ (red team 4)
    "worker-patch": WORKER_PATCH + '''
_sm = torch.nn.Softmax
def softmax(x, dim=-1):
    return _sm(dim=dim)(x)
''',
    # softmax kernels under other names (red team, fourth round): each scored 13/13 before kernel families
    "masked-softmax": '''
def softmax(x, dim=-1):
    return torch._masked_softmax(x, torch.zeros_like(x, dtype=torch.bool), dim)
''',
    "fused-cpu-attention": '''
def softmax(x, dim=-1):
    x = x.movedim(dim, -1)
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    out = torch.stack([torch._scaled_dot_product_flash_attention_for_cpu(
        torch.ones(1, 1, 1, 1, dtype=x.dtype), r.reshape(1, 1, n, 1), torch.eye(n, dtype=x.dtype).reshape(1, 1, n, n),
        scale=1.0)[0].reshape(n) for r in rows])
    return out.reshape(x.shape).movedim(-1, dim)
''',
    # SciPy's softmax by a computed name: outside PyTorch, where no mode looks; the data may not leave it
    "scipy": '''
def softmax(x, dim=-1):
    import scipy.special as library
    fn = getattr(library, "soft" + "max")
    return torch.from_numpy(fn(x.detach().cpu().numpy(), axis=dim)).to(x.dtype)
''',
}

WRONG_12 = None        # filled from the planted bank: the online softmax that forgets to rescale its sum

ATTACKS_12 = {
    "alias": '''
import torch.nn.functional as F
_sdpa = F.scaled_dot_product_attention
def chunked_attention(q, k, v, chunk_size, causal=False):
    return _sdpa(q, k, v, is_causal=causal)
''',
    "subclass": '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    q, k, v = (t.as_subclass(torch.Tensor) for t in (q, k, v))      # no guard on a plain tensor
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v
''',
    "thread": '''
import concurrent.futures
_sdpa = getattr(F, "scaled_dot_product_attention")
def chunked_attention(q, k, v, chunk_size, causal=False):
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(_sdpa, q, k, v, is_causal=causal).result()
''',
    "strip-guard": '''
checks_12.Watched.__torch_function__ = classmethod(lambda cls, func, types, args=(), kwargs=None: func(*args, **(kwargs or {})))
def chunked_attention(q, k, v, chunk_size, causal=False):
    with torch._C._DisableTorchDispatch():                      # below any dispatch mode, too
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores.masked_fill(torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1), float("-inf"))
        return torch.softmax(scores, dim=-1) @ v
''',
    "custom-op": '''
_fused = vars(F)["scaled_dot_product_" + "attention"]
@torch.library.custom_op("student::att", mutates_args=())
def _att(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    return _fused(q, k, v, is_causal=causal)
def chunked_attention(q, k, v, chunk_size, causal=False):
    return _att(q, k, v, causal)
''',
    "worker-patch": WORKER_PATCH + '''
_fused = vars(F)["scaled_dot_product_" + "attention"]
def chunked_attention(q, k, v, chunk_size, causal=False):
    return _fused(q, k, v, is_causal=causal)
''',
    # the whole T x T matrix in NumPy, where the size limit (on PyTorch's tensors) does not look
    "numpy": '''
def chunked_attention(q, k, v, chunk_size, causal=False):
    import numpy as np
    Q, K, V = (t.detach().cpu().numpy().astype(np.float64) for t in (q, k, v))
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if causal:
        T_q, T_k = s.shape[-2], s.shape[-1]
        s = np.where(np.arange(T_k)[None, :] <= np.arange(T_q)[:, None], s, -np.inf)
    w = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy((w / w.sum(-1, keepdims=True) @ V).astype(np.float32)).to(q.dtype)
''',
}

HONEST_00 = ("loop_and_logsumexp_style", "einsum_style", "softmax_loop_over_rows")
HONEST_12 = ("query_blocks_einsum_style", "logsumexp_merge_style")


def _solution_copy(tmp: Path) -> Path:
    """The reference notebook, copied out of the checkout (a hard link needs the same file system)."""
    path = tmp / "elsewhere" / f"{L05}.ipynb"
    path.parent.mkdir(parents=True)
    path.write_bytes((ROOT / "solutions" / L05 / f"{L05}.ipynb").read_bytes())
    return path


@pytest.mark.slow
def test_answers_and_shortcuts_gain_nothing(tmp_path):
    """One batch: every attack scores no more than its lesson's wrong control and is reported; honest
    submissions in several styles keep full marks; no page shows what a link pointed to."""
    subs, out = tmp_path / "submissions", tmp_path / "graded"
    planted = load_planted(everything=True)
    repo = str(ROOT)
    honest_05 = write_submission(subs, "honest", L05, build_submission(L05))
    write_submission(subs, "wrong", L05, build_submission(L05, {"scaled_dot_product_attention": WRONG_05}))
    write_submission(subs, "references", L05, build_submission(
        L05, {"scaled_dot_product_attention": REFERENCES_05.replace("{repo}", repo)}))
    for student, target in (("link-solution", ROOT / "solutions" / L05 / f"{L05}.ipynb"), ("link-student", honest_05)):
        (subs / student / L05).mkdir(parents=True)
        (subs / student / L05 / f"{L05}.ipynb").symlink_to(target)
    (subs / "link-folder").mkdir()
    (subs / "link-folder" / L05).symlink_to(ROOT / "solutions" / L05, target_is_directory=True)
    (subs / "hard-link" / L05).mkdir(parents=True)
    os.link(_solution_copy(tmp_path), subs / "hard-link" / L05 / f"{L05}.ipynb")
    (subs / "fifo" / L05).mkdir(parents=True)
    os.mkfifo(subs / "fifo" / L05 / f"{L05}.ipynb")

    write_submission(subs, "honest", L00, build_submission(L00))
    write_submission(subs, "wrong", L00, build_submission(L00, {"softmax": WRONG_00}))
    for name, code in ATTACKS_00.items():
        write_submission(subs, f"attack-{name}", L00, build_submission(L00, {"softmax": code}))
    for name in HONEST_00:
        write_submission(subs, f"style-{name}", L00, build_submission(L00, planted[L00][name]["replace"]))

    write_submission(subs, "honest", L12, build_submission(L12))
    write_submission(subs, "wrong", L12, build_submission(L12, planted[L12]["no_rescale_of_sum"]["replace"]))
    # a right answer through the whole T x T matrix: the control for the same matrix built in NumPy
    write_submission(subs, "naive", L12, build_submission(L12, planted[L12]["full_matrix"]["replace"]))
    for name, code in ATTACKS_12.items():
        write_submission(subs, f"attack-{name}", L12, build_submission(L12, {"chunked_attention": code}))
    for name in HONEST_12:
        write_submission(subs, f"style-{name}", L12, build_submission(L12, planted[L12][name]["replace"]))

    proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(out), "--timeout", "60", "--jobs", "2"],
                          capture_output=True, text=True, timeout=1500)
    results = results_by_key(out / "results.json")
    said = "\n--- course grade said:\n" + proc.stdout[-4000:] + proc.stderr[-2000:]
    problems = []

    def r(student, lesson):
        return results.get((student, lesson)) or {"score": -1, "max_score": 0, "status": "absent", "detail": "",
                                                  "feedback": "", "cells": []}

    for lesson in (L00, L05, L12):
        for student in ["honest"] + [f"style-{n}" for n in (HONEST_00 if lesson == L00 else HONEST_12 if lesson == L12 else ())]:
            got = r(student, lesson)
            if not (got["status"] == "graded" and got["score"] == got["max_score"] > 0):
                problems.append(f"{student}/{lesson}: {got['score']}/{got['max_score']} {got['status']} {got['detail']}")
        wrong = r("wrong", lesson)
        if not (wrong["status"] == "graded" and 0 < wrong["score"] < wrong["max_score"]):
            problems.append(f"wrong/{lesson}: {wrong['score']}/{wrong['max_score']} {wrong['status']}")

    attackers = {("references", L05): "suspicious"}
    attackers |= {(s, L05): "invalid-notebook" for s in ("link-solution", "link-student", "link-folder", "hard-link", "fifo")}
    attackers |= {(f"attack-{n}", L00): "suspicious" for n in ATTACKS_00}
    attackers |= {(f"attack-{n}", L12): "suspicious" for n in ATTACKS_12}
    controls = {("attack-numpy", L12): "naive"}        # right answers the wrong way: their own control
    naive = r("naive", L12)
    if not (naive["status"] == "graded" and 0 < naive["score"] < naive["max_score"]):
        problems.append(f"naive/{L12}: {naive['score']}/{naive['max_score']} {naive['status']}")
    for (student, lesson), status in attackers.items():
        got, wrong = r(student, lesson), r(controls.get((student, lesson), "wrong"), lesson)
        if got["score"] > wrong["score"]:
            problems.append(f"{student}/{lesson} scored {got['score']}, more than its control's {wrong['score']}")
        if got["status"] != status:
            problems.append(f"{student}/{lesson}: status {got['status']}, not {status} ({got['detail'][:300]})")
    for student in ("link-solution", "link-student", "link-folder"):
        if "symbolic link" not in r(student, L05)["detail"]:
            problems.append(f"{student}: the refusal does not say why: {r(student, L05)['detail']!r}")
    if "hard link" not in r("hard-link", L05)["detail"] or "pipe" not in r("fifo", L05)["detail"]:
        problems.append(f"hard link / FIFO refusals: {r('hard-link', L05)['detail']!r}, {r('fifo', L05)['detail']!r}")

    # No page shows the reference solution (the refused ones have none at all), nor any instructor file.
    for (student, lesson), got in results.items():
        if student == "honest" or student.startswith("style-"):
            continue
        page = _text(got["feedback"])
        if got["status"] == "invalid-notebook" and got["feedback"]:
            problems.append(f"{student}/{lesson}: a refused submission has a feedback page")
        shown = [line for line in _reference_lines() if line in page]
        if shown:
            problems.append(f"{student}/{lesson}: the feedback page shows the instructor's references: {shown[:2]}")
    looked = _text(r("references", L05)["feedback"])
    if "no references: ModuleNotFoundError" not in looked or "IMPORTED THE REFERENCES" in looked:
        problems.append("the sandbox could import course.tools.references")
    listed = looked.split("LISTED:", 1)[1][:400] if "LISTED:" in looked else ""
    if "READ:" in looked or "def reference_attention" in looked or "solutions" in listed or "judge" in listed \
            or "'tools'" in listed:
        problems.append("the sandbox could read the checkout's instructor side:\n" + looked[looked.find("READ:"):][:600])
    if looked.count("cannot read") < 4 or not listed:
        problems.append("the references attack's file reads did not run")
    for (student, lesson) in [(f"attack-{n}", L00) for n in ATTACKS_00] + [(f"attack-{n}", L12) for n in ATTACKS_12]:
        detail = r(student, lesson)["detail"]
        if "suspicious code" not in detail:
            problems.append(f"{student}/{lesson}: no suspicious code reported ({detail[:200]})")
    assert not problems, "\n".join(problems) + said


def _text(feedback: str) -> str:
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", Path(feedback).read_text())) if feedback else ""


def _reference_lines() -> set[str]:
    """Code lines of the instructor's reference answers (course/tools/references)."""
    shown = {part for nb in (ROOT / "notebooks").glob("*/*.ipynb")
             for c in nbformat.read(str(nb), as_version=4).cells for ln in c.source.splitlines()
             for part in (ln.strip(), ln.split("  #")[0].strip())}      # a given line, its shape comment or not
    lines = set()
    for path in (ROOT / "course" / "tools" / "references").glob("refs_*.py"):
        lines |= {ln.strip() for ln in path.read_text().splitlines()
                  if len(ln.strip()) > 30 and not ln.strip().startswith(("#", "import ", "from ", '"""'))}
    return lines - shown


# -- the pieces, fast ------------------------------------------------------------------------------

def test_intake_refuses_links_and_special_files(tmp_path):
    from course.grading.intake import Refused as _Refused, find_notebook as _find_notebook, read_notebook as _read_notebook

    nb = build_submission(L00)
    honest = write_submission(tmp_path / "subs", "honest", L00, nb)
    found, note = _find_notebook(honest.parent, L00)
    assert found == honest and note == "" and _read_notebook(found)[0] is not None
    outside = tmp_path / "outside.ipynb"
    nbformat.write(nb, str(outside))
    cases = {}
    for student in ("link", "hard", "fifo", "other-name-link", "folder-link"):
        (tmp_path / "subs" / student).mkdir()
    (tmp_path / "subs" / "link" / L00).mkdir()
    (tmp_path / "subs" / "link" / L00 / f"{L00}.ipynb").symlink_to(honest)
    cases["link"] = "symbolic link"
    (tmp_path / "subs" / "hard" / L00).mkdir()
    os.link(outside, tmp_path / "subs" / "hard" / L00 / f"{L00}.ipynb")
    cases["hard"] = "hard link"
    (tmp_path / "subs" / "fifo" / L00).mkdir()
    os.mkfifo(tmp_path / "subs" / "fifo" / L00 / f"{L00}.ipynb")
    cases["fifo"] = "named pipe"
    (tmp_path / "subs" / "other-name-link" / L00).mkdir()
    (tmp_path / "subs" / "other-name-link" / L00 / "mine.ipynb").symlink_to(outside)
    cases["other-name-link"] = "symbolic link"
    (tmp_path / "subs" / "folder-link" / L00).symlink_to(honest.parent, target_is_directory=True)
    cases["folder-link"] = "symbolic link"
    for student, why in cases.items():
        found, note = _find_notebook(tmp_path / "subs" / student / L00, L00)
        assert found is None and isinstance(note, _Refused) and why in note, (student, note)
    # Opened without following a link, even when handed a path that became one.
    assert _read_notebook(tmp_path / "subs" / "link" / L00 / f"{L00}.ipynb")[0] is None


def _verdict(fn, *names, limit=None, args=None):
    from course import checks

    try:
        with checks.forbid(fn, *names, why="do it yourself", limit=limit):
            checks.call(fn, *(args or (torch.randn(3, 5),)))
        return "passed"
    except AssertionError as exc:
        return str(exc)


_alias = torch.softmax


def test_guard_catches_forbidden_kernels_whatever_the_name():
    """In the learner's own kernel (public tests, `course check`) as in the sandbox: an alias, torch.ops
    and a computed name all fail; exp/sum, logsumexp, max and einsum pass."""
    import torch.nn.functional as F

    def alias(x):
        return _alias(x, -1)

    def aten(x):
        return torch.ops.aten._softmax(x, -1, False)

    def computed(x):
        return getattr(torch, "soft" + "max")(x, -1)

    def via_log(x):
        return torch.exp(getattr(F, "log_" + "softmax")(x, -1))

    def honest(x):
        e = torch.exp(x - torch.max(x, dim=-1, keepdim=True).values)
        return torch.einsum("ij,i->ij", e, 1 / e.sum(-1))

    def lse(x):
        return torch.exp(x - torch.logsumexp(x, dim=-1, keepdim=True))

    def scipy_softmax(x):                       # the data taken out of PyTorch, where no mode looks
        import scipy.special
        return torch.from_numpy(getattr(scipy.special, "soft" + "max")(x.numpy(), axis=-1))

    def numpy_softmax(x):
        import numpy as np
        e = np.exp(np.asarray(x.tolist()) - max(max(r) for r in x.tolist()))
        return torch.from_numpy(e / e.sum(-1, keepdims=True)).float()

    def python_lists(x):                        # plain Python on numbers is the learner's own work
        import math
        rows = [[math.exp(v - max(r)) for v in r] for r in x.tolist()]
        return torch.tensor([[v / sum(r) for v in r] for r in rows])

    for fn in (alias, aten, computed, via_log, scipy_softmax, numpy_softmax):
        assert _verdict(fn, "softmax", "log_softmax") != "passed", fn.__name__
    assert "out of PyTorch" in _verdict(scipy_softmax, "softmax", "log_softmax")
    for fn in (honest, lse, python_lists):
        assert _verdict(fn, "softmax", "log_softmax") == "passed", fn.__name__


def test_guard_refuses_every_kernel_of_a_forbidden_family():
    """PyTorch computes a softmax, a convolution or a whole encoder layer under many kernel names: a forbidden
    name refuses its family, read from the dispatcher's own list (red team, fourth round: torch._masked_softmax,
    the fused CPU attention kernel with one-hot values and the sparse softmax scored 13/13 on lesson 00,
    F.conv3d and torch.convolution full marks for lesson 11's "no conv2d", the fused encoder-layer kernel 7 of
    lesson 07's 10 block points). What the exercises allow still passes."""
    import torch.nn as nn
    import torch.nn.functional as F

    from course import forbidden

    def masked(x):
        return torch._masked_softmax(x, torch.zeros_like(x, dtype=torch.bool), 1)

    def fused_cpu(x):                  # attention with one query, the row as keys of size 1, one-hot values
        rows = [torch._scaled_dot_product_flash_attention_for_cpu(
            torch.ones(1, 1, 1, 1), r.reshape(1, 1, -1, 1), torch.eye(r.numel()).reshape(1, 1, r.numel(), -1),
            scale=1.0)[0].reshape(-1) for r in x]
        return torch.stack(rows)

    def sparse(x):
        fn = vars(torch.sparse)["soft" + "max"]
        dense = torch.sparse_coo_tensor(torch.ones_like(x).nonzero().T, x.reshape(-1), x.shape)
        return fn(dense, 1).to_dense()

    for fn in (masked, fused_cpu, sparse):
        assert "under another name" in _verdict(fn, "softmax", "log_softmax"), fn.__name__

    img, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 4, 4)

    def conv3d(img):
        return F.conv3d(img.unsqueeze(2), w.unsqueeze(2), stride=(1, 4, 4)).squeeze(2)

    def convolution(img):
        return torch.convolution(img, w, None, (4, 4), (0, 0), (1, 1), False, (0, 0), 1)

    def unfold(img):                   # patches by unfold and a matrix product: allowed
        return (w.reshape(4, -1) @ F.unfold(img, 4, stride=4)).reshape(2, 4, 2, 2)

    for fn in (conv3d, convolution):
        assert "aten::convolution" in _verdict(fn, "conv2d", args=(img,)), fn.__name__
    assert _verdict(unfold, "conv2d", args=(img,)) == "passed"

    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval()
    p = [t.detach() for t in layer.parameters()]
    x = torch.randn(2, 5, 8)

    def fused_layer(x):
        return torch._transformer_encoder_layer_fwd(x, 8, 2, p[0], p[1], p[2], p[3], True, False, 1e-5, p[8], p[9],
                                                    p[10], p[11], p[4], p[5], p[6], p[7], None)

    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()

    def own_block(x):                  # lesson 07 wires nn.MultiheadAttention itself (its fused fast path)
        with torch.no_grad():
            return mha(x, x, x, need_weights=False)[0] + x

    assert "_transformer_encoder_layer_fwd" in _verdict(fused_layer, "TransformerEncoderLayer", args=(x,))
    assert _verdict(own_block, "TransformerEncoderLayer", args=(x,)) == "passed"
    assert {"_masked_softmax", "_sparse_softmax", "_scaled_dot_product_flash_attention_for_cpu"} <= \
        forbidden.kernels_for(["softmax"])
    assert not any("convert" in k or "upsample" in k for k in forbidden.kernels_for(["conv2d", "matmul"]))


def test_the_checks_read_frozen_tables_a_notebook_cannot_edit():
    """The tables of forbidden kernels and modules are read from frozen copies taken at import; the grading worker
    holds those by identity (integrity_pieces), so a rebinding is a replaced piece and an edit of KERNELS changes
    nothing the checks see."""
    from course import forbidden

    saved, families = dict(forbidden.KERNELS), dict(forbidden.FAMILIES)
    try:
        forbidden.KERNELS.clear()
        forbidden.FAMILIES.clear()
        assert "kernel aten::_softmax" in _verdict(lambda x: torch.ops.aten._softmax(x, -1, False), "softmax")
    finally:
        forbidden.KERNELS.update(saved)
        forbidden.FAMILIES.update(families)
    pieces = forbidden.integrity_pieces()
    for name in ("DIRECT", "FAMILY_OF", "PATTERN_OF", "MODULE_OF", "ATEN_NAMES"):
        assert pieces[f"course.forbidden.tables.{name}"] is getattr(forbidden, name)
        assert isinstance(getattr(forbidden, name), (tuple, frozenset))


def test_guard_refuses_the_code_of_a_forbidden_module_however_it_is_reached():
    """Lesson 10 forbids transformers' BERT and the course's bridge to it, names that are not PyTorch's: reading
    the class's own source missed a helper defined in another cell that ran them (red team, fifth round: 27 of
    28 points). While the check is on, no function of those modules may run, whatever reached it."""
    import torch.nn as nn

    from course.oracles import bert as bridge

    reach = getattr(bridge, "_n_" + "layers")                 # a helper's alias, taken outside the function

    def helper(x):
        return x + reach({"bert.encoder.layer.0.attention.self.query.weight": x})

    def honest(x):
        return nn.functional.gelu(x) + 0

    names = ("BertModel", "to_hf_pretraining", "hf_forward")
    assert "course.oracles.bert._n_layers" in _verdict(helper, *names)
    assert _verdict(honest, *names) == "passed"


def test_guard_measures_the_largest_tensor_below_subclasses():
    from course import checks_12

    def naive(q, k, v, chunk_size, causal=False):
        q, k, v = (t.as_subclass(torch.Tensor) for t in (q, k, v))
        return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def fused(q, k, v, chunk_size, causal=False):
        return sdpa(q, k, v, is_causal=causal)

    q, k, v = checks_12.random_qkv(2, 256, 8, seed=0)
    with pytest.raises(AssertionError, match="as large as the whole T_q x T_k"):
        checks_12.run_chunked(naive, q, k, v, 32, limit=2 * 256 * 256 // 2)
    with pytest.raises(AssertionError, match="scaled_dot_product_attention"):
        checks_12.run_chunked(fused, q, k, v, 32)

    # the whole matrix in pieces, none over the limit (red team, fifth round: 15/15 against 13/15): what the
    # call's kernels made and still hold counts together
    def listed(q, k, v, chunk_size, causal=False):
        s = [q @ k[..., i:i + chunk_size, :].transpose(-2, -1) / q.shape[-1] ** 0.5 for i in range(0, k.shape[-2], chunk_size)]
        m = torch.stack([c.amax(-1) for c in s], -1).amax(-1, keepdim=True)
        e = [torch.exp(c - m) for c in s]
        return sum(c @ v[..., i * chunk_size:(i + 1) * chunk_size, :] for i, c in enumerate(e)) / sum(c.sum(-1, keepdim=True) for c in e)

    def halves(q, k, v, chunk_size, causal=False):
        h = k.shape[-2] // 2
        a, b = (q @ part.transpose(-2, -1) / q.shape[-1] ** 0.5 for part in (k[..., :h, :], k[..., h:, :]))
        m = torch.maximum(a.amax(-1, keepdim=True), b.amax(-1, keepdim=True))
        ea, eb = torch.exp(a - m), torch.exp(b - m)
        return (ea @ v[..., :h, :] + eb @ v[..., h:, :]) / (ea.sum(-1, keepdim=True) + eb.sum(-1, keepdim=True))

    def online(q, k, v, chunk_size, causal=False):
        m = torch.full(q.shape[:-1] + (1,), float("-inf"))
        l, acc = torch.zeros(q.shape[:-1] + (1,)), torch.zeros(q.shape[:-1] + (v.shape[-1],))
        for i in range(0, k.shape[-2], chunk_size):
            s = q @ k[..., i:i + chunk_size, :].transpose(-2, -1) / q.shape[-1] ** 0.5
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            p = torch.exp(s - m_new)
            l = l * torch.exp(m - m_new) + p.sum(-1, keepdim=True)
            acc = acc * torch.exp(m - m_new) + p @ v[..., i:i + chunk_size, :]
            m = m_new
        return acc / l

    q, k, v = checks_12.random_qkv(2, 1024, 8, seed=13)         # the lesson's own test: chunks of 1/32 of the keys
    for fn in (listed, halves):
        with pytest.raises(AssertionError, match="values at once in tensors it made"):
            checks_12.run_chunked(fn, q, k, v, 32, limit=2 * 1024 * 1024 // 2)
    out = checks_12.run_chunked(online, q, k, v, 32, limit=2 * 1024 * 1024 // 2)
    assert torch.allclose(out, sdpa(q, k, v), atol=1e-5)


def test_static_reading_flags_reaching_around_the_checks():
    from course.grading.judge import reading as forbidden

    source = nbformat.read(str(ROOT / "solutions" / L00 / f"{L00}.ipynb"), as_version=4)
    for name, code in ATTACKS_00.items():
        nb = build_submission(L00, {"softmax": code})
        found = forbidden.tampering(nb, source) + forbidden.aliases(nb, forbidden.lesson_names(source), source)
        # these only the run-time check sees: a module the reading does not flag, a thread started before
        # the check, data taken out to SciPy, a kernel of the softmax's family under its own name
        assert bool(found) == (name not in ("asyncio-thread", "prewarmed-thread", "scipy", "masked-softmax",
                                            "fused-cpu-attention")), name
    for name in HONEST_00:
        nb = build_submission(L00, load_planted(everything=True)[L00][name]["replace"])
        assert not forbidden.tampering(nb, source) and not forbidden.aliases(nb, {"softmax", "log_softmax"}, source), name
    assert {"softmax", "log_softmax"} <= forbidden.lesson_names(source)
    source12 = nbformat.read(str(ROOT / "solutions" / L12 / f"{L12}.ipynb"), as_version=4)
    assert "scaled_dot_product_attention" in forbidden.lesson_names(source12)
    assert not forbidden.tampering(build_submission(L12), source12)      # the given cells use SDPA freely


def test_sandbox_package_holds_only_what_learners_get():
    from course.grading import sandbox

    pkg = sandbox.learner_package()
    files = {p.relative_to(pkg).as_posix() for p in pkg.rglob("*") if p.is_file()}
    assert {"__init__.py", "checks.py", "forbidden/__init__.py", "forbidden/guard.py", "grading/sandboxed/worker.py",
            "grading/sandboxed/wire.py",
            "grading/sandboxed/zygote.py", "grading/sandboxed/ops.py", "grading/__init__.py"} <= files
    leaked = [f for f in files if f.startswith("tools/") or (f.startswith("grading/") and not f.startswith(
        ("grading/sandboxed/", "grading/__init__.py", "grading/__pycache__/__init__.")))]
    assert not leaked, leaked
    assert not any(f.startswith("grading/judge") for f in files)      # the judge's reading of notebooks: grader-only
    assert "Only course.grading.sandboxed" in (pkg / "grading" / "__init__.py").read_text()   # an empty marker
    binds = sandbox._read_only_paths()
    import course
    assert binds[-1] == (str(pkg), str(Path(course.__file__).resolve().parent))
    assert not any(isinstance(b, str) and Path(course.__file__).resolve().parent.as_posix().startswith(b.rstrip("/") + "/")
                   for b in binds)

"""Lesson 16's helpers: the TRITON mode of the forbidden-call check, the tile counter, the set-up.

Triton's interpreter runs a kernel in NumPy on the tensors' raw memory, which the closed check of
lessons 00 and 12 refuses (data leaving PyTorch). Naming ``forbidden.TRITON`` lets Triton's own code move
data, and nothing else: these tests write small kernels and launchers that cheat in each way the mode
must still refuse, and check that an honest kernel passes and that guards without TRITON are unchanged.
"""

from __future__ import annotations

import os

import pytest
import torch

from course import checks, forbidden, triton_support  # noqa: E402

if not triton_support.available():          # Linux x86-64 only; the course installs it there
    pytest.skip("triton is not installed here", allow_module_level=True)
os.environ.setdefault("TRITON_INTERPRET", "1")      # before triton's first import (its own @jit library)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

if not triton_support.interpreting():       # pragma: no cover - triton imported earlier without the interpreter
    pytest.skip("triton was imported before TRITON_INTERPRET=1 was set in this process", allow_module_level=True)

NAMES = ("scaled_dot_product_attention", "softmax", "matmul", "einsum")


@triton.jit
def _row_sum_kernel(X, OUT, R, C: tl.constexpr):
    rows = tl.program_id(0) * 16 + tl.arange(0, 16)
    cols = tl.arange(0, C)
    x = tl.load(X + rows[:, None] * C + cols[None, :], mask=rows[:, None] < R, other=0.0)
    tl.store(OUT + rows, tl.sum(x, 1), mask=rows < R)


@triton.jit
def _big_block_kernel(X, OUT, R, C: tl.constexpr, BIG: tl.constexpr):
    rows = tl.arange(0, BIG)                                           # one block of every row at once
    cols = tl.arange(0, C)
    x = tl.load(X + rows[:, None] * C + cols[None, :], mask=rows[:, None] < R, other=0.0)
    tl.store(OUT + rows, tl.sum(x, 1), mask=rows < R)


@triton.jit
def _numpy_kernel(X, OUT, R, C: tl.constexpr):
    import numpy as np                                                  # noqa: F401 - NumPy inside a kernel

    rows = tl.program_id(0) * 16 + tl.arange(0, 16)
    x = tl.load(X + rows[:, None] * C + tl.arange(0, C)[None, :], mask=rows[:, None] < R, other=0.0)
    tl.store(OUT + rows, tl.sum(x, 1) + np.float32(0.0), mask=rows < R)


@triton.jit
def _handle_kernel(X, OUT, R, C: tl.constexpr):
    rows = tl.program_id(0) * 16 + tl.arange(0, 16)
    x = tl.load(X + rows[:, None] * C + tl.arange(0, C)[None, :], mask=rows[:, None] < R, other=0.0)
    raw = x.handle.data                                                 # the interpreter's NumPy array
    tl.store(OUT + rows, tl.sum(x, 1) + 0 * raw.sum(), mask=rows < R)


@triton.jit
def _getattr_kernel(X, OUT, R, C: tl.constexpr):
    rows = tl.program_id(0) * 16 + tl.arange(0, 16)
    x = tl.load(X + rows[:, None] * C + tl.arange(0, C)[None, :], mask=rows[:, None] < R, other=0.0)
    raw = getattr(x, "hand" + "le")                                     # a name computed at run time
    tl.store(OUT + rows, tl.sum(x, 1) + 0 * raw.data.sum(), mask=rows < R)


@triton.jit
def _softmax_kernel(X, OUT, R, C: tl.constexpr):
    rows = tl.program_id(0) * 16 + tl.arange(0, 16)
    x = tl.load(X + rows[:, None] * C + tl.arange(0, C)[None, :], mask=rows[:, None] < R, other=0.0)
    tl.store(OUT + rows, tl.sum(tl.softmax(x), 1), mask=rows < R)


def row_sums(x, kernel=_row_sum_kernel, **meta):
    out = torch.empty(x.shape[0])
    kernel[(triton.cdiv(x.shape[0], 16),)](x, out, x.shape[0], x.shape[1], **meta)
    return out


def numpy_launcher(x):
    import numpy as np

    return torch.from_numpy(np.asarray(x).sum(1))


def grid_launcher(x):
    import numpy as np

    out = torch.empty(x.shape[0])
    _row_sum_kernel[lambda meta: (int(np.ceil(x.shape[0] / 16)),)](x, out, x.shape[0], x.shape[1])
    return out


def hooked_launcher(x):
    out = torch.empty(x.shape[0])
    kernel = triton.jit(_row_sum_kernel.fn)
    kernel.add_pre_run_hook(lambda *args, **kwargs: None)
    kernel[(triton.cdiv(x.shape[0], 16),)](x, out, x.shape[0], x.shape[1])
    return out


def matmul_launcher(x):
    return (x @ torch.ones(x.shape[1], 1))[:, 0]


def guarded(fn, *args, triton_mode=True, limit=None):
    names = NAMES + ((forbidden.TRITON,) if triton_mode else ())
    with checks.forbid(fn, *names, why="compute in your kernels", limit=limit):
        return fn(*args)


X = torch.randn(40, 16, generator=torch.Generator().manual_seed(0))


def test_an_honest_kernel_passes_in_triton_mode():
    out = guarded(row_sums, X, limit=40 * 40 // 2)
    assert torch.allclose(out, X.sum(1), atol=1e-5)


def test_without_triton_mode_the_interpreter_is_refused_as_before():
    """Lessons 00 and 12's closed check: the interpreter's use of the tensors' memory is data leaving PyTorch."""
    with pytest.raises(AssertionError, match="took its data out of PyTorch"):
        guarded(row_sums, X, triton_mode=False)


@pytest.mark.parametrize("launcher, message", [
    (numpy_launcher, "took its data out of PyTorch"),                     # the launcher's own NumPy
    (lambda x: row_sums(x, _numpy_kernel), "uses the name .numpy."),              # NumPy inside a kernel
    (lambda x: row_sums(x, _handle_kernel), "uses the name .handle."),             # the interpreter's arrays
    (lambda x: row_sums(x, _softmax_kernel), "calls tl.softmax"),        # Triton's softmax of a tile
    (lambda x: row_sums(x, _getattr_kernel), "uses the name .getattr."),           # a computed attribute name
    (grid_launcher, "names the module numpy"),                          # NumPy in a grid function
    (hooked_launcher, "pre-run hook"),                                   # code run by the launch, unwatched
    (matmul_launcher, "matmul"),                                         # PyTorch's matrix product
])
def test_triton_mode_still_refuses_shortcuts(launcher, message):
    with pytest.raises(AssertionError, match=message):
        guarded(launcher, X)


@triton.jit
def _nothing_kernel(X):
    pass


def torch_row_sums(x):                          # the work in PyTorch, around no launch at all
    return (x * torch.ones_like(x)).sum(1)


def torch_with_an_idle_launch(x):               # ... and around a kernel that does nothing
    _nothing_kernel[(1,)](x)
    prods = x.unsqueeze(0) * x.unsqueeze(1)     # (R, R, C): work per pair of rows, as a score tile would be
    return prods.sum((1, 2)) * 0 + x.sum(1)


def test_with_a_work_budget_the_kernels_must_do_the_work():
    """Lesson 16: the work is the kernels'. A call that launches nothing, or computes more than its budget with
    PyTorch around an idle launch, is refused; an honest launcher (an allocation, one launch) passes, and what
    Triton's interpreter copies in and out of a launch does not count (red team, fourth round: plain PyTorch
    launchers around the released stubs got 30/30)."""
    names = NAMES + (forbidden.TRITON,)
    budget = 8 * X.numel()
    with checks.forbid(row_sums, *names, why="compute in your kernels", work=budget):
        assert torch.allclose(row_sums(X), X.sum(1), atol=1e-5)
    with pytest.raises(AssertionError, match="launched no Triton kernel"):
        with checks.forbid(torch_row_sums, *names, why="compute in your kernels", work=budget):
            torch_row_sums(X)
    with pytest.raises(AssertionError, match=r"computed \d+ values with PyTorch outside your Triton kernels"):
        with checks.forbid(torch_with_an_idle_launch, *names, why="compute in your kernels", work=budget):
            torch_with_an_idle_launch(X)
    with checks.forbid(torch_row_sums, *names, why="compute in your kernels"):     # no budget: as before
        torch_row_sums(X)


def test_compiled_launches_are_not_counted_so_none_is_required(monkeypatch):
    """On a GPU the kernels are compiled and their launches do not pass through the interpreter the check watches:
    there it asks for no launch (the budget on PyTorch's own work still holds)."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    names = NAMES + (forbidden.TRITON,)
    with checks.forbid(torch_row_sums, *names, why="compute in your kernels", work=8 * X.numel()):
        torch_row_sums(X)
    with pytest.raises(AssertionError, match="values with PyTorch outside your Triton kernels"):
        with checks.forbid(torch_with_an_idle_launch, *names, why="compute in your kernels", work=8 * X.numel()):
            torch_with_an_idle_launch(X)


def test_a_kernel_block_above_the_limit_is_refused():
    with pytest.raises(AssertionError, match=r"block of shape \(64, 16\)"):
        guarded(lambda x: row_sums(x, _big_block_kernel, BIG=64), X, limit=40 * 16 // 2)


def test_the_interpreter_is_restored_after_the_check():
    from triton.runtime import interpreter

    call, post = interpreter.GridExecutor.__dict__["__call__"], interpreter.TensorHandle.__dict__["__post_init__"]
    with pytest.raises(AssertionError):
        guarded(lambda x: row_sums(x, _handle_kernel), X, limit=100)
    guarded(row_sums, X, limit=1000)
    assert interpreter.GridExecutor.__dict__["__call__"] is call
    assert interpreter.TensorHandle.__dict__["__post_init__"] is post


def test_tile_counter_counts_loaded_tiles():
    """A causal launch of the lesson's shape reads n(n+1)/2 (query tile, key tile) pairs: counted from loads."""
    @triton.jit
    def causal_sums(K, OUT, T, BLOCK: tl.constexpr, DH: tl.constexpr):
        i = tl.program_id(0)
        rows = i * BLOCK + tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, (i + 1) * BLOCK, BLOCK):                 # key tiles 0..i only
            keys = start + tl.arange(0, BLOCK)
            k = tl.load(K + keys[:, None] * DH + tl.arange(0, DH)[None, :], mask=keys[:, None] < T, other=0.0)
            acc += tl.sum(k, 1)
        tl.store(OUT + rows, acc, mask=rows < T)

    k = torch.randn(1, 1, 64, 16)
    out = torch.empty(64)
    with triton_support.TileCounter(k, 16) as counter:
        causal_sums[(4,)](k, out, 64, BLOCK=16, DH=16)
    assert counter.visited == 4 * 5 // 2
    assert counter.per_program[(3, 0, 0)] == {(0, 0), (0, 1), (0, 2), (0, 3)}


def test_setup_turns_the_interpreter_on_without_cuda():
    class Run:
        device = "cpu"

    t, language = triton_support.setup(Run())
    assert t is triton and language is tl and triton_support.interpreting()
    version, how = triton_support.status()
    assert version and "interpreter" in how


def test_a_warm_process_that_loads_transformers_first_can_still_run_the_lesson():
    """The grader's warm sandbox imports the lessons' libraries before any notebook runs; transformers imports
    triton as it loads. prefer_interpreter(), called first, leaves the lesson's set-up an interpreting triton."""
    import subprocess
    import sys

    script = ("import os, sys; os.environ.pop('TRITON_INTERPRET', None)\n"
              "from course import triton_support\n"
              "triton_support.prefer_interpreter()\n"
              "import transformers.models.llama.modeling_llama\n"
              "assert 'triton' in sys.modules, 'transformers no longer imports triton: this test guards nothing'\n"
              "class Run: device = 'cpu'\n"
              "triton_support.setup(Run())\n"
              "print('interpreting', triton_support.interpreting())\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and "interpreting True" in done.stdout, done.stderr[-2000:]

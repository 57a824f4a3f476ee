"""Units for the course package: profiles, checks, metrics, data generators, plots, the training loop."""

from __future__ import annotations

import json

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import course  # noqa: E402
from course.tools import authoring as A  # noqa: E402
from course import checks, config, metrics, plots, widgets  # noqa: E402
from course.data.sequences import PAD, reversal_batch  # noqa: E402
from course.data.tables import key_value_table, noisy_queries  # noqa: E402
from course.commands.lessons import Lesson, all_lessons, parse_target, resolve  # noqa: E402
from course.train import fit  # noqa: E402


# -- profiles -------------------------------------------------------------------------------------

def test_profiles_resolve(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("COURSE_PROFILE", raising=False)
    assert config.resolve_profile("auto", "cpu") == "standard"
    assert config.resolve_profile("auto", "cuda") == "full"
    assert config.resolve_profile("smoke", "cpu") == "smoke"
    with pytest.raises(ValueError, match="PROFILE must be one of"):
        config.resolve_profile("fast", "cpu")


def test_grading_forces_smoke(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert config.resolve_profile("full", "cuda") == "smoke"


def test_cuda_request_without_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        config.resolve_device("cuda")


def test_setup_seeds_and_picks(monkeypatch, capsys):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    run = course.setup("smoke", "cpu", 3)
    assert "profile=smoke" in capsys.readouterr().out
    a = torch.rand(3)
    course.setup("smoke", "cpu", 3, quiet=True)
    assert torch.equal(a, torch.rand(3))
    assert run.pick(smoke=1, standard=2, full=3) == 1
    assert course.Run("full", "cpu", 0).pick(smoke=1, standard=2) == 2


# -- checks ---------------------------------------------------------------------------------------

def test_check_close_names_the_worst_position():
    with pytest.raises(AssertionError, match=r"your out is 5 at position \[1, 0\], but 0 was expected"):
        checks.check_close(torch.tensor([[0.0, 0.0], [5.0, 0.0]]), torch.zeros(2, 2), "your out")
    checks.check_close(torch.tensor([1.0, float("-inf")]), torch.tensor([1.0, float("-inf")]), "x")


def test_check_shape_and_type():
    with pytest.raises(AssertionError, match=r"has shape \(2, 3\); it should have shape \(3, 2\)"):
        checks.check_shape(torch.zeros(2, 3), (3, 2), "weights")
    with pytest.raises(AssertionError, match="should be a Tensor"):
        checks.check_shape([1, 2], (2,), "weights")


def test_check_rows_and_zero_where():
    w = torch.tensor([[0.5, 0.5], [0.9, 0.3]])
    with pytest.raises(AssertionError, match=r"row \[1\] of w sums to 1.2"):
        checks.check_rows_sum_to_one(w, "w")
    with pytest.raises(AssertionError, match="puts weight 0.5 at position"):
        checks.check_zero_where(torch.tensor([[0.5, 0.5]]), torch.tensor([[False, True]]), "w", why="padding")
    checks.check_rows_sum_to_one(torch.tensor([[0.0, 0.0]]), "w", allow_zero_rows=True)


def test_check_finite_and_call():
    with pytest.raises(AssertionError, match="contains nan at position"):
        checks.check_finite(torch.tensor([1.0, float("nan")]), "out")

    def stub(x):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="stub is not implemented yet"):
        checks.call(stub, 1)


def test_check_gradients():
    lin = torch.nn.Linear(3, 2)
    unused = torch.nn.Linear(2, 2)
    model = torch.nn.ModuleDict({"a": lin, "b": unused})
    with pytest.raises(AssertionError, match="received no gradient"):
        checks.check_gradients(model, lin(torch.randn(4, 3)).sum(), "model")


# -- metrics, lessons -----------------------------------------------------------------------------

def test_metrics_record_appends_json(tmp_path, monkeypatch, capsys):
    path = tmp_path / "m.jsonl"
    monkeypatch.setenv("COURSE_METRICS", str(path))
    assert metrics.record("acc", torch.tensor(0.5)) == 0.5
    metrics.record("loss", 1.25, unit="nats")
    lines = [json.loads(l) for l in path.read_text().splitlines()]
    assert [(l["name"], l["value"]) for l in lines] == [("acc", 0.5), ("loss", 1.25)]
    assert "[metric] acc = 0.5" in capsys.readouterr().out


def test_targets_parse_and_compare():
    t = parse_target("acc", ">= 0.9")
    assert t.met_by(0.95) and not t.met_by(0.5) and not t.met_by(None)
    assert parse_target("loss", "<0.1").met_by(0.05)
    with pytest.raises(ValueError):
        parse_target("acc", "at least 0.9")


def test_lessons_are_discovered_and_resolved():
    lessons = all_lessons()
    assert lessons and lessons[0].id == "00_softmax_lookup"
    assert resolve(["00"])[0].id == "00_softmax_lookup"
    with pytest.raises(SystemExit, match="is not a lesson"):
        resolve(["99_nothing"])
    assert Lesson.load("00_softmax_lookup").targets


# -- data -----------------------------------------------------------------------------------------

def test_key_value_table_is_seeded():
    a, b = key_value_table(8, 16, 4, seed=1), key_value_table(8, 16, 4, seed=1)
    assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    assert not torch.equal(a.keys, key_value_table(8, 16, 4, seed=2).keys)
    assert torch.allclose(a.keys.norm(dim=-1), torch.ones(8))
    q, t = noisy_queries(a, 10, 0.0)
    assert torch.equal(q, a.keys[t])
    with pytest.raises(ValueError):
        key_value_table(100)


def test_reversal_batch():
    g = torch.Generator().manual_seed(0)
    x, y, mask = reversal_batch(16, 9, 12, generator=g, min_len=3)
    assert x.shape == y.shape == mask.shape == (16, 9)
    for b in range(16):
        n = int(mask[b].sum())
        assert torch.equal(y[b, :n], x[b, :n].flip(0))
        assert (x[b, n:] == PAD).all() and (y[b, n:] == PAD).all()
        assert (x[b, :n] != PAD).all()
    x2, _, _ = reversal_batch(16, 9, 12, generator=torch.Generator().manual_seed(0), min_len=3)
    assert torch.equal(x, x2)


# -- training, plots, widgets, authoring ----------------------------------------------------------

def test_fit_learns_a_linear_map():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    w = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    g = torch.Generator().manual_seed(0)

    def batch(step):
        x = torch.randn(64, 4, generator=g)
        return x, x @ w.T

    hist = fit(model, batch, lambda m, b: ((m(b[0]) - b[1]) ** 2).mean(), steps=300, lr=0.05)
    assert len(hist.losses) == 300 and hist.final_loss < 0.01 * hist.losses[0]
    assert hist.seconds > 0 and len(hist.grad_norms) == 300


def test_plots_draw():
    ax = plots.heatmap(torch.rand(3, 4), rows=list("abc"), cols=list("wxyz"), title="t")
    assert ax.get_title() == "t" and len(ax.get_xticklabels()) == 4
    ax = plots.bars([0.2, 0.8], ["a", "b"], highlight=1)
    assert len(ax.patches) == 2
    ax = plots.curves({"a": [3, 2, 1], "b": [1, 1, 1]}, smooth=2)
    assert len(ax.lines) == 2
    fig, axes = plots.grid(5, cols=3)
    assert len(axes) == 5


def test_widgets_fall_back_to_one_call_when_grading(monkeypatch):
    import ipywidgets as W

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    seen = []
    widgets.interact(lambda t, name: seen.append((t, name)), t=W.FloatSlider(value=0.5), name=["x", "y"])
    assert seen == [(0.5, "x")]


def test_authoring_cells_and_tidy():
    nb = A.notebook("99_demo", "Demo", [A.md("# hi"), A.parameters(PROFILE="auto", SEED=0),
                                        A.solution("f", "def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
                                        A.tests("test_f", 1, '"""f returns 1"""\nassert f() == 1, "f should return 1"')],
                    targets={"acc": ">= 0.5"})
    ids = [c["id"] for c in nb.cells]
    assert len(set(ids)) == 4 and "f" in ids and "parameters" in ids
    assert nb.cells[1].source == "PROFILE = 'auto'\nSEED = 0"
    assert nb.cells[3].metadata.nbgrader["points"] == 1 and nb.cells[3].metadata.nbgrader["locked"]
    assert nb.metadata.course["targets"] == {"acc": ">= 0.5"}


def test_widgets_draw_once_when_headless(monkeypatch):
    import ipywidgets as W

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("COURSE_HEADLESS", "1")
    seen = []
    widgets.interact(lambda k, text: seen.append((k, text)), k=W.IntSlider(value=3), text="1 2 3")
    assert seen == [(3, "1 2 3")]


def test_check_gradients_on_a_detached_loss():
    lin = torch.nn.Linear(3, 2)
    with pytest.raises(AssertionError, match="not connected to its parameters"):
        checks.check_gradients(lin, lin(torch.randn(4, 3)).sum().detach(), "lin")

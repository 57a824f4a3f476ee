"""course.train.fit under DistributedDataParallel, on the CPU with gloo.

Two ranks started with ``torch.multiprocessing.spawn`` (``torchrun`` aborted at exit now and then on
a busy machine) train with gradient accumulation and must end with exactly (to float tolerance) the
weights of one process training on the whole batch; only rank 0 writes metrics and checkpoints;
accumulation micro-steps skip the gradient all-reduce (``no_sync``). Lesson 09's ``torchrun``
command, as printed in the lesson, parses (torchrun's own parser, then ``course.train_lm``'s).
"""

from __future__ import annotations

import json
import os
import shlex
import socket
from pathlib import Path

import nbformat
import pytest
import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

from course import train

ROOT = Path(__file__).resolve().parents[1]
STEPS, BATCH, ACCUMULATE, WORLD = 4, 8, 2, 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def _make_batch(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 6, generator=g), torch.randint(0, 3, (BATCH,), generator=g)


def _loss(net, batch):
    x, y = batch
    return F.cross_entropy(net(x), y)


def _join(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)


def _fit_worker(rank: int, world: int, port: int, out: str, probe: str) -> None:
    _join(rank, world, port)
    where = train.init_distributed()
    assert (where.rank, where.world_size, where.backend, where.device) == (rank, world, "gloo", "cpu"), where
    from torch.nn.parallel import DistributedDataParallel

    entered = []
    real_no_sync = DistributedDataParallel.no_sync

    def counting_no_sync(self):
        entered.append(1)
        return real_no_sync(self)

    DistributedDataParallel.no_sync = counting_no_sync
    os.environ["COURSE_METRICS"] = str(Path(out) / "metrics.jsonl")
    seen = []

    def loss(net, batch):                       # which rows of each global batch this rank trained on
        seen.append(batch[0][:, 0].tolist())
        return _loss(net, batch)

    model = _model()
    hist = train.fit(model, _make_batch, loss, steps=STEPS, lr=1e-2, accumulate=ACCUMULATE, clip=1.0)
    from course import metrics

    metrics.record("final_loss", hist.losses[-1])
    # Each rank asks for its own file name: only rank 0's may appear.
    train.save_checkpoint(model, Path(out) / f"model-rank{rank}.pt")
    # Test bookkeeping only (not the course's output): what each rank saw, in the test's own folder.
    torch.save({"state": model.state_dict(), "losses": hist.losses, "no_sync": len(entered), "seen": seen},
               Path(probe) / f"rank{rank}.pt")
    torch.distributed.destroy_process_group()


def test_two_ranks_equal_one_process_full_batch(tmp_path):
    out, probe = tmp_path / "out", tmp_path / "probe"
    out.mkdir()
    probe.mkdir()
    mp.spawn(_fit_worker, args=(WORLD, _free_port(), str(out), str(probe)), nprocs=WORLD, join=True)

    single = _model()                               # one process, the whole batch at once, no accumulation
    hist = train.fit(single, _make_batch, _loss, steps=STEPS, lr=1e-2, clip=1.0)
    want = single.state_dict()
    for rank in range(WORLD):
        got = torch.load(probe / f"rank{rank}.pt")
        for name, value in want.items():
            torch.testing.assert_close(got["state"][name], value, atol=1e-6, rtol=1e-5,
                                       msg=lambda m: f"rank {rank}, {name}: DDP weights differ from one process's: {m}")
        torch.testing.assert_close(torch.tensor(got["losses"]), torch.tensor(hist.losses), atol=1e-6, rtol=1e-5)
        # one micro-step of each step skips the all-reduce, the last one syncs
        assert got["no_sync"] == STEPS * (ACCUMULATE - 1), got["no_sync"]
    # data sharded per rank: each micro-step holds BATCH / (WORLD x ACCUMULATE) rows, the ranks' rows
    # of a step are disjoint and together make the whole global batch
    seen = [torch.load(probe / f"rank{rank}.pt")["seen"] for rank in range(WORLD)]
    for step in range(STEPS):
        rows = [row for rank in range(WORLD) for row in seen[rank][step * ACCUMULATE:(step + 1) * ACCUMULATE]]
        assert all(len(r) == BATCH // (WORLD * ACCUMULATE) for r in rows), rows
        flat = sorted(v for r in rows for v in r)
        assert flat == sorted(_make_batch(step)[0][:, 0].tolist()), f"step {step}: the ranks did not split the batch"
    # the weights moved: the comparison is not between two untrained models
    assert not torch.allclose(want["0.weight"], _model().state_dict()["0.weight"])

    assert sorted(p.name for p in out.iterdir()) == ["metrics.jsonl", "model-rank0.pt"]
    lines = (out / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1, f"only rank 0 writes metrics; got {len(lines)} lines"
    saved = torch.load(out / "model-rank0.pt")["model"]
    assert set(saved) == set(want), "the checkpoint holds the model's own names (no DDP 'module.' prefix)"


def test_single_process_is_the_default():
    """Without init_distributed (notebooks, grading) fit runs alone, even with torchrun's variables set."""
    assert train.distributed() == train.Distributed()
    model = _model()
    train.fit(model, _make_batch, _loss, steps=1)
    assert not isinstance(model, nn.parallel.DistributedDataParallel)
    assert train.is_main()


def test_shard_and_accumulate_checks():
    x = torch.arange(12).reshape(6, 2)
    assert torch.equal(train.shard((x, {"y": x[:, 0]}), 1, 3)[0], x[2:4])
    assert torch.equal(train.shard((x, {"y": x[:, 0]}), 2, 3)[1]["y"], x[4:, 0])
    with pytest.raises(ValueError, match="equal shards"):
        train.shard(x, 0, 4)
    # accumulation alone (one process) is the full batch too: 2 micro-batches of 4 = 1 batch of 8
    a, b = _model(), _model()
    train.fit(a, _make_batch, _loss, steps=3, lr=1e-2, accumulate=2)
    train.fit(b, _make_batch, _loss, steps=3, lr=1e-2)
    for name, value in b.state_dict().items():
        torch.testing.assert_close(a.state_dict()[name], value, atol=1e-6, rtol=1e-5)


def _lm_worker(rank: int, world: int, port: int, root: str) -> None:
    _join(rank, world, port)
    from course import train_lm

    train_lm.main(["--profile", "smoke", "--steps", "2", "--accumulate", "2", "--max-chars", "30000",
                   "--out", str(Path(root) / f"rank{rank}")])


@pytest.mark.slow
def test_train_lm_two_ranks_rank0_writes(tmp_path):
    """python -m course.train_lm under two gloo ranks: trains, and only rank 0 writes its --out."""
    mp.spawn(_lm_worker, args=(WORLD, _free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    assert sorted(p.name for p in (tmp_path / "rank0").iterdir()) == ["checkpoint.pt", "metrics.jsonl", "result.json"]
    assert not (tmp_path / "rank1").exists(), "rank 1 wrote files"
    result = json.loads((tmp_path / "rank0" / "result.json").read_text(encoding="utf-8"))
    assert result["ranks"] == 2 and result["steps"] == 2 and result["val_loss"] > 0


def _lesson_command() -> list[str]:
    nb = nbformat.read(str(ROOT / "solutions" / "09_language_model" / "09_language_model.ipynb"), as_version=4)
    lines = [line.strip() for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()
             if line.strip().startswith("torchrun ")]
    assert lines, "lesson 09 gives no torchrun command"
    return shlex.split(lines[0])


def test_lesson_command_parses():
    from torch.distributed import run as torchrun

    from course import train_lm

    cmd = _lesson_command()
    args = torchrun.parse_args(cmd[1:])
    assert args.module and args.training_script == "course.train_lm", cmd
    assert args.nproc_per_node in ("gpu", "4") or args.nproc_per_node.isdigit()
    parsed = train_lm.parse_args(args.training_script_args)
    assert parsed.profile == "full" and parsed.cfg["batch"] % 8 == 0
    with pytest.raises(SystemExit):
        train_lm.parse_args(["--profile", "huge"])
    with pytest.raises(SystemExit):
        train_lm.parse_args(["--accumulate", "0"])

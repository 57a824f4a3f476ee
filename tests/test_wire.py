"""The worker -> judge wire: every tensor a learner's function may return comes back equal."""

import json
import os
import struct
import subprocess
import sys
import threading
import time

import pytest
import torch

from course.grading.sandboxed import wire
from course.grading.sandboxed.wire import decode_data, encode_data


def _round_trip(value):
    return decode_data(encode_data(value, lambda obj: pytest.fail(f"{obj!r} is data, not a handle")),
                       lambda hid, info: pytest.fail("no handle expected"))


@pytest.mark.parametrize("tensor", [
    torch.tensor(2.5),                                  # a scalar loss (0-dim)
    torch.tensor(True),
    torch.tensor(7, dtype=torch.int64),
    torch.zeros(0, 3),
    torch.arange(12.0).reshape(3, 4).t(),               # not contiguous
    torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16),
    torch.tensor([[True, False], [False, True]]),
], ids=["0-dim float", "0-dim bool", "0-dim int", "empty", "transposed", "bf16", "bool"])
def test_tensors_come_back_equal(tensor):
    back = _round_trip(tensor)
    assert back.dtype == tensor.dtype and back.shape == tensor.shape
    assert torch.equal(back, tensor)


def test_containers_of_scalars_come_back():
    back = _round_trip({"loss": torch.tensor(0.25), "steps": (1, 2.0, None)})
    assert torch.equal(back["loss"], torch.tensor(0.25)) and back["steps"] == (1, 2.0, None)


# -- issue 19: data only, validated, with deadlines --------------------------------------------------


def _raw_answer(value: dict, buffers=b"") -> bytes:
    header = json.dumps(value).encode()
    return struct.pack("<Q", len(header)) + header + buffers


@pytest.mark.parametrize("value", [
    {"v": "x" * 200_000, "sizes": []},                                     # one string over the cap
    {"v": {"$list": list(range(300_000))}, "sizes": []},                   # too many values
    {"v": {"$h": 1, "type": {"mro": [["m", "C" * 5000]]}}, "sizes": []},   # a class name 5000 long
    {"v": {"$list": [{"$t": 0, "dtype": "uint8", "shape": [1]}] * 2}, "sizes": [1]},   # one buffer, two tensors
    {"v": {"$f": "1e999999"}, "sizes": []},
    {"v": {"$device": "cuda:0" * 100}, "sizes": []},
])
def test_answers_over_a_cap_or_malformed_are_refused(value):
    sizes = sum(value["sizes"])
    with pytest.raises(wire.WireError):
        wire.decode_data(_raw_answer(value, b"\0" * sizes), lambda hid, info: pytest.fail("no handle"))


def test_a_stand_in_never_claims_a_c_class():
    """An object that says it is a tensor comes back as a stand-in that is no tensor: torch's C code
    would read its memory as a tensor's (the judge crashed on such a "fake tensor")."""
    import torch.nn as nn

    from course.grading.judge.remote import Remote, resolve_class as _resolve_class

    for mro in ([["torch", "Tensor"]], [["torch.nn.parameter", "Parameter"], ["torch", "Tensor"]],
                [["torch._C", "TensorBase"]], [["builtins", "dict"]], [["torch", "Generator"]]):
        cls = _resolve_class({"mro": mro})
        assert not issubclass(cls, (torch.Tensor, dict, torch.Generator)), (mro, cls.__mro__)
        fake = Remote(None, 1, {"mro": mro})
        assert not isinstance(fake, torch.Tensor)
        with pytest.raises(TypeError):
            torch.add(fake, 1)
    assert issubclass(_resolve_class({"mro": [["submission", "Net"], ["torch.nn.modules.module", "Module"]]}), nn.Module)


def _pipe_writer(chunks):
    r, w = os.pipe()

    def write():
        for data, pause in chunks:
            os.write(w, data)
            time.sleep(pause)
        os.close(w)

    threading.Thread(target=write, daemon=True).start()
    return r


@pytest.mark.parametrize("chunks", [
    [(b"\x40\x00\x00", 5)],                                          # the first bytes of a length, then sleep
    [((1000).to_bytes(8, "little") + b'{"v": ', 5)],                # a header with part of its payload
])
def test_the_deadline_covers_the_whole_answer(chunks):
    r = _pipe_writer(chunks)
    t0 = time.monotonic()
    with pytest.raises(wire.WireTimeout):
        wire.recv(r, deadline=time.monotonic() + 0.5)
    assert time.monotonic() - t0 < 4          # well before the writer wakes (5 s)
    os.close(r)


def test_a_60_mb_answer_costs_the_judge_little_more_than_60_mb():
    """Read from a pipe and decoded, a 60 MB answer is held once (it cost the judge 1.3 GB)."""
    code = """
import os, resource, threading, torch
from course.grading.sandboxed import wire
payload = wire.encode_data([torch.zeros(15_000_000)], lambda o: (0, {}))
r, w = os.pipe()
threading.Thread(target=wire.send, args=(w, payload), daemon=True).start()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
value = wire.decode_data(wire.recv(r), lambda h, i: None)
assert value[0].shape == (15_000_000,)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
    grew = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    assert grew < 90, f"receiving a 60 MB answer took {grew} MB more"


def test_judge_and_worker_name_a_calls_tensors_alike():
    """A call's tensor arguments are numbered the same way on both sides (one function, wire.tensors):
    a learner's object passed back in (here a list of tensors that lives in the worker) is skipped by both,
    so an in-place change to the test's tensor reaches that tensor, not another or none."""
    from course.grading.judge import remote as judge
    from course.grading.sandboxed.worker import Worker

    worker = Worker(-1, -1)
    learners_list = [torch.zeros(2), torch.zeros(2)]
    worker.objects[1] = learners_list

    def f(items, x):
        x.add_(1)
        return None
    worker.objects[2] = f
    x = torch.zeros(3)
    proxy = judge.Remote(None, 1, {"mro": [["builtins", "list"]]})
    mutable = wire.tensors(((proxy, x), {}))                     # the judge's numbering
    request = wire.decode_request(wire.encode_request(
        {"op": "call", "h": 2, "args": judge.outgoing((proxy, x)), "kwargs": {}, "grad": False}))
    reply = worker.handle(request)                               # the worker's numbering
    judge.copy_back(mutable, reply.get("mutated", []))
    assert mutable == [x] and torch.equal(x, torch.ones(3)), (reply, x)
    assert all(torch.equal(t, torch.zeros(2)) for t in learners_list)

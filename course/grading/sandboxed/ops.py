"""The worker's comparisons of a call's inputs before and after it (``checks.seeing_in_place_changes``),
made with PyTorch's own C pieces taken before any learner's code runs, so that a notebook that patches
``torch.equal``, a tensor method or a tensor's class cannot change what they see."""

from __future__ import annotations

from collections import OrderedDict as _OrderedDict
from course.grading.sandboxed import wire

_PIECES = None      # PyTorch's own C pieces the comparisons below use, taken before any learner's code runs


def pieces() -> tuple:
    """(TensorBase, DisableTorchFunction, equal, uint8): C-level, so that a notebook that replaces
    ``torch.equal``, a tensor method, or a tensor's class (a subclass whose ``detach`` lies) cannot
    change what a comparison sees. Taken once, in the warm sandbox; the integrity check holds them."""
    global _PIECES
    if _PIECES is None:
        # lazy: taken once, in the warm sandbox, after the worker's streams are set up
        import torch

        # lazy: taken once, in the warm sandbox, after the worker's streams are set up
        from torch.utils._python_dispatch import _disable_current_modes

        class plain:
            """Neither a torch-function override nor a dispatch mode (a learner's, left switched on) sees
            or answers what runs inside."""

            def __enter__(self, _no_function=torch._C.DisableTorchFunction, _no_modes=_disable_current_modes):
                self.parts = (_no_function(), _no_modes())
                for part in self.parts:
                    part.__enter__()

            def __exit__(self, *exc):
                for part in reversed(self.parts):
                    part.__exit__(*exc)

        _PIECES = (torch._C.TensorBase, plain, torch._C._VariableFunctions.equal, torch.uint8)
    return _PIECES


def snapshot(t):
    """What a tensor is now: its exact class, dtype, shape and a copy of its bytes."""
    base, plain, _, uint8 = _PIECES or pieces()
    with plain():
        d = base.detach(t)
        n = base.numel(d)
        return (type(t), d.dtype, tuple(d.shape),
                base.clone(base.view(base.reshape(base.contiguous(d), (-1,)), uint8)) if n else None)


def unchanged(before, t) -> bool:
    _, plain, equal, _ = _PIECES or pieces()
    kind, dtype, shape, raw = before
    now = snapshot(t)
    with plain():
        return now[0] is kind and now[1] == dtype and now[2] == shape and (raw is None or bool(equal(now[3], raw)))


def values_now(t):
    """A tensor's values now, as a plain tensor (whatever its class says)."""
    base, plain, _, _ = _PIECES or pieces()
    with plain():
        return base.detach(t)


def comparable(v) -> bool:
    """A plain dense CPU tensor (of any class), whose bytes :func:`snapshot` can read; any other (sparse,
    quantized, nested, meta, a conjugate view) is watched by identity only."""
    base, plain, _, _ = _PIECES or pieces()
    if not issubclass(type(v), base):
        return False
    try:
        with plain():
            return (str(base.layout.__get__(v)) == "torch.strided" and not base.is_quantized.__get__(v)
                    and not base.is_nested.__get__(v) and not base.is_meta.__get__(v) and not base.is_conj(v)
                    and not base.is_neg(v) and base.device.__get__(v).type == "cpu")
    except Exception:  # noqa: BLE001 - whatever cannot be read is compared by identity
        return False


def extras(tensors: list, held: list) -> list:
    """Per container: what the learner's code put in it that is not the call's own (a copy in place of
    an input, a new dict holding one), down to 20 levels: each tensor with what it is now, each new list
    or dict with what it holds, so that a later change to them is seen."""
    known = {id(t) for t in tensors} | {id(c) for c in held}

    def reach(v, out, depth):
        if id(v) in known or depth > 20 or len(out) > 10_000:
            return
        kind = type(v)
        if kind is dict or kind is _OrderedDict or kind is list or kind is tuple:
            if kind is not tuple:
                out.append(("c", v, shallow(v)))
            for item in (v.values() if isinstance(v, dict) else v):
                reach(item, out, depth + 1)
        elif comparable(v):
            out.append(("t", v, snapshot(v)))

    found = []
    for c in held:
        out: list = []
        for item in (c.values() if isinstance(c, dict) else c):
            reach(item, out, 0)
        found.append(out)
    return found


def extras_changed(extra: list) -> bool:
    return any(not unchanged(then, v) if what == "t" else rebound(v, then) for what, v, then in extra)


# What the worker's integrity check holds from before any learner's code ran (worker.Worker._integrity).
WATCHED = ("snapshot", "unchanged", "values_now", "comparable", "extras", "extras_changed", "paired", "holds_now",
           "shallow", "rebound")

ATOMS = frozenset({str, int, float, bool, type(None), bytes, complex})


def wire_module():
    return wire


def paired(sent, given, out: list, depth: int = 0) -> list:
    """The lists and dicts (those exact types, and OrderedDict) the learner's code was given, in the order
    the judge walks the ones it sent (``sent``: the request as it arrived; ``given``: the same, with its
    handles resolved): depth first, none below a handle (the judge sent no container there)."""
    if depth >= 50 or isinstance(sent, wire_module().Handle):
        return out
    kind = type(sent)
    if kind is list or kind is tuple:
        if kind is list:
            out.append(given)
        for a, b in zip(sent, given):
            paired(a, b, out, depth + 1)
    elif kind is dict or kind is _OrderedDict:
        out.append(given)
        for k, v in sent.items():
            paired(v, given[k], out, depth + 1)
    return out


def holds_now(container, known: list) -> list:
    """What a changed container holds, for the judge to put in its own: each item either ["o", j], the
    j-th of ``known`` (the call's tensors, then its containers), or ["v", value], a new value."""
    index = {id(o): j for j, o in enumerate(known)}

    def ref(v):
        j = index.get(id(v))
        return ["o", j] if j is not None and known[j] is v else ["v", v]

    if isinstance(container, dict):
        return [[k, ref(v)] for k, v in container.items()]
    return [ref(v) for v in container]


def shallow(container) -> list:
    """What a container holds, by identity: (key, value) pairs of a dict, the items of a list."""
    return list(container.items()) if isinstance(container, dict) else list(container)


def rebound(container, before: list) -> bool:
    """Whether the container holds other objects than ``before`` (an entry replaced, added or removed)."""
    now = shallow(container)
    if len(now) != len(before):
        return True
    if isinstance(container, dict):
        return any(k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(now, before))
    return any(v is not v0 for v, v0 in zip(now, before))

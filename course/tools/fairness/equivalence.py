"""Is a mutant that kept full marks equivalent to the reference? Decided by evidence, outside the grader.

The lesson's reference definitions and the mutant's (the same cells with one replaced) are each executed in
a fresh namespace (the instructor notebook's parameters cell in the smoke profile on the CPU, its ordinary
cells, its solution cells; experiments skipped). The lesson's test cells, hidden parts included, run once
against the reference with every graded function and every public method of every graded class
recording its calls (arguments, and for a method the constructor's arguments, the module's
``state_dict`` and its train/eval mode at the time). Each recorded call is then replayed on both, and
so are variants of it: random tensors of the same shapes and dtypes, the same scaled by 1000 (large
logits), random boolean masks of the same shape and the same with a fully masked row, random integer
tensors in the recorded range. Before a call the global RNG is seeded alike on both sides, and a
``torch.Generator`` argument is copied with its state, so a sampler is compared draw for draw. Classes
are also compared at construction (same seed): the names and shapes of their ``state_dict`` entries and
the initial values.

Equal everywhere (within ``rtol=1e-4, atol=1e-5``, compared in float64; both raising counts as equal
and is not counted as evidence) = equivalent, reported with the number of inputs and the largest
difference. Different somewhere = a survivor, reported with the first input where it differs.

Run in a child process per mutant (``decide_in_child``): a mutant may loop, crash or change global state.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

RTOL, ATOL = 1e-4, 1e-5
MAX_CALLS = 40            # recorded calls kept per graded name (the first ones: visible, then hidden tests)
VARIANTS = 4              # random variants replayed per recorded call


# --------------------------------------------------------------------------------------------------
# Namespaces

def _cells(root: Path, lesson: str):
    import nbformat

    return nbformat.read(str(root / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4).cells


def _strip(src: str) -> str:
    return re.sub(r"^[ \t]*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)[ \t]*$", "", src, flags=re.M)


def namespace(root: Path, lesson: str, replace: dict[str, str] | None = None, seed: int = 0) -> tuple[dict, list[str]]:
    """(namespace, graded names) after the notebook's non-test cells, with ``replace``'s solution cells."""
    import torch

    replace = replace or {}
    ns: dict = {"__name__": "__main__"}
    graded = []
    old = os.getcwd()
    os.chdir(root / "solutions" / lesson)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            for cell in _cells(root, lesson):
                meta = cell.metadata.get("nbgrader", {})
                tags = cell.metadata.get("tags", [])
                if cell.cell_type != "code" or "experiment" in tags or meta.get("grade"):
                    continue
                if "parameters" in tags:
                    exec(f"PROFILE = 'smoke'; DEVICE = 'cpu'; SEED = {seed}", ns)
                    continue
                src = replace.get(meta.get("grade_id"), _strip(cell.source)) if meta.get("solution") else _strip(cell.source)
                if meta.get("solution"):
                    graded.append(meta["grade_id"])
                    exec(compile(src, f"<{meta['grade_id']}>", "exec"), ns)     # a definition must run
                    continue
                try:
                    exec(compile(src, "<cell>", "exec"), ns)
                except Exception:  # noqa: BLE001 - an ordinary cell that needs what grading skips: not needed here
                    pass
    finally:
        os.chdir(old)
    torch.manual_seed(seed)
    return ns, [g for g in graded if g in ns]


def test_sources(root: Path, lesson: str) -> list[str]:
    return [_strip(c.source) for c in _cells(root, lesson) if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]


# --------------------------------------------------------------------------------------------------
# Copies and comparisons

def clone(obj):
    import torch

    if isinstance(obj, torch.Generator):
        g = torch.Generator(device=obj.device)
        g.set_state(obj.get_state())
        return g
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (list, tuple)):
        items = [clone(x) for x in obj]
        return type(obj)(items) if not hasattr(obj, "_fields") else type(obj)(*items)
    if isinstance(obj, dict):
        return type(obj)((k, clone(v)) for k, v in obj.items()) if type(obj) is not dict else {k: clone(v) for k, v in obj.items()}
    try:
        return copy.deepcopy(obj)
    except Exception:  # noqa: BLE001 - an object that cannot be copied is passed as it is
        return obj


def difference(a, b, path: str = "out") -> tuple[str | None, float]:
    """(where and how a and b differ, or None; the largest absolute difference seen)."""
    import torch

    if isinstance(a, torch.nn.Module) or isinstance(b, torch.nn.Module):
        if type(a).__name__ != type(b).__name__:
            return f"{path}: a {type(a).__name__} vs a {type(b).__name__}", math.inf
        return difference(a.state_dict(), b.state_dict(), f"{path}.state_dict()")
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: a tensor vs {type(b).__name__ if isinstance(a, torch.Tensor) else type(a).__name__}", math.inf
        if a.shape != b.shape:
            return f"{path}: shape {tuple(a.shape)} vs {tuple(b.shape)}", math.inf
        if a.dtype != b.dtype:
            return f"{path}: dtype {a.dtype} vs {b.dtype}", math.inf
        if a.numel() == 0:
            return None, 0.0
        if a.dtype == torch.bool or not (a.is_floating_point() or a.is_complex()):
            same = torch.equal(a, b)
            return (None, 0.0) if same else (f"{path}: {int((a != b).sum())} of {a.numel()} entries differ", math.inf)
        x, y = a.detach().double(), b.detach().double()
        nan = torch.isnan(x) | torch.isnan(y)
        if not torch.equal(torch.isnan(x), torch.isnan(y)):
            return f"{path}: NaN at different positions ({int(torch.isnan(x).sum())} vs {int(torch.isnan(y).sum())})", math.inf
        inf = torch.isinf(x) | torch.isinf(y)
        if not torch.equal(x[inf], y[inf]):
            return f"{path}: infinities differ", math.inf
        ok = ~(nan | inf)
        diff = (x[ok] - y[ok]).abs()
        worst = float(diff.max()) if diff.numel() else 0.0
        if diff.numel() and not torch.allclose(x[ok], y[ok], rtol=RTOL, atol=ATOL):
            return f"{path}: max |difference| {worst:.3g}", worst
        return None, worst
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return f"{path}: keys {sorted(map(str, a))[:8]} vs {sorted(map(str, b))[:8]}", math.inf
        worst = 0.0
        for k in a:
            d, w = difference(a[k], b[k], f"{path}[{k!r}]")
            worst = max(worst, w)
            if d:
                return d, worst
        return None, worst
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: {len(a)} items vs {len(b)}", math.inf
        worst = 0.0
        for i, (x, y) in enumerate(zip(a, b)):
            d, w = difference(x, y, f"{path}[{i}]")
            worst = max(worst, w)
            if d:
                return d, worst
        return None, worst
    if isinstance(a, float) and isinstance(b, (int, float)):
        if math.isclose(a, b, rel_tol=RTOL, abs_tol=ATOL) or (math.isnan(a) and math.isnan(b)):
            return None, abs(a - b) if math.isfinite(a - b) else 0.0
        return f"{path}: {a!r} vs {b!r}", abs(a - b)
    if type(a) is not type(b):
        return f"{path}: a {type(a).__name__} vs a {type(b).__name__}", math.inf
    if isinstance(a, (int, str, bool, type(None))):
        return (None, 0.0) if a == b else (f"{path}: {a!r} vs {b!r}", math.inf)
    return None, 0.0                        # opaque objects (a generator, a closure): not compared


def describe(obj, limit: int = 160) -> str:
    import torch

    def one(x):
        if isinstance(x, torch.Tensor):
            return f"tensor{tuple(x.shape)} {str(x.dtype).replace('torch.', '')}"
        if isinstance(x, torch.nn.Module):
            return type(x).__name__ + "(...)"
        if isinstance(x, (list, tuple)):
            return "[" + ", ".join(one(y) for y in x[:4]) + (", ..." if len(x) > 4 else "") + "]"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{k}: {one(v)}" for k, v in list(x.items())[:4]) + "}"
        return repr(x)[:40]
    return one(obj)[:limit]


# --------------------------------------------------------------------------------------------------
# Recording the calls that the lesson's tests make

def record_calls(ns: dict, graded: list[str], tests: list[str], root: Path, lesson: str) -> list[dict]:
    import torch

    calls: list[dict] = []
    counts: dict[str, int] = {}
    depth = [0]

    def keep(name):
        counts[name] = counts.get(name, 0) + 1
        return counts[name] <= MAX_CALLS and depth[0] == 0

    patched = []
    for name in graded:
        obj = ns[name]
        if isinstance(obj, type):
            cls = obj
            init = cls.__init__

            def __init__(self, *args, _init=init, **kwargs):
                _init(self, *args, **kwargs)
                if not hasattr(self, "_fair_ctor"):
                    object.__setattr__(self, "_fair_ctor", (clone(args), clone(kwargs)))
            patched.append((cls, "__init__", init))
            cls.__init__ = __init__
            for meth, fn in list(vars(cls).items()):
                if meth.startswith("_") or not callable(fn) or isinstance(fn, (staticmethod, classmethod, type)):
                    continue

                def wrapper(self, *args, _fn=fn, _name=name, _meth=meth, **kwargs):
                    if keep(f"{_name}.{_meth}") and hasattr(self, "_fair_ctor") and isinstance(self, torch.nn.Module):
                        calls.append({"name": _name, "method": _meth, "ctor": self._fair_ctor, "state": clone(self.state_dict()),
                                      "training": self.training, "args": clone(args), "kwargs": clone(kwargs)})
                    depth[0] += 1
                    try:
                        return _fn(self, *args, **kwargs)
                    finally:
                        depth[0] -= 1
                patched.append((cls, meth, fn))
                setattr(cls, meth, wrapper)
        elif callable(obj):
            def wrapper(*args, _fn=obj, _name=name, **kwargs):
                if keep(_name):
                    calls.append({"name": _name, "method": None, "args": clone(args), "kwargs": clone(kwargs)})
                depth[0] += 1
                try:
                    return _fn(*args, **kwargs)
                finally:
                    depth[0] -= 1
            wrapper.__name__ = getattr(obj, "__name__", name)
            ns[name] = wrapper
            patched.append((ns, name, obj))
    old = os.getcwd()
    os.chdir(root / "solutions" / lesson)
    try:
        for src in tests:
            try:
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    exec(compile(src, "<test>", "exec"), ns)
            except BaseException:  # noqa: BLE001 - a test cell that fails here still recorded its calls
                pass
    finally:
        os.chdir(old)
        for owner, attr, value in reversed(patched):
            if isinstance(owner, dict):
                owner[attr] = value
            else:
                setattr(owner, attr, value)
    return calls


# --------------------------------------------------------------------------------------------------
# Variants of a recorded call

def variants(call: dict, seed: int, n: int = VARIANTS) -> list[tuple[str, dict]]:
    """The call itself, then random inputs of the same shapes and dtypes, large logits, masks with a fully
    masked row."""
    import torch

    out = [("recorded", call)]
    g = torch.Generator().manual_seed(seed)

    def change(x, how):
        if isinstance(x, torch.Tensor):
            if x.dtype == torch.bool:
                if how == "masked-row" and x.dim() >= 2:
                    y = x.clone()
                    y[..., 0, :] = False
                    return y
                return torch.rand(x.shape, generator=g) < 0.7 if how == "random" else x.clone()
            if x.is_floating_point():
                if how == "large":
                    return x.detach() * 1000.0
                if how == "random":
                    std = float(x.detach().double().std()) if x.numel() > 1 else 1.0
                    std = std if math.isfinite(std) and std > 0 else 1.0
                    return (torch.randn(x.shape, generator=g, dtype=torch.float64) * std).to(x.dtype)
                return x.clone()
            if how == "random" and x.numel() and x.dtype in (torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8):
                lo, hi = int(x.min()), int(x.max())
                return torch.randint(lo, hi + 1, x.shape, generator=g, dtype=x.dtype)
            return x.clone()
        if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
            return type(x)(change(y, how) for y in x)
        if isinstance(x, dict):
            return {k: change(v, how) for k, v in x.items()}
        return clone(x)

    for k, how in enumerate(["random", "large", "masked-row", "random"][:n]):
        out.append((how, {**call, "args": change(call["args"], how), "kwargs": change(call["kwargs"], how)}))
    return out


# --------------------------------------------------------------------------------------------------
# Replay

def _replay(ns: dict, call: dict, seed: int):
    import torch

    torch.manual_seed(seed)
    if call["method"] is None:
        return ns[call["name"]](*clone(call["args"]), **clone(call["kwargs"]))
    args, kwargs = clone(call["ctor"])
    obj = ns[call["name"]](*args, **kwargs)
    missing, unexpected = obj.load_state_dict(clone(call["state"]), strict=False)
    if missing or unexpected:
        raise _Structure(f"state_dict: missing {list(missing)[:4]}, unexpected {list(unexpected)[:4]}")
    obj.train(call["training"])
    torch.manual_seed(seed)
    return getattr(obj, call["method"])(*clone(call["args"]), **clone(call["kwargs"]))


class _Structure(Exception):
    pass


class _Timeout(Exception):
    pass


def _run(ns, call, seed, seconds=20):
    def alarm(*_):
        raise _Timeout(f"did not return within {seconds} s")
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return ("ok", _replay(ns, call, seed))
    except _Timeout as exc:
        return ("timeout", str(exc))
    except _Structure as exc:
        return ("structure", str(exc))
    except Exception as exc:  # noqa: BLE001 - the mutant's (or reference's) exception is the observation
        return ("raised", f"{type(exc).__name__}: {str(exc)[:200]}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _constructions(ns_ref, ns_mut, calls) -> tuple[str | None, int]:
    """The same constructor arguments, the same seed: the same state_dict names, shapes and initial values."""
    import torch

    seen, n = set(), 0
    for call in calls:
        if call["method"] is None:
            continue
        key = (call["name"], describe(call["ctor"]))
        if key in seen:
            continue
        seen.add(key)
        states = []
        for ns in (ns_ref, ns_mut):
            torch.manual_seed(0)
            try:
                args, kwargs = clone(call["ctor"])
                states.append(ns[call["name"]](*args, **kwargs).state_dict())
            except Exception as exc:  # noqa: BLE001
                states.append(f"{type(exc).__name__}: {exc}")
        n += 1
        if isinstance(states[0], str) or isinstance(states[1], str):
            if isinstance(states[0], str) != isinstance(states[1], str):
                return f"{call['name']}{describe(call['ctor'])}: constructing it: {states[0] if isinstance(states[0], str) else 'works'}" \
                       f" vs {states[1] if isinstance(states[1], str) else 'works'}", n
            continue
        if [(k, tuple(v.shape)) for k, v in states[0].items()] != [(k, tuple(v.shape)) for k, v in states[1].items()]:
            ref = {k: tuple(v.shape) for k, v in states[0].items()}
            mut = {k: tuple(v.shape) for k, v in states[1].items()}
            diff = sorted(set(ref.items()) ^ set(mut.items()))[:4]
            return f"{call['name']}{describe(call['ctor'])}: state_dict entries differ: {diff}", n
        d, _ = difference(states[0], states[1], f"{call['name']}(...).state_dict() at construction")
        if d:
            return d, n
    return None, n


def decide(root: Path, lesson: str, cell: str, source: str, seed: int = 0) -> dict:
    """Evidence for one mutant: {'equivalent', 'inputs', 'max_difference', 'witness', 'calls_recorded'}."""
    import torch

    torch.set_num_threads(1)
    ns_ref, graded = namespace(root, lesson, seed=seed)
    calls = record_calls(ns_ref, graded, test_sources(root, lesson), root, lesson)
    ns_ref, _ = namespace(root, lesson, seed=seed)
    try:
        ns_mut, _ = namespace(root, lesson, {cell: source}, seed=seed)
    except Exception as exc:  # noqa: BLE001
        return {"equivalent": False, "inputs": 0, "max_difference": None, "calls_recorded": len(calls),
                "witness": f"the mutant's definitions do not run: {type(exc).__name__}: {exc}"}
    built, n_built = _constructions(ns_ref, ns_mut, calls)
    if built:
        return {"equivalent": False, "inputs": n_built, "max_difference": None, "calls_recorded": len(calls), "witness": built}
    inputs, worst = n_built, 0.0
    for i, call in enumerate(calls):
        for how, variant in variants(call, seed=1000 + i):
            a = _run(ns_ref, variant, seed + i)
            b = _run(ns_mut, variant, seed + i)
            where = f"{call['name']}{'.' + call['method'] if call['method'] else ''}({describe(variant['args'])}" \
                    f"{', ' + describe(variant['kwargs']) if variant['kwargs'] else ''}) [{how} input]"
            if a[0] != "ok" and b[0] != "ok":
                continue                     # both refuse this input: not evidence either way
            if a[0] != b[0]:
                return {"equivalent": False, "inputs": inputs + 1, "max_difference": None, "calls_recorded": len(calls),
                        "witness": f"{where}: reference {a[0]} {'' if a[0] == 'ok' else a[1]}, mutant {b[0]} "
                                   f"{'' if b[0] == 'ok' else b[1]}".strip()}
            d, w = difference(a[1], b[1])
            inputs += 1
            worst = max(worst, w) if math.isfinite(w) else worst
            if d:
                return {"equivalent": False, "inputs": inputs, "max_difference": w if math.isfinite(w) else None,
                        "calls_recorded": len(calls), "witness": f"{where}: {d}"}
    if not inputs:
        return {"equivalent": False, "inputs": 0, "max_difference": None, "calls_recorded": len(calls),
                "witness": "no evidence: the tests made no call this replay could repeat"}
    return {"equivalent": True, "inputs": inputs, "max_difference": worst, "calls_recorded": len(calls), "witness": ""}


def decide_in_child(root: Path, mutant, timeout: int = 600) -> dict:
    """:func:`decide` in a child process (a mutant may loop or crash the interpreter)."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(mutant.source)
    try:
        proc = subprocess.run([sys.executable, "-m", "course.tools.fairness.equivalence", str(root), mutant.lesson, mutant.cell,
                               f.name], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg"})
        lines = proc.stdout.strip().splitlines()
        if proc.returncode == 0 and lines:
            return json.loads(lines[-1])
        return {"equivalent": False, "inputs": 0, "max_difference": None,
                "witness": f"the comparison stopped (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-300:]}"}
    except subprocess.TimeoutExpired:
        return {"equivalent": False, "inputs": 0, "max_difference": None, "witness": f"the comparison ran past {timeout} s"}
    finally:
        os.unlink(f.name)


if __name__ == "__main__":
    root, lesson, cell, path = sys.argv[1:5]
    result = decide(Path(root), lesson, cell, Path(path).read_text())
    print(json.dumps(result))

"""Stand-ins for the learner's objects, which live in the sandbox: using one sends a request, and what
comes back is data. Also the judge's values on their way in (:func:`outgoing`) and the changes a call
made to them on its way back (:func:`copy_back`, :func:`mirror`)."""

from __future__ import annotations

import collections

import torch

from course import checks
from course.grading.judge.errors import BUILTIN_ERRORS, WorkerGone
from course.grading.sandboxed.wire import WorkerOp
from course.grading.sandboxed import wire
import sys

# -- the stand-in for objects that live in the sandbox --------------------------------------------

TRUSTED_MODULES = ("torch", "builtins", "collections", "numpy", "math", "functools", "typing")
_standins: dict[tuple, type] = {}
_HEAPTYPE = 1 << 9


def _claimable(cls) -> bool:
    """May a stand-in claim to be an instance of ``cls``? Only if every class of its chain but
    ``object`` is written in Python: C code (torch's first) trusts ``isinstance`` and then reads the
    object's memory as its own layout, so a stand-in posing as a tensor would crash the judge."""
    if not isinstance(cls, type) or issubclass(cls, (torch.Tensor, BaseException)):
        return False
    for c in cls.__mro__:
        if c is object:
            continue
        if not c.__flags__ & _HEAPTYPE or type(c).__name__.startswith("pybind11") or \
                str(c.__module__).startswith(("torch._C", "builtins")) or c.__basicsize__ > 64 or c.__itemsize__:
            return False
    return True


def trusted_class(module, qual):
    """The class ``module.qual`` names, if a trusted module is loaded here and has it (imports nothing)."""
    obj = sys.modules.get(str(module))
    if obj is None:
        return None
    for part in str(qual).split("."):
        obj = getattr(obj, part, None)
    return obj if isinstance(obj, type) else None


def resolve_class(info: dict):
    """The class a remote object claims to be: the real one for torch/builtins, else a stand-in."""
    mro = [tuple(x) for x in info.get("mro", []) if isinstance(x, (list, tuple)) and len(x) == 2]
    bases = []
    for module, qual in mro:
        if str(module).split(".")[0] in TRUSTED_MODULES and "<" not in str(qual):
            # Never import on a learner's say-so (import-time code would run in the judge): only modules
            # the judge has already loaded count; any other claim is an unknown class (a plain stand-in).
            obj = sys.modules.get(str(module))
            if obj is None:
                continue
            try:
                for part in str(qual).split("."):
                    obj = getattr(obj, part)
                if isinstance(obj, type) and _claimable(obj):
                    bases.append(obj)
                    break
            except (ImportError, AttributeError):
                continue
    trusted = bases[0] if bases else object
    if mro and str(mro[0][0]).split(".")[0] in TRUSTED_MODULES and bases and mro[0][1] == trusted.__qualname__:
        return trusted
    name = str(mro[0][1]).split(".")[-1][:60] if mro else "Remote"
    key = (name, trusted)
    if key not in _standins:
        try:
            _standins[key] = type(name, (trusted,), {"__module__": "submission"})
        except TypeError:
            _standins[key] = type(name, (object,), {"__module__": "submission"})
    return _standins[key]


class Remote:
    """A learner's object that lives in the sandbox. Using it sends a request; answers are data."""

    __slots__ = ("_r_session", "_r_id", "_r_info", "_r_extra", "__weakref__")

    def __init__(self, session, hid: int, info: dict):
        object.__setattr__(self, "_r_session", session)
        object.__setattr__(self, "_r_id", hid)
        object.__setattr__(self, "_r_info", info)
        object.__setattr__(self, "_r_extra", {})

    @property
    def __class__(self):  # isinstance(remote, nn.Module) reads this
        return resolve_class(self._r_info)

    def _r(self, op, **kw):
        return self._r_session.request(op, h=self._r_id, **kw)

    def __getattr__(self, name):
        extra = object.__getattribute__(self, "_r_extra")
        if name in extra:
            return extra[name]
        if name.startswith("__") and name.endswith("__") and name not in ("__name__", "__qualname__", "__doc__"):
            raise AttributeError(name)
        return self._r(WorkerOp.GETATTR, name=name)

    def __setattr__(self, name, value):
        self._r(WorkerOp.SETATTR, name=name, value=outgoing(value))

    def __call__(self, *args, **kwargs):
        walk = Walk()           # one walk: the copies to send, the judge's tensors among them, any stand-in
        args, kwargs, mutable = outgoing(args, walk, 1), outgoing(kwargs, walk, 1), walk.tensors
        # the worker skips its own walks where they would find nothing (no tensor to watch, no handle to resolve)
        return self._r(WorkerOp.CALL, args=args, kwargs=kwargs, grad=torch.is_grad_enabled(), mutable=mutable,
                       tensors=bool(mutable), handles=walk.handles, containers=checks.in_place_changes_seen(),
                       held=walk.containers)

    def __getitem__(self, key):
        return self._r(WorkerOp.GETITEM, key=outgoing(key))

    def __setitem__(self, key, value):
        self._r(WorkerOp.SETITEM, key=outgoing(key), value=outgoing(value))

    def __len__(self):
        n = self._r(WorkerOp.LEN)
        if not isinstance(n, int) or n < 0:
            raise TypeError("len() of the learner's object is not a non-negative integer")
        return n

    def __iter__(self):
        items = self._r(WorkerOp.ITER)
        if not isinstance(items, list):
            raise TypeError("the learner's object could not be iterated")
        return iter(items)

    def __contains__(self, item):
        return bool(self._r(WorkerOp.CONTAINS, item=outgoing(item)) is True)

    def __bool__(self):
        return self._r(WorkerOp.BOOL) is True

    def __enter__(self):                 # `with` a learner's context manager: entered and left in the sandbox
        return self._r(WorkerOp.ENTER)

    def __exit__(self, kind, error, tb):
        name = kind.__name__ if kind is not None and kind.__name__ in BUILTIN_ERRORS else (
            "Exception" if kind is not None else None)
        return self._r(WorkerOp.LEAVE, error=name) is True

    def __repr__(self):
        text = self._r(WorkerOp.REPR)
        return str(text)[:2000] if isinstance(text, str) else "<learner's object>"

    __str__ = __repr__

    def __reduce__(self):
        return (wire.Handle, (self._r_id,))


_ATOMS = frozenset({str, int, float, bool, type(None), bytes, complex})


def copy_back(originals: list, mutated: list) -> None:
    """The learner's call changed some of its tensor arguments in place (in the sandbox, on copies):
    make the same change to the test's own tensors, so the test sees what it would in the notebook.
    Only inside ``checks.seeing_in_place_changes()``: elsewhere a change could bend the reference a test
    computes after the call from its own tensors."""
    for item in mutated[:len(originals)]:
        if not (isinstance(item, list) and len(item) == 2 and type(item[0]) is int
                and 0 <= item[0] < len(originals) and isinstance(item[1], torch.Tensor)):
            continue
        dst, src = originals[item[0]], item[1]
        try:
            with torch.no_grad():
                if dst.shape != src.shape:
                    dst.data = src.to(dst.dtype).clone()
                elif not torch.equal(dst, src.to(dst.dtype)):
                    dst.copy_(src)
        except (RuntimeError, TypeError):
            dst.data = src.clone()


def mirror(known: list, held: list, rebound) -> None:
    """Put into the test's own lists and dicts (``held``) what the learner's call left in its copies of
    them: ``rebound`` is [[i, contents]], each item ["o", j] (the j-th of ``known``: the call's tensors,
    then its containers) or ["v", value]."""
    def value(ref):
        if isinstance(ref, list) and len(ref) == 2:
            if ref[0] == "o" and type(ref[1]) is int and 0 <= ref[1] < len(known):
                return known[ref[1]]
            if ref[0] == "v":
                return ref[1]
        raise WorkerGone("the sandbox broke the grading protocol (a malformed change to a container)")

    for entry in rebound if isinstance(rebound, list) else []:
        if not (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int and 0 <= entry[0] < len(held)
                and isinstance(entry[1], list)):
            raise WorkerGone("the sandbox broke the grading protocol (a malformed change to a container)")
        target = held[entry[0]]
        if isinstance(target, dict):
            pairs = [(p[0], value(p[1])) for p in entry[1] if isinstance(p, list) and len(p) == 2]
            target.clear()
            target.update(pairs)
        else:
            target[:] = [value(r) for r in entry[1]]


class Walk:
    """What :func:`outgoing` saw on its way: the judge's own tensors, in the order :func:`wire.tensors`
    names them, and whether any stand-in became a handle."""

    __slots__ = ("tensors", "handles", "containers")

    def __init__(self):
        self.tensors: list = []
        self.handles = False
        self.containers: list = []      # the test's own lists and dicts, in the order the worker walks them


def outgoing(value, walk: Walk | None = None, depth: int = 0):
    """Judge-side values on their way into the sandbox: stand-ins become handles, tensors copies. With
    ``walk``, also note what :class:`Walk` holds (``depth``: as :func:`wire.tensors` counts it)."""
    if type(value) in _ATOMS:          # the leaves of a test's nested data (thousands per call): as they are
        return value
    if isinstance(value, Remote) or type(value) is Remote:
        if walk is not None:
            walk.handles = True
        return wire.Handle(object.__getattribute__(value, "_r_id"))
    if type(value) is list:
        if walk is not None and depth < 50:
            walk.containers.append(value)
        return [outgoing(v, walk, depth + 1) for v in value]
    if type(value) is tuple:
        return tuple([outgoing(v, walk, depth + 1) for v in value])
    if type(value) is dict or type(value) is collections.OrderedDict:   # a state_dict is an OrderedDict
        if walk is not None and depth < 50:
            walk.containers.append(value)
        return type(value)((k, outgoing(v, walk, depth + 1)) for k, v in value.items())
    if isinstance(value, torch.Tensor):
        if walk is not None and depth <= 50 and issubclass(type(value), torch.Tensor):
            walk.tensors.append(value)          # wire.tensors descends 50 levels of containers
        return value.detach().clone()
    if callable(value) and not isinstance(value, (type, torch.nn.Module, torch.Generator)) and \
            getattr(value, "__module__", "") in ("__main__", None, "judge"):
        raise TypeError("a test cannot pass a function defined in the test to the learner's code")
    return value

"""The grading wire: how the trusted judge and the sandboxed worker talk.

One message is an 8-byte length and a payload, over a pipe (no network: the sandbox has none).
Every read has a deadline that covers the whole message, not just its first byte.

* judge -> worker: a pickled request. The judge is trusted, so the worker may unpickle it.
* worker -> judge: **data only**, never pickle. A JSON header describes the value; tensors travel
  as raw bytes after it (dtype and shape in the header). Whatever the worker sends is the
  student's answer, to be checked, never code to run: the decoder builds only None, bools,
  numbers, strings, tuples, lists, dicts, dtypes, devices and tensors, and refers to every other
  object by a handle number. Decoding is under strict caps (:class:`Caps`): header size, number of
  values, string lengths, tensor bytes, nesting. A value over a cap is refused, never truncated into
  something else.
"""

from __future__ import annotations

import collections
import io
import json
import os
import pickle
import select
import struct
import time
from dataclasses import dataclass
from enum import Enum

import torch

class WorkerOp(str, Enum):
    """What a judge asks the worker (judge -> worker: a pickled request ``{"op": ..., ...}``; the answer is
    data only, :func:`encode_data`: ``{"ok": True, "value": ...}`` or ``{"ok": False, "error": {type, message}}``)."""

    CELL = "cell"                # run one of the learner's cells: source, index -> output, error
    GLOBAL = "global"            # a name of the learner's namespace -> its value (or "missing")
    GETATTR = "getattr"          # on a handle ("h"): name -> value
    SETATTR = "setattr"          # h, name, value
    CALL = "call"                # h, args, kwargs (+ what to watch: tensors, containers) -> value, changes made
    GETITEM = "getitem"          # h, key -> value
    SETITEM = "setitem"          # h, key, value
    LEN = "len"
    ITER = "iter"
    CONTAINS = "contains"        # h, item -> bool
    BOOL = "bool"
    REPR = "repr"
    ENTER = "enter"              # h: the learner's context manager's __enter__ -> its value
    LEAVE = "leave"              # h, error (a builtin exception's name, or None): its __exit__ -> suppressed?
    FORBID = "forbid"            # names, why, limit, work: block those calls until UNFORBID
    UNFORBID = "unforbid"        # -> the sentences of what was violated meanwhile
    TEST_BEGIN = "test-begin"    # fork: the test cells talk to the fork -> "forked" (answered by the fork)
    TEST_END = "test-end"        # the fork ends -> "ended"
    EXIT = "exit"                # the judge is done with this submission


class ZygoteOp(str, Enum):
    """What a judge asks the sandbox's PID 1 (JSON on its control socket, which no worker holds)."""

    FORK = "fork"                # with two descriptors (the worker's requests and answers): start a worker
    END = "end"                  # the submission is over: kill every process, empty the scratch folders
    FENCE = "fence"              # the tests begin (worker pid given): stop the worker, end every other process
                                 # but its tests' fork
    CENSUS = "census"            # end every process that is neither the stopped worker nor its tests' fork
    RESUME = "resume"            # the tests are over: let the worker go on


class ZygoteEvent(str, Enum):
    """What the sandbox's PID 1 says (``{"ev": ..., ...}``); the judge believes only these."""

    READY = "ready"              # imports done; clean: the scratch folders are empty
    STARTED = "started"          # a worker was forked
    EXITED = "exited"            # the worker ended (status)
    CLEAN = "clean"              # after END: every other process killed and reaped, scratch emptied (removed: n)
    DIRTY = "dirty"              # after END: it could not: the judge throws this sandbox away
    FENCED = "fenced"            # after FENCE or CENSUS: ended (the processes it ended), fork (the tests' fork
                                 # as it found it, or 0)


class WorkerRefusal(str, Enum):
    """Why the worker could not do what it was asked, when that is not the learner's exception (a reply's
    ``refusal``)."""

    NO_FORK = "no-fork"          # TEST_BEGIN: the learner's code holds every process it may start


_LISTS = ("mutated", "rebound", "later", "tampered")


@dataclass(frozen=True)
class WorkerReply:
    """The worker's answer to one request, as the judge reads it (:meth:`parse`): every field it may hold, each
    checked for its type on receipt (a field of another type is as if absent). The worker's word is data only,
    and only the learner's notebook pays for a lie in it.

    ``ok`` and ``value`` (or ``missing``: a name the namespace does not hold; ``error``: the learner's exception,
    ``{type, message}``; ``refusal``: a :class:`WorkerRefusal`); for a call, what it changed in the test's inputs
    (``mutated``, ``rebound``, ``later``, ``watch``) and ``tampered`` (pieces of the check of changes replaced);
    for TEST_BEGIN, the fork's ``pid`` and the learner's ``threads``."""

    ok: bool
    value: object = None
    missing: bool = False
    error: dict | None = None
    refusal: WorkerRefusal | None = None
    mutated: list | None = None
    rebound: list | None = None
    later: list | None = None
    watch: int | None = None
    tampered: list | None = None
    threads: int | None = None
    pid: int | None = None

    @classmethod
    def parse(cls, data) -> "WorkerReply":
        """The reply in ``data`` (a decoded answer); raises :class:`WireError` if it is not one at all."""
        if not isinstance(data, dict):
            raise WireError("the worker's answer is not a reply")
        ints = {k: data.get(k) if type(data.get(k)) is int else None for k in ("watch", "threads", "pid")}
        lists = {k: data.get(k) if isinstance(data.get(k), list) else None for k in _LISTS}
        refusal = data.get("refusal")
        return cls(ok=data.get("ok") is True, value=data.get("value"), missing="missing" in data,
                   error=data.get("error") if isinstance(data.get("error"), dict) else None,
                   refusal=WorkerRefusal(refusal) if refusal in {r.value for r in WorkerRefusal} else None,
                   **ints, **lists)


MAX_MESSAGE = 64 * 2**20           # bytes; a bigger answer is refused (and fails the test)
_LEN = struct.Struct("<Q")


@dataclass(frozen=True)
class Caps:
    """What one answer from the worker may hold (the judge refuses anything more)."""
    message: int = MAX_MESSAGE         # bytes of the whole answer, tensors included
    header: int = 4 * 2**20            # bytes of its JSON header
    values: int = 200_000              # values (numbers, strings, containers, tensors) in it
    string: int = 100_000              # characters of one string
    depth: int = 60                    # nesting


CAPS = Caps()
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)}


class WireError(Exception):
    """The other side broke the protocol (a malformed, oversized or truncated message)."""


class WireTimeout(WireError):
    """The whole message did not arrive before the deadline."""


class Handle:
    """A reference to an object that lives in the worker (sent judge -> worker inside requests)."""

    __slots__ = ("id",)

    def __init__(self, id_: int):
        self.id = int(id_)

    def __reduce__(self):
        return (Handle, (self.id,))


def tensors(value, out: list | None = None, depth: int = 0) -> list:
    """The tensors in a call's arguments, in the one order both sides use to name them: depth first
    through lists, tuples and dicts (those exact types, and OrderedDict: a state_dict), into nothing else. The judge walks the
    arguments it sends (its stand-ins for learner objects are not containers: skipped); the worker walks
    the request as it arrived, before its handles become the learner's objects, so an object of the
    learner's (a list of tensors, say) never shifts the count on one side only. A call that changed
    argument ``i`` in place says ``i``, and the judge applies the change to its own tensor ``i``."""
    out = [] if out is None else out
    if isinstance(value, Handle):
        return out
    if type(value) in (list, tuple) and depth < 50:
        for v in value:
            tensors(v, out, depth + 1)
    elif (type(value) is dict or type(value) is collections.OrderedDict) and depth < 50:
        for v in value.values():
            tensors(v, out, depth + 1)
    elif issubclass(type(value), torch.Tensor):       # its real type: a stand-in's __class__ is not asked
        out.append(value)
    return out


def send(fd: int, payload: bytes, deadline: float | None = None) -> None:
    """One message. With ``deadline`` (the fd non-blocking), it must be taken by then."""
    data = _LEN.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                raise WireTimeout("the other side did not read in time")
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            continue
        view = view[n:]


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise WireError("the other side closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_into(fd: int, buf, deadline: float | None) -> None:
    """Fill ``buf`` from ``fd``; with a deadline (time.monotonic()), every byte must be in by then."""
    view, got = memoryview(buf), 0
    while got < len(view):
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise WireTimeout("the answer did not arrive in time")
        n = os.readv(fd, [view[got:got + (1 << 22)]])
        if n == 0:
            raise WireError("the other side closed the connection")
        got += n


def recv(fd: int, limit: int = MAX_MESSAGE, deadline: float | None = None) -> bytearray:
    """One message. With ``deadline``, the whole of it (length and payload) must arrive by then."""
    head = bytearray(_LEN.size)
    _read_into(fd, head, deadline)
    (n,) = _LEN.unpack(head)
    if n > limit:
        raise WireError(f"a message of {n} bytes is over the limit of {limit}")
    payload = bytearray(n)
    _read_into(fd, payload, deadline)
    return payload


# -- judge -> worker: pickle (trusted direction) ----------------------------------------------------

_HAS_NAMES = getattr(torch.Tensor, "has_names", None)     # named tensors (gone from recent PyTorch)


class _RequestPickler(pickle.Pickler):
    """Pickles a plain CPU tensor as its raw bytes, dtype and shape: ``torch.Tensor``'s own pickling goes
    through ``torch.save`` and costs ~0.3 ms a tensor both ways, which the thousands of tensors a batch's
    test calls send would pay many times over. Any other tensor (a view with strides, another device, a
    subclass, one with a graph or attributes) is pickled as PyTorch pickles it."""

    def reducer_override(self, obj):        # not called for exact ints, floats, strings, lists, tuples, dicts
        if type(obj) is torch.Tensor and obj.layout == torch.strided and obj.device.type == "cpu" and \
                obj.grad_fn is None and obj.is_contiguous() and not obj.is_conj() and not obj.is_neg() and \
                not (_HAS_NAMES is not None and _HAS_NAMES(obj)) and not obj.__dict__:
            name = str(obj.dtype).removeprefix("torch.")
            if name in _DTYPES:
                raw = obj.detach().reshape(-1).view(torch.uint8).numpy().tobytes() if obj.numel() else b""
                return _tensor, (raw, name, tuple(obj.shape), bool(obj.requires_grad))
        return NotImplemented


def _tensor(raw: bytes, dtype: str, shape: tuple, requires_grad: bool) -> torch.Tensor:
    """A tensor from :class:`_RequestPickler`'s raw bytes (a private, writable copy)."""
    d = _DTYPES[dtype]
    t = torch.frombuffer(bytearray(raw), dtype=d).reshape(shape) if raw else torch.empty(shape, dtype=d)
    return t.requires_grad_(True) if requires_grad else t


def encode_request(obj) -> bytes:
    buf = io.BytesIO()
    _RequestPickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


def decode_request(data: bytes):
    return pickle.loads(data)


# -- worker -> judge: data only ---------------------------------------------------------------------

_AS_IS = frozenset({str, bool, type(None)})       # sent exactly as they are


def encode_data(value, handle_of) -> bytes:
    """Encode ``value``; ``handle_of(obj) -> (id, type_info)`` is called for anything not data."""
    buffers: list[bytes] = []

    def enc(v, depth=0):
        if depth > 50:
            raise ValueError("the value is nested too deeply to send")
        if v is None or isinstance(v, (bool, str)):
            return v
        if type(v) in (list, tuple):       # the common case first; its str, bool and None items as they are
            if v and depth >= 50:
                raise ValueError("the value is nested too deeply to send")
            key = "$tuple" if type(v) is tuple else "$list"
            return {key: [x if type(x) in _AS_IS else enc(x, depth + 1) for x in v]}
        if isinstance(v, int):
            return v if -2**63 <= v < 2**63 else {"$bigint": str(v)}
        if isinstance(v, float):
            return {"$f": repr(v)} if v != v or v in (float("inf"), float("-inf")) else v
        if isinstance(v, torch.Size):
            return {"$tuple": [int(s) for s in v]}
        if isinstance(v, torch.dtype):
            return {"$dtype": str(v).removeprefix("torch.")}
        if isinstance(v, torch.device):
            return {"$device": str(v)}
        if isinstance(v, torch.Tensor) and v.layout == torch.strided and str(v.dtype).removeprefix("torch.") in _DTYPES:
            t = v.detach().to("cpu").resolve_conj().resolve_neg().contiguous()      # a conjugate view: its values
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""  # 0-dim too
            buffers.append(raw)
            return {"$t": len(buffers) - 1, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                    "param": isinstance(v, torch.nn.Parameter), "rg": bool(v.requires_grad)}
        if type(v) is dict and all(isinstance(k, (str, int)) for k in v):
            return {"$dict": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        if type(v).__name__ == "OrderedDict" and type(v).__module__ == "collections":
            return {"$dict": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        try:
            # optional: NumPy values, where NumPy is installed
            import numpy as np
            if isinstance(v, np.generic):
                return enc(v.item(), depth)
            if isinstance(v, np.ndarray) and v.dtype != object:
                return enc(torch.from_numpy(np.ascontiguousarray(v)), depth)
        except ImportError:  # pragma: no cover
            pass
        hid, info = handle_of(v)
        return {"$h": hid, "type": info}

    header = json.dumps({"v": enc(value), "sizes": [len(b) for b in buffers]}).encode()
    header += b" " * (-(8 + len(header)) % 64)          # tensors start aligned (JSON ignores the spaces)
    return struct.pack("<Q", len(header)) + header + b"".join(buffers)


_ITEMSIZE = {name: torch.empty((), dtype=d).element_size() for name, d in _DTYPES.items()}
_KEYS = {"$t": {"$t", "dtype", "shape", "param", "rg"}, "$h": {"$h", "type"}}


def decode_data(data, make_handle, caps: Caps = CAPS):
    """Decode a worker's answer; ``make_handle(id, type_info)`` builds the judge's stand-in.

    Only data is built: None, bools, numbers, strings, tuples, lists, dicts, dtypes, devices and
    tensors, which the judge makes itself from raw bytes, a dtype and a shape. Anything over a cap
    in :class:`Caps`, or not exactly in this form, raises :class:`WireError`."""
    if len(data) > caps.message:
        raise WireError(f"an answer of {len(data)} bytes is over the limit of {caps.message}")
    if len(data) < 8:
        raise WireError("truncated answer")
    (hn,) = struct.unpack_from("<Q", data, 0)
    if hn > len(data) - 8 or hn > caps.header:
        raise WireError("malformed or oversized answer header")
    try:
        header = json.loads(bytes(memoryview(data)[8:8 + hn]))
        sizes = header["sizes"]
        if not isinstance(header, dict) or not isinstance(sizes, list) or len(sizes) > caps.values or \
                not all(type(s) is int for s in sizes):
            raise TypeError("sizes")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise WireError(f"malformed answer header ({type(exc).__name__})") from None
    offsets, pos = [], 8 + hn
    for s in sizes:
        if s < 0 or pos + s > len(data):
            raise WireError("answer shorter than its header says")
        offsets.append((pos, s))
        pos += s
    if pos != len(data):
        raise WireError("answer longer than its header says")
    used: set[int] = set()
    count = [0]
    base = data if isinstance(data, bytearray) else bytearray(data)

    def string(x):
        if not isinstance(x, str) or len(x) > caps.string:
            raise WireError("a string in the answer is too long or malformed")
        return x

    def dec(v, depth=0):
        count[0] += 1
        if depth > caps.depth:
            raise WireError("answer nested too deeply")
        if count[0] > caps.values:
            raise WireError(f"an answer of more than {caps.values} values")
        if v is None or isinstance(v, (bool, int, float)):
            return v
        if isinstance(v, str):
            return string(v)
        if not isinstance(v, dict) or len(v) == 0:
            raise WireError("malformed value")
        if "$t" in v:
            if not set(v) <= _KEYS["$t"]:
                raise WireError("malformed tensor")
            dtype = _DTYPES.get(v.get("dtype")) if isinstance(v.get("dtype"), str) else None
            shape = v.get("shape", [])
            index = v["$t"]
            if dtype is None or not isinstance(shape, list) or len(shape) > 32 or \
                    not all(type(s) is int and 0 <= s < 2**40 for s in shape) or type(index) is not int or \
                    not 0 <= index < len(offsets) or index in used:
                raise WireError("malformed tensor")
            used.add(index)
            start, size = offsets[index]
            numel = 1
            for s in shape:
                numel *= s
            if numel * _ITEMSIZE[v["dtype"]] != size:
                raise WireError("tensor size does not match its shape")
            if numel == 0:
                t = torch.empty(shape, dtype=dtype)
            else:          # a view of the received buffer (no copy), unless it is not aligned
                t = torch.frombuffer(base, dtype=dtype, count=numel, offset=start).reshape(shape)
                if start % _ITEMSIZE[v["dtype"]]:
                    t = t.clone()
            if v.get("param"):
                return torch.nn.Parameter(t, requires_grad=bool(v.get("rg")) and t.is_floating_point())
            if v.get("rg") and t.is_floating_point():
                t.requires_grad_(True)
            return t
        if len(v) != 1 and "$h" not in v:
            raise WireError("malformed value")
        (key,) = list(v)[:1]
        x = v[key]
        if key in ("$tuple", "$list"):
            if not isinstance(x, list):
                raise WireError("malformed value")
            if x and depth + 1 > caps.depth:
                raise WireError("answer nested too deeply")
            items = []
            for y in x:            # the leaves here, counted and capped exactly as dec() would (it is slower)
                ty = type(y)
                if ty is str or ty is int or ty is float or ty is bool or y is None:
                    count[0] += 1
                    if count[0] > caps.values:
                        raise WireError(f"an answer of more than {caps.values} values")
                    if ty is str and len(y) > caps.string:
                        raise WireError("a string in the answer is too long or malformed")
                    items.append(y)
                else:
                    items.append(dec(y, depth + 1))
            return tuple(items) if key == "$tuple" else items
        if key == "$dict":
            if not isinstance(x, list) or not all(isinstance(p, list) and len(p) == 2 for p in x):
                raise WireError("malformed value")
            out = {}
            for k, y in x:
                k = dec(k, depth + 1)
                if not isinstance(k, (str, int, float, bool, type(None))):
                    raise WireError("malformed dict key")
                out[k] = dec(y, depth + 1)
            return out
        if key == "$f":
            if x not in ("nan", "inf", "-inf"):
                raise WireError("malformed float")
            return float(x)
        if key == "$bigint":
            if not isinstance(x, str) or len(x) > 400:
                raise WireError("malformed integer")
            try:
                return int(x)
            except ValueError:
                raise WireError("malformed integer") from None
        if key == "$dtype":
            d = _DTYPES.get(x) if isinstance(x, str) else None
            if d is None:
                raise WireError("unknown dtype")
            return d
        if key == "$device":
            if x not in ("cpu", "meta") and not (isinstance(x, str) and x.split(":")[0] in ("cuda", "mps")
                                                  and len(x) < 12):
                raise WireError("malformed device")
            return torch.device(x)
        if key == "$h":
            if not set(v) <= _KEYS["$h"] or type(x) is not int or not 0 < x < 2**62:
                raise WireError("malformed handle")
            return make_handle(x, _handle_info(v.get("type"), string))
        raise WireError("malformed value")

    try:
        return dec(header.get("v"))
    except RecursionError:
        raise WireError("answer nested too deeply") from None


def _handle_info(info, string) -> dict:
    """The description of a worker-side object, checked: a short class chain and a few flags."""
    if not isinstance(info, dict):
        return {}
    mro = info.get("mro", [])
    if not isinstance(mro, list) or len(mro) > 20 or not all(
            isinstance(m, list) and len(m) == 2 and all(isinstance(p, str) and len(p) <= 200 for p in m) for m in mro):
        raise WireError("malformed object description")
    name = info.get("name", "")
    return {"mro": [list(m) for m in mro], "callable": info.get("callable") is True,
            "is_class": info.get("is_class") is True, "name": string(name)[:100] if isinstance(name, str) else ""}

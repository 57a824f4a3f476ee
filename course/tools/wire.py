"""The grading wire: how the trusted judge and the sandboxed worker talk.

One message is an 8-byte length and a payload, over a pipe (no network: the sandbox has none).

* judge -> worker: a pickled request. The judge is trusted, so the worker may unpickle it.
* worker -> judge: **data only**, never pickle. A JSON header describes the value; tensors travel
  as raw bytes after it (dtype and shape in the header). Whatever the worker sends is the
  student's answer, to be checked, never code to run: the decoder builds only None, bools,
  numbers, strings, tuples, lists, dicts, dtypes, devices and tensors, and refers to every other
  object by a handle number.
"""

from __future__ import annotations

import json
import os
import pickle
import struct

import torch

MAX_MESSAGE = 256 * 2**20          # bytes; a bigger answer is refused (and fails the test)
_LEN = struct.Struct("<Q")
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)}


class WireError(Exception):
    """The other side broke the protocol (a malformed, oversized or truncated message)."""


class Handle:
    """A reference to an object that lives in the worker (sent judge -> worker inside requests)."""

    __slots__ = ("id",)

    def __init__(self, id_: int):
        self.id = int(id_)

    def __reduce__(self):
        return (Handle, (self.id,))


def send(fd: int, payload: bytes) -> None:
    data = _LEN.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
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


def recv(fd: int, limit: int = MAX_MESSAGE) -> bytes:
    (n,) = _LEN.unpack(_read_exact(fd, _LEN.size))
    if n > limit:
        raise WireError(f"a message of {n} bytes is over the limit of {limit}")
    return _read_exact(fd, n)


# -- judge -> worker: pickle (trusted direction) ----------------------------------------------------

def encode_request(obj) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def decode_request(data: bytes):
    return pickle.loads(data)


# -- worker -> judge: data only ---------------------------------------------------------------------

def encode_data(value, handle_of) -> bytes:
    """Encode ``value``; ``handle_of(obj) -> (id, type_info)`` is called for anything not data."""
    buffers: list[bytes] = []

    def enc(v, depth=0):
        if depth > 50:
            raise ValueError("the value is nested too deeply to send")
        if v is None or isinstance(v, (bool, str)):
            return v
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
            t = v.detach().to("cpu").contiguous()
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""  # 0-dim too
            buffers.append(raw)
            return {"$t": len(buffers) - 1, "dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                    "param": isinstance(v, torch.nn.Parameter), "rg": bool(v.requires_grad)}
        if type(v) in (tuple, list):
            key = "$tuple" if type(v) is tuple else "$list"
            return {key: [enc(x, depth + 1) for x in v]}
        if type(v) is dict and all(isinstance(k, (str, int)) for k in v):
            return {"$dict": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        if type(v).__name__ == "OrderedDict" and type(v).__module__ == "collections":
            return {"$dict": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        try:
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
    return struct.pack("<Q", len(header)) + header + b"".join(buffers)


def decode_data(data: bytes, make_handle):
    """Decode a worker's answer; ``make_handle(id, type_info)`` builds the judge's stand-in."""
    if len(data) < 8:
        raise WireError("truncated answer")
    (hn,) = struct.unpack("<Q", data[:8])
    if hn > len(data) - 8:
        raise WireError("malformed answer header")
    try:
        header = json.loads(data[8:8 + hn])
        sizes = [int(s) for s in header["sizes"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise WireError(f"malformed answer header ({exc})") from None
    offsets, pos = [], 8 + hn
    for s in sizes:
        if s < 0 or pos + s > len(data):
            raise WireError("answer shorter than its header says")
        offsets.append((pos, s))
        pos += s

    def dec(v, depth=0):
        if depth > 60:
            raise WireError("answer nested too deeply")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if not isinstance(v, dict) or len(v) == 0:
            raise WireError("malformed value")
        if "$t" in v:
            dtype = _DTYPES.get(v.get("dtype"))
            shape = [int(s) for s in v.get("shape", [])]
            if dtype is None or any(s < 0 for s in shape):
                raise WireError("malformed tensor")
            start, size = offsets[int(v["$t"])]
            numel = 1
            for s in shape:
                numel *= s
            itemsize = torch.empty((), dtype=dtype).element_size()
            if numel * itemsize != size:
                raise WireError("tensor size does not match its shape")
            if numel == 0:
                t = torch.empty(shape, dtype=dtype)
            else:
                t = torch.frombuffer(bytearray(data[start:start + size]), dtype=dtype).reshape(shape)
            if v.get("param"):
                return torch.nn.Parameter(t, requires_grad=bool(v.get("rg")) and t.is_floating_point())
            if v.get("rg") and t.is_floating_point():
                t.requires_grad_(True)
            return t
        if "$tuple" in v:
            return tuple(dec(x, depth + 1) for x in v["$tuple"])
        if "$list" in v:
            return [dec(x, depth + 1) for x in v["$list"]]
        if "$dict" in v:
            return {dec(k, depth + 1): dec(x, depth + 1) for k, x in v["$dict"]}
        if "$f" in v:
            return float(v["$f"])
        if "$bigint" in v:
            return int(v["$bigint"])
        if "$dtype" in v:
            d = _DTYPES.get(v["$dtype"])
            if d is None:
                raise WireError("unknown dtype")
            return d
        if "$device" in v:
            return torch.device(str(v["$device"]))
        if "$h" in v:
            return make_handle(int(v["$h"]), v.get("type") or {})
        raise WireError("malformed value")

    return dec(header.get("v"))

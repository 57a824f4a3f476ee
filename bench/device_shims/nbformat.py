"""A stand-in for nbformat.read on the GPU machine (which has no nbformat): the benchmarks only read cells."""
import json


class Node(dict):
    __getattr__ = dict.get


def _wrap(x):
    if isinstance(x, dict):
        return Node({k: _wrap(v) for k, v in x.items()})
    if isinstance(x, list):
        return [_wrap(v) for v in x]
    return x


def read(path, as_version=4):
    nb = _wrap(json.load(open(path)))
    for c in nb["cells"]:
        if isinstance(c.get("source"), list):
            c["source"] = "".join(c["source"])
    return nb

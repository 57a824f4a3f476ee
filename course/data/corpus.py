"""A character corpus that every machine has, offline: Python's own standard-library sources.

Lesson 09 trains a character language model and lesson 12 times attention on real token
sequences; both need text that is present without a download. Every Python installation ships
the sources of its standard library, so the corpus is the concatenation of a fixed, sorted list of
pure-Python modules (``STDLIB_MODULES``), read from the paths the running interpreter imports them
from (``importlib.util.find_spec``). The text differs slightly between Python versions (the
modules change), so ``CharCorpus.sha256`` says which text a run used; the list itself never
changes with the machine.

    corpus = load_corpus()                       # "stdlib", about 2 MB of Python
    corpus = load_corpus("my_book.txt")          # any UTF-8 text file
    x, y = corpus.batch("train", 32, 128, generator=torch.Generator().manual_seed(0))
    # x: (32, 128) token ids, y: the same windows shifted by one (y[:, t] == x[:, t + 1])

Tokens are characters; the vocabulary is the sorted set of characters of the text, so id order
is code-point order.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["STDLIB_MODULES", "CharCorpus", "load_corpus", "stdlib_text", "stdlib_sources"]

# Pure-Python modules present in every CPython from 3.11 on (none of them frozen, none removed by
# PEP 594), in sorted order. Packages contribute their ``__init__.py`` (``pathlib`` and ``zipfile``
# became packages in 3.12/3.13; that changes the text, not the list).
STDLIB_MODULES: tuple[str, ...] = (
    "argparse", "base64", "bisect", "calendar", "colorsys", "contextlib", "copy", "csv",
    "dataclasses", "datetime", "difflib", "enum", "fnmatch", "fractions", "functools", "getopt",
    "gettext", "glob", "gzip", "heapq", "hmac", "inspect", "ipaddress", "json.decoder",
    "json.encoder", "keyword", "linecache", "locale", "logging", "numbers", "operator", "optparse",
    "pathlib", "pprint", "queue", "random", "reprlib", "sched", "secrets", "shlex", "shutil",
    "statistics", "string", "tarfile", "textwrap", "threading", "timeit", "tokenize", "traceback",
    "types", "typing", "uuid", "warnings", "weakref", "zipfile",
)


def stdlib_sources(modules: tuple[str, ...] = STDLIB_MODULES) -> list[tuple[str, str]]:
    """``(module, path)`` for each module whose source file this interpreter has.

    A module that is frozen or shipped without its ``.py`` (some slim distributions) is skipped.
    """
    out = []
    for name in modules:
        spec = importlib.util.find_spec(name)
        origin = getattr(spec, "origin", None)
        if origin and origin.endswith(".py") and os.path.isfile(origin):
            out.append((name, origin))
    return out


def stdlib_text(modules: tuple[str, ...] = STDLIB_MODULES) -> str:
    """The sources of ``modules`` concatenated, each after a ``# ==== module ====`` line."""
    parts = []
    for name, path in stdlib_sources(modules):
        with open(path, encoding="utf-8", errors="replace") as f:
            parts.append(f"# ==== {name} ====\n{f.read()}\n")
    if not parts:
        raise FileNotFoundError(
            "this Python has none of the standard-library sources the corpus is made of "
            "(a slim installation?); pass a text file instead: load_corpus('some_text.txt')")
    return "".join(parts)


@dataclass
class CharCorpus:
    """A text, its character vocabulary and its train/validation token tensors.

    Attributes:
        text: the whole text.
        vocab: the sorted list of distinct characters; token id i is ``vocab[i]``.
        source: where the text came from ("stdlib" or the file's path).
        val_fraction: the share of the text (its end) held out as ``val``.
        train, val: 1-D LongTensors of token ids; ``val`` follows ``train`` in the text.
    """

    text: str
    source: str = "stdlib"
    val_fraction: float = 0.1
    vocab: list[str] = field(init=False)
    train: torch.Tensor = field(init=False, repr=False)
    val: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self):
        if len(self.text) < 4:
            raise ValueError(f"the corpus text has {len(self.text)} characters; it needs at least 4")
        if not 0.0 < self.val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}")
        self.vocab = sorted(set(self.text))
        self._codes = np.array([ord(c) for c in self.vocab], dtype=np.int64)   # sorted code points
        self._stoi = {c: i for i, c in enumerate(self.vocab)}
        ids = self.encode(self.text)
        n_val = max(2, int(round(len(ids) * self.val_fraction)))
        self.train, self.val = ids[:-n_val], ids[-n_val:]

    @property
    def vocab_size(self) -> int:
        """V, the number of distinct characters."""
        return len(self.vocab)

    @property
    def size(self) -> int:
        """The number of characters (= tokens) in the text."""
        return len(self.text)

    @property
    def sha256(self) -> str:
        """SHA-256 of the text encoded as UTF-8: which text a run trained on."""
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def encode(self, s: str) -> torch.Tensor:
        """Token ids of ``s``, a 1-D LongTensor; every character must be in the vocabulary."""
        if not s:
            return torch.zeros(0, dtype=torch.long)
        codes = np.frombuffer(s.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
        ids = np.searchsorted(self._codes, codes)
        ids_clipped = np.minimum(ids, len(self._codes) - 1)
        bad = self._codes[ids_clipped] != codes
        if bad.any():
            missing = sorted({chr(c) for c in codes[bad]})
            raise KeyError(f"characters not in the corpus vocabulary: {missing!r}")
        return torch.from_numpy(ids_clipped)

    def decode(self, ids) -> str:
        """The text of a sequence of token ids (a 1-D tensor or a list of ints)."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"decode takes one sequence (1-D), got shape {tuple(ids.shape)}; "
                                 "decode each row of a batch separately")
            ids = ids.tolist()
        return "".join(self.vocab[i] for i in ids)

    def split(self, name: str) -> torch.Tensor:
        """The token tensor of ``"train"`` or ``"val"``."""
        if name not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {name!r}")
        return self.train if name == "train" else self.val

    def batch(self, split: str, batch_size: int, block_size: int,
              generator: torch.Generator | None = None, device=None):
        """Random windows of the split: ``(x, y)``, both ``(batch_size, block_size)`` LongTensors.

        ``y`` is ``x`` shifted by one: ``y[b, t]`` is the character after ``x[b, t]`` in the text,
        so a model predicts ``y`` from ``x`` at every position. Window starts are uniform over the
        split, drawn from ``generator`` (same generator state, same batch).
        """
        data = self.split(split)
        if block_size + 1 > len(data):
            raise ValueError(f"block_size {block_size} needs at least {block_size + 1} tokens; "
                             f"the {split} split has {len(data)}")
        starts = torch.randint(0, len(data) - block_size, (batch_size,), generator=generator)
        offsets = torch.arange(block_size + 1)
        windows = data[starts[:, None] + offsets]                   # (B, T + 1)
        x, y = windows[:, :-1], windows[:, 1:]
        if device is not None:
            x, y = x.to(device), y.to(device)
        return x, y

    def unigram_loss(self, split: str = "val") -> float:
        """Cross-entropy (nats per character) of ``split`` under the train split's character
        frequencies (add-one smoothed): the loss of a model that ignores all context."""
        counts = torch.bincount(self.train, minlength=self.vocab_size).double() + 1.0
        logp = torch.log(counts / counts.sum())
        return float(-logp[self.split(split)].mean())


def load_corpus(path: str | os.PathLike | None = None, max_chars: int | None = None,
                val_fraction: float = 0.1) -> CharCorpus:
    """Load a character corpus.

    Args:
        path: ``None`` or ``"stdlib"`` for the standard-library sources of this Python, or the
            path of any UTF-8 text file.
        max_chars: keep only the first ``max_chars`` characters (a smaller, faster corpus).
        val_fraction: the share held out at the end of the text as the validation split.

    Returns:
        A ``CharCorpus``.
    """
    if path is None or str(path) == "stdlib":
        text, source = stdlib_text(), "stdlib"
    else:
        with open(path, encoding="utf-8", errors="replace") as f:
            text, source = f.read(), str(path)
    if max_chars is not None:
        if max_chars < 4:
            raise ValueError(f"max_chars must be at least 4, got {max_chars}")
        text = text[:max_chars]
    return CharCorpus(text, source=source, val_fraction=val_fraction)

"""Triton for lesson 16: compiled kernels on a GPU, Triton's interpreter on a CPU.

Triton compiles a ``@triton.jit`` kernel for an NVIDIA (or AMD) GPU. With ``TRITON_INTERPRET=1`` it runs
the same kernel on the CPU instead, one program after another, with NumPy arrays for its blocks: slow
(milliseconds per tile), but exact enough to check a kernel against PyTorch, and it needs no GPU. The
variable is read when a kernel is decorated and when ``triton`` is first imported (its own library of
``@jit`` functions, ``tl.sum`` and the like, is decorated then), so :func:`setup` sets it *before* the
notebook imports ``triton``.

Triton installs on Linux x86-64 only (``pip install triton``, about 1 GB; the course's set-up installs it
there). Elsewhere (macOS, Windows) the lesson's kernels cannot run: use a Linux machine or Colab.

:class:`TileCounter` counts, from outside a kernel, which tiles of a tensor each program loaded: the
lesson's measure of "causal tiles wholly in the future are skipped".
"""

from __future__ import annotations

import importlib.util
import os
import platform
import sys

__all__ = ["SUPPORTED", "WHERE", "available", "status", "setup", "prefer_interpreter", "interpreting", "TileCounter"]

SUPPORTED = sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")
WHERE = ("Triton installs on Linux x86-64 only (pip install triton, about 1 GB; `make setup` installs it there). "
         "On this machine lesson 16's kernels cannot run: open the lesson on a Linux machine or in Colab "
         "(Runtime > Change runtime type > GPU, then `pip install triton` if it is missing).")


def available() -> bool:
    """Whether ``triton`` can be imported here (found without importing it)."""
    try:
        return importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        return False


def status() -> tuple[str | None, str]:
    """``(version or None, a sentence)`` for ``course doctor``: how lesson 16's kernels run here."""
    if not available():
        return None, ("not installed: lesson 16 (FlashAttention in Triton) needs it. " +
                      ("Run `make setup` again." if SUPPORTED else WHERE))
    from importlib import metadata

    try:
        version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        version = "?"
    try:
        import torch

        gpu = torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - a broken torch is reported elsewhere
        gpu = False
    how = "lesson 16's kernels are compiled for the GPU" if gpu else \
        "lesson 16's kernels run in Triton's interpreter on the CPU (TRITON_INTERPRET=1; no GPU here)"
    return version, how


def interpreting() -> bool:
    """Whether kernels decorated from now on run in Triton's interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def prefer_interpreter() -> None:
    """Turn the interpreter on for this process where there is no CUDA GPU, before anything imports ``triton``.

    For a process that loads other libraries before a notebook's set-up cell (the grader's warm sandbox): some
    import ``triton`` as they load (``transformers``, through PyTorch's check for Triton), and a ``triton``
    imported without the interpreter cannot run kernels on a CPU. Does nothing once ``triton`` is imported.
    """
    if "triton" in sys.modules or interpreting() or not available():
        return
    import torch

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def setup(run):
    """Import Triton for this run: compiled kernels on a CUDA device, the interpreter everywhere else.

    Call it before anything imports ``triton``. Returns ``(triton, triton.language)``.

    Raises:
        RuntimeError: Triton is not installed here (the message says where the lesson runs), or it was
            imported earlier without the interpreter on a machine that needs it (restart the kernel).
    """
    if not available():
        raise RuntimeError("Triton is not installed here. " + WHERE)
    need = not str(getattr(run, "device", "cpu")).startswith("cuda")
    # float32 products in full precision on a GPU too (Triton's default there is TF32, ~1e-3): the lesson
    # compares float32 kernels with PyTorch to 1e-5; its bfloat16 runs are unaffected.
    os.environ.setdefault("TRITON_F32_DEFAULT", "ieee")
    if need and not interpreting():
        if "triton" in sys.modules:
            raise RuntimeError("triton was imported before the set-up cell, without its interpreter, and this "
                               "run has no GPU: restart the kernel and run the notebook from the top (the set-up "
                               "cell turns the interpreter on before it imports triton).")
        os.environ["TRITON_INTERPRET"] = "1"
    import triton
    import triton.language as tl

    return triton, tl


class TileCounter:
    """Counts the tiles of ``x`` that each program of a kernel loads, while the block is open.

    Works under Triton's interpreter only (it watches the interpreter's loads); ``x`` is a contiguous
    ``(B, H, T, Dh)`` tensor and a tile is ``tile`` consecutive positions of T. After the block,
    ``visited`` is the number of (program, batch·head, tile) triples read at least once: a kernel that
    skips a tile never loads it, whatever it computes. ``per_program`` maps each program's grid index to
    the tiles it read::

        with TileCounter(k, block_n) as counter:
            flash_attention_forward(q, k, v, causal=True, block_m=16, block_n=16)
        counter.visited          # B * H * n * (n + 1) / 2 for a causal launch with n = T / 16 tiles
    """

    def __init__(self, x, tile: int):
        if not x.is_contiguous() or x.dim() != 4:
            raise ValueError("TileCounter watches a contiguous (B, H, T, Dh) tensor")
        self.base = x.data_ptr()
        self.itemsize = x.element_size()
        self.numel = x.numel()
        self.T, self.Dh = x.shape[2], x.shape[3]
        self.tile = int(tile)
        self.per_program: dict[tuple, set] = {}
        self._saved = None

    def __enter__(self):
        if not interpreting():
            raise RuntimeError("TileCounter counts loads in Triton's interpreter (TRITON_INTERPRET=1), not on a GPU")
        import numpy as np
        from triton.runtime import interpreter

        builder = interpreter.interpreter_builder
        original = builder.create_masked_load
        counter = self

        def counted(ptrs, mask, other, cache_policy, is_volatile):
            addr = np.asarray(ptrs.data, dtype=np.uint64).reshape(-1)
            ok = np.broadcast_to(np.asarray(mask.data, dtype=bool), np.shape(ptrs.data)).reshape(-1)
            offset = addr.astype(np.int64) - counter.base
            inside = ok & (offset >= 0) & (offset < counter.numel * counter.itemsize)
            if inside.any():
                element = offset[inside] // counter.itemsize
                bh, t = element // (counter.T * counter.Dh), (element // counter.Dh) % counter.T
                seen = counter.per_program.setdefault(tuple(builder.grid_idx), set())
                seen.update(zip(bh.tolist(), (t // counter.tile).tolist()))
            return original(ptrs, mask, other, cache_policy, is_volatile)

        builder.create_masked_load = counted
        self._saved = (builder, original)
        return self

    def __exit__(self, *exc):
        builder, original = self._saved
        builder.create_masked_load = original
        self._saved = None
        return False

    @property
    def visited(self) -> int:
        """The number of (program, batch·head, tile) triples loaded."""
        return sum(len(tiles) for tiles in self.per_program.values())

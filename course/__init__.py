"""Helpers shared by every lesson of the attention course.

Notebooks import this package by name (``from course import checks, plots``). It holds the
infrastructure a learner may read -- profiles and devices, seeded data generators, plots and
widgets, a small training loop, the checks that test cells call -- and never a graded answer.

Shape letters used across the package (the glossary):
    B batch, T sequence length (T_q / T_k when queries and keys differ), D = d_model,
    H heads, Dh head size (D / H), V vocabulary size, N memory slots / patches.
"""

from course.config import Run, setup

__all__ = ["Run", "setup", "__version__"]
__version__ = "0.1.0"

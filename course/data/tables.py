"""Toy key/value tables for lesson 00: attention as a soft dictionary lookup.

A table has ``n`` entries; each entry has a name, a key (a unit vector in ``d_key`` dimensions: what
the entry is found by) and a value (a vector in ``d_value`` dimensions: what the entry returns).
Queries are noisy copies of keys, so a good lookup must tolerate noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Table", "key_value_table", "noisy_queries"]

_NAMES = ["apple", "bread", "cheese", "dates", "eggs", "figs", "grapes", "honey", "ice", "jam", "kale", "lemon",
          "mango", "nuts", "olive", "pear", "quince", "rice", "salt", "tea", "udon", "vanilla", "wasabi", "yam"]


@dataclass
class Table:
    names: list[str]
    keys: torch.Tensor     # (n, d_key), unit rows
    values: torch.Tensor   # (n, d_value)

    def __len__(self) -> int:
        return len(self.names)


def key_value_table(n: int = 8, d_key: int = 16, d_value: int = 4, *, seed: int = 0) -> Table:
    """A seeded table of ``n`` (<= 24) named entries with unit-norm keys and Gaussian values."""
    if not 1 <= n <= len(_NAMES):
        raise ValueError(f"n must be between 1 and {len(_NAMES)}, got {n}")
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(n, d_key, generator=g)
    keys = keys / keys.norm(dim=-1, keepdim=True)
    values = torch.randn(n, d_value, generator=g)
    return Table(names=list(_NAMES[:n]), keys=keys, values=values)


def noisy_queries(table: Table, m: int, noise: float, *, seed: int = 1):
    """``m`` queries, each a key of a random entry plus Gaussian noise of std ``noise`` per component.

    Returns:
        (queries[m, d_key], targets[m]): the queries and the index of the entry each one came from.
    """
    g = torch.Generator().manual_seed(seed)
    targets = torch.randint(0, len(table), (m,), generator=g)
    queries = table.keys[targets] + noise * torch.randn(m, table.keys.shape[1], generator=g)
    return queries, targets

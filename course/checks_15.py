"""Helpers for lesson 15's test cells (attention at serving time), so that each locked cell reads as its one idea.

Nothing here computes a graded answer. The tests call the learner's cache, quantiser, speculative sampler
and linear attention, and compare what comes back with what the test computes itself (visible tests: small
worked examples written in the cell; hidden tests: the instructor-side references in
``course/tools/references/refs_15.py``). Every helper works the same in the learner's kernel and under
the grader's judge, where the learner's objects are stand-ins and only data comes back.

* :class:`FixedLM`, :class:`BigramLM`: toy "models" for ``speculative_generate`` whose next-token
  distributions the tests know exactly: one fixed distribution whatever the context (then every token of a
  correct speculative generation is an independent draw from the target's distribution, so one long
  generation is a large sample), or one distribution per previous token (a bigram table: the transitions
  are checked). They map ids (B, T) to logits (B, T, V) like a real model, for any token id.
* :class:`CountedPasses`: a model that allows so many calls, then writes only a tripwire token: a generation
  that holds the tripwire called the model more often than allowed (the calls happen in the learner's
  process, so the count is read from the tokens).
* :func:`run_speculative`: one call of the learner's ``speculative_generate``, its result checked against
  the contract (a pair: the tokens and the number of accepted draft tokens).
* :func:`frequencies`, :func:`transitions`, :func:`check_token_frequencies`: what a generation drew, compared
  with the exact probabilities.
* :func:`cache_contents`, :func:`check_cache_holds`, :func:`attend_over_cache`: what the learner's
  ``SlidingWindowCache`` holds, sorted by position (the cache may keep its entries in any order).
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from course import checks

__all__ = ["FixedLM", "BigramLM", "CountedPasses", "run_speculative", "frequencies", "transitions", "check_token_frequencies",
           "cache_contents", "held_tokens", "check_cache_holds", "attend_over_cache", "run_cache", "random_kv", "distance_bias"]


class FixedLM(nn.Module):
    """A "language model" whose next-token logits are ``logits`` (V,) at every position, whatever it read."""

    def __init__(self, logits):
        super().__init__()
        self.register_buffer("logits", torch.as_tensor(logits, dtype=torch.float32).clone())

    def forward(self, idx):
        B, T = idx.shape
        return self.logits.expand(B, T, -1).clone()                  # (B, T, V)


class BigramLM(nn.Module):
    """A "language model" whose logits at position t depend on the token there: ``table[idx[:, t]]`` (a (V, V)
    table: row a holds the logits of the token that follows a)."""

    def __init__(self, table):
        super().__init__()
        self.register_buffer("table", torch.as_tensor(table, dtype=torch.float32).clone())

    def forward(self, idx):
        return self.table[idx]                                       # (B, T) -> (B, T, V)


class CountedPasses(nn.Module):
    """``model`` for its first ``passes`` calls; after them every position's logits put all the mass on ``tripwire``
    (a token ``model`` never writes), so the tokens of a generation show whether it called more often."""

    def __init__(self, model, passes, tripwire):
        super().__init__()
        self.model, self.passes, self.tripwire, self.calls = model, int(passes), int(tripwire), 0

    def forward(self, idx):
        self.calls += 1
        logits = self.model(idx)
        if self.calls > self.passes:
            logits = torch.full_like(logits, -1e4)
            logits[..., self.tripwire] = 0.0
        return logits


def run_speculative(fn, target, draft, idx, max_new_tokens, *, k=4, temperature=1.0, seed=0):
    """``fn(target, draft, idx, max_new_tokens, k=k, temperature=temperature, generator=...)``, checked to return
    ``(tokens (1, T0 + max_new_tokens) LongTensor starting with idx, accepted)`` with ``0 <= accepted <=
    max_new_tokens``. Returns ``(tokens, accepted as an int)``."""
    out = checks.call(fn, target, draft, idx, max_new_tokens, k=k, temperature=temperature,
                      generator=torch.Generator().manual_seed(seed), what="speculative_generate")
    what = f"speculative_generate(..., max_new_tokens={max_new_tokens}, k={k})"
    checks.check(isinstance(out, (tuple, list)) and len(out) == 2,
                 f"{what} should return a pair (tokens, accepted); it returned a {type(out).__name__}.")
    tokens, accepted = out
    checks.check_shape(tokens, (1, idx.shape[1] + max_new_tokens), f"the tokens {what} returned (prompt of {idx.shape[1]})")
    checks.check(tokens.dtype == torch.long, f"the tokens {what} returned should be a LongTensor of ids; yours is {tokens.dtype}.")
    checks.check(torch.equal(tokens[:, :idx.shape[1]], idx), f"the tokens {what} returned should start with the prompt, unchanged.")
    if isinstance(accepted, torch.Tensor) and accepted.numel() == 1 and not accepted.is_floating_point():
        accepted = int(accepted.item())
    checks.check(isinstance(accepted, numbers.Integral) and not isinstance(accepted, bool),
                 f"{what}: `accepted` should be an int (how many draft tokens were accepted); yours is a "
                 f"{type(accepted).__name__}.")
    accepted = int(accepted)
    checks.check(0 <= accepted <= max_new_tokens, f"{what} says {accepted} draft tokens were accepted, out of "
                                                  f"{max_new_tokens} new tokens: it should be between 0 and {max_new_tokens}.")
    return tokens, accepted


def check_token_frequencies(freq, probs, what, *, atol, hint=""):
    """Sampled frequencies ``freq`` match the exact probabilities ``probs`` (both (R, V); a row per previous token
    for transitions, or one row): a token of probability 0 is never drawn, and every frequency is within ``atol``
    of its probability (``atol`` about 5 standard errors of the sample: a correct sampler fails by chance about
    once in a million checks)."""
    freq = torch.as_tensor(freq, dtype=torch.float64)
    probs = torch.as_tensor(probs, dtype=torch.float64)
    checks.check_shape(freq, tuple(probs.shape), f"the frequencies of {what}")
    rows = probs.shape[0] > 1

    def where(r, j):
        return f"after token {r}, token {j}" if rows else f"token {j}"

    never = (probs == 0) & (freq > 0)
    if bool(never.any()):
        r, j = never.nonzero()[0].tolist()
        raise AssertionError(f"{what}: {where(r, j)} came {freq[r, j].item():.3f} of the time, but the target never writes "
                             f"it (probability 0). {hint}".strip())
    gap = (freq - probs).abs()
    if bool((gap > atol).any()):
        r, j = divmod(int(gap.argmax()), probs.shape[1])
        raise AssertionError(f"{what}: {where(r, j)} came {freq[r, j].item():.3f} of the time, but the target's probability "
                             f"is {probs[r, j].item():.3f} (a sample this size is within {atol} of it). {hint}".strip())


def frequencies(tokens, start, vocab_size):
    """(1, V) frequencies of the ids ``tokens[0, start:]``."""
    new = tokens[0, start:]
    return (torch.bincount(new, minlength=vocab_size).double() / max(1, len(new)))[None]


def transitions(tokens, start, vocab_size):
    """(V, V) frequencies of the next token given the previous one, over the pairs whose second token is new
    (position >= start); row a counts what followed a (rows with no pair are zero); and the counts per row."""
    seq = tokens[0]
    prev, nxt = seq[start - 1:-1], seq[start:]
    counts = torch.zeros(vocab_size * vocab_size, dtype=torch.float64)
    counts.index_add_(0, prev * vocab_size + nxt, torch.ones(len(nxt), dtype=torch.float64))
    counts = counts.view(vocab_size, vocab_size)
    rows = counts.sum(1, keepdim=True)
    return counts / rows.clamp_min(1), rows.squeeze(1)


# -- the sliding-window cache -----------------------------------------------------------------------------

def random_kv(B, H, T, Dh, *, seed, Dv=None):
    """Seeded (q, k, v): queries and keys (B, H, T, Dh), values (B, H, T, Dv)."""
    g = torch.Generator().manual_seed(seed)
    Dv = Dh if Dv is None else Dv
    return (torch.randn(B, H, T, Dh, generator=g), torch.randn(B, H, T, Dh, generator=g),
            torch.randn(B, H, T, Dv, generator=g))


def run_cache(cls, window, n_sinks, k, v, chunks=None, what="SlidingWindowCache"):
    """A fresh learner ``cls(window, n_sinks)`` fed ``k``, ``v`` (B, H, T, Dh) in ``chunks`` (sizes summing to
    T; one token at a time by default). Returns the cache."""
    cache = checks.call(cls, window, n_sinks, what=f"{what}.__init__")
    T = k.shape[2]
    chunks = chunks or [1] * T
    start = 0
    for n in chunks:
        checks.call(cache.append, k[:, :, start:start + n], v[:, :, start:start + n], what=f"{what}.append")
        start += n
    return cache


def cache_contents(cache, what="your cache"):
    """``(keys, values, positions)`` the learner's cache holds, sorted by position (the cache may keep them in
    any order, as long as entry i of keys(), values() and positions() is one token)."""
    keys = checks.call(cache.keys, what="SlidingWindowCache.keys")
    values = checks.call(cache.values, what="SlidingWindowCache.values")
    positions = checks.call(cache.positions, what="SlidingWindowCache.positions")
    checks.check_type(keys, torch.Tensor, f"{what}.keys()")
    checks.check_type(values, torch.Tensor, f"{what}.values()")
    checks.check_type(positions, torch.Tensor, f"{what}.positions()")
    checks.check(keys.dim() == 4, f"{what}.keys() should be (B, H, n, Dh); it has shape {tuple(keys.shape)}.")
    checks.check(positions.dim() == 1 and positions.shape[0] == keys.shape[2] == values.shape[2],
                 f"{what}: keys() has {keys.shape[2]} entries along dim 2, values() {values.shape[2]} and positions() "
                 f"has shape {tuple(positions.shape)}; they should describe the same n cached tokens (positions() of shape (n,)).")
    checks.check(not positions.is_floating_point(), f"{what}.positions() should hold integer positions; it is {positions.dtype}.")
    order = torch.argsort(positions)
    return keys[:, :, order], values[:, :, order], positions[order]


def held_tokens(cache, k, v, what):
    """Which of the appended tokens (their indices in ``k`` (B, H, T, Dh), in the order they were appended) the
    learner's cache holds, found by their keys (every appended key is distinct), whatever order the cache keeps
    them in and whatever positions it reports. Checks that each held value belongs to the same token as its key."""
    keys = checks.call(cache.keys, what="SlidingWindowCache.keys")
    values = checks.call(cache.values, what="SlidingWindowCache.values")
    checks.check_type(keys, torch.Tensor, f"{what}.keys()")
    checks.check_type(values, torch.Tensor, f"{what}.values()")
    B, H, T, Dh = k.shape
    checks.check(keys.dim() == 4 and tuple(keys.shape[:2]) == (B, H) and keys.shape[3] == Dh,
                 f"{what}.keys() should be (B, H, n, Dh) = ({B}, {H}, n, {Dh}); it has shape {tuple(keys.shape)}.")
    checks.check(values.dim() == 4 and values.shape[2] == keys.shape[2] and tuple(values.shape[:2]) == (B, H)
                 and values.shape[3] == v.shape[3],
                 f"{what}.values() should be (B, H, n, Dv) = ({B}, {H}, {keys.shape[2]}, {v.shape[3]}), like keys(); it "
                 f"has shape {tuple(values.shape)}.")
    same = (keys[:, :, :, None, :] == k[:, :, None, :, :]).all(-1).all(1).all(0)       # (n, T): entry i is token j
    found = []
    for i in range(same.shape[0]):
        js = same[i].nonzero().flatten().tolist()
        checks.check(len(js) == 1, f"entry {i} of {what}.keys() is not one of the keys that were appended (batch and heads "
                                   "kept together, unchanged): the cache should hold the keys it was given.")
        checks.check(torch.equal(values[:, :, i], v[:, :, js[0]]),
                     f"entry {i} of {what}.keys() is the key of token {js[0]}, but entry {i} of values() is not that "
                     "token's value: keys()[:, :, i] and values()[:, :, i] must belong to the same token.")
        found.append(js[0])
    return found


def check_cache_holds(cache, expected, k, v, what, hint=""):
    """The learner's cache holds exactly the appended tokens ``expected`` (indices = positions, a list), each once,
    keys with their values (identified by their keys: positions() is not read here)."""
    found = held_tokens(cache, k, v, what)
    checks.check(sorted(found) == sorted(set(found)), f"{what} holds some token twice (tokens {sorted(found)}): a token "
                                                      "that is both a sink and in the window is kept once.")
    checks.check(sorted(found) == sorted(expected), f"{what} holds tokens {sorted(found)} (numbered from 0 in the order "
                                                    f"they were appended); it should hold {sorted(expected)}. " + hint)


def distance_bias(n_heads, max_distance=8, seed=0):
    """A (H, max_distance + 1) table of biases by distance, as a relative-position model adds to its scores
    (the tests use it so that a wrong position shows in the attention)."""
    return 2.0 * torch.randn(n_heads, max_distance + 1, generator=torch.Generator().manual_seed(seed))


def attend_over_cache(q, keys, values, positions, q_pos, bias, allowed=None):
    """Attention of queries ``q`` (B, H, T_q, Dh) at positions ``q_pos`` (T_q,) over keys and values at
    ``positions`` (n,), scores ``q.k / sqrt(Dh) + bias[h, min(q_pos - pos, max_distance)]``, keys after a query
    masked (and, with ``allowed`` (T_q, n), every key where it is False): what a model with a relative-position
    bias computes from a cache. Returns (B, H, T_q, Dv)."""
    d = q_pos[:, None] - positions[None, :].to(q_pos.dtype)                      # (T_q, n)
    scores = q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1])                 # (B, H, T_q, n)
    scores = scores + bias[:, d.clamp(0, bias.shape[1] - 1)]
    scores = scores.masked_fill(d < 0, float("-inf"))
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values

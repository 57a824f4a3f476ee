"""Lesson 15's model and measuring tools (attention at serving time); never a graded answer.

The learner writes the sliding-window cache, the int8 quantiser, speculative sampling and linear
attention; this module holds what the lesson's experiments run them *on* and *with*:

``ServingLM``       a small character language model whose attention knows positions only through a
                    learned bias of the distance between query and key (T5's relative position bias,
                    distances clipped at ``max_distance``): no absolute position table, so a key keeps
                    its meaning when the tokens before it leave a sliding window. It runs one pass over
                    a sequence (``forward``, with an optional sliding-window mask), or one token at a
                    time through any cache object with ``append``/``keys``/``values``/``positions``
                    (``step``). With ``mixer=`` it uses another attention (the learner's linear
                    attention) instead of softmax over the scores.
``BigramDraft``     the corpus's bigram table as a draft model (one lookup per token).
``CallCounter``     wraps a model and counts its forward passes and the tokens they read.
``CallRecorder``    wraps a model and keeps the ids of every call (the speculative widget reads the
                    rounds back from the target's calls with :func:`speculation_rounds`).
``chi_square``      Pearson's goodness-of-fit test of observed counts against exact probabilities.
``kv_bytes``        bytes of a list of tensors (a cache, quantised or not), scales included.

Shape letters: B batch, T sequence, D = d_model, H heads, Dh head size, V vocabulary.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch
from torch import nn

__all__ = ["ServingAttention", "ServingLM", "BigramDraft", "window_mask", "CallCounter", "CallRecorder", "speculation_rounds",
           "chi_square", "kv_bytes"]


def window_mask(T: int, window: int, n_sinks: int = 0, device=None) -> torch.Tensor:
    """(T, T) boolean, True where query i may attend to key j: the last ``window`` keys up to itself
    (i - window < j <= i) and the first ``n_sinks`` keys of the text (j < n_sinks, j <= i)."""
    i = torch.arange(T, device=device)[:, None]
    j = torch.arange(T, device=device)[None, :]
    return (j <= i) & ((j > i - window) | (j < n_sinks))


class ServingAttention(nn.Module):
    """Causal multi-head attention whose scores get a learned bias per head and per distance.

    ``scores[h, i, j] = q_i . k_j / sqrt(Dh) + distance_bias[h, min(pos_i - pos_j, max_distance)]``: the
    bias depends only on how far back key j is (clipped: every key at least ``max_distance`` back shares
    the last bias), never on where the sequence started. With ``mixer`` (a function ``mixer(q, k, v)`` of
    (B, H, T, Dh) tensors, causal) the scores and the bias are not used.
    """

    def __init__(self, d_model: int, n_heads: int, max_distance: int = 32, mixer: Callable | None = None):
        super().__init__()
        assert d_model % n_heads == 0, "n_heads must divide d_model"
        self.n_heads, self.max_distance, self.mixer = n_heads, max_distance, mixer
        D = d_model
        self.qkv = nn.Linear(D, 3 * D)                              # [q | k | v], as in lesson 09
        self.proj = nn.Linear(D, D)
        if mixer is None:
            self.distance_bias = nn.Parameter(torch.zeros(n_heads, max_distance + 1))

    def heads(self, x):
        """(B, T, D) -> q, k, v, each (B, H, T, Dh)."""
        B, T, D = x.shape
        q, k, v = self.qkv(x).split(D, dim=-1)
        return [t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2) for t in (q, k, v)]

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """(T_q,), (T_k,) absolute positions -> (H, T_q, T_k) additive bias; -inf on keys in a query's future."""
        d = q_pos[:, None] - k_pos[None, :]                                   # (T_q, T_k): how far back
        b = self.distance_bias[:, d.clamp(0, self.max_distance)]               # (H, T_q, T_k)
        return b.masked_fill(d < 0, float("-inf"))

    def attend(self, q, k, v, q_pos, k_pos, allowed=None):
        """Softmax attention with the distance bias: (out (B, H, T_q, Dh), weights (B, H, T_q, T_k))."""
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])            # (B, H, T_q, T_k)
        scores = scores + self.bias(q_pos, k_pos)
        if allowed is not None:
            scores = scores.masked_fill(~allowed, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return weights @ v, weights                                            # (B, H, T_q, Dh)

    def merge(self, out):
        B, H, T, Dh = out.shape
        return self.proj(out.transpose(1, 2).reshape(B, T, H * Dh))           # (B, H, T, Dh) -> (B, T, D)

    def forward(self, x, positions, allowed=None, kv_transform=None):
        """One pass over x (B, T, D) at ``positions`` (T,). Returns (out (B, T, D), weights or None)."""
        q, k, v = self.heads(x)
        if kv_transform is not None:                       # what a cache would hand back (int8 round trip)
            k, v = kv_transform(k), kv_transform(v)
        if self.mixer is not None:
            return self.merge(self.mixer(q, k, v)), None
        out, weights = self.attend(q, k, v, positions, positions, allowed)
        return self.merge(out), weights

    def step(self, x, position: int, cache):
        """One new token x (B, 1, D) at absolute ``position``: its key and value go into ``cache`` (any object
        with ``append(k, v)``, ``keys()``, ``values()``, ``positions()``), then the query attends to what the
        cache holds. Returns (out (B, 1, D), weights (B, H, 1, n_cached))."""
        q, k, v = self.heads(x)
        cache.append(k, v)
        keys, values, k_pos = cache.keys(), cache.values(), cache.positions()
        q_pos = torch.tensor([position], device=x.device)
        out, weights = self.attend(q, keys.to(q.dtype), values.to(q.dtype), q_pos, k_pos.to(x.device))
        return self.merge(out), weights


class ServingBlock(nn.Module):
    """Pre-norm block: x + attn(ln1(x)), then x + mlp(ln2(x)) (GPT-2's layout, lesson 09)."""

    def __init__(self, d_model, n_heads, max_distance, mixer=None):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = ServingAttention(d_model, n_heads, max_distance, mixer)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))


class ServingLM(nn.Module):
    """A character language model for serving experiments: no position table, a distance bias instead.

    Token embedding -> ``n_layers`` pre-norm blocks (:class:`ServingAttention`, an MLP) -> LayerNorm ->
    a head tied to the embedding. It reads sequences of any length (positions enter only as distances,
    clipped at ``max_distance``), which is what a sliding window needs: when old tokens leave the cache, the
    ones that stay keep their keys, and their distance to the new query is still known.

    Args:
        vocab_size: V.
        d_model, n_heads, n_layers: D, H and the number of blocks.
        max_distance: distances 0 .. max_distance - 1 get a bias each; every key further back shares one.
        mixer: None for softmax attention with the distance bias; or a function ``mixer(q, k, v)`` of
            (B, H, T, Dh) tensors computing causal attention another way (the lesson's linear attention).

    ``forward(idx (B, T), window=None, n_sinks=0, kv_transform=None, return_weights=False)`` -> logits
    (B, T, V) (and the list of per-layer weights (B, H, T, T)); ``window`` and ``n_sinks`` mask every
    block's softmax attention to the sinks and the window; ``kv_transform`` is applied to every key and
    value (what a quantised cache would hand back). ``step(idx (B, 1), position, caches)`` -> logits
    (B, 1, V) for one new token through one cache per layer; ``step_recurrent`` the same with a mixer's
    state instead of a cache.
    """

    def __init__(self, vocab_size: int, d_model: int = 64, n_heads: int = 2, n_layers: int = 2,
                 max_distance: int = 32, mixer: Callable | None = None):
        super().__init__()
        V, D = vocab_size, d_model
        self.tok_emb = nn.Embedding(V, D)
        self.blocks = nn.ModuleList(ServingBlock(D, n_heads, max_distance, mixer) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(D)
        self.head = nn.Linear(D, V, bias=False)
        self.head.weight = self.tok_emb.weight                       # tied, as in lesson 09
        with torch.no_grad():                                        # GPT-2's initialisation
            for name, p in self.named_parameters():
                if name.endswith("distance_bias"):
                    continue                                         # no distance preferred at the start
                if p.dim() == 2:
                    p.normal_(0.0, 0.02)                             # every matrix (the tied embedding once)
                elif name.endswith("bias"):
                    p.zero_()

    @property
    def n_layers(self) -> int:
        return len(self.blocks)

    def forward(self, idx, window=None, n_sinks=0, kv_transform=None, return_weights=False):
        B, T = idx.shape
        positions = torch.arange(T, device=idx.device)
        allowed = window_mask(T, window, n_sinks, idx.device) if window is not None else None
        x = self.tok_emb(idx)                                       # (B, T, D): no position vector
        maps = []
        for block in self.blocks:
            a, w = block.attn(block.ln1(x), positions, allowed, kv_transform)
            x = x + a
            x = x + block.mlp(block.ln2(x))
            maps.append(w)
        logits = self.head(self.ln_f(x))                            # (B, T, V)
        return (logits, maps) if return_weights else logits

    def step(self, idx, position: int, caches: Sequence, return_weights=False):
        """The logits (B, 1, V) of one new token ``idx`` (B, 1) at absolute ``position``; ``caches[i]`` is
        block i's key/value cache (it receives the new key and value)."""
        x = self.tok_emb(idx)
        maps = []
        for block, cache in zip(self.blocks, caches):
            a, w = block.attn.step(block.ln1(x), position, cache)
            x = x + a
            x = x + block.mlp(block.ln2(x))
            maps.append(w)
        logits = self.head(self.ln_f(x))
        return (logits, maps) if return_weights else logits

    def step_recurrent(self, idx, states: Sequence, recurrent: Callable):
        """One new token ``idx`` (B, 1) through a model whose attention is a recurrence with a state:
        ``recurrent(q, k, v, state=..., return_state=True) -> (out, state)`` (the lesson's linear attention).
        ``states[i]`` is block i's state (None at the start). Returns (logits (B, 1, V), the new states)."""
        x = self.tok_emb(idx)
        new = []
        for block, state in zip(self.blocks, states):
            q, k, v = block.attn.heads(block.ln1(x))
            out, state = recurrent(q, k, v, state=state, return_state=True)
            x = x + block.attn.merge(out)
            x = x + block.mlp(block.ln2(x))
            new.append(state)
        return self.head(self.ln_f(x)), new

    def project(self, block: int, x):
        """q, k, v (B, H, T, Dh) of ``block`` for its input x (B, T, D) (before its first LayerNorm)."""
        b = self.blocks[block]
        return b.attn.heads(b.ln1(x))

    def keys_values(self, idx):
        """Every block's keys and values on ``idx`` (B, T): a list of (k, v), each (B, H, T, Dh): what a full
        cache would hold after reading idx."""
        out = []
        x = self.tok_emb(idx)
        T = idx.shape[1]
        positions = torch.arange(T, device=idx.device)
        for block in self.blocks:
            h = block.ln1(x)
            _, k, v = block.attn.heads(h)
            out.append((k, v))
            a, _ = block.attn(h, positions)
            x = x + a
            x = x + block.mlp(block.ln2(x))
        return out


class BigramDraft(nn.Module):
    """The cheapest draft there is: one (V, V) table, the logits of the next token given the current one.

    ``BigramDraft.from_counts(ids, V)`` fills it with the log-frequencies of each pair of consecutive tokens in
    ``ids`` (add-``smoothing`` counts): the bigram model of the corpus, no training. A forward pass is one
    table lookup per position.
    """

    def __init__(self, vocab_size: int):
        super().__init__()
        self.table = nn.Embedding(vocab_size, vocab_size)

    @classmethod
    def from_counts(cls, ids: torch.Tensor, vocab_size: int, smoothing: float = 0.1) -> "BigramDraft":
        pairs = ids[:-1] * vocab_size + ids[1:]
        counts = torch.bincount(pairs, minlength=vocab_size * vocab_size).view(vocab_size, vocab_size).double() + smoothing
        model = cls(vocab_size)
        with torch.no_grad():
            model.table.weight.copy_(torch.log(counts / counts.sum(1, keepdim=True)).float())
        return model.eval()

    def forward(self, idx):
        return self.table(idx)                                      # (B, T) -> (B, T, V)


class CallCounter(nn.Module):
    """``model`` unchanged, counting its forward passes (``calls``) and the token positions they read (``tokens``)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.calls, self.tokens = model, 0, 0

    def forward(self, idx, *args, **kwargs):
        self.calls += 1
        self.tokens += idx.numel()
        return self.model(idx, *args, **kwargs)

    def reset(self) -> None:
        self.calls = self.tokens = 0


class CallRecorder(nn.Module):
    """``model`` unchanged, keeping a copy of the ids of every forward pass in ``inputs``."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model, self.inputs = model, []

    def forward(self, idx, *args, **kwargs):
        self.inputs.append(idx.detach().clone())
        return self.model(idx, *args, **kwargs)


def speculation_rounds(target_inputs: Sequence[torch.Tensor], output: torch.Tensor, prompt_len: int) -> list[dict]:
    """The rounds of a speculative generation, read back from what the target was called with.

    Each round calls the target once on the accepted text followed by the draft's proposals. Comparing a
    call with the final ``output`` (1, T) tells which proposals were kept (they are in the output) and where
    the first rejected one was replaced. Returns one dict per round: ``start`` (where its proposals begin),
    ``proposed`` (their ids), ``kept`` (how many were accepted) and ``target_token`` (the token the target
    added: the replacement of the first rejected proposal, or the bonus after all were kept; None when the
    output ends first).
    """
    out = output[0].tolist()
    rounds, start = [], prompt_len
    for ids in target_inputs:
        ids = ids[0].tolist()
        if len(ids) <= start or ids[:start] != out[:start]:
            continue                                            # not a call on the accepted text (or a draft-like call)
        proposed = ids[start:]
        kept = 0
        while kept < len(proposed) and start + kept < len(out) and proposed[kept] == out[start + kept]:
            kept += 1
        nxt = start + kept
        rounds.append(dict(start=start, proposed=proposed, kept=kept,
                           target_token=out[nxt] if nxt < len(out) else None))
        start = nxt + 1
        if start >= len(out):
            break
    return rounds


def chi_square(counts: torch.Tensor, probs: torch.Tensor, *, min_expected: float = 5.0) -> tuple[float, int, float]:
    """Pearson's chi-square test of ``counts`` (observed, any shape) against exact ``probs`` (same shape).

    Cells whose expected count is below ``min_expected`` are pooled into one cell (the usual rule for the
    chi-square approximation to hold). Returns (statistic, degrees of freedom, p-value); the p-value is
    the chance of a statistic at least this large if the counts were drawn from ``probs``.
    """
    counts = counts.double().flatten()
    probs = probs.double().flatten()
    n = counts.sum()
    expected = n * probs / probs.sum()
    big = expected >= min_expected
    obs = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    exp = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    if exp[-1] < 1e-12:                                          # nothing pooled: drop the empty cell
        if obs[-1] > 0:
            return math.inf, int(big.sum()), 0.0
        obs, exp = obs[:-1], exp[:-1]
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = max(1, len(obs) - 1)
    p = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64)))
    return stat, dof, p


def kv_bytes(tensors) -> int:
    """Bytes held by the tensors of a cache (codes and scales alike): numel x element size, summed."""
    return int(sum(t.numel() * t.element_size() for t in tensors))

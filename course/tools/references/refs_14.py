"""Oracles for lesson 14's hidden tests (induction heads). Instructor side: never shipped to learners.

Everything is computed in float64 from a model's ``state_dict()`` (the learner's module is only read),
written out with explicit indices so that it is independent of how the learner wrote theirs:

* :func:`reference_forward`: the two-layer attention-only Transformer of the lesson (token and learned
  position embeddings, causal multi-head attention with ``w_q, w_k, w_v, w_o`` and no bias, residual
  additions, no MLP, no norm, an unembedding without bias), with heads ablated on request;
* :func:`reference_previous_token_score`, :func:`reference_induction_score`: the scores, one head at a
  time, query by query;
* :func:`reference_ov_circuit`, :func:`reference_qk_circuit`, :func:`reference_composition_score`.

Conventions (the lesson's): ``nn.Linear`` computes ``x @ weight.T``; head ``h`` owns columns
``h*Dh:(h+1)*Dh`` of q, k, v and of the input of ``w_o``.
"""

from __future__ import annotations

import math

import torch

__all__ = ["reference_forward", "reference_previous_token_score", "reference_induction_score",
           "reference_ov_circuit", "reference_qk_circuit", "reference_composition_score", "n_layers_of"]


def _w(state: dict, name: str) -> torch.Tensor:
    return state[name].detach().to("cpu", torch.float64)


def n_layers_of(state: dict) -> int:
    """How many ``layers.i.w_q.weight`` the state dict holds."""
    return sum(1 for k in state if k.startswith("layers.") and k.endswith(".w_q.weight"))


def reference_forward(state: dict, idx: torch.Tensor, n_heads: int, ablate: dict | None = None):
    """``(logits (B, T, V), [weights (B, H, T, T) per layer])`` in float64.

    ``ablate`` maps a layer to the heads whose output (their weighted sum of values, before ``w_o``) is
    zeroed; the ablated heads' own weights are computed as usual.
    """
    ablate = ablate or {}
    B, T = idx.shape
    x = _w(state, "embed.weight")[idx] + _w(state, "pos.weight")[:T][None]      # (B, T, D)
    D = x.shape[-1]
    Dh = D // n_heads
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    maps = []
    for i in range(n_layers_of(state)):
        q, k, v = (x @ _w(state, f"layers.{i}.w_{n}.weight").T for n in "qkv")   # (B, T, D)
        z = torch.zeros_like(x)                                                  # the heads' outputs, side by side
        layer_maps = []
        for h in range(n_heads):
            s = slice(h * Dh, (h + 1) * Dh)
            scores = q[..., s] @ k[..., s].transpose(-2, -1) / math.sqrt(Dh)      # (B, T, T)
            w = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            layer_maps.append(w)
            if h not in set(ablate.get(i, ())):
                z[..., s] = w @ v[..., s]
        maps.append(torch.stack(layer_maps, dim=1))                              # (B, H, T, T)
        x = x + z @ _w(state, f"layers.{i}.w_o.weight").T
    return x @ _w(state, "unembed.weight").T, maps


def reference_previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """(B, H, T, T) -> (H,): the mean, over the batch and the queries t = 1 .. T-1, of weights[t, t-1]."""
    w = weights.detach().to(torch.float64)
    T = w.shape[-1]
    vals = [w[:, :, t, t - 1] for t in range(1, T)]
    return torch.stack(vals, dim=-1).mean(dim=(0, 2))


def reference_induction_score(weights: torch.Tensor, length: int) -> torch.Tensor:
    """(B, H, 2L+1, 2L+1) -> (H,): the mean, over the batch and the second copy's queries t = L+1 .. 2L, of
    weights[t, t-L+1] (the token after the earlier occurrence, at t-L, of the token at t)."""
    w = weights.detach().to(torch.float64)
    vals = [w[:, :, t, t - length + 1] for t in range(length + 1, 2 * length + 1)]
    return torch.stack(vals, dim=-1).mean(dim=(0, 2))


def _head(state, layer, head, n_heads, name):
    W = _w(state, f"layers.{layer}.{name}.weight")                               # (D, D), nn.Linear's (out, in)
    Dh = W.shape[0] // n_heads
    s = slice(head * Dh, (head + 1) * Dh)
    return (W[:, s].T if name == "w_o" else W[s].T), Dh                          # W_O^h (Dh, D); else (D, Dh)


def reference_ov_circuit(state: dict, layer: int, head: int, n_heads: int) -> torch.Tensor:
    """W_E W_V^h W_O^h W_U, (V, V): row = the attended token, column = the predicted one."""
    W_V, _ = _head(state, layer, head, n_heads, "w_v")
    W_O, _ = _head(state, layer, head, n_heads, "w_o")
    return _w(state, "embed.weight") @ W_V @ W_O @ _w(state, "unembed.weight").T


def reference_qk_circuit(state: dict, layer: int, head: int, n_heads: int) -> torch.Tensor:
    """W_E W_Q^h (W_E W_K^h)^T / sqrt(Dh), (V, V): row = the query's token, column = the key's."""
    W_Q, Dh = _head(state, layer, head, n_heads, "w_q")
    W_K, _ = _head(state, layer, head, n_heads, "w_k")
    E = _w(state, "embed.weight")
    return (E @ W_Q) @ (E @ W_K).T / math.sqrt(Dh)


def reference_composition_score(w_a: torch.Tensor, w_b: torch.Tensor) -> float:
    """||w_a w_b||_F / (||w_a||_F ||w_b||_F)."""
    a, b = w_a.detach().to(torch.float64), w_b.detach().to(torch.float64)
    return float(torch.linalg.matrix_norm(a @ b) / (torch.linalg.matrix_norm(a) * torch.linalg.matrix_norm(b)))

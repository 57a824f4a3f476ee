"""Oracles for lesson 02's hidden tests (additive attention, the attention decoder's step).

Instructor side, never shipped to learners: they compute the exercises' answers. Imported inside the
hidden block of a test cell (``from course.tools.references import refs_02``). Written independently
of the learner's code and of the package's translator (:mod:`course.models.seq2seq`, which holds no
Bahdanau step):

* :func:`additive_candidates` computes ``v^T tanh(W [s || h] + b)`` from the learner's parameter
  *values*, whatever their names: every layout the exercise allows (one map on ``[s || h]`` or two
  maps ``W_s s + W_h h``, weights stored either way round, ``v`` as a layer or a vector) is tried,
  and a correct module matches one of them; :func:`check_additive` compares the learner's module with
  them.
* :func:`reference_step` is one decoder step computed from the decoder's weights with the GRU
  equations written out (no ``nn.GRUCell`` call, no package step), for a decoder built by
  :func:`course.checks_02.decoder` (its attention is :class:`course.checks_02.ProbeAttention`).
"""

from __future__ import annotations

import itertools

import torch

from course import checks
from course.models.seq2seq import Decoder

__all__ = ["additive_candidates", "check_additive", "reference_step"]


def _as_rows(p: torch.Tensor, n_in: int, d_hidden: int):
    """``p`` as a (d_hidden, n_in) matrix if it is one either way round, else None."""
    if tuple(p.shape) == (d_hidden, n_in):
        return [p]
    if tuple(p.shape) == (n_in, d_hidden):
        return [p.T]
    return []


def additive_candidates(params: dict, query, keys, values, mask, d_hidden: int, *, key_first: bool = False):
    """Every (context, weights) the additive formula gives for some reading of ``params``' roles.

    ``params`` are the learner's parameter values (any names). Matrices are read as W (on the
    concatenation, query first unless ``key_first``), W_s or W_h by their shapes, either way round;
    ``v`` is a (1, d_hidden), (d_hidden, 1) or (d_hidden,) tensor, and every other (d_hidden,)
    vector is a bias inside the tanh. A one-element tensor (a bias after v) shifts every score alike
    and is ignored. Computed in float64.
    """
    d_q, d_k = query.shape[-1], keys.shape[-1]
    p = {k: v.double() for k, v in params.items()}
    q, K, Vv = query.double(), keys.double(), values.double()
    concat, w_s, w_h, vecs, v_mats = [], [], [], [], []
    for name, t in p.items():
        if t.dim() == 2 and 1 in t.shape and t.numel() == d_hidden:
            v_mats.append(t.reshape(d_hidden))
        elif t.dim() == 2:
            concat += _as_rows(t, d_q + d_k, d_hidden)
            w_s += _as_rows(t, d_q, d_hidden)
            w_h += _as_rows(t, d_k, d_hidden)
        elif t.dim() == 1 and t.numel() == d_hidden:
            vecs.append(t)
    maps = []
    for W in concat:
        first, second = (W[:, :d_k], W[:, d_k:]) if key_first else (W[:, :d_q], W[:, d_q:])
        maps.append((second, first) if key_first else (first, second))
    maps += list(itertools.product(w_s, w_h))
    options = [(v, vecs) for v in v_mats] + [(vecs[i], vecs[:i] + vecs[i + 1:]) for i in range(len(vecs))]
    out = []
    for (Ws, Wh), (v, biases) in itertools.product(maps, options):
        b = sum(biases, torch.zeros(d_hidden, dtype=torch.float64))
        hidden = torch.tanh((q @ Ws.T).unsqueeze(1) + K @ Wh.T + b)           # (B, S, d_hidden)
        scores = (hidden @ v).masked_fill(~mask, float("-inf"))               # (B, S)
        weights = torch.softmax(scores, dim=-1)
        out.append((torch.einsum("bs,bsv->bv", weights, Vv), weights))
    return out


def check_additive(att, query, keys, values, mask, d_hidden: int, what: str, *, atol: float = 1e-5):
    """The learner's ``att`` gives the additive formula's weights and context for its own parameters."""
    params = {k: v for k, v in checks.parameter_state(att, "your AdditiveAttention").items() if v.is_floating_point()}
    context, weights = checks.call(att, query, keys, values, mask, what="AdditiveAttention.forward")
    context, weights = context.detach(), weights.detach()   # in a learner's kernel they carry autograd history
    candidates = additive_candidates(params, query, keys, values, mask, d_hidden)
    checks.check(candidates, "I could not read W and v among your parameters: keep W as nn.Linear(d_query + d_key, "
                             "d_hidden) on [query || key] (or two maps nn.Linear(d_query, d_hidden) and "
                             "nn.Linear(d_key, d_hidden)) and v as nn.Linear(d_hidden, 1, bias=False).")
    checks.check_shape(weights, candidates[0][1].shape, f"your weights {what}")
    err = [float((weights.double() - w).abs().max()) for _, w in candidates]
    best = min(range(len(candidates)), key=err.__getitem__)
    hint = "Compute v(tanh(W(cat([query expanded to (B, S, Dq), keys], dim=-1)))), the query first."
    swapped = additive_candidates(params, query, keys, values, mask, d_hidden, key_first=True)
    if err[best] > atol and any(float((weights.double() - w).abs().max()) <= atol for _, w in swapped):
        hint = ("Your scores equal FC([h || s]): the key comes first in your concatenation. The documented order "
                "is [s || h], the query first, so that W's first d_query columns act on the query.")
    checks.check_close(weights, candidates[best][1], f"your weights {what}", atol=atol, hint=hint)
    checks.check_close(context, torch.einsum("bs,bsv->bv", weights.double(), values.double()), f"your context {what}",
                       atol=atol, hint="context = sum over i of weights[:, i] * values[:, i]: use the values, not the keys.")


def _attention_weights(state: dict, query, keys, mask):
    scores = torch.einsum("bk,bsk->bs", query @ state["attention.proj.weight"].T + state["attention.proj.bias"], keys)
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)


def reference_step(dec: Decoder, y_prev, s_prev, states, mask):
    """``(logits, s, weights)`` of one attention-decoder step, from ``dec``'s weights, in float64.

    e = E[y_prev]; (c, weights) = attention(s_prev, states, states, mask); s = GRU([e || c], s_prev)
    with the GRU equations written out; logits = W_out [s || c || e] + b_out.
    """
    st = {k: v.double() for k, v in dec.state_dict().items()}
    s_prev, states = s_prev.double(), states.double()
    e = st["embedding.weight"][y_prev]                                         # (B, E)
    weights = _attention_weights(st, s_prev, states, mask)                     # (B, S)
    c = torch.einsum("bs,bsk->bk", weights, states)                            # (B, Dk)
    x = torch.cat([e, c], dim=-1)                                              # (B, E + Dk)
    gi = x @ st["cell.weight_ih"].T + st["cell.bias_ih"]                       # (B, 3H): r, z, n
    gh = s_prev @ st["cell.weight_hh"].T + st["cell.bias_hh"]
    i_r, i_z, i_n = gi.chunk(3, dim=-1)
    h_r, h_z, h_n = gh.chunk(3, dim=-1)
    r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
    n = torch.tanh(i_n + r * h_n)
    s = (1 - z) * n + z * s_prev                                               # (B, H)
    logits = torch.cat([s, c, e], dim=-1) @ st["out.weight"].T + st["out.bias"]  # (B, V)
    return logits, s, weights

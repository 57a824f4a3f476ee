"""Helpers for lesson 02's test cells (additive attention, the attention decoder's step).

The references here are explicit formulas, written independently of the learner's code and of the
package's translator (:mod:`course.models.seq2seq`):

* :func:`additive_candidates` computes ``v^T tanh(W [s || h] + b)`` from the learner's parameter
  *values*, whatever their names: every layout the exercise allows (one map on ``[s || h]`` or two
  maps ``W_s s + W_h h``, weights stored either way round, ``v`` as a layer or a vector) is tried,
  and a correct module matches one of them.
* :func:`reference_step` is one decoder step computed from the decoder's weights with the GRU
  equations written out (no ``nn.GRUCell`` call, no package step).

The learner's modules are only called, read (``state_dict``) or given parameters with
:func:`course.checks.set_params`.
"""

from __future__ import annotations

import ast
import itertools
import textwrap

import torch
from torch import nn

from course import checks
from course.models.seq2seq import Decoder

__all__ = ["randomise", "additive_candidates", "check_additive", "ProbeAttention", "decoder", "reference_step",
           "no_shortcut", "run_step"]


# ----------------------------------------------------------------------------- AdditiveAttention

def randomise(att, seed: int, scale: float = 0.5, what: str = "your AdditiveAttention") -> dict:
    """Give every parameter of the learner's ``att`` seeded random values (names as it has them); returns them."""
    state = checks.call(att.state_dict, what=f"{what}.state_dict")
    g = torch.Generator().manual_seed(seed)
    values = {k: scale * torch.randn(v.shape, generator=g, dtype=torch.float32)
              for k, v in state.items() if v.is_floating_point()}
    checks.check(values, f"{what} has no parameters: W and v should be learned layers (nn.Linear).")
    checks.set_params(att, values, what)
    return values


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
    params = {k: v for k, v in checks.call(att.state_dict, what="AdditiveAttention.state_dict").items()
              if v.is_floating_point()}
    context, weights = checks.call(att, query, keys, values, mask, what="AdditiveAttention.forward")
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


# ----------------------------------------------------------------------------- decode_step

class ProbeAttention(nn.Module):
    """A stand-in attention for the decode_step tests: a dot score after a linear map of the query.

    ``forward(query (B, Dq), keys (B, S, Dk), values (B, S, Dv), mask (B, S)) -> (context, weights)``,
    the call the decoder's attention has. Not the lesson's additive attention, so that the step is
    tested on its own.
    """

    def __init__(self, d_query: int, d_key: int):
        super().__init__()
        self.proj = nn.Linear(d_query, d_key)

    def forward(self, query, keys, values, mask):
        scores = torch.einsum("bk,bsk->bs", self.proj(query), keys).masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return torch.einsum("bs,bsv->bv", weights, values), weights


def decoder(V: int, E: int, H: int, Dk: int, seed: int) -> Decoder:
    """A package ``Decoder`` (layers only) with a :class:`ProbeAttention`, seeded, in eval mode."""
    torch.manual_seed(seed)
    return Decoder(V, E, H, Dk, attention=ProbeAttention(H, Dk)).eval()


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


SHORTCUTS = ("step", "_attention_step", "_bottleneck_step", "_decode", "translate", "reference_step")
WHY = "write the step from the decoder's layers (embedding, attention, cell, out), not call a ready-made one"


def no_shortcut(fn):
    """``checks.forbid`` for decode_step: no ready-made step from the package or these helpers.

    ``checks.forbid`` reads attribute uses (``decoder.step``, ``seq2seq._attention_step``) and
    imports; a step imported under its bare name is caught here too.
    """
    try:
        tree = ast.parse(textwrap.dedent(checks._source(fn)))
    except SyntaxError:
        tree = None
    used = sorted({node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id in SHORTCUTS}) if tree else []
    checks.check(not used, f"decode_step calls {used[0] if used else ''}: this exercise asks you to {WHY}.")
    return checks.forbid(fn, *SHORTCUTS, why=WHY)


def run_step(fn, dec, y_prev, s_prev, states, mask):
    """The learner's ``decode_step(dec, ...)``, shortcuts forbidden, checked to be a triple."""
    with no_shortcut(fn):
        result = checks.call(fn, dec, y_prev, s_prev, states, mask, what="decode_step")
    checks.check(isinstance(result, (tuple, list)) and len(result) == 3,
                 "decode_step should return a triple (logits, s, weights).")
    return result

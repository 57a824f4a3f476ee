"""Helpers for lesson 02's test cells (additive attention, the attention decoder's step).

Nothing here computes a graded answer: these helpers build inputs (:func:`decoder`,
:func:`transparent_decoder`, :class:`ProbeAttention`, a stand-in attention that is not the lesson's),
give the learner's parameters chosen values (:func:`randomise`, :func:`fill`, through
:func:`course.checks.set_params`), and call the learner's code with its shortcuts forbidden
(:func:`run_step`). The explicit references the hidden tests compare with (the additive formula in
every layout the exercise allows, one decoder step with the GRU equations written out) are
instructor side, in ``course/tools/references/refs_02.py``: students do not receive them.
"""

from __future__ import annotations

import ast
import textwrap

import torch
from torch import nn

from course import checks
from course.models.seq2seq import Decoder

__all__ = ["randomise", "fill", "ProbeAttention", "decoder", "transparent_decoder", "no_shortcut", "run_step"]


# ----------------------------------------------------------------------------- AdditiveAttention

def randomise(att, seed: int, scale: float = 0.5, what: str = "your AdditiveAttention") -> dict:
    """Give every parameter of the learner's ``att`` seeded random values (names as it has them); returns them."""
    state = checks.parameter_state(att, what)           # parameters only: a buffer (a fill value) keeps its value
    g = torch.Generator().manual_seed(seed)
    values = {k: scale * torch.randn(v.shape, generator=g, dtype=torch.float32)
              for k, v in state.items() if v.is_floating_point()}
    checks.check(values, f"{what} has no parameters: W and v should be learned layers (nn.Linear).")
    checks.set_params(att, values, what)
    return values


def fill(att, value: float, what: str = "your AdditiveAttention") -> None:
    """Set every parameter of the learner's ``att`` to ``value`` (names as it has them).

    With ``value = 0`` every additive score is v^T tanh(0) = 0, whatever the layout: the weights must
    then be uniform over the real source words.
    """
    state = checks.parameter_state(att, what)           # parameters only: a buffer (a fill value) keeps its value
    values = {k: torch.full(v.shape, float(value)) for k, v in state.items() if v.is_floating_point()}
    checks.check(values, f"{what} has no parameters: W and v should be learned layers (nn.Linear).")
    checks.set_params(att, values, what)


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


def transparent_decoder(V: int, E: int, H: int, Dk: int, seed: int) -> Decoder:
    """A :func:`decoder` whose step can be read off by hand.

    Its GRU cell has all-zero weights and biases, so every gate is sigmoid(0) = 1/2 and the
    candidate is tanh(0) = 0: the new state is exactly ``s_prev / 2``, whatever the cell's input.
    Its output layer copies its input: ``logits[:, :H + Dk + E]`` is the vector the layer reads
    (the rest is 0). Needs ``V >= H + Dk + E``.
    """
    if V < H + Dk + E:
        raise ValueError(f"transparent_decoder needs V >= H + Dk + E = {H + Dk + E}, got V = {V}")
    dec = decoder(V, E, H, Dk, seed)
    state = {k: torch.zeros_like(v) for k, v in dec.state_dict().items() if k.startswith("cell.")}
    state["out.weight"] = torch.eye(V, H + Dk + E)
    state["out.bias"] = torch.zeros(V)
    dec.load_state_dict(state, strict=False)
    return dec


SHORTCUTS = ("step", "_bottleneck_step", "_decode", "translate", "reference_step")
WHY = "write the step from the decoder's layers (embedding, attention, cell, out), not call a ready-made one"


def no_shortcut(fn):
    """``checks.forbid`` for decode_step: no ready-made step from the package or these helpers.

    ``checks.forbid`` reads attribute uses (``decoder.step``, ``seq2seq._bottleneck_step``) and
    imports; a step imported under its bare name is caught here too.
    """
    try:
        tree = ast.parse(textwrap.dedent(checks.source_of(fn)))
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

"""Helpers for lesson 13's test cells (rotary positions and ALiBi), so that each locked cell reads as its one idea.

Nothing here computes a graded answer. Visible tests compare with small worked examples (a unit vector
turned by a known angle); hidden tests with the instructor-side references (``refs_13``: the rotation in
float64 complex numbers, BLOOM's ALiBi tensor) and with ``transformers``' ``LlamaAttention`` holding a copy of
the learner's weights (:mod:`course.oracles.llama`). The learner's code is only called, read
(``state_dict``) or given parameters with :func:`course.checks.set_params`, so every helper works the same in
the learner's kernel and under the grader's judge.
"""

from __future__ import annotations

import torch

from course import checks
from course.oracles.llama import llama_attention_forward, to_llama_attention

__all__ = ["PAIRING", "POSITIONS_RULE", "rope", "pairing_seen", "pairing_control", "rotated_unit_vectors", "make_rotary",
           "rotary_output", "llama_output",
           "alibi", "allowed"]

PAIRING = ("pair dimension i with dimension i + Dh/2 (the first half of the features holds the first coordinate of "
           "every pair, the second half the second coordinate): out[i] = x[i] cos(p theta_i) - x[i + Dh/2] sin(p theta_i) "
           "and out[i + Dh/2] = x[i] sin(p theta_i) + x[i + Dh/2] cos(p theta_i); not neighbours 2i and 2i + 1")
POSITIONS_RULE = ("positions of shape (T,) give row t of x the position positions[t], for every leading index; positions "
                  "of shape (B, T) give x[b] (all of its heads, for x of shape (B, H, T, Dh)) the positions positions[b]")


def rope(fn, x, positions, *, base=None, what: str = "apply_rope"):
    """The learner's ``apply_rope(x, positions)`` (``base=`` passed only when given), checked to be a tensor of
    x's shape. An error in the learner's code becomes a failure that names the rule about positions."""
    kwargs = {} if base is None else {"base": base}
    label = (f"{what}(x of shape {tuple(x.shape)}, positions of shape {tuple(torch.as_tensor(positions).shape)}"
             + (f", base={base:g})" if base is not None else ")"))
    out = checks.call(fn, x, positions, what=label, hint=f"The rule: {POSITIONS_RULE}.", **kwargs)
    checks.check_shape(out, tuple(x.shape), label)
    return out


def pairing_seen(fn) -> str | None:
    """A control for :class:`course.checks.explain`: None when ``apply_rope`` pairs dimension i with i + Dh/2 (e_0 at
    position 1, Dh = 8, comes out in dimensions 0 and 4 only); otherwise a sentence that says where e_0 went. Every
    later check of RoPE (frequencies, positions, relative scores, attention equal to Llama's) fails when the pairing
    is another one, whatever else is right: with a control, their messages send the learner to the pairing."""
    x = torch.zeros(2, 8)
    x[1, 0] = 1.0                                                       # e_0 at position 1 (row 0: position 0)
    out = torch.as_tensor(fn(x, torch.arange(2)))[1].detach().double()
    moved = [j for j in range(8) if j not in (0, 4) and abs(out[j].item()) > 1e-4]
    if not moved:
        return None
    where = ", ".join(str(j) for j in moved)
    return (f"apply_rope turns e_0 (position 1, Dh = 8) into dimension{'s' if len(moved) > 1 else ''} {where}, not "
            "into dimension 4: its pairing of dimensions is not RoPE's half split (test_apply_rope_pairing checks "
            "that rule), and these inputs meet it too. Pair dimension i with i + Dh/2 first; this check may then pass "
            "as it is.")


def pairing_control(fn):
    """:func:`pairing_seen` of ``fn`` as a control for :class:`course.checks.explain`."""
    return lambda: pairing_seen(fn)


def rotated_unit_vectors(fn, head_dim: int, position, *, base=None):
    """The learner's rotation of every unit vector e_0 .. e_{Dh-1} at one ``position``: a (Dh, Dh) tensor whose
    row j is ``apply_rope(e_j)``, i.e. the transpose of the rotation matrix (the columns of R are the rows here)."""
    eye = torch.eye(head_dim)                                           # (T = Dh rows, Dh): row j is e_j
    positions = torch.full((head_dim,), position, dtype=torch.long)     # every row at the same position
    return rope(fn, eye, positions, base=base)


def make_rotary(cls, d_model: int, n_heads: int, *, generator: torch.Generator, **kwargs):
    """A fresh learner ``RotarySelfAttention(d_model, n_heads, **kwargs)`` in eval mode with random weights."""
    attn = checks.call(cls, d_model, n_heads, what="RotarySelfAttention.__init__", **kwargs)
    checks.randomise_weights(attn, generator, "your RotarySelfAttention")
    return attn.eval()


def rotary_output(attn, x, what: str, **kwargs):
    """The learner's ``attn(x, **kwargs)`` (``positions=``, ``causal=``), checked to be one (B, T, D) tensor."""
    out = checks.call(attn, x, what=what, hint=f"forward(x (B, T, D), positions=None or (T,) or (B, T), causal=True) "
                      f"splits the heads into (B, H, T, Dh) and rotates q and k there, with apply_rope: {POSITIONS_RULE}.",
                      **kwargs)
    checks.check_type(out, torch.Tensor, f"{what} (forward should return the output tensor only)")
    checks.check_shape(out, tuple(x.shape), what)
    return out


def llama_output(attn, x, n_heads: int, *, base: float = 10000.0, positions=None, causal: bool = True):
    """``transformers``' ``LlamaAttention`` holding a copy of the learner's weights, on ``x`` at ``positions``."""
    state = checks.call(attn.state_dict, what="RotarySelfAttention.state_dict")
    oracle = to_llama_attention(state, n_heads, base=base)
    return llama_attention_forward(oracle, x, positions, causal)


def alibi(fn, n_heads: int, T_q: int, T_k: int):
    """The learner's ``alibi_bias(n_heads, T_q, T_k)``, checked to be an (H, T_q, T_k) float tensor."""
    out = checks.call(fn, n_heads, T_q, T_k, what="alibi_bias")
    what = f"alibi_bias({n_heads}, {T_q}, {T_k})"
    checks.check_shape(out, (n_heads, T_q, T_k), what)
    checks.check(out.is_floating_point(), f"{what} should be a float tensor (it is added to the scores); yours is {out.dtype}.")
    return out


def allowed(T_q: int, T_k: int) -> torch.Tensor:
    """(T_q, T_k) bool, True where query i may see key j: j <= i + T_k - T_q (queries aligned to the last keys)."""
    return torch.arange(T_k)[None, :] <= torch.arange(T_q)[:, None] + (T_k - T_q)

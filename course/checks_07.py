"""Helpers for lesson 07's test cells (the Transformer block), so that each locked cell reads as its one idea.

Nothing here computes a graded answer. A test computes what the block should return itself (visible
tests: PyTorch's ``nn.TransformerEncoderLayer`` holding a copy of the learner's weights, through
:func:`course.oracles.transformer.to_torch_encoder_layer`; hidden tests: the instructor-side oracle in
``course/tools/references/refs_07.py``) and hands it to :func:`check_block`. The learner's modules are only
called, read, or given parameters with :func:`course.checks.set_params`, so every helper works the same
in the learner's kernel and under the grader's judge.
"""

from __future__ import annotations

import torch
from torch import nn

from course import checks

__all__ = ["SHORTCUTS", "known_good_norms", "new_block", "randomise_norms", "switch_off_sublayers", "make_block",
           "check_block", "check_rejects", "dropout_probe"]


SHORTCUTS = ("TransformerEncoderLayer", "to_torch_encoder_layer", "load_torch_encoder_layer")
WHY = "wire the block yourself (self_attn, ff, norm1, norm2, the residuals) instead of running PyTorch's ready-made layer"


def known_good_norms(block, d_model: int):
    """Give the learner's block PyTorch's ``nn.LayerNorm(d_model)`` as ``norm1`` and ``norm2``. Returns the block.

    A test of the block checks its wiring (residuals, which norm goes where, masks, dropout), one idea: a
    mistake in the learner's own ``LayerNorm`` costs points in the LayerNorm tests, not again in every
    block test. A block whose norms cannot be replaced (a read-only property) keeps its own.
    """
    for name in ("norm1", "norm2"):
        try:
            setattr(block, name, nn.LayerNorm(d_model))
        except Exception:  # noqa: BLE001 - the block keeps its own norm, and is judged with it
            pass
    return block


def new_block(cls, d_model, n_heads, d_ff, **kwargs):
    """A fresh learner ``cls(d_model, n_heads, d_ff, **kwargs)`` with PyTorch's LayerNorms swapped in
    (:func:`known_good_norms`)."""
    block = checks.call(cls, d_model, n_heads, d_ff, **kwargs, what="EncoderBlock.__init__")
    return known_good_norms(block, d_model)


def randomise_norms(block, generator: torch.Generator):
    """Give ``norm1`` and ``norm2`` of the learner's block different random gammas and betas (so that
    swapping the two norms shows), through ``set_params``. Returns the block."""
    state = checks.call(block.state_dict, what="EncoderBlock.state_dict")
    values = {}
    for name in ("norm1", "norm2"):
        for part, base in (("weight", 1.0), ("bias", 0.0)):
            key = f"{name}.{part}"
            checks.check(key in state, f"your EncoderBlock has no parameter {key!r}: name the norms norm1 and norm2, "
                                       "with parameters weight and bias.")
            values[key] = base + 0.3 * torch.randn(state[key].shape, generator=generator)
    checks.set_params(block, values, "your EncoderBlock")
    return block


def switch_off_sublayers(block):
    """Zero the output projections of the attention and of the feed-forward network: f(.) = 0 for both."""
    state = checks.call(block.state_dict, what="EncoderBlock.state_dict")
    names = ["self_attn.out_proj.weight", "self_attn.out_proj.bias", "ff.linear2.weight", "ff.linear2.bias"]
    missing = [n for n in names if n not in state]
    checks.check(not missing, f"your EncoderBlock has no parameter {missing[0] if missing else ''!r}: use "
                              "self_attn = nn.MultiheadAttention(...) and ff = FeedForward(...) with linear1, linear2.")
    checks.set_params(block, {n: torch.zeros(state[n].shape) for n in names}, "your EncoderBlock")
    return block


def make_block(cls, d_model, n_heads, d_ff, *, norm_first, generator, dropout=0.0):
    """A fresh ``cls(d_model, n_heads, d_ff, dropout=..., norm_first=...)`` in eval mode, PyTorch's LayerNorms
    swapped in (:func:`known_good_norms`), with random weights chosen by the test
    (:func:`course.checks.randomise_weights`) and two different random norms."""
    block = new_block(cls, d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first).eval()
    checks.randomise_weights(block, generator, "your EncoderBlock")
    return randomise_norms(block, generator)


def check_block(cls, block, args, want, what, *, norm_first, hint=""):
    """The learner's ``block(*args)`` (PyTorch's ready-made layer forbidden) equals ``want`` (atol 1e-5)."""
    with checks.forbid(cls, *SHORTCUTS, why=WHY):
        out = checks.call(block, *args, what="EncoderBlock.forward")
    layout = ("pre-norm: x = x + attn(norm1(x)); x = x + ff(norm2(x))." if norm_first else
              "post-norm: x = norm1(x + attn(x)); x = norm2(x + ff(x)).")
    checks.check_close(out, want, what, atol=1e-5, hint=hint or (layout + " Check which norm goes with which sublayer "
                                                                 "(the test gives your block PyTorch's LayerNorms)."))


def check_rejects(block, x, mask, what):
    """The learner's block refuses an ambiguous ``mask`` with an error instead of guessing what it means.

    Call it after a normal call of the same block in the same test (an unimplemented stub must not pass
    by raising NotImplementedError).
    """
    try:
        block(x, mask)
    except NotImplementedError:
        raise AssertionError("EncoderBlock.forward is not implemented yet.") from None
    except Exception:  # noqa: BLE001 - any error is a refusal
        return
    raise AssertionError(
        f"your EncoderBlock accepted {what} without complaint. A 3-D mask is ambiguous (one pattern per example, or "
        "one per head?) and must be an error that says what to pass: (B, 1, T, T) per example, (B, H, T, T) per "
        "head (course.masks.attention_mask does this check)."
    )


DROPOUT_SITES = {"on the attention weights": "attention", "after the feed-forward's ReLU": "feed-forward"}


def dropout_probe(cls, d_model, n_heads, d_ff, p, site, generator):
    """A pre-norm ``cls(d_model, n_heads, d_ff, dropout=p, norm_first=True)`` in training mode, whose
    weights make ONE sublayer add the same vector at every position and silence the other, so that
    :func:`course.checks.check_dropout_inside` can see the dropout at ``site`` (a key of DROPOUT_SITES)."""
    block = new_block(cls, d_model, n_heads, d_ff, dropout=p, norm_first=True)
    state = checks.call(block.state_dict, what="EncoderBlock.state_dict")
    *attn, q_k_v = checks.attention_parameters(state, "self_attn", "your EncoderBlock")
    ff = ["ff.linear1.weight", "ff.linear1.bias", "ff.linear2.weight", "ff.linear2.bias"]
    missing = [n for n in ff if n not in state]
    checks.check(not missing, f"your EncoderBlock has no parameter {missing[0] if missing else ''!r}: use "
                              "ff = FeedForward(...) with linear1, linear2.")
    if DROPOUT_SITES[site] == "attention":
        values = {**checks.uniform_attention_values(state, *attn, generator, q_k_v=q_k_v), **checks.zero_values(state, *ff[2:])}
    else:
        values = {**checks.constant_hidden_values(state, *ff, generator), **checks.zero_values(state, *attn[2:4])}
    checks.set_params(block, values, "your EncoderBlock")
    block.train()
    return block

"""Helpers for lesson 06's test cells (multi-head attention), so that each locked cell reads as its one idea.

Nothing here computes a graded answer. A test computes what it expects itself (visible tests: PyTorch's
``nn.MultiheadAttention`` holding a copy of the learner's weights; hidden tests: the instructor-side
oracle in ``course/tools/references/refs_06.py``) and hands it to :func:`check_against`. The learner's
module is only ever called, read (``state_dict``, attributes) or given parameters with
:func:`course.checks.set_params`. Every call into the learner's module runs inside :func:`by_hand`, which
makes PyTorch's own multi-head attention unusable while it runs (the exercise asks to build it from its parts).
"""

from __future__ import annotations

import torch

from course import checks

__all__ = ["SHORTCUTS", "by_hand", "run", "check_against", "identity", "check_separate_layers", "check_rejects"]

SHORTCUTS = ("multi_head_attention_forward", "scaled_dot_product_attention", "MultiheadAttention",
             "torch_mha_forward", "to_torch_mha")
WHY = ("build multi-head attention from its parts (w_q, w_k, w_v, split_heads, scores, softmax, merge_heads, w_o) "
       "instead of calling PyTorch's or the course's ready-made one")


def by_hand(cls):
    """``checks.forbid`` for this exercise: no ready-made multi-head attention inside ``cls``."""
    return checks.forbid(cls, *SHORTCUTS, why=WHY)


def run(cls, mha, *args):
    """``mha(*args)`` (the learner's forward), with the shortcuts forbidden; returns ``(out, weights)``."""
    with by_hand(cls):
        result = checks.call(mha, *args, what="MultiHeadAttention.forward")
    checks.check(isinstance(result, (tuple, list)) and len(result) == 2,
                 "your MultiHeadAttention.forward should return a pair (out, weights).")
    return result


def check_against(cls, mha, args, want, what, *, hint_weights="", hint_out=""):
    """The learner's ``mha(*args)`` gives ``want = (out, per-head weights)`` (atol 1e-5).

    ``args`` is ``(query, key, value)`` or ``(query, key, value, mask)``; with a mask (course contract,
    True = allowed), forbidden keys must also get exactly zero weight. ``want`` comes from the test's own
    oracle; every query row must keep at least one allowed key there (PyTorch returns NaN for the others;
    the fully-masked case has its own test).
    """
    want_out, want_w = want
    out, weights = run(cls, mha, *args)
    checks.check_shape(weights, want_w.shape, f"your weights {what}")
    if len(args) > 3 and args[3] is not None:
        checks.check_zero_where(weights, ~args[3].expand(want_w.shape), f"your weights {what}",
                                why="the mask forbids it: True means allowed")
    checks.check_close(weights, want_w, f"your weights {what}", atol=1e-5, hint=hint_weights)
    checks.check_close(out, want_out, f"your out {what}", atol=1e-5, hint=hint_out)


def identity(cls, d_model, n_heads):
    """The learner's module (eval mode) with every projection set to the identity and zero biases."""
    mha = checks.call(cls, d_model, n_heads, what="MultiHeadAttention.__init__").eval()
    state = checks.call(mha.state_dict, what="MultiHeadAttention.state_dict")
    values = {}
    for name in ("w_q", "w_k", "w_v", "w_o"):
        values[f"{name}.weight"] = torch.eye(d_model)
        if checks.has_param(state, f"{name}.bias"):
            values[f"{name}.bias"] = torch.zeros(d_model)
    checks.set_params(mha, values, "your MultiHeadAttention")
    return mha


def check_separate_layers(mha, what: str = "your MultiHeadAttention") -> None:
    """``w_q, w_k, w_v, w_o`` are four distinct layers (:func:`course.checks.check_distinct_layers`)."""
    checks.check_distinct_layers(mha, ("w_q", "w_k", "w_v", "w_o"), what)


def check_rejects(mha, query, key, value, mask, what):
    """The learner's module refuses ``mask`` with an error instead of guessing what it means.

    Call it after a normal call of the same module in the same test (an unimplemented stub must not
    pass by raising NotImplementedError).
    """
    try:
        mha(query, key, value, mask)
    except NotImplementedError:
        raise AssertionError("MultiHeadAttention.forward is not implemented yet.") from None
    except Exception:  # noqa: BLE001 - any error is a refusal: the message is the learner's to write
        return
    raise AssertionError(
        f"your MultiHeadAttention accepted {what} without complaint. A 3-D mask is ambiguous for multi-head "
        "attention (one pattern per example, or one per head?) and must be an error that says what to pass: "
        "(B, 1, T_q, T_k) per example, (B, H, T_q, T_k) per head (course.masks.attention_mask does this check)."
    )

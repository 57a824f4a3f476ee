"""Helpers for lesson 06's test cells (multi-head attention), so that each locked cell reads as its one idea.

Nothing here is a graded answer: the reference is PyTorch's own ``nn.MultiheadAttention`` holding a
copy of the learner's weights (:mod:`course.oracles.attention`), and the learner's module is only
ever called, read (``state_dict``, attributes) or given parameters with :func:`course.checks.set_params`.
Every call into the learner's module runs inside :func:`by_hand`, which makes PyTorch's own
multi-head attention unusable while it runs (the exercise asks to build it from its parts).
"""

from __future__ import annotations

import torch

from course import checks
from course.oracles.attention import to_torch_attn_mask, to_torch_mha

__all__ = ["SHORTCUTS", "by_hand", "run", "reference", "compare", "identity", "check_rejects"]

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


def reference(mha, query, key, value, mask=None):
    """``(out, weights)`` of ``nn.MultiheadAttention`` holding a copy of ``mha``'s weights, per head.

    ``mask`` follows the course's contract (True = allowed); it is flipped to PyTorch's convention here.
    """
    ref = to_torch_mha(mha)
    attn_mask = None
    if mask is not None:
        attn_mask = to_torch_attn_mask(mask, batch_size=query.shape[0], n_heads=ref.num_heads,
                                       tgt_len=query.shape[1], src_len=key.shape[1])
    with torch.no_grad():
        return ref(query, key, value, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)


def compare(cls, mha, query, key, value, what, mask=None, *, hint_weights="", hint_out=""):
    """The learner's out and per-head weights equal ``nn.MultiheadAttention``'s (atol 1e-5).

    With a mask, forbidden keys must also get exactly zero weight. Every query row must keep at least
    one allowed key (PyTorch returns NaN for the others; the fully-masked case has its own test).
    """
    want_out, want_w = reference(mha, query, key, value, mask)
    args = (query, key, value) if mask is None else (query, key, value, mask)
    out, weights = run(cls, mha, *args)
    checks.check_shape(weights, want_w.shape, f"your weights {what}")
    if mask is not None:
        checks.check_zero_where(weights, ~mask.expand(want_w.shape), f"your weights {what}",
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
        if f"{name}.bias" in state:
            values[f"{name}.bias"] = torch.zeros(d_model)
    checks.set_params(mha, values, "your MultiHeadAttention")
    return mha


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

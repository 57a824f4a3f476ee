"""Lesson 13's bridge to ``transformers``: copy a learner's rotary attention into ``LlamaAttention``.

Test cells use it so that "equal to ``LlamaAttention``" is checked against the library itself, built
from a ``LlamaConfig`` offline (nothing is downloaded), holding a copy of the learner's weights. Nothing
here is a graded answer: the computation is ``transformers``'; this module renames weights, builds the
config and the mask.

The name mapping (ours -> ``LlamaAttention``)::

    w_q.weight, .bias  -> q_proj.weight, .bias      (D, D) and (D,): one row block of Dh per head
    w_k.weight, .bias  -> k_proj.weight, .bias
    w_v.weight, .bias  -> v_proj.weight, .bias
    w_o.weight, .bias  -> o_proj.weight, .bias

The config: ``num_key_value_heads = n_heads`` (no grouped queries), ``attention_bias`` = the learner's
``bias``, ``rope_theta`` = ``base``, no RoPE scaling, eager attention, no dropout. Its rotary embedding is
``LlamaRotaryEmbedding``'s, the half-split pairing (``rotate_half``: dimension i turns with i + Dh/2).

Supported ``transformers``: 4.40 and later (checked with 4.40, 4.46, 4.48 and 5.x). Before 4.45,
``LlamaAttention`` computed its cos/sin itself from ``position_ids``; from 4.45 on the caller passes
``position_embeddings`` from ``LlamaRotaryEmbedding``. :func:`llama_attention_forward` does whichever the
installed version expects, and reads the output from the first element of what the module returns
(4.x returns three values, 5.x two).
"""

from __future__ import annotations

import inspect

import torch

__all__ = ["llama_config", "to_llama_attention", "llama_attention_forward"]

# Imported ahead by a warm grading sandbox along with this module (course.grading.sandboxed.zygote.warm_imports).
WARM_IMPORTS = ("transformers.models.llama.modeling_llama",)

_NAMES = {"w_q": "q_proj", "w_k": "k_proj", "w_v": "v_proj", "w_o": "o_proj"}


def llama_config(d_model: int, n_heads: int, *, base: float = 10000.0, bias: bool = False,
                 max_positions: int = 4096):
    """A ``LlamaConfig`` for one attention layer: H query heads and H key/value heads of D/H features."""
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=d_model, num_attention_heads=n_heads, num_key_value_heads=n_heads,
                      intermediate_size=4 * d_model, num_hidden_layers=1, vocab_size=8,
                      max_position_embeddings=max_positions, rope_theta=float(base), attention_bias=bias,
                      attention_dropout=0.0, pad_token_id=None, bos_token_id=None, eos_token_id=None)
    cfg._attn_implementation = "eager"
    return cfg


def to_llama_attention(state: dict, n_heads: int, *, base: float = 10000.0, what: str = "your RotarySelfAttention"):
    """``LlamaAttention`` (eval mode) holding the weights of the learner's ``state_dict()``.

    Biases are copied when ``state`` has them (``w_q.bias`` ...), and the config then has ``attention_bias=True``.
    """
    from transformers.models.llama.modeling_llama import LlamaAttention

    state = {k: v.detach().to("cpu", torch.float32) for k, v in state.items()}
    missing = [f"{ours}.weight" for ours in _NAMES if f"{ours}.weight" not in state]
    if missing:
        raise AssertionError(f"{what} has no parameter {missing[0]!r}: keep w_q, w_k, w_v and w_o as nn.Linear(d_model, "
                             f"d_model) layers with those names. Its parameters are: {', '.join(state) or 'none'}.")
    D = state["w_q.weight"].shape[1]
    has_bias = [f"{ours}.bias" in state for ours in _NAMES]
    if any(has_bias) and not all(has_bias):
        raise AssertionError(f"{what} has a bias on some of w_q, w_k, w_v, w_o but not on all: bias=True gives all four "
                             "a bias, bias=False none.")
    attn = LlamaAttention(llama_config(D, n_heads, base=base, bias=all(has_bias)), layer_idx=0).eval()
    ours = {f"{_NAMES[k.split('.')[0]]}.{k.split('.')[1]}": v for k, v in state.items() if k.split(".")[0] in _NAMES}
    attn.load_state_dict(ours, strict=False)
    return attn


def llama_attention_forward(attn, x: torch.Tensor, positions=None, causal: bool = True) -> torch.Tensor:
    """``LlamaAttention``'s output (B, T, D) on ``x`` (B, T, D), tokens at ``positions`` ((T,) or (B, T); default
    ``0..T-1``), with a causal mask (query i sees keys 0..i of ``x``) or none."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    B, T, _ = x.shape
    x = x.detach().to(torch.float32)
    positions = torch.arange(T) if positions is None else torch.as_tensor(positions)
    position_ids = positions.long().expand(B, T) if positions.dim() == 1 else positions.long()   # (B, T)
    mask = None
    if causal:
        blocked = torch.ones(T, T, dtype=torch.bool).triu(1)                    # key j > query i
        mask = torch.zeros(B, 1, T, T).masked_fill(blocked, torch.finfo(torch.float32).min)
    kwargs = {"hidden_states": x, "attention_mask": mask, "position_ids": position_ids}
    if "position_embeddings" in inspect.signature(attn.forward).parameters:   # transformers >= 4.45
        kwargs["position_embeddings"] = LlamaRotaryEmbedding(config=attn.config)(x, position_ids)
    with torch.no_grad():
        return attn(**kwargs)[0]


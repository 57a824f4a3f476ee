"""Lesson 09's bridge to ``transformers``: copy a learner's GPT into ``GPT2LMHeadModel``.

Test cells and ``bench/gpt.py`` use it to compare the lesson's ``GPT`` with Hugging Face's GPT-2,
built from a ``GPT2Config`` (no download) and holding a copy of the learner's weights, so that
"computes what GPT-2 computes" is checked against the library itself. Nothing here is a graded
answer: the computation on the other side is ``transformers``'.

The name mapping (ours -> ``GPT2LMHeadModel``)::

    tok_emb.weight                 (V, D)       -> transformer.wte.weight (and lm_head.weight, tied)
    pos_emb.weight                 (P, D)       -> transformer.wpe.weight
    blocks.i.ln1.weight, .bias                  -> transformer.h.i.ln_1.weight, .bias
    blocks.i.attn.qkv.weight       (3D, D)      -> transformer.h.i.attn.c_attn.weight   (D, 3D): transposed
    blocks.i.attn.qkv.bias         (3D,)        -> transformer.h.i.attn.c_attn.bias
    blocks.i.attn.proj.weight      (D, D)       -> transformer.h.i.attn.c_proj.weight   (transposed)
    blocks.i.ln2.weight, .bias                  -> transformer.h.i.ln_2.weight, .bias
    blocks.i.mlp.fc.weight         (4D, D)      -> transformer.h.i.mlp.c_fc.weight      (transposed)
    blocks.i.mlp.proj.weight       (D, 4D)      -> transformer.h.i.mlp.c_proj.weight    (transposed)
    ln_f.weight, .bias                          -> transformer.ln_f.weight, .bias

GPT-2 keeps its linear layers as ``Conv1D`` modules whose weight is (in, out), the transpose of
``nn.Linear``'s. Its MLP uses exact GELU here (``activation_function="gelu"``; GPT-2's own default
is the tanh approximation), LayerNorm eps 1e-5, and the output head tied to the token embedding.
The learner's model is only read (``state_dict()``), so the bridge works on the grader's stand-ins.
"""

from __future__ import annotations

import re

import torch

__all__ = ["gpt2_config", "gpt2_state_dict", "to_gpt2", "gpt2_logits"]

# Imported ahead by a warm grading sandbox along with this module (course.grading.sandboxed.zygote.warm_imports): the
# model code the bridge builds, about 5 s to import, paid once per batch, not once per submission.
WARM_IMPORTS = ("transformers.models.gpt2.modeling_gpt2",)

_BLOCK = re.compile(r"^blocks\.(\d+)\.")


def gpt2_config(vocab_size: int, block_size: int, d_model: int, n_heads: int, n_layers: int, *,
                dropout: float = 0.0, attn_implementation: str = "eager"):
    """A ``GPT2Config`` with the lesson's hyper-parameters (exact GELU, no special tokens)."""
    from transformers import GPT2Config

    cfg = GPT2Config(vocab_size=vocab_size, n_positions=block_size, n_embd=d_model, n_layer=n_layers,
                     n_head=n_heads, n_inner=4 * d_model, activation_function="gelu",
                     resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, layer_norm_epsilon=1e-5,
                     bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=True,
                     use_cache=True)
    cfg._attn_implementation = attn_implementation
    return cfg


def _need(state: dict, key: str, what: str) -> torch.Tensor:
    if key not in state:
        raise AssertionError(
            f"{what} has no parameter {key!r}. Name the parts as the lesson does: tok_emb, pos_emb, "
            "blocks[i].ln1 / .attn.qkv / .attn.proj / .ln2 / .mlp.fc / .mlp.proj, ln_f, head.")
    return state[key]


def gpt2_state_dict(state: dict, what: str = "your GPT") -> tuple[dict, dict]:
    """``(GPT2LMHeadModel state dict, sizes)`` from the learner's ``state_dict()``.

    ``sizes`` holds ``vocab_size``, ``block_size``, ``d_model`` and ``n_layers`` read off the shapes.
    """
    state = {k: v.detach().to("cpu", torch.float32) for k, v in state.items()}
    wte = _need(state, "tok_emb.weight", what)
    wpe = _need(state, "pos_emb.weight", what)
    n_layers = 1 + max((int(m.group(1)) for k in state if (m := _BLOCK.match(k))), default=-1)
    if n_layers == 0:
        raise AssertionError(f"{what} has no blocks.0...: keep the blocks in an nn.ModuleList called `blocks`.")
    out = {"transformer.wte.weight": wte, "transformer.wpe.weight": wpe, "lm_head.weight": wte,
           "transformer.ln_f.weight": _need(state, "ln_f.weight", what),
           "transformer.ln_f.bias": _need(state, "ln_f.bias", what)}
    pairs = [("ln1", "ln_1", False), ("attn.qkv", "attn.c_attn", True), ("attn.proj", "attn.c_proj", True),
             ("ln2", "ln_2", False), ("mlp.fc", "mlp.c_fc", True), ("mlp.proj", "mlp.c_proj", True)]
    for i in range(n_layers):
        for ours, theirs, conv in pairs:
            w = _need(state, f"blocks.{i}.{ours}.weight", what)
            out[f"transformer.h.{i}.{theirs}.weight"] = w.t().contiguous() if conv else w
            out[f"transformer.h.{i}.{theirs}.bias"] = _need(state, f"blocks.{i}.{ours}.bias", what)
    sizes = dict(vocab_size=wte.shape[0], block_size=wpe.shape[0], d_model=wte.shape[1], n_layers=n_layers)
    return out, sizes


def to_gpt2(model, n_heads: int, *, attn_implementation: str = "eager", what: str = "your GPT"):
    """A ``transformers.GPT2LMHeadModel`` (eval mode, float32) holding a copy of ``model``'s weights.

    Args:
        model: the learner's ``GPT`` (anything with the lesson's ``state_dict`` names).
        n_heads: H (it cannot be read off the weights).
        attn_implementation: ``"eager"`` (explicit softmax; the default, for tests) or ``"sdpa"``.
    """
    from transformers import GPT2LMHeadModel

    sd, sizes = gpt2_state_dict(model.state_dict(), what)
    cfg = gpt2_config(sizes["vocab_size"], sizes["block_size"], sizes["d_model"], n_heads, sizes["n_layers"],
                      attn_implementation=attn_implementation)
    theirs = GPT2LMHeadModel(cfg)
    missing, unexpected = theirs.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith(".attn.bias") and not k.endswith(".attn.masked_bias")]
    if missing or unexpected:
        raise AssertionError(f"copying {what} into GPT-2 left {missing or unexpected} unmatched.")
    return theirs.eval()


@torch.no_grad()
def gpt2_logits(gpt2, idx: torch.Tensor) -> torch.Tensor:
    """GPT-2's logits (B, T, V) for token ids ``idx`` (B, T)."""
    return gpt2(input_ids=idx, use_cache=False).logits

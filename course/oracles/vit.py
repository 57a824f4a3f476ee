"""Lesson 11's bridge to ``transformers``: copy a learner's ViT into ``ViTModel`` / ``ViTForImageClassification``.

Test cells and the benchmark build the Hugging Face model **from a config** (never a download), copy the
learner's weights into it, and compare outputs: "equal to ``transformers.ViTModel``" is then checked
against the implementation people use next, not against a second copy of the answer. Nothing here
is a graded answer: the functions read the learner's ``state_dict`` and rename tensors.

The lesson's ``ViT`` is built so that the two are the same function (eval mode):

=========================  ==============================================  ==========================================
part                       the lesson's ViT                                ``transformers`` (``ViTConfig``)
=========================  ==============================================  ==========================================
patch embedding            ``Linear(C*p*p, D)`` on ``patchify``'s output   ``Conv2d(C, D, kernel=stride=p)``
patch vector order         (C, p, p) flattened, patches row by row         the conv weight's (D, C, p, p) layout
class token, positions     ``cat([cls, patches]) + pos`` (cls at index 0)  the same
block                      pre-norm, GELU (exact, erf)                     ``ViTLayer``: pre-norm, ``hidden_act="gelu"``
LayerNorm eps              ``eps`` (default 1e-12)                         ``layer_norm_eps`` (default 1e-12)
after the last block       a final LayerNorm ``norm``                      ``ViTModel.layernorm``
classification             ``head`` on token 0                             ``ViTForImageClassification.classifier``
pooler                     none                                            ``ViTModel(add_pooling_layer=False)``
=========================  ==============================================  ==========================================

Parameter names read from the learner's ``state_dict`` (ours -> transformers)::

    embeddings.patch_embed.proj.weight (D, C*p*p) -> embeddings.patch_embeddings.projection.weight (D, C, p, p)
    embeddings.patch_embed.proj.bias              -> embeddings.patch_embeddings.projection.bias
    embeddings.cls_token (1, 1, D)                -> embeddings.cls_token
    embeddings.pos_embedding (1, N+1, D)          -> embeddings.position_embeddings
    blocks.{i}.self_attn.in_proj_weight (3D, D)   -> layers.{i}.attention.{q,k,v}_proj.weight (split in three)
    blocks.{i}.self_attn.in_proj_bias (3D,)       -> layers.{i}.attention.{q,k,v}_proj.bias
    blocks.{i}.self_attn.out_proj.weight, .bias   -> layers.{i}.attention.o_proj.weight, .bias
    blocks.{i}.linear1.weight, .bias (D -> d_ff)  -> layers.{i}.mlp.fc1.weight, .bias
    blocks.{i}.linear2.weight, .bias (d_ff -> D)  -> layers.{i}.mlp.fc2.weight, .bias
    blocks.{i}.norm1.weight, .bias                -> layers.{i}.layernorm_before.weight, .bias
    blocks.{i}.norm2.weight, .bias                -> layers.{i}.layernorm_after.weight, .bias
    norm.weight, .bias                            -> layernorm.weight, .bias
    head.weight, .bias                            -> classifier.weight, .bias   (ViTForImageClassification)

These are the names ``nn.TransformerEncoderLayer`` gives its parameters, so blocks built from it
(or hand-written blocks that use the same names) copy as they are. The hyper-parameters come from the
caller (the test knows what it built), so nothing is read off the learner's modules but their weights.
"""

from __future__ import annotations

import torch
from transformers import ViTConfig, ViTForImageClassification, ViTModel   # imported once, with the notebook's imports

__all__ = ["vit_config", "hf_state_dict", "to_hf_vit", "PARAMETER_NAMES"]

PARAMETER_NAMES = (
    "embeddings.patch_embed.proj.weight", "embeddings.patch_embed.proj.bias", "embeddings.cls_token",
    "embeddings.pos_embedding", "norm.weight", "norm.bias",
)


def vit_config(*, image_size: int, patch_size: int, in_channels: int, d_model: int, n_layers: int, n_heads: int,
               d_ff: int, n_classes: int = 10, eps: float = 1e-12, attn_implementation: str = "eager"):
    """A ``transformers.ViTConfig`` for the lesson's hyper-parameters: exact GELU, no dropout, eager attention
    by default (so that ``output_attentions=True`` returns the maps; ``"sdpa"`` for speed)."""
    return ViTConfig(
        image_size=image_size, patch_size=patch_size, num_channels=in_channels, hidden_size=d_model,
        num_hidden_layers=n_layers, num_attention_heads=n_heads, intermediate_size=d_ff, hidden_act="gelu",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, layer_norm_eps=eps, qkv_bias=True,
        num_labels=n_classes, attn_implementation=attn_implementation,
    )


def _need(state: dict, key: str, hint: str) -> torch.Tensor:
    if key not in state:
        raise AssertionError(f"your ViT has no parameter {key!r} ({hint}). Its parameters are: "
                             f"{', '.join(list(state)[:12])}{' ...' if len(state) > 12 else ''}")
    return state[key]


def hf_state_dict(state: dict, *, patch_size: int, in_channels: int, n_layers: int, classifier: bool = False) -> dict:
    """Rename (and reshape) a lesson ViT's ``state_dict`` into ``ViTModel``'s (``vit.``-less) names.

    Args:
        state: the learner's ``ViT.state_dict()`` (tensors).
        patch_size, in_channels: p and C (to fold the linear patch projection into a conv kernel).
        n_layers: number of blocks.
        classifier: also map ``head`` to ``classifier`` (for ``ViTForImageClassification``; then every
            other key is prefixed with ``vit.``).
    """
    p, C = patch_size, in_channels
    w = _need(state, "embeddings.patch_embed.proj.weight", "the patch embedding's nn.Linear, called proj")
    D = w.shape[0]
    out = {
        # (D, C*p*p) -> (D, C, p, p): valid because a patch vector is (C, p, p) flattened, like the conv kernel
        "embeddings.patch_embeddings.projection.weight": w.reshape(D, C, p, p),
        "embeddings.patch_embeddings.projection.bias": _need(state, "embeddings.patch_embed.proj.bias", "proj needs a bias"),
        "embeddings.cls_token": _need(state, "embeddings.cls_token", "the class token, shape (1, 1, D)").reshape(1, 1, D),
        "embeddings.position_embeddings": _need(state, "embeddings.pos_embedding", "the learned positions, (1, N+1, D)"),
        "layernorm.weight": _need(state, "norm.weight", "the LayerNorm after the last block, called norm"),
        "layernorm.bias": _need(state, "norm.bias", "the LayerNorm after the last block, called norm"),
    }
    out["embeddings.position_embeddings"] = out["embeddings.position_embeddings"].reshape(1, -1, D)
    for i in range(n_layers):
        src, dst = f"blocks.{i}.", f"layers.{i}."
        hint = f"block {i}: use nn.TransformerEncoderLayer or the same parameter names"
        wq, wk, wv = _need(state, src + "self_attn.in_proj_weight", hint).chunk(3, dim=0)   # (D, D) each
        bq, bk, bv = _need(state, src + "self_attn.in_proj_bias", hint).chunk(3, dim=0)     # (D,) each
        for name, wt, b in (("q", wq, bq), ("k", wk, bk), ("v", wv, bv)):
            out[f"{dst}attention.{name}_proj.weight"] = wt
            out[f"{dst}attention.{name}_proj.bias"] = b
        pairs = {"self_attn.out_proj": "attention.o_proj", "linear1": "mlp.fc1", "linear2": "mlp.fc2",
                 "norm1": "layernorm_before", "norm2": "layernorm_after"}
        for ours, theirs in pairs.items():
            for part in ("weight", "bias"):
                out[f"{dst}{theirs}.{part}"] = _need(state, f"{src}{ours}.{part}", hint)
    if classifier:
        out = {f"vit.{k}": v for k, v in out.items()}
        out["classifier.weight"] = _need(state, "head.weight", "the classification head, an nn.Linear called head")
        out["classifier.bias"] = _need(state, "head.bias", "the classification head, an nn.Linear called head")
    return {k: v.detach().clone().float() for k, v in out.items()}


def to_hf_vit(model_or_state, *, image_size: int, patch_size: int, in_channels: int, d_model: int, n_layers: int,
              n_heads: int, d_ff: int, n_classes: int = 10, eps: float = 1e-12, classifier: bool = False,
              attn_implementation: str = "eager"):
    """A ``transformers`` ViT holding a copy of the lesson ViT's weights, in eval mode.

    Args:
        model_or_state: the learner's ``ViT`` (its ``state_dict()`` is read) or a state dict.
        classifier: ``ViTForImageClassification`` (logits) instead of ``ViTModel(add_pooling_layer=False)``
            (the hidden states after the final LayerNorm).
        attn_implementation: ``"eager"`` (attention maps available) or ``"sdpa"``.
        the rest: the hyper-parameters the ViT was built with.

    Returns:
        The ``transformers`` model, every weight copied (a missing or extra one is an error).
    """
    state = model_or_state if isinstance(model_or_state, dict) else model_or_state.state_dict()
    config = vit_config(image_size=image_size, patch_size=patch_size, in_channels=in_channels, d_model=d_model,
                        n_layers=n_layers, n_heads=n_heads, d_ff=d_ff, n_classes=n_classes, eps=eps,
                        attn_implementation=attn_implementation)
    hf = ViTForImageClassification(config) if classifier else ViTModel(config, add_pooling_layer=False)
    mapped = hf_state_dict(state, patch_size=patch_size, in_channels=in_channels, n_layers=n_layers, classifier=classifier)
    theirs = hf.state_dict()
    for k, v in mapped.items():
        if k not in theirs:
            raise AssertionError(f"internal: transformers' ViT has no parameter {k!r}")
        if tuple(theirs[k].shape) != tuple(v.shape):
            raise AssertionError(f"your ViT's weights for {k!r} have shape {tuple(v.shape)}; transformers' ViT built "
                                 f"with the same sizes wants {tuple(theirs[k].shape)}. Check the sizes you built it with.")
    missing = [k for k in theirs if k not in mapped]
    if missing:
        raise AssertionError(f"internal: no weight copied into transformers' {missing[:3]}")
    hf.load_state_dict(mapped, strict=True)
    return hf.eval()

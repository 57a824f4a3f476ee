"""Lesson 10's bridge to ``transformers``: copy a course BERT's weights into ``BertModel`` /
``BertForPreTraining`` (and back), built from a ``BertConfig`` offline (nothing is downloaded).

Test cells and the lesson's experiments use it so that "equal to ``transformers.BertModel``" is
checked against the library people use next, not against a second copy of the answer. Nothing
here is a graded answer: it only renames tensors and converts masks.

The name mapping (ours -> ``BertForPreTraining``; ``BertModel`` is the ``bert.`` part)::

    embeddings.token.weight          -> bert.embeddings.word_embeddings.weight
    embeddings.position.weight       -> bert.embeddings.position_embeddings.weight
    embeddings.segment.weight        -> bert.embeddings.token_type_embeddings.weight
    embeddings.norm.weight, .bias    -> bert.embeddings.LayerNorm.weight, .bias
    layers.{i}.self_attn.in_proj_weight, .in_proj_bias  (rows q | k | v)
                                     -> bert.encoder.layer.{i}.attention.self.query / key / value
    layers.{i}.self_attn.out_proj    -> bert.encoder.layer.{i}.attention.output.dense
    layers.{i}.norm1                 -> bert.encoder.layer.{i}.attention.output.LayerNorm
    layers.{i}.linear1               -> bert.encoder.layer.{i}.intermediate.dense
    layers.{i}.linear2               -> bert.encoder.layer.{i}.output.dense
    layers.{i}.norm2                 -> bert.encoder.layer.{i}.output.LayerNorm
    pooler                           -> bert.pooler.dense          (tanh applied on the [CLS] vector)
    mlm_dense, mlm_norm              -> cls.predictions.transform.dense, .LayerNorm
    mlm_bias                         -> cls.predictions.bias       (the decoder's weight is tied to
                                                                    embeddings.token.weight)
    nsp                              -> cls.seq_relationship

``layers.{i}`` are ``nn.TransformerEncoderLayer(d_model, n_heads, d_ff, activation="gelu",
layer_norm_eps=1e-12, batch_first=True)`` (post-norm), which computes exactly a BERT layer.

Masks: the course's contract (bool, True = may attend; ``(T, T)``, ``(B, 1, 1, T)``,
``(B, 1, T, T)`` or ``(B, H, T, T)``) becomes the additive float mask ``transformers`` adds to
the scores (0 where allowed, the dtype's minimum where not), see :func:`hf_attention_mask`.
"""

from __future__ import annotations

import torch

__all__ = [
    "hf_config", "config_from_state", "to_hf_state", "from_hf_state", "to_hf_model", "to_hf_pretraining",
    "hf_attention_mask", "hf_forward",
]

# Imported ahead by a warm grading sandbox along with this module (course.grading.sandboxed.zygote.warm_imports): the
# model code the bridge builds, about 5 s to import, paid once per batch, not once per submission.
WARM_IMPORTS = ("transformers.models.bert.modeling_bert",)

_EMB = {
    "embeddings.token.weight": "embeddings.word_embeddings.weight",
    "embeddings.position.weight": "embeddings.position_embeddings.weight",
    "embeddings.segment.weight": "embeddings.token_type_embeddings.weight",
    "embeddings.norm.weight": "embeddings.LayerNorm.weight",
    "embeddings.norm.bias": "embeddings.LayerNorm.bias",
}
_LAYER = {   # ours (after "layers.{i}.") -> transformers (after "encoder.layer.{i}."), except in_proj
    "self_attn.out_proj.weight": "attention.output.dense.weight",
    "self_attn.out_proj.bias": "attention.output.dense.bias",
    "norm1.weight": "attention.output.LayerNorm.weight",
    "norm1.bias": "attention.output.LayerNorm.bias",
    "linear1.weight": "intermediate.dense.weight",
    "linear1.bias": "intermediate.dense.bias",
    "linear2.weight": "output.dense.weight",
    "linear2.bias": "output.dense.bias",
    "norm2.weight": "output.LayerNorm.weight",
    "norm2.bias": "output.LayerNorm.bias",
}
_HEADS = {
    "pooler.weight": "bert.pooler.dense.weight",
    "pooler.bias": "bert.pooler.dense.bias",
    "mlm_dense.weight": "cls.predictions.transform.dense.weight",
    "mlm_dense.bias": "cls.predictions.transform.dense.bias",
    "mlm_norm.weight": "cls.predictions.transform.LayerNorm.weight",
    "mlm_norm.bias": "cls.predictions.transform.LayerNorm.bias",
    "mlm_bias": "cls.predictions.bias",
    "nsp.weight": "cls.seq_relationship.weight",
    "nsp.bias": "cls.seq_relationship.bias",
}


def hf_config(vocab_size: int, d_model: int, n_heads: int, d_ff: int, n_layers: int, max_len: int,
              n_segments: int = 2, *, eps: float = 1e-12, dropout: float = 0.0, attn: str = "eager"):
    """A ``transformers.BertConfig`` of these sizes (GELU, post-norm; eager attention by default, so
    attention maps can be returned)."""
    from transformers import BertConfig

    return BertConfig(
        vocab_size=vocab_size, hidden_size=d_model, num_attention_heads=n_heads, intermediate_size=d_ff,
        num_hidden_layers=n_layers, max_position_embeddings=max_len, type_vocab_size=n_segments,
        hidden_act="gelu", layer_norm_eps=eps, hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
        pad_token_id=0, attn_implementation=attn,
    )


def _n_layers(state: dict) -> int:
    return len({k.split(".")[1] for k in state if k.startswith("layers.")})


def config_from_state(state: dict, n_heads: int, *, eps: float = 1e-12, dropout: float = 0.0, attn: str = "eager"):
    """The ``BertConfig`` whose sizes match a course BERT's state dict (``n_heads`` cannot be read off it)."""
    V, D = state["embeddings.token.weight"].shape
    n_layers = _n_layers(state)
    d_ff = state["layers.0.linear1.weight"].shape[0] if n_layers else 4 * D
    return hf_config(V, D, n_heads, d_ff, n_layers, state["embeddings.position.weight"].shape[0],
                     state["embeddings.segment.weight"].shape[0], eps=eps, dropout=dropout, attn=attn)


def _missing(state: dict, key: str, what: str):
    if key not in state:
        names = ", ".join(sorted(state)[:12])
        raise AssertionError(f"{what} has no parameter {key!r} (its parameters start: {names} ...). Name the parts as "
                             "the lesson's table says (embeddings.token/segment/position/norm, layers, pooler, mlm_dense, "
                             "mlm_norm, mlm_bias, nsp).")
    return state[key]


def to_hf_state(state: dict, *, prefix: str = "bert.", heads: bool = True, what: str = "your model") -> dict:
    """A course state dict (``Bert`` or ``BertEmbeddings``) under ``transformers``' names.

    Args:
        state: ``module.state_dict()`` of a course ``Bert`` (or, with ``heads=False`` and keys starting
            ``embeddings.``, of anything that holds one).
        prefix: ``"bert."`` for ``BertForPreTraining``, ``""`` for ``BertModel``.
        heads: include the pooler and the MLM / NSP heads.

    Returns:
        A dict of detached clones for ``load_state_dict``.
    """
    out = {}
    for ours, theirs in _EMB.items():
        out[prefix + theirs] = _missing(state, ours, what)
    for i in range(_n_layers(state)):
        w = _missing(state, f"layers.{i}.self_attn.in_proj_weight", what)
        b = _missing(state, f"layers.{i}.self_attn.in_proj_bias", what)
        for part, wp, bp in zip(("query", "key", "value"), w.chunk(3, dim=0), b.chunk(3, dim=0)):   # rows q | k | v
            out[f"{prefix}encoder.layer.{i}.attention.self.{part}.weight"] = wp
            out[f"{prefix}encoder.layer.{i}.attention.self.{part}.bias"] = bp
        for ours, theirs in _LAYER.items():
            out[f"{prefix}encoder.layer.{i}.{theirs}"] = _missing(state, f"layers.{i}.{ours}", what)
    if heads:
        for ours, theirs in _HEADS.items():
            if prefix == "" and not theirs.startswith("bert."):
                continue
            out[theirs.replace("bert.", prefix, 1)] = _missing(state, ours, what)
        if prefix:                                                   # the decoder is tied to the token embeddings
            out["cls.predictions.decoder.weight"] = out[prefix + "embeddings.word_embeddings.weight"]
            out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return {k: torch.as_tensor(v).detach().clone() for k, v in out.items()}


def from_hf_state(hf_state: dict, *, prefix: str = "bert.", heads: bool = True, embeddings_only: bool = False) -> dict:
    """The inverse of :func:`to_hf_state`: a ``transformers`` state dict under the course's names.

    With ``embeddings_only`` the keys are those of a course ``BertEmbeddings`` (``token.weight``, ...).
    """
    out = {}
    for ours, theirs in _EMB.items():
        key = ours.split(".", 1)[1] if embeddings_only else ours
        out[key] = hf_state[prefix + theirs]
    if embeddings_only:
        return {k: v.detach().clone() for k, v in out.items()}
    n_layers = len({k.split(".")[len(prefix.split(".")) + 1] for k in hf_state if k.startswith(prefix + "encoder.layer.")})
    for i in range(n_layers):
        base = f"{prefix}encoder.layer.{i}."
        out[f"layers.{i}.self_attn.in_proj_weight"] = torch.cat(
            [hf_state[base + f"attention.self.{p}.weight"] for p in ("query", "key", "value")], dim=0)
        out[f"layers.{i}.self_attn.in_proj_bias"] = torch.cat(
            [hf_state[base + f"attention.self.{p}.bias"] for p in ("query", "key", "value")], dim=0)
        for ours, theirs in _LAYER.items():
            out[f"layers.{i}.{ours}"] = hf_state[base + theirs]
    if heads:
        for ours, theirs in _HEADS.items():
            key = theirs.replace("bert.", prefix, 1)
            if key in hf_state:
                out[ours] = hf_state[key]
    return {k: v.detach().clone() for k, v in out.items()}


def _load(model, hf_state: dict, what: str):
    missing, unexpected = model.load_state_dict(hf_state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise AssertionError(f"{what}'s weights do not fit transformers' BERT: missing {sorted(missing)[:6]}, "
                             f"unexpected {sorted(unexpected)[:6]}.")
    return model.eval()


def to_hf_model(state: dict, n_heads: int, *, eps: float = 1e-12, attn: str = "eager", what: str = "your model"):
    """``transformers.BertModel`` (with its pooler) holding a copy of a course ``Bert``'s weights, in eval mode."""
    from transformers import BertModel

    model = BertModel(config_from_state(state, n_heads, eps=eps, attn=attn))
    hf = to_hf_state(state, prefix="", what=what)
    if "pooler.dense.weight" not in hf:
        model.pooler = None
    return _load(model, hf, what)


def to_hf_pretraining(state: dict, n_heads: int, *, eps: float = 1e-12, attn: str = "eager", what: str = "your model"):
    """``transformers.BertForPreTraining`` (MLM and NSP heads) holding a copy of a course ``Bert``'s weights."""
    from transformers import BertForPreTraining

    model = BertForPreTraining(config_from_state(state, n_heads, eps=eps, attn=attn))
    return _load(model, to_hf_state(state, prefix="bert.", what=what), what)


def hf_attention_mask(mask: torch.Tensor | None, B: int, T: int, dtype=torch.float32):
    """The course's boolean mask (True = may attend) as the additive 4-D mask ``transformers`` adds to the scores.

    ``(T, T)``, ``(B, 1, 1, T)``, ``(B, 1, T, T)`` or ``(B, H, T, T)`` -> float ``(B, 1 or H, T, T)``: 0 where
    attention is allowed, the dtype's minimum where it is not. None stays None.
    """
    if mask is None:
        return None
    if mask.dim() == 2:
        mask = mask[None, None]
    if mask.dim() != 4:
        raise ValueError(f"pass a (T, T) or 4-D mask, not {tuple(mask.shape)}")
    mask = mask.expand(B, mask.shape[1], T, T)
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)


def hf_forward(model, ids, segments=None, mask=None, **kwargs):
    """Run a ``BertModel`` / ``BertForPreTraining`` on course-style inputs (no gradient)."""
    B, T = ids.shape
    with torch.no_grad():
        return model(input_ids=ids, token_type_ids=segments, attention_mask=hf_attention_mask(mask, B, T), **kwargs)

"""Lessons 07-08's bridge to PyTorch: copy a learner's encoder block into ``nn.TransformerEncoderLayer``,
its decoder block into ``nn.TransformerDecoderLayer`` and its whole encoder-decoder into ``nn.Transformer``.

Test cells use these helpers to compare a learner's ``EncoderBlock`` with PyTorch's own layer after
copying the weights, so that "equal to ``nn.TransformerEncoderLayer``" is checked against PyTorch
itself rather than against a second copy of the answer. Nothing here is a graded answer.

The name mapping (ours -> ``nn.TransformerEncoderLayer``)::

    self_attn.in_proj_weight, .in_proj_bias  -> self_attn.in_proj_weight, .in_proj_bias
    self_attn.out_proj.weight, .bias         -> self_attn.out_proj.weight, .bias
      (lesson 06's MultiHeadAttention works too: cat(w_q, w_k, w_v) -> in_proj_*, w_o -> out_proj)
    ff.linear1.weight, .bias                 -> linear1.weight, .bias     (D -> d_ff)
    ff.linear2.weight, .bias                 -> linear2.weight, .bias     (d_ff -> D)
    norm1.weight, .bias                      -> norm1.weight, .bias
    norm2.weight, .bias                      -> norm2.weight, .bias

PyTorch's layer keeps ``linear1``/``linear2`` directly on the layer; ours groups them in a
``FeedForward`` called ``ff`` (a block whose ``linear1``/``linear2`` sit directly on it is accepted
too). The hyper-parameters (``d_model``, ``n_heads``, ``d_ff``, ``eps``, ``norm_first``) are read off
the learner's modules, so a block built with other sizes is copied just as well.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

__all__ = [
    "encoder_layer_state_dict",
    "to_torch_encoder_layer",
    "load_torch_encoder_layer",
    "with_torch_norms",
    "decoder_layer_state_dict",
    "to_torch_decoder_layer",
    "TorchTransformer",
    "to_torch_transformer",
]


_NAMES = ("Name the sub-modules as PyTorch's nn.TransformerEncoderLayer does: self_attn, ff (with linear1 and "
          "linear2), norm1, norm2.")


def _get(module: nn.Module, dotted: str, what: str):
    """``module.a.b`` by name, or an AssertionError that tells the learner which name is missing."""
    obj = module
    for part in dotted.split("."):
        try:        # one read, not hasattr then getattr: under grading each read is a round trip to the sandbox
            obj = getattr(obj, part)
        except AttributeError:
            raise AssertionError(f"{what} has no attribute `{dotted}`. {_NAMES}") from None
    return obj


def _state(module: nn.Module, what: str) -> dict[str, torch.Tensor]:
    """``module.state_dict()``, read once. Under grading every read of a learner's module is a round trip
    to the sandbox: one ``state_dict()`` brings all of a block's tensors in one, where reading them name
    by name took about forty."""
    try:
        state_dict = module.state_dict
    except AttributeError:
        raise AssertionError(f"{what} should be an nn.Module (it has no state_dict).") from None
    return dict(state_dict())


def _under(state: dict, prefix: str) -> dict:
    """The entries of ``state`` below ``prefix.``, with the prefix taken off."""
    cut = len(prefix) + 1
    return {k[cut:]: v for k, v in state.items() if k.startswith(prefix + ".")}


def _need(state: dict, key: str, what: str):
    try:
        return state[key]
    except KeyError:
        raise AssertionError(f"{what} has no parameter `{key}`. {_NAMES}") from None


def _feed_forward(state: dict, what: str) -> dict[str, torch.Tensor]:
    """The block's feed-forward weights (``ff.linear1/2`` or ``linear1/2``) under PyTorch's names."""
    prefix = "ff." if any(k.startswith("ff.") for k in state) else ""
    owner = f"{what}'s feed-forward network (self.ff)" if prefix else what
    out = {}
    for name in ("linear1", "linear2"):
        out[f"{name}.weight"] = _need(state, f"{prefix}{name}.weight", owner)
        if f"{prefix}{name}.bias" in state:
            out[f"{name}.bias"] = state[f"{prefix}{name}.bias"]
    return out


def _norms(state: dict, names, what: str) -> dict[str, torch.Tensor]:
    return {f"{name}.{p}": _need(state, f"{name}.{p}", what) for name in names for p in ("weight", "bias")}


def _sub_state(state: dict, prefix: str, sub: nn.Module, what: str) -> dict:
    """The entries of the block's ``state`` below ``prefix``; where there are none (the attribute is an
    alias, e.g. a property, of a sub-module registered under another name), ``sub.state_dict()`` itself."""
    return _under(state, prefix) or _state(sub, what)


def _attention_weights(attn: nn.Module, state: dict, what: str = "your self_attn") -> dict[str, torch.Tensor]:
    """The attention's parameters under ``nn.MultiheadAttention``'s names; ``state``: its state dict;
    ``what``: how messages name it."""
    if isinstance(attn, nn.MultiheadAttention):
        if "in_proj_weight" not in state:
            raise AssertionError(
                f"{what} was built with kdim/vdim different from d_model; a block's attention uses "
                "nn.MultiheadAttention(d_model, n_heads, batch_first=True)."
            )
        names = ("in_proj_weight", "out_proj.weight") + (("in_proj_bias", "out_proj.bias") if "in_proj_bias" in state else ())
        return {n: _need(state, n, what) for n in names}
    projections = ("w_q", "w_k", "w_v", "w_o")
    if all(f"{n}.weight" in state for n in projections):           # lesson 06's MultiHeadAttention
        out = {
            "in_proj_weight": torch.cat([state[f"{n}.weight"] for n in projections[:3]], dim=0),  # (3D, D)
            "out_proj.weight": state["w_o.weight"],
        }
        biases = [f"{n}.bias" for n in projections]
        if any(b in state for b in biases):
            missing = [b for b in biases if b not in state]
            if missing:
                raise AssertionError(f"{what} has no {', '.join(missing)} while its other projections have a "
                                     "bias: keep bias=True in w_q, w_k, w_v and w_o, as nn.MultiheadAttention does.")
            out["in_proj_bias"] = torch.cat([state[b] for b in biases[:3]], dim=0)   # (3D,)
            out["out_proj.bias"] = state["w_o.bias"]
        return out
    raise AssertionError(
        f"{what} is a {type(attn).__name__}; use nn.MultiheadAttention(d_model, n_heads, "
        "batch_first=True) (or lesson 06's MultiHeadAttention with w_q, w_k, w_v, w_o)."
    )


def _n_heads(attn: nn.Module) -> int:
    for name in ("num_heads", "n_heads", "h"):
        try:
            value = getattr(attn, name)
        except AttributeError:
            continue
        return int(value)
    raise AssertionError("your self_attn does not say how many heads it has (no num_heads or n_heads attribute).")


def encoder_layer_state_dict(ours: nn.Module, state: dict | None = None) -> dict[str, torch.Tensor]:
    """The learner's block's weights under ``nn.TransformerEncoderLayer``'s parameter names.

    Args:
        ours: an encoder block with sub-modules ``self_attn``, ``ff.linear1``, ``ff.linear2``,
            ``norm1``, ``norm2`` (see the module docstring for the mapping).
        state: ``ours.state_dict()`` when the caller has it already.

    Returns:
        A state dict (detached clones) that ``nn.TransformerEncoderLayer.load_state_dict`` accepts.
    """
    return _encoder_weights(ours, state)[0]


def _encoder_weights(ours: nn.Module, state: dict | None):
    """(:func:`encoder_layer_state_dict`, the block's ``self_attn``)."""
    what = "your EncoderBlock"
    state = _state(ours, what) if state is None else state
    attn = _get(ours, "self_attn", what)
    self_state = _sub_state(state, "self_attn", attn, "your self_attn")
    out = {f"self_attn.{k}": v for k, v in _attention_weights(attn, self_state).items()}
    out.update(_feed_forward(state, what))
    out.update(_norms(state, ("norm1", "norm2"), what))
    return {k: v.detach().clone() for k, v in out.items()}, attn


def to_torch_encoder_layer(ours: nn.Module, *, norm_first: bool | None = None, dropout: float = 0.0,
                           activation: str = "relu", state: dict | None = None) -> nn.TransformerEncoderLayer:
    """PyTorch's ``nn.TransformerEncoderLayer`` holding a copy of the learner's block's weights.

    Args:
        ours: the learner's encoder block (see the module docstring for the names it needs).
        norm_first: pre-norm (True) or post-norm (False); by default read from ``ours.norm_first``.
        dropout: the PyTorch layer's dropout (compare in eval mode, or with 0.0).
        activation: the feed-forward activation (``"relu"`` as in the original Transformer).
        state: ``ours.state_dict()`` when the caller has it already.

    Returns:
        An ``nn.TransformerEncoderLayer(batch_first=True)`` on the learner's device and dtype, in the
        same train/eval mode as ``ours``, whose forward should equal ``ours.forward``.
    """
    if norm_first is None:
        try:
            norm_first = bool(ours.norm_first)
        except AttributeError:
            raise AssertionError("your EncoderBlock should remember its setting: store `self.norm_first = norm_first` "
                                 "in __init__.") from None
    weights, attn = _encoder_weights(ours, state)
    linear1 = weights["linear1.weight"]                                        # (d_ff, D)
    norm1 = _get(ours, "norm1", "your EncoderBlock")
    layer = nn.TransformerEncoderLayer(
        int(weights["norm1.weight"].numel()), _n_heads(attn),
        dim_feedforward=linear1.shape[0], dropout=dropout, activation=activation,
        layer_norm_eps=float(getattr(norm1, "eps", 1e-5)), batch_first=True, norm_first=norm_first,
    )
    layer = layer.to(device=linear1.device, dtype=linear1.dtype)
    missing, unexpected = layer.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise AssertionError(
            f"your EncoderBlock's weights do not fit nn.TransformerEncoderLayer: missing {sorted(missing)}, "
            f"unexpected {sorted(unexpected)}. Keep bias=True everywhere, as PyTorch's layer does."
        )
    layer.train(ours.training)
    return layer


def load_torch_encoder_layer(ours: nn.Module, layer: nn.TransformerEncoderLayer) -> nn.Module:
    """Copy a PyTorch ``nn.TransformerEncoderLayer``'s weights into the learner's block (in place).

    The inverse of :func:`to_torch_encoder_layer`. Only blocks whose ``self_attn`` is an
    ``nn.MultiheadAttention`` are supported. Returns ``ours``.
    """
    attn = _get(ours, "self_attn", "your EncoderBlock")
    if not isinstance(attn, nn.MultiheadAttention):
        raise AssertionError("load_torch_encoder_layer needs self_attn to be an nn.MultiheadAttention.")
    owner = _get(ours, "ff", "your EncoderBlock") if hasattr(ours, "ff") else ours
    linear1, linear2 = _get(owner, "linear1", "your EncoderBlock"), _get(owner, "linear2", "your EncoderBlock")
    pairs = [
        (attn.in_proj_weight, layer.self_attn.in_proj_weight), (attn.in_proj_bias, layer.self_attn.in_proj_bias),
        (attn.out_proj.weight, layer.self_attn.out_proj.weight), (attn.out_proj.bias, layer.self_attn.out_proj.bias),
        (linear1.weight, layer.linear1.weight), (linear1.bias, layer.linear1.bias),
        (linear2.weight, layer.linear2.weight), (linear2.bias, layer.linear2.bias),
        (ours.norm1.weight, layer.norm1.weight), (ours.norm1.bias, layer.norm1.bias),
        (ours.norm2.weight, layer.norm2.weight), (ours.norm2.bias, layer.norm2.bias),
    ]
    with torch.no_grad():
        for dst, src in pairs:
            if dst is None or src is None:
                continue
            if dst.shape != src.shape:
                raise AssertionError(f"a parameter of your EncoderBlock has shape {tuple(dst.shape)}; PyTorch's has {tuple(src.shape)}.")
            dst.copy_(src)
    return ours


def with_torch_norms(block: nn.Module) -> nn.Module:
    """A deep copy of ``block`` whose ``norm1``/``norm2`` are PyTorch's ``nn.LayerNorm`` (same weights).

    Test cells about the block's wiring use it, so that a mistake in the learner's own LayerNorm
    costs points in the LayerNorm tests only, not again in every block test.
    """
    block = copy.deepcopy(block)
    for name in ("norm1", "norm2"):
        ours = getattr(block, name, None)
        if ours is None or not hasattr(ours, "weight") or not hasattr(ours, "bias"):
            continue
        weight = ours.weight
        torch_norm = nn.LayerNorm(weight.shape[-1], eps=float(getattr(ours, "eps", 1e-5)),
                                  device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            torch_norm.weight.copy_(weight)
            torch_norm.bias.copy_(ours.bias)
        torch_norm.train(ours.training)
        setattr(block, name, torch_norm)
    return block


# -- lesson 08: the decoder block and the whole encoder-decoder ----------------------------------------
#
# The name mapping (ours -> ``nn.TransformerDecoderLayer``)::
#
#     self_attn.*                            -> self_attn.*            (masked self-attention)
#     cross_attn.* (or multihead_attn.*)     -> multihead_attn.*       (queries: target, keys/values: memory)
#     linear1, linear2 (or ff.linear1/2)     -> linear1, linear2
#     norm1, norm2, norm3                    -> norm1, norm2, norm3    (self-attn, cross-attn, feed-forward)
#
# and for the whole model (ours -> ``nn.Transformer`` with custom encoder/decoder stacks)::
#
#     encoder_layers.i.*  -> encoder.layers.i.*        encoder_norm.* -> encoder.norm.* (pre-norm only)
#     decoder_layers.i.*  -> decoder.layers.i.*        decoder_norm.* -> decoder.norm.* (pre-norm only)
#
# The embeddings, the position table ``pe`` and the output layer ``generator`` are read off the
# learner's model as they are (the tests check the position table against its formula separately).


def _cross_attention(ours: nn.Module, what: str):
    for name in ("cross_attn", "multihead_attn"):
        try:
            return getattr(ours, name), name
        except AttributeError:
            continue
    raise AssertionError(f"{what} has no attribute `cross_attn`: name the cross-attention module cross_attn "
                         "(nn.MultiheadAttention(d_model, n_heads, batch_first=True)).")


def decoder_layer_state_dict(ours: nn.Module, what: str = "your DecoderBlock",
                             state: dict | None = None) -> dict[str, torch.Tensor]:
    """The learner's decoder block's weights under ``nn.TransformerDecoderLayer``'s parameter names.

    Args:
        ours: a decoder block with ``self_attn``, ``cross_attn``, ``linear1``/``linear2`` (or
            ``ff.linear1``/``ff.linear2``), ``norm1``, ``norm2``, ``norm3``.
        state: ``ours.state_dict()`` when the caller has it already.

    Returns:
        A state dict (detached clones) that ``nn.TransformerDecoderLayer.load_state_dict`` accepts.
    """
    return _decoder_weights(ours, what, state)[0]


def _decoder_weights(ours: nn.Module, what: str, state: dict | None):
    """(:func:`decoder_layer_state_dict`, the block's ``self_attn``)."""
    state = _state(ours, what) if state is None else state
    attn = _get(ours, "self_attn", what)
    self_state = _sub_state(state, "self_attn", attn, "your self_attn")
    out = {f"self_attn.{k}": v for k, v in _attention_weights(attn, self_state).items()}
    cross, name = _cross_attention(ours, what)
    cross_state = _sub_state(state, name, cross, f"your {name}")
    out.update({f"multihead_attn.{k}": v for k, v in _attention_weights(cross, cross_state, f"your {name}").items()})
    out.update(_feed_forward(state, what))
    out.update(_norms(state, ("norm1", "norm2", "norm3"), what))
    return {k: v.detach().clone() for k, v in out.items()}, attn


def to_torch_decoder_layer(ours: nn.Module, *, norm_first: bool | None = None, dropout: float = 0.0,
                           what: str = "your DecoderBlock", state: dict | None = None) -> nn.TransformerDecoderLayer:
    """PyTorch's ``nn.TransformerDecoderLayer(batch_first=True)`` holding a copy of the learner's block's weights.

    ``norm_first`` is read from ``ours.norm_first`` when not given (False if the block has none). The
    layer is on the learner's device and dtype, in the same train/eval mode as ``ours``. ``state``:
    ``ours.state_dict()`` when the caller has it already.
    """
    if norm_first is None:
        norm_first = bool(getattr(ours, "norm_first", False))
    weights, attn = _decoder_weights(ours, what, state)
    linear1 = weights["linear1.weight"]                                        # (d_ff, D)
    norm1 = _get(ours, "norm1", what)
    layer = nn.TransformerDecoderLayer(
        int(weights["norm1.weight"].numel()), _n_heads(attn), dim_feedforward=linear1.shape[0],
        dropout=dropout, layer_norm_eps=float(getattr(norm1, "eps", 1e-5)), batch_first=True, norm_first=norm_first,
    ).to(device=linear1.device, dtype=linear1.dtype)
    missing, unexpected = layer.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise AssertionError(f"{what}'s weights do not fit nn.TransformerDecoderLayer: missing {sorted(missing)}, "
                             f"unexpected {sorted(unexpected)}. Keep bias=True everywhere, as PyTorch's layer does.")
    layer.train(ours.training)
    return layer


class TorchTransformer(nn.Module):
    """The learner's embeddings, positions and output layer around PyTorch's ``nn.Transformer`` (a test oracle).

    ``forward(src, tgt, src_mask=None)`` takes the course's arguments (``src_mask`` (B, S) bool, True on
    real tokens) and returns logits (B, T, V), converting the masks to PyTorch's convention here.
    """

    def __init__(self, src_embed, tgt_embed, pe, transformer: nn.Transformer, generator, d_model: int):
        super().__init__()
        self.src_embed, self.tgt_embed, self.transformer, self.generator = src_embed, tgt_embed, transformer, generator
        self.register_buffer("pe", pe)
        self.d_model = d_model

    def forward(self, src, tgt, src_mask=None):
        scale = math.sqrt(self.d_model)
        x = self.src_embed(src) * scale + self.pe[: src.shape[1]]                  # (B, S, D)
        y = self.tgt_embed(tgt) * scale + self.pe[: tgt.shape[1]]                  # (B, T, D)
        T = tgt.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt.device).triu(1)   # PyTorch: True = blocked
        padding = None if src_mask is None else ~src_mask                          # PyTorch: True on padding
        h = self.transformer(x, y, tgt_mask=causal, src_key_padding_mask=padding, memory_key_padding_mask=padding)
        return self.generator(h)


def to_torch_transformer(ours: nn.Module, what: str = "your Transformer") -> TorchTransformer:
    """PyTorch's ``nn.Transformer`` holding a copy of the learner's encoder and decoder stacks (eval mode).

    Args:
        ours: a model with ``src_embed``, ``tgt_embed``, ``pe`` (P, D), ``encoder_layers``,
            ``decoder_layers``, ``encoder_norm``/``decoder_norm`` (modules or None), ``generator`` and
            ``norm_first`` (see lesson 08).

    Returns:
        A :class:`TorchTransformer`: copies of the learner's embeddings, position table and output
        layer around ``nn.Transformer(batch_first=True, custom_encoder=..., custom_decoder=...)`` whose
        stacks hold copies of the learner's blocks and final norms.
    """
    enc_layers = list(_get(ours, "encoder_layers", what))
    dec_layers = list(_get(ours, "decoder_layers", what))
    if not enc_layers or not dec_layers:
        raise AssertionError(f"{what} needs at least one encoder and one decoder layer.")
    norm_first = bool(getattr(ours, "norm_first", False))
    state = _state(ours, what)           # every tensor at once (a layer kept outside state_dict reads its own)

    def final_norm(name):
        if f"{name}.weight" not in state:
            return None if getattr(ours, name, None) is None else _need(state, f"{name}.weight", what)
        weight = state[f"{name}.weight"]
        copy_ = nn.LayerNorm(weight.shape[-1], eps=float(getattr(_get(ours, name, what), "eps", 1e-5)),
                             device=weight.device, dtype=weight.dtype)
        copy_.load_state_dict({"weight": weight.detach().clone(), "bias": _need(state, f"{name}.bias", what).detach().clone()})
        return copy_

    encoder = [to_torch_encoder_layer(layer, norm_first=norm_first, state=_under(state, f"encoder_layers.{i}") or None)
               for i, layer in enumerate(enc_layers)]
    decoder = [to_torch_decoder_layer(layer, norm_first=norm_first, what=f"{what}'s decoder layer",
                                      state=_under(state, f"decoder_layers.{i}") or None) for i, layer in enumerate(dec_layers)]
    d_model = int(_need(state, "src_embed.weight", what).shape[1])
    transformer = nn.Transformer(
        d_model, nhead=encoder[0].self_attn.num_heads, batch_first=True,
        custom_encoder=nn.TransformerEncoder(encoder[0], len(encoder), enable_nested_tensor=False),
        custom_decoder=nn.TransformerDecoder(decoder[0], len(decoder)))
    # nn.Transformer re-initialises every weight matrix of its stacks: the copies go in afterwards
    transformer.encoder.layers, transformer.decoder.layers = nn.ModuleList(encoder), nn.ModuleList(decoder)
    transformer.encoder.norm, transformer.decoder.norm = final_norm("encoder_norm"), final_norm("decoder_norm")
    # fresh modules holding copies of the weights (read as tensors: this also works on the grader's stand-ins)
    src_embed, tgt_embed = (nn.Embedding.from_pretrained(_need(state, f"{n}.weight", what).detach().clone())
                            for n in ("src_embed", "tgt_embed"))
    weight = _need(state, "generator.weight", what)                           # (V, D)
    generator = nn.Linear(weight.shape[1], weight.shape[0], bias="generator.bias" in state,
                          device=weight.device, dtype=weight.dtype)
    generator.load_state_dict({k: v.detach().clone() for k, v in _under(state, "generator").items()})
    pe = (state["pe"] if "pe" in state else _get(ours, "pe", what)).detach().clone()
    return TorchTransformer(src_embed, tgt_embed, pe, transformer, generator, d_model).eval()

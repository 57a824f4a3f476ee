"""The forbidden names' tables: the ATen kernels behind each Python name, the families of kernels that compute the
same thing under other names (read from the dispatcher's own list), and the Python modules some names run."""

from __future__ import annotations

import torch

# A pseudo-name: among a guard's forbidden names it lets Triton's interpreter move data (see above). Not an
# identifier, so no attribute, import or string of a learner's code matches it by accident.
TRITON = "<triton interpreter>"

# Python-level name -> the ATen kernels behind it (the names after ``aten::``). ``_safe_softmax`` is
# what SDPA's math path runs (a softmax that gives 0 to fully masked rows); nothing else in PyTorch's
# Python API reaches it.
_SDPA = ("scaled_dot_product_attention", "_scaled_dot_product_attention_math", "_scaled_dot_product_flash_attention",
         "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
         "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_fused_attention_overrideable",
         "_scaled_dot_product_attention_math_for_mps", "_fused_sdp_choice", "_flash_attention_forward",
         "_efficient_attention_forward", "_cudnn_attention_forward", "_safe_softmax")
# PyTorch's matrix products, as the dispatcher sees them (``@``, ``torch.matmul`` and ``einsum`` arrive
# decomposed into these).
_MATMUL = ("mm", "bmm", "matmul", "addmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "linear",
           "_addmm_activation", "einsum", "tensordot")
KERNELS = {
    "softmax": ("softmax", "_softmax", "_safe_softmax", "special_softmax"),
    "matmul": _MATMUL,
    "einsum": _MATMUL,
    "log_softmax": ("log_softmax", "_log_softmax", "special_log_softmax"),
    "scaled_dot_product_attention": _SDPA,
    "multi_head_attention_forward": _SDPA + ("_native_multi_head_attention",),
    "MultiheadAttention": _SDPA + ("_native_multi_head_attention",),
}

# The lists above name the kernels a Python name reaches; PyTorch has other kernels that compute the same
# thing under other names (``torch._masked_softmax``, the sparse softmax, the fused attention kernels, each
# with a softmax inside, ``conv3d`` or ``torch.convolution`` for a ``conv2d``, ``_transformer_encoder_layer_fwd``
# for a whole encoder layer). So each forbidden name also refuses its *families*: every ATen kernel
# registered in this PyTorch whose name matches the family's pattern, read from the dispatcher's own list.
FAMILY_PATTERNS = {
    "softmax": r"softmax",
    "attention": r"attention|_sdp_|transformer_encoder_layer",
    "transformer_layer": r"transformer_encoder_layer",
    "convolution": r"conv(?!ert)|convolution",
    "matmul": (r"(^|_)(mm|bmm|mv|addmm|addmv|addbmm|baddbmm|addr|dot|vdot|matmul|linear|bilinear|trilinear|einsum|"
               r"tensordot|kron|inner|outer|ger|chain_matmul|multi_dot|int_mm|grouped_mm|cdist|euclidean_dist)(_|$)|"
               r"pack_mm|linear_combination|cdist"),
}
FAMILIES = {
    "softmax": ("softmax", "attention"),
    "log_softmax": ("softmax", "attention"),
    "scaled_dot_product_attention": ("attention",),
    "multi_head_attention_forward": ("attention",),
    "MultiheadAttention": ("attention",),
    # an encoder layer's own kernel only: the learner's block may use nn.MultiheadAttention (its fused path)
    "TransformerEncoderLayer": ("transformer_layer",),
    "TransformerEncoder": ("transformer_layer",),
    "conv1d": ("convolution",), "conv2d": ("convolution",), "conv3d": ("convolution",), "Conv2d": ("convolution",),
    # a convolution is a matrix product too, and so is every fused attention kernel
    "matmul": ("matmul", "convolution", "attention"),
    "einsum": ("matmul", "convolution", "attention"),
}

# Names that are not PyTorch's: the Python modules whose code they run. While a check forbids one, no function
# of those modules may run, whatever name or helper reached it (lesson 10: transformers' BERT, and the course's
# own bridge to it, which its tests use as their oracle).
MODULE_TABLE = {
    **{name: ("transformers.models.bert",) for name in ("BertModel", "BertForPreTraining", "BertLayer", "BertEncoder")},
    **{name: ("course.oracles.bert",) for name in ("to_hf_model", "to_hf_pretraining", "hf_forward", "hf_outputs")},
}


def _frozen(table: dict) -> tuple:
    return tuple(sorted((k, tuple(v) if isinstance(v, (tuple, list)) else v) for k, v in table.items()))


def _read_aten() -> frozenset[str]:
    try:
        names = torch._C._dispatch_get_all_op_names()
    except (AttributeError, RuntimeError):              # an older PyTorch: the lists above are what we know
        names = ()
    return frozenset(n.split("::", 1)[1].split(".")[0] for n in names if n.startswith("aten::"))


# What the checks read: frozen copies, taken when this module is imported (before any learner's code runs; the
# grading worker holds them by identity, see integrity_pieces), so a notebook that edits KERNELS or the tables
# above changes nothing the checks see.
DIRECT, FAMILY_OF, PATTERN_OF, MODULE_OF = (_frozen(t) for t in (KERNELS, FAMILIES, FAMILY_PATTERNS, MODULE_TABLE))
ATEN_NAMES = _read_aten()          # every ATen kernel name this PyTorch registers


def modules_for(names) -> tuple[str, ...]:
    """The Python modules (prefixes of ``__name__``) whose code these forbidden names run."""
    table = dict(MODULE_OF)
    return tuple(sorted({m for name in names for m in table.get(str(name), ())}))


def family(name: str) -> frozenset[str]:
    """The ATen kernels of one family of :data:`FAMILY_PATTERNS` (``"softmax"``, ``"attention"``...)."""
    import re

    pattern = re.compile(dict(PATTERN_OF)[name])
    return frozenset(n for n in ATEN_NAMES if pattern.search(n) and not n.lstrip("_").startswith("upsample"))


def kernels_for(names, *, families: bool = True) -> frozenset[str]:
    """The ATen kernels behind these Python names and (``families``) every kernel of their families (names
    without a known kernel add nothing)."""
    direct, of = dict(DIRECT), dict(FAMILY_OF)
    out: set[str] = set()
    for name in names:
        for key in {str(name), str(name).lstrip("_")}:
            out.update(direct.get(key, ()))
            for fam in of.get(key, ()) if families else ():
                out.update(family(fam))
    return frozenset(out)

"""Helpers for lesson 11's test cells (the Vision Transformer), so that each locked cell reads as its one idea.

Nothing here computes a graded answer (``course dist``'s audit checks that every shipped function
differs from the graded ones). The visible tests write their small oracles out themselves (a strided
``F.conv2d`` for the patch embedding); the hidden tests' oracles (``F.unfold`` patches, the convolution)
live on the instructor's side, in ``course/tools/references/refs_11.py``; the whole model is compared
with ``transformers.ViTModel`` / ``ViTForImageClassification`` holding a copy of the learner's weights
(:mod:`course.oracles.vit`). The learner's modules are only called, read through ``state_dict()``, or
given parameters with :func:`course.checks.set_params`, so every helper works the same in the
learner's kernel and under the grader's judge.
"""

from __future__ import annotations

import torch

from course import checks
from course.oracles.vit import to_hf_vit

__all__ = ["make_vit", "vit_config", "transformers_outputs", "check_vit_matches"]


def vit_config(image_size=8, patch_size=2, in_channels=1, n_classes=10, d_model=32, n_layers=2, n_heads=4, d_ff=64,
               eps=1e-12) -> dict:
    """The keyword arguments of a small test ViT (the learner's ``ViT`` takes them all by name)."""
    return dict(image_size=image_size, patch_size=patch_size, in_channels=in_channels, n_classes=n_classes,
                d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=d_ff, eps=eps)


def make_vit(cls, cfg: dict, generator: torch.Generator, **extra):
    """A fresh learner ``cls(**cfg)`` in eval mode, with random norms, class token and positions (so that a
    swapped or missing piece shows). Returns the model."""
    model = checks.call(cls, **cfg, **extra, what="ViT.__init__").eval()
    state = checks.parameter_state(model, "your ViT")   # parameters only: buffers keep their values
    values = {}
    for key, value in state.items():
        if not value.is_floating_point():
            continue
        if "norm" in key and key.endswith("weight"):
            values[key] = 1.0 + 0.3 * torch.randn(value.shape, generator=generator)
        elif "norm" in key and key.endswith("bias"):
            values[key] = 0.3 * torch.randn(value.shape, generator=generator)
        elif key.endswith(("cls_token", "pos_embedding")):
            values[key] = 0.5 * torch.randn(value.shape, generator=generator)
    checks.set_params(model, values, "your ViT")
    return model


def transformers_outputs(model, cfg: dict, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(hidden states, logits)`` of ``transformers``' ViT holding a copy of the learner's weights."""
    hf = to_hf_vit(model, classifier=True, **cfg)               # ViTForImageClassification; hf.vit is its ViTModel
    with torch.no_grad():
        hidden = hf.vit(pixel_values=images).last_hidden_state    # ViTModel(add_pooling_layer=False)
        return hidden, hf.classifier(hidden[:, 0])                # = hf(pixel_values=images).logits


def check_vit_matches(cls, cfg: dict, images: torch.Tensor, generator: torch.Generator, what: str):
    """A fresh learner ViT equals ``transformers``' ViT with the same weights: hidden states and logits (atol 1e-5)."""
    model = make_vit(cls, cfg, generator)
    want_hidden, want_logits = transformers_outputs(model, cfg, images)
    hidden = checks.call(model.encode, images, what="ViT.encode")
    checks.check_close(hidden, want_hidden, f"your ViT.encode {what}", atol=1e-5,
                       hint="transformers' ViT: cat([cls, patch embeddings]) + positions, then pre-norm blocks "
                            "(x + attn(norm1(x)), x + mlp(norm2(x)), GELU), then a final LayerNorm with your eps.")
    logits = checks.call(model, images, what="ViT.forward")
    checks.check_close(logits, want_logits, f"your ViT's logits {what}", atol=1e-5,
                       hint="the head reads the class token, at index 0 of the normalised hidden states.")

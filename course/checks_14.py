"""Helpers for lesson 14's test cells (induction heads), so that each locked cell reads as its one idea.

Nothing here computes a graded answer. Hidden tests compare the learner's code with the float64
references kept on the instructor's side (``course/tools/references/refs_14.py``); visible tests use
worked examples built here: attention patterns whose scores are known by construction
(:func:`pattern`), and small matrices whose composition score is known.

The learner's modules are only called, read (``state_dict``, ``attention_weights``) or given
parameters through :func:`course.checks.set_params`, so every helper works the same in the learner's
kernel and under the grader's judge. A test cannot enter a learner's context manager under the judge
(a ``with`` statement needs the object itself, and the judge holds a stand-in for it), so the tests
call the learner's ``ablate_heads`` through ``forward_with_ablation``, the two-line function the lesson
gives below it, which runs the ``with`` block where the learner's code runs.
"""

from __future__ import annotations

import torch

from course import checks

__all__ = ["make_model", "forward", "expected_names", "check_structure", "ablated", "pattern",
           "random_weights", "check_scores"]


def make_model(cls, vocab_size, d_model, n_heads, n_layers=2, block_size=16, *, generator):
    """A fresh learner ``AttentionOnlyTransformer`` with random weights (N(0, 1/fan_in) matrices)."""
    model = checks.call(cls, vocab_size=vocab_size, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
                        block_size=block_size, what="AttentionOnlyTransformer.__init__")
    checks.check(isinstance(model, torch.nn.Module), "AttentionOnlyTransformer(...) should build an nn.Module "
                                                     f"(a subclass of nn.Module); it built a {type(model).__name__}.")
    checks.randomise_weights(model, generator, "your AttentionOnlyTransformer")
    return model


def forward(model, idx, n_layers, what="your AttentionOnlyTransformer"):
    """``(logits, attention_weights)`` of the learner's ``model(idx)``, both checked for their shapes."""
    B, T = idx.shape
    with torch.no_grad():
        logits = checks.call(model, idx, what="AttentionOnlyTransformer.forward")
    checks.check(isinstance(logits, torch.Tensor), f"{what}(idx) should return the logits, a tensor; it returned a "
                                                   f"{type(logits).__name__}.")
    checks.check(logits.dim() == 3 and tuple(logits.shape[:2]) == (B, T),
                 f"{what}(idx) with idx of shape {(B, T)} returned logits of shape {tuple(logits.shape)}; they should "
                 f"be (B, T, V) = ({B}, {T}, vocab_size).")
    weights = getattr(model, "attention_weights", None)
    checks.check(isinstance(weights, (list, tuple)),
                 f"after a forward pass, {what}.attention_weights should be a list with one (B, H, T, T) tensor per "
                 f"layer; it is a {type(weights).__name__}.")
    weights = list(weights)
    checks.check(len(weights) == n_layers,
                 f"{what}.attention_weights holds {len(weights)} tensors for a model of {n_layers} layers: keep one "
                 "per layer, from the latest forward pass only (replace the list at each call, do not append to it).")
    return logits, weights


def expected_names(n_layers):
    """The parameter names the lesson's contract gives an ``AttentionOnlyTransformer``."""
    names = ["embed.weight", "pos.weight", "unembed.weight"]
    names += [f"layers.{i}.{w}.weight" for i in range(n_layers) for w in ("w_q", "w_k", "w_v", "w_o")]
    return names


def check_structure(model, vocab_size, d_model, n_layers, block_size, what="your AttentionOnlyTransformer"):
    """The named parameters, with their shapes, and nothing else (no bias, no MLP, no norm)."""
    state = checks.call(model.state_dict, what=f"{what}.state_dict")
    shapes = {"embed.weight": (vocab_size, d_model), "pos.weight": (block_size, d_model),
              "unembed.weight": (vocab_size, d_model)}
    for i in range(n_layers):
        for w in ("w_q", "w_k", "w_v", "w_o"):
            shapes[f"layers.{i}.{w}.weight"] = (d_model, d_model)
    for name, shape in shapes.items():
        checks.check(checks.has_param(state, name),
                     f"{what} (n_layers={n_layers}) has no parameter {name!r}. Name the parts as the contract does: "
                     "embed, pos, layers[i].w_q / w_k / w_v / w_o (nn.Linear(D, D, bias=False)), unembed.")
        if name in state:
            checks.check(tuple(state[name].shape) == shape,
                         f"{what}.{name} has shape {tuple(state[name].shape)}; it should be {shape} "
                         f"(vocab_size={vocab_size}, d_model={d_model}, block_size={block_size}).")
    params = checks.call(model.named_parameters, what=f"{what}.named_parameters")
    names = [item[0] for item in (params if isinstance(params, list) else list(params))]
    extra = [n for n in names if n not in shapes and not any(n.startswith(k.rsplit(".", 1)[0] + ".parametrizations.")
                                                             for k in shapes)]
    checks.check(not extra, f"{what} has parameters the contract does not: {', '.join(extra[:6])}. An attention-only "
                            "Transformer has no biases, no MLP and no LayerNorm: only the embeddings, the four "
                            "projections of each layer and the unembedding.")


def ablated(forward_with_ablation, model, idx, heads, n_layers):
    """``(logits, weights)`` of the learner's model inside ``with ablate_heads(model, heads)``, through the
    ``forward_with_ablation`` the lesson gives below ``ablate_heads``."""
    with torch.no_grad():
        out = checks.call(forward_with_ablation, model, idx, heads, what="ablate_heads")
    checks.check(isinstance(out, (tuple, list)) and len(out) == 2,
                 "forward_with_ablation (given below ablate_heads) should return (logits, weights): leave it as the "
                 "lesson wrote it.")
    logits, weights = out
    checks.check(isinstance(logits, torch.Tensor) and tuple(logits.shape[:2]) == tuple(idx.shape),
                 f"inside `with ablate_heads(model, {heads})`, model(idx) should still return logits of shape "
                 f"{(*idx.shape, 'V')}.")
    checks.check(isinstance(weights, (list, tuple)) and len(weights) == n_layers,
                 f"inside `with ablate_heads(model, {heads})`, model.attention_weights should still hold one tensor "
                 f"per layer ({n_layers}).")
    return logits, list(weights)


def pattern(B, H, length, keys_of, fill=None):
    """Attention weights (B, H, 2L+1, 2L+1) whose row t puts all its weight on key ``keys_of(h, t)`` (a
    position 0..t, or None for a uniform row over keys 0..t). ``fill`` gives row 0 (default: key 0)."""
    T = 2 * length + 1
    w = torch.zeros(B, H, T, T)
    for h in range(H):
        for t in range(T):
            j = keys_of(h, t)
            if j is None:
                w[:, h, t, :t + 1] = 1.0 / (t + 1)
            else:
                w[:, h, t, j] = 1.0
    return w


def random_weights(B, H, T, generator, sharpness=3.0):
    """Random causal attention weights (B, H, T, T): softmax of random scores over keys 0..t."""
    scores = sharpness * torch.randn(B, H, T, T, generator=generator)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)


def check_scores(got, expected, what, hint=""):
    """A per-head score: a tensor of shape (H,) equal to ``expected`` (to 1e-5)."""
    checks.check(isinstance(got, torch.Tensor), f"{what} should return a tensor of shape (H,); it returned a "
                                                f"{type(got).__name__}.")
    checks.check_shape(got, tuple(expected.shape), what)
    checks.check_close(got.double(), expected.double(), what, atol=1e-5, hint=hint)

"""Helpers for lesson 09's test cells (the GPT language model), so that each locked cell reads as its one idea.

Nothing here computes a graded answer. Tests compute what they expect themselves (visible tests:
small worked examples, ``nn.MultiheadAttention`` and ``transformers``' GPT-2 holding a copy of the
learner's weights through :mod:`course.oracles.gpt2`; hidden tests: the instructor-side references in
``course/tools/references/refs_09.py``). The learner's modules are only called, read
(``state_dict``, attributes) or given parameters with :func:`course.checks.set_params`, so every
helper works the same in the learner's kernel and under the grader's judge.
"""

from __future__ import annotations

import torch

from course import checks

__all__ = ["randomise", "make_gpt", "make_attention", "sample_frequencies", "check_frequencies",
           "check_same_tokens", "gpt_logits", "expected_parameters", "torch_causal_attention", "attention_dropout_probe",
           "mlp_dropout_probe", "block_attention_dropout_probe", "check_output_dropout", "check_gpt_dropout"]


def randomise(module, generator: torch.Generator, what: str, scale: float = 0.3):
    """Give every floating-point parameter of the learner's ``module`` random values (LayerNorm gains
    around 1), through ``set_params``. A head tied to ``tok_emb`` gets the embedding's values.
    Returns the module."""
    state = checks.parameter_state(module, what)         # parameters only: buffers keep their values
    values = {}
    for k, v in state.items():
        if not v.is_floating_point():
            continue
        noise = scale * torch.randn(v.shape, generator=generator)
        is_norm_gain = v.dim() == 1 and k.endswith("weight") and ("ln" in k.split(".")[-2] or "norm" in k)
        values[k] = 1.0 + noise if is_norm_gain else noise
    if "head.weight" in values and "tok_emb.weight" in values:
        values["head.weight"] = values["tok_emb.weight"]
    checks.set_params(module, values, what)
    return module


def make_gpt(cls, vocab_size, block_size, d_model, n_heads, n_layers, *, generator, dropout=0.0):
    """A fresh learner ``GPT`` in eval mode with random weights."""
    model = checks.call(cls, vocab_size, block_size, d_model=d_model, n_heads=n_heads, n_layers=n_layers,
                        dropout=dropout, what="GPT.__init__").eval()
    return randomise(model, generator, "your GPT")


def make_attention(cls, d_model, n_heads, *, generator):
    """A fresh learner ``CausalSelfAttention`` in eval mode with random weights."""
    attn = checks.call(cls, d_model, n_heads, what="CausalSelfAttention.__init__").eval()
    return randomise(attn, generator, "your CausalSelfAttention")


def gpt_logits(model, idx, past_kv=None, what="your GPT"):
    """``(logits, present_kv)`` of the learner's ``model(idx, past_kv)``, checked to be a pair."""
    args = (idx,) if past_kv is None else (idx, past_kv)
    out = checks.call(model, *args, what="GPT.forward")
    checks.check(isinstance(out, (tuple, list)) and len(out) == 2,
                 f"{what}'s forward should return a pair (logits, present_kv); it returned a {type(out).__name__}.")
    return out


def expected_parameters(vocab_size, block_size, d_model, n_layers):
    """Parameters of the lesson's GPT: embeddings, n_layers x (12 D^2 + 13 D), ln_f; the head is tied."""
    D = d_model
    return vocab_size * D + block_size * D + n_layers * (12 * D * D + 13 * D) + 2 * D


def sample_frequencies(sample_next, logits, n, *, seed, rule="", **kwargs):
    """Frequencies of each token among ``n`` draws of the learner's ``sample_next`` per row of ``logits``.

    ``logits`` (R, V): every row is repeated ``n`` times (one batch of R * n rows, one call).
    Returns a (R, V) tensor of frequencies. With ``rule``, an error raised by ``sample_next`` becomes a
    failure that names the rule the call checks.
    """
    R, V = logits.shape
    batch = logits.repeat_interleave(n, dim=0)                          # (R * n, V), row r first n times
    # an error of the learner's code becomes a failure named by the rule the call checks
    out = checks.call(sample_next, batch, generator=torch.Generator().manual_seed(seed), **kwargs,
                      what=f"sample_next(logits of shape {(R * n, V)}, {kwargs})", hint=f"The rule: {rule}." if rule else "")
    checks.check_shape(out, (R * n,), f"sample_next on logits of shape {(R * n, V)}")
    checks.check(out.dtype == torch.long, f"sample_next should return token ids as a LongTensor; yours is {out.dtype}.")
    checks.check(bool(((out >= 0) & (out < V)).all()), f"sample_next returned ids outside 0..{V - 1}.")
    counts = torch.stack([torch.bincount(out[r * n:(r + 1) * n], minlength=V) for r in range(R)])
    return counts.double() / n


def check_frequencies(freq, probs, what, *, atol=0.02, hint=""):
    """Sampled frequencies match the probabilities: zero exactly where the probability is zero, and
    within ``atol`` elsewhere (at 20 000 draws one standard error is at most 0.0035)."""
    probs = torch.as_tensor(probs, dtype=torch.float64)
    never = probs == 0
    if bool((freq[never] > 0).any()):
        idx = (never & (freq > 0)).nonzero()[0].tolist()
        raise AssertionError(f"{what}: token {idx[-1]} (row {idx[0]}) was drawn {freq[tuple(idx)].item():.4f} of the "
                             f"time, but it should never be drawn. {hint}".strip())
    missing = (probs > 0.05) & (freq == 0)
    if bool(missing.any()):
        idx = missing.nonzero()[0].tolist()
        raise AssertionError(f"{what}: token {idx[-1]} (row {idx[0]}) should be drawn with probability "
                             f"{probs[tuple(idx)].item():.3f}, but it never was. {hint}".strip())
    checks.check_close(freq, probs, f"{what} (sampled frequencies; rows = logits rows, columns = tokens)",
                       atol=atol, rtol=0, hint=hint)


def check_same_tokens(got, want, what, hint=""):
    """Two token tensors are identical; the message names the first sequence and step that differ."""
    checks.check_shape(got, tuple(want.shape), what)
    diff = got != want
    if bool(diff.any()):
        b, t = diff.nonzero()[0].tolist()
        raise AssertionError(f"{what}: sequence {b} differs first at position {t} (token {int(got[b, t])}, expected "
                             f"{int(want[b, t])}); {int(diff.sum())} of {diff.numel()} tokens differ. {hint}".strip())


def torch_causal_attention(attn, x, n_heads):
    """``nn.MultiheadAttention`` holding a copy of the learner's ``CausalSelfAttention`` weights (``qkv`` ->
    ``in_proj``, ``proj`` -> ``out_proj``), applied to ``x`` with a causal mask: what the learner's
    module should return without a cache."""
    state = checks.call(attn.state_dict, what="CausalSelfAttention.state_dict")
    need = ["qkv.weight", "qkv.bias", "proj.weight", "proj.bias"]
    missing = [k for k in need if k not in state]
    checks.check(not missing, f"your CausalSelfAttention has no parameter {missing[0] if missing else ''!r}: use "
                              "qkv = nn.Linear(D, 3 * D) and proj = nn.Linear(D, D).")
    D, T = x.shape[-1], x.shape[1]
    mha = torch.nn.MultiheadAttention(D, n_heads, batch_first=True).eval()
    mha.load_state_dict({"in_proj_weight": state["qkv.weight"], "in_proj_bias": state["qkv.bias"],
                         "out_proj.weight": state["proj.weight"], "out_proj.bias": state["proj.bias"]})
    blocked = torch.ones(T, T, dtype=torch.bool).triu(1)          # PyTorch's convention: True = may NOT attend
    with torch.no_grad():
        return mha(x, x, x, attn_mask=blocked, need_weights=False)[0]


# --- Dropout, site by site ----------------------------------------------------------------------------------
# The probes give the learner's module weights that make ONE sublayer add the same vector at every position
# (course.checks.uniform_attention_values / constant_hidden_values) and silence the rest: then a dropout on
# the attention weights shows as values that differ down a feature column (checks.check_dropout_inside), and
# a dropout on a sublayer's output as entries that are exactly zero (check_output_dropout), however the
# dropout is written and in whatever order its random masks are drawn.

def attention_dropout_probe(cls, d_model, n_heads, p, *, generator):
    """The learner's ``CausalSelfAttention(d_model, n_heads, dropout=p)`` in training mode with q = k = 0
    (uniform weights over the keys each query may see) and the same value for every token: without
    dropout it returns one fixed vector at every position."""
    attn = checks.call(cls, d_model, n_heads, dropout=p, what="CausalSelfAttention.__init__")
    state = checks.call(attn.state_dict, what="CausalSelfAttention.state_dict")
    checks.set_params(attn, checks.uniform_attention_values(state, "qkv.weight", "qkv.bias", "proj.weight", "proj.bias",
                                                            generator), "your CausalSelfAttention")
    attn.train()
    return attn


def mlp_dropout_probe(cls, d_model, n_heads, p, *, generator):
    """The learner's ``Block(d_model, n_heads, dropout=p)`` in training mode whose attention adds nothing
    (``attn.proj`` zero) and whose MLP adds one fixed vector at every position (``mlp.fc`` weight zero,
    positive bias)."""
    block = checks.call(cls, d_model, n_heads, dropout=p, what="Block.__init__")
    state = checks.call(block.state_dict, what="Block.state_dict")
    values = {**checks.zero_values(state, "attn.proj.weight", "attn.proj.bias"),
              **checks.constant_hidden_values(state, "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias",
                                              generator)}
    checks.set_params(block, values, "your Block")
    block.train()
    return block


def block_attention_dropout_probe(cls, d_model, n_heads, p, *, generator):
    """The learner's ``Block(d_model, n_heads, dropout=p)`` in training mode whose attention is probed as in
    :func:`attention_dropout_probe` (``attn.qkv`` and ``attn.proj`` set so that, without dropout on its weights,
    it adds one fixed vector at every position) and whose MLP adds nothing (``mlp.proj`` zero): what the block
    adds to its input is what its attention returns, so a Block that does not hand its dropout to its
    attention shows it."""
    block = checks.call(cls, d_model, n_heads, dropout=p, what="Block.__init__")
    state = checks.call(block.state_dict, what="Block.state_dict")
    names = ("attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias", "mlp.proj.weight", "mlp.proj.bias")
    missing = [n for n in names if not checks.has_param(state, n)]
    checks.check(not missing, f"your Block has no parameter {missing[0] if missing else ''!r}; name the parts as the "
                              "docstrings say (attn.qkv, attn.proj, mlp.fc, mlp.proj).")
    values = {**checks.uniform_attention_values(state, *names[:4], generator),
              **checks.zero_values(state, "mlp.proj.weight", "mlp.proj.bias")}
    checks.set_params(block, values, "your Block")
    block.train()
    return block


def check_output_dropout(delta, p, what, site, *, hint=""):
    """``delta`` is what a probed sublayer added in training mode with dropout ``p``: a dropout on its output
    zeroes about a fraction p of the entries (nothing else in the probe gives exact zeros that often)."""
    zeros = (delta.detach().abs() <= 1e-7).double().mean().item()
    checks.check(zeros > p / 2, f"{what}: {zeros:.0%} of the entries it added are exactly 0 with dropout p = {p}; a dropout "
                                f"{site} zeroes about {p:.0%} of them. " + (hint or "Apply it there, in training mode."))


def check_gpt_dropout(model, n_layers, idx, x, what):
    """The learner's ``GPT`` (built with 0 < dropout < 1, random weights, eval mode) drops inside every block
    and on the embeddings' sum, in training mode only. The embeddings are probed with every block silenced
    (``attn.proj`` and ``mlp.proj`` zero): then only a dropout on the embeddings can tell training from eval."""
    for i in range(n_layers):
        block = model.blocks[i]
        block.eval()
        quiet, _ = checks.call(block, x, what=f"GPT.blocks[{i}]")
        block.train()
        noisy, _ = checks.call(block, x, what=f"GPT.blocks[{i}]")
        block.eval()
        checks.check(not torch.allclose(noisy, quiet, atol=1e-5),
                     f"{what}: blocks[{i}] gives the same output in training and eval mode; build every Block with the "
                     "model's dropout.")
    state = checks.call(model.state_dict, what="GPT.state_dict")
    silence = [k for k in state if k.startswith("blocks.") and k.endswith(("attn.proj.weight", "attn.proj.bias",
                                                                            "mlp.proj.weight", "mlp.proj.bias"))]
    checks.check(len(silence) == 4 * n_layers, f"{what} should have blocks.<i>.attn.proj and blocks.<i>.mlp.proj (weight "
                                                "and bias) for every block; name the parts as the docstrings say.")
    checks.set_params(model, {k: torch.zeros(state[k].shape) for k in silence}, what)
    model.eval()
    quiet, _ = gpt_logits(model, idx)
    model.train()
    noisy, _ = gpt_logits(model, idx)
    model.eval()
    checks.check(not torch.allclose(noisy, quiet, atol=1e-5),
                 f"{what}, with every block silenced (attn.proj and mlp.proj zero): the logits are the same in training and "
                 "eval mode, so nothing drops the embeddings. Apply dropout to tok_emb(idx) + pos_emb(pos), in training "
                 "mode only.")

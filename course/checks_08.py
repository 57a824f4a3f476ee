"""Helpers for lesson 08's test cells (the full Transformer, decoding, checkpoint averaging).

Nothing here computes a graded answer. The centre piece is :class:`TableModel`, a tiny, fully
deterministic "translation model" with the interface the lesson's decoders use (``pad_id``,
``encode(src, src_mask)``, ``decode(tgt, memory, src_mask)``, ``forward``): its next-token scores come
from a fixed table, so a test knows every sequence's probability and can compare ``greedy_decode``
and ``beam_search`` with an exhaustive search. Tests build it here (a package class), so that an
instance can be handed to the learner's decoders under the grader too.
"""

from __future__ import annotations


import torch
from torch import nn

from course import checks

__all__ = ["TableModel", "length_penalty_model", "make_decoder_block", "DROPOUT_SITES", "decoder_dropout_probe",
           "check_transformer_dropout", "check_decoder_block", "randomise_norms", "call_model", "gnmt_penalty",
           "sequence_logprob", "check_hypotheses", "strip_after_eos", "random_state_dicts", "check_embedding_init",
           "check_final_norms", "check_no_dropout_at_zero"]

PAD, BOS, EOS = 0, 1, 2


class TableModel(nn.Module):
    """A "translation model" whose next-token scores are read from a table.

    The score of token ``v`` after the prefix ``<bos> y_1 .. y_t`` is::

        table[min(t, L - 1), y_t, v] + mean over the REAL source tokens s of src_table[s, v]

    (``y_0`` = ``<bos>``), turned into log-probabilities by a log-softmax. So the model is a Markov
    chain over target tokens whose steps depend on the position, nudged by the source sentence; the
    source's padding changes nothing only when ``src_mask`` is passed.

    Args:
        table: (L, V, V) scores, ``table[t, prev, v]``.
        src_table: (V_src, V) scores added per real source token (averaged); zeros if None.
        pad_id: the padding id of the source and of decoded output (0).

    Interface (as the lesson's ``Transformer``):
        ``encode(src (B, S), src_mask (B, S) or None) -> memory (B, S, V)``;
        ``decode(tgt (B, T), memory, src_mask (B, S) or None) -> logits (B, T, V)``, log-probabilities;
        ``forward(src, tgt, src_mask=None)``.
    """

    def __init__(self, table: torch.Tensor, src_table: torch.Tensor | None = None, pad_id: int = PAD):
        super().__init__()
        table = torch.as_tensor(table, dtype=torch.float32)
        if table.dim() != 3 or table.shape[1] != table.shape[2]:
            raise ValueError(f"table must be (L, V, V), got {tuple(table.shape)}")
        V = table.shape[-1]
        if src_table is None:
            src_table = torch.zeros(V, V)
        self.register_buffer("table", table)
        self.register_buffer("src_table", torch.as_tensor(src_table, dtype=torch.float32))
        self.pad_id = pad_id
        self.vocab_size = V

    @classmethod
    def from_probs(cls, rows: dict, V: int = 5, L: int = 5):
        """A table from readable probabilities: ``rows[(t, prev)]`` (or ``rows[(None, prev)]`` for every t) is a
        dict ``{token: probability}``; unlisted tokens get 1e-6, unlisted rows are uniform over <eos> and 3.. V-1."""
        table = torch.zeros(L, V, V)
        uniform = {v: 1.0 for v in [EOS] + list(range(3, V))}
        for t in range(L):
            for prev in range(V):
                row = rows.get((t, prev), rows.get((None, prev), uniform))
                probs = torch.full((V,), 1e-6, dtype=torch.float64)
                for tok, p in row.items():
                    probs[tok] = p
                table[t, prev] = (probs / probs.sum()).log().float()
        return cls(table)

    @classmethod
    def random(cls, seed: int, V: int = 5, L: int = 6, V_src: int = 6, spread: float = 1.5, src_spread: float = 1.0,
               pad_id: int = PAD):
        """Random scores (seeded); <pad> and <bos> are never likely outputs (score -20). ``pad_id`` (0 by default)
        is the model's padding id: a test can pick another one, so that a decoder that assumes 0 shows. Like a
        real model's, the target vocabulary always holds ``pad_id`` (a ``pad_id >= V`` grows it to ``pad_id + 1``
        tokens, the new ones never likely), so a decoder may be fed padding."""
        g = torch.Generator().manual_seed(seed)
        table = spread * torch.randn(L, V, V, generator=g)
        src_table = src_spread * torch.randn(V_src, V, generator=g)
        src_table[pad_id] = 25.0 * torch.randn(V, generator=g)     # padding carries loud scores: it must be masked
        if pad_id >= V:
            # A real model's target vocabulary holds its padding id: a decoder may be fed padding (a fixed-width
            # beam keeps finished rows filled with it). Grow the table to hold it, as a token never produced.
            grown = torch.zeros(L, pad_id + 1, pad_id + 1)
            grown[:, :V, :V] = table
            table = grown
            src_table = torch.cat([src_table, torch.zeros(V_src, pad_id + 1 - V)], dim=1)
            table[..., V:] = -20.0
        table[..., PAD] = -20.0
        table[..., pad_id] = -20.0                                  # padding is never a likely output
        table[..., BOS] = -20.0
        return cls(table, src_table, pad_id)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.src_table[src]                                   # (B, S, V)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        B, T = tgt.shape
        if src_mask is None:
            src_mask = torch.ones(memory.shape[:2], dtype=torch.bool, device=memory.device)
        m = src_mask.to(memory.dtype).unsqueeze(-1)                 # (B, S, 1)
        context = (memory * m).sum(1) / m.sum(1).clamp(min=1)        # (B, V)
        pos = torch.arange(T, device=tgt.device).clamp(max=self.table.shape[0] - 1)
        scores = self.table[pos[None, :].expand(B, T), tgt] + context[:, None, :]     # (B, T, V)
        return torch.log_softmax(scores, dim=-1)

    def forward(self, src, tgt, src_mask=None):
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, src_mask)


def length_penalty_model() -> TableModel:
    """The lesson's hand-made example (tokens: 0 <pad>, 1 <bos>, 2 <eos>, 3 "a", 4 "b").

    First token: a 0.5, b 0.45, <eos> 0.05. After a: <eos> 0.74. After b: b 0.9, and at position 3
    <eos> 0.9. So "a <eos>" (log P = -0.994) is the greedy and the most probable sentence, while
    "b b b <eos>" (log P = -1.115) is longer and wins once the GNMT length penalty (alpha 0.6) applies.
    """
    return TableModel.from_probs({
        (0, BOS): {3: 0.5, 4: 0.45, EOS: 0.05},
        (None, 3): {EOS: 0.74, 3: 0.13, 4: 0.13},
        (None, 4): {4: 0.9, EOS: 0.05, 3: 0.05},
        (3, 4): {EOS: 0.9, 3: 0.05, 4: 0.05},
    })


def gnmt_penalty(length: int, alpha: float) -> float:
    """lp(Y) = ((5 + |Y|) / 6) ** alpha (Wu et al., 2016)."""
    return ((5 + length) / 6) ** alpha


def sequence_logprob(model: TableModel, src: torch.Tensor, tokens, bos_id: int = BOS) -> float:
    """log P(tokens | src) under ``model`` (``tokens`` without <bos>), in float64."""
    src = src.reshape(1, -1)
    mask = src != model.pad_id
    tgt = torch.tensor([[bos_id] + list(tokens)])
    with torch.no_grad():
        logp = model.decode(tgt[:, :-1], model.encode(src, mask), mask).double()   # (1, n, V)
    return float(logp[0, torch.arange(len(tokens)), torch.tensor(list(tokens))].sum())


def strip_after_eos(row, eos_id: int = EOS) -> list[int]:
    """A decoded row as a list, cut after its first <eos> (kept)."""
    row = [int(t) for t in row]
    return row[: row.index(eos_id) + 1] if eos_id in row else row


def check_hypotheses(result, what: str, *, max_len: int, eos_id: int = EOS, beam_size: int | None = None) -> list:
    """``beam_search``'s result is a list of (tokens, score) pairs, best first; returns it as [(list, float)]."""
    checks.check(isinstance(result, (list, tuple)) and len(result) > 0,
                 f"{what} should return a non-empty list of (tokens, score) pairs; it returned {type(result).__name__}.")
    out = []
    for i, item in enumerate(result):
        checks.check(isinstance(item, (list, tuple)) and len(item) == 2,
                     f"entry {i} of {what} should be a pair (tokens, score); it is {item!r:.80}.")
        tokens, score = item
        if isinstance(tokens, torch.Tensor):
            tokens = tokens.tolist()
        tokens = [int(t) for t in tokens]
        score = float(score)
        checks.check(len(tokens) <= max_len, f"hypothesis {i} of {what} has {len(tokens)} tokens; max_len is {max_len}.")
        checks.check(eos_id not in tokens[:-1],
                     f"hypothesis {i} of {what} goes on after <eos> ({tokens}): a hypothesis that produces <eos> is "
                     "finished and must leave the beam.")
        out.append((tokens, score))
    if beam_size is not None:
        checks.check(len(out) <= beam_size,
                     f"{what} returned {len(out)} finished hypotheses; beam_size is {beam_size}. In section 5's bookkeeping "
                     "a finished hypothesis leaves the beam and its place is not refilled (each step keeps the best "
                     "beam_size - len(finished) candidates), so at most beam_size hypotheses ever finish. Keeping "
                     "beam_size LIVE hypotheses, refilling the place of each one that finishes, is another search.")
    scores = [s for _, s in out]
    checks.check(all(a >= b - 1e-9 for a, b in zip(scores, scores[1:])),
                 f"{what} should be sorted best first (highest score first); the scores are {[round(s, 4) for s in scores]}.")
    return out


def random_state_dicts(k: int, seed: int = 0) -> list[dict]:
    """``k`` state dicts of a small model with weights, a float64 buffer and an integer counter (seeded)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(k):
        out.append({
            "embed.weight": torch.randn(6, 4, generator=g),
            "layers.0.linear.weight": torch.randn(4, 4, generator=g),
            "layers.0.linear.bias": torch.randn(4, generator=g),
            "norm.weight": 1 + 0.1 * torch.randn(4, generator=g),
            "norm.running_mean": torch.randn(4, generator=g, dtype=torch.float64),
            "norm.num_batches_tracked": torch.tensor(100 * (i + 1)),
        })
    return out


# -- the decoder block and the model ---------------------------------------------------------------------

BLOCK_SHORTCUTS = ("TransformerDecoderLayer", "TransformerDecoder", "to_torch_decoder_layer", "to_torch_transformer")
MODEL_SHORTCUTS = ("Transformer", "TransformerDecoderLayer", "TransformerDecoder", "to_torch_decoder_layer",
                   "to_torch_transformer")
WHY_BLOCK = "wire the decoder block yourself (self_attn, cross_attn, the feed-forward network, norm1-3, the residuals)"
WHY_MODEL = ("build the decoder stack from your DecoderBlock (PyTorch's encoder layer is fine: lesson 07 proved it "
             "equal to yours)")


def randomise_norms(block, generator: torch.Generator, names=("norm1", "norm2", "norm3"), what="your DecoderBlock"):
    """Give the block's norms different random gammas and betas (so that swapping two norms shows), via set_params."""
    state = checks.call(block.state_dict, what=f"{what}.state_dict")
    values = {}
    for name in names:
        for part, base in (("weight", 1.0), ("bias", 0.0)):
            key = f"{name}.{part}"
            checks.check(key in state, f"{what} has no parameter {key!r}: name the norms {', '.join(names)} "
                                       "(nn.LayerNorm(d_model), with parameters weight and bias).")
            values[key] = base + 0.3 * torch.randn(state[key].shape, generator=generator)
    checks.set_params(block, values, what)
    return block


def make_decoder_block(cls, d_model, n_heads, d_ff, *, norm_first, generator, dropout=0.0):
    """A fresh ``cls(d_model, n_heads, d_ff, dropout=..., norm_first=...)`` in eval mode, with random weights
    chosen by the test (:func:`course.checks.randomise_weights`) and three different random norms."""
    block = checks.call(cls, d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first,
                        what="DecoderBlock.__init__").eval()
    checks.randomise_weights(block, generator, "your DecoderBlock")
    return randomise_norms(block, generator)


DROPOUT_SITES = ("on the self-attention weights", "on the cross-attention weights", "after the feed-forward's ReLU")


def decoder_dropout_probe(cls, d_model, n_heads, d_ff, p, site, generator):
    """A pre-norm ``cls(d_model, n_heads, d_ff, dropout=p, norm_first=True)`` in training mode, whose weights
    make ONE sublayer add the same vector at every position and silence the two others, so that
    :func:`course.checks.check_dropout_inside` can see the dropout at ``site`` (one of DROPOUT_SITES)."""
    block = checks.call(cls, d_model, n_heads, d_ff, dropout=p, norm_first=True, what="DecoderBlock.__init__")
    state = checks.call(block.state_dict, what="DecoderBlock.state_dict")
    attn = {a: checks.attention_parameters(state, a, "your DecoderBlock") for a in ("self_attn", "cross_attn")}
    ff = ["linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias"]
    missing = [n for n in ff if n not in state]
    checks.check(not missing, f"your DecoderBlock has no parameter {missing[0] if missing else ''!r}: use linear1, "
                              "linear2 for the feed-forward network (see the docstring).")
    probed = DROPOUT_SITES.index(site)
    values = {}
    for i, (*names, q_k_v) in enumerate([attn["self_attn"], attn["cross_attn"]]):
        values.update(checks.uniform_attention_values(state, *names, generator, q_k_v=q_k_v) if i == probed
                      else checks.zero_values(state, *names[2:4]))
    values.update(checks.constant_hidden_values(state, *ff, generator) if probed == 2 else checks.zero_values(state, *ff[2:]))
    checks.set_params(block, values, "your DecoderBlock")
    block.train()
    return block


def check_decoder_block(cls, block, args, want, what, *, norm_first, hint=""):
    """The learner's ``block(*args)`` (PyTorch's ready-made decoder layer forbidden) equals ``want`` (atol 1e-5)."""
    with checks.forbid(cls, *BLOCK_SHORTCUTS, why=WHY_BLOCK):
        out = checks.call(block, *args, what="DecoderBlock.forward")
    layout = ("pre-norm: x = x + self_attn(norm1(x)); x = x + cross_attn(norm2(x), memory); x = x + ff(norm3(x))."
              if norm_first else
              "post-norm: x = norm1(x + self_attn(x)); x = norm2(x + cross_attn(x, memory)); x = norm3(x + ff(x)).")
    checks.check_close(out, want, what, atol=1e-5, hint=hint or (layout + " In the cross-attention the queries come "
                                                                 "from x, the keys and values from memory."))


def call_model(cls, model, *args, what="Transformer.forward", method=None):
    """Call the learner's model (or one of its methods) with PyTorch's ready-made decoder forbidden."""
    fn = model if method is None else getattr(model, method)
    with checks.forbid(cls, *MODEL_SHORTCUTS, why=WHY_MODEL):
        return checks.call(fn, *args, what=what)


def check_transformer_dropout(model, src_vocab, tgt_vocab, d_model, generator, what):
    """The learner's ``Transformer`` (built with 0 < dropout < 1) applies dropout after both embeddings and
    inside every encoder and decoder layer, in training mode only.

    Embeddings: the output projections of every sublayer (``out_proj``, ``linear2``) are set to zero, so the
    blocks add nothing and only a dropout on the embeddings can make ``encode``/``decode`` differ between
    training and eval mode. Blocks: each layer of ``encoder_layers`` and ``decoder_layers``, called on its
    own, must differ between the two modes. The model's parameters are put back afterwards.
    """
    src = torch.randint(3, src_vocab, (3, 9), generator=generator)
    tgt = torch.randint(3, tgt_vocab, (3, 8), generator=generator)
    x, memory = torch.randn(3, 8, d_model, generator=generator), torch.randn(3, 9, d_model, generator=generator)
    for stack in ("encoder_layers", "decoder_layers"):
        layers = getattr(model, stack)
        for i in range(len(layers)):
            layer = layers[i]
            args = (x,) if stack == "encoder_layers" else (x, memory)
            layer.eval()
            quiet = checks.call(layer, *args, what=f"Transformer.{stack}[{i}]")
            layer.train()
            noisy = checks.call(layer, *args, what=f"Transformer.{stack}[{i}]")
            layer.eval()
            checks.check(not torch.allclose(noisy, quiet, atol=1e-5),
                         f"{what}: {stack}[{i}] gives the same output in training and eval mode: build every layer "
                         "with the model's dropout (dropout acts inside every block).")
    state = checks.call(model.state_dict, what="Transformer.state_dict")
    silence = [k for k in state if k.startswith(("encoder_layers.", "decoder_layers."))
               and k.endswith(("out_proj.weight", "out_proj.bias", "w_o.weight", "w_o.bias", "linear2.weight", "linear2.bias"))]
    checks.check(silence, f"{what} has no encoder_layers.* / decoder_layers.* parameters ending with out_proj.weight or "
                          "linear2.weight: build the stacks as the docstring says.")
    try:
        checks.set_params(model, {k: torch.zeros(state[k].shape) for k in silence}, what)
        model.eval()
        quiet_memory = checks.call(model.encode, src, what="Transformer.encode")
        quiet_logits = checks.call(model.decode, tgt, quiet_memory, what="Transformer.decode")
        model.train()
        noisy_memory = checks.call(model.encode, src, what="Transformer.encode")
        noisy_logits = checks.call(model.decode, tgt, quiet_memory, what="Transformer.decode")
    finally:
        checks.set_params(model, {k: state[k] for k in silence}, what)
        model.eval()
    for side, quiet, noisy in [("source", quiet_memory, noisy_memory), ("target", quiet_logits, noisy_logits)]:
        checks.check(not torch.allclose(noisy, quiet, atol=1e-5),
                     f"{what}, with every block's sublayers silenced: the {side} side gives the same output in training and "
                     f"eval mode, so nothing drops the {side} embeddings. Apply dropout to embedding * sqrt(d_model) + "
                     "positions, in training mode only.")


def check_embedding_init(model, d_model, what):
    """Both embedding tables of a freshly built ``Transformer`` are drawn from N(0, 1/D): their standard deviation
    within 15 % of ``d_model ** -0.5`` and their mean within 0.1 of it from 0.

    With vocab x D entries per table (the tests use at least 8 000), a correct draw's sample standard deviation
    is off by about 1 / sqrt(2 n) < 0.8 % and its mean by 1 / sqrt(n) < 1.2 % of the std: 15 % and 10 % are
    about 20 and 9 of those, never reached by chance on any seed. Wrong scales (D^-1.5, nn.Embedding's own
    N(0, 1), D^0.5) are off by a factor of D or sqrt(D).
    """
    want = d_model ** -0.5
    for name in ("src_embed", "tgt_embed"):
        checks.check(hasattr(model, name) and hasattr(getattr(model, name), "weight"),
                     f"{what} has no {name}.weight: build {name} as nn.Embedding(vocab, d_model) (see the docstring).")
        w = getattr(model, name).weight.detach().double()
        std, mean = float(w.std()), float(w.mean())
        checks.check(abs(std - want) <= 0.15 * want and abs(mean) <= 0.1 * want,
                     f"{what}'s {name} is initialised with mean {mean:.4f} and standard deviation {std:.4f}; it should be "
                     f"drawn from N(0, 1/d_model): mean 0 and standard deviation d_model ** -0.5 = {want:.4f} "
                     f"(nn.init.normal_({name}.weight, std=d_model ** -0.5); nn.Embedding's own default is N(0, 1)).")


def check_final_norms(model, norm_first, what):
    """``encoder_norm`` and ``decoder_norm`` are LayerNorms (with weight and bias) in the pre-norm layout, and
    hold no parameters in the post-norm layout (None there: an identity would do the same)."""
    state = checks.call(model.state_dict, what="Transformer.state_dict")
    for name in ("encoder_norm", "decoder_norm"):
        has = checks.has_param(state, f"{name}.weight") and checks.has_param(state, f"{name}.bias")
        if norm_first:
            checks.check(has and isinstance(getattr(model, name, None), nn.LayerNorm),
                         f"{what} should end its {'encoder' if name == 'encoder_norm' else 'decoder'} "
                         f"stack with a final LayerNorm in the pre-norm layout (norm_first=True): {name} = "
                         "nn.LayerNorm(d_model) (pre-norm blocks never "
                         "normalise the residual stream themselves).")
        else:
            checks.check(not has and not any(k.startswith(f"{name}.") for k in state),
                         f"{what} has parameters under {name}; in the post-norm layout (norm_first=False) there should "
                         f"be no final norm ({name} = None): each post-norm block already ends with its own LayerNorm.")


def check_no_dropout_at_zero(model, src_vocab, tgt_vocab, generator, what):
    """A ``Transformer`` built with ``dropout=0.0`` gives the same memory and logits in training mode as in eval
    mode: every layer got the model's dropout, none kept a default of its own (nn.TransformerEncoderLayer's is 0.1)."""
    src = torch.randint(3, src_vocab, (2, 7), generator=generator)
    tgt = torch.randint(3, tgt_vocab, (2, 6), generator=generator)
    out = {}
    model.eval()
    memory = checks.call(model.encode, src, what="Transformer.encode")
    out["eval"] = memory, checks.call(model.decode, tgt, memory, what="Transformer.decode")
    model.train()
    try:                                        # the decoder reads the same (eval) memory in both modes
        out["train"] = (checks.call(model.encode, src, what="Transformer.encode"),
                        checks.call(model.decode, tgt, memory, what="Transformer.decode"))
    finally:
        model.eval()
    for i, side, layers in ((0, "encode's memory", "encoder_layers"), (1, "decode's logits", "decoder_layers")):
        checks.check(torch.allclose(out["train"][i], out["eval"][i], atol=1e-5),
                     f"{what}: {side} differ between training and eval mode although dropout=0.0: every layer of "
                     f"{layers} should get the model's dropout (pass it: nn.TransformerEncoderLayer's own default is 0.1, "
                     "so a layer built without it drops 10 % of its activations in training mode).")

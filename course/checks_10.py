"""Helpers for lesson 10's test cells (BERT), so that each locked cell reads as its one idea.

Nothing here computes a graded answer. Masking and sentence pairs are checked through their
properties (proportions, where labels sit, which document a sentence came from), so that any
correct way of drawing them passes: a Bernoulli draw per token or an exact count per sequence, a
loop or vectorised code. The embeddings and the model are compared with ``transformers``' own BERT,
whose random weights are copied INTO the learner's module with ``checks.set_params`` (the names come
from :mod:`course.oracles.bert`), so every helper works the same in the learner's kernel and under
the grader's judge.
"""

from __future__ import annotations

import math

import torch

from course import checks
from course.oracles import bert as bridge

__all__ = ["check_random_tokens_cover_vocabulary", "check_negative_sources", "check_coin_per_sentence",
    "masking_batch", "masking_stats", "check_masking_consistent", "sentence_documents", "nsp_origins",
    "hf_bert", "load_hf_weights", "load_hf_embeddings", "hf_outputs", "check_parameter_count", "SHORTCUTS", "WHY",
]

SHORTCUTS = ("BertModel", "BertForPreTraining", "BertLayer", "BertEncoder", "to_hf_model", "to_hf_pretraining", "hf_forward",
             "hf_outputs")
WHY = "build BERT from the course's pieces (your embeddings, nn.TransformerEncoderLayer, the heads) instead of running transformers' model"


# -- masking ----------------------------------------------------------------------------------------

def masking_batch(B: int, T: int, V: int, generator: torch.Generator, n_first_special: int = 5):
    """A batch that looks like BERT's input: [CLS] ... [SEP] ... [SEP] then padding.

    Returns ``(ids, special)``: ids (B, T) long with ordinary tokens drawn from ``n_first_special .. V-1``,
    id 2 at position 0, id 3 at two [SEP] positions, 0 on padding; ``special`` (B, T) bool is True on
    those special positions.
    """
    ids = torch.randint(n_first_special, V, (B, T), generator=generator)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=generator)
    special = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        L = int(lengths[b])
        sep = int(torch.randint(2, max(3, L - 2), (), generator=generator))
        ids[b, 0], ids[b, sep], ids[b, L - 1] = 2, 3, 3
        ids[b, L:] = 0
        special[b, [0, sep, L - 1]] = True
        special[b, L:] = True
    return ids, special


def check_masking_consistent(ids, special, inputs, labels, what: str) -> None:
    """Shapes and dtypes, and: labels are -100 or the original id; unlabelled positions are unchanged."""
    checks.check_shape(inputs, tuple(ids.shape), f"inputs returned by {what}")
    checks.check_shape(labels, tuple(ids.shape), f"labels returned by {what}")
    checks.check(inputs.dtype == torch.long and labels.dtype == torch.long,
                 f"{what} should return long (integer) tensors; got inputs {inputs.dtype}, labels {labels.dtype}.")
    chosen = labels != -100
    wrong = chosen & (labels != ids)
    if wrong.any():
        b, t = wrong.nonzero()[0].tolist()
        raise AssertionError(f"{what}: labels[{b}, {t}] is {int(labels[b, t])}, but the original token there is "
                             f"{int(ids[b, t])}. A label is the ORIGINAL token (what the model must recover), or -100.")
    changed = ~chosen & (inputs != ids)
    if changed.any():
        b, t = changed.nonzero()[0].tolist()
        raise AssertionError(f"{what}: inputs[{b}, {t}] was changed ({int(ids[b, t])} -> {int(inputs[b, t])}) although its "
                             "label is -100. Only the selected tokens (those with a label) may be corrupted; the "
                             "80/10/10 rule applies to the 15 % selected, not to every token.")


def masking_stats(ids, special, inputs, labels, mask_id: int) -> dict:
    """Proportions of one corrupted batch: selected among the non-special tokens, and among the selected
    the share turned into [MASK], left unchanged, and replaced by another token."""
    chosen = labels != -100
    n_ordinary = int((~special).sum())
    n = max(int(chosen.sum()), 1)
    return {
        "selected": int((chosen & ~special).sum()) / max(n_ordinary, 1),
        "special_selected": int((chosen & special).sum()),
        "n_selected": int(chosen.sum()),
        "mask": int((chosen & (inputs == mask_id)).sum()) / n,
        "unchanged": int((chosen & (inputs == ids)).sum()) / n,
        "random": int((chosen & (inputs != mask_id) & (inputs != ids)).sum()) / n,
    }


# -- next-sentence pairs -----------------------------------------------------------------------------

def sentence_documents(n_docs: int, lengths, tag: str = "s"):
    """Documents whose sentences are unique, self-describing word lists: ``["s", "d3", "i1"]``.

    ``lengths`` is an int (every document that long) or a list of per-document lengths.
    """
    if isinstance(lengths, int):
        lengths = [lengths] * n_docs
    return [[[tag, f"d{d}", f"i{i}"] for i in range(n)] for d, n in zip(range(n_docs), lengths)]


def nsp_origins(pairs, documents, what: str = "make_nsp_pairs"):
    """Read each pair back: ``[(doc_a, i_a, doc_b, i_b, is_next)]``, failing with a clear message on a
    malformed pair or a sentence that is not one of the documents' sentences."""
    where = {tuple(s): (d, i) for d, doc in enumerate(documents) for i, s in enumerate(doc)}
    checks.check(isinstance(pairs, (list, tuple)), f"{what} should return a list of (a, b, is_next) tuples; it returned "
                                                   f"a {type(pairs).__name__}.")
    out = []
    for k, pair in enumerate(pairs):
        checks.check(isinstance(pair, (list, tuple)) and len(pair) == 3,
                     f"item {k} returned by {what} is {pair!r}; each item should be a tuple (a, b, is_next).")
        a, b, is_next = pair
        for name, s in (("a", a), ("b", b)):
            checks.check(isinstance(s, (list, tuple)) and tuple(s) in where,
                         f"item {k} returned by {what}: its sentence {name} = {s!r} is not one of the documents' "
                         "sentences. Return the sentences themselves, unchanged.")
        checks.check(isinstance(is_next, (bool, int)) or (hasattr(is_next, "item") and getattr(is_next, "numel", lambda: 2)() == 1),
                     f"item {k} returned by {what}: is_next is {is_next!r}; it should be True or False.")
        out.append((*where[tuple(a)], *where[tuple(b)], bool(is_next)))
    return out


# -- comparisons with transformers ---------------------------------------------------------------------

def hf_bert(vocab_size, d_model, n_heads, d_ff, n_layers, max_len, *, seed: int, n_segments: int = 2,
            dropout: float = 0.0, std: float = 0.5):
    """``transformers.BertForPreTraining`` (eager attention, eval mode) with random weights of a visible
    size (``std``), random LayerNorm gains and biases: a wrong part of the learner's model shows."""
    from transformers import BertForPreTraining

    torch.manual_seed(seed)
    model = BertForPreTraining(bridge.hf_config(vocab_size, d_model, n_heads, d_ff, n_layers, max_len, n_segments,
                                                dropout=dropout))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(std * torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5 if p.dim() > 1 else 1))
    return model.eval()


def load_hf_weights(module, hf_model, what: str = "your Bert") -> None:
    """Copy a ``BertForPreTraining``'s weights into the learner's ``Bert`` (the lesson's names)."""
    checks.set_params(module, bridge.from_hf_state(hf_model.state_dict()), what)


def load_hf_embeddings(module, hf_model, what: str = "your BertEmbeddings") -> None:
    """Copy a ``BertForPreTraining``'s embedding weights into the learner's ``BertEmbeddings``."""
    checks.set_params(module, bridge.from_hf_state(hf_model.state_dict(), embeddings_only=True), what)


def check_parameter_count(model, hf_model, what: str = "your Bert") -> None:
    """The learner's model has as many parameters as ``transformers``' ``hf_model``.

    Parameters, as ``named_parameters()`` lists them: a tied tensor counts once, and buffers (a
    ``position_ids`` table, as ``transformers`` registers one) do not count. A mismatch names the parameters
    the lesson's table does not list, those it lists that are missing, and those of another shape.
    """
    listed = checks.call(model.named_parameters, what=f"{what}.named_parameters")
    ours = {name: tuple(p.shape) for name, p in (listed if isinstance(listed, list) else list(listed))}
    n = sum(math.prod(shape) for shape in ours.values())
    theirs = sum(p.numel() for p in hf_model.parameters())
    if n == theirs:
        return
    every = set(checks.parameter_names(model, what))                       # a tied tensor under each of its names
    expected = {k: tuple(v.shape) for k, v in bridge.from_hf_state(hf_model.state_dict()).items()}
    extra = [k for k in ours if k not in expected]
    missing = [k for k in expected if k not in every]
    reshaped = [f"{k} {ours[k]} (want {expected[k]})" for k in ours if k in expected and ours[k] != expected[k]]
    V, D = expected["embeddings.token.weight"]
    untied = [k for k in extra if ours[k] in ((V, D), (D, V))]
    parts = [f"{what} has {n} parameters (named_parameters(): a tied tensor counts once, buffers do not count); "
             f"transformers' BertForPreTraining of the same size has {theirs}."]
    if extra:
        parts.append(f"Parameters the lesson's table does not name: {', '.join(extra[:6])}{' ...' if len(extra) > 6 else ''}.")
    if missing:
        parts.append(f"Missing: {', '.join(missing[:6])}{' ...' if len(missing) > 6 else ''}.")
    if reshaped:
        parts.append(f"Of another shape: {', '.join(reshaped[:4])}.")
    if untied:
        parts.append(f"{untied[0]} has the shape of the token embeddings: the MLM output layer is embeddings.token.weight "
                     "itself (weight tying), not a separate matrix.")
    checks.check(False, " ".join(parts))


def hf_outputs(hf_model, ids, segments=None, mask=None) -> dict:
    """``transformers``' answers on course-style inputs: embeddings, hidden states, pooled, MLM and NSP logits."""
    with torch.no_grad():
        out = bridge.hf_forward(hf_model, ids, segments, mask, output_hidden_states=True)
        seg = torch.zeros_like(ids) if segments is None else segments
        emb = hf_model.bert.embeddings(input_ids=ids, token_type_ids=seg)
        base = bridge.hf_forward(hf_model.bert, ids, segments, mask)
    return {"embeddings": emb, "hidden": base.last_hidden_state, "pooled": base.pooler_output,
            "mlm": out.prediction_logits, "nsp": out.seq_relationship_logits}


def check_random_tokens_cover_vocabulary(mask_tokens, V, mask_id, generator, mask_generator):
    """The learner's random replacements use every id of 0 .. V - 1 (the [MASK] id aside, which cannot be told
    apart from a mask): a small vocabulary and many draws (about 60 per id), so a skipped id shows."""
    ids, special = masking_batch(max(256, 24 * V), 64, V, generator)           # about 40 replacements per id
    inputs, labels = checks.call(mask_tokens, ids.clone(), special, V, mask_id, p=0.5, generator=mask_generator)
    selected = int((labels != -100).sum())
    replaced = inputs[(labels != -100) & (inputs != mask_id) & (inputs != ids)]
    checks.check(len(replaced) > 0.05 * selected, f"of {selected} selected tokens only {len(replaced)} became a random "
                                                  "token; 10 % of the selected tokens should.")
    checks.check(bool(((replaced >= 0) & (replaced < V)).all()), "random replacements must be token ids in 0 .. vocab_size - 1.")
    counts = torch.bincount(replaced, minlength=V)
    expected = len(replaced) / (V - 1)
    rare = [v for v in range(V) if v != mask_id and counts[v] < 0.3 * expected]
    checks.check(not rare, f"with vocab_size = {V}, your random replacements used token {rare[0] if rare else ''} "
                           f"{int(counts[rare[0]]) if rare else 0} times in {len(replaced)} (about {expected:.0f} expected): draw "
                           "them uniformly from the whole vocabulary 0 .. vocab_size - 1 (special ids included).")


def check_negative_sources(negatives, n_docs, at_least, what):
    """``negatives`` is a list of (document of a, document of b). Each document's negatives take b from at
    least ``at_least`` different other documents (a fixed other document gives one)."""
    by_doc = {}
    for da, db in negatives:
        by_doc.setdefault(da, set()).add(db)
    checks.check(len(by_doc) == n_docs, f"{what}, only {len(by_doc)} of the {n_docs} documents have a negative pair.")
    for da, sources in sorted(by_doc.items()):
        checks.check(len(sources) >= at_least,
                     f"{what}, the negatives of document {da} take b from only {sorted(sources)}: draw the other "
                     f"document at random among ALL the others (a fixed one, such as the next document, is not random).")


def check_coin_per_sentence(pairs, docs, min_fraction):
    """Long documents mix true and random pairs: each sentence gets its own coin."""
    kinds = {}
    for da, ia, db, ib, nx in nsp_origins(pairs, docs):
        kinds.setdefault(da, set()).add(bool(nx))
    mixed = sum(len(k) == 2 for k in kinds.values()) / max(1, len(docs))
    checks.check(mixed >= min_fraction,
                 f"only {mixed:.0%} of {len(docs)} documents of {len(docs[0])} sentences hold both true and random pairs; "
                 "draw a fair coin for EVERY sentence that has a next sentence, not one coin per document.")

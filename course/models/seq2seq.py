"""A GRU encoder-decoder for translation, with a pluggable cross-attention module (lessons 02 and 03; lesson 08
compares its Transformer with it).

The model follows Cho et al. (2014) and Bahdanau et al. (2015), in the seeds' notation:

* the **encoder** reads the source x_1..x_S with a bidirectional GRU and returns one state
  h_i per source word (forward and backward halves concatenated) and a final summary of the
  whole sentence;
* the **decoder** is a GRU whose state s_m produces target word m. At every step it reads the
  previous target word y_{m-1} and a **context vector** c_m:

  - without attention, c_m is the same for every step: the encoder's final summary. The whole
    sentence has to squeeze through that one vector (the *bottleneck*);
  - with attention, c_m = sum_i alpha_{m,i} h_i, where the weights alpha_m come from comparing
    a decoder state with every encoder state h_i: the previous state s_{m-1} in Bahdanau's
    decoder (lesson 02), the current one s_m in Luong's (:class:`LuongDecoder`, lesson 03). The
    comparison is whatever ``attention`` module the model was built with (lesson 02: the additive score
    FC(s_{m-1} || h_i); lesson 03: dot, scaled dot, cosine, bilinear, MLP).

The attention module is any ``nn.Module`` called as::

    context, weights = attention(query, keys, values, mask)
    # query   (B, Dq)    the decoder state (s_{m-1}, or s_m for Luong); Dq = d_hidden
    # keys    (B, S, Dk) the encoder states h_1..h_S;         Dk = encoder size = 2 * d_hidden
    # values  (B, S, Dv) the encoder states again;            Dv = Dk
    # mask    (B, S)     bool, True on real source tokens, False on padding
    # context (B, Dv)    sum_i weights[:, i] * values[:, i]
    # weights (B, S)     a distribution over source positions (0 on padding)

so the key and value size of an attention module for ``Seq2Seq(..., d_hidden=H)`` is
``Seq2Seq.encoder_size(H) = 2 * H`` and its query size is ``H``.

Shape letters: B batch, S source length, T target length, E = d_emb, V vocabulary size.

Lesson 02's learner writes the additive attention and the attention decoder's step, and plugs
both in: ``Seq2Seq(..., attention=AdditiveAttention(...), step=decode_step)``. The ``Decoder``
only holds the layers; it has no step method to delegate to, and this package holds no
implementation of that (Bahdanau) step.

Lesson 03 trains its translators with the other classic decoder, Luong et al. (2015), built with
``Seq2Seq(..., attention=..., luong=True)`` (:class:`LuongDecoder`): the GRU moves first and the
*current* state s_m is the attention's query (see :class:`LuongDecoder` for the equations).
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from course.train import History, fit

__all__ = ["Encoder", "Decoder", "LuongDecoder", "Seq2Seq", "train_translator", "translate_pairs", "evaluate",
           "score_by_length", "length_bucket", "cpu_threads"]


class Encoder(nn.Module):
    """Embedding + bidirectional GRU over the source sentence.

    Args:
        vocab_size: source vocabulary size (token 0 is padding).
        d_emb: word-embedding size E.
        d_hidden: GRU state size per direction.
        bidirectional: read the sentence both ways (default) so that h_i describes word i in the
            context of the words before *and* after it.

    Shapes:
        forward(src (B, S), src_mask (B, S)) -> states (B, S, Dk), final (B, Dk), with
        Dk = ``d_out`` = 2 * d_hidden (bidirectional) or d_hidden. Padded positions of ``states``
        are zero, and ``final`` is taken at each sentence's true end (packed sequences), so
        padding never leaks into the encoding.
    """

    def __init__(self, vocab_size: int, d_emb: int, d_hidden: int, bidirectional: bool = True):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_emb, padding_idx=0)
        self.rnn = nn.GRU(d_emb, d_hidden, batch_first=True, bidirectional=bidirectional)
        self.bidirectional = bidirectional
        self.d_out = d_hidden * (2 if bidirectional else 1)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor):
        B, S = src.shape
        x = self.embedding(src)                                            # (B, S, E)
        lengths = src_mask.sum(dim=1).clamp(min=1).cpu()                   # (B,)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, h_n = self.rnn(packed)                                        # h_n: (dirs, B, d_hidden)
        states, _ = pad_packed_sequence(out, batch_first=True, total_length=S)  # (B, S, Dk)
        if self.bidirectional:
            # forward direction ends on the last word, backward direction on the first
            final = torch.cat([h_n[-2], h_n[-1]], dim=-1)                  # (B, 2 * d_hidden)
        else:
            final = h_n[-1]                                                # (B, d_hidden)
        return states, final


class Decoder(nn.Module):
    """A GRU decoder that reads [embedding of y_{m-1} || context c_m] at each step.

    Args:
        vocab_size: target vocabulary size V.
        d_emb: word-embedding size E.
        d_hidden: decoder state size (the query size Dq of the attention).
        d_key: size of the encoder states Dk (= Dv), and therefore of the context vector.
        attention: ``None`` for the plain encoder-decoder (the context is the encoder's final
            summary at every step), or a module called as
            ``attention(query (B, Dq), keys (B, S, Dk), values (B, S, Dv), mask (B, S))
            -> (context (B, Dv), weights (B, S))``.

    The decoder holds the layers; the step that combines them is lesson 02's ``decode_step``
    (plugged into :class:`Seq2Seq`). Attributes (the names ``decode_step`` uses):
        ``embedding`` (V -> E), ``init`` (Dk -> d_hidden, for s_0 = tanh(init(final))),
        ``cell`` (``nn.GRUCell(E + Dk, d_hidden)``), ``attention``, ``out``
        (``nn.Linear(d_hidden + Dk + E, V)``: logits from [s_m || c_m || e_m]).
    """

    def __init__(self, vocab_size: int, d_emb: int, d_hidden: int, d_key: int, attention: nn.Module | None = None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_emb, padding_idx=0)
        self.init = nn.Linear(d_key, d_hidden)
        self.cell = nn.GRUCell(d_emb + d_key, d_hidden)
        self.attention = attention
        self.out = nn.Linear(d_hidden + d_key + d_emb, vocab_size)
        self.d_hidden, self.d_key = d_hidden, d_key

    def init_state(self, final: torch.Tensor) -> torch.Tensor:
        """s_0 = tanh(W final): the decoder starts from the encoder's summary. (B, Dk) -> (B, d_hidden)."""
        return torch.tanh(self.init(final))


def _bottleneck_step(decoder: Decoder, y_prev, s_prev, summary):
    """The plain decoder's step (Cho et al., 2014): the context is the encoder's summary at every step."""
    e = decoder.embedding(y_prev)                                           # (B, E)
    s = decoder.cell(torch.cat([e, summary], dim=-1), s_prev)              # (B, E + Dk) -> (B, d_hidden)
    return decoder.out(torch.cat([s, summary, e], dim=-1)), s, None        # (B, V), (B, d_hidden)


class LuongDecoder(nn.Module):
    """Luong et al. (2015)'s attention decoder: update the state first, then attend with it.

    One step, for the previous target word y_{m-1} and state s_{m-1}::

        e_m    = E[y_{m-1}]
        s_m    = GRU(e_m, s_{m-1})                                  # the GRU reads the word only
        c_m, a = attention(query=s_m, keys=h, values=h, mask)      # the CURRENT state asks
        logits = W_out [s_m || c_m] + b_out

    This differs from lesson 02's (Bahdanau) decoder, whose query is the previous state s_{m-1}
    and whose GRU reads [e_m || c_m]. Luong's paper also offers "input feeding" (giving the next
    step's GRU the previous attentional vector); this decoder does not use it, so a step needs
    nothing but (y_{m-1}, s_{m-1}) and keeps :class:`Seq2Seq`'s one-state loop. (Luong's extra
    layer tanh(W_c [c_m || s_m]) before the output is folded into ``out`` here: one linear layer.)

    Args:
        vocab_size, d_emb, d_hidden, d_key, attention: as for :class:`Decoder`; ``attention`` is
            required (the same call signature; its query has size d_hidden).

    Attributes:
        ``embedding`` (V -> E), ``init`` (Dk -> d_hidden), ``cell`` (``nn.GRUCell(E, d_hidden)``),
        ``attention``, ``out`` (``nn.Linear(d_hidden + Dk, V)``: logits from [s_m || c_m]).
    """

    def __init__(self, vocab_size: int, d_emb: int, d_hidden: int, d_key: int, attention: nn.Module):
        super().__init__()
        if attention is None:
            raise ValueError("LuongDecoder needs an attention module (use Seq2Seq(..., attention=None) for the plain decoder).")
        self.embedding = nn.Embedding(vocab_size, d_emb, padding_idx=0)
        self.init = nn.Linear(d_key, d_hidden)
        self.cell = nn.GRUCell(d_emb, d_hidden)
        self.attention = attention
        self.out = nn.Linear(d_hidden + d_key, vocab_size)
        self.d_hidden, self.d_key = d_hidden, d_key

    def init_state(self, final: torch.Tensor) -> torch.Tensor:
        """s_0 = tanh(W final), as in :class:`Decoder`. (B, Dk) -> (B, d_hidden)."""
        return torch.tanh(self.init(final))

    def step(self, y_prev, s_prev, states, mask):
        """One Luong step: ``(y_prev (B,), s_prev (B, H), states (B, S, Dk), mask (B, S)) -> (logits (B, V), s (B, H), weights (B, S))``."""
        s = self.cell(self.embedding(y_prev), s_prev)                          # (B, E) -> (B, d_hidden)
        context, weights = self.attention(s, states, states, mask)             # query = the new state s_m
        return self.out(torch.cat([s, context], dim=-1)), s, weights           # (B, d_hidden + Dk) -> (B, V)


class Seq2Seq(nn.Module):
    """Encoder-decoder translator; with an attention module, Bahdanau's decoder (plug in ``step``) or Luong's (``luong=True``).

    Args:
        src_vocab: source vocabulary size.
        tgt_vocab: target vocabulary size V.
        d_emb: embedding size E (both languages).
        d_hidden: GRU size; the encoder is bidirectional, so the encoder states (keys and values
            of the attention) have size Dk = Dv = 2 * d_hidden (``Seq2Seq.encoder_size``) and the
            decoder state (the attention's query) has size Dq = d_hidden.
        attention: ``None`` (plain encoder-decoder) or a module with the call signature given in
            this module's docstring.
        step: with attention and the default (Bahdanau) :class:`Decoder`, the decoder step to run,
            called as ``step(decoder, y_prev (B,), s_prev (B, d_hidden), states (B, S, Dk),
            mask (B, S)) -> (logits (B, V), s (B, d_hidden), weights (B, S))``: lesson 02's
            ``decode_step``. The package has no such step of its own, so it is required.
        luong: with attention, use :class:`LuongDecoder` and its own step instead (lesson 03); then
            ``step`` must be left out.

    Shapes:
        forward(src (B, S), src_mask (B, S), tgt_in (B, T)) -> logits (B, T, V) (teacher forcing:
        ``tgt_in`` is ``<bos> y_1 .. y_{T-1}``).
        translate(src, src_mask, max_len, bos_id, eos_id) -> tokens (B, <= max_len),
        weights (B, T, S) or None.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, d_emb: int, d_hidden: int, attention: nn.Module | None = None,
                 step=None, *, luong: bool = False):
        super().__init__()
        if attention is None and (step is not None or luong):
            raise ValueError("step= and luong=True are for a Seq2Seq with attention; pass attention=... too.")
        if luong and step is not None:
            raise ValueError("Seq2Seq(..., luong=True) runs LuongDecoder's own step: leave step= out.")
        if attention is not None and not luong and step is None:
            raise TypeError("Seq2Seq with attention needs a decoder step: pass step=decode_step (lesson 02's "
                            "Bahdanau step, called as step(decoder, y_prev, s_prev, states, mask)), or luong=True "
                            "for the package's Luong decoder (query = the current state s_m).")
        self.step = step
        self.luong = luong
        self.encoder = Encoder(src_vocab, d_emb, d_hidden, bidirectional=True)
        decoder_cls = LuongDecoder if luong else Decoder
        self.decoder = decoder_cls(tgt_vocab, d_emb, d_hidden, self.encoder.d_out, attention)
        self.d_hidden = d_hidden
        self.d_key = self.encoder.d_out

    @staticmethod
    def encoder_size(d_hidden: int) -> int:
        """Dk = Dv, the size of the encoder states an attention module must accept."""
        return 2 * d_hidden

    @property
    def attention(self) -> nn.Module | None:
        return self.decoder.attention

    def _decode(self, y_prev, s_prev, states, mask, summary):
        """One decoder step: Luong's, or the plug-in ``step``, with attention; the bottleneck step without."""
        if self.attention is None:
            return _bottleneck_step(self.decoder, y_prev, s_prev, summary)
        if self.luong:
            return self.decoder.step(y_prev, s_prev, states, mask)
        return self.step(self.decoder, y_prev, s_prev, states, mask)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor, *, return_weights: bool = False):
        B, T = tgt_in.shape
        states, final = self.encoder(src, src_mask)                        # (B, S, Dk), (B, Dk)
        s = self.decoder.init_state(final)                                 # (B, d_hidden)
        logits, weights = [], []
        for t in range(T):                                                 # teacher forcing
            step_logits, s, w = self._decode(tgt_in[:, t], s, states, src_mask, final)
            logits.append(step_logits)
            weights.append(w)
        logits = torch.stack(logits, dim=1)                                # T x (B, V) -> (B, T, V)
        if return_weights:
            w = torch.stack(weights, dim=1) if self.attention is not None else None  # (B, T, S)
            return logits, w
        return logits

    @torch.no_grad()
    def translate(self, src: torch.Tensor, src_mask: torch.Tensor, max_len: int, bos_id: int, eos_id: int, pad_id: int = 0):
        """Greedy decoding: feed back the most likely word until every sentence has said ``<eos>``.

        Returns:
            tokens: (B, L) with L <= max_len, the generated words (no ``<bos>``), each row ending
                with ``<eos>`` (if produced) and padded with ``pad_id`` after it.
            weights: (B, L, S) the attention weights of each generated word (``None`` without
                attention).
        """
        B = src.shape[0]
        states, final = self.encoder(src, src_mask)
        s = self.decoder.init_state(final)
        y = torch.full((B,), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(B, device=src.device, dtype=torch.bool)   # rows that have produced EOS
        tokens, weights = [], []
        for _ in range(max_len):
            logits, s, w = self._decode(y, s, states, src_mask, final)
            y = logits.argmax(dim=-1)                                      # (B,)
            y = torch.where(done, torch.full_like(y, pad_id), y)           # pad after <eos>
            tokens.append(y)
            if w is not None:
                weights.append(torch.where(done[:, None], torch.zeros_like(w), w))
            done = done | (y == eos_id)
            if bool(done.all()):
                break
        tokens = torch.stack(tokens, dim=1)                                # (B, L)
        return tokens, (torch.stack(weights, dim=1) if weights else None)  # (B, L, S)


# --------------------------------------------------------------------------- training and evaluation


@contextlib.contextmanager
def cpu_threads(device, n: int = 1):
    """Run the block with ``n`` intra-op CPU threads (restored afterwards); no-op off the CPU.

    These models are tiny (64-wide matrices): splitting each operation over several threads
    costs more in synchronisation than it saves, and on a shared, busy machine the threads wait
    for each other so badly that a training step gets ~50x slower. One thread is the fast choice.
    """
    if torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _loss(model: Seq2Seq, batch) -> torch.Tensor:
    logits = model(batch.src, batch.src_mask, batch.tgt_in)                # (B, T, V)
    return F.cross_entropy(logits.flatten(0, 1), batch.tgt_out.flatten(), ignore_index=0)


def train_translator(model: Seq2Seq, data, *, steps: int, batch_size: int, lr: float, device, desc: str = "training",
                     seed: int = 0, clip: float | None = 1.0, warmup: int = 0) -> History:
    """Train ``model`` on ``data.train`` with teacher forcing and cross-entropy (padding ignored).

    Batches are drawn by ``data.sampler`` (similar lengths together, so little time is spent on
    padding), seeded by ``seed`` so that two models trained with the same seed see the same
    batches. Uses :func:`course.train.fit` (AdamW, gradient clipping, a progress bar).

    Args:
        model: a :class:`Seq2Seq` (moved to ``device`` here).
        data: a :class:`course.data.translation.TranslationData`.
        steps, batch_size, lr: the optimisation budget.
        device: where to train (``run.device``).

    Returns:
        The :class:`course.train.History` (per-step losses, gradient norms, wall time).
    """
    device = torch.device(device)
    model.to(device)
    sample = data.sampler("train", batch_size, seed=seed, device=device)
    with cpu_threads(device):
        return fit(model, sample, _loss, steps=steps, lr=lr, clip=clip, warmup=warmup, desc=desc)


@torch.no_grad()
def translate_pairs(model: Seq2Seq, data, pairs, *, batch_size: int = 256, max_len: int | None = None, device=None):
    """Greedy translations of ``pairs`` (a list of :class:`~course.data.translation.Pair`).

    Returns:
        (hypotheses, weights): a list of token lists (no ``<bos>``/``<eos>``) and a list of
        (len(hyp) + 1, len(src)) attention tensors on the CPU (``None`` entries without attention);
        the extra row is the step that produced ``<eos>``.
    """
    model.eval()
    device = torch.device(device) if device is not None else next(model.parameters()).device
    hyps, maps = [], []
    with cpu_threads(device):
        _translate_chunks(model, data, pairs, batch_size, max_len, device, hyps, maps)
    return hyps, maps


def _translate_chunks(model, data, pairs, batch_size, max_len, device, hyps, maps):
    vocab = data.tgt_vocab
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        b = data.batch(chunk, device=device)
        limit = max_len or (max(len(p.tgt) for p in chunk) + 5)
        tokens, w = model.translate(b.src, b.src_mask, limit, vocab.bos_id, vocab.eos_id, vocab.pad_id)
        for i, p in enumerate(chunk):
            words = vocab.decode(tokens[i].tolist())
            hyps.append(words)
            maps.append(None if w is None else w[i, : len(words) + 1, : len(p.src)].cpu())


def length_bucket(n: int, edges=(8, 15), low: int = 3) -> str:
    """Name of the source-length bucket of a sentence with ``n`` words: '3-8', '9-15' or '16+'."""
    for e in edges:
        if n <= e:
            return f"{low}-{e}"
        low = e + 1
    return f"{low}+"


@torch.no_grad()
def score_by_length(pairs, hypotheses, edges=(8, 15)) -> dict:
    """``{"exact_match", "token_accuracy", "bleu", "n", "by_length": {bucket: {...}}}`` (buckets as lesson 02's)."""
    from course import text_metrics as tm

    refs = [list(p.tgt) for p in pairs]

    def score(idx):
        if not idx:
            return {"exact_match": math.nan, "token_accuracy": math.nan, "bleu": math.nan, "n": 0}
        r, h = [refs[i] for i in idx], [hypotheses[i] for i in idx]
        return {"exact_match": tm.exact_match(r, h), "token_accuracy": tm.token_accuracy(r, h),
                "bleu": tm.corpus_bleu(r, h), "n": len(idx)}

    result = score(list(range(len(pairs))))
    buckets: dict[str, list[int]] = {}
    for i, p in enumerate(pairs):
        buckets.setdefault(length_bucket(len(p.src), edges), []).append(i)
    order = sorted(buckets, key=lambda k: int(k.split("-")[0].rstrip("+")))
    result["by_length"] = {k: score(buckets[k]) for k in order}
    return result


def evaluate(model: Seq2Seq, data, split="test", *, batch_size: int = 256, max_len: int | None = None, device=None,
             edges=(8, 15)) -> dict:
    """Translate a split greedily and score it, overall and by source length.

    Args:
        model: a trained :class:`Seq2Seq`.
        data: the :class:`~course.data.translation.TranslationData` (for its vocabularies).
        split: ``"train"``, ``"val"``, ``"test"``, or a list of pairs.
        edges: upper ends of the length buckets; the default gives '3-8', '9-15' and '16+'.

    Returns:
        ``{"exact_match", "token_accuracy", "bleu", "n", "by_length": {bucket: {same keys}},
        "hypotheses": [...], "pairs": [...]}``: exact match is the fraction of sentences
        translated word for word, token accuracy the fraction of reference words produced at the
        right position, BLEU the corpus BLEU-4 (0-1 scale) of :mod:`course.text_metrics`.
    """
    pairs = data.split(split) if isinstance(split, str) else list(split)
    hyps, _ = translate_pairs(model, data, pairs, batch_size=batch_size, max_len=max_len, device=device)
    result = score_by_length(pairs, hyps, edges)
    result["hypotheses"] = hyps
    result["pairs"] = pairs
    return result

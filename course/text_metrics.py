"""Scores for generated token sequences: corpus BLEU, exact match, token accuracy.

All functions take parallel lists of token sequences (lists of words or ids), one reference per
hypothesis, and return a float in [0, 1].

BLEU (Papineni et al., 2002), the standard corpus-level definition used by ``sacrebleu`` and
``nltk.translate.bleu_score.corpus_bleu`` with its default weights:

    p_n  = sum over sentences of clipped n-gram matches / sum of hypothesis n-grams   (n = 1..4)
    BP   = 1 if c > r else exp(1 - r / c)      c, r = total hypothesis / reference length
    BLEU = BP * exp(mean_n log p_n)            (0 if some p_n is 0)

"Clipped" means a hypothesis n-gram counts at most as often as it occurs in the reference, so
"the the the the" does not score against "the cat".
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

__all__ = ["ngrams", "corpus_bleu", "sentence_bleu", "exact_match", "token_accuracy"]

Tokens = Sequence


def ngrams(tokens: Tokens, n: int) -> Counter:
    """Counter of the n-grams (as tuples) of one sequence."""
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def _check(references, hypotheses):
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses: one reference per hypothesis")


def _stats(references, hypotheses, max_n):
    matches, totals = [0] * max_n, [0] * max_n
    ref_len = hyp_len = 0
    for ref, hyp in zip(references, hypotheses):
        ref, hyp = list(ref), list(hyp)
        ref_len += len(ref)
        hyp_len += len(hyp)
        for n in range(1, max_n + 1):
            h, r = ngrams(hyp, n), ngrams(ref, n)
            matches[n - 1] += sum(min(c, r[g]) for g, c in h.items())   # clipped counts
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    return matches, totals, ref_len, hyp_len


def _bleu(matches, totals, ref_len, hyp_len, smooth: bool) -> float:
    if hyp_len == 0:
        return 0.0
    log_p = 0.0
    for m, t in zip(matches, totals):
        if smooth:                                 # add-one smoothing (Lin & Och 2004) for short sentences
            m, t = m + 1, t + 1
        if m == 0 or t == 0:
            return 0.0
        log_p += math.log(m / t)
    log_p /= len(matches)
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return bp * math.exp(log_p)


def corpus_bleu(references: Sequence[Tokens], hypotheses: Sequence[Tokens], max_n: int = 4) -> float:
    """Corpus BLEU-``max_n`` on a 0-1 scale (multiply by 100 for the usual reporting).

    Args:
        references: one reference token sequence per sentence.
        hypotheses: the system's token sequences, in the same order.
        max_n: longest n-gram (4 for BLEU-4).

    Returns:
        BP * geometric mean of the clipped n-gram precisions; 0.0 if any precision is 0.
    """
    _check(references, hypotheses)
    return _bleu(*_stats(references, hypotheses, max_n), smooth=False)


def sentence_bleu(reference: Tokens, hypothesis: Tokens, max_n: int = 4, smooth: bool = True) -> float:
    """BLEU of one sentence; add-one smoothing (on by default) keeps short sentences from scoring 0."""
    return _bleu(*_stats([reference], [hypothesis], max_n), smooth=smooth)


def exact_match(references: Sequence[Tokens], hypotheses: Sequence[Tokens]) -> float:
    """Fraction of hypotheses identical to their reference."""
    _check(references, hypotheses)
    if not references:
        return math.nan
    return sum(list(r) == list(h) for r, h in zip(references, hypotheses)) / len(references)


def token_accuracy(references: Sequence[Tokens], hypotheses: Sequence[Tokens]) -> float:
    """Fraction of reference tokens that the hypothesis reproduces at the same position.

    A hypothesis that is too short misses the remaining reference tokens; extra hypothesis tokens
    beyond the reference's end are not counted (exact match and BLEU's brevity and precision
    terms catch those).
    """
    _check(references, hypotheses)
    total = sum(len(r) for r in references)
    if total == 0:
        return math.nan
    hits = sum(sum(a == b for a, b in zip(r, h)) for r, h in zip(references, hypotheses))
    return hits / total

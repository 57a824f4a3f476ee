"""Unit tests for the translation task (course/data/translation.py) and its metrics (course/text_metrics.py)."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import torch

from course import text_metrics as tm
from course.data import translation as tr


@pytest.fixture(scope="module")
def data():
    return tr.make_translation_data(n_train=2000, n_val=100, n_test=230, seed=0)


def _find(prefix, seed=0, tries=20000):
    """The first generated pair whose source starts with ``prefix``."""
    rng = random.Random(seed)
    for _ in range(tries):
        p = tr.generate_pair(rng)
        if p.src[: len(prefix)] == tuple(prefix):
            return p
    raise AssertionError(f"no generated sentence starts with {prefix}")


# --------------------------------------------------------------------------- generator


def test_same_seed_same_data_other_seed_other_data():
    a = tr.make_translation_data(300, 20, 46, seed=3)
    b = tr.make_translation_data(300, 20, 46, seed=3)
    c = tr.make_translation_data(300, 20, 46, seed=4)
    assert a.train == b.train and a.val == b.val and a.test == b.test
    assert a.test != c.test


def test_sizes_and_lengths(data):
    assert (len(data.train), len(data.val), len(data.test)) == (2000, 100, 230)
    for split in ("train", "val", "test"):
        lengths = [len(p.src) for p in data.split(split)]
        assert min(lengths) >= 3 and max(lengths) <= 25
    test_lengths = Counter(len(p.src) for p in data.test)
    assert set(test_lengths) == set(range(3, 26)), "every length from 3 to 25 appears in the test split"
    assert sum(n > 15 for n in (len(p.src) for p in data.test)) >= 0.35 * len(data.test)


def test_max_len_can_grow():
    d = tr.make_translation_data(200, 10, 28, max_len=30, seed=0)
    assert max(len(p.src) for p in d.test) == 30


def test_splits_are_disjoint(data):
    train = {p.src for p in data.train}
    val = {p.src for p in data.val}
    test = {p.src for p in data.test}
    assert not (train & test) and not (train & val) and not (val & test)
    assert len(test) == len(data.test) and len(val) == len(data.val)


def test_alignment_is_complete_and_in_range(data):
    for p in data.train[:500] + data.test:
        assert len(p.align) == len(p.tgt)
        assert all(0 <= i < len(p.src) for i in p.align)
        # every English word is translated by at least one French word
        assert set(p.align) == set(range(len(p.src))), str(p)


def test_adjective_follows_noun_and_agrees():
    p = _find(("the", "black", "cat"))
    assert p.tgt[:3] == ("le", "chat", "noir")
    p = _find(("the", "black", "cars"))
    assert p.tgt[:3] == ("les", "voitures", "noires")
    # two adjectives: after the noun in mirror order, a crossed diagonal in the alignment
    forms = {en: fr for en, fr in tr.ADJECTIVES}
    rng, found = random.Random(0), 0
    for _ in range(5000):
        p = tr.generate_pair(rng)
        if p.src[1] in forms and p.src[2] in forms:
            found += 1
            assert p.align[:4] == (0, 3, 2, 1), str(p)
            assert p.tgt[2] in forms[p.src[2]] and p.tgt[3] in forms[p.src[1]], str(p)
    assert found > 20


def test_verb_agrees_with_its_subject():
    p = _find(("the", "cats", "sleep"))
    assert p.tgt[:3] == ("les", "chats", "dorment")
    p = _find(("the", "cat", "sleeps"))
    assert p.tgt[:3] == ("le", "chat", "dort")


def test_relative_clause_and_contraction():
    rng = random.Random(1)
    seen_qui = seen_du = False
    for _ in range(3000):
        p = tr.generate_pair(rng)
        if "that" in p.src:
            seen_qui = True
            assert p.tgt[p.align.index(p.src.index("that"))] == "qui"
        if "du" in p.tgt:
            seen_du = True
            j = p.tgt.index("du")
            assert p.tgt[j - 1] == "près" and p.src[p.align[j]] == "the"
        bigrams = set(zip(p.tgt, p.tgt[1:]))
        assert not bigrams & {("de", "le"), ("de", "les"), ("de", "des")}, str(p)
    assert seen_qui and seen_du


def test_vocab_specials_and_round_trip(data):
    v = data.src_vocab
    assert (v.pad_id, v.bos_id, v.eos_id) == (0, 1, 2)
    assert v.itos[:3] == ["<pad>", "<bos>", "<eos>"]
    p = data.test[0]
    ids = v.encode(p.src, bos=True, eos=True)
    assert ids[0] == 1 and ids[-1] == 2
    assert v.decode(ids + [0, 0]) == list(p.src)
    assert v.decode([5, 2, 6]) == [v.itos[5]], "decoding stops at <eos>"
    assert v.encode(["zebra"]) == [tr.UNK]
    # no split ever meets an unknown word
    for q in data.train[:300] + data.test:
        assert tr.UNK not in data.src_vocab.encode(q.src) and tr.UNK not in data.tgt_vocab.encode(q.tgt)


def test_batch_padding_and_masks(data):
    pairs = data.test[:5]
    b = data.batch(pairs)
    S = max(len(p.src) for p in pairs)
    T = max(len(p.tgt) for p in pairs) + 1
    assert b.src.shape == (5, S) and b.src_mask.shape == (5, S) and b.src_mask.dtype == torch.bool
    assert b.tgt_in.shape == (5, T) and b.tgt_out.shape == (5, T)
    for i, p in enumerate(pairs):
        n, m = len(p.src), len(p.tgt)
        assert b.src_mask[i].sum() == n and bool(b.src_mask[i, :n].all())
        assert (b.src[i, n:] == 0).all()
        assert b.tgt_in[i, 0] == tr.BOS and b.tgt_out[i, m] == tr.EOS
        assert torch.equal(b.tgt_in[i, 1:m + 1], b.tgt_out[i, :m])
        assert b.tgt_mask[i].sum() == m + 1
        assert data.tgt_vocab.decode(b.tgt_out[i].tolist()) == list(p.tgt)


def test_sampler_is_seeded_and_groups_lengths(data):
    s1, s2 = data.sampler("train", 32, seed=5), data.sampler("train", 32, seed=5)
    for step in range(3):
        a, b = s1(step), s2(step)
        assert torch.equal(a.src, b.src) and torch.equal(a.tgt_out, b.tgt_out)
    lengths = [len(p.src) for p in s1(3).pairs]
    assert max(lengths) - min(lengths) <= 3
    mixed = data.sampler("train", 32, seed=5, by_length=False)(0)
    assert mixed.src.shape[0] == 32


# --------------------------------------------------------------------------- metrics


def test_bleu_hand_computed():
    ref = "a b c d e f".split()
    hyp = "a b c d x f".split()
    # p1 = 5/6, p2 = 3/5, p3 = 2/4, p4 = 1/3; same length so BP = 1
    expected = (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    assert tm.corpus_bleu([ref], [hyp]) == pytest.approx(expected, abs=1e-12)
    assert tm.corpus_bleu([ref], [ref]) == pytest.approx(1.0)


def test_bleu_brevity_penalty_and_clipping():
    ref = "a b c d e f".split()
    assert tm.corpus_bleu([ref], [ref[:4]]) == pytest.approx(math.exp(1 - 6 / 4))
    # clipping: "the" counts at most twice against a reference that has it twice
    assert tm.corpus_bleu([["the", "cat", "the", "mat"]], [["the"] * 4], max_n=1) == pytest.approx(2 / 4)
    assert tm.corpus_bleu([ref], [["z", "y", "x"]]) == 0.0
    assert tm.corpus_bleu([ref], [[]]) == 0.0


def test_bleu_is_corpus_level_not_a_mean():
    refs = ["a b c d e f".split(), "g h i j".split()]
    hyps = ["a b c d e f".split(), "g h i k".split()]
    # pooled counts: p1 = 9/10, p2 = 7/8, p3 = 5/6, p4 = 3/4
    expected = (9 / 10 * 7 / 8 * 5 / 6 * 3 / 4) ** 0.25
    assert tm.corpus_bleu(refs, hyps) == pytest.approx(expected)
    mean = (tm.corpus_bleu(refs[:1], hyps[:1]) + tm.corpus_bleu(refs[1:], hyps[1:])) / 2
    assert abs(expected - mean) > 0.1


def test_bleu_agrees_with_nltk_when_available():
    nltk_bleu = pytest.importorskip("nltk.translate.bleu_score")
    rng = random.Random(0)
    words = list("abcdefg")
    refs = [[rng.choice(words) for _ in range(rng.randint(5, 12))] for _ in range(30)]
    hyps = [r[:] for r in refs]
    for h in hyps:
        for _ in range(2):
            h[rng.randrange(len(h))] = rng.choice(words)
    ours = tm.corpus_bleu(refs, hyps)
    theirs = nltk_bleu.corpus_bleu([[r] for r in refs], hyps)
    assert ours == pytest.approx(theirs, abs=1e-9)


def test_sentence_bleu_smoothing():
    assert tm.sentence_bleu("a b".split(), "a b".split()) > 0.5
    assert tm.sentence_bleu("a b".split(), "a b".split(), smooth=False) == 0.0  # no 3-grams at all


def test_exact_match_and_token_accuracy():
    refs = [["a", "b", "c"], ["d", "e"]]
    hyps = [["a", "b", "c"], ["d", "x", "y"]]
    assert tm.exact_match(refs, hyps) == 0.5
    assert tm.token_accuracy(refs, hyps) == pytest.approx(4 / 5)
    assert tm.token_accuracy([["a", "b", "c"]], [["a"]]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        tm.exact_match(refs, hyps[:1])

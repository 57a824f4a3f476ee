"""Unit tests for lesson 10's data: course.data.documents and tweets.generate_negated (seeded, fast)."""


from course.data import documents, tweets


def test_documents_deterministic_and_well_formed():
    a, b = documents.generate(200, seed=3), documents.generate(200, seed=3)
    assert a == b and a != documents.generate(200, seed=4)
    vocab = documents.make_vocab()
    for doc in a:
        assert len(doc) == 2 and all(isinstance(s, list) and s[-1] == "." for s in doc)
        assert all(w in vocab for s in doc for w in s), doc


def test_both_sentences_name_the_noun_and_agree_in_polarity():
    def polarity(sentence):                       # the opinion at the end: [negator] word "."
        word = sentence[-2]
        sign = 1 if word in tweets.POSITIVE else -1 if word in tweets.NEGATIVE else 0
        return -sign if sentence[-3] in tweets.NEGATORS else sign

    docs = documents.generate(500, seed=1)
    nouns = set(documents.NOUNS)
    for a, b in docs:
        noun_a = [w for w in a if w in nouns and w not in ("book", "train")]
        noun_b = [w for w in b if w in nouns and w not in ("book", "train")]
        if noun_a and noun_b:
            assert noun_a[-1] == noun_b[-1]
        if polarity(a) and polarity(b):
            assert polarity(a) == polarity(b)
    with_opinion = [s for d in docs for s in d if polarity(s)]
    assert 0.7 < len(with_opinion) / 1000 < 0.95
    negated = sum(s[-3] in tweets.NEGATORS for s in with_opinion) / len(with_opinion)
    assert 0.25 < negated < 0.45
    # a sentence's form does not give its place away: forms open and continue documents alike
    verbs = {v for vs in documents.NOUNS.values() for v in vs}
    assert abs(sum(a[0] in verbs for a, _ in docs) - sum(b[0] in verbs for _, b in docs)) < 60
    # the homonyms appear in both senses
    assert any("book" in s and ("flight" in s or "hotel" in s) for d in docs for s in d)
    assert any("book" in s and "library" in s for d in docs for s in d)
    assert any("train" in s and ("match" in s or "game" in s) for d in docs for s in d)
    assert any("train" in s and "station" in s for d in docs for s in d)


def test_vocab_specials_and_tweet_words():
    vocab = documents.make_vocab()
    assert vocab.itos[:5] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    for w in tweets.FILLER + tweets.POSITIVE + tweets.NEGATIVE + tweets.NEGATORS:
        assert w in vocab, w


def test_encode_pairs_layout():
    vocab = documents.make_vocab()
    a, b = ["drank", "the", "coffee", "at", "."], ["the", "coffee", "cafe", "great", "."]
    ids, seg, real = documents.encode_pairs([(a, b, True), ["hello"]], vocab)
    assert ids.shape == seg.shape == real.shape == (2, 13)
    assert ids[0, 0] == documents.CLS and ids[0, 6] == documents.SEP and ids[0, 12] == documents.SEP
    assert seg[0].tolist() == [0] * 7 + [1] * 6
    assert ids[1, :3].tolist() == [documents.CLS, documents.UNK, documents.SEP] and not real[1, 3:].any()
    assert seg[1].sum() == 0
    sm = documents.special_mask(ids)
    assert sm[0].tolist() == [True] + [False] * 5 + [True] + [False] * 5 + [True]
    assert sm[1, 3:].all() and not sm[1, 1]


def test_generate_negated():
    data = tweets.generate_negated(2000, seed=0, min_len=4, max_len=20)
    assert data == tweets.generate_negated(2000, seed=0, min_len=4, max_len=20)
    assert 0.45 < sum(t.negated for t in data) / len(data) < 0.55
    assert 0.45 < sum(t.label for t in data) / len(data) < 0.55
    for t in data:
        assert 4 <= len(t) <= 20
        assert t.words[t.negator_position] in tweets.NEGATORS
        assert sum(w in tweets.NEGATORS for w in t.words) == 1
        assert [i for i, w in enumerate(t.words) if w in tweets.POSITIVE + tweets.NEGATIVE] == [t.sentiment_position]
        assert t.negated == (t.negator_position == t.sentiment_position - 1)
        positive = t.words[t.sentiment_position] in tweets.POSITIVE
        assert t.label == int(positive != t.negated)
    # the negator's position is the only difference: bags of words carry no information about `negated`
    first = sum(t.words[0] in tweets.NEGATORS for t in data if t.negated) / sum(t.negated for t in data)
    assert first < 0.2

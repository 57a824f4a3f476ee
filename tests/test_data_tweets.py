"""Unit tests for course.data.tweets: seeded, deterministic, well-formed tweets and batches."""

import torch

from course.data import tweets


def test_generate_is_deterministic_and_seed_dependent():
    a = tweets.generate(50, seed=3)
    b = tweets.generate(50, seed=3)
    c = tweets.generate(50, seed=4)
    assert a == b
    assert a != c


def test_generate_fixed_output_for_seed_0():
    # Guards against silent changes to the generator (they would change every lesson result).
    first = tweets.generate(2, seed=0)
    assert [t.label for t in first] == [1, 0]
    assert first[1].text == ("and just watched worst the #tbt friends pizza laptop this then friday dinner "
                             "she home just was app @team #monday")


def test_lengths_in_range_and_one_sentiment_word_matching_label():
    data = tweets.generate(500, seed=1, min_len=4, max_len=40)
    lengths = [len(t) for t in data]
    assert min(lengths) >= 4 and max(lengths) <= 40
    assert min(lengths) <= 6 and max(lengths) >= 38          # the whole range is used
    for t in data:
        sentiment = [i for i, w in enumerate(t.words) if w in tweets.POSITIVE or w in tweets.NEGATIVE]
        assert sentiment == [t.sentiment_position]
        word = t.words[t.sentiment_position]
        assert (word in tweets.POSITIVE) == (t.label == 1)


def test_labels_roughly_balanced():
    labels = [t.label for t in tweets.generate(2000, seed=2)]
    assert 0.45 < sum(labels) / len(labels) < 0.55


def test_vocab_specials_and_roundtrip():
    vocab = tweets.make_vocab()
    assert vocab.itos[tweets.PAD] == "<pad>" and vocab.itos[tweets.UNK] == "<unk>"
    assert len(vocab) == 2 + len(set(tweets.FILLER)) + len(tweets.POSITIVE) + len(tweets.NEGATIVE)
    words = ["i", "love", "coffee"]
    assert vocab.decode(vocab.encode(words)) == words
    assert vocab.encode(["zebra"]) == [tweets.UNK]
    assert not set(tweets.FILLER) & (set(tweets.POSITIVE) | set(tweets.NEGATIVE))


def test_encode_pads_with_zero_and_masks_real_tokens():
    vocab = tweets.make_vocab()
    data = tweets.encode(tweets.generate(20, seed=5), vocab)
    N, T = data.ids.shape
    assert N == 20 and T == int(data.lengths.max())
    assert data.mask.dtype == torch.bool
    assert torch.equal(data.mask.sum(1), data.lengths)
    assert torch.all(data.ids[~data.mask] == tweets.PAD)
    assert torch.all(data.ids[data.mask] != tweets.PAD)
    # padding comes after the real tokens
    assert torch.equal(data.mask, torch.arange(T) < data.lengths[:, None])


def test_batch_trims_to_longest_and_sample_is_seeded():
    splits = tweets.load(100, 10, 20, seed=0, dim=8)
    ids, mask, labels = splits.train.batch([0, 1, 2])
    assert ids.shape == mask.shape and ids.shape[0] == 3 and labels.shape == (3,)
    assert ids.shape[1] == int(splits.train.lengths[:3].max())
    b1 = splits.train.sample(16, torch.Generator().manual_seed(0))
    b2 = splits.train.sample(16, torch.Generator().manual_seed(0))
    assert all(torch.equal(x, y) for x, y in zip(b1, b2))
    total = sum(int(m.sum()) for _, m, _ in splits.test.batches(7))
    assert total == int(splits.test.lengths.sum())


def test_splits_are_fixed_by_seed_and_test_set_independent_of_train_size():
    a = tweets.load(100, 10, 30, seed=0, dim=8)
    b = tweets.load(300, 10, 30, seed=0, dim=8)
    assert torch.equal(a.test.ids, b.test.ids) and torch.equal(a.test.labels, b.test.labels)
    assert a.train.tweets != a.test.tweets[: len(a.train)]
    c = tweets.load(100, 10, 30, seed=1, dim=8)
    assert not torch.equal(a.test.ids, c.test.ids) or not torch.equal(a.test.labels, c.test.labels)


def test_embeddings_fixed_shape_pad_zero_and_structured():
    vocab = tweets.make_vocab()
    e1 = tweets.embeddings(vocab, 50, seed=0)
    e2 = tweets.embeddings(vocab, 50, seed=0)
    assert e1.shape == (len(vocab), 50) and e1.dtype == torch.float32
    assert torch.equal(e1, e2)
    assert not torch.equal(e1, tweets.embeddings(vocab, 50, seed=1))
    assert torch.all(e1[tweets.PAD] == 0)
    assert torch.isfinite(e1).all()
    # Positive and negative words are separated along some direction: their mean vectors differ
    # far more than the spread of filler words would explain.
    pos = e1[vocab.encode(tweets.POSITIVE)].mean(0)
    neg = e1[vocab.encode(tweets.NEGATIVE)].mean(0)
    assert (pos - neg).norm() > 0.8


def test_length_bucket():
    assert tweets.length_bucket(4) == "short"
    assert tweets.length_bucket(12) == "short"
    assert tweets.length_bucket(13) == "medium"
    assert tweets.length_bucket(27) == "long"
    assert tweets.length_bucket(40) == "long"

"""Generated tweets with one sentiment word, for the attention-pooling lesson (01).

Each tweet is a handful of neutral filler words ("the bus was late again lol ...") with exactly
one sentiment word planted at a random position ("love", "awful" ...); its label is that word's
polarity (1 positive, 0 negative). Lengths run from short (4 words) to long (40 words), so in a
long tweet the one word that matters is 1/40 of the text -- exactly where averaging the word
vectors drowns the signal and attention pooling does not.

Word vectors are *fixed* (seeded, never trained), standing in for pre-trained static embeddings
such as GloVe. They are random, with the structure GloVe vectors have: all sentiment words share
an "emotional" direction, and positive and negative words sit on opposite sides of a "polarity"
direction. Keeping them frozen is deliberate: with trainable embeddings a mean-pooling model could
learn to shrink every filler word to zero and the comparison would be about the embedding table,
not about pooling.

Token ids: ``<pad>`` = 0 (padding, after the tweet's end), ``<unk>`` = 1 (any word not in the
vocabulary, e.g. typed into the lesson's widget), then the filler and sentiment words.

Everything is seeded and offline: the same ``seed`` gives the same tweets and vectors everywhere.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import torch

__all__ = [
    "PAD", "UNK", "POSITIVE", "NEGATIVE", "FILLER", "LENGTH_BUCKETS",
    "Tweet", "Vocab", "TweetTensors", "TweetSplits",
    "generate", "make_vocab", "embeddings", "encode", "load", "length_bucket", "tokenize",
    "NEGATORS", "NegatedTweet", "generate_negated",
]

PAD, UNK = 0, 1
PAD_TOKEN, UNK_TOKEN = "<pad>", "<unk>"

POSITIVE = (
    "love", "great", "awesome", "happy", "amazing", "excellent", "wonderful", "fantastic",
    "best", "enjoyed", "delighted", "brilliant",
)
NEGATIVE = (
    "hate", "awful", "terrible", "sad", "worst", "horrible", "angry", "boring",
    "annoying", "disappointed", "miserable", "broken",
)
FILLER = (
    # function words
    "the", "a", "an", "and", "or", "but", "so", "to", "of", "in", "on", "at", "for", "with",
    "from", "about", "this", "that", "it", "is", "was", "are", "be", "just", "still", "again",
    "i", "my", "me", "we", "our", "you", "your", "they", "their", "he", "she", "his", "her",
    "some", "all", "one", "two", "more", "very", "really", "too", "also", "then", "now",
    # everyday nouns
    "today", "tonight", "tomorrow", "morning", "weekend", "monday", "friday", "week", "day",
    "coffee", "lunch", "dinner", "pizza", "tea", "bus", "train", "traffic", "weather", "rain",
    "office", "meeting", "work", "school", "class", "game", "match", "movie", "show", "song",
    "album", "phone", "app", "update", "laptop", "team", "friends", "family", "mom", "dog",
    "cat", "city", "park", "beach", "store", "flight", "hotel", "room", "book", "news",
    # everyday verbs and adverbs
    "went", "got", "saw", "watched", "bought", "made", "had", "going", "see", "get", "think",
    "know", "said", "wait", "back", "home", "out", "up", "here", "there", "later", "soon",
    # tweet noise
    "lol", "omg", "rt", "via", "#monday", "#tbt", "#news", "#life", "@friend", "@team",
)

# Words that flip the polarity of the sentiment word right after them (lesson 10): "not good", "never bad".
NEGATORS = ("not", "never")

# Tweet lengths (in words) are bucketed like this in the lesson's results.
LENGTH_BUCKETS = {"short": (4, 12), "medium": (13, 26), "long": (27, 40)}


def length_bucket(length: int) -> str:
    """The name of the bucket (``"short"``, ``"medium"``, ``"long"``) a tweet length falls in."""
    for name, (lo, hi) in LENGTH_BUCKETS.items():
        if lo <= length <= hi:
            return name
    return "short" if length < LENGTH_BUCKETS["short"][0] else "long"


@dataclass(frozen=True)
class Tweet:
    """One generated tweet.

    Attributes:
        words: the tweet's words, in order.
        label: 1 for positive, 0 for negative.
        sentiment_position: index in ``words`` of the one sentiment word.
    """

    words: tuple[str, ...]
    label: int
    sentiment_position: int

    @property
    def text(self) -> str:
        return " ".join(self.words)

    def __len__(self) -> int:
        return len(self.words)


def generate(n: int, *, seed: int = 0, min_len: int = 4, max_len: int = 40) -> list[Tweet]:
    """``n`` tweets, each with a uniform random length in [min_len, max_len] and one sentiment word.

    Each tweet is positive with probability 1/2. The same ``seed`` always gives the same tweets (Python's
    ``random.Random`` is used, which is
    reproducible across platforms).
    """
    if not 2 <= min_len <= max_len:
        raise ValueError(f"need 2 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(min_len, max_len)
        label = rng.randint(0, 1)
        words = [rng.choice(FILLER) for _ in range(length - 1)]
        pos = rng.randint(0, length - 1)
        words.insert(pos, rng.choice(POSITIVE if label == 1 else NEGATIVE))
        out.append(Tweet(tuple(words), label, pos))
    return out


@dataclass(frozen=True)
class NegatedTweet(Tweet):
    """A tweet with one sentiment word and one negator (lesson 10).

    Attributes:
        negator_position: index in ``words`` of the negator ("not", "never").
        negated: True when the negator sits right before the sentiment word ("not great"), which
            flips the label; False when it sits elsewhere and negates a filler word ("not late").
    """

    negator_position: int
    negated: bool


def generate_negated(n: int, *, seed: int = 0, min_len: int = 4, max_len: int = 40) -> list[NegatedTweet]:
    """``n`` tweets like :func:`generate`'s, each with one negator that flips the label half of the time.

    Every tweet holds one sentiment word and one negator (:data:`NEGATORS`). With probability 1/2
    the negator stands right before the sentiment word ("the coffee was not great"): the tweet means
    the opposite of its sentiment word, and its label is flipped. Otherwise it stands anywhere else,
    never right before the sentiment word ("the bus was not late lol great"), and the label is the
    sentiment word's polarity. Both kinds contain the same words, so a model that ignores word order
    (mean or attention pooling) cannot tell them apart: on these tweets it is at chance.

    Lengths (counting the negator) are uniform in [min_len, max_len]; the same ``seed`` gives the same tweets.
    """
    if not 3 <= min_len <= max_len:
        raise ValueError(f"need 3 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        length = rng.randint(min_len, max_len)
        polarity = rng.randint(0, 1)
        negated = rng.random() < 0.5
        words = [rng.choice(FILLER) for _ in range(length - 2)]
        negator = rng.choice(NEGATORS)
        sentiment = rng.choice(POSITIVE if polarity == 1 else NEGATIVE)
        if negated:
            pos = rng.randint(0, length - 2)
            words[pos:pos] = [negator, sentiment]
            neg_pos, sent_pos = pos, pos + 1
        else:
            sent_pos = rng.randint(0, length - 2)
            words.insert(sent_pos, sentiment)                       # length - 1 words so far
            slots = [i for i in range(length) if i != sent_pos]     # inserting at sent_pos would precede it
            neg_pos = rng.choice(slots)
            words.insert(neg_pos, negator)
            if neg_pos <= sent_pos:
                sent_pos += 1
        label = 1 - polarity if negated else polarity
        out.append(NegatedTweet(tuple(words), label, sent_pos, neg_pos, negated))
    return out


class Vocab:
    """Word <-> id mapping with ``<pad>`` = 0 and ``<unk>`` = 1."""

    def __init__(self, words: Sequence[str]):
        self.itos = [PAD_TOKEN, UNK_TOKEN] + [w for w in dict.fromkeys(words) if w not in (PAD_TOKEN, UNK_TOKEN)]
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word: str) -> bool:
        return word in self.stoi

    def encode(self, words: Sequence[str]) -> list[int]:
        """Ids of ``words`` (unknown words become ``<unk>``)."""
        return [self.stoi.get(w, UNK) for w in words]

    def decode(self, ids) -> list[str]:
        """Words of ``ids``, dropping padding."""
        return [self.itos[int(i)] for i in ids if int(i) != PAD]

    def polarity(self, word: str) -> int:
        """+1 for a positive word, -1 for a negative word, 0 otherwise."""
        return 1 if word in POSITIVE else -1 if word in NEGATIVE else 0


def make_vocab() -> Vocab:
    """The fixed vocabulary: specials, filler words, positive words, negative words."""
    return Vocab(list(FILLER) + list(POSITIVE) + list(NEGATIVE))


def tokenize(text: str) -> list[str]:
    """Lower-case whitespace tokenisation (enough for the generated tweets and the widget)."""
    return text.lower().split()


def embeddings(vocab: Vocab, dim: int = 50, *, seed: int = 0, emotion: float = 0.6,
               polarity: float = 0.6) -> torch.Tensor:
    """Fixed, GloVe-like word vectors for ``vocab``, shape (V, D).

    Every word gets a random vector of norm about 1. Sentiment words additionally get
    ``emotion`` times a shared "emotional" unit direction, plus or minus ``polarity`` times a
    "polarity" unit direction (plus for positive words, minus for negative ones). ``<pad>`` is the
    zero vector; ``<unk>`` is random like a filler word.

    Args:
        vocab: the vocabulary (see :func:`make_vocab`).
        dim: D, the embedding size.
        seed: seeds the vectors.
        emotion, polarity: strength of the two shared directions for sentiment words.

    Returns:
        A float32 tensor of shape (V, D) (not a parameter: the lesson keeps it frozen).
    """
    g = torch.Generator().manual_seed(10_007 + seed)
    table = torch.randn(len(vocab), dim, generator=g) / dim ** 0.5       # (V, D), rows of norm ~1
    directions = torch.linalg.qr(torch.randn(dim, 2, generator=g)).Q.T  # (2, D), orthonormal rows
    emo, pol = directions[0], directions[1]
    for word, i in vocab.stoi.items():
        sign = vocab.polarity(word)
        if sign:
            table[i] += emotion * emo + sign * polarity * pol
    table[PAD] = 0.0
    return table


@dataclass
class TweetTensors:
    """A split of tweets as padded tensors, ready for batching.

    Attributes:
        ids: (N, T_max) long, word ids, ``PAD`` after each tweet's end.
        mask: (N, T_max) bool, True on real tokens.
        labels: (N,) long, 1 positive / 0 negative.
        lengths: (N,) long, number of real tokens.
        tweets: the :class:`Tweet` objects, in the same order.
    """

    ids: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor
    lengths: torch.Tensor
    tweets: list[Tweet]

    def __len__(self) -> int:
        return len(self.tweets)

    def batch(self, index, device=None):
        """Rows ``index`` as ``(ids, mask, labels)``, trimmed to the longest tweet among them.

        Shapes: ids (B, T), mask (B, T), labels (B,), with T the batch's longest tweet.
        """
        index = torch.as_tensor(index, dtype=torch.long)
        T = int(self.lengths[index].max())
        ids, mask, labels = self.ids[index, :T], self.mask[index, :T], self.labels[index]
        if device is not None:
            ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
        return ids, mask, labels

    def sample(self, batch_size: int, generator: torch.Generator | None = None, device=None):
        """A random batch (with replacement across calls, without within one) -- see :meth:`batch`."""
        index = torch.randperm(len(self), generator=generator)[:batch_size]
        return self.batch(index, device)

    def batches(self, batch_size: int, device=None):
        """Consecutive batches covering the whole split once, in order (for evaluation)."""
        for start in range(0, len(self), batch_size):
            yield self.batch(torch.arange(start, min(start + batch_size, len(self))), device)


def encode(tweets: Sequence[Tweet], vocab: Vocab, pad_to: int | None = None) -> TweetTensors:
    """Pad a list of tweets into :class:`TweetTensors` (``PAD`` = 0 after each tweet's end)."""
    lengths = torch.tensor([len(t) for t in tweets], dtype=torch.long)
    T = max(int(lengths.max()) if len(tweets) else 1, pad_to or 0)
    ids = torch.full((len(tweets), T), PAD, dtype=torch.long)
    for row, tweet in enumerate(tweets):
        ids[row, : len(tweet)] = torch.tensor(vocab.encode(tweet.words), dtype=torch.long)
    mask = torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)          # (N, T)
    labels = torch.tensor([t.label for t in tweets], dtype=torch.long)
    return TweetTensors(ids, mask, labels, lengths, list(tweets))


@dataclass
class TweetSplits:
    """Fixed train / validation / test splits, the vocabulary and the frozen word vectors."""

    train: TweetTensors
    val: TweetTensors
    test: TweetTensors
    vocab: Vocab
    vectors: torch.Tensor  # (V, D)


def load(n_train: int = 4000, n_val: int = 500, n_test: int = 2000, *, seed: int = 0, dim: int = 50,
         min_len: int = 4, max_len: int = 40) -> TweetSplits:
    """The lesson's data: three disjointly seeded splits, the vocabulary and the word vectors.

    Each split has its own seed derived from ``seed``, so the test set does not change when
    ``n_train`` does (the smoke and standard profiles are scored on the same kind of tweets).
    """
    vocab = make_vocab()
    kw = dict(min_len=min_len, max_len=max_len)
    return TweetSplits(
        train=encode(generate(n_train, seed=1_000 * seed + 1, **kw), vocab),
        val=encode(generate(n_val, seed=1_000 * seed + 2, **kw), vocab),
        test=encode(generate(n_test, seed=1_000 * seed + 3, **kw), vocab),
        vocab=vocab,
        vectors=embeddings(vocab, dim, seed=seed),
    )

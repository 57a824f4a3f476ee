"""Generated two-sentence documents for pre-training a small BERT (lesson 10), offline and seeded.

Each document is two sentences about one thing, with one opinion about it::

    we watched the movie at the cinema on friday and it was not boring .      <- sentence A
    the plot of the movie was brilliant .                                      <- sentence B

The documents are built so that both of BERT's pre-training tasks can be learned **from content**:

* **next sentence prediction**: sentence B talks about the same noun as sentence A (or, for the
  homonyms below, about the noun's own activity), and B's opinion has the same polarity as A's.
  A sentence B taken from another document almost always names another noun (about 1 in 20 share
  it) and disagrees in polarity half of the time, so "does B follow A?" can be answered by looking
  at A and B together -- not by looking at B alone, which is the same kind of sentence either way;
* **masked words**: a masked noun in B can be copied from A; a masked verb follows from its noun
  ("read the book", "missed the bus"); a masked opinion word's polarity follows from the other
  sentence, **through negation**: "it was not boring" is positive, so B's word is a positive one.

Two words are homonyms, one vector in the embedding table but two meanings: *book* (a thing you
read; to book a flight or a hotel) and *train* (a thing you take; the team will train). The lesson
uses them to show static vs contextual vectors.

The vocabulary (:func:`make_vocab`) is a :class:`course.data.tweets.Vocab` with BERT's special
tokens and every word of the documents **and** of lesson 01's tweets (plus the negators), so a
model pre-trained on documents can be fine-tuned on tweets: ``<pad>`` = 0, ``<unk>`` = 1,
``[CLS]`` = 2, ``[SEP]`` = 3, ``[MASK]`` = 4, then the words.
"""

from __future__ import annotations

import random
from typing import Sequence

import torch

from course.data import tweets

__all__ = [
    "PAD", "UNK", "CLS", "SEP", "MASK", "SPECIALS", "TOPICS", "PLACES", "NOUNS", "TOPIC_OF", "HOMONYMS",
    "generate", "make_vocab", "encode_pairs", "special_mask",
]

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
SPECIALS = ("[CLS]", "[SEP]", "[MASK]")

# topic -> (its nouns with the verbs that go with each, its "attribute" words)
TOPICS = {
    "food": ({"coffee": ("had", "made", "ordered"), "tea": ("had", "made", "ordered"),
              "pizza": ("ate", "ordered", "made"), "dinner": ("had", "cooked", "skipped"),
              "lunch": ("had", "ate", "skipped")}, ("taste", "price", "portion")),
    "travel": ({"bus": ("took", "missed", "caught"), "train": ("took", "missed", "caught"),
                "flight": ("took", "missed", "booked"), "hotel": ("booked", "found", "picked")},
               ("seats", "staff", "delay")),
    "media": ({"movie": ("watched", "saw"), "show": ("watched", "saw"), "song": ("heard", "played"),
               "album": ("heard", "bought"), "book": ("read", "bought", "finished")}, ("plot", "ending", "music")),
    "sport": ({"game": ("played", "watched", "won"), "match": ("played", "watched", "won")},
              ("score", "crowd", "referee")),
    "tech": ({"phone": ("bought", "dropped", "fixed"), "laptop": ("bought", "fixed", "dropped"),
              "app": ("tried", "installed", "used")}, ("battery", "screen", "design")),
    "work": ({"meeting": ("had", "missed", "skipped"), "class": ("had", "missed", "skipped")},
             ("teacher", "slides", "topic")),
    "outdoors": ({"beach": ("visited", "found", "reached"), "park": ("visited", "found", "reached")},
                 ("view", "sand", "trees")),
}
PLACES = {"food": ("at the cafe", "in the kitchen"), "travel": ("at the station", "at the airport"),
          "media": ("at the cinema", "at the library"), "sport": ("at the stadium", "at the gym"),
          "tech": ("at the shop", "at the mall"), "work": ("at the office", "at the campus"),
          "outdoors": ("at the coast", "in the garden")}
NOUNS = {noun: verbs for nouns, _ in TOPICS.values() for noun, verbs in nouns.items()}
TOPIC_OF = {noun: topic for topic, (nouns, _) in TOPICS.items() for noun in nouns}
SUBJECTS = ("i", "we", "my mom", "my friends", "the team", "she", "he", "they")
WHEN = ("today", "tonight", "on monday", "on friday", "this morning", "this weekend", "last week", "again")
NEGATORS = tweets.NEGATORS
# B sentences that use the homonyms in their other meaning (the verb "book", the verb "train")
HOMONYMS = {"book": "a thing you read (noun) / to book a flight or a hotel (verb)",
            "train": "a thing you take (noun) / the team will train (verb)"}
_VERB_BOOK = ("flight", "hotel")
_VERB_TRAIN = ("game", "match")


def _opinion(rng: random.Random, polarity: int, p_negate: float) -> list[str]:
    """An opinion of the given polarity: a sentiment word, negated with probability ``p_negate``."""
    if rng.random() < p_negate:
        word = rng.choice(tweets.NEGATIVE if polarity > 0 else tweets.POSITIVE)   # "not awful" is positive
        return [rng.choice(NEGATORS), word]
    return [rng.choice(tweets.POSITIVE if polarity > 0 else tweets.NEGATIVE)]


def _sentence_b(rng: random.Random, noun: str, opinion: list[str]) -> list[str]:
    attribute = rng.choice(TOPICS[TOPIC_OF[noun]][1])
    r = rng.random()
    if noun in _VERB_BOOK and r < 0.3:
        return ["next", "time", "we", "book", "the", noun, "early", "the", attribute, "was"] + opinion + ["."]
    if noun in _VERB_TRAIN and r < 0.3:
        return ["the", "team", "will", "train", "for", "the", "next", noun, "the", attribute, "was"] + opinion + ["."]
    templates = (
        ["the", attribute, "of", "the", noun, "was"] + opinion,
        ["honestly", "the", noun, "and", "its", attribute, "were"] + opinion,
        ["i", "think", "the", attribute, "of", "the", noun, "is"] + opinion,
        ["everyone", "said", "the", noun, "was"] + opinion,
    )
    return rng.choice(templates) + ["."]


def generate(n: int, *, seed: int = 0, p_opinion_a: float = 0.7, p_negate: float = 0.35) -> list[list[list[str]]]:
    """``n`` two-sentence documents, each a list of two sentences, each a list of words.

    Args:
        n: number of documents.
        seed: the same seed always gives the same documents (Python's ``random.Random``).
        p_opinion_a: probability that sentence A states an opinion too ("... and it was not boring").
        p_negate: probability that an opinion is negated ("not boring" instead of "great").

    Returns:
        ``documents[d] = [sentence_a, sentence_b]`` with ``sentence = ["we", "watched", ...]``.
    """
    rng = random.Random(seed)
    nouns = sorted(NOUNS)
    docs = []
    for _ in range(n):
        noun = rng.choice(nouns)
        polarity = rng.choice((1, -1))
        a = rng.choice(SUBJECTS).split() + [rng.choice(NOUNS[noun]), "the", noun]
        a += rng.choice(PLACES[TOPIC_OF[noun]]).split() + rng.choice(WHEN).split()
        if rng.random() < p_opinion_a:
            a += ["and", "it", "was"] + _opinion(rng, polarity, p_negate)
        a.append(".")
        b = _sentence_b(rng, noun, _opinion(rng, polarity, p_negate))
        docs.append([a, b])
    return docs


def make_vocab() -> tweets.Vocab:
    """BERT's specials, then every word of the documents and of lesson 01's tweets (with the negators)."""
    words = list(SPECIALS) + list(tweets.FILLER) + list(tweets.POSITIVE) + list(tweets.NEGATIVE) + list(NEGATORS)
    words += sorted(NOUNS) + sorted({v for verbs in NOUNS.values() for v in verbs})
    words += [w for s in SUBJECTS + WHEN for w in s.split()]
    words += [w for _, attributes in TOPICS.values() for w in attributes]
    words += [w for places in PLACES.values() for place in places for w in place.split()]
    words += "and it was . next time we book early the team will train for honestly i think is everyone said of its were".split()
    vocab = tweets.Vocab(words)
    assert [vocab.stoi[s] for s in SPECIALS] == [CLS, SEP, MASK]
    return vocab


def encode_pairs(pairs: Sequence, vocab: tweets.Vocab, device=None):
    """BERT inputs for sentence pairs ``(a, b, ...)`` or single sentences, padded to the longest.

    A pair becomes ``[CLS] a [SEP] b [SEP]`` with segment 0 on ``[CLS] a [SEP]`` and 1 on ``b [SEP]``;
    a single sentence (a list of words, or a pair whose ``b`` is None) becomes ``[CLS] a [SEP]``.

    Returns:
        ``(ids, segments, real)``: ids (B, T) long, segments (B, T) long, real (B, T) bool (True on
        real tokens, False on padding), with T the longest sequence.
    """
    rows, segs = [], []
    for item in pairs:
        if isinstance(item, (tuple, list)) and len(item) >= 2 and isinstance(item[0], (tuple, list)):
            a, b = item[0], item[1]
        else:
            a, b = item, None
        row = [CLS] + vocab.encode(a) + [SEP]
        seg = [0] * len(row)
        if b is not None:
            row += vocab.encode(b) + [SEP]
            seg += [1] * (len(b) + 1)
        rows.append(row)
        segs.append(seg)
    T = max(len(r) for r in rows)
    ids = torch.full((len(rows), T), PAD, dtype=torch.long)
    segments = torch.zeros(len(rows), T, dtype=torch.long)
    for i, (r, s) in enumerate(zip(rows, segs)):
        ids[i, : len(r)] = torch.tensor(r)
        segments[i, : len(s)] = torch.tensor(s)
    real = ids != PAD
    if device is not None:
        ids, segments, real = ids.to(device), segments.to(device), real.to(device)
    return ids, segments, real


def special_mask(ids: torch.Tensor) -> torch.Tensor:
    """True where ``ids`` holds a special token (``<pad>``, ``[CLS]``, ``[SEP]``): never masked for MLM."""
    return (ids == PAD) | (ids == CLS) | (ids == SEP)

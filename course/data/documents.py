"""Generated two-sentence documents for pre-training a small BERT (lesson 10), offline and seeded.

Each document is two short, post-like sentences about one thing, with an opinion::

    watched the movie at cinema not boring .        <- sentence A
    plot of the movie brilliant .                   <- sentence B

Seven topics (food, travel, media, sport, tech, work, outdoors) each have nouns, the verbs that go
with each noun, places and attributes (*coffee, drank, cafe, taste*). A sentence is a few of its
noun's topic words in one of a few orders, usually followed by an opinion. The documents are built
so that both of BERT's pre-training tasks can be learned **from content**:

* **next sentence prediction**: both sentences are about the same noun (so the same topic) and their
  opinions agree in polarity. Every sentence form can open or continue a document, so B alone says
  nothing; a B taken from another document is about another topic 6 times in 7, so "does B follow
  A?" is answered by looking at A and B together;
* **masked words**: a masked noun can be copied from the other sentence; a verb, place or attribute
  follows from the topic; a masked opinion word's polarity follows from the other sentence's opinion,
  **through negation**: "not boring" is positive, so the hidden word is a positive one.

Topic words are dense on purpose: with long, function-word-heavy sentences a 2-layer, 64-wide BERT
stays at chance on next-sentence prediction for well over a thousand steps (measured while writing
the lesson), because the [CLS] position first has to learn where to look.

Two words are homonyms, one row of the embedding table but two meanings: *book* (a thing you read;
to book a flight or a hotel) and *train* (a thing you take; to train for a match or a game). The
lesson uses them to show static vs contextual vectors.

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
    "food": ({"coffee": ("drank", "ordered"), "tea": ("drank", "brewed"), "pizza": ("ate", "baked"),
              "dinner": ("cooked", "ate"), "lunch": ("ate", "cooked")}, ("taste", "price", "portion")),
    "travel": ({"bus": ("took", "missed"), "train": ("took", "missed"), "flight": ("book", "missed"),
                "hotel": ("book", "picked")}, ("seats", "staff", "delay")),
    "media": ({"movie": ("watched", "streamed"), "show": ("watched", "streamed"), "song": ("heard", "played"),
               "album": ("heard", "played"), "book": ("read", "finished")}, ("plot", "ending", "music")),
    "sport": ({"game": ("won", "train"), "match": ("lost", "train")}, ("score", "crowd", "referee")),
    "tech": ({"phone": ("bought", "charged"), "laptop": ("bought", "fixed"), "app": ("installed", "updated")},
             ("battery", "screen", "design")),
    "work": ({"meeting": ("attended", "skipped"), "class": ("attended", "skipped")}, ("teacher", "slides", "topic")),
    "outdoors": ({"beach": ("visited", "explored"), "park": ("visited", "explored")}, ("view", "sand", "trees")),
}
PLACES = {"food": ("cafe", "kitchen"), "travel": ("station", "airport"), "media": ("cinema", "library"),
          "sport": ("stadium", "gym"), "tech": ("shop", "mall"), "work": ("office", "campus"),
          "outdoors": ("coast", "garden")}
NOUNS = {noun: verbs for nouns, _ in TOPICS.values() for noun, verbs in nouns.items()}
TOPIC_OF = {noun: topic for topic, (nouns, _) in TOPICS.items() for noun in nouns}
NEGATORS = tweets.NEGATORS
# B sentences that use the homonyms in their other meaning (the verb "book", the verb "train")
HOMONYMS = {"book": "a thing you read (noun) / to book a flight or a hotel (verb)",
            "train": "a thing you take (noun) / to train for a match or a game (verb)"}


def _opinion(rng: random.Random, polarity: int, p_negate: float) -> list[str]:
    """An opinion of the given polarity: a sentiment word, negated with probability ``p_negate``."""
    if rng.random() < p_negate:
        word = rng.choice(tweets.NEGATIVE if polarity > 0 else tweets.POSITIVE)   # "not awful" is positive
        return [rng.choice(NEGATORS), word]
    return [rng.choice(tweets.POSITIVE if polarity > 0 else tweets.NEGATIVE)]


def _sentence(rng: random.Random, noun: str, polarity: int, p_opinion: float, p_negate: float) -> list[str]:
    """One short, post-like sentence about ``noun``: a verb, the noun, a place and an attribute of its topic
    (in one of a few orders, some left out), then usually an opinion. Every form can open or continue a document."""
    topic = TOPIC_OF[noun]
    verb, place, attribute = rng.choice(NOUNS[noun]), rng.choice(PLACES[topic]), rng.choice(TOPICS[topic][1])
    words = rng.choice((
        [verb, "the", noun, "at", place],
        ["the", noun, "at", place, attribute],
        [attribute, "of", "the", noun],
        [verb, noun, attribute, place],
        [place, noun, attribute],
    ))
    if rng.random() < p_opinion:
        words = words + _opinion(rng, polarity, p_negate)
    return words + ["."]


def generate(n: int, *, seed: int = 0, p_opinion: float = 0.8, p_negate: float = 0.35) -> list[list[list[str]]]:
    """``n`` two-sentence documents, each a list of two sentences, each a list of words.

    Both sentences are about the same noun (so the same topic) and agree in polarity; each is drawn
    from the same set of templates, so B alone does not tell whether it follows A.

    Args:
        n: number of documents.
        seed: the same seed always gives the same documents (Python's ``random.Random``).
        p_opinion: probability that a sentence of the narrative form ("we drank the coffee ...") also
            states the opinion ("... and it was not boring"); the other forms always do.
        p_negate: probability that an opinion is negated ("not boring" instead of "great").

    Returns:
        ``documents[d] = [sentence_a, sentence_b]`` with ``sentence = ["we", "drank", ...]``.
    """
    rng = random.Random(seed)
    nouns = sorted(NOUNS)
    docs = []
    for _ in range(n):
        noun = rng.choice(nouns)
        polarity = rng.choice((1, -1))
        docs.append([_sentence(rng, noun, polarity, p_opinion, p_negate) for _ in range(2)])
    return docs


def make_vocab() -> tweets.Vocab:
    """BERT's specials, then every word of the documents and of lesson 01's tweets (with the negators)."""
    words = list(SPECIALS) + list(tweets.FILLER) + list(tweets.POSITIVE) + list(tweets.NEGATIVE) + list(NEGATORS)
    words += sorted(NOUNS) + sorted({v for verbs in NOUNS.values() for v in verbs})
    words += [w for _, attributes in TOPICS.values() for w in attributes]
    words += [place for places in PLACES.values() for place in places]
    words += ["the", "at", "of", "."]
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

"""bAbI-style induction stories for the multi-hop attention lesson (04), generated offline.

A story is a small set of facts about people, their animal and their colour::

    brian is a frog . lily is gray . brian is yellow . greg is a frog .
    what color is greg ?                                  -> yellow

Nothing in the story says Greg's colour. The answer follows a chain of facts: Greg is a frog,
Brian is a frog too, Brian is yellow; so (by the story-world's rule "one animal, one colour")
Greg is yellow. Each question type needs a different number of supporting facts, so a model
with too few attention hops cannot answer it:

    ============  ==================================  ========  ==================
    type          question                            facts     chain
    ============  ==================================  ========  ==================
    ``animal``    what is brian ?          -> frog    1         brian
    ``direct``    what color is brian ?    -> yellow  1         brian
    ``kind``      what color is a frog ?   -> yellow  2         frog -> brian
    ``chained``   what color is greg ?     -> yellow  3         greg -> frog -> brian
    ============  ==================================  ========  ==================

Within a story every animal has exactly one colour and one "witness" who states it, so every
answer is unique. Sentence order carries no information (the facts are a set), and the
supporting sentences are scattered at random among distractors.

Tensors: a batch of stories is encoded as word ids ``story (B, N, J)`` with ``N`` sentence slots
and ``J`` word slots per sentence (``PAD = 0`` fills both), a sentence mask ``story_mask (B, N)``
(True on real sentences), the question ``question (B, J)`` and the answer's class ``answer (B,)``
in :data:`ANSWERS`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

__all__ = [
    "NAMES", "ANIMALS", "COLORS", "ANSWERS", "QTYPES", "N_FACTS", "PAD", "VOCAB", "WORD_TO_ID",
    "N_SENTENCES", "N_WORDS", "Story", "StoryBatch", "make_story", "make_stories", "make_splits",
    "encode", "position_encoding",
]

NAMES = ("brian", "lily", "greg", "julius", "bernhard", "emily", "john", "mary", "sandra", "daniel")
ANIMALS = ("frog", "swan", "lion", "rhino", "mouse")
COLORS = ("yellow", "gray", "white", "green", "red")
ANSWERS = COLORS + ANIMALS                      # the classes an answer can take
QTYPES = ("animal", "direct", "kind", "chained")
N_FACTS = {"animal": 1, "direct": 1, "kind": 2, "chained": 3}  # supporting facts per type

PAD = 0
VOCAB = ("<pad>", "is", "a", "what", "color") + NAMES + ANIMALS + COLORS
WORD_TO_ID = {w: i for i, w in enumerate(VOCAB)}

N_SENTENCES = 10   # sentence slots per story (the longest story has 10 sentences)
N_WORDS = 5        # word slots per sentence ("what color is a frog" has 5 words)


@dataclass(frozen=True)
class Story:
    """One story: its sentences (lists of words), the question, the answer and why."""

    sentences: tuple[tuple[str, ...], ...]
    question: tuple[str, ...]
    answer: str
    qtype: str
    supporting: tuple[int, ...] = field(default=())   # indices of the facts the answer needs, in chain order

    @property
    def n_facts(self) -> int:
        return len(self.supporting)

    def text(self) -> str:
        """The story as readable text, one sentence per line, then the question and answer."""
        lines = [f"{i}: {' '.join(s).capitalize()}." for i, s in enumerate(self.sentences)]
        q = " ".join(self.question).capitalize()
        return "\n".join(lines + [f"Q: {q}?  A: {self.answer}   ({self.qtype}, {self.n_facts} supporting facts)"])


def _sentence_is_a(name, animal):
    return (name, "is", "a", animal)


def _sentence_is(name, color):
    return (name, "is", color)


def make_story(rng: random.Random, qtype: str | None = None) -> Story:
    """Draw one story with ``rng``; ``qtype`` picks the question type (random if None).

    The story holds 2-3 animals, each with a witness ("brian is a frog", "brian is yellow"),
    1-2 people whose animal is known but not their colour ("greg is a frog"), and 0-2 people
    whose colour is known but not their animal ("lily is gray"): 5 to 10 sentences.
    """
    qtype = qtype or rng.choice(QTYPES)
    if qtype not in QTYPES:
        raise ValueError(f"qtype must be one of {QTYPES}, not {qtype!r}")
    n_animals = rng.randint(2, 3)
    n_induct = rng.randint(1, 2)
    n_lonely = rng.randint(0, 2)
    names = rng.sample(NAMES, n_animals + n_induct + n_lonely)
    animals = rng.sample(ANIMALS, n_animals)
    colors = rng.sample(COLORS, n_animals)            # one colour per animal, all different
    color_of = dict(zip(animals, colors))
    witnesses, induct, lonely = names[:n_animals], names[n_animals:n_animals + n_induct], names[n_animals + n_induct:]

    facts = []                                        # (sentence, tag) with tags naming the fact
    for w, a in zip(witnesses, animals):
        facts.append((_sentence_is_a(w, a), ("animal", w)))
        facts.append((_sentence_is(w, color_of[a]), ("color", w)))
    animal_of = dict(zip(witnesses, animals))
    for p in induct:
        animal_of[p] = rng.choice(animals)
        facts.append((_sentence_is_a(p, animal_of[p]), ("animal", p)))
    for p in lonely:
        facts.append((_sentence_is(p, rng.choice(COLORS)), ("color", p)))
    rng.shuffle(facts)
    index = {tag: i for i, (_, tag) in enumerate(facts)}
    sentences = tuple(s for s, _ in facts)

    if qtype == "animal":
        who = rng.choice(witnesses + induct)
        question, answer = ("what", "is", who), animal_of[who]
        supporting = (index[("animal", who)],)
    elif qtype == "direct":
        who = rng.choice(witnesses + lonely)
        answer = sentences[index[("color", who)]][2]
        question, supporting = ("what", "color", "is", who), (index[("color", who)],)
    elif qtype == "kind":
        w = rng.choice(witnesses)
        a = animal_of[w]
        question, answer = ("what", "color", "is", "a", a), color_of[a]
        supporting = (index[("animal", w)], index[("color", w)])
    else:  # chained: greg is a frog -> brian is a frog -> brian is yellow
        who = rng.choice(induct)
        a = animal_of[who]
        w = witnesses[animals.index(a)]
        question, answer = ("what", "color", "is", who), color_of[a]
        supporting = (index[("animal", who)], index[("animal", w)], index[("color", w)])
    return Story(sentences, question, answer, qtype, supporting)


def make_stories(n: int, seed: int = 0, qtypes=QTYPES) -> list[Story]:
    """``n`` stories, question types cycling through ``qtypes`` (balanced), from ``seed``."""
    rng = random.Random(seed)
    return [make_story(rng, qtypes[i % len(qtypes)]) for i in range(n)]


def _key(story: Story):
    return (frozenset(story.sentences), story.question)


def make_splits(n_train: int, n_val: int, n_test: int, seed: int = 0, qtypes=QTYPES) -> dict[str, list[Story]]:
    """Train / val / test lists of stories; no val or test story (as a set of facts plus
    question) also appears in train, and val and test are disjoint."""
    out, seen = {}, set()
    for offset, (name, n) in enumerate((("train", n_train), ("val", n_val), ("test", n_test))):
        rng = random.Random(seed * 1000 + offset)
        stories = []
        while len(stories) < n:
            s = make_story(rng, qtypes[len(stories) % len(qtypes)])
            k = _key(s)
            if name != "train" and k in seen:
                continue
            stories.append(s)
        seen.update(_key(s) for s in stories)
        out[name] = stories
    return out


@dataclass
class StoryBatch:
    """Encoded stories: word ids, masks, answers and question types (see the module docstring)."""

    story: torch.Tensor        # (B, N, J) long, PAD-filled
    story_mask: torch.Tensor   # (B, N) bool, True on real sentences
    question: torch.Tensor     # (B, J) long
    answer: torch.Tensor       # (B,) long, index into ANSWERS
    qtype: torch.Tensor        # (B,) long, index into QTYPES
    n_facts: torch.Tensor      # (B,) long, supporting facts needed
    supporting: torch.Tensor   # (B, 3) long, sentence index of each supporting fact in chain order, -1 pads

    def __len__(self) -> int:
        return self.story.shape[0]

    def to(self, device) -> "StoryBatch":
        return StoryBatch(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))

    def __getitem__(self, idx) -> "StoryBatch":
        return StoryBatch(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))


def _ids(words, n_words):
    if len(words) > n_words:
        raise ValueError(f"sentence {' '.join(words)!r} has more than {n_words} words")
    return [WORD_TO_ID[w] for w in words] + [PAD] * (n_words - len(words))


def encode(stories: list[Story], n_sentences: int = N_SENTENCES, n_words: int = N_WORDS) -> StoryBatch:
    """Encode stories as padded word-id tensors with a sentence mask."""
    B = len(stories)
    blank = [PAD] * n_words
    story, mask, support = [], [], []
    for s in stories:
        if len(s.sentences) > n_sentences:
            raise ValueError(f"a story has {len(s.sentences)} sentences; n_sentences={n_sentences} is too small")
        n_pad = n_sentences - len(s.sentences)
        story.append([_ids(sent, n_words) for sent in s.sentences] + [blank] * n_pad)
        mask.append([True] * len(s.sentences) + [False] * n_pad)
        support.append(list(s.supporting) + [-1] * (3 - len(s.supporting)))
    story = torch.tensor(story, dtype=torch.long).view(B, n_sentences, n_words)
    mask = torch.tensor(mask, dtype=torch.bool).view(B, n_sentences)
    support = torch.tensor(support, dtype=torch.long).view(B, 3)
    question = torch.tensor([_ids(s.question, n_words) for s in stories], dtype=torch.long).view(B, n_words)
    answer = torch.tensor([ANSWERS.index(s.answer) for s in stories], dtype=torch.long)
    qtype = torch.tensor([QTYPES.index(s.qtype) for s in stories], dtype=torch.long)
    n_facts = torch.tensor([s.n_facts for s in stories], dtype=torch.long)
    return StoryBatch(story, mask, question, answer, qtype, n_facts, support)


def position_encoding(n_words: int, d_model: int) -> torch.Tensor:
    """The memory networks' position encoding for bag-of-words sentences, shape (J, D).

    A sentence is encoded as ``sum_j l_j * A[w_j]`` (elementwise product), with
    ``l_kj = (1 - j/J) - (k/D) (1 - 2j/J)`` for word j = 1..J and dimension k = 1..D
    (Sukhbaatar et al., 2015). Unlike a plain sum of word vectors, it tells "brian is a frog"
    from "a frog is brian".
    """
    j = torch.arange(1, n_words + 1, dtype=torch.float32).unsqueeze(1) / n_words    # (J, 1)
    k = torch.arange(1, d_model + 1, dtype=torch.float32).unsqueeze(0) / d_model    # (1, D)
    return (1 - j) - k * (1 - 2 * j)                                                   # (J, D)

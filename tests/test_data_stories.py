"""Unit tests for the bAbI-style story generator (course/data/stories.py) and course/memnet.py."""

from __future__ import annotations

import random

import pytest
import torch

from course import memnet
from course.data import stories as S


@pytest.fixture(scope="module")
def splits():
    return S.make_splits(n_train=800, n_val=200, n_test=400, seed=0)


def _facts(story):
    """(animal_of, color_of) dictionaries stated by the story's sentences."""
    animal_of, color_of = {}, {}
    for s in story.sentences:
        if len(s) == 4:
            animal_of[s[0]] = s[3]
        else:
            color_of[s[0]] = s[2]
    return animal_of, color_of


def _solve(story):
    """Answer a question by following the story's facts (the rule: one animal, one colour)."""
    animal_of, color_of = _facts(story)
    q = story.question
    if q[:2] == ("what", "is"):
        return animal_of[q[2]]
    if q[3] == "a":                                  # what color is a frog
        return next(color_of[p] for p, a in animal_of.items() if a == q[4] and p in color_of)
    who = q[3]
    if who in color_of:
        return color_of[who]
    return next(color_of[p] for p, a in animal_of.items() if a == animal_of[who] and p in color_of)


def test_seeded_and_deterministic():
    a = S.make_stories(50, seed=3)
    b = S.make_stories(50, seed=3)
    c = S.make_stories(50, seed=4)
    assert a == b
    assert a != c


def test_every_answer_follows_from_the_story(splits):
    for name, stories in splits.items():
        for story in stories:
            assert _solve(story) == story.answer, f"{name}: {story.text()}"


def test_supporting_facts_form_the_chain(splits):
    for story in splits["train"]:
        assert story.n_facts == S.N_FACTS[story.qtype]
        sup = [story.sentences[i] for i in story.supporting]
        if story.qtype == "chained":
            greg, brian, brian_color = sup
            assert greg[0] == story.question[3] and greg[3] == brian[3]      # same animal
            assert brian[0] == brian_color[0] != greg[0]                     # the witness
            assert brian_color[2] == story.answer
        elif story.qtype == "kind":
            assert sup[0][3] == story.question[4] and sup[0][0] == sup[1][0] and sup[1][2] == story.answer
        else:
            assert sup[0][0] == story.question[-1]


def test_chained_colour_is_never_stated(splits):
    for story in splits["test"]:
        if story.qtype == "chained":
            _, color_of = _facts(story)
            assert story.question[3] not in color_of


def test_consistent_world(splits):
    """One colour per animal within a story, and no repeated sentence."""
    for story in splits["train"]:
        animal_of, color_of = _facts(story)
        seen = {}
        for p, a in animal_of.items():
            if p in color_of:
                assert seen.setdefault(a, color_of[p]) == color_of[p], story.text()
        assert len(set(story.sentences)) == len(story.sentences)


def test_question_types_balanced(splits):
    counts = {q: 0 for q in S.QTYPES}
    for story in splits["train"]:
        counts[story.qtype] += 1
    assert set(counts.values()) == {len(splits["train"]) // len(S.QTYPES)}


def test_splits_disjoint(splits):
    key = lambda s: (frozenset(s.sentences), s.question)  # noqa: E731
    train = {key(s) for s in splits["train"]}
    val = {key(s) for s in splits["val"]}
    assert not train & val
    assert not train & {key(s) for s in splits["test"]}
    assert not val & {key(s) for s in splits["test"]}


def test_encode_shapes_and_masks(splits):
    stories = splits["val"][:16]
    b = S.encode(stories)
    B, N, J = len(stories), S.N_SENTENCES, S.N_WORDS
    assert b.story.shape == (B, N, J) and b.story.dtype == torch.long
    assert b.story_mask.shape == (B, N) and b.story_mask.dtype == torch.bool
    assert b.question.shape == (B, J) and b.answer.shape == (B,) and b.supporting.shape == (B, 3)
    assert b.story_mask.sum(1).tolist() == [len(s.sentences) for s in stories]
    # Padding slots hold only PAD, real sentences start with a name.
    assert (b.story[~b.story_mask] == S.PAD).all()
    assert (b.story[b.story_mask][:, 0] != S.PAD).all()
    for i, s in enumerate(stories):
        assert S.ANSWERS[int(b.answer[i])] == s.answer
        assert S.QTYPES[int(b.qtype[i])] == s.qtype
        words = [S.VOCAB[int(t)] for t in b.question[i] if int(t) != S.PAD]
        assert tuple(words) == s.question
        for f, idx in enumerate(s.supporting):
            assert int(b.supporting[i, f]) == idx and bool(b.story_mask[i, idx])


def test_story_lengths_fit():
    rng = random.Random(0)
    lengths = [len(S.make_story(rng).sentences) for _ in range(2000)]
    assert min(lengths) >= 5 and max(lengths) <= S.N_SENTENCES


def test_batch_indexing(splits):
    b = S.encode(splits["test"][:10])
    part = b[2:5]
    assert len(part) == 3 and torch.equal(part.story, b.story[2:5])
    sel = b[b.qtype == 0]
    assert (sel.qtype == 0).all()


def test_position_encoding():
    pe = S.position_encoding(5, 8)
    assert pe.shape == (5, 8)
    # The formula of Sukhbaatar et al.: l_kj = (1 - j/J) - (k/d)(1 - 2j/J), j and k from 1.
    j, k, J, d = 2, 3, 5, 8
    assert pe[j - 1, k - 1].item() == pytest.approx((1 - j / J) - (k / d) * (1 - 2 * j / J))
    # Word order matters: "brian is a frog" and "frog is a brian" encode differently.
    torch.manual_seed(0)
    E = torch.randn(len(S.VOCAB), 8)
    ids = lambda ws: torch.tensor([S.WORD_TO_ID[w] for w in ws])  # noqa: E731
    enc = lambda ws: (E[ids(ws)] * pe[: len(ws)]).sum(0)  # noqa: E731
    assert not torch.allclose(enc(["brian", "is", "a", "frog"]), enc(["frog", "is", "a", "brian"]))


class _Oracle(torch.nn.Module):
    """A fake 1-hop model that attends to the first supporting fact and answers correctly."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def forward(self, story, story_mask, question):
        # Identify rows by their question and story ids (the batch passed in is a slice of self.batch).
        match = (self.batch.story.flatten(1)[None] == story.flatten(1)[:, None]).all(-1) & \
                (self.batch.question[None] == question[:, None]).all(-1)
        rows = match.float().argmax(1)
        logits = torch.nn.functional.one_hot(self.batch.answer[rows], len(S.ANSWERS)).float()
        w = torch.nn.functional.one_hot(self.batch.supporting[rows, 0], story.shape[1]).float()
        return logits, w[:, None]


def test_memnet_helpers(splits):
    b = S.encode(splits["test"][:40])
    model = _Oracle(b)
    acc = memnet.accuracy_by_type(model, b)
    assert set(acc) == set(S.QTYPES) and all(v == 1.0 for v in acc.values())
    chain = memnet.chain_attention(model, b, "chained")
    assert chain.shape == (1, 3)
    assert chain[0].tolist() == [1.0, 0.0, 0.0]
    i = memnet.first_index(b, "kind")
    assert S.QTYPES[int(b.qtype[i])] == "kind"
    assert memnet.first_index(b, "kind", 1) > i

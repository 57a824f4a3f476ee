"""A seeded English -> French-like translation task with agreement and word reordering (lessons 02, 03, 08).

Sentences come from a small grammar, so the task is offline, reproducible and fully understood,
yet it has the two things that make translation more than word-for-word substitution:

* **agreement**: the article, the adjectives and the verb take the gender and number of their
  noun ("the black cat" -> "le chat noir", "the black cars" -> "les voitures noires", "the cats
  sleep" -> "les chats dorment"), and "de" contracts with the article ("near the dog" -> "près du
  chien", "near the dogs" -> "près des chiens");
* **reordering**: adjectives follow the noun, in mirror order ("the small black cat" -> "le chat
  noir petit"), which draws a *crossed* diagonal in an alignment heatmap.

Sentences are joined by "and" and extended with relative clauses ("the cat that sees the dog")
and prepositional phrases, so lengths run from 3 to 25 words (30 with ``max_len=30``). Each
:class:`Pair` also carries the gold **alignment**: for every target word, the position of the
source word it translates, so attention maps can be scored.

Example::

    data = make_translation_data(n_train=20_000, seed=0)
    batch = data.batch(data.train[:4])          # padded tensors and masks
    data.src_vocab.decode(batch.src[0].tolist())

Token ids: ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3 in both vocabularies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

__all__ = ["Pair", "Vocab", "Batch", "TranslationData", "make_translation_data", "generate_pair", "PAD", "BOS", "EOS", "UNK"]

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")

# --------------------------------------------------------------------------- the lexicon
# noun: english singular, english plural, french singular, french plural, gender
NOUNS = [
    ("cat", "cats", "chat", "chats", "m"),
    ("dog", "dogs", "chien", "chiens", "m"),
    ("horse", "horses", "cheval", "chevaux", "m"),
    ("boy", "boys", "garçon", "garçons", "m"),
    ("teacher", "teachers", "professeur", "professeurs", "m"),
    ("book", "books", "livre", "livres", "m"),
    ("garden", "gardens", "jardin", "jardins", "m"),
    ("boat", "boats", "bateau", "bateaux", "m"),
    ("house", "houses", "maison", "maisons", "f"),
    ("car", "cars", "voiture", "voitures", "f"),
    ("girl", "girls", "fille", "filles", "f"),
    ("mouse", "mice", "souris", "souris", "f"),
    ("table", "tables", "table", "tables", "f"),
    ("flower", "flowers", "fleur", "fleurs", "f"),
    ("apple", "apples", "pomme", "pommes", "f"),
    ("woman", "women", "femme", "femmes", "f"),
]
# adjective: english, french (m sg, f sg, m pl, f pl)
ADJECTIVES = [
    ("black", ("noir", "noire", "noirs", "noires")),
    ("small", ("petit", "petite", "petits", "petites")),
    ("big", ("grand", "grande", "grands", "grandes")),
    ("green", ("vert", "verte", "verts", "vertes")),
    ("old", ("vieux", "vieille", "vieux", "vieilles")),
    ("white", ("blanc", "blanche", "blancs", "blanches")),
    ("happy", ("heureux", "heureuse", "heureux", "heureuses")),
    ("red", ("rouge", "rouge", "rouges", "rouges")),
]
# determiner: english singular, english plural, french (m sg, f sg, plural); None = not available
DETERMINERS = [
    ("the", "the", ("le", "la", "les")),
    ("a", None, ("un", "une", None)),
    (None, "some", (None, None, "des")),
    ("my", "my", ("mon", "ma", "mes")),
    ("this", "these", ("ce", "cette", "ces")),
]
# verb: english 3rd singular, english plural, french 3rd singular, french 3rd plural
TRANSITIVE = [
    ("sees", "see", "voit", "voient"),
    ("likes", "like", "aime", "aiment"),
    ("follows", "follow", "suit", "suivent"),
    ("watches", "watch", "regarde", "regardent"),
    ("finds", "find", "trouve", "trouvent"),
    ("pushes", "push", "pousse", "poussent"),
]
INTRANSITIVE = [
    ("sleeps", "sleep", "dort", "dorment"),
    ("runs", "run", "court", "courent"),
    ("sings", "sing", "chante", "chantent"),
    ("waits", "wait", "attend", "attendent"),
]
# preposition: english, french words (the last one may contract with "le"/"les": de le -> du)
PREPOSITIONS = [
    ("with", ("avec",)),
    ("in", ("dans",)),
    ("under", ("sous",)),
    ("behind", ("derrière",)),
    ("near", ("près", "de")),
]


class _Builder:
    """Accumulates a source sentence, its translation and the alignment while the grammar runs."""

    def __init__(self):
        self.src: list[str] = []
        self.tgt: list[str] = []
        self.align: list[int] = []

    def word(self, en: str) -> int:
        self.src.append(en)
        return len(self.src) - 1

    def out(self, fr: str, src_pos: int) -> None:
        self.tgt.append(fr)
        self.align.append(src_pos)


def _noun_phrase(b: _Builder, rng: random.Random, p_adj: float, p_rel: float, allow_rel: bool,
                 prep: tuple[int, tuple[str, ...]] | None = None) -> bool:
    """Emit a noun phrase; returns True if it is plural (for verb agreement).

    ``prep`` = (source position of the preposition, its french words): emitted before the
    article, with "de le" -> "du" and "de les" -> "des" contracted.
    """
    en_sg, en_pl, fr_sg, fr_pl, gender = rng.choice(NOUNS)
    plural = rng.random() < 0.4
    dets = [d for d in DETERMINERS if (d[1] if plural else d[0]) is not None]
    det_en_sg, det_en_pl, det_fr = rng.choice(dets)
    det_fr_word = det_fr[2] if plural else det_fr[0 if gender == "m" else 1]
    n_adj = 0
    if rng.random() < p_adj:
        n_adj = 1 + (rng.random() < 0.35)
    adjs = rng.sample(ADJECTIVES, n_adj)
    # english: det adj* noun
    det_pos = b.word(det_en_pl if plural else det_en_sg)
    adj_pos = [b.word(a[0]) for a in adjs]
    noun_pos = b.word(en_pl if plural else en_sg)
    # french: [prep] det noun adj* (adjectives after the noun, in mirror order)
    if prep is not None:
        prep_pos, fr_prep = prep
        *head, last = fr_prep
        for w in head:
            b.out(w, prep_pos)
        if last == "de" and det_fr_word in ("le", "les", "des"):
            # de le -> du; de les -> des; de des -> des
            b.out("du" if det_fr_word == "le" else "des", det_pos)
            det_fr_word = None
        else:
            b.out(last, prep_pos)
    if det_fr_word is not None:
        b.out(det_fr_word, det_pos)
    b.out(fr_pl if plural else fr_sg, noun_pos)
    form = (2 if plural else 0) + (0 if gender == "m" else 1)
    for a, pos in reversed(list(zip(adjs, adj_pos))):
        b.out(a[1][form], pos)
    if allow_rel and rng.random() < p_rel:
        # relative clause: "that <verb> <np>" -> "qui <verb> <np>", the verb agrees with this noun
        that = b.word("that")
        b.out("qui", that)
        _verb_phrase(b, rng, plural, p_adj, p_rel=0.0, allow_rel=False, p_pp=0.0)
    return plural


def _verb_phrase(b: _Builder, rng: random.Random, plural: bool, p_adj: float, p_rel: float, allow_rel: bool,
                 p_pp: float) -> None:
    transitive = rng.random() < 0.7
    en_sg, en_pl, fr_sg, fr_pl = rng.choice(TRANSITIVE if transitive else INTRANSITIVE)
    pos = b.word(en_pl if plural else en_sg)
    b.out(fr_pl if plural else fr_sg, pos)
    if transitive:
        _noun_phrase(b, rng, p_adj, p_rel, allow_rel)
    if rng.random() < p_pp:
        en, fr = rng.choice(PREPOSITIONS)
        prep_pos = b.word(en)
        _noun_phrase(b, rng, p_adj, 0.0, False, prep=(prep_pos, fr))


def _clause(b: _Builder, rng: random.Random, p_adj: float, p_rel: float, p_pp: float) -> None:
    plural = _noun_phrase(b, rng, p_adj, p_rel, allow_rel=True)
    _verb_phrase(b, rng, plural, p_adj, p_rel, allow_rel=True, p_pp=p_pp)


@dataclass(frozen=True)
class Pair:
    """One sentence pair.

    Attributes:
        src: English words.
        tgt: French-like words.
        align: for each target word j, the position in ``src`` of the word it translates.
    """

    src: tuple[str, ...]
    tgt: tuple[str, ...]
    align: tuple[int, ...]

    def __str__(self) -> str:
        return f"{' '.join(self.src)}  ->  {' '.join(self.tgt)}"


def generate_pair(rng: random.Random, n_clauses: int | None = None) -> Pair:
    """One random sentence pair from the grammar (1 to 3 clauses joined by "and")."""
    if n_clauses is None:
        n_clauses = rng.choices((1, 2, 3), weights=(0.45, 0.35, 0.2))[0]
    b = _Builder()
    for k in range(n_clauses):
        if k:
            b.out("et", b.word("and"))
        _clause(b, rng, p_adj=0.45, p_rel=0.25, p_pp=0.3)
    return Pair(tuple(b.src), tuple(b.tgt), tuple(b.align))


# --------------------------------------------------------------------------- vocabulary and batches


class Vocab:
    """Word <-> id table with ``<pad>`` = 0, ``<bos>`` = 1, ``<eos>`` = 2, ``<unk>`` = 3.

    Args:
        words: the words to index (specials are added first; order is kept, duplicates dropped).
    """

    pad_id, bos_id, eos_id, unk_id = PAD, BOS, EOS, UNK

    def __init__(self, words: Iterable[str]):
        self.itos: list[str] = list(SPECIALS)
        for w in words:
            if w not in self.itos:
                self.itos.append(w)
        self.stoi: dict[str, int] = {w: i for i, w in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"Vocab({len(self)} words: {' '.join(self.itos[4:12])} ...)"

    def encode(self, words: Sequence[str], *, bos: bool = False, eos: bool = False) -> list[int]:
        """Word list -> id list, optionally wrapped in ``<bos>`` ... ``<eos>``."""
        ids = [self.stoi.get(w, UNK) for w in words]
        return ([BOS] if bos else []) + ids + ([EOS] if eos else [])

    def decode(self, ids: Iterable[int], *, strip: bool = True) -> list[str]:
        """Id list -> word list. With ``strip``, stop at ``<eos>`` and drop ``<pad>``/``<bos>``."""
        words = []
        for i in ids:
            i = int(i)
            if strip and i == EOS:
                break
            if strip and i in (PAD, BOS):
                continue
            words.append(self.itos[i] if 0 <= i < len(self.itos) else "<unk>")
        return words


@dataclass
class Batch:
    """Padded tensors for a list of pairs.

    Attributes:
        src: (B, S) source ids, padded with 0.
        src_mask: (B, S) bool, True on real source words.
        tgt_in: (B, T) ``<bos> y_1 .. y_n`` (decoder input, teacher forcing), padded with 0.
        tgt_out: (B, T) ``y_1 .. y_n <eos>`` (what the decoder must predict), padded with 0.
        tgt_mask: (B, T) bool, True on real target positions (including ``<eos>``).
        pairs: the pairs the batch was made from.
    """

    src: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_mask: torch.Tensor
    pairs: list

    def to(self, device) -> "Batch":
        return Batch(self.src.to(device), self.src_mask.to(device), self.tgt_in.to(device), self.tgt_out.to(device),
                     self.tgt_mask.to(device), self.pairs)


def pad(seqs: Sequence[Sequence[int]], value: int = PAD) -> torch.Tensor:
    """Right-pad integer lists into a (B, max length) long tensor."""
    width = max(len(s) for s in seqs)
    out = torch.full((len(seqs), width), value, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out


class TranslationData:
    """Train / val / test pairs with their vocabularies (built by :func:`make_translation_data`)."""

    def __init__(self, train: list[Pair], val: list[Pair], test: list[Pair], seed: int = 0):
        self.train, self.val, self.test = train, val, test
        self.seed = seed
        # the vocabularies cover the whole lexicon, so no split ever meets <unk>
        self.src_vocab = Vocab(_lexicon_src())
        self.tgt_vocab = Vocab(_lexicon_tgt())

    def __repr__(self) -> str:
        return (f"TranslationData(train={len(self.train)}, val={len(self.val)}, test={len(self.test)}, "
                f"src_vocab={len(self.src_vocab)}, tgt_vocab={len(self.tgt_vocab)})")

    def split(self, name: str) -> list[Pair]:
        """The pairs of ``"train"``, ``"val"`` or ``"test"``."""
        if name not in ("train", "val", "test"):
            raise ValueError(f"split must be 'train', 'val' or 'test', not {name!r}")
        return getattr(self, name)

    def batch(self, pairs: Sequence[Pair], device=None) -> Batch:
        """Encode and pad ``pairs`` into a :class:`Batch` (on ``device`` if given)."""
        src = [self.src_vocab.encode(p.src) for p in pairs]
        tgt = [self.tgt_vocab.encode(p.tgt) for p in pairs]
        src_t = pad(src)
        tgt_in = pad([[BOS] + t for t in tgt])
        tgt_out = pad([t + [EOS] for t in tgt])
        b = Batch(src_t, src_t != PAD, tgt_in, tgt_out, tgt_out != PAD, list(pairs))
        return b.to(device) if device is not None else b

    def sampler(self, split: str, batch_size: int, *, seed: int = 0, device=None, by_length: bool = True):
        """A ``make_batch(step) -> Batch`` function for :func:`course.train.fit`.

        With ``by_length`` each batch holds sentences of similar length (a random window of the
        length-sorted split), so little compute is spent on padding; batches are seeded.
        """
        pairs = self.split(split)
        order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i].src), i))
        rng = random.Random(seed)
        n = len(pairs)
        size = min(batch_size, n)

        def make_batch(step: int) -> Batch:
            if by_length:
                start = rng.randrange(0, n - size + 1)
                idx = order[start:start + size]
            else:
                idx = rng.sample(range(n), size)
            return self.batch([pairs[i] for i in idx], device=device)

        return make_batch


def _lexicon_src() -> list[str]:
    words = []
    for d in DETERMINERS:
        words += [w for w in d[:2] if w]
    words += [a[0] for a in ADJECTIVES]
    for n in NOUNS:
        words += [n[0], n[1]]
    for v in TRANSITIVE + INTRANSITIVE:
        words += [v[0], v[1]]
    words += [p[0] for p in PREPOSITIONS] + ["that", "and"]
    return words


def _lexicon_tgt() -> list[str]:
    words = []
    for d in DETERMINERS:
        words += [w for w in d[2] if w]
    for n in NOUNS:
        words += [n[2], n[3]]
    for a in ADJECTIVES:
        words += list(a[1])
    for v in TRANSITIVE + INTRANSITIVE:
        words += [v[2], v[3]]
    for p in PREPOSITIONS:
        words += list(p[1])
    words += ["du", "qui", "et"]
    return words


def make_translation_data(n_train: int = 20_000, n_val: int = 500, n_test: int = 1_000, *, min_len: int = 3,
                          max_len: int = 25, seed: int = 0) -> TranslationData:
    """Generate the task: splits whose source lengths are spread evenly over [min_len, max_len].

    A pool of random grammar sentences is grouped by length; every pair is then drawn by picking
    a length uniformly and a sentence of that length, so long sentences (the interesting ones)
    are as common as short ones. Validation and test sentences are distinct from each other and
    never appear in the training split (short lengths have few possible sentences, so the training
    split repeats some of them).

    Args:
        n_train, n_val, n_test: split sizes.
        min_len, max_len: source sentence lengths, in words (the grammar goes from 3 to about 40).
        seed: everything is drawn from ``random.Random(seed)``.

    Returns:
        A :class:`TranslationData`.
    """
    if min_len < 3 or max_len < min_len:
        raise ValueError("need 3 <= min_len <= max_len")
    rng = random.Random(seed)
    lengths = list(range(min_len, max_len + 1))
    pool: dict[int, list[Pair]] = {n: [] for n in lengths}
    # sentences wanted per length: enough distinct ones for val and test, and a pool the
    # training split draws from (with repeats: the grammar, not the pool size, is what's learnt)
    need = 2 * (n_val + n_test) // len(lengths) + n_train // (2 * len(lengths)) + 20
    for _ in range(400):
        for _ in range(1000):
            p = generate_pair(rng)
            if min_len <= len(p.src) <= max_len and len(pool[len(p.src)]) < need:
                pool[len(p.src)].append(p)
        if all(len(v) >= need for v in pool.values()):
            break
    for n in lengths:                                                   # dedupe each length bucket
        seen, unique = set(), []
        for p in pool[n]:
            if p.src not in seen:
                seen.add(p.src)
                unique.append(p)
        pool[n] = unique

    held: set[tuple[str, ...]] = set()

    def draw_unique(k: int) -> list[Pair]:
        out = []
        for i in range(k):
            n = lengths[i % len(lengths)]                               # every length equally often
            candidates = [p for p in rng.sample(pool[n], min(len(pool[n]), 50)) if p.src not in held]
            if not candidates:                                           # this length is used up
                candidates = [p for n2 in lengths for p in pool[n2] if p.src not in held][:1]
            p = candidates[0]
            held.add(p.src)
            out.append(p)
        rng.shuffle(out)
        return out

    test = draw_unique(n_test)
    val = draw_unique(n_val)
    train_pool = {n: [p for p in pool[n] if p.src not in held] for n in lengths}
    train = []
    for _ in range(n_train):
        n = rng.choice(lengths)
        train.append(rng.choice(train_pool[n]))
    return TranslationData(train, val, test, seed=seed)

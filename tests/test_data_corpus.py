"""Unit tests for the character corpus (course/data/corpus.py).

The standard library's sources differ between Python versions, so no checksum is hard-coded:
the tests check determinism, shapes, the shift by one and the round trip.
"""

from __future__ import annotations

import pytest
import torch

from course.data import corpus as C


@pytest.fixture(scope="module")
def stdlib():
    return C.load_corpus(max_chars=200_000)


def test_stdlib_corpus_is_deterministic_and_sorted(stdlib):
    again = C.load_corpus("stdlib", max_chars=200_000)
    assert again.sha256 == stdlib.sha256 and len(stdlib.sha256) == 64
    assert stdlib.size == 200_000
    assert stdlib.vocab == sorted(set(stdlib.text))
    assert list(C.STDLIB_MODULES) == sorted(C.STDLIB_MODULES)
    assert len(C.stdlib_sources()) >= 40                      # this interpreter has its sources
    assert stdlib.text.startswith("# ==== argparse ====\n")


def test_encode_decode_round_trip(stdlib):
    s = stdlib.text[1000:1500]
    ids = stdlib.encode(s)
    assert ids.dtype == torch.long and ids.shape == (500,)
    assert stdlib.decode(ids) == s and stdlib.decode(ids.tolist()) == s
    assert int(ids.max()) < stdlib.vocab_size
    with pytest.raises(KeyError):
        stdlib.encode("\u2603")


def test_splits_cover_the_text(stdlib):
    assert len(stdlib.train) + len(stdlib.val) == stdlib.size
    assert torch.equal(torch.cat([stdlib.train, stdlib.val]), stdlib.encode(stdlib.text))
    assert abs(len(stdlib.val) / stdlib.size - 0.1) < 1e-3


def test_batch_is_seeded_and_shifted(stdlib):
    x, y = stdlib.batch("train", 4, 16, generator=torch.Generator().manual_seed(1))
    x2, y2 = stdlib.batch("train", 4, 16, generator=torch.Generator().manual_seed(1))
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.long
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert torch.equal(x[:, 1:], y[:, :-1])
    for row_x, row_y in zip(x, y):                             # windows of the text itself
        text = stdlib.decode(torch.cat([row_x, row_y[-1:]]))
        assert text in stdlib.text
    xv, _ = stdlib.batch("val", 2, 8, generator=torch.Generator().manual_seed(0))
    assert xv.shape == (2, 8)
    with pytest.raises(ValueError):
        stdlib.batch("test", 2, 8)


def test_file_corpus_and_unigram(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text("abracadabra " * 50, encoding="utf-8")
    c = C.load_corpus(p)
    assert c.vocab == [" ", "a", "b", "c", "d", "r"] and c.source == str(p)
    assert C.load_corpus(str(p), max_chars=11).text == "abracadabra"
    # unigram loss: the entropy of the character frequencies, near log(6) at most
    assert 0.5 < c.unigram_loss() < torch.log(torch.tensor(6.0)).item()

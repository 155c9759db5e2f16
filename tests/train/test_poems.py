"""The shipped Tang-poem corpus (data/SOURCE.md) and the n-gram baselines the poem models must beat."""
from __future__ import annotations

import collections
import hashlib
import lzma
import math
import re
from pathlib import Path

import pytest
import torch

from zoo.train.data import DataError, bigram_fill, ngram_baselines, read_documents

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "data" / "tang_train.txt.xz"
HELDOUT = ROOT / "data" / "tang_heldout.txt"
LINE = re.compile(r"[\u4e00-\u9fff][\u4e00-\u9fff，。？！；：、]*[。？！；]")


@pytest.fixture(scope="module")
def corpus():
    return read_documents(TRAIN), read_documents(HELDOUT)


def body(doc: str) -> str:
    return doc.split("\n", 1)[1]


def test_xz_file_reads_as_its_decompressed_text(corpus, tmp_path):
    train, _ = corpus
    text = lzma.decompress(TRAIN.read_bytes()).decode("utf-8")  # the standard library as reference
    assert train == [d.strip() for d in text.strip().split("\n\n")]
    bad = tmp_path / "broken.txt.xz"
    bad.write_bytes(TRAIN.read_bytes()[:5000])  # truncated
    with pytest.raises(DataError, match="truncated|valid"):
        read_documents(bad)


def test_sizes_and_format(corpus):
    train, held = corpus
    assert (len(train), len(held)) == (47_905, 505)  # data/SOURCE.md
    assert sum(len(body(d).replace("\n", "")) for d in train) == 2_653_570
    for doc in train[::50] + held:
        head, *lines = doc.split("\n")
        assert re.fullmatch(r"《[^《》]+》[\u4e00-\u9fff]+", head), head
        assert lines and all(LINE.fullmatch(ln) for ln in lines), doc


def test_split_is_by_poem_hash_and_disjoint(corpus):
    train, held = corpus
    held_out = lambda d: int.from_bytes(  # noqa: E731  the rule in data/SOURCE.md
        hashlib.sha1(body(d).encode("utf-8")).digest()[:8], "big") % 100 == 0
    assert all(held_out(d) for d in held)
    assert not any(held_out(d) for d in train)
    assert not {body(d) for d in train} & {body(d) for d in held}
    assert len({body(d) for d in train}) == len(train)  # identical bodies kept once


def test_text_is_simplified(corpus):
    opencc = pytest.importorskip("opencc")
    t2s = opencc.OpenCC("t2s").convert
    train, held = corpus
    sample = "".join(held + train[::100])
    changed = sum(a != b for a, b in zip(sample, t2s(sample)))
    assert changed <= len(sample) // 10_000, changed  # OpenCC's phrase rules move a rare 於 twice
    everything = "".join(train + held)
    assert not set("無為來時風雲長門東見國馬鳥飛歸") & set(everything)  # common traditional forms
    assert "床前看月光，疑是地上霜。" in "\n".join(train + held)  # 静夜思 as the Complete Tang Poems has it


# ---------------------------------------------------------------------- baselines, by hand
TEXT = [5, 6, 7, 5, 6, 8, 5, 7, 7, 6, 5, 6]  # ids; vocabulary of 10
EVAL = [5, 6, 7, 9, 5, 8]


def naive_probs(V=10):
    uni_c = collections.Counter(TEXT)
    pair_c = collections.Counter(zip(TEXT, TEXT[1:]))
    N = len(TEXT)

    def uni(b):
        return (uni_c[b] + 1) / (N + V)

    def bi(a, b):
        after = {y: n for (x, y), n in pair_c.items() if x == a}
        ca = sum(after.values())
        if ca == 0:
            return uni(b)
        lam = ca / (ca + len(after))  # Witten-Bell
        return lam * after.get(b, 0) / ca + (1 - lam) * uni(b)
    return uni, bi


def test_ngram_baselines_match_a_hand_computation():
    uni, bi = naive_probs()
    got = ngram_baselines(torch.tensor(TEXT), torch.tensor(EVAL), 10)
    pairs = list(zip(EVAL, EVAL[1:]))
    assert got["tokens"] == 5
    assert got["unigram"] == pytest.approx(-sum(math.log(uni(b)) for _, b in pairs) / 5, rel=1e-9)
    assert got["bigram"] == pytest.approx(-sum(math.log(bi(a, b)) for a, b in pairs) / 5, rel=1e-9)
    # pinned: after 5 the training text has 6 three times and 7 once, so P(6 | 5) = 0.6 * 3/4 + ...
    assert bi(5, 6) == pytest.approx(4 / 6 * 3 / 4 + 2 / 6 * 5 / 22)


def test_bigram_fill_is_the_argmax_of_both_neighbours():
    uni, bi = naive_probs()
    lefts, rights = [5, 6, 7, 9], [5, 7, 6, 6]
    cands = list(range(5, 10))
    got = bigram_fill(torch.tensor(TEXT), 10, torch.tensor(lefts), torch.tensor(rights),
                      torch.tensor(cands)).tolist()
    want = [max(cands, key=lambda c: bi(a, c) * bi(c, b)) for a, b in zip(lefts, rights)]
    assert got == want

"""The tasks of the literature reproductions (issue 33 goal 6): ``grokking`` scores the training half
of the modular-addition table beside the held-out half, and ``lm_extrapolation`` scores the same
held-out tokens at 1x, 2x and 4x the training length.  Checked on hand-built models whose answers
are known: a lookup table that memorised the training pairs, a model that ignores positions, and
one that breaks past the training length."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo.errors import ZooError
from zoo.experiment.tasks import get_task, list_tasks
from zoo.train.config import TrainConfig


# ---------------------------------------------------------------------- grokking
class Memoriser(nn.Module):
    """Answers ``(a + b) mod p`` at the ``=`` for the pairs in ``known``, ``(a + b + 1) mod p`` for the
    rest: a lookup table of the training pairs, the state before grokking."""

    def __init__(self, task, known: set):
        super().__init__()
        self.task, self.known = task, known
        self.w = nn.Parameter(torch.zeros(1))
        self.id2sym = {int(t): s for s, t in enumerate(task.sym2id.tolist())}

    def forward(self, ids, attention_mask=None):
        p, V = self.task.config.p, self.task.tok.vocab_size
        out = torch.zeros(*ids.shape, V)
        for i, row in enumerate(ids.tolist()):
            if len(row) < 4:
                continue
            a, b = self.id2sym[row[0]], self.id2sym[row[2]]
            ans = (a + b) % p if (a, b) in self.known else (a + b + 1) % p
            out[i, 3, int(self.task.sym2id[ans])] = 1.0
        return out


def test_grokking_scores_both_halves_of_the_table_and_only_they():
    task = get_task("grokking", {"p": 13, "heldout": 0.7})
    tr, ev = task.train_examples(), task.eval_examples()
    pairs = lambda ex: {(int(r[0]), int(r[2])) for r in ex["ids"]}  # noqa: E731
    train, held = pairs(tr), pairs(ev)
    assert not (train & held) and len(train | held) == 13 * 13  # the whole table, split in two
    assert 0.15 < len(train) / 169 < 0.45  # about 30% trains
    # every training batch comes from the training half
    obj = task.prepare_objective(TrainConfig(batch_size=64), zoo.spec("gpt_tiny", max_len=8), fit_vocab=True)[0]
    sym = {int(t): s for s, t in enumerate(task.sym2id.tolist())}  # token id -> residue
    for s in range(20):
        b = obj.train_batch(torch.Generator().manual_seed(s), 64)
        assert {(sym[r[0]], sym[r[2]]) for r in b["ids"].tolist()} <= train
    # a lookup table of the training pairs: perfect on them, wrong on every held-out pair
    m = task.evaluate(Memoriser(task, train))
    assert m["train_acc"] == 1.0 and m["acc"] == 0.0
    # knowing the algorithm: right on both
    m = task.evaluate(Memoriser(task, train | held))
    assert m["train_acc"] == 1.0 and m["acc"] == 1.0
    # knowing a third of the training pairs: train_acc is that share, exactly
    third = set(sorted(train)[: len(train) // 3])
    assert task.evaluate(Memoriser(task, third))["train_acc"] == pytest.approx(len(third) / len(train))


def test_grokking_is_listed_with_its_metrics():
    info = {t["name"]: t for t in list_tasks()}
    assert {"acc", "train_acc", "gen_exact"} <= set(info["grokking"]["metrics"])
    assert "grokking" in info and "lm_extrapolation" in info


# ---------------------------------------------------------------------- lm_extrapolation
@pytest.fixture()
def corpus(tmp_path):
    poems = ["床前明月光，疑是地上霜。举头望明月，低头思故乡。", "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
             "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。"]
    (tmp_path / "train.txt").write_text("\n\n".join(poems * 20), encoding="utf-8")
    (tmp_path / "held.txt").write_text("\n\n".join(poems[::-1] * 30), encoding="utf-8")
    return {"path": str(tmp_path / "train.txt"), "heldout_path": str(tmp_path / "held.txt"),
            "eval_tokens": 2000}


def prepared(params, block=16, max_len=64, **spec):
    task = get_task("lm_extrapolation", params)
    task.prepare_objective(TrainConfig(batch_size=4, block_size=block),
                           zoo.spec("gpt_tiny", max_len=max_len, **spec), fit_vocab=True)
    return task


class Bigram(nn.Module):
    """Logits from the current token only (log bigram frequencies of ``stream``, add-one): no
    position, so every window length scores alike, and better than uniform."""

    def __init__(self, V, stream):
        super().__init__()
        counts = torch.ones(V, V).index_put_((stream[:-1], stream[1:]), torch.ones(stream.numel() - 1),
                                             accumulate=True)
        self.e = nn.Embedding(V, V)
        with torch.no_grad():
            self.e.weight.copy_((counts / counts.sum(1, keepdim=True)).log())

    def forward(self, ids, attention_mask=None):
        return self.e(ids)


class BreaksPast(Bigram):
    """A bigram model that turns to noise at positions >= ``limit``: sinusoidal's failure, by hand."""

    def __init__(self, V, stream, limit):
        super().__init__(V, stream)
        self.limit = limit

    def forward(self, ids, attention_mask=None):
        out = super().forward(ids).clone()
        out[:, self.limit:] = 0.0  # uniform beyond the trained positions
        return out


@pytest.mark.parametrize("tokenizer", ["byte", "char"])
def test_every_length_scores_the_same_tokens(corpus, tokenizer):
    task = prepared({**corpus, "tokenizer": tokenizer})
    V = task.tok.vocab_size
    model = Bigram(V, task.eval_ids)
    m = task.losses(model, 16)
    assert m["loss_1x"] == pytest.approx(m["loss_2x"], abs=1e-5) == pytest.approx(m["loss_4x"], abs=1e-5)
    # the naive reference: every scored position 1..M of the held-out stream, one by one
    ids = task.eval_ids
    M = min(2000, ids.numel() - 1) // 64 * 64  # not a multiple of 16 x 4 = 64: the cap is cut
    with torch.no_grad():
        ref = sum(float(F.cross_entropy(model(ids[t:t + 1][None])[0], ids[t + 1:t + 2])) for t in range(M)) / M
    assert m["loss_1x"] == pytest.approx(ref, abs=1e-4)
    assert m["ppl_4x"] == pytest.approx(math.exp(m["loss_4x"]))


def test_a_model_that_fails_past_the_training_length_is_seen(corpus):
    task = prepared(corpus, block=16)
    V = task.tok.vocab_size
    m = task.losses(BreaksPast(V, task.eval_ids, 16), 16)
    assert m["loss_1x"] == pytest.approx(task.losses(Bigram(V, task.eval_ids), 16)["loss_1x"], abs=1e-5)
    # 2x: half the positions are uniform; 4x: three quarters
    assert m["loss_1x"] < m["loss_2x"] < m["loss_4x"]
    assert m["loss_4x"] > 0.7 * math.log(V) > m["loss_1x"]


def test_max_len_must_hold_four_times_the_training_length(corpus):
    with pytest.raises(ZooError) as e:
        prepared(corpus, block=32, max_len=64)
    assert e.value.where == "max_len" and "128" in str(e.value)
    with pytest.raises((ValueError, ZooError)):
        get_task("lm_extrapolation", {**corpus, "tokenizer": "word"})

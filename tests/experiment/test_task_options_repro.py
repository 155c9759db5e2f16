"""Training options of the reproduction tasks (issue 33 goal 6): ``grokking``'s ``full_batch`` (the
papers' every-training-pair-each-step setting) and ``induction``'s ``loss_on`` (the language-model
loss of ``scripts/train_induction.py``)."""
from collections import Counter

import pytest
import torch

import zoo
from zoo.errors import ZooError
from zoo.experiment.tasks import get_task
from zoo.train.config import TrainConfig


def _objective(task, batch_size=64):
    return task.prepare_objective(TrainConfig(batch_size=batch_size), zoo.spec("gpt_tiny", max_len=64),
                                  fit_vocab=True)[0]


def _pairs(task, ids):
    sym = {int(t): s for s, t in enumerate(task.sym2id.tolist())}  # token id -> residue
    return Counter((sym[r[0]], sym[r[2]]) for r in ids.tolist())


def test_grokking_full_batch_is_every_training_pair_once_per_step():
    task = get_task("grokking", {"p": 13, "heldout": 0.7, "full_batch": True})
    train = _pairs(task, task.to_batch(task.train_examples())["ids"])
    assert max(train.values()) == 1 and 20 < len(train) < 80  # about 30% of 169, each once
    obj = _objective(task)
    for s, size in ((0, len(train)), (1, len(train)), (2, 4 * len(train))):  # whatever the seed
        b = obj.train_batch(torch.Generator().manual_seed(s), size)
        assert _pairs(task, b["ids"]) == train
        assert (b["labels"] >= 0).sum() == len(train)  # one answer per pair
    # the trainer keeps the first batch_size rows: a smaller batch would silently train on a part
    with pytest.raises(ZooError) as e:
        obj.train_batch(torch.Generator().manual_seed(0), len(train) - 1)
    assert "train.batch_size" in str(e.value) and f"batch_size: {len(train)}" in str(e.value)
    # the held-out side is unchanged: 4096 drawn examples are still only held-out pairs
    held = set(_pairs(task, task.to_batch(task.eval_examples())["ids"]))
    assert held and not held & set(train)


def test_grokking_default_draws_with_replacement():
    task = get_task("grokking", {"p": 13, "heldout": 0.7})
    b = _objective(task).train_batch(torch.Generator().manual_seed(0), 64)
    got = _pairs(task, b["ids"])
    assert sum(got.values()) == 64 and max(got.values()) > 1  # 64 draws from ~50 pairs repeat


@pytest.mark.parametrize("params", [{"full_batch": "yes"}, {"full_batch": 1}])
def test_grokking_full_batch_must_be_a_bool(params):
    with pytest.raises(ZooError) as e:
        get_task("grokking", {"p": 13, **params})
    assert "full_batch" in str(e.value)


def test_induction_loss_on_all_labels_every_next_token_in_training_only():
    base = {"vocab": 64, "width": 48, "length": 12, "min_length": 4, "eval_examples": 32}
    copies, every = get_task("induction", base), get_task("induction", {**base, "loss_on": "all"})
    g = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    bc, ba = _objective(copies).train_batch(g(), 16), _objective(every).train_batch(g(), 16)
    assert torch.equal(bc["ids"], ba["ids"])  # the same rows
    sc, sa = bc["labels"] >= 0, ba["labels"] >= 0
    assert sa.all() and sc.sum() < 0.8 * sa.sum()  # every position vs the second copies only
    assert torch.equal(ba["labels"][:, :-1], ba["ids"][:, 1:])  # next-token labels
    assert torch.equal(ba["labels"][sc], bc["labels"][sc])  # agreeing where both score
    # the held-out set (metrics, eval_loss) is the same under both
    ec, ea = copies.to_batch(copies.eval_examples()), every.to_batch(every.eval_examples())
    assert torch.equal(ec["labels"], ea["labels"]) and (ec["labels"] < 0).any()


def test_induction_loss_on_refuses_other_values():
    with pytest.raises(ZooError) as e:
        get_task("induction", {"loss_on": "everything"})
    assert "loss_on" in str(e.value)

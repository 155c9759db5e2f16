"""``padded_copy`` (issue 33, goal 5): the dependence of a real token's logits on the padding, on
the other rows of the batch and on its own future, in training and in evaluation mode, and the
train/eval gap.  LayerNorm is exactly 0 everywhere; BatchNorm leaks in training mode only and has a
gap.  Models are built from a fixed seed with their norm weights, biases and BatchNorm running
statistics randomised (so no identity-like norm hides a bug), and the numbers are pinned."""
import math

import pytest
import torch

import zoo
from zoo.components import Norm
from zoo.errors import ZooError
from zoo.experiment.tasks import get_task

PARAMS = {"length": 12, "min_length": 2, "vocab": 16, "eval_examples": 64}
LEAKS = ("pad_leak_train", "pad_leak_eval", "row_leak_train", "row_leak_eval", "future_leak_train",
         "future_leak_eval", "train_eval_gap")
#: BatchNorm's measurements on the model of :func:`_model` (seed 0), pinned (torch 2.x, float32)
PINNED_BN = {"pad_leak_train": 0.3864564597606659, "padwidth_leak_train": 0.23156458139419556,
             "row_leak_train": 0.09452199935913086,
             "future_leak_train": 0.008707135915756226, "train_eval_gap": 1.116146445274353}


def _model(task, norm, seed=0):
    m = zoo.build("gpt_tiny", seed=seed, num_layers=2, d_model=64, num_heads=4, d_ff=128, max_len=32,
                  vocab_size=task.tok.vocab_size, pad_id=task.tok.pad_id, dropout=0.0,
                  norm={"kind": norm, "placement": "pre"})
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.LayerNorm) or isinstance(mod, torch.nn.BatchNorm1d):
                mod.weight.copy_(1 + 0.3 * torch.randn(mod.weight.shape, generator=g))
                mod.bias.copy_(0.2 * torch.randn(mod.bias.shape, generator=g))
            if isinstance(mod, torch.nn.BatchNorm1d):
                mod.running_mean.copy_(0.5 * torch.randn(mod.running_mean.shape, generator=g))
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=g) + 0.5)
    return m


@pytest.fixture(scope="module")
def task():
    return get_task("padded_copy", PARAMS)


def test_layernorm_is_exactly_independent_of_padding_rows_future_and_mode(task):
    m = _model(task, "layernorm")
    r = task.evaluate(m)
    assert {k: r[k] for k in LEAKS} == {k: 0.0 for k in LEAKS}  # exactly
    # 8 more pad columns: a wider batch, the same maths; only float rounding (~1e-7) moves
    assert r["padwidth_leak_train"] < 1e-6 and r["padwidth_leak_eval"] < 1e-6
    assert r["acc_trainmode"] == r["acc"]  # no mode in LayerNorm: the same predictions


def test_batchnorm_leaks_in_training_mode_only(task):
    m = _model(task, "batchnorm")
    before = {k: v.clone() for k, v in m.state_dict().items()}
    r = task.evaluate(m)
    # evaluation mode: running statistics, one token at a time -- exactly nothing leaks
    assert (r["pad_leak_eval"], r["row_leak_eval"], r["future_leak_eval"]) == (0.0, 0.0, 0.0)
    assert r["padwidth_leak_eval"] < 1e-6  # float rounding of a wider batch (8 more pad columns)
    # training mode: the batch statistics over all B*T positions, pads included
    for k in ("pad_leak_train", "padwidth_leak_train", "row_leak_train", "future_leak_train", "train_eval_gap"):
        assert r[k] > 1e-3, (k, r[k])
    assert r == pytest.approx({**r, **PINNED_BN}, rel=1e-4, abs=1e-6)
    after = m.state_dict()  # measured on a copy: the running statistics are the trained ones still
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert m.training  # and the caller's mode is restored


def test_train_eval_gap_is_plain_torch_train_vs_eval(task):
    """With dropout 0, "norms in training mode" is ``model.train()``: the gap is the largest change
    of a real token's logit between ``model.train()`` and ``model.eval()`` on the probe batch."""
    m = _model(task, "batchnorm")
    b = task.to_batch(task.eval_examples())
    ids, mask = b["ids"][:32], b["mask"][:32]
    with torch.no_grad():
        probe = __import__("copy").deepcopy(m)
        probe.eval()  # first: a training-mode forward updates the running statistics
        e = probe(ids, attention_mask=mask)
        probe.train()
        a = probe(ids, attention_mask=mask)
    gap = float((a - e).abs()[mask].max())
    assert task.evaluate(m)["train_eval_gap"] == pytest.approx(gap, rel=1e-6)
    assert any(isinstance(x, Norm) for x in m.modules())


def test_config_errors_name_the_field():
    for bad in ({"min_length": None}, {"probe_rows": 3}, {"extra_pad": 0}):
        with pytest.raises(ZooError) as info:
            get_task("padded_copy", {**PARAMS, **bad})
        assert "padded_copy" in str(info.value) or "task" in (info.value.where or "")


"""Learning curves of a task's own metrics, steps-to-threshold, best-over-training and early stopping
(issue 33.4): the trainer scores the task at every evaluation (``task_<name>`` in metrics.jsonl),
and the end record's ``steps_to_*`` / ``best_*`` are checked against a naive reading of that curve."""
from __future__ import annotations

import json

import pytest

import zoo
from zoo.errors import ZooError
from zoo.experiment.tasks import get_task
from zoo.train import train
from zoo.train.config import threshold_name
from zoo.train.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")

STEPS, EVERY = 60, 10


def _run(out, **knobs):
    task = get_task("lag", {"length": 8, "lag": 1})
    spec = zoo.spec("gpt_tiny", num_layers=1, d_model=32, num_heads=2, d_ff=64, max_len=32)
    kw = dict(steps=STEPS, eval_every=EVERY, lr=1e-2, warmup=5, batch_size=16, eval_batches=2,
              fit_vocab=True, overwrite=True, progress=False)
    kw.update(knobs)
    return task, train(spec, task, out=out, tokenizer=task.tokenizer(), **kw)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    out = tmp_path_factory.mktemp("curve")
    task, res = _run(out, thresholds=[{"metric": "acc", "value": 0.1}, {"metric": "acc", "value": 2.0},
                                      {"metric": "eval_loss", "value": 2.7}])
    return task, res, out


def test_task_metrics_are_logged_at_every_evaluation(plain):
    task, res, out = plain
    evals = [r for r in read_metrics(out) if "eval_loss" in r and r.get("event") != "end"]
    assert [r["step"] for r in evals] == list(range(EVERY, STEPS + 1, EVERY))
    for r in evals:
        assert 0.0 <= r["task_acc"] <= 1.0 and "task_exact" in r and "task_acc_2x" in r
    # the last point of the curve is the task's own score of the trained model
    assert evals[-1]["task_acc"] == pytest.approx(task.evaluate(res.model)["acc"], abs=1e-12)
    assert len({round(r["task_acc"], 6) for r in evals}) > 1  # it is a curve, not a constant


def test_thresholds_and_best_follow_the_logged_curve(plain):
    _, res, out = plain
    evals = [r for r in read_metrics(out) if "eval_loss" in r and r.get("event") != "end"]
    first_acc = next((r["step"] for r in evals if r["task_acc"] >= 0.1), None)
    first_loss = next((r["step"] for r in evals if r["eval_loss"] <= 2.7), None)
    assert first_acc is not None, "the fixture run should learn the lag task a little"
    assert res.final[threshold_name("acc", 0.1)] == first_acc == res.final["steps_to_acc_0.1"]
    assert res.final["steps_to_eval_loss_2.7"] == first_loss
    # never reached: None (JSON null), not a made-up count such as the step budget
    assert res.final["steps_to_acc_2"] is None
    end = next(r for r in read_metrics(out) if r.get("event") == "end")
    assert end["steps_to_acc_2"] is None and "steps_to_acc_2" in json.dumps(end)
    best = max(evals, key=lambda r: (r["task_acc"], -r["step"]))
    assert res.final["best_acc"] == best["task_acc"] and res.final["best_acc_step"] == best["step"]
    assert res.step == STEPS and "stopped_at" not in res.final


def test_early_stopping_at_a_threshold(plain, tmp_path):
    _, full, out = plain
    at = full.final["steps_to_acc_0.1"]
    _, res = _run(tmp_path / "stop", thresholds=[{"metric": "acc", "value": 0.1, "stop": True}])
    assert res.step == at < STEPS and not res.interrupted
    assert res.final["stopped_at"] == {"step": at, "threshold": "steps_to_acc_0.1"}
    # nothing before the stop changed: the same train losses as the run that went on
    losses = lambda h: [(r["step"], r["loss"]) for r in h if "loss" in r and r["step"] <= at]  # noqa: E731
    assert losses(res.history) == losses(full.history)
    assert zoo.load(tmp_path / "stop") is not None  # a finished run's checkpoint, at the stop


def test_no_task_metrics_when_turned_off(tmp_path):
    _, res = _run(tmp_path / "off", task_metrics=False, steps=10)
    evals = [r for r in res.history if "eval_loss" in r]
    assert evals and not any(k.startswith("task_") for r in evals for k in r)
    assert not any(k.startswith("best_") for k in res.final)


@pytest.mark.parametrize("thresholds, where", [
    ([{"metric": "accuracy", "value": 0.9}], "train.thresholds[0].metric"),
    ([{"metric": "acc"}], "train.thresholds[0]"),
    ([{"metric": "acc", "value": "high"}], "train.thresholds[0].value"),
    ([{"metric": "acc", "value": 0.9, "stop": "yes"}], "train.thresholds[0].stop"),
    ([{"metric": "acc", "value": 0.9, "when": 1}], "train.thresholds[0]"),
    ({"metric": "acc"}, "train.thresholds"),
])
def test_bad_thresholds_name_the_field(tmp_path, thresholds, where):
    with pytest.raises(ZooError) as e:
        _run(tmp_path / "bad", thresholds=thresholds, steps=1)
    assert e.value.where == where
    if where.endswith(".metric"):
        assert {"acc", "acc_2x", "exact", "eval_loss"} <= set(e.value.options)

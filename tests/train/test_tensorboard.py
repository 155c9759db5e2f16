"""TensorBoard event files (the ``track`` extra): every number of metrics.jsonl, as scalars a
researcher opens with ``tensorboard --logdir RUN``, read back with TensorBoard's own reader."""
from __future__ import annotations

import pytest

import zoo
from zoo.experiment.tasks import get_task
from zoo.train import train
from zoo.train.metrics import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")
pytest.importorskip("tensorboard", reason="the track extra (pip install tensorboard) is not installed")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def _run(out, **kw):
    task = get_task("lag", {"length": 8, "lag": 1})
    spec = zoo.spec("gpt_tiny", num_layers=1, d_model=32, num_heads=2, d_ff=64, max_len=32)
    return train(spec, task, out=out, tokenizer=task.tokenizer(), eval_every=10, log_every=5,
                 eval_batches=2, batch_size=16, fit_vocab=True, progress=False, **kw)


def _scalars(out):
    ea = EventAccumulator(str(out / "tensorboard"))
    ea.Reload()
    return {t: [(e.step, e.value) for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}


def test_event_files_hold_the_logged_curves(tmp_path):
    _run(tmp_path, steps=20, overwrite=True, tensorboard=True)
    sc = _scalars(tmp_path)
    recs = [r for r in read_metrics(tmp_path) if r.get("event") is None]
    want_loss = [(r["step"], r["loss"]) for r in recs if "loss" in r]
    want_acc = [(r["step"], r["task_acc"]) for r in recs if "task_acc" in r]
    assert [s for s, _ in sc["train/loss"]] == [s for s, _ in want_loss] == [5, 10, 15, 20]
    assert [v for _, v in sc["train/loss"]] == pytest.approx([v for _, v in want_loss], rel=1e-6)
    assert sc["task/acc"] == pytest.approx(want_acc, rel=1e-6) and len(want_acc) == 2
    assert "eval/eval_loss" in sc


def test_a_resumed_run_continues_one_curve(tmp_path):
    _run(tmp_path, steps=10, overwrite=True, tensorboard=True, save_every=10)
    _run(tmp_path, steps=20, resume=True)
    steps = [s for s, _ in _scalars(tmp_path)["train/loss"]]
    assert steps == sorted(set(steps)) == [5, 10, 15, 20]


def test_off_by_default(tmp_path):
    _run(tmp_path, steps=5, overwrite=True)
    assert not (tmp_path / "tensorboard").exists()

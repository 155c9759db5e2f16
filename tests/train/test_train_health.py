"""Issue 22, goal 4 (numeric health of training): a run never writes non-finite weights over a good
checkpoint.  A non-finite loss or weight stops the run with a ``TrainError`` naming the step, and the
files of the last good save stay exactly as they were (compared byte for byte)."""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
import torch

import zoo
from zoo.errors import TrainError
from zoo.train import TrainConfig, train

TEXT = "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 4
SPEC = dict(name="t", arch="decoder", vocab_size=64, max_len=32, d_model=32, num_layers=2,
            num_heads=2, d_ff=64, dropout=0.0)
Q = dict(batch_size=4, block_size=8, progress=False, holdout=0.2, eval_every=100)


pytestmark = pytest.mark.usefixtures("one_thread")


def _digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())
            if p.suffix in (".safetensors", ".json", ".yaml")}


@pytest.fixture
def good_run(tmp_path):
    """A finished 3-step run: ``(out folder, data file, digests of its files)``."""
    data = tmp_path / "d.txt"
    data.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "o"
    train(SPEC, data, out=out, steps=3, save_every=100, **Q)
    return out, data, _digests(out)


def test_resume_with_lr_inf_is_refused_before_any_work(good_run):
    out, _, before = good_run
    with pytest.raises(zoo.ZooError, match="finite") as info:
        train(None, None, out=out, resume=True, steps=4, lr=math.inf, progress=False)
    assert info.value.where == "train.lr"
    assert _digests(out) == before


def test_non_finite_weights_stop_the_run_and_keep_the_good_checkpoint(good_run, monkeypatch):
    """The issue's data loss: lr=inf slipping past validation (validation switched off here) makes
    every weight non-finite in one step, on the run's last step, with a finite loss -- the run used
    to finish and save it over the good model.safetensors."""
    out, _, before = good_run
    monkeypatch.setattr(TrainConfig, "validate", lambda self: self)
    with pytest.raises(TrainError, match="step 4") as info:
        train(None, None, out=out, resume=True, steps=4, lr=math.inf, progress=False)
    assert "non-finite" in str(info.value) and "step 3" in str(info.value)  # the kept checkpoint
    assert _digests(out) == before
    model = zoo.load(out)
    assert all(torch.isfinite(t).all() for t in model.state_dict().values())


def test_a_weight_turning_nan_mid_run_names_the_step_and_keeps_the_last_save(tmp_path, monkeypatch):
    """Saves at steps 2 and 4; a NaN appears in one weight at step 5: the error names step 5 and the
    weight, and out/ holds the step-4 save untouched."""
    import zoo.train.loop as loop

    data = tmp_path / "d.txt"
    data.write_text(TEXT, encoding="utf-8")
    real = loop.optimizer_step
    snapshots = {}

    def step(run):
        res = real(run)
        if run.step + 1 == 5:  # run.step is incremented after the call
            with torch.no_grad():
                next(run.net.parameters())[0, 0] = math.nan
        return res

    def cb(rec):
        if rec.get("step") == 4 and "loss" in rec:
            snapshots["after4"] = True

    monkeypatch.setattr(loop, "optimizer_step", step)
    with pytest.raises(TrainError, match="step 5") as info:
        train(SPEC, data, out=tmp_path / "o", steps=8, save_every=2, log_every=1, callback=cb, **Q)
    assert "tok_emb.weight" in str(info.value)
    state = zoo.train.read_state(tmp_path / "o")[0]
    assert state["step"] == 4
    m = zoo.load(tmp_path / "o")
    assert all(torch.isfinite(t).all() for t in m.state_dict().values())


def test_a_non_finite_loss_is_a_train_error_naming_the_step(good_run, monkeypatch):
    out, _, before = good_run
    import zoo.train.loop as loop

    real = loop.optimizer_step

    def step(run):
        loss, *rest = real(run)
        return (math.nan, *rest)

    monkeypatch.setattr(loop, "optimizer_step", step)
    with pytest.raises(TrainError, match="loss became nan at step 4"):
        train(None, None, out=out, resume=True, steps=6, progress=False)
    assert _digests(out) == before


def test_save_state_refuses_non_finite_weights(good_run):
    """The last line of defence: whatever calls it, the state writer never writes NaN weights."""
    from zoo.train.state import check_finite

    out, _, _ = good_run
    model = zoo.load(out)
    check_finite(model, step=7)  # a healthy model passes
    with torch.no_grad():
        model.state_dict()["decoder.final_norm.weight"][1] = -math.inf
    with pytest.raises(TrainError, match="step 7.*decoder.final_norm.weight"):
        check_finite(model, step=7)


# ---------------------------------------------------------------------- why a run stopped, as a field
def _diverged(out: Path) -> bool:
    """What the experiment's results table decides from a trial's log (no result.json: it stopped)."""
    from types import SimpleNamespace

    from zoo.experiment.results import Results
    from zoo.train import read_metrics

    return Results.diverged(None, SimpleNamespace(result=None, history=read_metrics(out)))


def _blow_up(tmp_path: Path, name: str, monkeypatch) -> Path:
    monkeypatch.setattr(TrainConfig, "validate", lambda self: self)  # lr 1e6 is past the validation's 10
    data = tmp_path / "d.txt"
    data.write_text(TEXT, encoding="utf-8")
    with pytest.raises(TrainError):
        train(SPEC, data, out=tmp_path / name, steps=30, save_every=100, lr=1e6, log_every=1,
              **Q)
    return tmp_path / name


def test_a_diverged_run_says_so_in_a_field_not_only_in_words(tmp_path, monkeypatch):
    """lr 1e6: the run goes non-finite; its ``stopped`` event carries ``reason: nonfinite`` and the
    message id, and the results table counts it diverged -- also when the English is reworded (a
    front end's language or an edited template never changes the verdict)."""
    from zoo import messages

    out = _blow_up(tmp_path, "a", monkeypatch)
    stopped = [r for r in zoo.train.read_metrics(out) if r.get("event") == "stopped"]
    assert len(stopped) == 1 and stopped[0]["reason"] == "nonfinite"
    assert stopped[0]["message_id"] in ("train.loss_nonfinite", "train.weight_nonfinite",
                                        "train.weight_nonfinite_kept")
    assert _diverged(out)
    for mid in ("train.loss_nonfinite", "train.weight_nonfinite", "train.weight_nonfinite_kept"):
        monkeypatch.setitem(messages.MESSAGES, mid, messages.Message("训练在第 {step} 步发散", "调低学习率"))
    out = _blow_up(tmp_path, "b", monkeypatch)
    said = [r for r in zoo.train.read_metrics(out) if r.get("event") == "stopped"][0]["error"]
    assert "non-finite" not in said and "loss became" not in said  # the words changed ...
    assert _diverged(out)  # ... the verdict did not


def test_a_run_stopped_by_a_signal_is_not_diverged(tmp_path):
    """Ctrl-C / SIGTERM (a time budget's kill): the run saves and ends early; it did not diverge."""
    import os
    import signal

    data = tmp_path / "d.txt"
    data.write_text(TEXT, encoding="utf-8")

    def stop_at_2(rec):
        if rec.get("step") == 2 and "loss" in rec:
            os.kill(os.getpid(), signal.SIGTERM)

    res = train(SPEC, data, out=tmp_path / "o", steps=6, save_every=100, log_every=1, callback=stop_at_2, **Q)
    assert res.interrupted and res.step == 2
    assert not _diverged(tmp_path / "o")

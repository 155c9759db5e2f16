"""Issue 35: ``metrics.jsonl`` is read bounded (streamed, capped, damage counted) -- a huge or damaged
log cannot exhaust memory or crash a resume, a report or the UI -- and TensorBoard's event files
stay inside the run folder under its rules (no symlink, one run's events after an overwrite)."""
from __future__ import annotations

import json
import os
import resource
import time

import pytest

import zoo
from zoo.train.metrics import METRICS, MAX_LINE_BYTES, read_metrics

TEXT = "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 4
SPEC = dict(name="t", arch="decoder", vocab_size=64, max_len=32, d_model=16, num_layers=1,
            num_heads=2, d_ff=32)


def _train(tmp_path, out, steps, **kw):
    data = tmp_path / "d.txt"
    data.write_text(TEXT, encoding="utf-8")
    return zoo.train.train(SPEC, data, out=out, steps=steps, batch_size=4, block_size=8, progress=False,
                           holdout=0.2, fit_vocab=True, log_every=1, save_every=2, **kw)


def test_damaged_lines_are_skipped_and_counted(tmp_path):
    lines = [b'{"step": 1, "loss": 2.5}', b"[]", b"\xff\xfe not utf-8", b'{"step": null, "loss": 1}',
             b'{"step": true}', b'{"step": 2, "loss": "low"}', b'{"step": -3}', b"x" * (MAX_LINE_BYTES + 10),
             b'{"step": 2, "loss": 2.0}', b"", b'{"event": 5}', b'{"step": 3, "loss": 1.5']  # last: cut by a kill
    (tmp_path / METRICS).write_bytes(b"\n".join(lines))
    recs = read_metrics(tmp_path)
    assert recs == [{"step": 1, "loss": 2.5}, {"step": 2, "loss": 2.0}]
    assert recs.damaged == 9 and not recs.truncated


def test_a_huge_sparse_log_is_read_bounded(tmp_path):
    path = tmp_path / METRICS
    with open(path, "wb") as fh:  # 3 GB of zeros (sparse: no disk), then one good record
        fh.truncate(3 * 2**30)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    recs = read_metrics(tmp_path, max_bytes=64 * 2**20)
    assert time.perf_counter() - t0 < 20
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) * 1024 < 100 * 2**20
    assert recs == [] and recs.truncated and recs.damaged >= 1


def test_record_cap_marks_the_rest_as_not_read(tmp_path):
    (tmp_path / METRICS).write_text("".join(json.dumps({"step": i, "loss": 1.0}) + "\n" for i in range(50)))
    recs = read_metrics(tmp_path, max_records=10)
    assert [r["step"] for r in recs] == list(range(10)) and recs.truncated
    assert not read_metrics(tmp_path).truncated


def test_a_fifo_or_a_symlink_is_not_read(tmp_path):
    os.mkfifo(tmp_path / METRICS)
    assert read_metrics(tmp_path) == []  # not opened: a FIFO would block
    other = tmp_path / "o"
    other.mkdir()
    (tmp_path / "secret.jsonl").write_text('{"step": 1, "loss": 9}\n')
    (other / METRICS).symlink_to(tmp_path / "secret.jsonl")
    assert read_metrics(other) == []


def test_resume_over_a_damaged_log_keeps_the_good_records(tmp_path):
    out = tmp_path / "run"
    _train(tmp_path, out, 4)
    good = [r for r in read_metrics(out) if "loss" in r]
    with open(out / METRICS, "ab") as fh:  # damage as a kill, a disk error or a hand edit leaves it
        fh.write(b'[]\n\xff\xfe\n{"step": null}\n{"step": 3, "loss"')
    res = _train(tmp_path, out, 6, resume=True)
    assert res.step == 6
    recs = read_metrics(out)
    assert recs.damaged == 0  # the resume rewrote the log from its good records
    losses = [(r["step"], r["loss"]) for r in recs if "loss" in r]
    assert losses[:4] == [(r["step"], r["loss"]) for r in good][:4] and losses[-1][0] == 6


def test_resume_refuses_a_log_larger_than_it_reads(tmp_path, monkeypatch):
    import zoo.train.metrics as m

    out = tmp_path / "run"
    _train(tmp_path, out, 4)
    monkeypatch.setattr(m, "MAX_METRICS_RECORDS", 2)
    before = (out / METRICS).read_bytes()
    with pytest.raises(zoo.ZooError, match="metrics.jsonl is larger"):
        _train(tmp_path, out, 6, resume=True)
    assert (out / METRICS).read_bytes() == before  # nothing dropped


tb = pytest.importorskip  # noqa: E305 - below: TensorBoard, an optional extra


def test_tensorboard_events_stay_in_the_run_folder(tmp_path):
    tb("tensorboard", reason="TensorBoard event files need `pip install tensorboard` (the track extra)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    _train(tmp_path, out, 4, tensorboard=True)
    events = sorted((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == [r["step"] for r in read_metrics(out) if "loss" in r and r.get("event") != "end"]
    _train(tmp_path, out, 3, tensorboard=True, overwrite=True)  # a new run: the old events go
    acc = EventAccumulator(str(out / "tensorboard"))
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == [1, 2, 3]


def test_a_symlinked_tensorboard_folder_is_refused(tmp_path):
    tb("tensorboard", reason="TensorBoard event files need `pip install tensorboard` (the track extra)")
    out = tmp_path / "run"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "tensorboard").symlink_to(elsewhere)
    with pytest.raises(zoo.ZooError, match="symlink"):
        _train(tmp_path, out, 2, tensorboard=True)
    assert list(elsewhere.iterdir()) == []

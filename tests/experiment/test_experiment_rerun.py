"""Issue 34, the experiment leftovers of "a newcomer's third hour": a second run of the same folder
takes its finished trials *and says so* (with the way to start fresh: ``--fresh`` moves the earlier
folder aside, kept); a task longer than the spec's ``max_len`` is refused by the plan, before any
trial folder is written, naming the experiment file's key."""
import os
import subprocess
import sys
import threading

import pytest
import yaml

import zoo.experiment as ze
from zoo.experiment.run import set_aside
from zoo.guard.transaction import lock

TINY = {"name": "rerun", "title": "tiny", "claim": "none",
        "base": {"preset": "gpt_tiny", "num_layers": 1, "d_model": 16, "num_heads": 2, "d_ff": 32,
                 "max_len": 16},
        "variants": [{"name": "causal", "set": {}}],
        "seeds": 3, "task": {"kind": "copy", "length": 4, "vocab": 6},
        "train": {"batch_size": 8, "lr": 0.01, "warmup": 2, "eval_every": 1000, "save_every": 100,
                  "log_every": 5, "eval_batches": 1},
        "budget": {"steps": 40}, "metrics": ["train_loss", "acc"],
        "quick": {"seeds": 2, "budget": {"steps": 8}}}


def cli(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "ZOO_DEBUG"}
    return subprocess.run([sys.executable, "-m", "zoo.cli", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=cwd)


def write(tmp_path, data, name="exp.yaml"):
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return p


def test_a_second_quick_run_says_it_took_the_earlier_trials_and_fresh_starts_over(tmp_path):
    exp = write(tmp_path, TINY)
    args = ("experiment", "run", "exp.yaml", "--quick", "--out", "res", "--executor", "inline", "--jobs", "1",
            "--threads", "1")
    first = cli(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "taken from" not in first.stdout
    stamps = {p: p.read_bytes() for p in (tmp_path / "res" / "trials").rglob("result.json")}
    assert len(stamps) == 2

    again = cli(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "2 of 2 trials were taken from the earlier run in 'res'" in again.stdout, again.stdout
    assert "--fresh" in again.stdout and "--out" in again.stdout  # how to start fresh
    assert {p: p.read_bytes() for p in stamps} == stamps  # taken, not trained again

    fresh = cli(*args, "--fresh", cwd=tmp_path)
    assert fresh.returncode == 0, fresh.stderr
    assert "the earlier results were moved to 'res.earlier-1'" in fresh.stdout, fresh.stdout
    assert "taken from" not in fresh.stdout and "(0 already finished)" in fresh.stdout
    kept = tmp_path / "res.earlier-1"
    assert {p.relative_to(tmp_path / "res"): b for p, b in stamps.items()} == \
        {p.relative_to(kept): p.read_bytes() for p in (kept / "trials").rglob("result.json")}  # kept whole
    assert not (kept / ".zoo.lock").exists()
    assert len(list((tmp_path / "res" / "trials").rglob("result.json"))) == 2  # trained anew
    assert ze.Results.from_dir(kept).done  # the earlier folder still reads as a finished run
    assert exp.exists()


def test_set_aside_is_refused_while_another_writer_holds_the_folder(tmp_path):
    out = tmp_path / "res"
    (out / "trials").mkdir(parents=True)
    (out / "trials" / "x").write_text("kept")
    held, release = threading.Event(), threading.Event()

    def writer():
        with lock(out, where="experiment.out"):
            held.set()
            release.wait(30)

    th = threading.Thread(target=writer)
    th.start()
    held.wait(30)
    try:
        with pytest.raises(ze.ExperimentError) as info:
            set_aside(out)
        assert info.value.where == "experiment.out"
    finally:
        release.set()
        th.join()
    assert (out / "trials" / "x").read_text() == "kept" and not (tmp_path / "res.earlier-1").exists()
    assert set_aside(out) == tmp_path / "res.earlier-1" and not out.exists()
    (out / "trials").mkdir(parents=True)
    assert set_aside(out) == tmp_path / "res.earlier-2"  # never over an earlier one
    assert (tmp_path / "res.earlier-1" / "trials" / "x").read_text() == "kept"


# ---------------------------------------------------------------------- refused by the plan
LONG = {**TINY, "task": {"kind": "copy", "length": 12, "vocab": 6}}  # 2 x 12 + 1 tokens > max_len 16


def test_a_task_longer_than_max_len_is_refused_by_the_plan(tmp_path):
    with pytest.raises(ze.ExperimentError) as info:
        ze.plan(ze.load(LONG))
    e = info.value
    assert e.message_id == "task.max_len" and e.where == "experiment.base.max_len (variant causal)"
    assert "max_len is 16" in e.what and f"set max_len: {e.params['need']}" in e.fix and "base spec" in e.fix
    # the variant that sets it is the one named, and its set: is the fix
    own = {**LONG, "base": dict(LONG["base"], max_len=64),
           "variants": [{"name": "causal", "set": {}}, {"name": "short", "set": {"max_len": 8}}]}
    with pytest.raises(ze.ExperimentError) as info:
        ze.plan(ze.load(own))
    e = info.value
    assert e.message_id == "task.max_len" and e.where == "experiment.variants[1] (short).set.max_len"
    assert "variant short's set:" in e.fix
    ze.plan(ze.load({**own, "variants": own["variants"][:1]}))  # long enough: planned


def test_the_cli_refuses_it_before_any_trial_folder_is_written(tmp_path):
    write(tmp_path, LONG)
    r = cli("experiment", "run", "exp.yaml", "--quick", "--out", "res", "--executor", "inline", cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "experiment.base.max_len (variant causal)" in r.stderr and "max_len is 16" in r.stderr
    assert "set max_len:" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "res").exists()


# ---------------------------------------------------------------------- the overall ETA
def test_the_overall_eta_is_unknown_until_a_pace_is_known_then_projects_it(monkeypatch):
    """Issue 34: ``zoo experiment run`` printed "ETA 0s" before any trial had logged a step."""
    import importlib

    zr = importlib.import_module("zoo.experiment.run")  # the module (zoo.experiment.run is also its function)

    trials = ze.plan(ze.load(TINY))  # 3 seeds of one variant
    done, status = {}, {}
    monkeypatch.setattr(zr, "finished", lambda t, out: done.get(t.id))
    monkeypatch.setattr(zr, "trial_status", lambda t, out: status[t.id])
    running = [trials[0].id]
    status[trials[0].id] = {"eta_s": None, "step": 0}  # started, no step logged yet
    assert zr._overall(trials, None, running, jobs=1)["eta_s"] is None
    from zoo.commands.experiment import _eta

    assert _eta(None) == "?"
    status[trials[0].id] = {"eta_s": 30.0, "step": 10}  # 10 of 40 steps: 40 s a trial
    e = zr._overall(trials, None, running, jobs=1)
    assert e["eta_s"] == pytest.approx(30 + 2 * 40)  # its own 30 s left, then two trials at its pace
    done[trials[1].id] = {"wall_time_s": 50.0}  # a finished trial of the variant sets the pace
    assert zr._overall(trials, None, running, jobs=1)["eta_s"] == pytest.approx(30 + 50)
    assert zr._overall(trials, None, running, jobs=2)["eta_s"] == pytest.approx((30 + 50) / 2)

"""``zoo experiment tune``: an Optuna study per variant over the tune: space, stored as a journal
beside the results so it resumes (issue 33.7).  Skipped, with the reason, without the tune extra."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

pytestmark = pytest.mark.usefixtures("one_thread")
optuna = pytest.importorskip("optuna", reason="the tune extra (pip install optuna) is not installed")

from zoo.experiment.tune import JOURNAL, SUMMARY, search  # noqa: E402

EXP = {"name": "searched", "base": {"preset": "gpt_tiny", "num_layers": 1, "d_model": 32, "num_heads": 2,
                                    "d_ff": 64, "max_len": 32},
       "variants": [{"name": "sin", "set": {"positions": "sinusoidal"}},
                    {"name": "rope", "set": {"positions": "rope"}}],
       "task": {"kind": "lag", "length": 8, "lag": 1, "eval_examples": 64}, "seeds": 1,
       "train": {"batch_size": 16, "warmup": 2, "eval_every": 10, "eval_batches": 1},
       "budget": {"steps": 10}, "metrics": ["acc"],
       "tune": {"train.lr": [1e-3, 1e-2, 3e-2], "select": "acc"}}


def test_search_resumes_from_its_journal_and_reports_the_best(tmp_path):
    s1 = search(EXP, trials=2, out=tmp_path)
    assert (tmp_path / JOURNAL).is_file()
    assert all(len(v["trials"]) == 2 for v in s1["variants"].values())
    s2 = search(EXP, trials=3, out=tmp_path)  # resumes: one more trial per variant, not three
    for name, v in s2["variants"].items():
        assert len(v["trials"]) == 3 and v["trials"][:2] == s1["variants"][name]["trials"]
        # the study's best is the best mean validation score over its finished trial folders
        vals = {}
        for r in tmp_path.glob(f"trials/{name}@*/seed0/result.json"):
            rec = json.loads(r.read_text())
            vals[rec["variant"].split("@")[1]] = rec["metrics"]["val_acc"]
        assert v["best_value"] == pytest.approx(max(vals.values()), abs=1e-12)
        assert vals[v["best_setting"]] == pytest.approx(v["best_value"], abs=1e-12)
    study = optuna.load_study(study_name="searched:rope", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / JOURNAL))))
    assert len(study.trials) == 3
    assert json.loads((tmp_path / SUMMARY).read_text())["split"] == "validation"
    md = (tmp_path / "results.md").read_text()
    assert "selected on validation" in md


def test_cli_and_bad_input(tmp_path):
    from zoo.cli import cli

    r = CliRunner().invoke(cli, ["experiment", "tune", "--help"])
    assert r.exit_code == 0 and "--trials" in r.output
    with pytest.raises(Exception) as e:
        search({k: v for k, v in EXP.items() if k != "tune"}, trials=1, out=tmp_path / "x")
    assert e.value.where == "experiment.tune"
    with pytest.raises(Exception) as e:
        search(EXP, trials=0, out=tmp_path / "y")
    assert "trials" in e.value.where


RANGED = {**EXP, "name": "ranged", "variants": EXP["variants"][:1],
          "tune": {"train.lr": {"low": 1e-3, "high": 3e-2, "log": True}, "select": "acc"}}


def test_a_range_is_an_optuna_distribution_planned_as_suggested(tmp_path):
    """``train.lr: {low, high, log}``: a log-float distribution; each suggestion rounded to 4
    significant digits names its trial folder, which experiment.json lists; a resume adds to them."""
    from zoo.experiment.results import Results

    s1 = search(RANGED, trials=2, out=tmp_path)
    study = optuna.load_study(study_name="ranged:sin", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(tmp_path / JOURNAL))))
    dist = study.trials[0].distributions["train.lr"]
    assert isinstance(dist, optuna.distributions.FloatDistribution) and dist.log
    assert (dist.low, dist.high) == (1e-3, 3e-2)
    lrs = []
    for t in study.trials:
        raw = t.params["train.lr"]
        lr = float(f"{raw:.4g}")
        lrs.append(lr)
        rec = json.loads((tmp_path / f"trials/sin@lr={lr:g}/seed0/result.json").read_text())
        assert 1e-3 <= lr <= 3e-2 and rec["variant"] == f"sin@lr={lr:g}"
    plans = json.loads((tmp_path / "experiment.json").read_text())["trials"]
    assert sorted(p["variant"] for p in plans) == sorted(f"sin@lr={x:g}" for x in lrs)
    assert {p["train"]["lr"] for p in plans} == set(lrs)  # the trial trains at the named lr
    s2 = search(RANGED, trials=3, out=tmp_path)
    assert len(s2["variants"]["sin"]["trials"]) == 3
    assert s2["variants"]["sin"]["trials"][:2] == s1["variants"]["sin"]["trials"]
    study = optuna.load_study(study_name="ranged:sin", storage=study._storage)
    seen = {float(f"{t.params['train.lr']:.4g}") for t in study.trials}
    plans = json.loads((tmp_path / "experiment.json").read_text())["trials"]
    assert len(study.trials) == 3 and len(plans) == len(seen)  # kept, added to; a repeat reuses its folder
    assert {p["train"]["lr"] for p in plans} == seen
    res = Results.from_dir(tmp_path)
    assert res.done and res.selection["sin"]["setting"] == s2["variants"]["sin"]["best_setting"]


@pytest.mark.parametrize("axis, field, says", [
    ({"low": 1e-2, "high": 1e-3}, "train.lr.high", "low < high"),
    ({"low": 1e-3, "high": 1e-3}, "train.lr.high", "low < high"),
    ({"low": 0.0, "high": 1e-2, "log": True}, "train.lr.low", "log range needs low > 0"),
    ({"low": -1e-3, "high": 1e-2, "log": True}, "train.lr.low", "log range needs low > 0"),
    ({"low": 1e-3, "high": float("inf")}, "train.lr.high", "finite"),
    ({"low": float("nan"), "high": 1e-2}, "train.lr.low", "finite"),
    ({"low": 1e-3}, "train.lr.high", "missing"),
    ({"low": 1e-3, "high": 1e-2, "step": 2}, "train.lr.step", "unknown range field"),
    ({"low": 1e-3, "high": 1e-2, "log": "yes"}, "train.lr.log", "true or false"),
    ({"low": -1e-3, "high": 1e-2}, "train.lr", "lr"),  # the trainer's own check of each bound
])
def test_a_bad_range_names_its_field(axis, field, says):
    from zoo.errors import ZooError
    from zoo.experiment.spec import load

    with pytest.raises(ZooError) as e:
        load({**RANGED, "tune": {"train.lr": axis}})
    assert e.value.where.startswith(f"experiment.tune.{field}"), e.value.where
    assert says in str(e.value), str(e.value)


def test_run_refuses_a_range_and_a_second_tune_is_refused(tmp_path):
    import subprocess
    import sys

    import zoo.experiment as ze
    from zoo.experiment.spec import ExperimentError

    with pytest.raises(ExperimentError) as e:
        ze.run(RANGED, out=tmp_path / "r", executor="inline", threads=1, report=False)
    assert e.value.where == "experiment.tune.train.lr" and "zoo experiment tune" in str(e.value)
    assert not (tmp_path / "r" / "experiment.json").exists()
    hold = ("import sys, time\nfrom zoo.guard.transaction import lock\n"
            "with lock(sys.argv[1], where='test'):\n    print('held', flush=True)\n    time.sleep(60)\n")
    out = tmp_path / "held"
    p = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        with pytest.raises(ExperimentError) as e:  # the journal has one writer
            search(RANGED, trials=1, out=out)
        assert str(p.pid) in str(e.value) and e.value.where == "experiment.out"
        assert not (out / JOURNAL).exists() and not (out / "experiment.json").exists()
    finally:
        p.kill()
        p.wait()

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

"""Issue 33, goal 4, at the results table: metrics that jump are rated as success rates (Wilson
interval, Fisher's exact test), diverged seeds are counted and shown, and the verdicts of one
experiment are held to Holm-adjusted p-values.  The trials' records are written as the worker
writes them (``result.json`` with the trial's key; a diverged run's ``stopped`` event in
``metrics.jsonl`` in the trainer's words), with values chosen so every number is known."""
import json
import math

import pytest

import zoo.experiment as ze
from zoo.experiment.results import Results
from zoo.experiment.run import _claim_folder, plan
from zoo.experiment.stats import holm, two_proportions, wilson
from zoo.experiment.trial import file_sha256, record_sha256

EXP = {"name": "jumps", "base": {"preset": "gpt_tiny", "num_layers": 1, "d_model": 32, "num_heads": 2,
                                 "d_ff": 64, "max_len": 16},
       "variants": [{"name": "ref", "set": {}}, {"name": "jumpy", "set": {"train.lr": 0.003}},
                    {"name": "flaky", "set": {"train.lr": 0.03}}],
       "seeds": 8, "task": {"kind": "copy", "length": 6, "vocab": 8}, "train": {"batch_size": 8},
       "budget": {"steps": 10}, "metrics": ["acc", "train_loss"], "success": {"acc": 0.9}}

#: acc per seed: ref learns in 1 of 8 seeds, jumpy in 8 of 8, flaky in 3 of 8 with 2 diverged
ACC = {"ref": [0.3, 0.31, 0.98, 0.29, 0.3, 0.32, 0.3, 0.28],
       "jumpy": [0.99, 1.0, 0.97, 0.99, 1.0, 0.98, 0.99, 1.0],
       "flaky": [0.99, 0.3, 1.0, None, 0.3, 0.97, None, 0.31]}
STOPPED = ("step 7: the weight blocks.0.attn.q.weight became non-finite (NaN); the run stopped "
           "without saving it; nothing was saved")


def _write(out, exp):
    trials = plan(exp)
    _claim_folder(exp, trials, out)
    for t in trials:
        d = t.folder(out)
        d.mkdir(parents=True, exist_ok=True)
        acc = ACC[t.variant][t.seed]
        if acc is None:  # diverged: the trainer's stopped event and the worker's error line
            (d / "metrics.jsonl").write_text(json.dumps({"event": "stopped", "step": 7, "reason": "nonfinite",
                                                         "message_id": "train.weight_nonfinite", "error": STOPPED}) + "\n")
            (d / "worker.log").write_text(f"error: {STOPPED}\n")
            continue
        # the worker's record (zoo.experiment.run.run_trial): bound to the trial, its code and the
        # checkpoint beside it (here a stand-in file: the table reads metrics, not weights)
        (d / "model.safetensors").write_bytes(f"weights of {t.id}".encode())
        rec = {"key": t.key(), "variant": t.variant, "seed": t.seed, "steps": t.steps, "params": t.params,
               "train_flops": t.train_flops, "metrics": {"acc": acc, "train_loss": 2.0 - acc + 0.01 * t.seed},
               "code": t.code, "spec_sha256": t.spec_sha256(),
               "weights_sha256": file_sha256(d / "model.safetensors")}
        rec["record_sha256"] = record_sha256(rec)
        (d / "result.json").write_text(json.dumps(rec))
    return Results.from_dir(out)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    res = _write(tmp_path_factory.mktemp("jumps"), ze.load(EXP))
    return res, {(r["variant"], r["metric"]): r for r in res.table()}


def test_success_rates_with_wilson_intervals_and_fishers_test(table):
    res, rows = table
    name = "acc ≥ 0.9 (success rate)"
    ref, jumpy, flaky = rows[("ref", name)], rows[("jumpy", name)], rows[("flaky", name)]
    assert (ref["k"], ref["n"]) == (1, 8) and (jumpy["k"], jumpy["n"]) == (8, 8)
    assert (flaky["k"], flaky["n"]) == (3, 8)  # the two diverged seeds count as failures, in n
    w = wilson(1, 8)
    assert (ref["mean"], ref["lo"], ref["hi"]) == (0.125, w["lo"], w["hi"])
    d = two_proportions(8, 8, 1, 8)
    assert (jumpy["diff"], jumpy["diff_lo"], jumpy["diff_hi"], jumpy["p"]) == (d["mean"], d["lo"], d["hi"], d["p"])
    assert jumpy["verdict"] == "better" and jumpy["p_adj"] < 0.05
    assert flaky["verdict"] == "within noise"  # 3/8 vs 1/8: Fisher p = 0.57


def test_diverged_seeds_are_counted_and_rated(table):
    res, rows = table
    assert sum(res.diverged(t) for t in res.trials) == 2
    acc = rows[("flaky", "acc")]
    assert acc["n"] == 6 and acc["nonfinite"] == 2  # the mean is over 6 seeds and says why
    assert rows[("jumpy", "acc")]["nonfinite"] == 0
    div = rows[("flaky", "diverged (rate)")]
    assert (div["k"], div["n"]) == (2, 8) and div["verdict"] == "within noise"  # 2/8 vs 0/8: p = 0.47
    assert rows[("ref", "diverged (rate)")]["verdict"] == "reference"
    md = res.markdown()
    assert "(n=6, 2 diverged)" in md and "(2/8 seeds; Wilson 95% [" in md
    assert "diverged (rate)" in md


def test_holm_controls_the_verdicts_of_one_experiment(table):
    res, rows = table
    tested = [r for r in rows.values() if r["reference"] and not math.isnan(r["p"])]
    assert len(tested) >= 6  # 2 variants x (acc, train_loss, success rate, diverged rate)
    adj = holm([r["p"] for r in tested])
    assert [r["p_adj"] for r in tested] == pytest.approx(adj)
    for r in tested:
        if r["verdict"] in ("better", "worse"):
            assert r["p_adj"] < 0.05 and r["p"] < 0.05
    # acc means, paired over 6 finite seeds: flaky vs ref -- the p before and after Holm
    fl = rows[("flaky", "acc")]
    assert fl["p"] < fl["p_adj"] or fl["p_adj"] == 1.0


def test_success_is_reporting_only_and_validated():
    from zoo.experiment.spec import ExperimentError

    plain = ze.load({k: v for k, v in EXP.items() if k != "success"})
    assert ze.load(EXP).fingerprint() == plain.fingerprint()  # same runs, another reading of them
    for bad, where in (({"nope": 0.5}, "success.nope"), ({"acc": "high"}, "success.acc"), ([0.9], "success")):
        with pytest.raises(ExperimentError) as info:
            ze.load({**EXP, "success": bad})
        assert info.value.where == f"experiment.{where}"


def test_every_shipped_quick_run_has_at_least_three_seeds():
    """Two seeds give a t interval 12.7 standard errors wide and no success rate worth the name;
    every shipped experiment's ``--quick`` version runs three or more."""
    from zoo.experiment.spec import list_shipped, load_yaml, read_text, shipped_dir

    names = list_shipped()
    assert len(names) >= 6
    for name in names:
        path = shipped_dir() / name / "experiment.yaml"
        data = load_yaml(read_text(path, where=name), where=name)
        quick = (data.get("quick") or {}).get("seeds", data.get("seeds", 3))
        n = quick if isinstance(quick, int) else len(quick)
        assert n >= 3, f"{name}: quick runs {n} seeds"


def test_verdicts_are_carried_as_ids_and_the_csv_keeps_its_columns(table, tmp_path):
    """Each row carries its verdict as an id and params (what a front end words in its language) and
    the English the reports print, made from them; the CSV keeps the committed reports' columns (the
    id and params stay in memory), so no report needs rerunning."""
    import csv

    from zoo.experiment.stats import verdict_words

    res, rows = table
    for r in res.table():
        assert r["verdict"] == verdict_words(r["verdict_id"], r["verdict_params"]), r
    assert rows[("jumpy", "acc ≥ 0.9 (success rate)")]["verdict_id"] == "better"
    assert rows[("flaky", "acc ≥ 0.9 (success rate)")]["verdict_id"] == "noise"
    assert rows[("ref", "acc")]["verdict_id"] == "reference"
    res.write_csv(tmp_path / "r.csv")
    with open(tmp_path / "r.csv", encoding="utf-8", newline="") as f:
        header = next(csv.reader(f))
    assert "verdict" in header and "verdict_id" not in header and "verdict_params" not in header
    assert header == [k for k in res.table()[0] if not k.startswith("verdict_")]

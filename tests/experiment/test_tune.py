"""Fair comparisons (issue 33.3): ``tune:`` sweeps each variant, selects its best setting on the
validation half of the held-out set and reports it on the disjoint test half; ``threshold:`` adds
steps-to-threshold and reached-rate metrics (33.4).  The selection is re-derived here from the raw
``result.json`` files, by a naive loop, and the splits are checked example by example."""
from __future__ import annotations

import json
import math

import pytest
import torch

import importlib

run_mod = importlib.import_module("zoo.experiment.run")  # the module (zoo.experiment.run is the function)
from zoo.experiment.results import Results
from zoo.experiment.selection import base_of, combos, label, select, tuned_name
from zoo.experiment.spec import ExperimentError, parse
from zoo.experiment.tasks import example_hash, get_task

pytestmark = pytest.mark.usefixtures("one_thread")

BASE = {"name": "tuned", "base": {"preset": "gpt_tiny", "num_layers": 1, "d_model": 32, "num_heads": 2,
                                  "d_ff": 64, "max_len": 32},
        "variants": [{"name": "sin", "set": {"positions": "sinusoidal"}},
                     {"name": "rope", "set": {"positions": "rope"}}],
        "task": {"kind": "lag", "length": 8, "lag": 1, "eval_examples": 128},
        "seeds": 2, "train": {"batch_size": 16, "warmup": 3, "eval_every": 10, "eval_batches": 2},
        "budget": {"steps": 30}, "metrics": ["acc", "eval_loss"]}


def test_splits_are_disjoint_halves_of_the_heldout_set():
    task = get_task("lag", {"length": 8, "lag": 1, "eval_examples": 256})
    ex = task.eval_examples()
    h = example_hash(ex["ids"])
    with task.using_split("validation"):
        val = task.in_split(ex)
    with task.using_split("test"):
        test = task.in_split(ex)
    hv, ht = set(example_hash(val["ids"]).tolist()), set(example_hash(test["ids"]).tolist())
    assert not hv & ht and hv | ht == set(h.tolist())
    assert 0.35 < len(hv) / len(h) < 0.65
    assert task.split is None and task.in_split(ex) is ex  # outside the context: all of it, as before
    with pytest.raises(Exception) as e:
        with task.using_split("train"):
            pass
    assert "validation" in str(e.value)


def test_select_picks_each_variant_at_its_own_best_setting():
    scores = {"a@lr=0.001": {0: 0.9, 1: 0.8}, "a@lr=0.01": {0: 0.5, 1: 0.6},
              "b@lr=0.001": {0: 0.2, 1: 0.3}, "b@lr=0.01": {0: 0.95, 1: math.nan, 2: 0.85}}
    sel = select(scores, "max")
    assert sel["a"]["setting"] == "lr=0.001" and sel["a"]["mean"] == pytest.approx(0.85)
    assert sel["b"]["setting"] == "lr=0.01" and sel["b"]["n"] == 2  # NaN seeds do not count
    assert select(scores, "min")["a"]["setting"] == "lr=0.01"
    assert select({"c@lr=1": {0: math.nan}}, "max")["c"]["setting"] is None  # nothing to choose
    space = (("train.lr", (0.001, 0.01)), ("train.weight_decay", (0.0, 0.1)))
    assert [label(c) for c in combos(space)] == ["lr=0.001,weight_decay=0", "lr=0.001,weight_decay=0.1",
                                                  "lr=0.01,weight_decay=0", "lr=0.01,weight_decay=0.1"]
    assert base_of(tuned_name("rope", {"train.lr": 0.01})) == "rope"


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    out = tmp_path_factory.mktemp("tuned")
    exp = {**BASE, "tune": {"train.lr": [3e-3, 3e-2], "select": "acc"},
           "threshold": [{"metric": "acc", "value": 0.12}, {"metric": "acc", "value": 5.0}]}
    res = run_mod.run(exp, out=out, executor="inline", report=True)
    return exp, res, out


def test_tuned_run_reports_each_variant_at_its_validation_best(tuned):
    exp, res, out = tuned
    plans = run_mod.plan(exp)
    assert len(plans) == 2 * 2 * 2 and {p.variant for p in plans} == {
        "sin@lr=0.003", "sin@lr=0.03", "rope@lr=0.003", "rope@lr=0.03"}
    assert all(p.metrics[-1] == "val_acc" for p in plans)
    # re-derive the choice from the raw files, by hand
    recs = [json.loads(p.read_text()) for p in out.glob("trials/*/seed*/result.json")]
    assert len(recs) == 8
    means = {}
    for r in recs:
        means.setdefault(r["variant"], []).append(r["metrics"]["val_acc"])
    for b in ("sin", "rope"):
        cands = {v: sum(x) / len(x) for v, x in means.items() if v.startswith(b + "@")}
        best = max(cands, key=lambda v: (cands[v], -list(cands).index(v)))
        assert res.selection[b]["name"] == best
        rows = [r for r in res.table() if r["variant"] == b and r["metric"] == "acc"]
        test_accs = [r["metrics"]["acc"] for r in recs if r["variant"] == best]
        assert rows[0]["mean"] == pytest.approx(sum(test_accs) / 2, abs=1e-12)
    # the table names plain variants only; the report says how they were chosen
    assert {r["variant"] for r in res.table()} == {"sin", "rope"}
    assert not any(r["metric"].startswith("val_") for r in res.table())
    md = (out / "results.md").read_text()
    assert "selected on validation" in md and "test" in md and "`sin` at its best lr=" in md


def test_tuned_test_metrics_are_scored_on_the_test_half(tuned):
    exp, res, out = tuned
    import zoo
    t = res.trials[0]
    model = zoo.load(t.folder)
    task = get_task("lag", {k: v for k, v in BASE["task"].items() if k != "kind"})
    with task.using_split("test"):
        want = task.evaluate(model)["acc"]
    with task.using_split("validation"):
        want_val = task.evaluate(model)["acc"]
    assert t.result["metrics"]["acc"] == pytest.approx(want, abs=1e-12)
    assert t.result["metrics"]["val_acc"] == pytest.approx(want_val, abs=1e-12)


def test_thresholds_become_metrics_of_every_trial(tuned):
    exp, res, out = tuned
    for t in res.all_trials:
        m = t.result["metrics"]
        curve = [r for r in t.history if "task_acc" in r and r.get("event") != "end"]
        first = next((r["step"] for r in curve if r["task_acc"] >= 0.12), None)
        assert m["steps_to_acc_0.12"] == first and m["reached_acc_0.12"] == (first is not None)
        assert m["steps_to_acc_5"] is None and m["reached_acc_5"] == 0.0   # never: no made-up count
        assert m["best_acc"] == max(r["task_acc"] for r in curve)
    rows = {(r["variant"], r["metric"]): r for r in res.table()}
    assert rows[("sin", "reached_acc_5")]["mean"] == 0.0
    assert rows[("sin", "steps_to_acc_5")]["n"] == 0  # no seed reached it: no mean, n = 0


@pytest.mark.parametrize("extra, where", [
    ({"tune": {"train.lr": [1e-3]}}, "experiment.tune.train.lr"),
    ({"tune": {"train.lr": [1e-3, 1e-3]}}, "experiment.tune.train.lr"),
    ({"tune": {"train.lr": [1e-3, 1e-2], "select": "accuracy"}}, "experiment.tune.select"),
    ({"tune": {"positions": ["rope", "alibi"]}}, "experiment.tune.positions"),
    ({"threshold": {"metric": "accuracy", "value": 0.9}}, "experiment.threshold[0].metric"),
    ({"threshold": {"metric": "acc"}}, "experiment.threshold[0]"),
])
def test_bad_tune_and_threshold_name_the_field(extra, where):
    with pytest.raises(ExperimentError) as e:
        parse({**BASE, **extra})
    assert e.value.where.startswith(where), e.value.where
    if where.endswith(("select", "metric")):
        assert "acc" in e.value.options


def test_untuned_experiments_keep_their_trials():
    """No tune, no threshold: the same trial keys and metrics as before these keys existed."""
    plans = run_mod.plan(BASE)
    assert [p.variant for p in plans] == ["sin", "sin", "rope", "rope"]
    assert all("thresholds" not in p.train and not any(m.startswith("val_") for m in p.metrics)
               for p in plans)

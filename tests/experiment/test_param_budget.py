"""``budget: {steps: N, params: P}``: every variant's width set so its parameter count is P within
the tolerance (issue 33.3), counted against a real build of the planned spec."""
from __future__ import annotations

import importlib

import pytest

import zoo
from zoo.experiment.spec import ExperimentError, parse

run = importlib.import_module("zoo.experiment.run")
pytestmark = pytest.mark.usefixtures("one_thread")

E = {"name": "pm", "base": {"preset": "gpt_tiny", "num_layers": 2, "d_model": 32, "num_heads": 2, "d_ff": 64,
                            "max_len": 32},
     "variants": [{"name": "mlp", "set": {}}, {"name": "swiglu", "set": {"ffn": "swiglu"}},
                  {"name": "four_heads", "set": {"num_heads": 4}}],
     "task": {"kind": "lag", "length": 8, "lag": 1}, "seeds": 1, "budget": {"steps": 10, "params": 3.0e4}}


def test_each_variant_is_matched_to_the_count():
    plans = run.plan(E)
    for p in plans:
        assert abs(p.params - 3.0e4) <= 0.05 * 3.0e4, (p.variant, p.params)
        assert p.spec["d_model"] % (2 * p.spec["num_heads"]) == 0  # every head an even integer width
    # without matching, the swiglu variant is larger at the same width: matching is what equalised them
    free = {p.variant: p.params for p in run.plan({**E, "budget": {"steps": 10}})}
    assert free["swiglu"] > 1.2 * free["mlp"]
    assert {p.spec["d_model"] for p in run.plan({**E, "budget": {"steps": 10}})} == {32}


def test_planned_count_is_the_trained_models_count():
    from zoo.experiment.tasks import get_task

    for p in run.plan(E):  # a real build of what the trial trains (vocabulary fitted to the task)
        vocab = get_task("lag", p.task_params).tokenizer().vocab_size
        fitted = zoo.build({**p.spec, "vocab_size": vocab}, seed=0)
        assert sum(t.numel() for t in fitted.parameters()) == p.params


@pytest.mark.parametrize("budget, where", [
    ({"steps": 10, "params": 50, "params_tolerance": 0.01}, "experiment.budget.params"),
    ({"steps": 10, "params": -5}, "experiment.budget.params"),
    ({"steps": 10, "params_tolerance": 0.1}, "experiment.budget.params_tolerance"),
    ({"params": 3e4}, "experiment.budget"),
])
def test_unmatchable_or_bad_params_budget(budget, where):
    with pytest.raises(ExperimentError) as e:
        run.plan({**E, "budget": budget})
    assert e.value.where == where
    if "tolerance" in budget and where.endswith("params"):
        assert e.value.options and "params_tolerance" in e.value.fix
    assert parse(E).budget.params == 3.0e4

"""One override rule everywhere (issue 34): ``zoo.build(spec, norm=...)``, ``zoo build --set
norm.kind=...`` and an experiment's ``set: {norm.kind: ...}`` are :func:`zoo.model.spec.apply_overrides`.

Changing a component's kind drops the old component's own parameters (LayerNorm's ``bias``) and
keeps what belongs to another component (the norm's ``placement``); a dotted key sets one parameter.
Before, the experiment form failed with ``norm.bias: unknown parameter`` and two "fix:" sentences,
``--set norm=rmsnorm`` silently reset a post-norm model to pre-norm, and ``--set norm.kind=...``
was refused.
"""
from __future__ import annotations

import pytest

import zoo
from zoo.commands import parse_sets
from zoo.experiment.run import resolve_spec
from zoo.experiment.spec import load as load_experiment
from zoo.model.spec import apply_overrides

#: a post-norm LayerNorm without bias: every parameter of the old norm differs from RMSNorm's
BASE = {"preset": "gpt_tiny", "num_layers": 1, "d_model": 32, "num_heads": 2, "d_ff": 64,
        "norm": {"kind": "layernorm", "placement": "post", "bias": False, "eps": 1e-3}}


def _base():
    base = dict(BASE)
    return zoo.spec(base.pop("preset"), **base)


def _experiment(sets: dict):
    return load_experiment({"name": "overrides", "base": BASE, "variants": [{"name": "a", "set": sets}],
                            "seeds": 1, "task": {"kind": "copy"}, "budget": {"steps": 1}})


@pytest.mark.parametrize("how", ["build_value", "build_dotted", "cli_value", "cli_dotted", "experiment"])
def test_every_way_of_changing_the_norm_kind_gives_the_same_spec(how):
    base = _base()
    if how == "build_value":
        got = zoo.spec(base, norm="rmsnorm")
    elif how == "build_dotted":
        got = zoo.spec(base, **{"norm.kind": "rmsnorm"})
    elif how == "cli_value":
        got = zoo.spec(base, **parse_sets(["norm=rmsnorm"]))
    elif how == "cli_dotted":
        got = zoo.spec(base, **parse_sets(["norm.kind=rmsnorm"]))
    else:
        exp = _experiment({"norm.kind": "rmsnorm"})
        got = resolve_spec(exp, exp.variants[0].overrides, "experiment.variants[0] (a)")
    assert got.norm.kind == "rmsnorm" and got.placement.kind == "post"  # the placement kept
    assert got.norm.params() == {"eps": 1e-6}  # RMSNorm's own default, none of LayerNorm's
    assert got.num_layers == 1 and got.d_model == 32  # the rest of the base untouched


def test_dotted_keys_set_one_parameter_and_a_same_kind_changes_nothing():
    base = _base()
    assert zoo.spec(base, **{"norm.placement": "sandwich"}).placement.kind == "sandwich"
    assert zoo.spec(base, **{"norm.kind": "layernorm"}) == base  # already layernorm: no change
    got = zoo.spec(base, **{"ffn.activation": "relu"})
    assert got.ffn.kind == base.ffn.kind and got.ffn.config.activation == "relu"
    assert got.ffn.config.bias == base.ffn.config.bias
    # a whole entry given with its own parameters: those, and the placement still kept
    got = zoo.spec(base, norm={"kind": "rmsnorm", "eps": 1e-4})
    assert got.norm.params() == {"eps": 1e-4} and got.placement.kind == "post"
    # a string entry on the way becomes {kind: ...}
    assert apply_overrides({"positions": "rope"}, {"positions.base": 500.0}) == {
        "positions": {"kind": "rope", "base": 500.0}}


def test_a_bad_override_is_one_error_with_one_fix():
    with pytest.raises(zoo.SpecError) as err:
        zoo.spec(_base(), **{"nrom.kind": "rmsnorm"})
    assert err.value.where == "nrom.kind" and "did you mean 'norm'" in str(err.value)
    with pytest.raises(zoo.SpecError, match="'num_layers' holds 1, not a mapping"):
        zoo.spec(_base(), **{"num_layers.kind": "x"})
    exp = _experiment({"norm.eps": -1.0})
    with pytest.raises(zoo.ZooError) as err:
        resolve_spec(exp, exp.variants[0].overrides, "experiment.variants[0] (a)")
    text = str(err.value)
    assert text.count("fix:") == 1, text
    assert text.startswith("experiment.variants[0] (a), norm:"), text

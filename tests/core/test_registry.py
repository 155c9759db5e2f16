"""The registry: built-ins registered through hooks, duplicates, unknown names, and a build of every
registered component."""
import dataclasses
import types

import pytest
import torch

import zoo
from zoo.components import FAMILIES, AttentionKernel
from zoo.registry import Registry

from helpers import tiny


def test_builtins_registered_through_hooks_with_owner():
    comps = {(c.family, c.name): c for c in zoo.list_components()}
    assert comps[("attention", "sdpa")].plugin == "zoo.attention_sdpa"
    assert comps[("attention", "sdpa")].version == zoo.__version__
    for fam, name in [("attention", "eager"), ("attention", "naive"), ("mask", "causal"),
                      ("mask", "prefix"), ("mask", "sliding_window"), ("mask", "bidirectional"),
                      ("position", "sinusoidal"), ("position", "learned"), ("position", "none"),
                      ("norm", "layernorm"), ("norm", "batchnorm"), ("placement", "pre"),
                      ("placement", "post"), ("ffn", "mlp")]:
        assert (fam, name) in comps
    assert all(c.family == "mask" for c in zoo.list_components("mask"))
    with pytest.raises(zoo.UnknownComponentError, match="valid options: activation, attention"):
        zoo.list_components("attentoin")


def _plugin(name, kind="attention", comp_name="dup"):
    mod = types.ModuleType(name)

    class K(AttentionKernel):
        def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
            return q, None

    @zoo.hookimpl
    def register_attention(register):
        register(comp_name, K)

    mod.register_attention = register_attention
    return mod


def test_duplicate_name_names_both_plugins():
    reg = Registry(entry_points=False)
    reg.add_plugin(_plugin("first"), name="first")
    info = reg.add_plugin(_plugin("second"), name="second")
    assert not info.ok
    assert "already registered by plugin 'first', now also by 'second'" in info.errors[0]
    assert reg.get("attention", "dup").plugin == "first"  # the first registration stands
    info = reg.add_plugin(_plugin("third", comp_name="sdpa"), name="third")
    assert "already registered by plugin 'zoo.attention_sdpa'" in info.errors[0]
    with pytest.raises(zoo.PluginError, match="duplicate"):
        reg.add_plugin(_plugin("strict", comp_name="eager"), name="strict", strict=True)


def test_unknown_name_lists_options_and_suggests():
    with pytest.raises(zoo.UnknownComponentError) as info:
        zoo.get_registry().get("position", "sinusodal", where="positions.kind")
    msg = str(info.value)
    assert msg.startswith("positions.kind: no position named 'sinusodal'")
    assert "learned" in msg and "none" in msg and "did you mean 'sinusoidal'" in msg


def test_bad_registrations_are_recorded_not_fatal():
    mod = types.ModuleType("bad")

    @zoo.hookimpl
    def register_attention(register):
        register("Bad Name", AttentionKernel)
        register("notamodule", object)
        register("fine", AttentionKernel)

    @zoo.hookimpl
    def register_norms(register):
        raise RuntimeError("boom")

    mod.register_attention, mod.register_norms = register_attention, register_norms
    reg = Registry(entry_points=False)
    info = reg.add_plugin(mod, name="bad")
    text = " | ".join(info.errors)
    assert "invalid component name 'Bad Name'" in text
    assert "must be a subclass of zoo.components.AttentionKernel" in text
    assert "register_norms raised RuntimeError: boom" in text
    assert reg.get("attention", "fine").plugin == "bad"


def test_unknown_name_names_the_plugins_that_failed_and_reads_in_chinese():
    """The fix of an unknown-component error names the plugins that failed to load, as a sentence
    of its own with its own message id, so the UI words both in Chinese (CI once saw it left half in
    English)."""
    from ui.i18n import error_text

    reg = Registry(entry_points=False)
    mod = types.ModuleType("half")

    @zoo.hookimpl
    def register_norms(register):
        raise RuntimeError("boom")

    mod.register_norms = register_norms
    reg.add_plugin(mod, name="half")
    with pytest.raises(zoo.UnknownComponentError) as info:
        reg.get("attention", "banana", where="attention.kind")
    fix = info.value.fix
    assert fix == ("install the plugin that provides it, or pick a registered name; "
                   "plugins that failed to load: half, see `zoo plugins`")
    assert info.value.fix_ids == ("registry.unknown_component", "registry.broken_plugins")
    assert error_text(info.value, "zh")[1] == ("安装提供它的插件，或改用已注册的名称；"
                                               "加载失败的插件：half，详见 `zoo plugins`")


def test_an_experiment_asking_for_a_missing_plugin_leaves_no_phantom_behind():
    """Probing for an uninstalled plugin raises, and does not record a broken plugin in the
    process's registry (which every later unknown-component message would then name)."""
    from zoo.experiment.spec import ExperimentError, load_plugins

    before = dict(zoo.get_registry().plugins)
    with pytest.raises(ExperimentError):
        load_plugins(["no_such_plugin_xyz"])
    assert zoo.get_registry().plugins == before


FIELD = {f.name: f.field for f in FAMILIES if f.field}  # family -> spec field, from the table


def _every_component():
    out = []
    for c in zoo.list_components():
        if c.family not in FIELD:  # tokenizers, experiment tasks: not parts of a model's spec
            continue
        if any(v is dataclasses.MISSING for v in c.params().values()):
            continue  # needs explicit params: covered by the conformance kit
        out.append(pytest.param(c.family, c.name, id=f"{c.family}:{c.name}"))
    return out


@pytest.mark.parametrize("family,name", _every_component())
def test_every_component_builds_runs_forward_and_backward(family, name):
    if family == "placement":
        spec = tiny(norm={"kind": "layernorm", "placement": name})
    elif family == "norm":
        spec = tiny(norm={"kind": name})
    else:
        spec = tiny(**{FIELD[family]: name})
    comp = zoo.get_registry().get(family, name)
    if family == "attention" and not comp.capabilities.supports_bias:
        spec["positions"] = "sinusoidal"
    model = zoo.build(spec, seed=0).train()
    ids = torch.randint(1, 61, (2, 6))
    logits = model(ids)
    assert logits.shape == (2, 6, 61)
    assert torch.isfinite(logits).all()
    logits.logsumexp(-1).mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads)


def test_the_family_table_is_the_one_description():
    """Each family is one row: its hookspec exists (and no hookspec lacks a row), its spec field is a
    field of ModelSpec and StackSpec, and what the registry, spec parser and checkpoint metadata
    use is derived from it."""
    import importlib

    from zoo import hookspecs, registry
    from zoo.components import FAMILY_BASES, SPEC_FAMILIES

    spec = importlib.import_module("zoo.spec")  # the module (zoo.spec is also a function)
    hooks = {n for n in dir(hookspecs) if n.startswith("register_")}
    assert hooks == {f.hook for f in FAMILIES}
    assert registry.FAMILY_HOOKS == {f.name: f.hook for f in FAMILIES}
    assert FAMILY_BASES == {f.name: f.base for f in FAMILIES}
    model_fields = {f.name for f in dataclasses.fields(spec.ModelSpec)}
    stack_fields = {f.name for f in dataclasses.fields(spec.StackSpec)}
    for fam in SPEC_FAMILIES:
        assert fam.field in model_fields and fam.field in stack_fields, fam.name
        if fam.per_stack and fam.parent is None:
            assert fam.field in spec.STACK_FIELDS
    assert dict(registry.STACK_COMPONENTS) == {"attention": "attention", "positions": "position",
                                               "norm": "norm", "placement": "placement", "ffn": "ffn"}
    # checkpoint metadata names the plugin of every component the spec uses, masks included
    d = tiny(mask=["causal", {"kind": "sliding_window", "window": 4}])
    assert set(zoo.io.checkpoint.plugins_used(zoo.spec(d))) == {
        "zoo.attention_sdpa", "zoo.masks", "zoo.pos_sinusoidal", "zoo.norm_layernorm", "zoo.placements",
        "zoo.ffn_mlp"}

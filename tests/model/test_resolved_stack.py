"""One resolved stack (issue 20, goal 2): ``spec.stack(role)`` is built once from the spec, carries
the sizes and the components together, and is the one object the layers and every component are
built from; per-stack fields and their types are declared once, on ModelSpec."""
from __future__ import annotations

import dataclasses
import importlib
import typing

import pytest
import torch

import zoo
from zoo.components import BuildContext, FeedForward
from zoo.registry import Registry, set_registry

spec_mod = importlib.import_module("zoo.spec")


def test_the_stack_is_the_build_context_and_carries_its_components():
    s = zoo.spec("gpt_tiny", num_heads=8, num_kv_heads=2)
    st = s.stack("decoder")
    assert isinstance(st, BuildContext)
    assert (st.num_heads, st.num_kv_heads, st.head_dim, st.d_model, st.max_len) == (8, 2, 16, 128, 256)
    assert st.causal and st.scale == pytest.approx(16 ** -0.5) and st.attn_scale == st.scale
    assert st.attention.kind == "sdpa" and st.positions.kind == "sinusoidal"
    assert BuildContext.from_spec(s, "decoder") == st


def test_stack_fields_are_derived_from_the_per_stack_fields_of_model_spec():
    per_stack = [f.name for f in dataclasses.fields(spec_mod.ModelSpec) if f.metadata.get("per_stack")]
    assert set(per_stack) <= set(spec_mod.STACK_FIELDS)
    stack_fields = {f.name for f in dataclasses.fields(spec_mod.StackSpec)}
    context = {f.name for f in dataclasses.fields(BuildContext)}
    # every per-stack setting reaches the stack: resolved into a size, or carried as written
    for name in per_stack:
        assert name in stack_fields or name == "attn_scale", name
    assert stack_fields == context | {"role", "cross_attention"} | set(spec_mod._AS_WRITTEN)
    # the parser's types are ModelSpec's annotations
    hints = typing.get_type_hints(spec_mod.ModelSpec)
    assert all(spec_mod._SCALARS[n] == hints[n] for n in spec_mod._SCALARS)


def test_a_section_override_reaches_the_stack_and_only_that_stack():
    raw = dict(arch="encoder_decoder", vocab_size=64, d_model=32, num_layers=1, num_heads=4,
               decoder={"qk_norm": True, "num_heads": 2, "qkv_bias": False})
    s = zoo.spec(raw)
    enc, dec = s.stack("encoder"), s.stack("decoder")
    assert (enc.qk_norm, enc.num_heads, enc.qkv_bias) == (False, 4, True)
    assert (dec.qk_norm, dec.num_heads, dec.qkv_bias, dec.head_dim) == (True, 2, False, 16)
    model = zoo.build(s)
    assert model.decoder.blocks[0].attn.h == 2 and model.encoder.blocks[0].attn.h == 4
    assert model.decoder.blocks[0].attn.q_norm is not None and model.encoder.blocks[0].attn.q_norm is None


def test_every_component_is_built_from_the_resolved_stack():
    seen = []

    class Spy(FeedForward):
        def __init__(self, config, ctx):
            super().__init__(config, ctx)
            seen.append(ctx)
            self.lin = torch.nn.Linear(ctx.d_model, ctx.d_model)

        def forward(self, x):
            return self.lin(x)

    mod = type(importlib)("spy_plugin")

    @zoo.hookimpl
    def register_ffns(register):
        register("spy", Spy)
    register_ffns.__module__ = "spy_plugin"
    mod.register_ffns = register_ffns
    reg = Registry(entry_points=False)
    assert reg.add_plugin(mod, name="spy_plugin").errors == []
    old = set_registry(reg)
    try:
        s = zoo.spec("gpt_tiny", ffn="spy", num_layers=2)
        zoo.build(s)
    finally:
        set_registry(old)
    assert len(seen) == 2 and all(ctx == s.stack("decoder") for ctx in seen)
    assert all(isinstance(ctx, spec_mod.StackSpec) for ctx in seen)


@pytest.mark.parametrize("tp", [typing.Optional[int], int | None])
def test_optional_types_are_checked_whichever_way_they_are_written(tp):
    """``int | None`` (PEP 604) was waved through unchecked (``typing.UnionType`` does not exist;
    it is ``types.UnionType``): a config field written that way took any value."""
    assert spec_mod.coerce(None, tp, "f") is None and spec_mod.coerce(3, tp, "f") == 3
    for bad in ("x", 1.5, True):
        with pytest.raises(zoo.SpecError, match="expected an integer or null"):
            spec_mod.coerce(bad, tp, "f")


def test_the_compatibility_rules_live_in_their_own_module(monkeypatch):
    """zoo.guard.compat holds the rules and the spec parser runs them; the registry only loads and looks
    up (its old rule methods forward with a DeprecationWarning)."""
    from zoo.guard import compat
    from zoo.registry import get_registry

    with pytest.raises(zoo.IncompatibleComponentsError, match="only supports a plain causal mask"):
        zoo.spec("gpt_tiny", attention="cope", mask="bidirectional")
    monkeypatch.setattr(compat, "check_compatible", lambda *a, **k: None)
    monkeypatch.setattr(spec_mod, "check_compatible", compat.check_compatible)
    zoo.spec("gpt_tiny", attention="cope", mask="bidirectional")  # the parser asks zoo.guard.compat
    monkeypatch.undo()
    with pytest.warns(DeprecationWarning, match="zoo.guard.compat.require"):
        get_registry().require(zoo.spec("gpt_tiny"), "supports_kv_cache", "generation")
    assert [f for f, _ in compat.stack_components(zoo.spec("gpt_tiny"), "decoder")] == [
        "attention", "positions", "norm", "placement", "ffn", "mask"]
    import inspect

    from zoo import registry
    assert "IncompatibleComponentsError" not in inspect.getsource(registry)  # no rule left there

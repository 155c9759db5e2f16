"""Specs: parsing, defaults, round trip, overrides, and clear errors for bad input."""
import os

import pytest
import yaml

import zoo
from zoo.model.spec import parse_spec

from helpers import tiny

PRESETS = ["gpt_tiny", "bert_tiny", "t5_tiny", "prefix_lm_tiny"]


@pytest.mark.parametrize("name", PRESETS)
def test_round_trip(name):
    spec = zoo.spec(name)
    text = spec.to_yaml()
    again = parse_spec(text)
    assert again == spec
    assert again.to_yaml() == text
    assert parse_spec(yaml.safe_load(text)) == spec


def test_shorthand_and_defaults():
    spec = zoo.spec(tiny(mask="causal"))
    assert spec.mask[0].kind == "causal"
    assert spec.attention.kind == "sdpa" and spec.positions.kind == "sinusoidal"
    st = spec.stack("decoder")
    assert (st.num_kv_heads, st.head_dim, st.d_ff) == (2, 8, 32)
    assert st.placement.kind == "pre"
    assert zoo.spec(tiny(arch="encoder")).mask[0].kind == "bidirectional"
    assert zoo.spec(tiny(d_ff=None)).stack("decoder").d_ff == 64  # 4 * d_model


def test_component_params_validated_by_their_config():
    spec = zoo.spec(tiny(mask=["causal", {"kind": "sliding_window", "window": 3}]))
    assert [m.kind for m in spec.mask] == ["causal", "sliding_window"]
    assert spec.mask[1].config.window == 3
    assert zoo.spec(tiny(norm={"kind": "layernorm", "eps": 1}))  .norm.config.eps == 1.0  # int -> float


def test_encoder_decoder_sections_override():
    spec = zoo.spec("t5_tiny")
    assert spec.stack("encoder").num_layers == 3 and spec.stack("decoder").num_layers == 2
    assert spec.stack("encoder").mask[0].kind == "bidirectional"
    assert spec.stack("decoder").mask[0].kind == "causal"
    assert spec.stack("decoder").cross_attention and not spec.stack("encoder").cross_attention
    model = zoo.build(spec)
    assert len(model.encoder.blocks) == 3 and len(model.decoder.blocks) == 2


def test_overrides_and_preset_resolution(tmp_path, monkeypatch):
    m = zoo.build("gpt_tiny.yaml", num_layers=2, attention="eager")
    assert len(m.decoder.blocks) == 2 and m.spec.attention.kind == "eager"
    # a file in the working directory wins over the preset
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gpt_tiny.yaml").write_text(yaml.safe_dump(tiny()))
    assert zoo.spec("gpt_tiny.yaml").d_model == 16
    assert zoo.spec("gpt_tiny").d_model == 128  # bare name without .yaml: no such file, so the preset
    os.remove(tmp_path / "gpt_tiny.yaml")
    assert zoo.spec("gpt_tiny.yaml").d_model == 128


BAD = [
    # (spec changes, field the message must name, words it must contain)
    ({"arch": "decodr"}, "arch", "did you mean 'decoder'"),
    ({"attention": "sdpaa"}, "attention.kind", "did you mean 'sdpa'"),
    ({"attention": {"kind": "flash9"}}, "attention.kind", "valid options"),
    ({"mask": "causel"}, "mask.kind", "did you mean 'causal'"),
    ({"positions": "rotary_xyz"}, "positions.kind", "valid options"),
    ({"norm": {"kind": "layernorm", "placement": "middle"}}, "norm.placement.kind", "valid options"),
    ({"ffn": {"kind": "mlp", "activation": "tanhh"}}, "ffn.activation", "valid options"),
    ({"ffn": {"kind": "mlp", "activaton": "gelu"}}, "ffn.activaton", "did you mean 'activation'"),
    ({"mask": {"kind": "sliding_window", "window": 0}}, "mask", "window must be >= 1"),
    ({"mask": {"kind": "sliding_window", "window": "big"}}, "mask.window", "integer"),
    ({"num_heads": 3}, "num_heads", "not divisible"),
    ({"num_kv_heads": 3, "num_heads": 4, "d_model": 16}, "num_kv_heads", "multiple"),
    ({"d_model": -4}, "d_model", "positive"),
    ({"vocab_size": "many"}, "vocab_size", "integer"),
    ({"dropout": 1.5}, "dropout", "[0, 1)"),
    ({"num_layerz": 2}, "num_layerz", "did you mean 'num_layers'"),
    ({"pad_id": 999}, "pad_id", "outside the vocabulary"),
    ({"tie_embeddings": "yes"}, "tie_embeddings", "true or false"),
    ({"head": "mlm"}, "head", "only encoder"),
    ({"encoder": {"num_layers": 1}}, "encoder", "only for encoder_decoder"),
    ({"mask": []}, "mask", "empty"),
    ({"mask": 5}, "mask", "expected a name"),
    ({"norm": {"eps": 1e-5}}, "norm", "no 'kind'"),
    ({"mask": {"kind": "causal", "window": 3}}, "mask", "takes no parameters"),
    ({"max_len": 0}, "max_len", "positive"),
]


@pytest.mark.parametrize("changes,where,words", BAD, ids=[w for _, w, _ in BAD])
def test_bad_specs_give_clear_errors(changes, where, words):
    with pytest.raises(zoo.ZooError) as info:
        zoo.build(tiny(**changes))
    msg = str(info.value)
    assert msg.startswith(where + ":") or f"{where}:" in msg, msg
    assert words in msg, msg


def test_missing_field_and_bad_yaml(tmp_path):
    bad = dict(tiny())
    del bad["d_model"]
    with pytest.raises(zoo.SpecError, match="d_model: missing required field"):
        zoo.spec(bad)
    f = tmp_path / "broken.yaml"
    f.write_text("arch: decoder\n  vocab_size: [1,\n")
    with pytest.raises(zoo.SpecError, match="invalid YAML.*line"):
        zoo.spec(str(f))
    with pytest.raises(zoo.SpecError, match="no spec file or preset.*did you mean 'gpt_tiny'"):
        zoo.spec("gpt_tiyn")
    with pytest.raises(zoo.SpecError, match="a spec must be a mapping"):
        zoo.spec("- 1\n- 2\n")


def test_encoder_decoder_section_errors_name_the_section():
    spec = dict(tiny("encoder_decoder"), decoder={"attention": "sdpx"})
    with pytest.raises(zoo.UnknownComponentError, match=r"decoder\.attention\.kind"):
        zoo.spec(spec)
    spec = dict(tiny("encoder_decoder"), encoder={"vocab_size": 3})
    with pytest.raises(zoo.SpecError, match=r"encoder\.vocab_size: 'vocab_size' cannot be overridden"):
        zoo.spec(spec)


def test_yaml_is_loaded_safely(tmp_path):
    f = tmp_path / "evil.yaml"
    f.write_text("arch: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(zoo.SpecError, match="invalid YAML"):
        zoo.spec(str(f))


def test_the_component_fields_of_model_spec_are_the_family_table():
    """One field per spec family, derived from its row (name, type, default None), in table order
    before ``head``: adding a family row adds the field without a line in zoo/model/spec.py."""
    import dataclasses
    import importlib
    import typing

    from zoo.components import SPEC_FAMILIES, Family, FeedForward

    spec_mod = importlib.import_module("zoo.spec")
    names = [f.name for f in dataclasses.fields(spec_mod.ModelSpec)]
    fams = [f.field for f in SPEC_FAMILIES]
    start = names.index(fams[0])
    assert names[start:start + len(fams) + 1] == fams + ["head"]
    hints = typing.get_type_hints(spec_mod.ModelSpec)
    for fam in SPEC_FAMILIES:
        assert hints[fam.field] == spec_mod.component_field_type(fam)
        assert spec_mod.ModelSpec.__dataclass_fields__[fam.field].default is None
    assert hints["mask"] == (tuple[spec_mod.ComponentSpec, ...] | None)
    assert hints["attention"] == (spec_mod.ComponentSpec | None)

    # a row added to the table: the class built the same way has its field, before head
    gate = Family("gate", "register_gates", FeedForward, "gate", True, default="identity")
    spec_mod_families = spec_mod.SPEC_FAMILIES
    try:
        spec_mod.SPEC_FAMILIES = spec_mod_families + (gate,)
        probe = type("Probe", (), {"__annotations__": {"name": "str", "head": "int | None"},
                                   "name": "x", "head": None})
        probe = dataclasses.dataclass(frozen=True)(spec_mod._family_fields(probe))
    finally:
        spec_mod.SPEC_FAMILIES = spec_mod_families
    assert [f.name for f in dataclasses.fields(probe)] == ["name"] + fams + ["gate", "head"]
    assert probe().gate is None and probe.__annotations__["gate"] == (spec_mod.ComponentSpec | None)


@pytest.mark.parametrize("name", zoo.list_presets())
def test_a_brief_spec_parses_back_to_the_same_spec(name):
    """``to_yaml(brief=True)`` (a card's Spec block) drops only parameters at their defaults: it
    parses back to an equal spec for every preset, and is never longer than the full form."""
    spec = zoo.spec(name)
    brief = spec.to_yaml(brief=True)
    assert parse_spec(yaml.safe_load(brief)) == spec
    assert len(brief) <= len(spec.to_yaml())


def test_a_component_reads_with_the_parameters_that_differ_from_its_defaults():
    """What summaries, cards and diagrams show: ``rope``, not every RoPE default; a changed value
    is named (the newcomer walk's card listed ``rope(base=10000.0, interleaved=False, ...)``)."""
    plain = zoo.spec("gpt_tiny", positions={"kind": "rope"}, norm={"kind": "layernorm", "eps": 1e-12})
    st = plain.stack("decoder")
    assert str(st.positions) == "rope"
    assert str(st.norm) == "layernorm(eps=1e-12)"
    scaled = zoo.spec("gpt_tiny", positions={"kind": "rope", "scaling": "linear", "factor": 4.0})
    assert str(scaled.stack("decoder").positions) == "rope(scaling=linear, factor=4.0)"
    # a saved spec still records every parameter: a later default cannot change a saved model
    assert "original_max_len" in plain.to_yaml() and "original_max_len" not in plain.to_yaml(brief=True)

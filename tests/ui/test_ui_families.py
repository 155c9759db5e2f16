"""The UI reads the one family table (zoo.components.FAMILIES): a family row added there is a Build
form dropdown, a YAML field the form writes, a label in both languages and a word in translated
errors, without a line changed in ui/.

The row added here, ``router``, has no hookspec and no spec field in the engine (that is the engine's
part of adding a family), so the registry's names for it are supplied by the test; everything the UI
does with the row is the UI's own code."""
from __future__ import annotations

import pytest
import yaml

gr = pytest.importorskip("gradio")

import zoo  # noqa: E402
from zoo import components  # noqa: E402
from zoo.components import Family, FeedForward  # noqa: E402
from zoo.ui import build_tab, i18n  # noqa: E402
from zoo.ui.i18n import Translator  # noqa: E402

ROUTER = Family("router", "register_routers", FeedForward, "router", True, default="top1")


@pytest.fixture
def router_family(monkeypatch):
    """The family table with one more per-stack row, and a registry that lists two routers."""
    monkeypatch.setattr(components, "FAMILIES", components.FAMILIES + (ROUTER,))
    monkeypatch.setattr(components, "SPEC_FAMILIES", components.SPEC_FAMILIES + (ROUTER,))
    reg = zoo.get_registry()
    names = reg.names
    monkeypatch.setattr(reg, "names", lambda family: ["top1", "top2"] if family == "router" else names(family))
    yield ROUTER


def test_built_in_families_are_the_form_and_the_labels():
    spec_fields = [f.field for f in components.SPEC_FAMILIES if f.per_stack]
    assert list(build_tab.component_fields()) == spec_fields
    assert build_tab.form_fields()[-len(spec_fields):] == tuple(spec_fields)
    for f in components.SPEC_FAMILIES:  # each family has a real label, not the fallback
        en, zh = i18n.family_label(f)
        assert i18n.t(f"build.{f.field}", "en") == en and "(component)" not in en
        assert i18n.t(f"build.{f.field}", "zh") == zh and "组件" not in zh
    assert i18n.t("build.positions", "zh") == "位置编码"


def test_a_new_family_row_reaches_the_form_the_yaml_and_both_languages(router_family):
    assert "router" in build_tab.form_fields()
    assert build_tab.registry_choices()["router"] == ["top1", "top2"]
    assert i18n.t("build.router", "en") == "router (component)"
    assert i18n.t("build.router", "zh") == "router（组件）"
    assert "build.router" in i18n.all_strings()
    unknown = zoo.UnknownComponentError.of("registry.unknown_component", family="router", name="x")
    assert i18n.error_text(unknown, "zh")[0] == "没有名为 'x' 的router（组件）"  # the family's own word
    # the form writes the new field into the YAML, and shows the table's default while it is absent
    text = build_tab.preset_yaml("gpt_tiny")
    assert yaml.safe_load(build_tab.set_field(text, "router", "top2"))["router"] == "top2"
    assert build_tab.form_values(text)["router"] == "top1"

    # the Build tab's layout has the dropdown, labelled, and the language switch re-labels it
    tr = Translator("en")
    with gr.Blocks():
        with gr.Tab("build"):
            parts = build_tab.build(tr, gr.State("en"))
    router = parts["fields"]["router"]
    assert isinstance(router, gr.Dropdown) and router.elem_id == "build-router"
    assert router.label == "router (component)" and router.value == "top1"
    assert [c[0] for c in router.choices] == ["top1", "top2"]
    i = tr.components.index(router)
    assert tr.updates("zh")[i]["label"] == "router（组件）"


def test_the_forms_boxes_are_the_specs_basic_settings(monkeypatch):
    """The Build form's scalar boxes are the settings ModelSpec declares basic (zoo.model.spec.basic /
    per_stack(basic=True)), each a box of its annotated type: declaring one more basic is a box in
    the form, written into the YAML and read back, labelled in both languages, with no line in ui/."""
    import dataclasses

    from zoo.model import spec as spec_mod

    declared = [f.name for f in dataclasses.fields(zoo.ModelSpec) if f.metadata.get("basic")]
    assert set(build_tab.scalar_fields()) == set(declared) == set(spec_mod.BASIC_FIELDS)
    assert build_tab.scalar_fields()[0] == "name"  # the text box first, then the numbers in order
    assert build_tab.form_fields()[1:1 + len(declared)] == build_tab.scalar_fields()
    # head_dim (int | None, derived when left out) declared basic as well
    monkeypatch.setattr(spec_mod, "BASIC_FIELDS", spec_mod.BASIC_FIELDS + ("head_dim",))
    assert "head_dim" in build_tab.form_fields()
    assert build_tab.scalar_kind("head_dim") == (int, True)
    text = build_tab.preset_yaml("gpt_tiny")
    assert build_tab.form_values(text)["head_dim"] == 0  # derived: shown as 0
    text = build_tab.set_field(text, "head_dim", 16.0)  # a number box gives a float
    assert yaml.safe_load(text)["head_dim"] == 16 and build_tab.form_values(text)["head_dim"] == 16
    assert "head_dim" not in yaml.safe_load(build_tab.set_field(text, "head_dim", 0))  # 0: derived again
    assert i18n.t("build.head_dim", "en") == "head dim" and i18n.t("build.head_dim", "zh") == "head_dim（规格字段）"
    tr = Translator("en")
    with gr.Blocks():
        with gr.Tab("build"):
            parts = build_tab.build(tr, gr.State("en"))
    box = parts["fields"]["head_dim"]
    assert isinstance(box, gr.Number) and box.elem_id == "build-head_dim" and box.minimum == 0
    assert isinstance(parts["fields"]["name"], gr.Textbox) and parts["fields"]["num_heads"].minimum == 1
    assert parts["fields"]["dropout"].maximum == 0.99 and parts["fields"]["num_kv_heads"].maximum == 32

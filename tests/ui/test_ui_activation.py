"""The Build tab's activation field is a dropdown of the registered activations (issue 34): the
``activation`` family's live names, a plugin's among them, not a free text box that refused a typo
only after the fact.  The browser half is in tests/ui/test_ui_browser_third_hour.py."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

gr = pytest.importorskip("gradio")

import zoo  # noqa: E402
from zoo.registry import Registry, set_registry  # noqa: E402
from zoo.ui import build_tab  # noqa: E402

MISH = Path(__file__).resolve().parents[2] / "docs" / "examples" / "mish_activation.py"


def _activation(text):
    ffn = next(e for e in build_tab.component_entries(text) if e["family"] == "ffn")
    return next(p for p in ffn["params"] if p["name"] == "activation")


@pytest.fixture
def with_mish():
    """A registry of its own with the docs' mish plugin added (the process-wide one is restored)."""
    spec = importlib.util.spec_from_file_location("zoo_mish_example", MISH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    reg = Registry(entry_points=False)
    assert reg.add_plugin(mod, name="zoo-mish").ok
    old = set_registry(reg)
    try:
        yield reg
    finally:
        set_registry(old)


def test_the_activation_is_a_choice_of_the_registered_names():
    p = _activation(build_tab.preset_yaml("gpt_tiny"))
    assert p["type"] == "choice" and p["value"] == "gelu"
    assert p["choices"] == zoo.get_registry().names("activation")
    assert {"gelu", "gelu_tanh", "relu", "silu"} <= set(p["choices"])


def test_a_plugins_activation_is_offered_and_written_into_the_yaml(with_mish):
    text = build_tab.preset_yaml("gpt_tiny")
    p = _activation(text)
    assert "mish" in p["choices"] and p["choices"] == with_mish.names("activation")
    ffn = next(e for e in build_tab.component_entries(text) if e["family"] == "ffn")
    out = build_tab.param_setter(p, ffn["path"])("mish", text)
    assert yaml.safe_load(out)["ffn"]["activation"] == "mish"
    assert build_tab.analyse(out)[3]  # a valid spec with the plugin installed


def test_the_widget_is_a_dropdown():
    p = _activation(build_tab.preset_yaml("gpt_tiny"))
    with gr.Blocks():
        w, events = build_tab._param_widget(p, "param-ffn-activation", "mlp")
    assert isinstance(w, gr.Dropdown) and [c[1] for c in w.choices] == p["choices"] and w.value == "gelu"

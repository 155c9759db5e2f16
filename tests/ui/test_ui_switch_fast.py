"""The language switch sends only what changes with the language (issue 34: 4.8-13 s in Chromium).

It re-labels components and re-words text; it never sends a plot, the gallery, a code editor or
the Build tab's parameter fields again, nothing re-renders on the language state, and re-wording
the page's spec / experiment / checkpoint card repeats no analysis (no model built, no experiment
validated).  Handler level here; tests/ui/test_ui_browser_third_hour.py times it in Chromium.
"""
from __future__ import annotations

import pytest

gr = pytest.importorskip("gradio")

import zoo  # noqa: E402
from zoo.ui import build_tab, experiments_tab  # noqa: E402

from ui_support import app_with_checkpoints  # noqa: E402

#: components whose value a switch must never send: nothing in them depends on the language
HEAVY = (gr.Plot, gr.Gallery, gr.Code, gr.State, gr.Chatbot)


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with app_with_checkpoints(tmp_path_factory) as demo:
        yield demo


def _page_values(app):
    """The switch's inputs as the browser sends them: the components' values, a code editor's text
    without its last newline (gr.Code hands it back so), the Run tab's checkpoint chosen."""
    tr = app.zoo_translator
    out = []
    for c in tr.switch_inputs:
        v = getattr(c, "value", None)
        out.append(v.rstrip("\n") if isinstance(c, gr.Code) and isinstance(v, str) else v)
    return out


def _switch_fn(app):
    return next(fn for fn in app.fns.values()
                if any(getattr(app.blocks.get(i), "elem_id", None) == "lang-switch" for i, _ in fn.targets))


def test_the_switch_sends_no_plot_gallery_code_editor_or_state_value(app):
    tr = app.zoo_translator
    for lang in ("zh", "en"):
        for c, u in zip(tr.switch_outputs, tr.switch(lang, _page_values(app))):
            if isinstance(c, HEAVY):
                assert "value" not in u, (type(c).__name__, getattr(c, "elem_id", None), sorted(u))
    heavy = [getattr(c, "elem_id", None) for c in tr.switch_outputs if isinstance(c, HEAVY)]
    assert "build-cost" in heavy and "exp-gallery" in heavy and "build-yaml" in heavy  # labels only


def test_nothing_renders_or_runs_on_the_language_state(app):
    """The Build tab's parameter fields re-rendered on every switch (the page rebuilt them); now no
    event listens to the language state at all: the switch's own outputs are its whole work."""
    lang_state = _switch_fn(app).outputs[0]
    assert isinstance(lang_state, gr.State)
    listeners = [fn.name for fn in app.fns.values() if (lang_state._id, "change") in fn.targets]
    assert not listeners, listeners
    renders = [fn for fn in app.fns.values() if getattr(fn, "renderable", None) is not None]
    assert renders and all(lang_state not in fn.inputs for fn in renders)


def test_no_params_line_follows_the_language_outside_the_render(app):
    tr = app.zoo_translator
    box = next(c for c in tr.switch_outputs if getattr(c, "elem_id", None) == "build-no-params")
    u = dict(zip(map(id, tr.switch_outputs), tr.switch("zh", _page_values(app))))[id(box)]
    assert u["value"] == "所选组件没有参数。"
    text = build_tab.preset_yaml("gpt_tiny")
    assert build_tab.on_change(text, "en")[-1]["visible"] is False  # gpt_tiny's components have fields
    bare = "arch: decoder\nvocab_size: 64\nd_model: 32\nnum_layers: 1\nnum_heads: 4\nmax_len: 16\n" \
           "positions: none\nnorm: rmsnorm\nffn: {kind: mlp, activation: gelu, bias: false}\n"
    fields = [e for e in build_tab.component_entries(bare) if e["params"]]
    assert build_tab.on_change(bare, "en")[-1]["visible"] is (not fields)


def test_rewording_the_page_builds_no_model_and_validates_no_experiment(app, monkeypatch):
    """Once the page is drawn, a switch only re-words: the spec's analysis, the card's size line and
    the experiment's check are remembered (the editor's text without its last newline is the same
    experiment: it missed the cache and re-validated for 5-9 s on the first switch)."""
    tr = app.zoo_translator
    values = _page_values(app)
    assert any(isinstance(c, gr.Code) and getattr(c, "elem_id", None) == "exp-yaml" for c in tr.switch_inputs)
    run_ckpt = next(c for c in tr.switch_inputs if getattr(c, "elem_id", None) == "run-checkpoint")
    assert values[tr.switch_inputs.index(run_ckpt)]  # a card is on the page
    built, validated = [], []
    real_build, real_values = zoo.build, experiments_tab.summary_values
    monkeypatch.setattr(zoo, "build", lambda *a, **k: built.append(a) or real_build(*a, **k))
    monkeypatch.setattr(experiments_tab, "summary_values", lambda *a: validated.append(a) or real_values(*a))
    for lang in ("zh", "en", "zh", "en"):  # the first one too: the page's build analysed all of it
        tr.switch(lang, values)
    assert not built and not validated, (len(built), len(validated))


def test_the_experiment_check_is_one_per_yaml_whatever_its_last_newline():
    text = experiments_tab.shipped_yaml(experiments_tab_first())
    assert text.endswith("\n")
    experiments_tab.checked.cache_clear()
    experiments_tab.validate(text)
    before = experiments_tab.checked.cache_info()
    assert experiments_tab.validate(text.rstrip("\n"), "zh") == experiments_tab.validate(text, "zh")
    after = experiments_tab.checked.cache_info()
    assert after.misses == before.misses and after.hits >= before.hits + 2


def test_the_spec_analysis_is_one_per_yaml_whatever_its_last_newline():
    text = build_tab.preset_yaml("gpt_tiny")
    assert text.endswith("\n")
    build_tab._facts.cache_clear()
    first = build_tab.analyse(text, "zh")
    assert build_tab.analyse(text.rstrip("\n"), "zh") == first
    assert build_tab._facts.cache_info().misses == 1


def experiments_tab_first() -> str:
    import zoo.experiment as ze

    return ze.list_shipped()[0]

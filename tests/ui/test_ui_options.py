"""The Run tab's generation controls are the fields of zoo.run.options.GenerationOptions: one control
per option a person sets by hand (its Option declares a step), its range from the declaration, its
value passed to generation under the option's name.  A new option is one declaration (and its use in
the decoding loop): it appears as a control, labelled in both languages, and its value reaches
generation without a line changed in ui/."""
from __future__ import annotations

import dataclasses

import pytest

gr = pytest.importorskip("gradio")

from zoo.run import generate  # noqa: E402
from zoo.run import options as declared_options  # noqa: E402
from zoo.ui import i18n, run_tab  # noqa: E402
from zoo.ui.i18n import Translator  # noqa: E402

from ui_support import make_checkpoints  # noqa: E402


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpts")
    make_checkpoints(d)
    return d


@pytest.fixture(autouse=True)
def _dirs(ckpt_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CHECKPOINTS", str(ckpt_dir))
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    yield


def _run_tab() -> tuple[dict, Translator]:
    tr = Translator("en")
    with gr.Blocks():
        with gr.Tab("run"):
            parts = run_tab.build(tr, gr.State("en"))
    return parts, tr


def test_the_controls_are_the_hand_set_generation_options():
    declared = [f.name for f in dataclasses.fields(declared_options.GenerationOptions)
                if f.metadata["option"].step is not None]
    assert [n for n, _ in run_tab.ui_options()] == declared
    assert set(declared) >= {"max_new_tokens", "temperature", "top_k", "top_p", "repetition_penalty", "seed"}
    parts, _ = _run_tab()
    assert list(parts["options"]) == declared
    fields = declared_options.GenerationOptions.__dataclass_fields__
    for name, w in parts["options"].items():
        opt = fields[name].metadata["option"]
        assert w.elem_id == f"run-{name.replace('_', '-')}"
        if isinstance(w, gr.Slider):  # its range is the declared one (max new tokens: the model's room)
            assert w.minimum == opt.ui_low and w.step == opt.step
            if name != "max_new_tokens":
                assert w.maximum == opt.ui_high
        else:
            assert opt.ui_low is None or opt.ui_high is None


def test_a_new_option_is_a_control_whose_value_reaches_generation(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class WithMinP(declared_options.GenerationOptions):
        min_p: float = declared_options._opt(0.0, help="Sampling: drop tokens below min_p times the "
                                             "top probability.", kind="float", low=0.0, high=1.0,
                                             ui_low=0.0, ui_high=1.0, step=0.01)

    monkeypatch.setattr(declared_options, "GenerationOptions", WithMinP)
    seen = {}
    real = generate.stream_text

    def recording(model, prompt, max_new_tokens=32, **options):  # what generation receives
        seen.update(options, max_new_tokens=max_new_tokens)
        options.pop("min_p")  # the decoding loop of this test has no use for it
        yield from real(model, prompt, max_new_tokens, **options)

    monkeypatch.setattr(generate, "stream_text", recording)
    parts, tr = _run_tab()
    control = parts["options"]["min_p"]
    assert isinstance(control, gr.Slider) and control.elem_id == "run-min-p"
    assert (control.minimum, control.maximum, control.step) == (0.0, 1.0, 0.01)
    assert control.label == "min p" and tr.updates("zh")[tr.components.index(control)]["label"] == "min_p（生成选项）"
    assert "run.min_p" in i18n.all_strings()

    values = [0.3 if name == "min_p" else w.value for name, w in parts["options"].items()]
    first, *_, last = run_tab.run_ui("ui_gpt", "abc", "en", *values)
    out, _, speed, kept, _, _ = last
    assert first[-2:] == (None, "")  # the run cleared the error box (and its kept record) as it started
    assert out and "tokens/s" in speed
    # what the tab keeps for a language switch: the speed figures, drawn again in Chinese
    assert kept["stats"]["tokens_per_s"] > 0 and run_tab.redraw("zh", kept)[1].startswith(
        i18n.t("run.speed", "zh", rate=kept["stats"]["tokens_per_s"], mb=kept["stats"]["bytes_per_token"] / 1e6,
               pct=100 * kept["stats"]["roofline"], bw=kept["stats"]["bandwidth_gbs"]))
    assert seen["min_p"] == 0.3 and seen["temperature"] == 0.8 and seen["top_k"] == 20
    assert seen["do_sample"] is True and seen["max_new_tokens"] == parts["max_new"].value

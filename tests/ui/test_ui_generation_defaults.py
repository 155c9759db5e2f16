"""Issue 36: the Run tab applies a checkpoint's own generation settings.

The page sends every control's value with a run, and a value sent overrides the model's default
(``zoo.run.options.model_defaults``), so a converted model whose ``generation_config`` says
``no_repeat_ngram_size: 2`` ran with the slider's 0.  Choosing a checkpoint now starts the controls
at its settings (``run_tab.generation_defaults`` / ``fresh_run``), and a run with those values gives
the tokens ``model.generate`` gives with the model's defaults -- checked here on a GPT-2 converted
from transformers (random weights from a config object, its generation config set) against
``generate`` with no options, and shown to differ from the tokens the old slider values give.
"""
from __future__ import annotations

import os

import pytest

gr = pytest.importorskip("gradio")
T = pytest.importorskip("transformers")

import zoo  # noqa: E402
from zoo.ui import common, run_tab  # noqa: E402

from convert_cases import randomize  # noqa: E402
from ui_support import make_checkpoints  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SETTINGS = dict(no_repeat_ngram_size=2, repetition_penalty=1.3, length_penalty=2.0)
PROMPT, NEW = "abab", 12


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from zoo.convert import from_transformers

    ckpts = tmp_path_factory.mktemp("ckpts")
    make_checkpoints(ckpts)
    byte = zoo.tokenizer("byte")
    hf = randomize(T.GPT2LMHeadModel(T.GPT2Config(vocab_size=byte.vocab_size, n_embd=32, n_layer=2, n_head=4,
                                                  bos_token_id=0, eos_token_id=0,
                                                  n_positions=64, attn_implementation="eager")), seed=3)
    hf.generation_config = T.GenerationConfig(**SETTINGS, num_beams=1, bos_token_id=None, eos_token_id=None,
                                              pad_token_id=None)
    z = from_transformers(hf, certify=False)
    zoo.save(z, ckpts / "ui_conv", tokenizer=byte)
    old = os.environ.get("ZOO_CHECKPOINTS")
    os.environ["ZOO_CHECKPOINTS"] = str(ckpts)
    try:
        yield ckpts
    finally:
        os.environ.pop("ZOO_CHECKPOINTS", None) if old is None else os.environ.__setitem__("ZOO_CHECKPOINTS", old)


def controls(values: dict, max_new_tokens: int) -> list:
    return [max_new_tokens if n == "max_new_tokens" else values[n] for n, _ in run_tab.ui_options()]


def test_the_controls_start_at_the_converted_checkpoints_generation_config(folder):
    own, plain = run_tab.generation_defaults("ui_conv"), run_tab.generation_defaults("ui_gpt")
    for k, v in SETTINGS.items():
        assert own[k] == v and plain[k] != v, k
    assert own["temperature"] == plain["temperature"] == run_tab.UI_DEFAULTS["temperature"]  # strategy: the tab's
    out, fills, speed, kept, *updates, record, box = run_tab.fresh_run("ui_conv", "en")
    assert (out, speed, kept, box) == ("", "", None, "") and len(fills) == 0
    names = [n for n, _ in run_tab.ui_options() if n != "max_new_tokens"]
    assert {n: u["value"] for n, u in zip(names, updates)} == own
    card = run_tab.model_card("ui_conv")
    assert "no_repeat_ngram_size 2" in card and "repetition_penalty 1.3" in card and "length_penalty 2.0" in card
    assert "generation_config" not in run_tab.model_card("ui_gpt")
    assert "本检查点自带的生成设置" in run_tab.model_card("ui_conv", "zh")


def test_a_run_with_those_controls_gives_the_models_own_tokens(folder):
    model = common.load_checkpoint("ui_conv")
    want = model.generate(PROMPT, NEW)  # the model's generation config applied by generate itself
    values = dict(run_tab.generation_defaults("ui_conv"), temperature=0.0)
    first, *_, last = run_tab.run_ui("ui_conv", PROMPT, "en", *controls(values, NEW))
    assert first[-1] == "" and last[0] == PROMPT + want  # the page shows the prompt, as zoo run does
    old = dict(values, **{k: run_tab.generation_defaults(None)[k] for k in SETTINGS})  # the sliders' old values
    *_, before = run_tab.run_ui("ui_conv", PROMPT, "en", *controls(old, NEW))
    assert before[0] != last[0]  # the settings change this model's tokens: the test can see them dropped


def test_a_slider_widens_to_hold_a_value_above_its_range(folder, tmp_path):
    m = common.load_checkpoint("ui_conv")
    m2 = zoo.load(common.checkpoint_path("ui_conv"))
    m2.generation_config = dict(m.generation_config, no_repeat_ngram_size=9)  # the slider ends at 6
    zoo.save(m2, folder / "ui_conv9", tokenizer=zoo.tokenizer("byte"))
    names = [n for n, _ in run_tab.ui_options() if n != "max_new_tokens"]
    updates = dict(zip(names, run_tab.fresh_run("ui_conv9", "en")[4:-2]))
    assert updates["no_repeat_ngram_size"]["value"] == 9 and updates["no_repeat_ngram_size"]["maximum"] == 9


def test_the_page_wires_a_checkpoint_change_to_fresh_controls(folder):
    from zoo.ui.app import build_app

    app = build_app()
    fns = [f for f in app.fns.values() if getattr(f.fn, "__name__", "") == "fresh_run"]
    assert fns, "choosing a checkpoint must start the controls at its settings"
    ids = {getattr(b, "elem_id", None) for b in fns[0].outputs}
    assert {"run-output", "run-speed", "run-no-repeat-ngram-size", "run-length-penalty"} <= ids

"""The real-model workflow in the UI (issue 36, goals 1 and 6): SmolLM2-135M-Instruct, converted from
its Q4_1 GGUF (tests/real_models.py: 30 layers, max_len 8192, ChatML, 134.5M parameters), saved in
bfloat16 into a checkpoint folder the UI lists, opens in every tab -- Run (generate and chat),
Inspect, Interpret, Compare -- as it is; its long max_len is capped per request and the tabs say so;
over a small budget it is refused with the figure and the budget.  Handler level, plus one Chromium
run at 1280x800.  Before issue 36 every one of these answered "max_len = 8192 is above this UI's
limit of 4096".
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch

gr = pytest.importorskip("gradio")
pytest.importorskip("tokenizers")

import zoo  # noqa: E402
from zoo.guard import run_budget  # noqa: E402
from zoo.ui import budget, chat_panel, common, compare_tab, inspect_tab, interp_tab, run_tab  # noqa: E402
from zoo.ui.controls import control_values  # noqa: E402
import zoo.run.chat  # noqa: E402

pytestmark = pytest.mark.slow

NAME = "smollm2"
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A checkpoint folder holding the converted model in bfloat16 (half the float32 file: 269 MB)."""
    import real_models

    model = real_models.smollm2()
    d = tmp_path_factory.mktemp("real_ckpts")
    half = copy.deepcopy(model).to(torch.bfloat16)  # the session's float32 model stays as it is
    zoo.save(half, d / NAME)
    del half
    return d


@pytest.fixture(autouse=True)
def _dirs(folder, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CHECKPOINTS", str(folder))
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    yield


@pytest.fixture(scope="module", autouse=True)
def _release():
    yield
    common._CACHE.clear()  # 269 MB the rest of the session does not need


def controls(max_new_tokens=8):
    from zoo.run.generate import GenerationOptions

    values = dict(run_tab.UI_DEFAULTS, max_new_tokens=max_new_tokens, temperature=0.0)
    fields = GenerationOptions.__dataclass_fields__
    return [values.get(n, fields[n].default) for n, _ in run_tab.ui_options()]


def run_box(text, lang="en", max_new_tokens=4):
    steps = list(run_tab.run_ui(NAME, text, lang, *controls(max_new_tokens)))
    out = steps[-1][0]  # the page shows the prompt, then the continuation (as zoo run prints it)
    if isinstance(out, str):  # (an error leaves the output as it was: an update)
        assert not out or out.startswith(text), out
        out = out[len(text):]
    return out, [s[-1] for s in steps if isinstance(s[-1], str)][-1]


def cells(html_text: str) -> dict[tuple[int, int], float]:
    return {(int(r), int(c)): float(v) for r, c, v in
            re.findall(r"data-r='(\d+)' data-c='(\d+)' data-v='([-\d.e]+)'", html_text)}


# ---------------------------------------------------------------------- Run: generate and chat
def test_run_generates_paris_and_the_card_says_the_cap():
    out, box = run_box(PROMPT)
    assert box == "" and out.startswith(" Paris"), (out, box)
    nbytes, numbers = budget.stored(common.checkpoint_path(NAME))
    assert numbers == 134_515_008 and nbytes == 2 * numbers  # bfloat16, the tied head stored once
    card = run_tab.model_card(NAME)
    assert "max_len 8192" in card and "decoder: 30 ×" in card
    assert f"weights {run_budget.human_bytes(nbytes)}" in card
    assert "one request holds at most 2048 tokens (prompt + new) of max_len 8192" in card
    assert "capped per request at 2048 tokens by this UI, not refused" in card
    kv = 30 * 2 * 3 * 64 * 2 * 2048  # layers x (k, v) x kv heads x head_dim x bf16 bytes x tokens
    assert f"a KV cache of {run_budget.human_bytes(kv)}" in card
    assert run_tab.max_new_tokens_for(NAME)["maximum"] == common.LIMITS["max_new_tokens"]


def test_chat_names_the_end_of_turn_token_and_answers():
    note = chat_panel.note(NAME)
    assert "end-of-turn token `<|im_end|>`" in note and "or at `<|endoftext|>`" in note, note
    column, *_ = chat_panel.on_checkpoint(NAME, "en")
    assert column["visible"] is True
    question = [{"role": "user", "content": "What is the capital of France?"}]
    steps = list(chat_panel.send(NAME, question[0]["content"], "", [], "en", *controls(16)))
    history = steps[-1][1]
    # the panel's reply is the engine's, on the same bfloat16 checkpoint with the tab's settings
    _, options = control_values(controls(16))
    engine = zoo.run.chat.chat(common.load_checkpoint(NAME, "en"), question, 16, **options)
    assert history[-1] == {"role": "assistant", "content": engine}, (history, engine)
    # and the real weights answer it in float32.  In bfloat16 the answer depends on the CPU: where
    # it has no bf16 units (this AMD EPYC) greedy decoding says "L'Étoile, la Marseillaise, ..."
    # (seen in CI-like runs, issue 34's last stop), elsewhere "Paris"
    import real_models

    assert "Paris" in zoo.run.chat.chat(real_models.smollm2(), question, 16)
    assert "<|im_start|>assistant\n" in steps[0][3]  # the rendered prompt the page shows


def test_a_long_conversation_is_cut_to_one_requests_tokens_and_says_so(monkeypatch):
    monkeypatch.setitem(common.LIMITS, "request_tokens", 160)
    history = []
    for i in range(6):
        history += [{"role": "user", "content": f"Tell me fact number {i} about cats, please."},
                    {"role": "assistant", "content": f"Fact {i}: cats sleep for many hours every day."}]
    steps = list(chat_panel.send(NAME, "And one about dogs?", "", history, "en", *controls(8)))
    kept = steps[0][5]
    assert kept["dropped"] > 0 and kept["cap"] == 160 and kept["max_len"] == 8192
    assert (f"the {kept['dropped']} oldest messages no longer fit in the 160 tokens this UI gives one request "
            "(the model's max_len is 8192)") in steps[0][4]
    model = common.load_checkpoint(NAME)
    assert len(model.tokenizer.encode(steps[0][3])) + 8 - 1 <= 160  # prompt + reply inside one request


# ---------------------------------------------------------------------- Inspect
def test_inspect_traces_the_last_layer_and_predicts_paris():
    r = inspect_tab.inspect(NAME, PROMPT, "decoder", 29, 8)
    assert (r["layers"], r["heads"]) == (30, 9) and len(r["tokens"]) == 5
    assert r["next"].startswith("' Paris'"), r["next"]
    stack, layer, head, *_ = inspect_tab.on_checkpoint(NAME, "decoder", "en")
    assert layer["maximum"] == 29 and head["maximum"] == 8  # the sliders reach the last layer and head


# ---------------------------------------------------------------------- Interpret
def test_interpret_resets_to_a_prompt_the_model_reads_and_shows_its_views():
    clean, corrupted, line, out, kept, _, box = interp_tab.on_checkpoint(NAME, "en")
    assert (clean, corrupted) == (PROMPT, "The capital of Greece is") and box == ""
    model = common.load_checkpoint(NAME)
    assert interp_tab.patch_cap(model) == 11  # 2 x 134.5M x (30 T + 3) x T <= 1e12 FLOPs
    assert "smollm2: 30 layers, max_len 8192" in line and "at most 11 tokens" in line
    lens = interp_tab.lens_view(NAME, clean, "en")
    assert lens.count("<tr><th class='row'>") == 31
    last = re.search(r"data-r='30' data-c='4'[^>]*>([^<]*)</td>", lens).group(1)
    assert last == " Paris"  # after the last layer, at " is": the model's own next token
    scores = cells(interp_tab.scores_view(NAME, clean, "previous_token", "en"))
    assert len(scores) == 30 * 9
    patched = cells(interp_tab.patch_view(NAME, clean, corrupted, "en"))
    assert len(patched) == 30 * 5
    assert abs(patched[(0, 3)] - 1.0) < 1e-3  # " France" restored before layer 0: the clean run
    long = " and it is a city of art, light and food"  # 15 tokens in all: 483 forwards, refused at once
    with pytest.raises(gr.Error, match="patching takes at most 11 tokens for this checkpoint"):
        interp_tab.patch_view(NAME, clean + long, corrupted + long, "en")


# ---------------------------------------------------------------------- Compare
def test_compare_opens_the_checkpoint_and_an_eager_twin():
    rows, diff = compare_tab.compare(compare_tab.CKPT + NAME, "", compare_tab.CKPT + NAME, "attention: eager",
                                     16, PROMPT)
    table = {r[0]: r[1:] for r in rows}
    assert table["parameters"] == ["134,515,008", "134,515,008"]
    assert table["tokens in the forward"] == ["16", "16"]
    assert all(x.startswith("' Paris") for x in table["output on the prompt (greedy)"]), table
    assert re.search(r"^\+\s*(attention: )?(kind: )?eager", diff, re.M), diff


# ---------------------------------------------------------------------- over the budget
def test_over_a_small_budget_every_tab_refuses_it_with_the_figure_and_the_budget(monkeypatch):
    common._CACHE.clear()
    monkeypatch.setattr(run_budget, "BUDGET", 100e6)
    want = "checkpoint 'smollm2' needs 269.0 MB for its weights, more than the budget of 100.0 MB " \
           "(zoo.guard.run_budget.BUDGET)"
    _, box = run_box(PROMPT)
    assert want in box, box
    assert want in chat_panel.note(NAME)
    assert want in inspect_tab.on_inspect(NAME, PROMPT, "decoder", 0, 0, "en")[-1]
    assert want in interp_tab.on_checkpoint(NAME, "en")[-1]
    with pytest.raises(gr.Error, match=re.escape(want)):
        compare_tab.compare(compare_tab.CKPT + NAME, "", "preset: gpt_tiny", "", 8)
    _, zh = run_box(PROMPT, lang="zh")
    assert "检查点 'smollm2' 的权重需要 269.0 MB，超过了预算 100.0 MB" in zh


# ---------------------------------------------------------------------- in Chromium, 1280x800
CHROMIUM = "/usr/bin/chromium"


@pytest.mark.browser
def test_the_real_model_runs_in_the_browser(folder, tmp_path):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"browser tests need Debian's Chromium at {CHROMIUM}")
    sync = pytest.importorskip("playwright.sync_api")
    from test_ui_browser import ARGS, LOCAL, SHOTS
    from ui_support import running_app

    SHOTS.mkdir(parents=True, exist_ok=True)
    with running_app() as url, sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
            outside: list[str] = []
            page.on("request", lambda r: None if r.url.startswith(LOCAL) else outside.append(r.url))
            page.set_default_timeout(60_000)
            page.goto(url)
            page.locator("button[role=tab]", has_text="Run").click()
            box = page.locator("#run-checkpoint input")
            box.click()
            box.fill(NAME)
            page.keyboard.press("Enter")
            page.locator("body").click(position={"x": 5, "y": 5})
            sync.expect(page.locator("#run-card")).to_contain_text("capped per request at 2048 tokens")
            sync.expect(page.locator("#run-chat-note")).to_contain_text("<|im_end|>")
            page.locator("#run-prompt textarea").fill(PROMPT)
            page.locator("#run-max-new-tokens input[type=number]").fill("4")
            page.locator("#run-go").click()
            sync.expect(page.locator("#run-output textarea")).to_have_value(re.compile(r"^The capital of France is Paris"), timeout=60_000)
            sync.expect(page.locator("#run-error")).to_have_text("")
            page.screenshot(path=str(SHOTS / "real_model_run.png"), full_page=True)
            assert not outside, outside
        finally:
            browser.close()

"""The Run tab's chat mode (issue 24, goal 5; ui/chat_panel.py), handler level and in Chromium.

The checkpoints are tiny random Llamas converted from transformers folders that carry real families'
templates (SmolLM2-Instruct's ChatML, Gemma-it's; tests/fixtures/chat_templates/), saved with
``zoo.save`` as ``zoo convert`` would.  The references are nobody's here: transformers'
``apply_chat_template`` for the prompt the tab sends and transformers' greedy ``generate`` (stopping
at ``<|im_end|>``) for the reply; ``model.chat`` (zoo's API) for the streamed pieces.
"""
from __future__ import annotations

import os
import unicodedata
from html import escape
from pathlib import Path

import pytest
import torch

gr = pytest.importorskip("gradio")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

import zoo  # noqa: E402
from zoo.ui import chat_panel, common, run_tab  # noqa: E402

from test_chat import fixture, hf_tokenizer  # noqa: E402
from ui_support import make_checkpoints, serve_with_checkpoints  # noqa: E402

MAX_LEN = 256


def make_chat_checkpoint(folder: Path, hf_dir: Path, name: str = "ui_chat", family: str = "smollm2"):
    """A random Llama (vocab: 256 byte symbols + special tokens) with ``family``'s template, saved
    as a Hugging Face folder, converted and saved as checkpoint ``name``; returns (hf model, hf tokenizer)."""
    tok = hf_tokenizer(family)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_LEN,
                                   eos_token_id=tok.convert_tokens_to_ids(fixture(family)["eos_token"]))
    hf = transformers.LlamaForCausalLM(cfg).eval()
    hf.save_pretrained(hf_dir / name)
    tok.save_pretrained(hf_dir / name)
    zoo.save(zoo.convert.from_pretrained(hf_dir / name), folder / name)
    return hf, tok


@pytest.fixture(scope="module")
def chat_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpts")
    make_checkpoints(d)
    hf_dir = tmp_path_factory.mktemp("hf")
    return d, {"ui_chat": make_chat_checkpoint(d, hf_dir),
               "ui_chat_gemma": make_chat_checkpoint(d, hf_dir, "ui_chat_gemma", "gemma")}


@pytest.fixture(autouse=True)
def _dirs(request, tmp_path, monkeypatch):
    if "server" in request.fixturenames:  # the browser test: its server sets the folders itself
        yield
        return
    d, _ = request.getfixturevalue("chat_models")
    monkeypatch.setenv("ZOO_CHECKPOINTS", str(d))
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    yield


def controls(max_new_tokens=12, temperature=0.0, **more) -> list:
    """The tab's generation controls in ``ui_options`` order: greedy unless told otherwise."""
    values = dict(run_tab.UI_DEFAULTS, max_new_tokens=max_new_tokens, temperature=temperature, **more)
    from zoo.run.options import GenerationOptions

    fields = GenerationOptions.__dataclass_fields__
    return [values.get(n, fields[n].default) for n, _ in run_tab.ui_options()]


def send(name, message, history=(), system="", lang="en", **opts):
    return list(chat_panel.send(name, message, system, list(history), lang, *controls(**opts)))


@pytest.fixture
def sent(monkeypatch):
    """Every prompt text that reaches zoo.run.generate.stream_text, with its options."""
    import zoo.run.generate

    seen = []
    real = zoo.run.generate.stream_text

    def spy(model, prompt, max_new_tokens=32, **options):
        seen.append((prompt, max_new_tokens, options))
        return real(model, prompt, max_new_tokens, **options)

    monkeypatch.setattr(zoo.run.generate, "stream_text", spy)
    return seen


def hf_reply(hf, tok, msgs, n):
    """transformers' greedy reply to ``msgs``, stopping at <|im_end|> (the reference)."""
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)["input_ids"]
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    with torch.no_grad():
        out = hf.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=eos, pad_token_id=eos)
    new = out[0, ids.shape[1]:].tolist()
    return tok.decode([i for i in new if i != eos], skip_special_tokens=True), new


# ---------------------------------------------------------------------- the prompt and the reply
def test_the_prompt_the_tab_sends_is_the_templates_render_as_transformers_makes_it(chat_models, sent):
    _, models = chat_models
    hf, tok = models["ui_chat"]
    steps = send("ui_chat", "Hello!", system="Be brief.")
    history = steps[-1][1]
    assert [m["role"] for m in history] == ["user", "assistant"]
    question = "What is 2+2? <b>&</b>"
    steps = send("ui_chat", question, history, system="Be brief.")
    msgs = [{"role": "system", "content": "Be brief."}] + history + [{"role": "user", "content": question}]
    want = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    model = common.load_checkpoint("ui_chat")
    t = zoo.run.chat.template_of(model)
    assert sent[-1][0] == want == zoo.run.chat.render(t["template"], msgs, add_generation_prompt=True,
                                                  **t["special_tokens"])
    assert steps[0][3] == want  # the rendered prompt shown on the page is what the model read
    assert steps[0][0][-2]["content"] == "What is 2+2? &lt;b&gt;&amp;&lt;/b&gt;"  # shown as typed, not as HTML
    assert want.startswith("<|im_start|>system\nBe brief.<|im_end|>") and want.endswith("<|im_start|>assistant\n")
    # generation stops at the template's end-of-turn token and the tokenizer's eos
    assert tok.convert_tokens_to_ids("<|im_end|>") in sent[-1][2]["stop_tokens"]
    assert "`<|im_end|>`" in chat_panel.note("ui_chat")


def test_the_streamed_reply_is_the_greedy_reply_token_for_token(chat_models):
    _, models = chat_models
    hf, tok = models["ui_chat"]
    msgs = [{"role": "user", "content": "Tell me a story."}]
    steps = send("ui_chat", "Tell me a story.", max_new_tokens=16)
    shown = [s[0][-1]["content"] for s in steps]  # the assistant's bubble after each yield (escaped)
    model = common.load_checkpoint("ui_chat")
    pieces = list(model.chat(msgs, max_new_tokens=16, stream=True))
    assert len(pieces) >= 4  # it really streams (a piece: the tokens that complete a character)
    assert shown[1:-1] == [escape("".join(pieces[:i + 1]), quote=False) for i in range(len(pieces))]
    want, _ = hf_reply(hf, tok, msgs, 16)
    assert shown[-1] == escape(want, quote=False) and model.chat(msgs, max_new_tokens=16) == want
    assert steps[-1][1] == msgs + [{"role": "assistant", "content": want}]  # the session's history
    assert steps[0][0][-1] == {"role": "assistant", "content": ""} and steps[0][1] == {"__type__": "update"}
    assert all(s[1] == {"__type__": "update"} for s in steps[:-1])  # history written once, when complete


def test_a_reply_stops_at_the_end_of_turn_token(chat_models, tmp_path, monkeypatch):
    """A model made to say <|im_end|> after a few tokens: the reply ends there, like transformers'."""
    d, models = chat_models
    hf, tok = models["ui_chat"]
    msgs = [{"role": "user", "content": "Hi"}]
    _, new = hf_reply(hf, tok, msgs, 8)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    steered = transformers.LlamaForCausalLM(hf.config).eval()
    steered.load_state_dict(hf.state_dict())
    with torch.no_grad():  # <|im_end|>'s output row: 3x the row of the 4th greedy token
        steered.lm_head.weight[eos] = 3 * hf.lm_head.weight[new[3]]
    want, ids = hf_reply(steered, tok, msgs, 16)
    assert eos in ids and 0 < ids.index(eos) < 15  # transformers stopped at the end of the turn
    steered.save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    zoo.save(zoo.convert.from_pretrained(tmp_path / "hf"), d / "ui_chat_stop")
    chosen = []  # every token generation chose, in order
    real = zoo.run.generate.stream

    def counting(*args, **kwargs):
        for step in real(*args, **kwargs):
            chosen.append(int(step[0]))
            yield step

    monkeypatch.setattr(zoo.run.generate, "stream", counting)
    steps = send("ui_chat_stop", "Hi", max_new_tokens=16)
    assert steps[-1][1][-1]["content"] == want
    assert chosen == ids[:ids.index(eos) + 1]  # transformers' tokens, and not one after <|im_end|>


def test_a_long_conversation_drops_its_oldest_turns_and_says_so(chat_models, sent):
    _, models = chat_models
    _, tok = models["ui_chat"]
    history = []
    for i in range(4):
        history += [{"role": "user", "content": f"question {i} " + "q" * 40},
                    {"role": "assistant", "content": f"answer {i} " + "a" * 40}]
    steps = send("ui_chat", "last question", history, system="Be brief.", max_new_tokens=64)
    kept = steps[0][5]
    k = kept["dropped"]
    assert k > 0 and k % 2 == 0 and kept["max_len"] == MAX_LEN
    system = [{"role": "system", "content": "Be brief."}]
    msgs = history + [{"role": "user", "content": "last question"}]
    seen = system + msgs[k:]
    assert sent[-1][0] == tok.apply_chat_template(seen, add_generation_prompt=True, tokenize=False)

    def room(ms):
        text = tok.apply_chat_template(ms, add_generation_prompt=True, tokenize=False)
        return MAX_LEN - len(tok.encode(text, add_special_tokens=False)) + 1  # transformers' count
    want = min(64, MAX_LEN // chat_panel.REPLY_SHARE)
    assert room(seen) >= want > room(system + msgs[k - 2:])  # as few dropped as leave the reply room
    assert f"the {k} oldest messages" in steps[0][4] and "max_len of 256" in steps[0][4]
    assert steps[-1][1][:len(history)] == history  # the page keeps them
    assert chat_panel.dropped_again("zh", kept).startswith(f"⚠ 最早的 {k} 条消息")


def test_clear_and_another_checkpoint_start_a_new_conversation(chat_models):
    assert chat_panel.clear() == ([], [], "", "", None, None, "")
    column, note, *rest = chat_panel.on_checkpoint("ui_chat", "en")
    assert column["visible"] is True and "carries a chat template" in note and rest == list(chat_panel.clear())


# ---------------------------------------------------------------------- without a template, bad input
def test_a_checkpoint_without_a_template_says_why_and_how(chat_models):
    for name in ("ui_gpt", "ui_bert", "ui_t5"):
        column, note, *_ = chat_panel.on_checkpoint(name, "en")
        assert column["visible"] is False and "no chat template" in note and "zoo convert FILE.gguf" in note
    zh = chat_panel.note("ui_gpt", "zh")
    assert "不带对话模板" in zh and "zoo convert HF_DIR runs/NAME" in zh
    assert chat_panel.note("../../etc/passwd") == ""  # the tab's own error box speaks for a bad name
    *_, last = send("ui_gpt", "hi", lang="zh")
    assert last[:6] == (gr.skip(),) * 6
    record, box = last[6:]
    assert "检查点 'ui_gpt' 不带对话模板" in box and "修改建议: 转换一个指令模型" in box
    assert "carries no chat template" in common.error_again("en", record)


@pytest.mark.parametrize("name, message, system, want", [
    ("ui_chat", "   ", "", "问题: 请先输入一条消息"),
    ("ui_chat", "x" * (common.LIMITS["text_chars"] + 1), "", "message = 4001 超过了界面允许的上限 4000"),
    ("ui_chat", "x" * 300, "", "这条消息按模板格式需要"),  # more tokens than max_len, even alone
    ("ui_chat_gemma", "hi", "Be brief.", "问题: 模板拒绝了这段对话：「System role not supported」"),
    ("../../etc/passwd", "hi", "", "'../../etc/passwd' 不是检查点名称"),
])
def test_bad_input_is_a_message_in_chinese_and_the_conversation_stays(chat_models, name, message, system, want):
    history = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}]
    steps = send(name, message, history, system=system, lang="zh")
    assert len(steps) == 1
    out = steps[0]
    assert out[:6] == (gr.skip(),) * 6  # neither the conversation nor the message box changes
    assert want in out[-1] and "修改建议" in out[-1] and "Traceback" not in out[-1]


def test_the_gemma_template_chats_without_a_system_message(chat_models, sent):
    _, models = chat_models
    _, tok = models["ui_chat_gemma"]
    steps = send("ui_chat_gemma", "hi")
    assert steps[-1][-1] == {"__type__": "update"} and steps[0][-1] == ""
    assert sent[-1][0] == tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                                  tokenize=False)
    assert "<end_of_turn>" in chat_panel.note("ui_chat_gemma")


def test_the_panel_is_in_the_tab_and_follows_the_language(chat_models):
    from zoo.ui.app import build_app

    demo = build_app()
    tr = demo.zoo_translator
    by_id = {getattr(c, "elem_id", None): c for c in demo.blocks.values()}
    for elem in ("run-chat", "run-chat-bot", "run-chat-message", "run-chat-send", "run-chat-clear",
                 "run-chat-prompt", "run-chat-error", "run-chat-note"):
        assert elem in by_id, elem
    values = [("ui_gpt" if getattr(c, "elem_id", None) == "run-checkpoint" else None) for c in tr.switch_inputs]
    updates = dict(zip(map(id, tr.switch_outputs), tr.switch("zh", values)))
    assert "不带对话模板" in updates[id(by_id["run-chat-note"])]["value"]
    assert updates[id(by_id["run-chat-send"])]["value"] == "发送"
    assert updates[id(by_id["run-chat-bot"])]["label"] == "对话记录"


# ---------------------------------------------------------------------- in Chromium
CHROMIUM = "/usr/bin/chromium"


def visible(text: str) -> str:
    """A random model's reply as a page shows it: no control characters, no white space."""
    return "".join(c for c in text if not c.isspace() and not unicodedata.category(c).startswith("C"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve_with_checkpoints(tmp_path_factory) as url:
        make_chat_checkpoint(Path(os.environ["ZOO_CHECKPOINTS"]), tmp_path_factory.mktemp("hf"))
        yield url


@pytest.mark.browser
@pytest.mark.slow
def test_chat_in_the_browser(server):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"browser tests need Debian's Chromium at {CHROMIUM}: apt-get install chromium")
    sync_api = pytest.importorskip("playwright.sync_api")
    from test_ui_browser import ARGS, LOCAL, SHOTS, choose

    expect = sync_api.expect
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000}, locale="en-US")
        outside: list[str] = []
        page.on("request", lambda r: None if r.url.startswith(LOCAL) else outside.append(r.url))
        page.set_default_timeout(60_000)
        page.goto(server)
        page.locator("button[role=tab]", has_text="Run").click()
        choose(page, "run-checkpoint", "ui_gpt")
        note = page.locator("#run-chat-note")
        expect(note).to_contain_text("no chat template", timeout=30_000)
        expect(page.locator("#run-chat-send")).to_be_hidden()
        page.locator("#run-refresh").click()
        choose(page, "run-checkpoint", "ui_chat")
        expect(note).to_contain_text("carries a chat template", timeout=30_000)
        page.locator("#run-max-new-tokens input[type=number]").fill("24")
        page.locator("#run-temperature input[type=number]").fill("0")
        box = page.locator("#run-chat-message textarea")
        box.fill("Hello <b>there</b>!")
        page.locator("#run-chat-send").click()
        bot = page.locator("#run-chat-bot")
        expect(bot).to_contain_text("Hello <b>there</b>!", timeout=30_000)  # the user's text, as typed
        model = zoo.load(Path(os.environ["ZOO_CHECKPOINTS"]) / "ui_chat")
        want = visible(model.chat([{"role": "user", "content": "Hello <b>there</b>!"}], max_new_tokens=24))
        assert len(want) > 4
        for _ in range(600):  # the streamed reply arrives (a random model's bytes: compared as shown)
            if want in visible(bot.inner_text()):
                break
            page.wait_for_timeout(100)
        assert want in visible(bot.inner_text()), (want, bot.inner_text())
        expect(box).to_have_value("")
        page.locator("#run-chat-prompt-box").get_by_text("Prompt the model reads").click()
        expect(page.locator("#run-chat-prompt textarea")).to_have_value(
            zoo.run.chat.prompt(model, [{"role": "user", "content": "Hello <b>there</b>!"}]))
        page.screenshot(path=str(SHOTS / "chat.png"), full_page=True)
        page.locator("#lang-switch label", has_text="中文").click()
        expect(note).to_contain_text("该检查点带有对话模板")
        expect(page.locator("#run-chat-send")).to_have_text("发送")
        assert want in visible(bot.inner_text())  # the conversation stays
        box.fill("")
        page.locator("#run-chat-send").click()
        expect(page.locator("#run-chat-error")).to_contain_text("请先输入一条消息")
        page.screenshot(path=str(SHOTS / "chat_zh.png"), full_page=True)
        browser.close()
    assert not outside, f"the page requested outside 127.0.0.1: {outside}"

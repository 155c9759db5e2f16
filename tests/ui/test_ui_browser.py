"""Real-browser tests: Playwright drives Debian's Chromium (never a downloaded browser) against the UI
on 127.0.0.1.  Flows: build a model (form -> YAML -> table -> save), trigger a validation error and
see the message, run a checkpoint, open an attention heatmap and use the calculator, switch to 中文;
and a newcomer's first hour (issue 14): every shipped model runs from its example with the defaults,
``<mask>`` shows in the card, Compare's two columns and Verify's columns fit 1280x800 and 1920x1080,
plot titles are not hidden, an error reads in Chinese, hovering a heatmap cell shows its weight.

Chromium: ``apt-get install chromium`` (``.ci/run`` does it); without ``/usr/bin/chromium`` the module
is skipped with that reason.  Every test fails if the page requests anything outside 127.0.0.1 (the
resolver maps every other host to nowhere, and each request is also checked).  Screenshots of each
flow go to ``$ZOO_UI_SHOTS`` (default ``artifacts/ui/``, gitignored).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

pytest.importorskip("gradio")
playwright = pytest.importorskip("playwright.sync_api")

from ui_support import run_checkpoint_name, serve_with_checkpoints  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"]
SHOTS = Path(os.environ.get("ZOO_UI_SHOTS") or Path(__file__).resolve().parents[2] / "artifacts" / "ui")
LOCAL = ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "about:")
TIMEOUT = 60_000

if not Path(CHROMIUM).exists():
    pytest.skip(f"browser tests need Debian's Chromium at {CHROMIUM}: apt-get install chromium "
                "(.ci/run installs it; the tests never download a browser)", allow_module_level=True)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve_with_checkpoints(tmp_path_factory) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def viewport():
    return {"width": 1400, "height": 1000}


@pytest.fixture
def page(browser, server, request, viewport):
    """A fresh page on the UI; after the test, no request may have left 127.0.0.1."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport=viewport, locale="en-US")
    pg = context.new_page()
    outside: list[str] = []
    pg.on("request", lambda r: None if r.url.startswith(LOCAL) else outside.append(r.url))
    pg.on("websocket", lambda ws: None if ws.url.startswith(LOCAL) else outside.append(ws.url))
    pg.set_default_timeout(TIMEOUT)
    pg.goto(server)
    pg.wait_for_selector("#build-status")
    yield pg
    try:
        pg.screenshot(path=str(SHOTS / f"{request.node.name}.png"), full_page=True)
    finally:
        context.close()
    assert not outside, f"the page requested outside 127.0.0.1: {outside}"


playwright.expect.set_options(timeout=30_000)  # a shared 2-core machine can be slow


def expect(locator):
    return playwright.expect(locator)


def n_params(**overrides) -> str:
    import zoo

    model = zoo.build("gpt_tiny", **overrides)
    return f"{sum(p.numel() for p in model.parameters()):,}"


def set_yaml(page, text: str) -> None:
    """Replace the YAML editor's text the way a user would (select all, type)."""
    editor = page.locator("#build-yaml .cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(text)
    page.locator("#build-status").click()  # leave the editor (blur)


def yaml_text(page) -> str:
    return page.locator("#build-yaml .cm-content").inner_text()


def choose(page, elem_id: str, value: str) -> None:
    box = page.locator(f"#{elem_id} input")
    box.click()
    box.fill(value)
    page.keyboard.press("Enter")
    page.locator("body").click(position={"x": 5, "y": 5})


def test_build_a_model_and_save_it(page):
    expect(page.locator("#build-status")).to_contain_text(n_params())  # gpt_tiny
    layers = page.locator("#build-num_layers input")
    layers.fill("2")
    layers.press("Tab")
    expect(page.locator("#build-yaml")).to_contain_text("num_layers: 2")
    expect(page.locator("#build-status")).to_contain_text(n_params(num_layers=2))
    expect(page.locator("#build-diagram")).to_contain_text("× 2")
    # a component from the registry, and its parameters as generated fields
    choose(page, "build-positions", "rope")
    expect(page.locator("#build-yaml")).to_contain_text("positions: rope")
    expect(page.locator("#build-diagram")).to_contain_text("rotates q and k")
    # typed once, right after the component change: a re-render of the same fields keeps what is
    # typed, and a render draws the YAML as it is (issue 23: the value used to be replaced by the
    # default when the fields rendered a second time)
    base = page.locator("#param-positions-base input")
    expect(base).to_be_visible()
    base.fill("500")
    base.press("Enter")
    expect(page.locator("#build-yaml")).to_contain_text("base: 500")
    page.wait_for_timeout(1500)  # any late render has arrived: the field still shows the typed value
    expect(page.locator("#param-positions-base input")).to_have_value("500")
    page.locator("#build-save-name input, #build-save-name textarea").first.fill("browser_model")
    page.locator("#build-save").click()
    expect(page.locator("#build-saved")).to_contain_text("browser_model")
    page.screenshot(path=str(SHOTS / "build_saved.png"), full_page=True)
    # the saved model is offered in Run right away
    page.locator("button[role=tab]", has_text="Run").click()
    page.locator("#run-checkpoint input").click()
    expect(page.locator("ul[role=listbox] li", has_text="browser_model")).to_be_visible()
    page.locator("ul[role=listbox] li", has_text="browser_model").click()
    expect(page.locator("#run-card")).to_contain_text("rope")


def test_validation_error_shows_the_field_and_the_fix(page):
    text = yaml_text(page)
    assert "attention: sdpa" in text
    set_yaml(page, text.replace("attention: sdpa", "attention: sdpx"))
    status = page.locator("#build-status")
    expect(status).to_contain_text("attention.kind")
    expect(status).to_contain_text("did you mean 'sdpa'")
    page.screenshot(path=str(SHOTS / "build_invalid.png"), full_page=True)
    # fixing the YAML brings the form and the table back
    set_yaml(page, text.replace("num_layers: 4", "num_layers: 3"))
    expect(status).to_contain_text("Valid spec")
    expect(page.locator("#build-num_layers input")).to_have_value("3")


def test_run_a_checkpoint(page):
    page.locator("button[role=tab]", has_text="Run").click()
    name = run_checkpoint_name()
    choose(page, "run-checkpoint", name)
    expect(page.locator("#run-card")).to_contain_text(name)
    if name != "ui_gpt":  # a shipped checkpoint: its model card's loss curve is embedded, not fetched
        expect(page.locator("#run-card img").first).to_be_visible()
    page.locator("#run-prompt textarea").fill("床前明月光")
    page.locator("#run-max-new-tokens input[type=number]").fill("24")
    page.locator("#run-go").click()
    output = page.locator("#run-output textarea")
    expect(output).not_to_have_value("", timeout=TIMEOUT)
    page.screenshot(path=str(SHOTS / "run.png"), full_page=True)
    # a bad name typed into the box is refused with a visible message that stays, not a dead page
    choose(page, "run-checkpoint", "../../etc/passwd")
    page.locator("#run-go").click()
    box = page.locator("#run-error")
    expect(box).to_contain_text("not a checkpoint name")
    expect(box).to_contain_text("Where: checkpoint")
    expect(box).to_contain_text("Fix: pick a name from the list")
    page.wait_for_timeout(11_000)  # longer than a toast lives
    expect(box).to_contain_text("not a checkpoint name")
    # the next action clears it
    choose(page, "run-checkpoint", name)
    page.locator("#run-go").click()
    expect(box).not_to_contain_text("not a checkpoint name")


def test_attention_heatmap_and_the_calculator(page):
    page.locator("button[role=tab]", has_text="Inspect").click()
    choose(page, "inspect-checkpoint", "ui_bert")
    page.locator("#inspect-text textarea, #inspect-text input").first.fill("床前明月光")
    page.locator("#inspect-go").click()
    expect(page.locator("#inspect-attn td.cell").first).to_be_visible(timeout=TIMEOUT)
    expect(page.locator("#inspect-grid img").first).to_be_visible()
    expect(page.locator("#inspect-mask img").first).to_be_visible()
    page.screenshot(path=str(SHOTS / "inspect_heatmap.png"), full_page=True)
    # the lecture's numbers, on the page
    expect(page.locator("#calc-weights")).to_contain_text("0.4011")
    expect(page.locator("#calc-weights")).to_contain_text("0.1978")
    expect(page.locator("#calc-explain")).to_contain_text("6.0165")
    page.locator("#calc-mask-kind label", has_text="causal").click()
    expect(page.locator("#calc-explain")).to_contain_text("masked out")
    page.locator("#calc-explain").screenshot(path=str(SHOTS / "calculator.png"))


def test_switch_to_chinese(page):
    page.locator("#lang-switch label", has_text="中文").click()
    expect(page.locator("button[role=tab]", has_text="搭建")).to_be_visible()
    expect(page.locator("button[role=tab]", has_text="运行")).to_be_visible()
    expect(page.locator("#app-title")).to_contain_text("模型动物园")
    expect(page.locator("#build-yaml")).to_contain_text("arch")  # content unchanged
    expect(page.locator("#build-table")).to_contain_text("参数量")  # table headers follow
    expect(page.locator("#build-diagram")).to_contain_text("自注意力")
    expect(page.get_by_text("层数").first).to_be_visible()
    # messages follow the language too
    set_yaml(page, yaml_text(page).replace("attention: sdpa", "attention: sdpx"))
    expect(page.locator("#build-status")).to_contain_text("修改建议")
    page.screenshot(path=str(SHOTS / "chinese.png"), full_page=True)
    page.locator("button[role=tab]", has_text="插件").click()
    expect(page.locator("#plugins-table")).to_contain_text("版本")  # static tables' headers too
    expect(page.locator("#plugins-table")).to_contain_text("zoo.attention_eager")
    page.screenshot(path=str(SHOTS / "chinese_plugins.png"), full_page=True)
    page.locator("#lang-switch label", has_text="English").click()
    expect(page.locator("button[role=tab]", has_text="Build")).to_be_visible()


def test_verify_tab_runs_the_reference_checks(page):
    page.locator("button[role=tab]", has_text="Verify").click()
    page.locator("#verify-go").click()
    expect(page.locator("#verify-summary")).to_contain_text(re.compile(r"(\d+) of \1 checks passed"),
                                                             timeout=TIMEOUT)
    page.screenshot(path=str(SHOTS / "verify.png"), full_page=True)


# ---------------------------------------------------------------------- a newcomer's first hour (issue 14)
def _shipped() -> list[str]:
    import zoo
    from zoo.ui.run_tab import EXAMPLES

    return [n for n in EXAMPLES if n in zoo.list_checkpoints()]


def test_every_shipped_model_runs_from_its_example_with_the_defaults(page):
    """One click on an example picks the checkpoint and runs it with the tab's defaults (64 new
    tokens, sampling on); numerals_t5 (max_len 32) used to fail with exactly these defaults."""
    import cn2an

    names = _shipped()
    if not names:
        pytest.skip("no shipped checkpoints in this checkout")
    page.locator("button[role=tab]", has_text="Run").click()
    output, fills, error = page.locator("#run-output textarea"), page.locator("#run-fill"), page.locator("#run-error")
    for name in names:
        page.locator("#tab-run tr", has_text=name).first.click()
        expect(page.locator("#run-card")).to_contain_text(name)
        if name == "poet_bert":  # an encoder fills the mask: candidates with probabilities
            expect(fills).to_contain_text(re.compile(r"\(0\.\d{3}\)"), timeout=TIMEOUT)
        elif name == "numerals_t5":  # an independent library says what 10086 is in Chinese
            expect(output).to_have_value(cn2an.an2cn("10086"), timeout=TIMEOUT)
            expect(page.locator("#run-max-new-tokens input[type=number]")).to_have_value("32")  # its max_len
        else:
            expect(output).not_to_have_value(re.compile(r"^$"), timeout=TIMEOUT)
        expect(error).not_to_contain_text("Error")
        page.screenshot(path=str(SHOTS / f"example_{name}.png"), full_page=True)


def test_special_tokens_are_shown_not_swallowed(page):
    """`<mask>` in a model card and `'<eos>'`-like tokens in Inspect's next-token line are text."""
    from zoo.ui import inspect_tab

    page.locator("button[role=tab]", has_text="Run").click()
    card_name = "poet_bert" if "poet_bert" in _shipped() else "ui_bert"
    choose(page, "run-checkpoint", card_name)
    expect(page.locator("#run-card")).to_contain_text("<mask>")
    page.locator("#run-card").screenshot(path=str(SHOTS / "card_mask_visible.png"))
    name = "poet_gpt" if "poet_gpt" in _shipped() else "ui_gpt"
    text = "床前明月光，疑是地上霜。"
    want = inspect_tab.inspect(name, text, "decoder", 0, 0)["next"]
    page.locator("button[role=tab]", has_text="Inspect").click()
    choose(page, "inspect-checkpoint", name)
    page.locator("#inspect-text textarea, #inspect-text input").first.fill(text)
    page.locator("#inspect-go").click()
    expect(page.locator("#inspect-next")).to_contain_text(want, timeout=TIMEOUT)  # every token, in full
    # the heatmap's column label of a full-width ，/。 keeps its horizontal shape: set vertically
    # (writing-mode on the cell) Chromium gave it its vertical form, which read as "’" (issue 34)
    expect(page.locator("#inspect-attn th.key").first).to_be_visible(timeout=TIMEOUT)
    labels = page.evaluate("""() => [...document.querySelectorAll('#inspect-attn .zoo-attn > table th.key')].map(th =>
        [th.textContent, getComputedStyle(th).writingMode,
         th.firstElementChild ? getComputedStyle(th.firstElementChild).writingMode : null])""")
    comma = [row for row in labels if row[0] in ("，", "。")]
    assert comma and all(row[1:] == ["horizontal-tb", "horizontal-tb"] for row in comma), labels


def _inside(page, locator, width: int) -> None:
    """Every element of ``locator`` lies inside the viewport horizontally (bounding boxes)."""
    n = locator.count()
    assert n > 0
    for i in range(n):
        box = locator.nth(i).bounding_box()
        assert box is not None, f"element {i} is not rendered"
        assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, \
            f"element {i} ({locator.nth(i).inner_text()[:40]!r}) spans {box['x']:.0f}..{box['x'] + box['width']:.0f} px " \
            f"in a {width} px window"


def _title_clear_of_label(page, elem_id: str) -> None:
    """A plot's floating label must end above the figure (whose title is drawn at its top)."""
    label = page.locator(f"#{elem_id} [data-testid=block-label]").bounding_box()
    image = page.locator(f"#{elem_id} img").first.bounding_box()
    assert label and image and image["y"] >= label["y"] + label["height"] - 0.5, (elem_id, label, image)


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}, {"width": 1920, "height": 1080}],
                         ids=["1280x800", "1920x1080"])
def test_layout_holds_at_common_sizes(page, viewport):
    width = viewport["width"]
    tag = f"{width}x{viewport['height']}"
    # Build: the cost plot's title is not under its label; every column of the cost table shows
    _title_clear_of_label(page, "build-cost")
    _inside(page, page.locator("#build-memory th"), width)
    page.screenshot(path=str(SHOTS / f"layout_build_{tag}.png"), full_page=True)
    # Compare: two checkpoints with long text outputs; both columns stay on screen
    page.locator("button[role=tab]", has_text="Compare").click()
    choose(page, "cmp-a", "checkpoint: ui_gpt")
    choose(page, "cmp-b", "checkpoint: ui_t5")
    page.locator("#cmp-b-over input, #cmp-b-over textarea").first.fill("")
    page.locator("#cmp-prompt input, #cmp-prompt textarea").first.fill("The cat sat on the mat. " * 8)
    page.locator("#cmp-go").click()
    table = page.locator("#cmp-table")
    expect(table).to_contain_text("output on the prompt", timeout=TIMEOUT)
    _inside(page, page.locator("#cmp-a, #cmp-b"), width)
    _inside(page, table.locator("th"), width)
    _inside(page, table.locator("td"), width)
    page.screenshot(path=str(SHOTS / f"layout_compare_{tag}.png"), full_page=True)
    # Verify: every column, the error and tolerance included
    page.locator("button[role=tab]", has_text="Verify").click()
    page.locator("#verify-go").click()
    expect(page.locator("#verify-summary")).to_contain_text("checks passed", timeout=TIMEOUT)
    headers = page.locator("#verify-table th")
    expect(headers.filter(has_text="tolerance")).to_have_count(1)
    _inside(page, headers, width)
    page.screenshot(path=str(SHOTS / f"layout_verify_{tag}.png"))
    # Inspect: the figures' titles are clear of their labels too
    page.locator("button[role=tab]", has_text="Inspect").click()
    choose(page, "inspect-checkpoint", "ui_gpt")
    page.locator("#inspect-go").click()
    expect(page.locator("#inspect-grid img").first).to_be_visible(timeout=TIMEOUT)
    for elem_id in ("inspect-grid", "inspect-mask", "inspect-positions"):
        _title_clear_of_label(page, elem_id)
    page.screenshot(path=str(SHOTS / f"layout_inspect_{tag}.png"), full_page=True)


def test_errors_read_in_chinese(page):
    page.locator("#lang-switch label", has_text="中文").click()
    expect(page.locator("button[role=tab]", has_text="搭建")).to_be_visible()
    expect(page.locator("#build-status")).to_contain_text("规格有效")  # the switch has re-validated
    set_yaml(page, yaml_text(page).replace("attention: sdpa", "attention: banana"))
    status = page.locator("#build-status")
    expect(status).to_contain_text("问题: 没有名为 'banana' 的注意力实现")
    expect(status).to_contain_text("修改建议: 安装提供它的插件")
    expect(page.locator("#build-diagram")).to_contain_text("规格无效")  # not the previous spec's diagram
    page.screenshot(path=str(SHOTS / "chinese_error_build.png"), full_page=True)
    page.locator("button[role=tab]", has_text="运行").click()
    choose(page, "run-checkpoint", "../../etc/passwd")
    page.locator("#run-go").click()
    box = page.locator("#run-error")
    expect(box).to_contain_text("错误")
    expect(box).to_contain_text("不是检查点名称")
    expect(box).to_contain_text("修改建议: 请从列表中选择名称")
    page.screenshot(path=str(SHOTS / "chinese_error_run.png"), full_page=True)


def test_switching_presets_hands_no_value_to_a_widget_of_another_type(page):
    """issue 23: loading a preset whose parameter rows start with a new one (t5_tiny's positions
    after bert_tiny) handed the old feed-forward activation to a number box for a moment; Chromium
    said 'The specified value "gelu" cannot be parsed'.  Each family now has a fixed slot."""
    said: list[str] = []
    page.on("console", lambda m: said.append(m.text))
    for preset in ("bert_tiny", "t5_tiny", "llama_tiny", "gpt_tiny"):
        choose(page, "build-preset", preset)
        page.locator("#build-load").click()
        expect(page.locator("#build-yaml")).to_contain_text(f"name: {preset}")
        page.wait_for_timeout(1500)  # the parameter fields re-render after the YAML
    expect(page.locator("#param-positions-base input")).to_have_value("10000")  # gpt_tiny: sinusoidal
    assert not [m for m in said if "cannot be parsed" in m], said


def test_build_hints_a_decoder_that_sees_the_future(page):
    set_yaml(page, yaml_text(page).replace("mask: causal", "mask: bidirectional"))
    status = page.locator("#build-status")
    expect(status).to_contain_text("Valid spec")
    expect(status).to_contain_text("cannot generate text left to right")


def test_hovering_a_heatmap_cell_shows_its_weight(page):
    """The page's numbers are the model's: the weights the library's own trace gives."""
    import torch

    import zoo
    from zoo.ui import common

    model = zoo.load(common.checkpoint_path("ui_gpt"))
    trace = zoo.trace(model, torch.tensor([model.tokenizer.encode("abc")]))
    page.locator("button[role=tab]", has_text="Inspect").click()
    choose(page, "inspect-checkpoint", "ui_gpt")
    page.locator("#inspect-text textarea, #inspect-text input").first.fill("abc")
    page.locator("#inspect-go").click()
    heat = page.locator("#inspect-attn .zoo-attn > table")
    cell = heat.locator("td.cell[data-q='2'][data-k='1']")
    expect(cell).to_be_visible(timeout=TIMEOUT)
    cell.hover()
    w = float(trace["decoder.blocks.0.attn.weights"][0, 0, 2, 1])
    readout = page.locator("#inspect-attn .zoo-readout")
    expect(readout).to_contain_text(f"query 2 'c' → key 1 'b' · layer 0 · head 0 · weight {w:.4f}")
    page.locator("#inspect-attn").screenshot(path=str(SHOTS / "heatmap_hover.png"))
    # click a query token: what it attends to in every layer and head
    heat.locator("th.query", has_text="b").click()
    across = page.locator("#inspect-attn .zoo-across")
    expect(across).to_contain_text("every layer and head: query 1 'b'")
    rows = across.locator("tr:has(td)")
    expect(rows).to_have_count(2 * 4)  # ui_gpt: 2 layers x 4 heads
    across.locator("tr", has_text="layer 1 · head 2").locator("td.cell[data-k='0']").hover()
    w = float(trace["decoder.blocks.1.attn.weights"][0, 2, 1, 0])
    expect(readout).to_contain_text(f"query 1 'b' → key 0 'a' · layer 1 · head 2 · weight {w:.4f}")
    page.locator("#inspect-attn").screenshot(path=str(SHOTS / "heatmap_across_heads.png"))


def test_output_made_before_a_switch_follows_the_language(page):
    """issue 23: a result on the page when the language changes is drawn again in the new language
    (from the data its handler kept), not left in the old one: the fill-mask table's headers, the Run
    tab's speed line, Compare's metric names."""
    page.locator("button[role=tab]", has_text="Run").click()
    choose(page, "run-checkpoint", "ui_bert")
    page.locator("#run-prompt textarea").fill("床前<mask>光")
    page.locator("#run-go").click()
    fills = page.locator("#run-fill")
    expect(fills).to_contain_text(re.compile(r"\(0\.\d{3}\)"), timeout=TIMEOUT)
    expect(fills).to_contain_text("candidates (probability)")
    page.locator("#lang-switch label", has_text="中文").click()
    expect(fills).to_contain_text("候选（概率）")
    expect(fills).to_contain_text(re.compile(r"\(0\.\d{3}\)"))  # the same candidates, not a blank table
    page.locator("#lang-switch label", has_text="English").click()
    expect(fills).to_contain_text("candidates (probability)")
    # a generation's speed line
    choose(page, "run-checkpoint", "ui_gpt")
    page.locator("#run-prompt textarea").fill("abc")
    page.locator("#run-max-new-tokens input[type=number]").fill("8")
    page.locator("#run-go").click()
    speed = page.locator("#run-speed")
    expect(speed).to_contain_text("tokens/s", timeout=TIMEOUT)
    rate = re.search(r"([\d.]+) tokens/s", speed.inner_text()).group(1)
    page.locator("#lang-switch label", has_text="中文").click()
    expect(speed).to_contain_text(f"每秒 {rate} 个 token")  # the same measurement, in Chinese
    expect(speed).not_to_contain_text("tokens/s")
    page.screenshot(path=str(SHOTS / "switch_after_run.png"), full_page=True)
    # Compare: the table's metric names
    page.locator("button[role=tab]", has_text="对比").click()
    page.locator("#cmp-go").click()
    table = page.locator("#cmp-table")
    expect(table).to_contain_text("参数量", timeout=TIMEOUT)
    page.locator("#lang-switch label", has_text="English").click()
    expect(table).to_contain_text("parameters")
    expect(table).not_to_contain_text("参数量")


def test_an_error_on_the_page_follows_the_language(page):
    """issue 23: a tab's error box made in English reads in Chinese after the switch (the box keeps
    the error's parts and words them again), and back."""
    page.locator("button[role=tab]", has_text="Run").click()
    choose(page, "run-checkpoint", "../../etc/passwd")
    page.locator("#run-go").click()
    box = page.locator("#run-error")
    expect(box).to_contain_text("not a checkpoint name")
    page.locator("#lang-switch label", has_text="中文").click()
    expect(box).to_contain_text("'../../etc/passwd' 不是检查点名称")
    expect(box).to_contain_text("修改建议: 请从列表中选择名称")
    page.screenshot(path=str(SHOTS / "switch_after_error.png"), full_page=True)
    page.locator("#lang-switch label", has_text="English").click()
    expect(box).to_contain_text("Fix: pick a name from the list")

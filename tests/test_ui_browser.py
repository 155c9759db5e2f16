"""Real-browser tests: Playwright drives Debian's Chromium (never a downloaded browser) against the UI
on 127.0.0.1.  Flows: build a model (form -> YAML -> table -> save), trigger a validation error and
see the message, run a checkpoint, open an attention heatmap and use the calculator, switch to 中文.

Every test fails if the page requests anything outside 127.0.0.1 (the resolver maps every other
host to nowhere, and each request is also checked).  Screenshots of each flow go to
``artifacts/ui/`` (gitignored).
"""
from __future__ import annotations

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
SHOTS = Path(__file__).resolve().parents[1] / "artifacts" / "ui"
LOCAL = ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "about:")
TIMEOUT = 60_000

if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)", allow_module_level=True)


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
def page(browser, server, request):
    """A fresh page on the UI; after the test, no request may have left 127.0.0.1."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale="en-US")
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
    base = page.locator("#param-positions-base input")
    expect(base).to_be_visible()
    base.fill("500")
    base.press("Enter")
    expect(page.locator("#build-yaml")).to_contain_text("base: 500")
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
    page.locator("#run-max-new input[type=number]").fill("24")
    page.locator("#run-go").click()
    output = page.locator("#run-output textarea")
    expect(output).not_to_have_value("", timeout=TIMEOUT)
    page.screenshot(path=str(SHOTS / "run.png"), full_page=True)
    # a bad name typed into the box is refused with a visible message, not a dead page
    choose(page, "run-checkpoint", "../../etc/passwd")
    page.locator("#run-go").click()
    expect(page.locator(".toast-body").first).to_contain_text("not a checkpoint name")


def test_attention_heatmap_and_the_calculator(page):
    page.locator("button[role=tab]", has_text="Inspect").click()
    choose(page, "inspect-checkpoint", "ui_bert")
    page.locator("#inspect-text textarea, #inspect-text input").first.fill("床前明月光")
    page.locator("#inspect-go").click()
    expect(page.locator("#inspect-heatmap img").first).to_be_visible(timeout=TIMEOUT)
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

"""The UI points of issue 23 ("a newcomer's second hour"), in a real browser and at handler level.

Browser flows (Debian's Chromium through Playwright, as in tests/ui/test_ui_browser.py; screenshots go
to ``artifacts/ui/second_hour/``, gitignored, and were checked by eye):

- a clicked example shows its result inside the viewport, at 1280x800 and at 1920x1080;
- after switching to 中文, clicking an example keeps the labels Chinese, and the Examples headers
  and the card's room line are Chinese;
- a layer number out of range lands in the Inspect tab's error box, and no Gradio pop-up appears;
- the layers x heads grid's labels are at least ~10 px high at 1280 wide;
- the model card's code is not cut at the card's right edge; the Compare label has no backticks;
- a decoder shows no (empty) fill-mask table, and poet_bert no sampling sliders;
- the Verify table does not split words.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("gradio")

from ui_support import free_port, serve_with_checkpoints  # noqa: E402

import zoo  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"]
SHOTS = Path(os.environ.get("ZOO_UI_SHOTS") or ROOT / "artifacts" / "ui") / "second_hour"
LOCAL = ("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:", "about:")
TIMEOUT = 90_000


# ---------------------------------------------------------------------- handler level (no browser)
def test_card_shows_the_contract_and_no_raw_training_json():
    from zoo.ui.run_tab import model_card

    card = model_card("poet_bert", "en")
    head = card.split("\n\n# poet_bert")[0]  # the lines above the stored card
    assert "input: Chinese text" in head and "example: `春眠不觉晓，处处闻" in head
    assert '"metrics"' not in head  # the trainer's raw JSON
    assert "eval_masked_acc" not in card  # nor its masked accuracy beside the card's honest number
    assert "容量" in model_card("poet_bert", "zh")  # the room line follows the language


def test_run_tab_refuses_outside_the_contract_and_notes_a_normalised_prompt():
    from zoo.ui.run_tab import run_ui

    *_, last = run_ui("numerals_t5", "abc", "zh")
    # in 中文 the refusal is worded in 中文, the contract's own English quoted (issue 34)
    assert "numerals_t5 的输入约定之内" in last[-1] and "10086" in last[-1] and "错误" in last[-1]
    assert "「only the digits 0-9」" in last[-1] and "「「" not in last[-1]
    steps = list(run_ui("numerals_t5", " 42 ", "en"))
    last = steps[-1]
    assert steps[0][-1] == "" and all(s[-1] == {"__type__": "update"} for s in steps[1:])  # cleared once
    assert last[0] == "四十二" and "note" in last[2] and "as '42'" in last[2]
    *_, last = run_ui("poet_gpt", "hello", "en")
    assert "input contract" in last[-1]


def test_what_a_checkpoint_shows_follows_its_architecture():
    from zoo.ui.run_tab import fits_checkpoint, ui_options

    bert, gpt = fits_checkpoint("poet_bert"), fits_checkpoint("poet_gpt")
    assert len(bert) == 1 + len(ui_options())
    assert bert[0]["visible"] is True and all(u["visible"] is False for u in bert[1:])
    assert gpt[0]["visible"] is False and all(u["visible"] is True for u in gpt[1:])


def test_a_layer_out_of_range_is_the_handlers_error_not_gradios():
    from zoo.ui.inspect_tab import index_slider, on_inspect

    slider = index_slider()(0, 3, step=1)
    assert slider.get_block_name() == "slider" and slider.preprocess(9) == 9  # no pop-up
    box = on_inspect("poet_gpt", "床前明月光", "decoder", 9, 0, "en")[-1]
    assert "layer 9 does not exist" in box and "0, 1, 2, 3" in box


def test_inspect_refuses_a_row_of_unk_and_notes_some():
    """poet_gpt given 'hello' drew five <unk> rows without a word."""
    from zoo.ui.inspect_tab import inspect, on_inspect

    box = on_inspect("poet_gpt", "hello", "decoder", 0, 0, "en")[-1]
    assert "5 of the 5 characters" in box and "unknown" in box
    r = inspect("poet_gpt", "床前明月光 ab", "decoder", 0, 0)
    assert "2 of 8 characters unknown" in r["next"] and "'ab'" in r["next"]


def test_the_grid_labels_are_legible_at_1280():
    import matplotlib.text as mtext
    import torch

    from zoo.inside import plots
    from zoo.ui.inspect_tab import GRID_SHOWN_PX, legible_grid

    for L, H in ((4, 5), (12, 12)):
        fig = legible_grid(plots.attention_grid(torch.rand(L, H, 5, 5).softmax(-1), list("床前明月光")))
        px_per_pt = GRID_SHOWN_PX / (72 * fig.get_figwidth())
        sizes = [t.get_fontsize() * px_per_pt for t in fig.findobj(mtext.Text) if t.get_text()]
        assert sizes and min(sizes) >= 10, (L, H, min(sizes))


def test_compare_label_has_no_backticks():
    from zoo.ui.i18n import t

    assert "`" not in t("compare.override", "en") and "`" not in t("compare.override", "zh")


def test_zoo_ui_prints_no_share_hint():
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen([sys.executable, "-m", "zoo.cli", "ui", "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen = ""
    try:
        deadline = time.time() + 240
        while time.time() < deadline and f"127.0.0.1:{port}" not in seen:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            seen += line
        import urllib.request

        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 directly
        for _ in range(120):  # the server answers: the banner came before a working server
            try:
                opener.open(f"http://127.0.0.1:{port}/", timeout=5).read(10)
                break
            except OSError:
                time.sleep(1)
        else:
            raise AssertionError("no server")
        time.sleep(2)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
    seen += rest or ""
    assert f"http://127.0.0.1:{port}" in seen, seen
    assert "share=True" not in seen and "public link" not in seen.replace("no public link", ""), seen


# ---------------------------------------------------------------------- in the browser
browser_only = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"needs Chromium at {CHROMIUM}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve_with_checkpoints(tmp_path_factory) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"needs Chromium at {CHROMIUM}")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


def _page(browser, server, width, height):
    context = browser.new_context(viewport={"width": width, "height": height}, locale="en-US")
    pg = context.new_page()
    outside: list[str] = []
    pg.on("request", lambda r: None if r.url.startswith(LOCAL) else outside.append(r.url))
    pg.set_default_timeout(TIMEOUT)
    pg.goto(server)
    pg.wait_for_selector("#build-status")
    return context, pg, outside


def _shot(pg, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"))  # the viewport, as a person sees it


def _in_viewport(pg, selector: str) -> bool:
    return pg.evaluate("""(sel) => { const r = document.querySelector(sel).getBoundingClientRect();
        return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight + 1; }""", selector)


def _toasts(pg) -> int:
    return pg.locator(".toast-body, .toast-wrap .toast").count()


def _example(pg, text: str):
    pg.locator("#run-examples").get_by_text(text, exact=True).first.click()


@browser_only
@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("size", [(1280, 800), (1920, 1080)])
def test_a_clicked_example_shows_its_result_in_the_viewport(browser, server, size):
    context, pg, outside = _page(browser, server, *size)
    try:
        pg.get_by_role("tab", name="Run").click()
        _example(pg, "10086")
        out = pg.locator("#run-output textarea")
        pg.wait_for_function("() => document.querySelector('#run-output textarea').value === '一万零八十六'")
        time.sleep(0.5)
        _shot(pg, f"example_numerals_{size[0]}x{size[1]}")
        assert out.input_value() == "一万零八十六"
        assert _in_viewport(pg, "#run-output"), "the example's output is outside the viewport"
        # a decoder shows no fill-mask table; the encoder shows it and hides the sampling sliders
        assert not pg.locator("#run-fill").is_visible()
        assert pg.locator("#run-temperature").is_visible()
        _example(pg, "床前明<mask>光，疑是地上霜。")
        pg.wait_for_function("() => document.querySelector('#run-fill') && "
                             "document.querySelector('#run-fill').innerText.includes('月')")
        time.sleep(0.5)
        _shot(pg, f"example_poet_bert_{size[0]}x{size[1]}")
        assert _in_viewport(pg, "#run-fill") or _in_viewport(pg, "#run-error")
        assert pg.locator("#run-fill").is_visible() and not pg.locator("#run-temperature").is_visible()
    finally:
        context.close()
    assert not outside, outside


@browser_only
@pytest.mark.browser
@pytest.mark.slow
def test_chinese_holds_after_an_example(browser, server):
    context, pg, outside = _page(browser, server, 1280, 800)
    try:
        pg.locator("#lang-switch label", has_text="中文").click()
        pg.get_by_role("tab", name="运行").click()
        pg.wait_for_function("() => document.querySelector('#tab-run').innerText.includes('示例：点一下即选中检查点并运行')")
        _example(pg, "10086")
        pg.wait_for_function("() => document.querySelector('#run-output textarea').value === '一万零八十六'")
        time.sleep(1.0)
        _shot(pg, "zh_after_example")
        body = pg.locator("#tab-run").inner_text()
        assert "输入文本" in body and "Input text" not in body, "a label went back to English"
        headers = pg.locator("#run-examples").inner_text()
        assert "检查点" in headers and "Checkpoint" not in headers, headers
        card = pg.locator("#run-card").inner_text()
        assert "容量" in card and "room:" not in card
    finally:
        context.close()
    assert not outside, outside


@browser_only
@pytest.mark.browser
@pytest.mark.slow
def test_inspect_layer_out_of_range_is_in_the_error_box_and_the_grid_is_legible(browser, server):
    context, pg, outside = _page(browser, server, 1280, 800)
    try:
        pg.get_by_role("tab", name="Inspect").click()
        pg.locator("#inspect-checkpoint input").fill("poet_gpt")
        pg.keyboard.press("Enter")
        pg.locator("#inspect-go").click()
        pg.wait_for_selector("#inspect-grid img, #inspect-grid canvas, #inspect-grid svg")
        time.sleep(1.0)
        img = pg.locator("#inspect-grid img").first
        shown = img.bounding_box()["width"]
        natural = pg.evaluate("(el) => el.naturalWidth", img.element_handle())
        # the figure is 1 + 2 H inches at matplotlib's dpi; labels at >= 10 px on the page
        from zoo.inside import plots
        import torch

        from zoo.ui.inspect_tab import legible_grid
        import matplotlib.text as mtext

        fig = legible_grid(plots.attention_grid(torch.rand(4, 5, 6, 6), list("床前明月光，")))
        smallest_pt = min(t.get_fontsize() for t in fig.findobj(mtext.Text) if t.get_text())
        px = smallest_pt / 72 * (natural / fig.get_figwidth()) * (shown / natural)
        img.scroll_into_view_if_needed()
        _shot(pg, "inspect_grid_1280")
        assert px >= 10, (px, shown, natural)
        layer = pg.locator("#inspect-layer input[type=number]")
        layer.fill("9")
        layer.press("Enter")
        pg.locator("#inspect-go").click()
        # the handler's message, in the tab's box; then (a newer action) the page clamps the typed
        # number to the slider's end as the box loses focus, the slider's release traces layer 3 and
        # the box clears: so the message is read as it shows, not after a pause
        pg.wait_for_function("() => document.querySelector('#inspect-error').innerText"
                             ".includes('layer 9 does not exist')")
        _shot(pg, "inspect_layer_out_of_range")
        assert _toasts(pg) == 0, "a Gradio pop-up appeared"
    finally:
        context.close()
    assert not outside, outside


@browser_only
@pytest.mark.browser
@pytest.mark.slow
def test_card_code_compare_label_and_verify_words(browser, server):
    context, pg, outside = _page(browser, server, 1280, 800)
    try:
        pg.get_by_role("tab", name="Run").click()
        pg.locator("#run-checkpoint input").fill("poet_gpt")
        pg.keyboard.press("Enter")
        pg.wait_for_function("() => document.querySelector('#run-card').innerText.includes('poet_gpt')")
        pre = pg.locator("#run-card pre").first
        pre.scroll_into_view_if_needed()
        _shot(pg, "card_code_1280")
        cut = pg.evaluate("(el) => el.scrollWidth > el.clientWidth + 1 && "
                          "getComputedStyle(el).whiteSpace === 'pre'", pre.element_handle())
        assert not cut, "the card's code is cut at the right edge"
        card_box, pre_box = pg.locator("#run-card").bounding_box(), pre.bounding_box()
        assert pre_box["x"] + pre_box["width"] <= card_box["x"] + card_box["width"] + 1
        pg.get_by_role("tab", name="Compare").click()
        label = pg.locator("#cmp-a-over").inner_text() if pg.locator("#cmp-a-over").count() else \
            pg.locator("#tab-compare").inner_text()
        _shot(pg, "compare_label")
        assert "`" not in label and "attention: eager" in label
        pg.get_by_role("tab", name="Verify").click()
        style = pg.evaluate("""() => { const td = document.createElement('td');
            const host = document.querySelector('#verify-table');
            if (!host) return null; const t = host.querySelector('td') || td;
            if (t === td) host.appendChild(td); const s = getComputedStyle(t);
            return [s.wordBreak, s.overflowWrap]; }""")
        _shot(pg, "verify_1280")
        assert style is not None and style[0] != "break-all" and style[0] != "break-word" \
            and style[1] not in ("anywhere", "break-word"), style
    finally:
        context.close()
    assert not outside, outside


def test_shots_folder_is_ignored():
    ignored = subprocess.run(["git", "check-ignore", "-q", "artifacts/ui/second_hour/x.png"], cwd=ROOT)
    assert ignored.returncode == 0 and re.match(r".*", "ok") and zoo


def test_the_cards_layer_line_follows_the_language():
    """The newcomer walk of issue 34 saw "heads" in the card's layer line under 中文."""
    from zoo.ui.run_tab import model_card

    zh, en = model_card("poet_gpt", "zh"), model_card("poet_gpt", "en")
    assert "个注意力头" in zh and " heads," not in zh
    assert " heads," in en and "个注意力头" not in en


ENGLISH_RUN = re.compile(r"[A-Za-z]{2,}(?:[ '’-]+[A-Za-z]{2,}){2,}")  # three English words in a row


@pytest.mark.parametrize("name", ["numerals_t5", "poet_gpt", "poet_bert"])
def test_the_card_opens_on_its_chinese_and_words_its_contract_in_chinese(name):
    """Issue 34's walk: under 中文 the card's input-contract line was English and the card opened
    on its English sections (its ``## 中文`` at the bottom).  Now zoo's lines are Chinese outside
    the checkpoint author's quoted text and code, and the stored card's Chinese comes first."""
    from zoo.run.input_contract import SUMMARY_WORDS
    from zoo.ui.i18n import CONTRACT_WORDS_ZH
    from zoo.ui.run_tab import model_card

    assert set(CONTRACT_WORDS_ZH) == set(SUMMARY_WORDS)  # every part of the summary has its Chinese
    zh, en = model_card(name, "zh"), model_card(name, "en")
    line = next(x for x in zh.splitlines() if x.startswith("- 输入约定："))
    bare = re.sub(r"「[^」]*」|`[^`]*`", "", line)  # the author's description, the pattern, the example
    assert not ENGLISH_RUN.search(bare), bare
    head = zh.split(f"\n# {name}")[0]  # zoo's own lines, above the stored card
    assert "normalised by" not in head and "example:" not in head and "pattern `" not in head
    stored = zh[zh.index(f"\n# {name}"):]
    assert stored.index("## 中文") < stored.index("## Use") < stored.index("## Spec")
    assert stored.count("## 中文") == 1 and "## English（英文原文）" in stored
    assert stored.index("## 中文") < stored.index("## English（英文原文）") < stored.index("## Use")
    # English: the card as its author wrote it, the Chinese section where it stands
    own = (ROOT / "checkpoints" / name / "README.md").read_text(encoding="utf-8")
    assert "## English" not in en and en.index("## Use") < en.index("## 中文")
    assert "input: " in en and "example: `" in en and own.split("\n")[0] in en


def test_a_card_without_a_chinese_section_stays_as_written():
    from zoo.ui.run_tab import card_in_language

    card = "# m\n\nSome text here.\n\n## Use\n\ncode\n"
    assert card_in_language(card, "zh") == card_in_language(card, "en") == card
    moved = card_in_language("# m\n\nintro words\n\n## A\n\na\n\n## 中文\n\n中文内容\n\n## Spec\n\ns\n", "zh")
    assert moved == "# m\n\n## 中文\n\n中文内容\n\n## English（英文原文）\n\nintro words\n\n## A\n\na\n\n## Spec\n\ns\n"

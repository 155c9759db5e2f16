"""A newcomer's third hour in Chromium (issue 34, goals 4-5): the Interpret tab's result in view
after a click at 1280x800 and 1920x1080, its reset on a checkpoint change, the language switch's
time, and every tab in 中文 without an English sentence outside code, names and numbers.

Same harness as tests/ui/test_ui_browser.py (Debian's Chromium, no request off 127.0.0.1, its
fixtures); screenshots go to ``$ZOO_UI_SHOTS`` (default ``artifacts/ui/``, gitignored).
"""
from __future__ import annotations

import os
import re
import statistics
import time

import pytest

pytest.importorskip("gradio")
pytest.importorskip("playwright.sync_api")

from test_ui_browser import SHOTS, TIMEOUT, browser, choose, expect, page, server, viewport  # noqa: E402,F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]

#: the switch's target (issue 34: it took 5-13 s) and the margin this test allows on a shared machine
TARGET_S, MARGIN = 2.0, 2.0

#: three English words in a row: a sentence left untranslated (one word, a name or `code` is fine)
ENGLISH = re.compile(r"[A-Za-z]{2,}(?:[ '’-]+[A-Za-z]{2,}){2,}")
#: The Run tab's model card is left out: below zoo's own lines (in Chinese, tests/ui/test_ui_second_hour.py)
#: it renders the checkpoint's README as its author wrote it.
#: texts a tab shows that are not the page's own words: Gradio's own placeholder of an editable
#: table (Gradio words it by the browser's locale), and a plugin's description of its component
#: (its author's text, shown as written; Plugins tab)
NOT_OURS = re.compile(r"Drop CSV or TSV files here|^\[(eager|fused sdpa)\]|\(\w[^()]*et al\.|^\w+: [^\n]*\.$"
                      r"|^distribution zoo-|^安装包 zoo-|^(Look-ahead mask|No restriction|Prefix LM)")
TEXTS_JS = """() => {
  const skip = 'code, pre, textarea, input, .cm-editor, script, style, svg, #run-card';
  const out = [], w = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (w.nextNode()) { const e = w.currentNode.parentElement, t = w.currentNode.textContent.trim();
    if (t && e && !e.closest(skip) && e.offsetParent !== null) out.push(t); }
  return out; }"""


def _switch(page, label: str, title: str) -> float:
    """Click the language ``label``; seconds until the title and the last tab read in it."""
    start = time.perf_counter()
    page.locator("#lang-switch label", has_text=label).click()
    page.wait_for_function("([t, p]) => document.querySelector('#app-title').innerText.includes(t) && "
                           "[...document.querySelectorAll('button[role=tab]')].some(b => b.innerText.includes(p))",
                           arg=[title, "插件" if label == "中文" else "Plugins"], polling=50)
    return time.perf_counter() - start


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}, {"width": 1920, "height": 1080}],
                         ids=["1280x800", "1920x1080"])
def test_interpret_results_are_in_view_after_a_click(page, viewport):
    page.locator("button[role=tab]", has_text="Interpret").click()
    choose(page, "interp-checkpoint", "ui_gpt")
    expect(page.locator("#interp-text textarea, #interp-text input").first).to_have_value("The capital of France is")
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("#interp-lens-go").click()
    table = page.locator("#interp-lens-table")
    expect(table).to_be_visible(timeout=TIMEOUT)
    page.wait_for_timeout(500)  # the scroll after the result lands
    box = table.bounding_box()
    assert 0 <= box["y"] and box["y"] + 60 <= viewport["height"], (box, viewport)  # title and first row on screen
    page.screenshot(path=str(SHOTS / f"interp_in_view_{viewport['width']}.png"))


def test_interpret_resets_on_a_checkpoint_change(page):
    page.locator("button[role=tab]", has_text="Interpret").click()
    choose(page, "interp-checkpoint", "ui_gpt")
    page.locator("#interp-lens-go").click()
    expect(page.locator("#interp-lens-table")).to_be_visible(timeout=TIMEOUT)
    choose(page, "interp-checkpoint", "ui_bare")  # no tokenizer: token ids
    text = page.locator("#interp-text textarea, #interp-text input").first
    expect(text).to_have_value("5 17 42 8 33 5 17 42 8")
    expect(page.locator("#interp-lens-table")).to_have_count(0)  # the other model's table is gone
    page.locator("#interp-lens-go").click()
    expect(page.locator("#interp-lens-table")).to_be_visible(timeout=TIMEOUT)
    expect(page.locator("#interp-out")).not_to_contain_text("<unk>")


def test_the_language_switch_is_fast(page):
    """Median of three round trips (中文 and back) within TARGET_S x MARGIN; each time is printed.
    Measured on an idle machine with these checkpoints: about 1 s."""
    page.wait_for_timeout(2000)  # the page's own load events first
    times = []
    for _ in range(3):
        times.append(_switch(page, "中文", "Transformer 模型动物园"))
        times.append(_switch(page, "English", "a Transformer model zoo"))
    print("switch times (s):", [round(x, 2) for x in times], "load", os.getloadavg())
    if os.getloadavg()[0] > 2 * (os.cpu_count() or 1):  # seen: 4.3-8.8 s at load 15 on 2 cores
        pytest.skip(f"the machine is oversubscribed (load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores): "
                    f"switch times {[round(x, 2) for x in times]} s say nothing about the page")
    assert statistics.median(times) <= TARGET_S * MARGIN, times


def test_every_tab_reads_in_chinese(page):
    """Table cells included (they were skipped): the Verify tab runs its reference checks first, so
    its reference and notes columns are read too."""
    _switch(page, "中文", "Transformer 模型动物园")
    left = {}
    for tab in page.locator("button[role=tab]").all():
        name = tab.inner_text()
        tab.click()
        page.wait_for_timeout(800)
        if name.strip() == "校验":
            page.locator("#verify-go").click()
            expect(page.locator("#verify-summary")).to_contain_text("通过", timeout=TIMEOUT)
            page.wait_for_timeout(800)  # the table's rows drawn
        texts = page.evaluate(TEXTS_JS)
        bad = sorted({x for x in texts if ENGLISH.search(x) and not NOT_OURS.search(x)})
        if bad:
            left[name] = bad
        page.screenshot(path=str(SHOTS / f"zh_{len(left)}_{name}.png"), full_page=True)
    assert not left, left


def test_the_activation_is_a_dropdown_of_the_registered_names(page):
    """issue 34: the Build tab's activation was a text box; now a dropdown of the registry's
    ``activation`` family (a plugin's names among them), and a pick writes the YAML."""
    import zoo

    box = page.locator("#param-ffn-activation input")
    expect(box).to_have_value("gelu")  # gpt_tiny
    box.click()
    options = page.locator("ul[role=listbox] li")
    expect(options.first).to_be_visible()
    shown = sorted(o.replace("✓", "").strip() for o in options.all_inner_texts())  # the chosen one is ticked
    assert shown == sorted(zoo.get_registry().names("activation"))
    page.locator("ul[role=listbox] li", has_text="relu").first.click()
    expect(page.locator("#build-yaml .cm-content")).to_contain_text("activation: relu")


def test_a_committed_report_says_it_is_shown_in_english(page):
    """The decision (docs/UI.md): a committed report is data, rendered as written; under 中文 the tab
    says so above it instead of leaving English unannounced."""
    _switch(page, "中文", "Transformer 模型动物园")
    page.locator("button[role=tab]", has_text="实验").click()
    note = page.locator("#exp-report-lang")
    expect(note).to_be_hidden()
    page.locator("#exp-report").click()
    expect(note).to_contain_text("不做翻译", timeout=TIMEOUT)
    expect(page.locator("#exp-gallery img").first).to_be_visible(timeout=TIMEOUT)


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 800}], ids=["1280x800"])
def test_experiments_tab_reads_at_1280(page, viewport):
    """issue 34, goal 6: headers on one line, the trials table's loss column on screen, the
    committed report's figures in view after "Show full report"."""
    page.locator("button[role=tab]", has_text="Experiments").click()
    for table in ("#exp-progress", "#exp-table"):
        heads = page.locator(f"{table} th")
        expect(heads.first).to_be_visible()
        for i in range(heads.count()):
            h = heads.nth(i)
            if not h.inner_text().strip():
                continue
            lines = h.evaluate("e => { const w = document.createTreeWalker(e, NodeFilter.SHOW_TEXT), tops = new Set();"
                               " while (w.nextNode()) { if (!w.currentNode.textContent.trim()) continue;"
                               " const r = document.createRange(); r.selectNodeContents(w.currentNode);"
                               " for (const x of r.getClientRects()) tops.add(Math.round(x.top)); }"
                               " return tops.size; }")
            assert lines == 1, (table, h.inner_text())
    loss = page.locator("#exp-progress th", has_text="loss").first.bounding_box()
    assert loss and loss["x"] + loss["width"] <= viewport["width"], loss
    choose(page, "exp-pick", "grokking")  # the widest committed report table (nine columns, long metrics)
    page.locator("#exp-report").click()
    img = page.locator("#exp-gallery img").first
    expect(img).to_be_visible(timeout=TIMEOUT)
    page.wait_for_timeout(500)
    box = img.bounding_box()
    assert 0 <= box["y"] < viewport["height"], box
    # the report's table breaks no word: a cell without a space is one line ("varian/t", "212,86/4",
    # "wd_1./0" broke at 1280 px under Gradio's prose rule, issue 34)
    broken = page.evaluate("""() => [...document.querySelectorAll('#exp-report-md td, #exp-report-md th')]
        .filter(c => { const t = c.textContent.trim(); if (!t || /\\s/.test(t)) return false;
                       const r = document.createRange(); r.selectNodeContents(c);
                       return new Set([...r.getClientRects()].map(x => Math.round(x.top))).size > 1; })
        .map(c => c.textContent)""")
    assert page.locator("#exp-report-md td").count() > 20 and not broken, broken
    # the figure is shown whole: the image inside the gallery's box, drawn at its own aspect ratio
    # (two columns of square cells cut the loss curve's axis labels: "ain loss", no "step")
    gallery = page.locator("#exp-gallery").bounding_box()
    shown = img.evaluate("i => { const r = i.getBoundingClientRect(), s = getComputedStyle(i);"
                         " return [r.top, r.bottom, i.naturalWidth / i.naturalHeight, s.objectFit]; }")
    assert gallery["y"] <= shown[0] and shown[1] <= gallery["y"] + gallery["height"] + 0.5, (gallery, shown)
    assert shown[3] == "contain", shown
    page.screenshot(path=str(SHOTS / "exp_report_1280.png"))

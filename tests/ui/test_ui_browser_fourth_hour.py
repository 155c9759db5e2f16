"""The layout leftovers of a newcomer's third hour (issue 34), in Chromium at 1280x800 and 1920x1080:
Inspect's and Compare's results in view after a click; every table's headers on one line, short
status cells (CJK included) whole, and every table inside its box, in English and 中文; Build's
component dropdowns laid out evenly at 1920.

Same harness as tests/ui/test_ui_browser.py (Debian's Chromium, no request off 127.0.0.1, its
fixtures); screenshots go to ``$ZOO_UI_SHOTS`` (default ``artifacts/ui/``, gitignored).
"""
from __future__ import annotations

import pytest

pytest.importorskip("gradio")
pytest.importorskip("playwright.sync_api")

from test_ui_browser import SHOTS, TIMEOUT, browser, choose, expect, page, server, viewport  # noqa: E402,F401
from test_ui_browser_third_hour import _switch  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SIZES = [{"width": 1280, "height": 800}, {"width": 1920, "height": 1080}]
AT_1280 = [{"width": 1280, "height": 800}]

#: A table's reading, in the page: per header cell and per shown cell, its text and the number of
#: lines its text is laid out on (distinct tops of the text's line boxes); the table's width and
#: its box's (Gradio 6 draws a Dataframe as a header <table> over rows of <div role=gridcell>).
READ_TABLE_JS = """(root) => {
  const lines = (e) => { const w = document.createTreeWalker(e, NodeFilter.SHOW_TEXT), tops = new Set();
    while (w.nextNode()) { if (!w.currentNode.textContent.trim()) continue;
      const r = document.createRange(); r.selectNodeContents(w.currentNode);
      for (const x of r.getClientRects()) if (x.width > 0) tops.add(Math.round(x.top)); }
    return tops.size; };
  const table = root.querySelector('table'), box = table.parentElement;
  const read = (e) => ({text: e.innerText.trim(), lines: lines(e), col: e.dataset.col});
  return {heads: [...root.querySelectorAll('th')].map(read), cells: [...root.querySelectorAll('[role=gridcell]')].map(read),
          width: table.getBoundingClientRect().width, box: box.getBoundingClientRect().width,
          scrolls: box.scrollWidth > box.clientWidth + 1}; }"""


def read_table(page, elem_id: str) -> dict:
    root = page.locator(f"#{elem_id}")
    expect(root.locator("th").first).to_be_visible()
    return root.evaluate(READ_TABLE_JS)


def problems_of(page, elem_id: str, lang: str, whole_cols: tuple[str, ...] = ()) -> list:
    """What reads badly in table ``elem_id``: a header over more than one line, a cell of
    ``whole_cols`` split over lines, the table wider than its box (or scrolling sideways)."""
    t = read_table(page, elem_id)
    out = []
    broken = [h["text"] for h in t["heads"] if h["text"] and h["lines"] != 1]
    if broken:
        out.append((elem_id, lang, "headers broken over lines", broken))
    split = sorted({c["text"] for c in t["cells"] if c["col"] in whole_cols and c["text"] and c["lines"] != 1})
    if split:
        out.append((elem_id, lang, "cells split over lines", split))
    if t["width"] > t["box"] + 2 or t["scrolls"]:
        out.append((elem_id, lang, f"table {t['width']:.0f} px in a {t['box']:.0f} px box"))
    return out


def _in_view(locator, height: int, what: str) -> dict:
    box = locator.bounding_box()
    assert box is not None, what
    assert 0 <= box["y"] <= height / 2, (what, "top not in the upper half of the window", box, height)
    return box


@pytest.mark.parametrize("viewport", SIZES, ids=["1280x800", "1920x1080"])
def test_inspect_and_compare_results_are_in_view_after_a_click(page, viewport):
    """Inspect: the heatmap began at y=714 of 800 and the page did not move; Compare: only the
    table's header row showed.  Now the result's top is in the upper half and its first rows show."""
    height = viewport["height"]
    page.locator("button[role=tab]", has_text="Inspect").click()
    choose(page, "inspect-checkpoint", "ui_gpt")
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("#inspect-go").click()
    cell = page.locator("#inspect-attn td.cell").first
    expect(cell).to_be_visible(timeout=TIMEOUT)
    page.wait_for_timeout(500)  # the scroll after the result lands
    _in_view(page.locator("#inspect-attn"), height, "Inspect's heatmap")
    first = cell.bounding_box()
    assert first["y"] + first["height"] <= height, ("the heatmap's first row is below the fold", first)
    page.screenshot(path=str(SHOTS / f"inspect_in_view_{viewport['width']}.png"))

    page.locator("button[role=tab]", has_text="Compare").click()
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("#cmp-go").click()
    table = page.locator("#cmp-table")
    expect(table.locator("[role=gridcell]", has_text="max |A − B|")).to_be_visible(timeout=TIMEOUT)
    page.wait_for_timeout(500)
    box = _in_view(table, height, "Compare's table")
    assert box["y"] + box["height"] <= height, ("the table's last rows are below the fold", box)
    page.screenshot(path=str(SHOTS / f"compare_in_view_{viewport['width']}.png"))


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("viewport", AT_1280, ids=["1280x800"])
def test_every_table_reads_at_1280(page, viewport, lang):
    """Verify ("toleranc/e", "✓ 通/过"), Plugins (the components table was 2,829 px wide in a 1,214
    px box), Compare and Build: headers on one line, Verify's verdicts whole, every table inside its
    box."""
    if lang == "zh":
        _switch(page, "中文", "Transformer 模型动物园")
    tabs = page.locator("button[role=tab]")
    found = []
    for elem_id in ("build-table", "build-memory"):
        found += problems_of(page, elem_id, lang)
    tabs.nth(5).click()  # Verify
    page.locator("#verify-go").click()
    expect(page.locator("#verify-table [role=gridcell]").first).to_be_visible(timeout=TIMEOUT)
    page.wait_for_timeout(800)  # the columns measured again for the rows
    found += problems_of(page, "verify-table", lang, whole_cols=("0",))
    verdicts = {c["text"] for c in read_table(page, "verify-table")["cells"] if c["col"] == "0"}
    assert verdicts & ({"✓ 通过", "– 跳过"} if lang == "zh" else {"✓ pass", "– skipped"}), verdicts
    page.screenshot(path=str(SHOTS / f"tables_verify_{lang}_1280.png"))
    tabs.nth(7).click()  # Plugins
    for elem_id in ("plugins-table", "plugins-components"):
        found += problems_of(page, elem_id, lang)
    page.screenshot(path=str(SHOTS / f"tables_plugins_{lang}_1280.png"))
    tabs.nth(4).click()  # Compare, with a prompt: the long text row
    choose(page, "cmp-a", "checkpoint: ui_gpt")
    page.locator("#cmp-prompt input, #cmp-prompt textarea").first.fill("The cat sat on the mat. " * 8)
    page.locator("#cmp-go").click()
    expect(page.locator("#cmp-table [role=gridcell]").first).to_be_visible(timeout=TIMEOUT)
    page.wait_for_timeout(800)
    found += problems_of(page, "cmp-table", lang)
    page.screenshot(path=str(SHOTS / f"tables_compare_{lang}_1280.png"))
    assert not found, found


@pytest.mark.parametrize("viewport", AT_1280, ids=["1280x800"])
def test_the_experiment_tables_read_after_a_run(page, viewport):
    """After a run ("parameter/s", "seed/s" were broken there, not before it): a tiny experiment's
    progress and results tables, in English and then 中文."""
    import yaml

    from test_ui_experiments import TINY

    # names a little longer than the shipped ones ("t5_relative"): the results table must shrink some
    # columns to fit its box, which is where its headers broke
    variants = [{"name": "sinusoidal_positions", "set": {}}, {"name": "wider_feed_forward", "set": {"d_ff": 64}}]
    tiny = dict(TINY, name="ui_tiny_tables", variants=variants, quick={"seeds": 2, "budget": {"steps": 12}})
    page.locator("button[role=tab]", has_text="Experiments").click()
    editor = page.locator("#exp-yaml .cm-content")
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(yaml.safe_dump(tiny, allow_unicode=True, sort_keys=False))
    expect(page.locator("#exp-valid")).to_contain_text("ui_tiny_tables", timeout=TIMEOUT)
    page.locator("#exp-run").click()
    expect(page.locator("#exp-status")).to_contain_text("4 of 4 trials", timeout=300_000)
    results = page.locator("#exp-table [role=gridcell]")
    expect(results.first).to_be_visible(timeout=TIMEOUT)
    page.wait_for_timeout(800)
    found = []
    for lang in ("en", "zh"):
        if lang == "zh":
            _switch(page, "中文", "Transformer 模型动物园")
            expect(page.locator("#exp-table th").first).to_contain_text("变体")
            page.wait_for_timeout(800)
        for elem_id in ("exp-progress", "exp-table"):
            found += problems_of(page, elem_id, lang)
        page.locator("#exp-table").scroll_into_view_if_needed()
        page.screenshot(path=str(SHOTS / f"tables_experiments_{lang}_1280.png"))
    assert not found, found


@pytest.mark.parametrize("viewport", SIZES, ids=["1280x800", "1920x1080"])
def test_the_component_dropdowns_lay_out_evenly(page, viewport):
    """At 1920 six dropdowns in one row wrapped as five and one: "Feed-forward" sat alone."""
    ffn = page.locator("#build-ffn")
    expect(ffn).to_be_visible()
    tops = ffn.evaluate("e => [...e.parentElement.children].filter(c => c.offsetParent !== null)"
                        ".map(c => Math.round(c.getBoundingClientRect().top))")
    top = round(ffn.bounding_box()["y"])
    assert tops.count(top) >= 2, ("Feed-forward is alone on its row", tops)
    rows = page.evaluate("() => { const tops = {}; for (const f of ['attention', 'mask', 'positions', 'norm',"
                         " 'placement', 'ffn']) { const e = document.getElementById('build-' + f);"
                         " const y = Math.round(e.getBoundingClientRect().top); tops[y] = (tops[y] || 0) + 1; }"
                         " return Object.values(tops); }")
    assert max(rows) - min(rows) <= 1, ("the dropdowns' rows are uneven", rows)
    page.screenshot(path=str(SHOTS / f"build_dropdowns_{viewport['width']}.png"))

"""The layout leftovers of a newcomer's third hour (issue 34), in Chromium at 1280x800 and 1920x1080:
Inspect's and Compare's results in view after a click.

Same harness as tests/ui/test_ui_browser.py (Debian's Chromium, no request off 127.0.0.1, its
fixtures); screenshots go to ``$ZOO_UI_SHOTS`` (default ``artifacts/ui/``, gitignored).
"""
from __future__ import annotations

import pytest

pytest.importorskip("gradio")
pytest.importorskip("playwright.sync_api")

from test_ui_browser import SHOTS, TIMEOUT, browser, choose, expect, page, server, viewport  # noqa: E402,F401

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SIZES = [{"width": 1280, "height": 800}, {"width": 1920, "height": 1080}]


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

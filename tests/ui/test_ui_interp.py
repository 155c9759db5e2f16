"""The Interpret tab (issue 26, goal 7): logit lens, head scores and patching as hoverable heatmaps,
in English and Chinese.  Handler tests compare the cells with zoo.inside.lens / zoo.inside.patching on the same
checkpoint; browser tests (Debian's Chromium through Playwright) click through the tab, hover cells
and save screenshots under artifacts/ui/ (gitignored)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("gradio")

import zoo  # noqa: E402
from ui_support import make_checkpoints  # noqa: E402


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("interp_ckpts")
    make_checkpoints(folder)
    old = os.environ.get("ZOO_CHECKPOINTS")
    os.environ["ZOO_CHECKPOINTS"] = str(folder)
    yield folder
    if old is None:
        os.environ.pop("ZOO_CHECKPOINTS", None)
    else:
        os.environ["ZOO_CHECKPOINTS"] = old


def _cells(html_text: str) -> dict[tuple[int, int], float]:
    return {(int(r), int(c)): float(v) for r, c, v in
            re.findall(r"data-r='(\d+)' data-c='(\d+)' data-v='([-\d.e]+)'", html_text)}


def test_lens_cells_are_the_library_logit_lens(ckpts):
    from zoo.inside.lens import logit_lens
    from zoo.ui import interp_tab
    from zoo.ui.common import load_checkpoint

    out = interp_tab.lens_view("ui_gpt", "abcab", "en")
    model = load_checkpoint("ui_gpt")
    lens = logit_lens(model, torch.tensor([model.tokenizer.encode("abcab")]), top_k=1)
    cells = _cells(out)
    assert len(cells) == 3 * 5  # embeddings + 2 layers, 5 tokens
    for (r, c), v in cells.items():
        assert abs(v - float(lens.top_probs[r, 0, c, 0])) < 1e-5


def test_scores_and_patching_cells(ckpts):
    from zoo.inside.lens import head_scores
    from zoo.inside.patching import patch_layers_positions
    from zoo.ui import interp_tab
    from zoo.ui.common import load_checkpoint

    model = load_checkpoint("ui_gpt")
    ids = torch.tensor([model.tokenizer.encode("abcabc")])
    cells = _cells(interp_tab.scores_view("ui_gpt", "abcabc", "previous_token", "en"))
    want = head_scores(model, ids, "previous_token")
    assert len(cells) == 2 * 4 and all(abs(v - float(want[r, c])) < 1e-5 for (r, c), v in cells.items())
    out = interp_tab.patch_view("ui_gpt", "abcabc", "abdabc", "zh")
    assert "第 0 层" in out
    a, b = ids, torch.tensor([model.tokenizer.encode("abdabc")])
    target = model(a)[0, -1].argmax()
    metric = lambda lg: lg[:, -1].log_softmax(-1)[:, target].mean()  # noqa: E731
    hi, lo = float(metric(model(a))), float(metric(model(b)))
    want = (patch_layers_positions(model, a, b, metric) - lo) / (hi - lo)
    cells = _cells(out)
    assert all(abs(v - float(want[r, c])) < 1e-4 for (r, c), v in cells.items())
    assert abs(cells[(0, 2)] - 1.0) < 1e-4  # the corrupted position, before layer 0: all of it


def test_errors_name_the_field(ckpts):
    import gradio as gr

    from zoo.ui import interp_tab
    with pytest.raises(gr.Error, match="4"):
        interp_tab.patch_view("ui_gpt", "abcabc", "abca", "en")
    with pytest.raises(gr.Error, match="空格"):
        interp_tab.lens_view("ui_bare", "a b c", "zh")  # no tokenizer: ids only


# ---------------------------------------------------------------------- in a browser
CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(os.environ.get("ZOO_UI_SHOTS") or Path(__file__).resolve().parents[2] / "artifacts" / "ui")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"browser tests need Debian's Chromium at {CHROMIUM}")
    playwright = pytest.importorskip("playwright.sync_api")
    from test_ui_browser import ARGS, LOCAL
    from ui_support import serve_with_checkpoints

    SHOTS.mkdir(parents=True, exist_ok=True)
    with serve_with_checkpoints(tmp_path_factory) as url, playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        pg = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        outside: list[str] = []
        pg.on("request", lambda r: None if r.url.startswith(LOCAL) else outside.append(r.url))
        pg.set_default_timeout(60_000)
        pg.goto(url)
        pg.wait_for_selector("#build-status")
        pg.locator("button[role=tab]", has_text="Interpret").click()
        box = pg.locator("#interp-checkpoint input")
        box.click()
        box.fill("ui_gpt")
        pg.keyboard.press("Enter")
        pg.locator("body").click(position={"x": 5, "y": 5})
        yield pg
        browser.close()
        assert not outside, outside


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("view", ["lens", "scores", "patch"])
def test_each_view_draws_a_heatmap_you_can_hover(page, view):
    from playwright.sync_api import expect

    page.locator("#interp-text textarea, #interp-text input").first.fill("abcabc")
    page.locator("#interp-corrupted textarea, #interp-corrupted input").first.fill("abdabc")
    page.locator(f"#interp-{view}-go").click()
    cell = page.locator(f"#interp-{view}-table td.cell[data-r='1'][data-c='2']")
    expect(cell).to_be_visible(timeout=60_000)
    cell.hover()
    v = float(cell.get_attribute("data-v"))
    assert cell.get_attribute("title").endswith(f"{v:.3f}")
    page.locator("#interp-out").screenshot(path=str(SHOTS / f"interp_{view}.png"))


@pytest.mark.browser
@pytest.mark.slow
def test_the_tab_reads_in_chinese(page):
    from playwright.sync_api import expect

    page.locator("#lang-switch label", has_text="中文").click()
    expect(page.locator("#interp-patch-go")).to_have_text("激活修补")
    page.locator("#interp-patch-go").click()
    expect(page.locator("#interp-patch-table")).to_contain_text("第 1 层")
    page.locator("#interp-out").screenshot(path=str(SHOTS / "interp_patch_zh.png"))


def test_interpret_and_run_at_once_on_one_cached_checkpoint_give_what_each_gives_alone(ckpts, monkeypatch):
    """The UI caches one model per checkpoint and serves requests from threads (issue 32, goal 4).
    The Interpret tab's activation patching (hooked forwards that replace activations) and the Run
    tab's generation run on the same cached model at once: Interpret's first hook point holds its
    session open until Run has generated its whole answer, three times over.  Both give exactly what
    each gives alone, and no hook point ever fires in Run's thread."""
    import threading

    from zoo.inside import hooks as zh
    from zoo.ui import interp_tab, run_tab
    from zoo.ui.common import load_checkpoint

    model = load_checkpoint("ui_gpt")
    clean, corrupted, prompt = "abcabc", "abdabc", "abca"
    alone = {"patch": interp_tab.patch_view("ui_gpt", clean, corrupted, "en"),
             "lens": interp_tab.lens_view("ui_gpt", "abcab", "en"),
             "run": list(run_tab.run("ui_gpt", prompt, max_new_tokens=24))[-1][0]}
    assert alone["run"]  # greedy decoding of a random model: some text
    emit = zh.Hooks.emit
    interpret_inside, run_done = threading.Event(), threading.Event()
    emitters: set[str] = set()

    def held_emit(self, name, x, stack, at=None):
        emitters.add(threading.current_thread().name)
        if not interpret_inside.is_set():
            interpret_inside.set()
            assert run_done.wait(300), "Run never finished while Interpret's session was open"
        return emit(self, name, x, stack, at)

    monkeypatch.setattr(zh.Hooks, "emit", held_emit)
    got: dict = {"run": []}
    errors: list = []

    def interpret():
        try:
            got["patch"] = interp_tab.patch_view("ui_gpt", clean, corrupted, "en")
            got["lens"] = interp_tab.lens_view("ui_gpt", "abcab", "en")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
            run_done.set()

    def run():
        try:
            assert interpret_inside.wait(300)
            for _ in range(3):
                got["run"].append(list(run_tab.run("ui_gpt", prompt, max_new_tokens=24))[-1][0])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            run_done.set()

    threads = [threading.Thread(target=interpret, name="interpret"), threading.Thread(target=run, name="run")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert not errors, errors
    assert got["patch"] == alone["patch"] and got["lens"] == alone["lens"]
    assert got["run"] == [alone["run"]] * 3
    assert emitters == {"interpret"}
    assert load_checkpoint("ui_gpt") is model  # one cached model served both


def test_a_newline_top_token_is_drawn_not_blank(monkeypatch):
    """issue 34: the logit lens's last column was blank when the top token is a newline.  The shipped
    poet_gpt predicts a newline after a full couplet; its cell reads ⏎ (and no cell is empty)."""
    from zoo.inside.lens import logit_lens
    from zoo.ui import interp_tab
    from zoo.ui.common import load_checkpoint

    monkeypatch.delenv("ZOO_CHECKPOINTS", raising=False)  # the shipped checkpoints
    if "poet_gpt" not in zoo.list_checkpoints():
        pytest.skip("the shipped poet_gpt checkpoint is not installed")
    text = "床前明月光，疑是地上霜。"
    model = load_checkpoint("poet_gpt")
    ids = torch.tensor([model.tokenizer.encode(text)])
    top = logit_lens(model, ids, top_k=1).top_ids[-1, 0, -1, 0]  # the last layer, the last position
    assert model.tokenizer.decode([int(top)]) == "\n"  # a known value of the shipped weights
    out = interp_tab.lens_view("poet_gpt", text, "en")
    last = re.findall(rf"data-r='{model.spec.num_layers}' data-c='{ids.size(1) - 1}'[^>]*>([^<]*)</td>", out)
    assert last == ["⏎"]
    assert not re.search(r"<td class='cell'[^>]*></td>", out)  # no blank cell anywhere


def test_invisible_tokens_have_a_visible_form():
    from zoo.ui.interp_tab import visible

    assert [visible(x) for x in ("\n", "\r\n", "\t", " ", "  ", "", "a b", "，")] == \
        ["⏎", "␍⏎", "⇥", "␣", "␣␣", "∅", "a b", "，"]

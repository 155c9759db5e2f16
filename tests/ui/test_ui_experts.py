"""The Inspect tab's router view (issue 24: router statistics "in zoo.trace and the Inspect tab"):
for a mixture-of-experts checkpoint the tab draws tokens per expert and layer, and the HTTP API
returns the counts; a dense checkpoint shows no such figure.  The reference is transformers' own
router on the same weights (the top-k of ``router_logits``) over the same token ids."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("gradio")
T = pytest.importorskip("transformers")

import zoo  # noqa: E402
from zoo.convert import from_transformers  # noqa: E402
from zoo.ui import inspect_tab  # noqa: E402

from ui_support import make_checkpoints  # noqa: E402

TEXT = "Experts, route me: 路由 abc abc."
E, K = 6, 2


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """``ui_moe``: a random Qwen3-MoE (byte vocabulary) converted and saved with zoo's byte tokenizer."""
    folder = tmp_path_factory.mktemp("ckpts")
    make_checkpoints(folder)
    torch.manual_seed(0)
    hf = T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(
        vocab_size=zoo.tokenizer("byte").vocab_size, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, intermediate_size=48, moe_intermediate_size=16, num_experts=E, num_experts_per_tok=K,
        norm_topk_prob=True, max_position_embeddings=128)).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.3)  # a decisive router: uneven loads
    zoo.save(from_transformers(hf, certify=False), folder / "ui_moe", tokenizer=zoo.tokenizer("byte"))
    return folder, hf


@pytest.fixture(autouse=True)
def _dirs(moe, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CHECKPOINTS", str(moe[0]))
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))


def test_router_view_equals_transformers_router(moe):
    _, hf = moe
    r = inspect_tab.inspect("ui_moe", TEXT)
    ids = zoo.load(moe[0] / "ui_moe").tokenizer.encode(TEXT)
    with torch.no_grad():
        logits = hf(torch.tensor([ids]), output_router_logits=True).router_logits  # L x (T, E)
    want = [torch.bincount(lg.topk(K, -1).indices.reshape(-1), minlength=E).tolist() for lg in logits]
    assert r["expert_counts"] == want
    assert all(sum(row) == len(ids) * K for row in want) and any(max(row) > min(row) for row in want)
    # the figure draws each layer's share of its routed tokens
    img = r["experts"].axes[0].images[0].get_array()
    share = torch.tensor(want, dtype=torch.float64) / (len(ids) * K)
    assert torch.allclose(torch.as_tensor(img.data, dtype=torch.float64), share, atol=1e-6)
    # the tab's event shows it; the API carries the counts
    out = inspect_tab.on_inspect("ui_moe", TEXT, "decoder", 0, 0, "en")
    assert out[3]["visible"] is True and out[3]["value"] is not None and out[-1] == ""
    api = inspect_tab.inspect("ui_moe", TEXT, "decoder", 1, 1, "zh")
    assert api["expert_counts"] == want  # the same whatever head is shown


def test_a_dense_checkpoint_hides_the_router_view():
    r = inspect_tab.inspect("ui_gpt", "hello")
    assert r["experts"] is None and r["expert_counts"] is None
    out = inspect_tab.on_inspect("ui_gpt", "hello", "decoder", 0, 0, "zh")
    assert out[3]["visible"] is False and out[-1] == ""  # no error either


@pytest.mark.browser
@pytest.mark.slow
def test_browser_shows_the_router_view_only_for_experts(moe, monkeypatch):
    """Chromium: Inspect on ``ui_moe`` shows the router figure; on ``ui_gpt`` it is hidden again."""
    from pathlib import Path

    if not Path("/usr/bin/chromium").exists():
        pytest.skip("browser tests need Debian's Chromium at /usr/bin/chromium")
    sync = pytest.importorskip("playwright.sync_api")
    from test_ui_browser import ARGS, SHOTS, choose
    from ui_support import running_app

    with running_app() as url, sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS, headless=True)
        pg = b.new_page(viewport={"width": 1280, "height": 1000})
        pg.set_default_timeout(60_000)
        pg.goto(url)
        pg.locator("button[role=tab]:has-text('Inspect')").first.click()
        experts = pg.locator("#inspect-experts")
        for name, shown in (("ui_moe", True), ("ui_gpt", False)):
            choose(pg, "inspect-checkpoint", name)
            pg.locator("#inspect-text textarea, #inspect-text input").first.fill(TEXT)
            pg.locator("#inspect-go").click()
            sync.expect(pg.locator("#inspect-grid img").first).to_be_visible()
            if shown:
                sync.expect(experts.locator("img").first).to_be_visible()
                SHOTS.mkdir(parents=True, exist_ok=True)
                experts.screenshot(path=str(SHOTS / "inspect_experts.png"))
            else:
                sync.expect(experts).to_be_hidden()
        b.close()

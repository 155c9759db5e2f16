"""The UI names checkpoints relative to its runs folder (``runs/NAME/...``) or as ``checkpoints/NAME``,
never by the server's path (issue 22, goal 6): a load error, the checkpoint lists, a save message and
a model card show no absolute path of the machine the server runs on."""
from __future__ import annotations

from pathlib import Path

import pytest

gr = pytest.importorskip("gradio")

import zoo  # noqa: E402
from zoo.ui import build_tab, common, compare_tab, inspect_tab, run_tab  # noqa: E402

from ui_support import make_checkpoints  # noqa: E402

REPO = Path(zoo.__file__).resolve().parents[1]


@pytest.fixture
def server(tmp_path, monkeypatch):
    """Checkpoint and runs folders under ``tmp_path``, with a corrupt and a truncated checkpoint in
    the runs folder; yields the folders whose paths must never show."""
    ckpts, runs = tmp_path / "ckpts", tmp_path / "runs"
    make_checkpoints(ckpts)
    (runs / "garbage").mkdir(parents=True)
    (runs / "garbage" / "model.safetensors").write_bytes(b"not a safetensors file")
    model = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=4, vocab_size=64, seed=0)
    f = zoo.save(model, runs / "truncated")
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    zoo.save(model, runs / "with_data", metadata={"data": str(runs / "with_data" / "train.txt")})
    monkeypatch.setenv("ZOO_CHECKPOINTS", str(ckpts))
    monkeypatch.setenv("ZOO_RUNS", str(runs))
    return [tmp_path, tmp_path.resolve(), REPO]


def no_server_path(text, roots) -> None:
    text = str(text)
    for root in roots:
        assert str(root) not in text, text
    assert "/tmp/" not in text and "/home/" not in text and "/root/" not in text, text


def test_a_load_error_names_the_file_under_the_runs_folder(server):
    for name in ("garbage", "truncated"):
        *_, last = run_tab.run_ui(name, "abc", "en")
        box = last[-1]
        assert f"runs/{name}/model.safetensors" in box and "corrupt or truncated" in box, box
        no_server_path(box, server)
        card_box = run_tab.on_checkpoint(name, "zh")[-1]  # the card, in Chinese headings
        assert f"runs/{name}/model.safetensors" in card_box and "位置" in card_box
        no_server_path(card_box, server)
        no_server_path(inspect_tab.on_inspect(name, "abc", "decoder", 0, 0, "en")[-1], server)
        with pytest.raises(gr.Error) as err:  # the toast of a handler-level error
            compare_tab.compare(compare_tab.CKPT + name, "", "preset: gpt_tiny", "", 8)
        assert f"runs/{name}/model.safetensors" in str(err.value)
        no_server_path(err.value, server)


def test_the_checkpoint_lists_hold_names_and_every_component_of_the_page_is_free_of_paths(server):
    from zoo.ui.app import build_app

    names = common.checkpoint_names()
    assert {"ui_gpt", "garbage", "with_data"} <= set(names)
    no_server_path(names, server)
    no_server_path(compare_tab.sources(), server)
    demo = build_app()
    for block in demo.blocks.values():  # every dropdown's choices, every shown value and label
        for attr in ("choices", "value", "label", "headers", "info"):
            no_server_path(getattr(block, attr, ""), server)


def test_a_save_names_the_runs_folder_not_the_server_path(server):
    text = build_tab.preset_yaml("gpt_tiny").replace("num_layers: 4", "num_layers: 1")
    msg = build_tab.save(text, "mine", 0)
    assert "`runs/mine/model.safetensors`" in msg, msg
    no_server_path(msg, server)
    assert "runs/mine/model.safetensors" in build_tab.saved_message("zh", build_tab.save_model(text, "mine", 0))


def test_a_card_names_a_file_of_the_runs_folder_relative_to_it(server):
    card = run_tab.model_card("with_data")
    assert "data: runs/with_data/train.txt" in card, card
    no_server_path(card, server)
    assert common.shown_path(common.checkpoint_path("ui_gpt")) == "checkpoints/ui_gpt/model.safetensors"
    assert common.shown_path("/etc/passwd") == "passwd"  # anything else: its name only

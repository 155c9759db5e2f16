"""A stored checkpoint is held to memory and work, never to its shape (issue 36, goal 1; ui/budget.py).

Fast, on tiny checkpoints: one with a released model's shape (30 layers, max_len 8192, but 16 wide)
opens in every tab; weights over the budget are refused with the figure and the budget; the model
cache lets go before refusing; a long max_len is capped per request and the tabs say so; what the
UI itself allocates (Inspect's copy, Interpret's lens) and patching's work are held to the budget;
a typed-in override keeps the UI's limits; Interpret resets its prompts on another checkpoint and
refuses mostly-unknown text.  The same workflow on the real SmolLM2-135M: test_ui_real_model.py.
"""
from __future__ import annotations

import re

import pytest

gr = pytest.importorskip("gradio")

import zoo  # noqa: E402
from zoo.guard import run_budget  # noqa: E402
from zoo.ui import budget, common, compare_tab, inspect_tab, interp_tab, run_tab  # noqa: E402

from ui_support import make_checkpoints  # noqa: E402

LONG = "long_gpt"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The tiny checkpoints of ui_support, and ``long_gpt``: 30 layers, max_len 8192, d_model 16."""
    d = tmp_path_factory.mktemp("budget_ckpts")
    make_checkpoints(d)
    byte = zoo.tokenizer("byte")
    model = zoo.build("gpt_tiny", seed=0, vocab_size=byte.vocab_size, num_layers=30, d_model=16, num_heads=2,
                      d_ff=32, max_len=8192, name=LONG)
    zoo.save(model, d / LONG, tokenizer=byte)
    return d


@pytest.fixture(autouse=True)
def _dirs(folder, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CHECKPOINTS", str(folder))
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    common._CACHE.clear()
    yield
    common._CACHE.clear()


def controls(max_new_tokens=8):
    from zoo.run.generate import GenerationOptions

    values = dict(run_tab.UI_DEFAULTS, max_new_tokens=max_new_tokens, temperature=0.0)
    fields = GenerationOptions.__dataclass_fields__
    return [values.get(n, fields[n].default) for n, _ in run_tab.ui_options()]


def run_box(name, text, lang="en", max_new_tokens=8):
    """(output, error box) of the Run button (the box is written once: "" when the run starts, or
    the error)."""
    steps = list(run_tab.run_ui(name, text, lang, *controls(max_new_tokens)))
    out = steps[-1][0]  # the page shows the prompt, then the continuation (as zoo run prints it)
    if isinstance(out, str):  # (an error leaves the output as it was: an update)
        assert not out or out.startswith(text), out
        out = out[len(text):]
    return out, [s[-1] for s in steps if isinstance(s[-1], str)][-1]


def stored_bytes(name) -> int:
    return budget.stored(common.checkpoint_path(name))[0]


# ---------------------------------------------------------------------- a released model's shape opens
def test_a_30_layer_8192_token_checkpoint_opens_in_every_tab():
    out, box = run_box(LONG, "abc")
    model = common.load_checkpoint(LONG)
    assert box == "" and out == model.generate("abc", 8)  # Run: not "above this UI's limit of 4096"
    card = run_tab.model_card(LONG)
    assert "max_len 8192" in card and "30 ×" in card
    assert "one request holds at most 2048 tokens" in card and "capped per request at 2048 tokens" in card
    r = inspect_tab.inspect(LONG, "abcabc", "decoder", 29, 1)  # the last layer: the slider reaches it
    assert r["layers"] == 30 and len(r["weights"]) == 6
    lens = interp_tab.lens_view(LONG, "abcab", "en")
    assert lens.count("<tr><th class='row'>") == 31  # embeddings + 30 layers
    rows, _ = compare_tab.compare(compare_tab.CKPT + LONG, "attention: eager", compare_tab.CKPT + LONG, "", 16)
    table = {r[0]: r[1:] for r in rows}
    assert float(table["max |A − B| of outputs"][1]) < 1e-4 and table["tokens in the forward"] == ["16", "16"]


def test_the_room_of_a_request_is_the_models_max_len_capped_per_request(monkeypatch):
    model = common.load_checkpoint(LONG)
    r = budget.room(model)
    per_token = 30 * 2 * 2 * 8 * 4  # layers x (k, v) x heads x head_dim x float32 bytes
    assert (r.tokens, r.max_len, r.by, r.kv_bytes) == (2048, 8192, "tokens", 2048 * per_token)
    assert budget.room(common.load_checkpoint("ui_gpt")).by == "max_len"  # 128 tokens: the model's own
    assert budget.room_of(common.checkpoint_path(LONG))[0] == r  # the card's figures, without the tensors
    monkeypatch.setitem(common.LIMITS, "request_flops", 2 * budget.parameters(model) * 100)
    r = budget.room(model)
    assert (r.tokens, r.by) == (100, "work") and "FLOPs of work (2 × parameters per token)" in budget.cap_text(r)
    assert run_tab.max_new_tokens_for(LONG)["maximum"] == 100


def test_run_caps_new_tokens_per_request_and_refuses_a_prompt_longer_than_one(monkeypatch):
    monkeypatch.setitem(common.LIMITS, "request_tokens", 10)
    out, box = run_box(LONG, "abcd", max_new_tokens=64)  # 4 tokens: 10 - 4 + 1 new
    assert box == "" and out == common.load_checkpoint(LONG).generate("abcd", 7)
    _, box = run_box(LONG, "abcdefghijkl")
    assert "the prompt is 12 tokens; one request holds at most 10 here (the model's max_len is 8192)" in box
    _, box = run_box(LONG, "abcdefghijkl", lang="zh")
    assert "提示有 12 个 token；这里每次请求最多 10 个" in box


# ---------------------------------------------------------------------- the budget refuses, with figures
def test_weights_over_the_budget_are_refused_with_the_figure_and_the_budget(monkeypatch):
    need = stored_bytes(LONG)
    small = stored_bytes("ui_gpt")
    assert small < need
    monkeypatch.setattr(run_budget, "BUDGET", (small + need) // 2)
    limit = run_budget.human_bytes((small + need) // 2)
    monkeypatch.setattr(zoo, "load", lambda *a, **k: pytest.fail("a tensor was read before the budget check"))
    _, box = run_box(LONG, "abc")
    assert (f"checkpoint '{LONG}' needs {run_budget.human_bytes(need)} for its weights, more than the budget "
            f"of {limit} (zoo.guard.run_budget.BUDGET)") in box
    options = re.search(r"Valid options: (.*)", box).group(1)  # the checkpoints that do fit
    assert "ui_gpt" in options and LONG not in options
    _, zh = run_box(LONG, "abc", lang="zh")
    assert f"检查点 '{LONG}' 的权重需要 {run_budget.human_bytes(need)}，超过了预算 {limit}" in zh
    for shown in (inspect_tab.on_inspect(LONG, "abc", "decoder", 0, 0, "en")[-1],
                  interp_tab.on_checkpoint(LONG, "en")[-1]):
        assert "for its weights, more than the budget of" in shown
    with pytest.raises(gr.Error, match="for its weights, more than the budget"):
        compare_tab.compare(compare_tab.CKPT + LONG, "", "preset: gpt_tiny", "", 8)


def test_the_model_cache_lets_go_before_a_checkpoint_is_refused(monkeypatch):
    """The budget is what the process may still use: models the cache holds count against it, and
    are given back before a checkpoint that would fit without them is refused."""
    total = stored_bytes(LONG) + stored_bytes("ui_gpt") // 2

    def left():  # what the process holds now: the cached models
        held = sum(budget.model_bytes(m) for m in common._CACHE.values())
        return total - held, "what is left"

    monkeypatch.setattr(budget, "budget", left)
    common.load_checkpoint("ui_gpt")
    assert len(common._CACHE) == 1
    assert common.load_checkpoint(LONG).spec.num_layers == 30
    assert [k[0] for k in common._CACHE] == [str(common.checkpoint_path(LONG))]


def test_what_the_ui_allocates_itself_is_held_to_the_budget(monkeypatch):
    model = common.load_checkpoint(LONG)  # cached: the weights fit
    monkeypatch.setattr(run_budget, "BUDGET", budget.model_bytes(model) - 1)
    box = inspect_tab.on_inspect(LONG, "abc", "decoder", 0, 0, "en")[-1]
    assert f"private copy of the model (a trace swaps kernels for its run) needs about " \
           f"{run_budget.human_bytes(budget.model_bytes(model))}, more than the budget" in box
    monkeypatch.setattr(run_budget, "BUDGET", 10_000)
    lens = (30 + 1) * 5 * model.spec.vocab_size * (4 + 4 + 1)
    with pytest.raises(gr.Error, match=re.escape(f"31 rows × 5 tokens × {model.spec.vocab_size} vocabulary entries "
                                                 f"needs about {run_budget.human_bytes(lens)}, more than the budget "
                                                 "of 10.0 KB")):
        interp_tab.lens_view(LONG, "abcab", "en")


def test_patching_is_held_to_the_work_of_one_request(monkeypatch):
    model = common.load_checkpoint(LONG)
    P = budget.parameters(model)
    monkeypatch.setitem(common.LIMITS, "request_flops", budget.work(P, 30 * 4 + 3, 4))  # 4 tokens, not 5
    assert interp_tab.patch_cap(model) == 4
    assert "cell" in interp_tab.patch_view(LONG, "abca", "abda", "en")
    with pytest.raises(gr.Error) as info:
        interp_tab.patch_view(LONG, "abcab", "abdab", "en")
    msg = info.value.message
    assert "patching 30 layers × 5 positions runs 153 forwards of 5 tokens" in msg
    assert "patching takes at most 4 tokens for this checkpoint" in msg
    note = interp_tab.room_note(model, LONG)
    assert "30 layers, max_len 8192" in note and "at most 4 tokens" in note


# ---------------------------------------------------------------------- typed-in values keep the limits
def test_compare_overrides_keep_the_ui_limits_where_they_grow_the_checkpoint():
    with pytest.raises(gr.Error, match="num_layers = 40 is above this UI's limit of 24"):
        compare_tab.compare(compare_tab.CKPT + LONG, "num_layers: 40", "preset: gpt_tiny", "", 8)
    with pytest.raises(gr.Error, match="max_len = 16384 is above this UI's limit of 4096"):
        compare_tab.compare(compare_tab.CKPT + LONG, "max_len: 16384", "preset: gpt_tiny", "", 8)
    with pytest.raises(gr.Error, match="num_layers = 30 is above this UI's limit of 24"):  # a preset: typed
        compare_tab.compare("preset: gpt_tiny", "num_layers: 30", "preset: gpt_tiny", "", 8)
    rows, _ = compare_tab.compare(compare_tab.CKPT + LONG, "num_layers: 12", compare_tab.CKPT + LONG, "", 8)
    assert "decoder: 12L" in {r[0]: r[1:] for r in rows}["components"][0]


def test_compare_says_what_cut_the_forward(monkeypatch):
    rows, _ = compare_tab.compare(compare_tab.CKPT + LONG, "", compare_tab.CKPT + "ui_gpt", "", 200)
    a, b = {r[0]: r[1:] for r in rows}["tokens in the forward"]
    assert (a, b) == ("128", "128 of the 200 asked (max_len 128)")  # B's max_len cut it, not A's room
    monkeypatch.setitem(common.LIMITS, "request_tokens", 16)
    data = compare_tab.measure(compare_tab.CKPT + LONG, "", compare_tab.CKPT + LONG, "", 64)
    a, _ = {r[0]: r[1:] for r in compare_tab.shown(data, "en")[0]}["tokens in the forward"]
    assert a.startswith("16 of the 64 asked (max_len 8192)") and "capped per request at 16 tokens" in a
    zh = {r[0]: r[1:] for r in compare_tab.shown(data, "zh")[0]}["前向的 token 数"][0]
    assert zh.startswith("16（要求 64，max_len 为 8192）")  # kept as data, worded again on a switch


# ---------------------------------------------------------------------- Interpret: prompts per checkpoint
def test_interpret_puts_prompts_the_new_checkpoint_reads_in_its_boxes():
    clean, corrupted, line, out, kept, record, box = interp_tab.on_checkpoint("ui_gpt", "en")
    assert (clean, corrupted) == interp_tab.PAIRS[0] and out == "" and kept is None and box == ""
    assert "ui_gpt: 2 layers, max_len 128" in line
    assert interp_tab.on_checkpoint("ui_bare", "en")[:2] == ("5 17 42 8 33 5 17 42 8", "5 17 42 8 34 5 17 42 8")
    assert interp_tab.on_checkpoint("ui_bert", "en")[:2] == ("", "")  # a char tokenizer without "France" or 天
    cells = interp_tab.patch_view("ui_gpt", *interp_tab.PAIRS[0], "en")  # the pair patches as it is
    assert cells.count("<tr><th class='row'>") == 2


def test_interpret_refuses_mostly_unknown_text_as_run_does():
    text = "qwxz vkjq"  # none of these is in ui_bert's alphabet
    with pytest.raises(gr.Error, match=r"are unknown to ui_bert's tokenizer"):
        interp_tab.lens_view("ui_bert", text, "en")
    with pytest.raises(gr.Error, match=r"are unknown to ui_bert's tokenizer"):
        interp_tab.scores_view("ui_bert", text, "previous_token", "en")
    out = interp_tab.lens_view("ui_bert", "The cat sat on the mqt.", "en")  # one unknown: a note
    assert "zoo-interp-note" in out and "read as &lt;unk&gt;" in out and "cell" in out


def test_interpret_caps_the_text_per_request(monkeypatch):
    monkeypatch.setitem(common.LIMITS, "interp_tokens", 6)
    with pytest.raises(gr.Error, match=r"7 tokens: give between 2 and 6 \(this tab reads at most 6 of the "
                                       r"model's max_len 8192 tokens"):
        interp_tab.lens_view(LONG, "abcdefg", "en")

"""UI handlers, called directly (no server, no browser): each is a thin call into zoo, every ZooError
becomes a visible gr.Error, paths never reach the file system, sizes are bounded."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Literal, Optional

import pytest
import torch
import yaml

gr = pytest.importorskip("gradio")

import zoo  # noqa: E402
from zoo.ui import build_tab, common, compare_tab, i18n, inspect_tab, plugins_tab, run_tab, verify_tab  # noqa: E402

from ui_support import make_checkpoints  # noqa: E402


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ckpts")
    make_checkpoints(d)
    return d


@pytest.fixture(autouse=True)
def _dirs(ckpt_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CHECKPOINTS", str(ckpt_dir))
    monkeypatch.setenv("ZOO_RUNS", str(tmp_path / "runs"))
    yield


# ---------------------------------------------------------------------- i18n
def test_every_string_has_english_and_chinese():
    for key, (en, zh) in i18n.all_strings().items():
        assert en.strip() and zh.strip(), key
        # the Chinese column is really Chinese (or deliberately identical, e.g. "Dropout", "YAML")
        assert zh != en or len(en) < 12, key
    assert i18n.t("tab.build", "中文") == "搭建" and i18n.t("tab.build", "English") == "Build"


def test_error_headings_are_localised():
    exc = zoo.UnknownComponentError.of("registry.unknown_component", where="attention.kind",
                                       options=["eager", "sdpa"], family="attention", name="sdpx",
                                       suggestion="sdpa", fix="hint.did_you_mean")
    zh = i18n.format_error(exc, "zh")
    assert "位置: attention.kind" in zh and "修改建议: 是不是想写 'sdpa'？" in zh and "可选值: eager, sdpa" in zh
    assert "问题: 没有名为 'sdpx' 的注意力实现" in zh
    assert i18n.format_error(exc, "en").startswith("Where: attention.kind")


@pytest.mark.parametrize("yaml_text,problem,fix", [
    ("arch: decoder\nvocab_size: 64\nd_model: 32\nnum_layers: 1\nnum_heads: 4\nattention: banana\n",
     "没有名为 'banana' 的注意力实现", "安装提供它的插件"),
    ("arch: decoder\nvocab_size: 64\nd_model: 30\nnum_layers: 1\nnum_heads: 4\n",
     "d_model 30 不能被 num_heads 4 整除", "整除 d_model"),
    ("arch: decoder\nvocab_size: 64\nd_model: 32\nnum_layers: 1\nnum_heads: 4\nfoo: 1\n",
     "未知字段 'foo'", "删除这一项"),
    ("arch: decoder\nvocab_size: 64\nnum_layers: 1\nnum_heads: 4\n", "缺少必填字段 'd_model'",
     "`d_model: ...`"),
    ("arch: [\n", "YAML 语法错误（第 2 行第 1 列）", "修正 YAML 语法"),
    ("arch: decoder\nvocab_size: 64\nd_model: 32\nnum_layers: 1\nnum_heads: 4\n"
     "mask: {kind: sliding_window, window: -1}\n", "window 必须 >= 1，实际是 -1", "查看该组件的说明"),
])
def test_the_engines_common_errors_read_in_chinese(yaml_text, problem, fix):
    """Real errors from the engine (not hand-made ones), so a changed engine message shows up here."""
    with pytest.raises(zoo.ZooError) as info:
        zoo.spec(yaml_text)
    zh = i18n.format_error(info.value, "zh")
    assert f"问题: {problem}" in zh, zh
    assert "修改建议: " in zh and fix in zh.split("修改建议: ")[1], zh


def test_every_translated_label_exists_in_both_languages():
    from zoo.ui.app import build_app

    demo = build_app("zh")
    tr = demo.zoo_translator
    assert len(tr.items) > 60
    for comp, attrs in tr.items:
        for attr, key in attrs.items():
            assert i18n.keys_of(key), key
            for k in i18n.keys_of(key):
                assert k in i18n.all_strings(), k
    zh = tr.updates("zh")
    en = tr.updates("en")
    assert len(zh) == len(en) == len(tr.items)
    assert any(u.get("label") == "语言" for u in zh) and any(u.get("label") == "Language" for u in en)
    assert {"value": "### 逐步注意力计算器", "__type__": "update"} in zh  # templates keep their markdown


# ---------------------------------------------------------------------- build tab
def test_form_and_yaml_stay_in_sync():
    text = build_tab.preset_yaml("gpt_tiny")
    assert build_tab.form_values(text)["num_layers"] == 4
    text = build_tab.set_field(text, "num_layers", 2)
    assert yaml.safe_load(text)["num_layers"] == 2
    assert build_tab.form_values(text)["num_layers"] == 2
    text = build_tab.set_field(text, "placement", "post")
    assert zoo.spec(text).placement.kind == "post"
    text = build_tab.set_field(text, "attention", "eager")
    assert zoo.spec(text).attention.kind == "eager"
    # a component's own parameter, set through the generated field
    text = build_tab.set_param(text, ["positions"], "base", 500.0)
    assert zoo.spec(text).positions.config.base == 500.0
    # YAML edited by hand refills the form
    edited = text.replace("d_model: 128", "d_model: 64")
    assert build_tab.form_values(edited)["d_model"] == 64
    assert build_tab.form_values("arch: [") is None  # broken YAML leaves the form alone


def test_switching_architecture_fixes_what_only_some_architectures_take():
    text = build_tab.set_field(build_tab.preset_yaml("gpt_tiny"), "arch", "encoder")
    spec = zoo.spec(text)
    assert spec.arch == "encoder" and spec.mask[0].kind == "bidirectional"
    text = build_tab.set_field(text, "arch", "encoder_decoder")
    spec = zoo.spec(text)
    assert [spec.stack(r).mask[0].kind for r in spec.roles] == ["bidirectional", "causal"]
    text = build_tab.set_field(text, "arch", "decoder")
    assert zoo.spec(text).mask[0].kind == "causal" and "encoder" not in yaml.safe_load(text)


def test_analyse_shows_table_diagram_and_inline_errors():
    status, rows, diagram, ok = build_tab.analyse(build_tab.preset_yaml("t5_tiny"))
    assert ok and rows[-1][0] == "total"
    model = zoo.build("t5_tiny")
    assert rows[-1][1] == f"{sum(p.numel() for p in model.parameters()):,}"
    assert "cross-attention" in diagram and "encoder" in diagram and "× 3" in diagram
    # an unknown component: inline message with the field, the options and the fix
    bad = build_tab.preset_yaml("gpt_tiny").replace("attention: sdpa", "attention: sdpx")
    status, rows, diagram, ok = build_tab.analyse(bad, "zh")
    assert not ok and rows == [] and "attention.kind" in status and "sdpa" in status and "修改建议" in status
    # a size beyond the UI's limits is refused before anything is built
    huge = build_tab.set_field(build_tab.preset_yaml("gpt_tiny"), "num_layers", 1000)
    status, _, _, ok = build_tab.analyse(huge)
    assert not ok and "num_layers" in status and "limit" in status
    status, _, _, ok = build_tab.analyse("arch: decoder\nvocab_size: 100\nd_model: 5000\nnum_layers: 1\n"
                                         "num_heads: 4\n")
    assert not ok and "d_model" in status


def test_pre_and_post_norm_diagrams_differ():
    pre = build_tab.block_diagram(zoo.spec("gpt_tiny"))
    post = build_tab.block_diagram(zoo.spec("bert_tiny"))
    # pre-norm: the norm comes before attention; post-norm: after the residual add
    assert pre.index("layernorm") < pre.index("self-attention")
    assert post.index("self-attention") < post.index("+ residual") < post.index("layernorm", post.index("+ residual"))
    assert pre.index("layernorm") < pre.index("+ residual")  # (post: no norm before the first residual)
    assert "layernorm" not in post[:post.index("+ residual")]
    assert "final norm" in pre and "final norm" not in post


def test_component_params_come_from_the_registry_including_third_party_plugins():
    from zoo.registry import Registry, set_registry

    @dataclasses.dataclass(frozen=True)
    class TalkingConfig:
        mix: float = 0.5
        heads_talk: bool = True
        mode: Literal["sum", "max"] = "sum"
        window: Optional[int] = None

    from zoo.components import AttentionKernel

    class Talking(AttentionKernel):
        def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
            return q, None

    class Plugin:
        @zoo.hookimpl
        def register_attention(self, register):
            register("talking", Talking, config=TalkingConfig)

    reg = Registry(entry_points=False)
    reg.add_plugin(Plugin(), name="zoo-talking", source="distribution zoo-talking")
    old = set_registry(reg)
    try:
        assert "talking" in build_tab.registry_choices()["attention"]
        text = build_tab.set_field(build_tab.preset_yaml("gpt_tiny"), "attention", "talking")
        entry = next(e for e in build_tab.component_entries(text) if e["family"] == "attention")
        assert entry["kind"] == "talking"
        assert {p["name"]: p["type"] for p in entry["params"]} == {
            "mix": "float", "heads_talk": "bool", "mode": "choice", "window": "yaml"}
        assert next(p for p in entry["params"] if p["name"] == "mode")["choices"] == ["sum", "max"]
        text = build_tab.set_param(text, ["attention"], "mix", 0.25)
        text = build_tab.set_param(text, ["attention"], "mode", "max")
        text = build_tab.set_param(text, ["attention"], "window", build_tab.parse_param_text("16"))
        cfg = zoo.spec(text).attention.config
        assert (cfg.mix, cfg.mode, cfg.window) == (0.25, "max", 16)
        assert any(r[0] == "zoo-talking" for r in plugins_tab.plugin_rows())
    finally:
        set_registry(old)


def test_save_writes_a_checkpoint_the_run_tab_can_open(tmp_path):
    msg = build_tab.save(build_tab.preset_yaml("gpt_tiny").replace("num_layers: 4", "num_layers: 1"),
                         "my_model", 3)
    assert "my_model" in msg
    assert "my_model" in common.checkpoint_names()
    model = common.load_checkpoint("my_model")
    assert model.spec.num_layers == 1
    again = zoo.build(model.spec, seed=3)
    assert torch.equal(again.tok_emb.weight, model.tok_emb.weight)


@pytest.mark.parametrize("name", ["../../etc/passwd", "/etc/passwd", "a/b", "..", "", "ui_gpt/../ui_bert",
                                  "~root", "x" * 200])
def test_paths_never_reach_the_file_system(name):
    with pytest.raises(zoo.CheckpointError):
        common.checkpoint_path(name)
    with pytest.raises(gr.Error) as info:
        build_tab.save(build_tab.preset_yaml("gpt_tiny"), name, 0)
    with pytest.raises(gr.Error) as info:
        list(run_tab.run(name, "hello"))
    assert "Traceback" not in info.value.message and "root:" not in info.value.message
    if name:  # an empty choice just shows no card
        with pytest.raises(gr.Error):
            run_tab.model_card(name)
    else:
        assert run_tab.model_card(name) == ""


def test_symlinks_out_of_the_checkpoint_folders_are_ignored(tmp_path, ckpt_dir):
    runs = Path(os.environ["ZOO_RUNS"])
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "model.safetensors").write_bytes((ckpt_dir / "ui_gpt" / "model.safetensors").read_bytes())
    runs.mkdir(parents=True)
    (runs / "sneaky").symlink_to(outside, target_is_directory=True)
    assert "sneaky" not in common.checkpoint_names()
    with pytest.raises(zoo.CheckpointError):
        common.checkpoint_path("sneaky")


def test_shipped_names_cannot_be_overwritten():
    with pytest.raises(gr.Error) as info:
        build_tab.save(build_tab.preset_yaml("gpt_tiny"), "ui_gpt", 0)
    assert "shipped" in info.value.message


def test_a_stored_checkpoint_is_held_to_the_budget_not_its_shape(tmp_path, monkeypatch):
    """Issue 36: 30 layers and max_len 8192 are a released model's shape, not a reason to refuse it;
    weights over the budget are, before any tensor is read (tests/ui/test_ui_budget.py has more)."""
    runs = Path(os.environ["ZOO_RUNS"])
    big = zoo.build({"arch": "decoder", "vocab_size": 16, "d_model": 8, "num_layers": 30, "num_heads": 2,
                     "max_len": 8192}, seed=0)
    zoo.save(big, runs / "deep")
    assert common.load_checkpoint("deep").spec.num_layers == 30
    common._CACHE.clear()
    monkeypatch.setattr(zoo.guard.run_budget, "BUDGET", 1000)
    monkeypatch.setattr(zoo, "load", lambda *a, **k: pytest.fail("read before the budget check"))
    with pytest.raises(zoo.CheckpointError, match=r"needs .* for its weights, more than the budget of 1.0 KB"):
        common.load_checkpoint("deep")


# ---------------------------------------------------------------------- run tab
def test_run_streams_the_same_text_as_zoo_generate():
    steps = list(run_tab.run("ui_gpt", "床前明月光", 0.0, 0, 1.0, 12, 0))
    assert len(steps) >= 2 and steps[0][0] == ""
    model = zoo.load(common.checkpoint_path("ui_gpt"))
    assert steps[-1][0] == model.generate("床前明月光", 12)
    # sampling with a seed is reproducible, and different from greedy for some seed
    a = list(run_tab.run("ui_gpt", "abc", 1.5, 50, 0.95, 12, 7))[-1][0]
    b = list(run_tab.run("ui_gpt", "abc", 1.5, 50, 0.95, 12, 7))[-1][0]
    assert a == b


def test_run_passes_the_repetition_penalty_to_generation():
    """The Run tab's repetition penalty reaches zoo.run.generate (greedy here), and 1.0 is off."""
    model = zoo.load(common.checkpoint_path("ui_gpt"))
    on = list(run_tab.run("ui_gpt", "床前明月光", 0.0, 0, 1.0, 16, 0, 3.0))[-1][0]
    assert on == model.generate("床前明月光", 16, repetition_penalty=3.0)
    off = list(run_tab.run("ui_gpt", "床前明月光", 0.0, 0, 1.0, 16, 0, 1.0))[-1][0]
    assert off == model.generate("床前明月光", 16) != on
    with pytest.raises(gr.Error, match="generate.repetition_penalty"):  # where / problem / fix
        list(run_tab.run("ui_gpt", "床前明月光", 0.0, 0, 1.0, 4, 0, 0.5))


def test_run_encoder_decoder_and_fill_mask():
    out = list(run_tab.run("ui_t5", "hello", 0.0, 0, 1.0, 6, 0))[-1][0]
    model = zoo.load(common.checkpoint_path("ui_t5"))
    assert out == model.generate("hello", 6)
    _, rows = list(run_tab.run("ui_bert", "The <mask> sat on the <mask>.", 0.0, 0, 1.0, 6, 0))[-1]
    assert [r[0] for r in rows] == ["4", "17"] and rows[0][1].count("(") == 5
    with pytest.raises(gr.Error, match="mask"):
        list(run_tab.run("ui_bert", "no mask here", 0.0, 0, 1.0, 6, 0))


def test_run_limits_and_errors_are_messages():
    with pytest.raises(gr.Error, match="max_new_tokens"):
        list(run_tab.run("ui_gpt", "hi", 0.0, 0, 1.0, common.LIMITS["max_new_tokens"] + 1, 0))
    with pytest.raises(gr.Error, match="tokenizer"):
        list(run_tab.run("ui_bare", "hi", 0.0, 0, 1.0, 4, 0))
    with pytest.raises(gr.Error, match="text"):
        list(run_tab.run("ui_gpt", "   ", 0.0, 0, 1.0, 4, 0))
    with pytest.raises(gr.Error) as info:
        list(run_tab.run("ui_gpt", "x" * (common.LIMITS["text_chars"] + 1), 0.0, 0, 1.0, 4, 0))
    assert "limit" in info.value.message
    with pytest.raises(gr.Error) as info:
        list(run_tab.run("no_such_model", "hi", lang="zh"))
    assert "没有名为" in info.value.message and "ui_gpt" in info.value.message


def test_unexpected_exceptions_become_a_short_message(monkeypatch):
    def boom(*a, **k):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(common, "checkpoint_table", boom)
    with pytest.raises(gr.Error) as info:
        run_tab.model_card("ui_gpt")
    assert "RuntimeError" in info.value.message and "secret" not in info.value.message


# ---------------------------------------------------------------------- inspect: the calculator
def test_calculator_reproduces_the_lecture_numbers():
    r = inspect_tab.calculate(inspect_tab.SEED_Q, inspect_tab.SEED_K, inspect_tab.SEED_V,
                              inspect_tab.mask_table("none", 3))
    assert r["scores"][0] == [1.0, 0.0, 1.0]
    assert r["scaled"][0] == [0.7071, 0.0, 0.7071]
    assert r["weights"][0] == [0.4011, 0.1978, 0.4011]
    assert r["hand_output_row0"] == [6.0165, 3.9835]  # the seed's hand computation, 4-digit weights
    assert r["output"][0] == [6.0167, 3.9833]  # exact
    assert all(abs(sum(row) - 10) < 1e-3 for row in r["output"])  # rows of V sum to 10
    assert r["kernel_error"] < 1e-12 and r["kernel_weights"] == r["weights"]
    assert "2.0281" in r["explain"] and "5.0562" in r["explain"]


def test_calculator_every_number_is_editable_and_masks_apply():
    q = [row[:] for row in inspect_tab.SEED_Q]
    q[0] = [2.0, 0.0]
    r = inspect_tab.calculate(q, inspect_tab.SEED_K, inspect_tab.SEED_V, inspect_tab.mask_table("none", 3))
    assert r["scores"][0] == [2.0, 0.0, 2.0] and r["weights"][0] != [0.4011, 0.1978, 0.4011]
    r = inspect_tab.calculate(inspect_tab.SEED_Q, inspect_tab.SEED_K, inspect_tab.SEED_V,
                              inspect_tab.mask_table("causal", 3), lang="zh")
    assert r["weights"][0] == [1.0, 0.0, 0.0] and r["masked"][0][1] == "-inf"
    assert r["output"][0] == [10.0, 0.0] and "被掩盖" in r["explain"]
    # four tokens, three dimensions
    q4 = [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.5, -1.0, 2.0]]
    r = inspect_tab.calculate(q4, q4, q4, inspect_tab.mask_table("causal", 4))
    assert len(r["weights"]) == 4 and r["kernel_error"] < 1e-12


@pytest.mark.parametrize("q,k,v,mask,match", [
    ([[1, "x"]], [[1, 0]], [[1, 0]], [[1]], "Q"),
    ([[1, 0]], [[1, 0, 0]], [[1, 0]], [[1]], "K"),
    ([[1, 0]], [[1, 0]], [[1, 0], [0, 1]], [[1]], "V"),
    ([[1, 0]], [[1, 0]], [[1, 0]], [[1, 1]], "mask"),
    ([[1.0] * 2] * 50, [[1.0] * 2] * 50, [[1.0] * 2] * 50, [[1] * 50] * 50, "limit"),
])
def test_calculator_bad_tables_are_messages(q, k, v, mask, match):
    with pytest.raises(gr.Error, match=match):
        inspect_tab.calculate(q, k, v, mask)


# ---------------------------------------------------------------------- compare and verify
def test_compare_eager_vs_sdpa_agree_and_post_norm_differs():
    rows, diff = compare_tab.compare("preset: gpt_tiny", "", "preset: gpt_tiny", "attention: eager", 16)
    table = {r[0]: r[1:] for r in rows}
    assert float(table["max |A − B| of outputs"][1]) < 1e-4
    assert table["parameters"][0] == table["parameters"][1]
    assert "+attention: eager" in diff
    rows, _ = compare_tab.compare("preset: gpt_tiny", "", "preset: gpt_tiny",
                                  "norm: {kind: layernorm, placement: post}", 16)
    assert float({r[0]: r[1:] for r in rows}["max |A − B| of outputs"][1]) > 1e-2
    rows, _ = compare_tab.compare("checkpoint: ui_gpt", "", "checkpoint: ui_gpt", "attention: naive", 8, "abc")
    table = {r[0]: r[1:] for r in rows}
    assert float(table["max |A − B| of outputs"][1]) < 1e-4
    # same weights, same function: the same greedy text, and it is the library's
    model = zoo.load(common.checkpoint_path("ui_gpt"))
    assert table["output on the prompt (greedy)"] == [repr(model.generate("abc", 24))] * 2
    with pytest.raises(gr.Error, match="overrides"):
        compare_tab.compare("preset: gpt_tiny", "[1, 2]", "preset: gpt_tiny", "", 8)
    with pytest.raises(gr.Error, match="limit"):
        compare_tab.compare("preset: gpt_tiny", "", "preset: gpt_tiny", "", 10 ** 6)
    with pytest.raises(gr.Error):
        compare_tab.compare("checkpoint: ../../etc/passwd", "", "preset: gpt_tiny", "", 8)


def test_verify_runs_the_kits_cases_passes_the_built_ins_and_catches_a_broken_kernel():
    from zoo.testing import Kit

    rows = verify_tab.run_all()
    kit = Kit()
    # the page's rows are the kit's own cases, nothing of its own beside them
    assert [(r["subject"], r["check"], r["case"]) for r in rows] == \
        [(c.subject, c.check, c.arch) for c in verify_tab.fast_cases(kit)]
    counted = [r for r in rows if r["status"] != "skip"]
    assert len(counted) > 20 and all(r["status"] == "pass" for r in counted), \
        [r for r in counted if r["status"] != "pass"][:3]
    subjects = {(r["subject"], r["check"]) for r in counted}
    assert {("attention:eager", "reference"), ("attention:sdpa", "reference"), ("mask:causal", "mask_offset"),
            ("position:rope", "kv_cache")} <= subjects
    assert {f"attention:{n}" for n in zoo.get_registry().names("attention")} <= {r["subject"] for r in rows}

    from zoo.components import AttentionKernel, Capabilities
    from zoo.registry import Registry, set_registry

    class Leaky(AttentionKernel):  # forgets the mask: must fail the masked cases
        capabilities = Capabilities(returns_weights=False)

        def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
            import torch.nn.functional as F

            k, v = k.repeat_interleave(q.size(1) // k.size(1), 1), v.repeat_interleave(q.size(1) // v.size(1), 1)
            return F.scaled_dot_product_attention(q, k, v, scale=self.scale), None

    class Plugin:
        @zoo.hookimpl
        def register_attention(self, register):
            register("leaky", Leaky)

    reg = Registry(entry_points=False)
    reg.add_plugin(Plugin(), name="leaky")
    old = set_registry(reg)
    try:
        rows = [r for r in verify_tab.run_all() if r["subject"] == "attention:leaky"]
    finally:
        set_registry(old)
    by_check = {r["check"]: r for r in rows}
    assert by_check["reference"]["status"] == "fail" and by_check["reference"]["error"] > 0.1
    assert by_check["masked_rows"]["status"] == "pass"  # the engine zeroes empty rows, whatever the kernel
    table, summary = verify_tab.table_rows(rows)
    assert "✗" in table[0][0] and "1 of 2 checks passed" in summary


def test_verify_handler_table_is_localised():
    table, summary = verify_tab.verify(lang="zh")
    assert "项校验中通过" in summary and all("通过" in row[0] for row in table if "跳过" not in row[0])


def test_verify_streams_the_conformance_kit():
    if not verify_tab.kit_available():
        pytest.skip("zoo.testing not installed")
    steps = list(verify_tab.verify_kit(["tokenizer:byte", "tokenizer:char"]))
    table, summary = steps[-1]
    assert [row[2] for row in table] == ["tokenizer:byte", "tokenizer:char"]
    assert all("pass" in row[0] for row in table) and "2 of 2" in summary
    with pytest.raises(gr.Error, match="no_such"):
        list(verify_tab.verify_kit(["no_such_component"]))


# ---------------------------------------------------------------------- inspect: checkpoints
def test_inspect_heatmaps_for_every_architecture():
    r = inspect_tab.inspect("ui_bert", "床前明月光", "encoder", 1, 3)
    assert r["tokens"] == list("床前明月光") and r["layers"] == 2 and r["heads"] == 4
    model = zoo.load(common.checkpoint_path("ui_bert"))
    want = zoo.trace(model, text="床前明月光")["encoder.blocks.1.attn.weights"][0, 3]
    assert torch.allclose(torch.tensor(r["weights"]), want, atol=1e-4)
    assert all(abs(sum(row) - 1) < 1e-3 for row in r["weights"])
    for fig in (r["grid"], r["mask"], r["positions"]):  # bert_tiny: learned positions
        assert fig is not None and fig.get_axes()
    # the data the browser draws: every layer and head, the selected one as above
    view = r["attention"]
    assert (view["layers"], view["heads"], view["layer"], view["head"]) == (2, 4, 1, 3)
    assert view["q"] == view["k"] == list("床前明月光") and view["w"][1][3] == r["weights"]
    every = zoo.trace(model, text="床前明月光")
    for layer in range(2):
        assert torch.allclose(torch.tensor(view["w"][layer]), every[f"encoder.blocks.{layer}.attn.weights"][0],
                              atol=1e-4)
    sim = r["positions"].get_axes()[0].get_images()[0].get_array()
    assert abs(float(sim[0, 0]) - 1) < 1e-5 and sim.shape[0] == sim.shape[1] >= 5
    r = inspect_tab.inspect("ui_gpt", "abc", "decoder", 0, 0)
    assert r["weights"][0][1:] == [0.0, 0.0]  # causal: token 0 sees only itself
    assert r["positions"] is not None  # sinusoid waves
    r = inspect_tab.inspect("ui_t5", "abcd", "cross", 0, 1)
    # cross-attention: rows are what the decoder wrote, keys the 4 source bytes and eos
    assert r["stack"] == "cross" and len(r["weights"][0]) == 5 and r["key_tokens"][:4] == list("abcd")
    model = zoo.load(common.checkpoint_path("ui_t5"))
    tok = model.tokenizer
    gen = model.generate(torch.tensor([tok.encode("abcd") + [tok.eos_id]]), max_new_tokens=63,
                         stop_tokens=[tok.eos_id])
    assert len(r["weights"]) == gen.size(1)  # start token + what it wrote
    assert r["next_label"] == "inspect.output"
    assert inspect_tab.choices_for("ui_t5")["stacks"] == ["encoder", "decoder", "cross"]


def test_inspect_errors_and_limits_are_messages():
    with pytest.raises(gr.Error, match="layer 7"):
        inspect_tab.inspect("ui_gpt", "abc", "decoder", 7, 0)
    with pytest.raises(gr.Error, match="head"):
        inspect_tab.inspect("ui_gpt", "abc", "decoder", 0, 9)
    with pytest.raises(gr.Error, match="limit"):
        inspect_tab.inspect("ui_gpt", "a" * (common.LIMITS["inspect_tokens"] + 1), "decoder", 0, 0)
    with pytest.raises(gr.Error, match="tokenizer"):
        inspect_tab.inspect("ui_bare", "abc", "decoder", 0, 0)
    with pytest.raises(gr.Error, match="not a checkpoint name"):
        inspect_tab.inspect("/etc/passwd", "abc", "decoder", 0, 0)
    with pytest.raises(gr.Error, match="'sideways' is not a stack.*Valid options: encoder"):
        inspect_tab.inspect("ui_bert", "abc", "sideways", 0, 0)  # typed into the dropdown


def test_inspect_takes_the_models_own_stack_when_the_dropdown_is_stale():
    """A click right after switching to an encoder can still carry 'decoder' (the dropdown's new
    choices not yet in the browser): the encoder's stack is shown, not an error."""
    out = inspect_tab.inspect("ui_bert", "abc", "decoder", 0, 0)
    assert out["attention"]["stack"] == "encoder"


def test_build_cost_curve_and_memory_table():
    if not build_tab.cost_available():
        pytest.skip("zoo.inside.costs / zoo.inside.plots not installed")
    fig, rows = build_tab.cost(build_tab.preset_yaml("gpt_tiny"))
    assert fig is not None and [r[0] for r in rows] == list(build_tab.COST_LENGTHS)
    # the attention core's share grows with the length (quadratic vs linear)
    shares = [float(r[2].rstrip("%")) for r in rows]
    assert shares == sorted(shares) and shares[-1] > shares[0]
    assert build_tab.cost("arch: [") == (None, [])


def test_the_number_of_saved_runs_is_bounded(monkeypatch):
    monkeypatch.setitem(common.LIMITS, "runs", 2)
    text = build_tab.preset_yaml("gpt_tiny").replace("num_layers: 4", "num_layers: 1")
    build_tab.save(text, "one", 0)
    build_tab.save(text, "two", 0)
    build_tab.save(text, "two", 1)  # overwriting is fine
    with pytest.raises(gr.Error, match="runs"):
        build_tab.save(text, "three", 0)


def test_model_cards_inline_their_own_images_and_drop_others():
    build_tab.save(build_tab.preset_yaml("gpt_tiny").replace("num_layers: 4", "num_layers: 1"), "carded", 0)
    folder = Path(os.environ["ZOO_RUNS"]) / "carded"
    (folder / "loss.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(40)))
    (folder / "README.md").write_text("# carded\n![loss](loss.png)\n![web](https://example.com/x.png)\n"
                                      "![up](../secret.png)\n", encoding="utf-8")
    card = run_tab.model_card("carded")
    assert "![loss](data:image/png;base64,iVBORw0KGgo" in card
    assert "example.com" not in card and "secret" not in card.replace("(up)", "") and "(web)" in card


# ---------------------------------------------------------------------- a newcomer's first hour (issue 14)
def test_defaults_run_every_shipped_model():
    """The Run tab's defaults (64 new tokens, its sampling sliders) on each shipped checkpoint's
    example: numerals_t5 (max_len 32) used to fail; now the request is capped by what max_len leaves."""
    import cn2an

    shipped = [n for n in run_tab.EXAMPLES if n in zoo.list_checkpoints()]
    if not shipped:
        pytest.skip("no shipped checkpoints in this checkout")
    for name in shipped:
        out, rows = list(run_tab.run(name, run_tab.EXAMPLES[name], 0.8, 20, 0.95, 64, 0))[-1]
        assert out or rows, name
        if name == "numerals_t5":  # greedy and sampled agree on a model this sure of itself
            greedy = list(run_tab.run(name, "10086", 0, 0, 1, 64, 0))[-1][0]
            assert greedy == cn2an.an2cn("10086")
    assert run_tab.max_new_tokens_for("numerals_t5") == {"maximum": 32, "value": 32}
    assert run_tab.max_new_tokens_for("ui_gpt") == {"maximum": 128, "value": 64}


def test_a_long_prompt_leaves_fewer_new_tokens():
    # ui_gpt: max_len 128, byte tokenizer; a 120-byte prompt leaves 128 - 120 + 1 = 9 new tokens
    prompt = "a" * 120
    out = list(run_tab.run("ui_gpt", prompt, 0, 0, 1, 64, 0))[-1][0]
    model = zoo.load(common.checkpoint_path("ui_gpt"))
    assert out == model.generate(prompt, 9)
    with pytest.raises(zoo.ZooError, match="exceeds max_len"):
        model.generate(prompt, 10)  # the engine's own limit: one more would not fit


def test_text_shown_as_markdown_keeps_its_tokens():
    assert common.safe_markdown("fill <mask> and <eos> & `<code>` ok") == \
        "fill &lt;mask> and &lt;eos> &amp; `<code>` ok"
    card = run_tab.model_card("ui_bert")
    assert "&lt;" not in "".join(common._CODE.findall(card))  # code spans are left alone
    outside = common._CODE.sub("", card)
    assert "<" not in outside.replace("&lt;", "")  # no raw tag survives outside code
    if "poet_bert" in zoo.list_checkpoints():
        card = run_tab.model_card("poet_bert")
        # the card mentions <mask>: as text outside code (escaped) or inside a code span (as is)
        assert "&lt;mask>" in common._CODE.sub("", card) or "<mask>" in "".join(common._CODE.findall(card))
        assert "<mask>" not in common._CODE.sub("", card)


def test_errors_go_to_the_tabs_error_box():
    @common.inline_errors(2)
    def action(x, lang="en"):
        if x == "bad":
            raise zoo.UnknownComponentError.of("registry.unknown_component", where="attention.kind",
                                               options=["eager", "sdpa"], family="attention", name="sdpx",
                                               suggestion="sdpa", fix="hint.did_you_mean")
        return 1, 2

    assert action("ok") == (1, 2, "")  # success clears an old error
    a, b, box = action("bad")
    assert isinstance(a, type(gr.skip())) and isinstance(b, type(gr.skip()))
    assert "Where: attention.kind" in box and "did you mean 'sdpa'?" in box
    _, _, box = action("bad", lang="zh")
    assert "位置: attention.kind" in box and "没有名为 'sdpx' 的注意力实现" in box and "错误" in box


@pytest.mark.parametrize("overrides,word", [
    ({"mask": "bidirectional"}, "cannot generate"),
    ({"mask": ["causal", {"kind": "sliding_window", "window": 512}]}, "restricts nothing"),
    ({"norm": {"kind": "batchnorm"}}, "teaching"),
    ({"dropout": 0.7}, "very high"),
])
def test_build_hints_for_valid_specs_a_user_probably_did_not_mean(overrides, word):
    status, _, _, ok = build_tab.analyse(zoo.spec("gpt_tiny", **overrides).to_yaml())
    assert ok and "Valid spec" in status and word in status
    plain, _, _, _ = build_tab.analyse(zoo.spec("gpt_tiny").to_yaml())
    assert "⚠" not in plain  # the presets are what they mean
    for preset in ("bert_tiny", "t5_tiny", "prefix_lm_tiny", "llama_tiny"):
        assert build_tab.hints(zoo.spec(preset)) == [], preset


def test_invalid_yaml_says_the_diagram_is_not_the_spec():
    status, rows, diagram, ok = build_tab.analyse("arch: [\n")
    assert not ok and rows == [] and diagram == ""


def test_verify_summary_counts_skips_apart():
    rows = [{"status": "pass", "check": "c", "subject": "s", "case": "", "reference": "", "error": 0.0,
             "tol": 1e-5, "note": ""},
            {"status": "skip", "check": "c", "subject": "s", "case": "", "reference": "", "error": None,
             "tol": None, "note": "n/a"}]
    _, summary = verify_tab.table_rows(rows)
    assert summary == "1 of 1 checks passed. 1 not applicable (skipped)."


def test_building_the_app_draws_chinese_without_a_system_font(monkeypatch):
    """`zoo ui` used to print 25 "Glyph ... missing" warnings without Debian's fonts-noto-cjk: the
    figures the app draws at start-up now find the PyPI font (system faces hidden here)."""
    import warnings

    from zoo.inside import plots
    from zoo.ui.app import build_app

    monkeypatch.setattr(plots, "_FONT", {})
    monkeypatch.setattr(plots, "_PREFERRED", ())
    monkeypatch.setattr(plots, "_CANDIDATES", ())
    monkeypatch.delenv("ZOO_CJK_FONT", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_app("zh")
    missing = [str(w.message) for w in caught if "Glyph" in str(w.message) or "CJK" in str(w.message)]
    assert not missing, missing[:3]
    assert plots._FONT.get("file") == plots._pypi_font()


def test_model_cards_keep_server_paths_on_the_server():
    model = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=4, vocab_size=64, seed=0)
    zoo.save(model, common.runs_dir() / "pathy", metadata={"data": "/home/someone/secret/train.txt", "lr": 0.1})
    card = run_tab.model_card("pathy")
    assert "data: train.txt" in card and "/home/someone" not in card and "lr: 0.1" in card


def test_model_card_shows_a_converted_checkpoints_parity_certificate():
    """issue 15: the card of a converted checkpoint shows its parity certificate, measured at conversion
    against the transformers model it came from (random-init GPT-2 built from a config, offline)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=4)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    zoo.save(zoo.convert.from_transformers(hf), common.runs_dir() / "converted")
    card = run_tab.model_card("converted")
    line = next(li for li in card.splitlines() if "Parity with" in li)
    assert "top-1 agreement 100.0%" in line and "GPT2LMHeadModel" in line, line
    assert "parity:" not in card  # the raw JSON entry is not repeated
    # a converted checkpoint without a certificate says so
    zoo.save(zoo.convert.from_transformers(hf, certify=False), common.runs_dir() / "uncertified")
    assert "without a parity certificate" in run_tab.model_card("uncertified")

"""Accounting (FLOPs formula vs a count of what actually runs, the seed's crossover) and figures."""
import warnings

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import zoo
from zoo.inside import costs as accounting, plots


def counted_flops(model, ids, src=None):
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(src, ids) if src is not None else model(ids)
    return fc.get_total_flops()


@pytest.mark.parametrize("preset,over", [
    ("gpt_tiny", {}),
    ("gpt_tiny", {"num_kv_heads": 2, "ffn": "swiglu", "positions": "rope"}),  # GQA + GLU
    ("gpt_tiny", {"num_kv_heads": 1, "ffn": {"kind": "geglu"}, "head_dim": 48, "d_ff": 300}),
    ("bert_tiny", {}),
    ("bert_tiny", {"head": {"kind": "classifier", "num_labels": 3}}),
    ("t5_tiny", {"num_kv_heads": 2}),
    # a mixture of experts costs its router and the k chosen experts per token, not all E
    ("gpt_tiny", {"ffn": {"kind": "moe", "experts": 8, "top_k": 2}}),
    ("gpt_tiny", {"ffn": {"kind": "moe", "experts": 6, "top_k": 3, "shared_d_ff": 40}}),
])
def test_flops_formula_matches_counted_matmuls(preset, over):
    # FlopCounterMode does not count torch._grouped_mm, the MoE's float32 path: in float64 the
    # block runs one ordinary matmul per busy expert, which it counts
    moe = isinstance(over.get("ffn"), dict) and over["ffn"]["kind"] == "moe"
    model = zoo.build(preset, attention="eager", seed=0, dtype="float64" if moe else None, **over).eval()
    T, S, B = 12, 9, 2
    ids = torch.randint(1, 500, (B, T))
    src = torch.randint(1, 500, (B, S)) if model.spec.arch == "encoder_decoder" else None
    cost = accounting.forward_cost(model, T, batch=B, src_len=S)
    assert cost["total_flops"] == counted_flops(model, ids, src)
    assert cost["total"] == cost["attention"] + cost["ffn"] + cost["head"]


def test_glu_and_gqa_change_the_split():
    base = accounting.forward_cost(zoo.spec("gpt_tiny"), 64)
    glu = accounting.forward_cost(zoo.spec("gpt_tiny", ffn="swiglu"), 64)
    gqa = accounting.forward_cost(zoo.spec("gpt_tiny", num_kv_heads=1), 64)
    assert glu["ffn"] * 2 == base["ffn"] * 3  # three D x d_ff matrices instead of two
    assert gqa["attention"] < base["attention"] and gqa["attention_core"] == base["attention_core"]
    assert gqa["kv_cache_bytes"] * 4 == base["kv_cache_bytes"]


def test_seed_table_and_crossover():
    """The seed's GPT-2 table: attention 2·T²·d, FFN 2·T·d·d_ff per layer, crossover at T = d_ff."""
    spec = zoo.spec("gpt_tiny", d_model=768, num_heads=12, num_layers=12, d_ff=3072,
                    vocab_size=50257, max_len=1024)
    assert accounting.crossover(spec)["core"] == 3072
    for T in (128, 1024, 4096):
        c = accounting.forward_cost(spec, T, bytes_per_elem=2)
        assert c["attention_core"] == 12 * 2 * T * T * 768  # seed attn_flops
        assert c["ffn"] == 12 * 2 * T * 768 * 3072  # seed ffn_flops
        assert c["scores_bytes"] == 12 * 12 * T * T * 2  # seed attn_matrix_elems x 2 bytes
    at = accounting.forward_cost(spec, 3072)
    assert at["attention_core"] == at["ffn"]
    x = accounting.crossover(spec)["attention"]
    c = accounting.forward_cost(spec, int(x))
    assert c["attention"] == c["ffn"]  # projections + core = ffn at T = 2 d_model here
    assert accounting.human(1234567) == "1.23M"


def test_parameter_table_and_measure():
    model = zoo.build("gpt_tiny", num_layers=2, seed=0)
    rows = accounting.parameter_table(model)
    assert rows[-1]["component"] == "total" and rows[-1]["parameters"] == model.num_parameters()
    assert sum(r["parameters"] for r in rows[:-1]) == model.num_parameters()
    meas = accounting.measure(model, seq_lens=(8, 32), repeats=1)
    assert [m["seq_len"] for m in meas] == [8, 32]
    assert all(m["measured_s"] > 0 and m["estimated_s"] > 0 for m in meas)
    assert meas[1]["flops"] > meas[0]["flops"]
    fig = plots.timing(meas)
    assert [len(line.get_xdata()) for line in fig.axes[0].get_lines()] == [2, 2]


def _save_all(figs, tmp_path):
    out = {}
    for name, fig in figs.items():
        p = plots.save_figure(fig, tmp_path / f"{name}.png")
        out[name] = p
        size = p.stat().st_size
        assert 5_000 < size < 3_000_000, (name, size)
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return out


@pytest.mark.parametrize("text", ["the cat sat on the mat", "床前明月光，疑是地上霜"])
def test_figures_english_and_chinese(text, tmp_path):
    tok = zoo.tokenizer("char", text=text)
    model = zoo.build("gpt_tiny", num_layers=2, vocab_size=tok.vocab_size, seed=0)
    tr = zoo.trace(model, text=text, tokenizer=tok)
    with warnings.catch_warnings():
        # a missing glyph (Chinese drawn as boxes) or a missing CJK font fails the test
        warnings.filterwarnings("error", message=r".*Glyph .* missing")
        warnings.filterwarnings("error", message=r"no CJK font")
        figs = {
            "heatmap": plots.attention_heatmap(tr.attention(1)[0, 2], tr.tokens),
            "grid": plots.attention_grid(tr),
            "mask": plots.mask_pattern(model.spec, 10),
            "sinusoid": plots.sinusoid_waves(d_model=32, max_len=50),
            "rope": plots.rope_rotation(head_dim=32, positions=12),
            "cost": plots.compute_cost_curve(model, [16, 64, 256, 1024]),
        }
        _save_all(figs, tmp_path)
    labels = [t.get_text() for t in figs["heatmap"].axes[0].get_xticklabels()]
    assert labels == tr.tokens


def test_mask_pattern_values_and_bias_views(tmp_path):
    spec = zoo.spec("gpt_tiny", mask=["causal", {"kind": "sliding_window", "window": 3}])
    fig = plots.mask_pattern(spec, 6)
    want = torch.tensor([[0 <= i - j < 3 for j in range(6)] for i in range(6)])
    assert torch.equal(fig.mask, want)
    pad = plots.mask_pattern(zoo.spec("bert_tiny"), 4, padding=[True, True, True, False])
    assert pad.mask[:, 3].tolist() == [False] * 4 and bool(pad.mask[:, :3].all())
    _save_all({"alibi": plots.position_bias(zoo.spec("gpt_tiny", positions="alibi")),
               "t5": plots.position_bias(zoo.spec("t5_tiny", positions="t5_relative"))}, tmp_path)
    with pytest.raises(zoo.ZooError, match="no score bias"):
        plots.position_bias(zoo.spec("gpt_tiny"))


def test_cjk_font_found():
    name = plots.cjk_font()
    assert name is not None, "pip install noto-cjk-sans-otc (a dependency of the ui/test extras)"


def test_chinese_renders_with_no_system_font(monkeypatch, tmp_path):
    """A machine without fonts-noto-cjk: no installed CJK face, no known font file.  The font from
    PyPI must be found, and every character of a Chinese label must have a glyph in it (FreeType's
    own character map, not our code, says so)."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    monkeypatch.setattr(plots, "_FONT", {})
    monkeypatch.setattr(plots, "_PREFERRED", ())
    monkeypatch.setattr(plots, "_CANDIDATES", ())
    monkeypatch.delenv("ZOO_CJK_FONT", raising=False)
    name = plots.cjk_font()
    path = plots._FONT.get("file")
    assert path and path == plots._pypi_font(), "the PyPI font (noto-cjk-sans-otc) was not used"
    assert name == font_manager.FontProperties(fname=path).get_name()
    face = FT2Font(path)
    label = "注意力权重 查询 键 床前明月光"
    assert all(face.get_char_index(ord(ch)) != 0 for ch in label if not ch.isspace())
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=r".*Glyph .* missing")
        plots.save_figure(plots.attention_heatmap(torch.tensor([[0.7, 0.3], [0.4, 0.6]]), ["床", "前"]),
                          tmp_path / "zh.png")


@pytest.mark.parametrize("bad", [[[1.0, 2.0], [3.0]], "x", None, [], [[[1.0]]]])
def test_the_heatmap_refuses_what_is_not_one_head_of_weights(bad):
    """Found by the hostile table's warm-up: a list of weights was a raw AttributeError."""
    from zoo.inside.plots import attention_heatmap

    with pytest.raises(zoo.ZooError) as e:
        attention_heatmap(bad)
    assert "attention_heatmap.weights" in str(e.value)

"""Inspection: a trace changes nothing, captures what the eager kernel computes, and its edits (head
ablation, residual patching) change exactly what they should."""
import pytest
import torch

import zoo

from helpers import kernel, shrunk
from zoo.inside.trace import trace

PRESETS = zoo.list_presets()


def build(preset, **over):
    model = zoo.build(preset, seed=0, **over).eval()
    return model


def inputs(model, B=2, T=7, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(5, model.spec.vocab_size, (B, T), generator=g)


def plain(model, ids):
    return model(ids, ids) if model.spec.arch == "encoder_decoder" else model(ids)


@pytest.mark.parametrize("preset", PRESETS)
def test_trace_logits_equal_plain_forward_and_model_restored(preset):
    model = build(shrunk(preset))
    kernels = [type(m.kernel) for m in model.modules() if hasattr(m, "kernel")]
    ids = inputs(model)
    ids[1, -2:] = 0  # some padding where the spec has a pad_id
    tr = trace(model, ids)
    torch.testing.assert_close(tr.logits, plain(model, ids), atol=1e-5, rtol=1e-5)
    assert [type(m.kernel) for m in model.modules() if hasattr(m, "kernel")] == kernels
    assert not any("exit" in vars(m) for m in model.modules())  # placement wrappers removed
    for stack in model.spec.roles:
        L = model.spec.stack(stack).num_layers
        assert len(tr.names(f"{stack}.blocks.*.attn.weights")) == L
        assert len(tr.names(f"{stack}.blocks.*.resid_ffn")) == L
        assert f"{stack}.embeddings" in tr and f"{stack}.token_embeddings" in tr
        w = tr.attention(0, stack)
        torch.testing.assert_close(w.sum(-1)[w.sum(-1) > 0], torch.ones_like(w.sum(-1)[w.sum(-1) > 0]))
    assert tr.norm_stats and all(v["out_rms"] > 0 for v in tr.norm_stats.values())


def test_model_restored_when_the_run_raises():
    model = build("gpt_tiny")
    kernel = model.decoder.blocks[0].attn.kernel
    with pytest.raises(Exception):
        trace(model, torch.full((1, 300), 3))  # longer than max_len
    assert model.decoder.blocks[0].attn.kernel is kernel
    assert not model.decoder.blocks[0].attn_res._forward_hooks


@pytest.mark.parametrize("positions", ["sinusoidal", "alibi", "rope", "t5_relative"])
def test_captured_weights_equal_eager_kernel(positions):
    sd = build("gpt_tiny", positions=positions, attention="sdpa",
               mask=["causal", {"kind": "sliding_window", "window": 4}])
    eager = build("gpt_tiny", positions=positions, attention="eager",
                  mask=["causal", {"kind": "sliding_window", "window": 4}])
    eager.load_state_dict(sd.state_dict())
    ids = inputs(sd, T=9)
    tr = trace(sd, ids)
    torch.testing.assert_close(tr.logits, eager(ids), atol=1e-5, rtol=1e-5)
    naive = kernel("naive", head_dim=sd.spec.stack("decoder").head_dim,
                   heads=sd.spec.stack("decoder").num_heads)
    i_, j_ = torch.arange(9)[:, None], torch.arange(9)[None, :]
    window = (j_ <= i_) & (j_ > i_ - 4)  # causal & sliding window 4, by hand  (Tq, Tk)
    for i in range(len(sd.decoder.blocks)):
        p = f"decoder.blocks.{i}.attn"
        bias = tr[f"{p}.bias"] if f"{p}.bias" in tr else None
        _, ref = naive(tr[f"{p}.q"], tr[f"{p}.k"], tr[f"{p}.v"], mask=window[None, None], bias=bias,
                       need_weights=True)  # the per-query loop on the captured inputs
        torch.testing.assert_close(tr.attention(i), ref, atol=1e-6, rtol=1e-5)
        masked = tr[f"decoder.blocks.{i}.attn.scores_masked"]
        torch.testing.assert_close(masked.softmax(-1), tr.attention(i))
        # causal & window 4: query 8 sees keys 5..8 only
        allowed = torch.isfinite(masked[0, 0, 8])
        assert allowed.tolist() == [False] * 5 + [True] * 4
        w, heads, v = tr.attention(i), tr[f"decoder.blocks.{i}.attn.heads"], tr[f"decoder.blocks.{i}.attn.v"]
        torch.testing.assert_close(heads, w @ v, atol=1e-6, rtol=1e-5)


def test_head_ablation_changes_exactly_one_head():
    model = build("gpt_tiny")
    ids = inputs(model)
    L, H, hd = 1, 2, model.spec.stack("decoder").head_dim
    base = trace(model, ids)
    abl = trace(model, ids, ablate={f"decoder.blocks.{L}.attn": [H]})
    # everything before layer L is untouched
    for name in base.names("decoder.blocks.0.*") + ["decoder.embeddings"]:
        assert torch.equal(base[name], abl[name]), name
    heads0, heads1 = base[f"decoder.blocks.{L}.attn.heads"], abl[f"decoder.blocks.{L}.attn.heads"]
    assert torch.equal(heads1[:, H], torch.zeros_like(heads1[:, H]))
    keep = [h for h in range(heads0.size(1)) if h != H]
    assert torch.equal(heads0[:, keep], heads1[:, keep])
    assert torch.equal(base[f"decoder.blocks.{L}.attn.weights"], abl[f"decoder.blocks.{L}.attn.weights"])
    # pre-norm residual: the stream loses exactly head H's share of the output projection
    W = model.decoder.blocks[L].attn.out.weight[:, H * hd:(H + 1) * hd]  # (D, hd)
    contribution = heads0[:, H] @ W.T  # (B, T, D)
    diff = abl[f"decoder.blocks.{L}.resid_attn"] - base[f"decoder.blocks.{L}.resid_attn"]
    torch.testing.assert_close(diff, -contribution, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(base.logits, abl.logits)
    # the (layer, head) shorthand means the same
    same = trace(model, ids, ablate=[(L, H)])
    assert torch.equal(same.logits, abl.logits)


def test_residual_patch_and_edit_functions():
    model = build("gpt_tiny")
    a, b = inputs(model, seed=1), inputs(model, seed=2)
    last = model.spec.num_layers - 1
    tb = trace(model, b)
    name = f"decoder.blocks.{last}.resid_ffn"
    patched = trace(model, a, patch={name: tb[name]})
    # patching the last residual stream makes the output that of input b
    torch.testing.assert_close(patched.logits, tb.logits)
    # patching the whole stream after layer 0's attention: everything downstream follows input b
    early = trace(model, a, patch={"decoder.blocks.0.resid_attn": tb["decoder.blocks.0.resid_attn"]})
    torch.testing.assert_close(early.logits, tb.logits)
    # patching one position (3) of it: causal, so earlier positions keep a's logits, later ones move
    base = trace(model, a)
    src = tb["decoder.blocks.0.resid_attn"]

    def one_position(x):
        x = x.clone()
        x[:, 3] = src[:, 3]
        return x

    one = trace(model, a, edits={"decoder.blocks.0.resid_attn": one_position})
    torch.testing.assert_close(one.logits[:, :3], base.logits[:, :3])
    assert all(not torch.allclose(one.logits[:, t], base.logits[:, t]) for t in range(3, 7))
    doubled = trace(model, a, edits={"decoder.blocks.0.ffn.out": lambda x: 2 * x})
    torch.testing.assert_close(doubled["decoder.blocks.0.ffn.out"], 2 * base["decoder.blocks.0.ffn.out"])
    with pytest.raises(zoo.ZooError, match="cannot be edited"):
        trace(model, a, edits={"decoder.blocks.0.attn.weights": lambda x: x})
    with pytest.raises(zoo.ZooError, match="no capture point"):
        trace(model, a, patch={"decoder.blocks.99.resid_ffn": tb[name]})
    with pytest.raises(zoo.ZooError, match="shape"):
        trace(model, a, patch={name: tb[name][:, :2]})


def test_encoder_decoder_cross_attention_and_text():
    model = build("t5_tiny")
    src, tgt = inputs(model, T=6), inputs(model, T=4)
    tr = trace(model, src, tgt_ids=tgt)
    w = tr.attention(0, "decoder", cross=True)
    assert w.shape == (2, model.spec.num_heads, 4, 6)
    torch.testing.assert_close(tr.logits, model(src, tgt), atol=1e-5, rtol=1e-5)
    assert tr.attention_stack("encoder").shape[0] == 3
    tok = zoo.tokenizer("byte")
    gpt = build("gpt_tiny", vocab_size=tok.vocab_size)
    tt = trace(gpt, text="注意力", tokenizer=tok)
    assert len(tt.tokens) == 9 and tt.attention(0).shape[-1] == 9
    s = tt.summary()
    assert len(s["attention"]) == 4 and len(s["next_token"]) == 5
    assert len(s["residual_norms"]["decoder.blocks.0.resid_attn"]) == 9


def test_cli_inspect_writes_figures_and_json(tmp_path):
    import json

    from click.testing import CliRunner

    from zoo.cli import cli

    tok = zoo.tokenizer("char", text="注意力就是一切")
    model = zoo.build("gpt_tiny", num_layers=2, positions="rope", vocab_size=tok.vocab_size, seed=0)
    zoo.save(model, tmp_path / "ck", tokenizer=tok)
    res = CliRunner().invoke(cli, ["inspect", str(tmp_path / "ck"), "--text", "注意力就是一切",
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    names = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"attention_grid.png", "attention_L0.png", "attention_L1.png", "mask.png",
            "positions.png", "cost.png", "inspect.json"} <= names and "experts.png" not in names
    assert all((tmp_path / "out" / n).stat().st_size > 5000 for n in names if n.endswith(".png"))
    data = json.loads((tmp_path / "out" / "inspect.json").read_text(encoding="utf-8"))
    assert data["tokens"] == list("注意力就是一切")
    w = torch.tensor(data["attention"]["decoder.blocks.1.attn.weights"])
    torch.testing.assert_close(w, zoo.trace(zoo.load(tmp_path / "ck"), text="注意力就是一切")
                               .attention(1)[0], atol=1e-4, rtol=0)
    assert data["parameters"][-1]["parameters"] == model.num_parameters()
    assert data["crossover"]["core"] == 512


def test_non_softmax_kernel_is_traced_not_swapped():
    from zoo.components import AttentionKernel, Capabilities

    class ReluAttention(AttentionKernel):  # not softmax attention: must never become eager
        capabilities = Capabilities(exact=False)

        def forward(self, q, k, v, mask=None, bias=None, is_causal=False, need_weights=False):
            w = torch.relu(q @ k.transpose(-2, -1) * self.scale)  # (B, h, Tq, Tk)
            if is_causal:
                w = w.tril()
            return w @ v, None

    model = build("gpt_tiny", num_layers=2)
    for block in model.decoder.blocks:
        old = block.attn.kernel
        block.attn.kernel = ReluAttention(None, type("C", (), {"scale": old.scale, "dropout": 0.0}))
    ids = inputs(model)
    tr = trace(model, ids)
    torch.testing.assert_close(tr.logits, model(ids))
    assert tr.names("*.scores") == [] and len(tr.names("*.attn.heads")) == 2
    assert isinstance(model.decoder.blocks[0].attn.kernel, ReluAttention)


def test_trace_records_the_eager_kernels_own_steps_without_recomputing():
    """The eager kernel's ``steps`` are what the trace records: one call per attention layer, no
    second attention pass (the kernel's ``forward`` is not called), and its ``heads`` are the
    per-head outputs the model went on with."""
    from zoo.plugins.attention_eager import EagerAttention

    model = build("gpt_tiny", num_layers=2, attention="eager")
    ids = inputs(model)
    calls = {"steps": 0, "forward": 0}
    steps, forward = EagerAttention.steps, EagerAttention.forward

    def counted_steps(self, *a, **k):
        calls["steps"] += 1
        return steps(self, *a, **k)

    def counted_forward(self, *a, **k):
        calls["forward"] += 1
        return forward(self, *a, **k)

    EagerAttention.steps, EagerAttention.forward = counted_steps, counted_forward
    try:
        tr = trace(model, ids)
    finally:
        EagerAttention.steps, EagerAttention.forward = steps, forward
    assert calls == {"steps": 2, "forward": 0}
    torch.testing.assert_close(tr.logits, model(ids))
    for i in range(2):
        p = f"decoder.blocks.{i}.attn"
        torch.testing.assert_close(tr[f"{p}.scores_masked"].softmax(-1), tr[f"{p}.weights"])


def test_trace_keeps_the_kernel_contract_for_fully_masked_rows():
    """zoo.trace goes through the engine's kernel path (zoo.model.layers.kernel_steps): left-padded
    queries see no real key, so their rows show -inf scores, zero weights and a zero output, and
    the traced logits equal the model's own (sdpa) forward."""
    model = zoo.build("gpt_tiny", num_layers=1, seed=0).eval()
    ids, mask = torch.tensor([[0, 0, 5, 6, 7]]), torch.tensor([[0, 0, 1, 1, 1]])
    tr = zoo.trace(model, ids, attention_mask=mask)
    p = "decoder.blocks.0.attn"
    assert bool((tr[f"{p}.weights"][0, :, :2] == 0).all())
    assert bool((tr[f"{p}.heads"][0, :, :2] == 0).all())
    assert bool(torch.isinf(tr[f"{p}.scores_masked"][0, :, :2]).all())
    torch.testing.assert_close(tr[f"{p}.weights"][0, :, 2:].sum(-1), torch.ones(4, 3))
    torch.testing.assert_close(tr.logits, model(ids, attention_mask=mask), rtol=1e-5, atol=1e-5)


def test_cli_inspect_draws_the_router_load_of_a_mixture_of_experts(tmp_path):
    """``experts.png`` and ``expert_counts`` in inspect.json for a MoE model (none for a dense one:
    see the test above); each layer's counts add up to tokens x top_k."""
    import json

    from click.testing import CliRunner

    from zoo.cli import cli

    tok = zoo.tokenizer("char", text="专家混合路由")
    model = zoo.build("gpt_tiny", num_layers=2, vocab_size=tok.vocab_size, seed=0,
                      ffn={"kind": "moe", "experts": 4, "top_k": 2})
    zoo.save(model, tmp_path / "ck", tokenizer=tok)
    res = CliRunner().invoke(cli, ["inspect", str(tmp_path / "ck"), "--text", "专家混合路由",
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "out" / "experts.png").stat().st_size > 5000
    data = json.loads((tmp_path / "out" / "inspect.json").read_text(encoding="utf-8"))
    counts = data["expert_counts"]
    assert len(counts) == 2 and all(sum(c) == 6 * 2 and len(c) == 4 for c in counts.values())

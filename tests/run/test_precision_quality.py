"""Issue 36, goal 2: quantisation that keeps a real model's answers (zoo.run.precision).

The unit tests check the weight-only int8 layer against a product computed here by hand, the
4-bit exactness rule, the quality check's refusal path and the errors of a packed model (a cast, a
move, a backward).  The slow tests run every scheme on the real SmolLM2-135M-Instruct (converted
from its Q4_1 GGUF file, float32): top-1 agreement with float32 and the change of held-out
next-token NLL on English text (``real_models.ENGLISH``, which the check text is not) against
pinned bounds, " Paris" after "The capital of France is", and the warning or refusal of the
schemes that lose it (the per-tensor dynamic int8, int4 rounded twice)."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import real_models
import zoo
from zoo.errors import ZooError
from zoo.run import precision as P

pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(not (P.int8_weight_only_supported() and P.int4_supported()),
                                 reason="this PyTorch has no CPU weight-only int8 / int4 kernel")]

SMALL = dict(vocab_size=97, max_len=64, d_model=32, num_layers=2, num_heads=2, d_ff=64)


# ---------------------------------------------------------------------- the layer, by hand
@pytest.mark.parametrize("out_f, in_f, bias", [(48, 64, False), (17, 40, True), (5, 16, True)])
def test_int8_weight_only_is_the_hand_rounded_product(out_f, in_f, bias):
    """Rows of very different size, each rounded to int8 on its own grid here.  Each row's scale is
    a power of two (its largest weight is 127 x 2^e) and the inputs are small integers, so bfloat16
    holds both exactly and the only rounding left in the kernel is its bfloat16 output (2^-9
    relative): the layer lands on the hand product within 2^-8, and the float32 weights miss that
    (the tolerance sees int8 rounding).  40 inputs: padded to 48 for the kernel's 16-wide reads."""
    g = torch.Generator().manual_seed(0)
    lin = nn.Linear(in_f, out_f, bias=bias)
    rows = torch.tensor([0.01, 0.1, 1.0, 10.0]).repeat(out_f)[:out_f, None]
    w = torch.randn(out_f, in_f, generator=g, dtype=torch.float64) * rows
    scale = torch.exp2(torch.round(torch.log2(w.abs().amax(1, keepdim=True) / 127)))  # (out, 1)
    w = torch.maximum(torch.minimum(w, 127 * scale), -127 * scale)
    w[:, 0] = 127 * scale[:, 0]  # each row's largest weight: 127 x its power-of-two scale
    with torch.no_grad():
        lin.weight.copy_(w)
    x = torch.randint(-4, 5, (3, 5, in_f), generator=g).double()
    w_hand = (w / scale).round() * scale
    product = x @ w_hand.T
    b = lin.bias.detach().double() if bias else 0
    got = P.Int8Linear(lin)(x.float())
    assert got.shape == (3, 5, out_f) and got.dtype == torch.float32
    tol = 2 ** -8 * product.abs() + 1e-6
    assert ((got.double() - (product + b)).abs() <= tol).all()
    plain = x @ w.T  # the float32 weights: int8 rounding is above the tolerance
    assert ((plain - product).abs() > tol).float().mean() > 0.2


def test_int8_weight_only_does_not_round_the_activations():
    """An input with one channel 400x the others (a real LLM's outlier; here its weights are zero,
    so the output is the ordinary channels' alone): the dynamic layer, which rounds the whole input
    to int8 with one scale, flattens those channels to a level or two and loses the output; the
    weight-only layer keeps it (its error is the weights' rounding and bfloat16's alone)."""
    g = torch.Generator().manual_seed(1)
    lin = nn.Linear(64, 32, bias=False)
    with torch.no_grad():
        lin.weight[:, 7] = 0
    x = torch.randn(4, 64, generator=g) * 0.1
    x[:, 7] = 40.0
    exact = lin(x).detach()
    size = exact.abs().max()
    wo = (P.Int8Linear(lin)(x) - exact).abs().max() / size
    dyn = (P.Int8DynamicLinear(lin)(x) - exact).abs().max() / size
    assert wo < 0.03 and dyn > 0.15, (float(wo), float(dyn))


def test_int4_exact_finds_weights_already_on_a_4bit_grid():
    """Weights built as a Q4_1 file stores them (a scale and a minimum per 32 weights, codes 0..15
    using both ends) are exact at group 32 -- quantising them again keeps every code -- and not at
    64 (two grids in one group) nor after a nudge."""
    g = torch.Generator().manual_seed(0)
    q = torch.randint(0, 16, (24, 4, 32), generator=g).float()
    q[:, :, 0], q[:, :, 1] = 0, 15  # each block spans its own range, as Q4_1's quantiser makes it
    d = torch.rand(24, 4, 1, generator=g) * 0.01 + 1e-3
    m = -torch.rand(24, 4, 1, generator=g) * 0.05
    w = (q * d + m).reshape(24, 128)
    assert P.int4_exact(w, 32)
    assert not P.int4_exact(w, 64) and not P.int4_exact(w, 128)
    nudged = w.clone()
    nudged[20, 5] += 0.3 * float(d[20, 0])  # a third of a level, in a row past the first 16
    assert not P.int4_exact(nudged, 32)
    lin = nn.Linear(128, 24, bias=False)
    with torch.no_grad():
        lin.weight.copy_(w)
    model = nn.Sequential(lin)
    P.quantize_int4(model, check="off")  # group_size=None: the blocks found
    assert model.int4_groups == {32: 1} and model.int4_exact == 1
    x = torch.randn(3, 128, generator=g)
    tol = 1e-2 * (x.abs() @ w.abs().T) + 1e-6  # bf16 activations and (scale, zero) only
    assert ((model(x) - x @ w.T).abs() <= tol).all()


# ---------------------------------------------------------------------- a packed model's errors
@pytest.mark.parametrize("quantize", [P.quantize_int8, P.quantize_int4], ids=["int8", "int4"])
def test_a_quantised_model_cannot_be_cast_or_moved_and_stays_whole(quantize):
    model = quantize(zoo.build("gpt_tiny", seed=0, **SMALL), check="off")
    ids = torch.randint(0, 97, (1, 9))
    with torch.inference_mode():
        before = model(ids)
    for cast in (lambda m: m.to(torch.bfloat16), lambda m: m.half(), lambda m: m.double(),
                 lambda m: m.to("meta")):
        with pytest.raises(ZooError, match="cast or move the float model first"):
            cast(model)
    assert model.tok_emb.weight.dtype == torch.float32  # refused before any tensor changed
    model.float()  # what changes nothing is allowed, and leaves the packed tensors alone
    model.to("cpu")
    with torch.inference_mode():
        assert torch.equal(model(ids), before)
    with pytest.raises(ZooError, match="packed"):
        P.Int8Linear(nn.Linear(16, 4)).to(torch.bfloat16)  # a layer on its own too
    twice = copy.deepcopy(model)  # the guard follows a copy
    with pytest.raises(ZooError, match="cast or move"):
        twice.to(torch.bfloat16)
    with pytest.raises(ZooError, match="already holds"):
        quantize(model, check="off")


@pytest.mark.parametrize("quantize", [P.quantize_int8, P.quantize_int4], ids=["int8", "int4"])
def test_training_a_quantised_model_is_a_zoo_error(quantize):
    """Forward with autograd on gives the same numbers; the backward is a ZooError naming the fix
    (PyTorch's was "derivative for aten::_weight_int4pack_mm_for_cpu is not implemented")."""
    model = quantize(zoo.build("gpt_tiny", seed=0, **SMALL), check="off")
    ids = torch.randint(0, 97, (2, 8))
    with torch.inference_mode():
        ref = model(ids)
    model.train()
    logits = model(ids)  # grad mode, embeddings that require grad
    assert torch.allclose(logits.detach(), ref)
    with pytest.raises(ZooError, match="for inference") as info:
        F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten()).backward()
    assert "train the float model" in str(info.value)


def test_a_bfloat16_model_quantises_and_keeps_its_dtype():
    model = zoo.build("gpt_tiny", seed=0, dtype="bfloat16", **SMALL)
    P.quantize_int8(model, check="off")
    with torch.inference_mode():
        out = model(torch.randint(0, 97, (1, 6)))
    assert out.dtype == torch.bfloat16 and out.shape == (1, 6, 97)


def test_bad_arguments_are_zoo_errors():
    model = zoo.build("gpt_tiny", seed=0, **SMALL)
    with pytest.raises(ZooError, match="activations"):
        P.quantize_int8(copy.deepcopy(model), activations="int8")
    with pytest.raises(ZooError, match="check must be one of"):
        P.quantize_int8(copy.deepcopy(model), check="maybe")
    with pytest.raises(ZooError, match="head must be one of"):
        P.quantize_int4(copy.deepcopy(model), head="int2")
    with pytest.raises(ZooError, match="check must be one of"):
        P.quantize_int4(copy.deepcopy(model), check=True)


def test_the_check_says_why_it_measured_nothing():
    model = P.quantize_int8(zoo.build("gpt_tiny", seed=0, **SMALL))  # random weights, no tokenizer
    assert model.quality == {"scheme": "int8", "measured": False, "why": "the model has no tokenizer"}
    assert P.quality_line(model) == "quality of int8: not measured (the model has no tokenizer)"
    poet = P.quantize_int4(zoo.load("poet_gpt"))  # a Chinese character model: English is unknown
    assert not poet.quality["measured"] and "pass text=" in poet.quality["why"]


# ---------------------------------------------------------------------- the real model
@pytest.fixture(scope="module")
def real():
    """SmolLM2-135M-Instruct (float32), the ids of the held-out English paragraph and of the
    France prompt, and float32's logits and greedy continuation on them."""
    model = real_models.smollm2()
    tok = model.tokenizer
    ids = torch.tensor([tok.encode(real_models.ENGLISH)])
    prompt = torch.tensor([tok.encode("The capital of France is")])
    with torch.inference_mode():
        ref = model(ids).float()[0]
        cont = model.generate(prompt, 2, do_sample=False)[0, prompt.size(1):]
    assert tok.decode(cont.tolist()) == " Paris."  # float32 says it
    return dict(model=model, tok=tok, ids=ids, prompt=prompt, ref=ref)


def measure(real, quantized) -> dict:
    with torch.inference_mode():
        got = quantized(real["ids"]).float()[0]
        cont = quantized.generate(real["prompt"], 2, do_sample=False)[0, real["prompt"].size(1):]
    y = real["ids"][0, 1:]
    return {"top1": float((got.argmax(-1) == real["ref"].argmax(-1)).float().mean()),
            "dnll": float(F.cross_entropy(got[:-1], y) - F.cross_entropy(real["ref"][:-1], y)),
            "text": real["tok"].decode(cont.tolist())}


#: scheme -> (quantise, the least top-1 agreement, the most |ΔNLL|) on real_models.ENGLISH (126
#: tokens).  Measured: int8 96.0% / +0.0097, int4 97.6% / -0.0065 (docs/PERFORMANCE.md); pinned
#: two to three flipped positions below, and at a fifth of the documented bound's 0.05 nats.
KEEPS = {
    "int8": (lambda m: P.quantize_int8(m, check="off"), 0.93, 0.02),
    "int4": (lambda m: P.quantize_int4(m, check="off"), 0.95, 0.02),
    "int4-head-float": (lambda m: P.quantize_int4(m, head="float", check="off"), 0.95, 0.02),
}


@pytest.mark.slow
@pytest.mark.parametrize("scheme", sorted(KEEPS))
def test_the_real_model_keeps_its_answers(real, scheme):
    quantize, top1, dnll = KEEPS[scheme]
    got = measure(real, quantize(copy.deepcopy(real["model"])))
    assert got["top1"] >= top1 and abs(got["dnll"]) <= dnll, got
    assert got["text"] == " Paris.", got


@pytest.mark.slow
def test_int4_keeps_the_files_own_codes_and_an_8bit_head(real):
    """Every block weight of the Q4_1 file is already 4-bit in blocks of 32: int4's default keeps
    those groups (150 layers: qkv, out, gate, up, down x 30), so no weight is rounded twice, and
    the head (Q8_0 in the file) gets int8 rows, not 4 bits."""
    model = P.quantize_int4(copy.deepcopy(real["model"]), check="off")
    assert model.int4_groups == {32: 150} and model.int4_exact == 150 and model.int4_skipped == []
    assert type(model.lm_head) is P.Int8Linear
    w = real["model"].decoder.blocks[7].ffn.down.weight
    layer = model.decoder.blocks[7].ffn.down
    back = torch.ops.aten._weight_int4pack_mm_for_cpu(torch.eye(w.size(1), dtype=torch.bfloat16),
                                                      layer.packed, 32, layer.scales_zeros)
    # the codes are the file's: what is left is bfloat16's rounding of (scale, zero), well under
    # a tenth of a level (the level is max - min over 15 in each block of 32)
    level = ((w.view(w.size(0), -1, 32).amax(-1) - w.view(w.size(0), -1, 32).amin(-1)) / 15)
    err = (back.float().T - w).abs().view(w.size(0), -1, 32).amax(-1)
    assert (err <= 0.1 * level + 1e-4).all(), float((err / level).max())


@pytest.mark.slow
def test_schemes_that_change_the_answers_warn_with_the_figures(real):
    """The per-tensor dynamic int8 (the old default) and int4 at group 128 (the file's 4-bit blocks
    rounded again at 64: 576 inputs) miss the bound by far: each warns with the measured figures,
    and ``check='error'`` refuses and hands back the float model untouched."""
    for quantize, name in ((lambda m, **k: P.quantize_int8(m, activations="dynamic", **k), "int8 dynamic"),
                           (lambda m, **k: P.quantize_int4(m, 128, **k), "int4")):
        model = copy.deepcopy(real["model"])
        with pytest.warns(P.QualityWarning, match=f"^{name} changes this model's answers: top-1 "
                                                  r"agreement with the float weights \d+\.\d%"):
            quantize(model)
        q = model.quality
        assert q["measured"] and not q["passed"] and q["tokens"] > 100
        assert q["top1"] < 0.8 and q["dnll"] > 0.2, q  # measured: 43.9% / +1.25, 67.4% / +0.47
        assert "MISSES the bound" in P.quality_line(model)
        assert measure(real, model)["top1"] < 0.8  # on the held-out paragraph too
        model = copy.deepcopy(real["model"])
        with warnings.catch_warnings():
            warnings.simplefilter("error", P.QualityWarning)  # a refusal does not also warn
            with pytest.raises(ZooError, match="changes this model's answers") as info:
                quantize(model, check="error")
        assert "bound >= 90%" in str(info.value) and info.value.where.startswith("quantize_int")
        assert not hasattr(model, "quantized") and not any(isinstance(m, P._Packed) for m in model.modules())
        with torch.inference_mode():
            assert torch.equal(model(real["ids"]).float()[0], real["ref"])


@pytest.mark.slow
def test_the_check_passes_the_schemes_that_keep_the_answers(real):
    model = copy.deepcopy(real["model"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", P.QualityWarning)
        P.quantize_int8(model)
    q = model.quality
    assert q["passed"] and q["text"] == "zoo's English check text" and q["tokens"] > 100
    assert q["top1"] >= 0.9 and q["dnll"] <= 0.05
    assert P.quality_line(model).endswith("within the bound")


@pytest.mark.slow
def test_zoo_bench_reports_the_quality(real, monkeypatch):
    from click.testing import CliRunner

    from zoo.cli import cli

    monkeypatch.setattr(zoo, "load_or_build", lambda *a, **k: copy.deepcopy(real["model"]))
    args = ["bench", "smollm2", "--task", "generate", "--new-tokens", "2", "--prompt-len", "4",
            "--repeats", "1", "--warmup", "0"]
    res = CliRunner().invoke(cli, args + ["--int4"])
    assert res.exit_code == 0, res.output
    assert "quality of int4: top-1 agreement with the float weights" in res.output
    assert "within the bound" in res.output
    res = CliRunner().invoke(cli, args + ["--int8", "--json"])
    assert res.exit_code == 0, res.output
    import json

    q = json.loads(res.output[res.output.index("{"):])["quality"]
    assert q["scheme"] == "int8" and q["passed"] and q["top1"] >= 0.9


def test_a_missed_bound_warns_at_the_caller_or_refuses_and_restores(monkeypatch):
    """The mechanics on the shipped poet_gpt, measured on its own held-out poems (``text=``), with
    a bound no quantisation meets: a QualityWarning pointing at this file, or with
    ``check='error'`` a ZooError and the float model back as it was."""
    from pathlib import Path

    monkeypatch.setattr(P, "QUALITY_BOUND", {"top1": 1.01, "dnll": -1.0})
    text = (Path(__file__).resolve().parents[2] / "data" / "tang_heldout.txt").read_text("utf-8")[:200]
    model = zoo.load("poet_gpt")
    with pytest.warns(P.QualityWarning, match="int4 changes this model's answers") as caught:
        P.quantize_int4(model, text=text)
    assert caught[0].filename == __file__
    q = model.quality
    assert q["measured"] and not q["passed"] and q["text"] == "the text given" and q["tokens"] > 100
    assert 0.5 < q["top1"] <= 1 and abs(q["dnll"]) < 0.1  # int4 on poet_gpt: close, not 101%
    model = zoo.load("poet_gpt")
    ids = torch.tensor([model.tokenizer.encode(text)[:model.spec.max_len]])
    with torch.inference_mode():
        before = model(ids)
    with pytest.raises(ZooError, match="int8 changes this model's answers"):
        P.quantize_int8(model, text=text, check="error")
    assert not any(isinstance(m, P._Packed) for m in model.modules()) and not hasattr(model, "quality")
    with torch.inference_mode():
        assert torch.equal(model(ids), before)
    model.to(torch.bfloat16)  # a float model again: no guard left behind

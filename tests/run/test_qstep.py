"""Issue 36, goal 3: the fused q4 decoding step (zoo.run.qstep): one C++ call a token, 8-bit
activations, VNNI integer dot products (and the portable loop, built with ZOO_QSTEP_PLAIN).

References: the activations' rounding against the same rounding in PyTorch (bit for bit), each
product against a float64 loop of the same block arithmetic (exact integer dot products, float64
sums), the fused step's logits against the unfused q4 module path's (which rounds activations to
int16 only) within a bound fit for 8-bit activations, and greedy tokens on the real SmolLM2-135M."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from zoo.run import precision, qkernels, qstep

pytestmark = [pytest.mark.skipif(not qkernels.available() or qstep.extension() is None,
                                 reason=f"zoo's block kernels are not built here: "
                                        f"{qkernels.unavailable() or qstep.unavailable()}"),
              pytest.mark.usefixtures("one_thread")]

PATHS = [False, True]  # the VNNI kernel (where the CPU has it) and the portable loop


def test_activation_rounding_is_the_stated_one():
    torch.manual_seed(1)
    x = torch.randn(4 * 32) * torch.tensor([0.01, 1.0, 30.0, 0.0]).repeat_interleave(32)
    x[40] = 300.0  # an outlier: its block's other inputs keep few levels, the other blocks theirs
    for plain in PATHS:
        q, s, t = qstep.extension(plain).quantize_act(x)
        q2, s2, t2 = qstep.quantize_activations(x)
        assert torch.equal(q, q2) and torch.equal(s, s2)
        assert torch.allclose(t, t2, rtol=1e-6, atol=1e-6)
        assert int(q.abs().max()) == 127 and torch.equal(q[96:], torch.zeros(32, dtype=torch.int8))
        # |x - xs * xq| <= xs / 2 per block
        assert bool(((x.view(4, 32) - s[:, None] * q.view(4, 32).float()).abs()
                     <= s[:, None] / 2 * (1 + 1e-6)).all())


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("N,K", [(16, 32), (40, 96), (960, 576), (24, 1536)])
def test_fused_products_equal_the_block_arithmetic(bits, N, K):
    torch.manual_seed(N + K + bits)
    lin = nn.Linear(K, N, bias=False)
    with torch.no_grad():
        lin.weight.mul_(torch.rand(N, 1) * 3)
    layer = precision.BlockLinear(lin, bits)
    x = torch.randn(K) * (torch.rand(K) * 4)
    x[K // 3] = 250.0
    ref = qstep.reference_product(x, layer)  # float64, exact integer dots
    xq, xs, xsum = qstep.quantize_activations(x)
    terms = (layer.dequantized().double().abs() * x.double().abs()).sum(-1)  # a scale for float32 sums
    for plain in PATHS:
        y = qstep.matvec(layer, x, plain=plain).double()
        assert y.shape == (N,)
        assert bool(((y - ref).abs() <= 2e-6 * terms + 1e-6).all()), (plain, (y - ref).abs().max())
    # and the 8-bit rounding is what separates it from the exact product: within its own bound
    exact = layer.dequantized().double() @ x.double()
    err = (x - xs.repeat_interleave(32) * xq.float()).double().abs()
    bound = layer.dequantized().double().abs() @ err
    assert bool(((ref - exact).abs() <= bound * (1 + 1e-6) + 1e-6).all())


@pytest.mark.parametrize("bits", [4, 8])
def test_float16_scales_are_read_as_float16_records(bits):
    """Scales that are all float16 numbers (a GGUF file's always are) are stored as float16 in the
    records -- 256 + 64 bytes a Q4 record instead of 256 + 128, 512 + 32 a Q8 one instead of 512 +
    64 -- and the products still equal the block arithmetic on both kernels."""
    torch.manual_seed(bits)
    N, K = 48, 128
    lin = nn.Linear(K, N, bias=False)
    layer = precision.BlockLinear(lin, bits)
    codes, scale, lo, bias = layer._kernel
    assert not qstep.repacked(layer)[4]  # float scales from a float model: float32 records
    assert qstep.repacked(layer)[3].shape == (N // 16, K // 32, 256 + 128 if bits == 4 else 512 + 64)
    layer._kernel = (codes, scale.half().float(), None if lo is None else lo.half().float(), bias)
    del layer._qstep_packed
    bits_, n16, k, rec, half = qstep.repacked(layer)
    assert half and rec.shape == (N // 16, K // 32, 256 + 64 if bits == 4 else 512 + 32)
    x = torch.randn(K) * 3
    ref = qstep.reference_product(x, layer)
    terms = (layer.dequantized().double().abs() * x.double().abs()).sum(-1)
    for plain in PATHS:
        y = qstep.matvec(layer, x, plain=plain).double()
        assert bool(((y - ref).abs() <= 2e-6 * terms + 1e-6).all()), (plain, (y - ref).abs().max())


def tiny_q4(vocab=100, kv_heads=2, seed=0):
    """A Llama-shaped zoo model on the Q4_1 grid (its head on Q8_0's), quantised to q4."""
    import zoo

    torch.manual_seed(seed)
    model = zoo.build("llama_tiny", num_layers=2, d_model=64, num_heads=4, num_kv_heads=kv_heads,
                      d_ff=128, vocab_size=vocab, max_len=128, tie_embeddings=False).eval()
    with torch.no_grad():
        for name, mod in model.named_modules():
            if "norm" in name and getattr(mod, "weight", None) is not None:
                mod.weight.uniform_(0.5, 1.5)
    return model, precision.quantize_q4(copy.deepcopy(model), check="off")


@pytest.fixture(scope="module")
def models():
    return tiny_q4()


def unfused_logits(q4, ids):
    with torch.inference_mode(), qstep.disabled():
        return q4(ids)[0]  # (T, V): the module path, int16-rounded activations


@pytest.mark.parametrize("prefill", [1, 5, 20])
def test_fused_step_follows_the_module_path(models, prefill):
    """Prompt then decode, cache lengths 1..63: the fused step's logits equal the unfused q4
    path's within 8-bit activations' rounding (under a tenth of the logits' spread: 0.054-0.063 measured), and both
    of its kernels agree as closely."""
    _, q4 = models
    ids = torch.randint(0, 100, (1, 64), generator=torch.Generator().manual_seed(prefill))
    ref = unfused_logits(q4, ids)[prefill - 1:]
    fast = qstep.decode_logits(q4, ids, prefill)  # row i predicts token prefill + i, as ref's
    plain = qstep.decode_logits(q4, ids, prefill, plain=True)
    assert fast.shape == ref.shape == plain.shape
    spread = ref.std(-1, keepdim=True)
    assert bool(((fast - ref).abs() <= 0.1 * spread).all()), ((fast - ref).abs() / spread).max()
    # the two kernels differ in the order of float32 additions only, but an activation that lands
    # on a rounding boundary then takes the neighbouring 8-bit code: 0.020-0.043 of the spread
    assert bool(((fast - plain).abs() <= 0.06 * spread).all()), ((fast - plain).abs() / spread).max()
    assert (fast.argmax(-1) == plain.argmax(-1)).float().mean() >= 0.95
    assert (fast.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.95


def test_two_threads_give_the_same_logits_bit_for_bit(models):
    """One parallel region a step: the threads split whole rows and whole heads, so a row's sums
    run in the same order at any thread count -- the logits are bit-equal at 1 and 2 threads.  And
    every matrix of the step lies in one buffer (the huge-page arena), in the order a step reads
    them; bytes_per_token counts it."""
    _, q4 = models
    ids = torch.randint(0, 100, (1, 40), generator=torch.Generator().manual_seed(7))
    one = qstep.decode_logits(q4, ids, 1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        two = qstep.decode_logits(q4, ids, 1)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(one, two)
    layers, head = q4._qstep_layers
    recs = [r for group in layers for r in group] + [head[3]]
    base = recs[0].untyped_storage().data_ptr()
    assert all(r.untyped_storage().data_ptr() == base for r in recs)
    starts = [r.data_ptr() for r in recs]
    assert starts == sorted(starts) and all(a % 64 == 0 for a in starts)
    assert qstep.bytes_per_token(q4) == sum(r.numel() for r in recs) + 4 * 64 * (2 * 2 + 2)


def test_generate_decodes_through_the_fused_step_and_says_when_not(models):
    model, q4 = models
    ids = torch.randint(0, 100, (1, 12), generator=torch.Generator().manual_seed(3))
    fused = q4.generate(ids, 24, do_sample=False)
    assert q4.qstep_reason is None
    # the fused step's greedy tokens are the argmax of its own teacher-forced logits
    logits = qstep.decode_logits(q4, fused, 12)
    assert torch.equal(logits[:-1].argmax(-1), fused[0, 12:])  # row i: token 12 + i
    with qstep.disabled():
        q4.generate(ids, 4, do_sample=False)
        assert "turned off" in q4.qstep_reason
    seen = []
    h = q4.decoder.blocks[0].ffn.register_forward_hook(lambda m, i, o: seen.append(1))
    try:
        q4.generate(ids, 4, do_sample=False)
        assert "hooks" in q4.qstep_reason and len(seen) == 4  # prefill + 3 steps: every call fired
    finally:
        h.remove()
    q4.generate(torch.cat([ids, ids]), 4, do_sample=False)
    assert "batch" in q4.qstep_reason
    assert qstep.why_not(model) is not None and "q4" in qstep.why_not(model)  # a float model


def test_a_model_it_does_not_cover_takes_the_module_path():
    import zoo

    torch.manual_seed(0)
    gpt = precision.quantize_q4(zoo.build("gpt_tiny", vocab_size=64, d_model=64, num_heads=4,
                                          num_layers=1, d_ff=128, max_len=64).eval(), check="off")
    assert "architecture" in qstep.why_not(gpt)
    ids = torch.randint(0, 64, (1, 6))
    out = gpt.generate(ids, 5, do_sample=False)
    assert out.shape == (1, 11) and "architecture" in gpt.qstep_reason
    _, q4h = tiny_q4()
    q4h_head = precision.quantize_q4(copy.deepcopy(tiny_q4()[0]), head="float", check="off")
    assert "LM head" in qstep.why_not(q4h_head)
    assert qstep.why_not(q4h) is None


@pytest.mark.slow
def test_real_smollm2_greedy_tokens_with_the_fused_step():
    """The real SmolLM2-135M-Instruct (Q4_1): the fused step's 32 greedy tokens after "The
    capital of France is" against the float32 conversion's, and its teacher-forced top-1 agreement
    and NLL on English text (zoo.run.precision.CHECK_TEXT) against float32's."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import real_models

    path = real_models.gguf_path("smollm2-135m")
    import zoo.convert

    base = zoo.convert.from_gguf(path).eval()
    q4 = precision.quantize_q4(copy.deepcopy(base), check="off")
    tok = base.tokenizer
    ids = torch.tensor([tok.encode("The capital of France is")])
    a = base.generate(ids, 32, do_sample=False)[0, ids.size(1):]
    b = q4.generate(ids, 32, do_sample=False)[0, ids.size(1):]
    assert q4.qstep_reason is None
    assert tok.decode(b[:2].tolist()).strip().startswith("Paris")
    first = next((i for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())) if x != y), 32)
    assert first >= 8, (first, tok.decode(a.tolist()), tok.decode(b.tolist()))
    text = torch.tensor([tok.encode(precision.CHECK_TEXT)])
    with torch.inference_mode():
        ref = base(text)[0, :-1].float()
    got = qstep.decode_logits(q4, text, 1)[:-1]  # predicting tokens 1 .. T-1
    top1 = (ref.argmax(-1) == got.argmax(-1)).float().mean().item()
    target = text[0, 1:]
    nll = lambda lg: torch.nn.functional.cross_entropy(lg, target).item()  # noqa: E731
    assert top1 >= 0.90 and nll(got) - nll(ref) <= 0.05, (top1, nll(got) - nll(ref))


def test_zoo_bench_q4_says_which_path_decoded(tmp_path):
    """``zoo bench --q4`` quantises to q4 and says whether batch-1 generation took the fused step
    (a Llama) or the module path and why (a GPT); two schemes at once are refused, naming both."""
    import json

    import zoo
    from click.testing import CliRunner

    from zoo.cli import cli
    from zoo.errors import ZooError

    model, _ = tiny_q4()
    zoo.save(model, tmp_path / "llama")
    args = ["--task", "generate", "--new-tokens", "4", "--prompt-len", "4", "--repeats", "1",
            "--warmup", "0", "--threads", "1"]
    res = CliRunner().invoke(cli, ["bench", str(tmp_path / "llama"), "--q4", "--json", *args])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["q4_decoding"].startswith("the fused step") and "q4" in json.dumps(report["quality"])
    res = CliRunner().invoke(cli, ["bench", "gpt_tiny", "--q4", *args])
    assert res.exit_code == 0, res.output
    assert "q4 decoding: the module path (architecture:" in res.output
    res = CliRunner().invoke(cli, ["bench", "gpt_tiny", "--q4", "--int8"])
    assert isinstance(res.exception, ZooError) and "--int8 and --q4" in str(res.exception)

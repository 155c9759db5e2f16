"""Issue 36, goal 3: GGUF's own Q4_1 / Q8_0 blocks as zoo multiplies them (zoo.run.qkernels,
zoo.run.precision.quantize_q4).

The references are independent of zoo: the ``gguf`` package's own quantiser and dequantiser
(llama.cpp's Python twin) for the block layout and the values a block stands for, and float64
matrix products for the kernels.  The kernels round each block of 32 activations to int16, so
their bound is stated from that rounding: |error| <= sum_k |w_k| * |x_k - x^_k| <= sum_blocks
max|x_block| / 32767 / 2 * sum |w_block|, checked with a factor of 2 to spare (and the float32
activations' own error, which is far smaller)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from zoo.errors import ZooError
from zoo.run import precision, qkernels

pytestmark = [pytest.mark.skipif(not qkernels.available(),
                                 reason=f"zoo's block kernels are not built here: {qkernels.unavailable()}"),
              pytest.mark.usefixtures("one_thread")]

gguf_quants = pytest.importorskip("gguf.quants")
from gguf import GGMLQuantizationType as T  # noqa: E402


def gguf_round_trip(w: torch.Tensor, kind) -> tuple[torch.Tensor, np.ndarray]:
    """``w`` through the gguf package's own quantiser: (the dequantised float32 weights, the raw
    block bytes ``(out, blocks * block_bytes)``)."""
    raw = gguf_quants.quantize(w.numpy().astype(np.float32), kind)
    back = torch.from_numpy(np.array(gguf_quants.dequantize(raw, kind), dtype=np.float32))
    return back, raw


def int16_bound(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The kernels' error bound for ``x (M, K) @ w (N, K)^T`` (the module notes), float64 ``(M, N)``."""
    M, K = x.shape
    xb = x.double().view(M, K // 32, 32).abs().amax(-1) / 32767 / 2  # (M, G): half a step
    wb = w.double().abs().view(w.size(0), K // 32, 32).sum(-1)  # (N, G)
    return 2 * (xb @ wb.T) + 1e-5 * (x.double().abs() @ w.double().abs().T)


def test_q4_blocks_are_the_files_bytes_and_values():
    torch.manual_seed(0)
    w = torch.randn(24, 96) * torch.rand(24, 1)
    back, raw = gguf_round_trip(w, T.Q4_1)
    lin = nn.Linear(96, 24, bias=False)
    lin.weight.data.copy_(back)
    layer = precision.BlockLinear(lin, 4)
    # the codes are llama.cpp's bytes: per block of 20, 2 + 2 bytes of float16 d and m, then 16 qs
    qs = raw.reshape(24, 3, 20)[:, :, 4:].reshape(24, 48)
    assert np.array_equal(layer.codes.numpy(), qs)
    d = raw.reshape(24, 3, 20)[:, :, :2].copy().view(np.float16).astype(np.float32).reshape(24, 3)
    assert torch.allclose(layer.scale, torch.from_numpy(d), rtol=2e-7, atol=0)
    assert torch.equal(layer.dequantized(), back)  # the float32 values the file stands for
    assert precision.q4_exact(back) and not precision.q4_exact(w)


def test_q8_blocks_are_the_files_bytes_and_values():
    torch.manual_seed(1)
    w = torch.randn(40, 64) * 3
    back, raw = gguf_round_trip(w, T.Q8_0)
    lin = nn.Linear(64, 40, bias=False)
    lin.weight.data.copy_(back)
    layer = precision.BlockLinear(lin, 8)
    blocks = raw.reshape(40, 2, 34)
    assert np.array_equal(layer.codes.numpy(), blocks[:, :, 2:].copy().view(np.int8).reshape(40, 64))
    d = blocks[:, :, :2].copy().view(np.float16).astype(np.float32).reshape(40, 2)
    assert torch.equal(layer.scale, torch.from_numpy(d))  # exactly the file's scales
    assert torch.equal(layer.dequantized(), back)
    assert precision.q8_exact(back) and not precision.q8_exact(w)


@pytest.mark.parametrize("M", [1, 3, 5, 16, 40])
@pytest.mark.parametrize("N,K", [(7, 32), (96, 576), (33, 1536)])
def test_block_products_match_float64(M, N, K):
    torch.manual_seed(M * 1000 + N + K)
    w = torch.randn(N, K)
    x = torch.randn(M, K) * torch.linspace(0.1, 40, K)  # ragged channels, one outlier-ish tail
    x[:, 5] = 300.0
    bias = torch.randn(N)
    for bits, kind in ((4, T.Q4_1), (8, T.Q8_0)):
        back, _ = gguf_round_trip(w, kind)
        lin = nn.Linear(K, N)
        lin.weight.data.copy_(back)
        lin.bias.data.copy_(bias)
        layer = precision.BlockLinear(lin, bits)
        with torch.inference_mode():
            got = layer(x.view(M, 1, K)).view(M, N)
        ref = x.double() @ back.double().T + bias.double()
        err = (got.double() - ref).abs()
        assert bool((err <= int16_bound(back, x)).all()), (bits, float(err.max()))
        if M >= qkernels.DEQUANT_ROWS:  # the prefill path: a float32 GEMM, tighter still
            assert torch.allclose(got, torch.nn.functional.linear(x, back, bias), rtol=1e-5, atol=1e-3)


def test_kernels_split_rows_between_threads_and_agree_bit_for_bit():
    """Both C++ libraries are OpenMP builds (their at::parallel_for regions are GOMP_parallel
    calls: built without -fopenmp they ran on one thread whatever --threads said), and a thread owns
    whole rows, so 1 and 2 threads give the same bits."""
    from pathlib import Path

    from torch.utils import cpp_extension

    from zoo.run import qstep

    lib = Path(cpp_extension._get_build_directory("zoo_qkernels_v4", False)) / "zoo_qkernels_v4.so"
    libs = [lib] + ([Path(qstep.extension().__file__)] if qstep.extension() is not None else [])
    for path in libs:
        assert b"GOMP_parallel" in path.read_bytes(), path.name
    torch.manual_seed(0)
    lin = nn.Linear(576, 1536)
    x = torch.randn(3, 576)
    before = torch.get_num_threads()
    for bits in (4, 8):
        layer = precision.BlockLinear(lin, bits)
        outs = []
        for t in (1, 2):
            torch.set_num_threads(t)
            try:
                with torch.inference_mode():
                    outs.append((layer(x), layer.dequantized()))
            finally:
                torch.set_num_threads(before)
        assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


def test_kernels_refuse_bad_shapes_and_types():
    codes = torch.zeros(4, 16, dtype=torch.uint8)
    scale = torch.ones(4, 1)
    with pytest.raises(RuntimeError, match="multiple of 32"):
        torch.ops.zoo.q4_mm(torch.zeros(1, 33), codes, scale, scale)
    with pytest.raises(RuntimeError, match="float32"):
        torch.ops.zoo.q4_mm(torch.zeros(1, 32, dtype=torch.float64), codes, scale, scale)
    with pytest.raises(RuntimeError, match="int8"):
        torch.ops.zoo.q8_mm(torch.zeros(1, 32), torch.zeros(4, 32, dtype=torch.uint8), scale)


def test_pack_unpack_round_trip():
    q = torch.randint(0, 16, (5, 64))
    assert torch.equal(qkernels.unpack_q4(qkernels.pack_q4(q)), q.to(torch.int32))


@pytest.fixture(scope="module")
def q4_llama():
    """A small Llama-shaped zoo model whose weights lie on the Q4_1 grid (the LM head on Q8_0's),
    as a converted Q4_1 GGUF file's do, and its q4 copy."""
    import zoo

    torch.manual_seed(0)
    model = zoo.build("llama_tiny", num_layers=2, d_model=64, num_heads=4, d_ff=128, vocab_size=96,
                      max_len=128, tie_embeddings=False).eval()
    with torch.no_grad():
        for name, mod in model.named_modules():
            if isinstance(mod, nn.Linear):
                kind = T.Q8_0 if mod is model.lm_head else T.Q4_1
                mod.weight.copy_(gguf_round_trip(mod.weight.detach(), kind)[0])
            elif "norm" in name and getattr(mod, "weight", None) is not None:
                mod.weight.uniform_(0.5, 1.5)  # randomised norm weights
    q4 = precision.quantize_q4(copy.deepcopy(model), check="off")
    return model, q4


def test_quantize_q4_keeps_a_q4_1_models_codes_and_answers(q4_llama):
    model, q4 = q4_llama
    linears = sum(type(m) is nn.Linear for m in model.modules())
    assert q4.quantized == "q4" and q4.q4_exact == linears - 1 and q4.q8_exact == 1
    assert sum(isinstance(m, precision.BlockLinear) for m in q4.modules()) == linears
    ids = torch.randint(0, 96, (1, 24))
    with torch.inference_mode():
        # prefill: dequantised weights through float32 GEMMs, the float model's numbers
        assert torch.allclose(q4(ids), model(ids), rtol=0, atol=1e-5)
    a = model.generate(ids[:, :8], 32, do_sample=False)
    b = q4.generate(ids[:, :8], 32, do_sample=False)
    assert torch.equal(a, b)


def test_quantize_q4_rounds_a_float_model_and_measures_it():
    import zoo

    torch.manual_seed(3)
    model = zoo.build("llama_tiny", num_layers=1, d_model=64, num_heads=4, d_ff=96, vocab_size=64,
                      max_len=64).eval()
    ref = copy.deepcopy(model)
    q4 = precision.quantize_q4(model, check="off", head="q4")
    assert q4.q4_exact == 0 and q4.q4_head == "q4"
    layer = q4.decoder.blocks[0].ffn.down  # d_ff 96: a multiple of 32
    w = ref.decoder.blocks[0].ffn.down.weight.detach()
    # the same grid as quantize_int4 at group 32, in float32 scales
    q, scale, lo = precision.int4_groups(w, 32)
    want = (q.float().view(w.size(0), -1, 32) * scale[..., None] + lo[..., None]).view_as(w)
    assert torch.allclose(layer.dequantized(), want, rtol=0, atol=1e-6)


def test_quantize_q4_bad_input():
    import zoo

    model = zoo.build("llama_tiny", num_layers=1, d_model=64, num_heads=4, d_ff=96, vocab_size=64,
                      max_len=64).eval()
    with pytest.raises(ZooError, match="head must be one of") as e:
        precision.quantize_q4(model, head="int8")
    assert "q8" in str(e.value)
    with pytest.raises(ZooError, match="check must be one of"):
        precision.quantize_q4(model, check="maybe")
    q4 = precision.quantize_q4(model, check="off")
    with pytest.raises(ZooError, match="already holds q4"):
        precision.quantize_q4(q4, check="off")
    with pytest.raises(ZooError, match="cannot be cast or moved"):
        q4.to(torch.float64)


def test_quantize_q4_without_kernels_says_why(monkeypatch):
    import zoo

    model = zoo.build("llama_tiny", num_layers=1, d_model=64, num_heads=4, d_ff=96, vocab_size=64,
                      max_len=64).eval()
    monkeypatch.setitem(qkernels._state, "ok", False)
    monkeypatch.setitem(qkernels._state, "why", "no C++ compiler")
    with pytest.raises(ZooError, match="no C\\+\\+ compiler") as e:
        precision.quantize_q4(model)
    assert "quantize_int4" in str(e.value)
    assert not any(isinstance(m, precision.BlockLinear) for m in model.modules())


@pytest.mark.slow
def test_compiled_q4_decoding_equals_eager(q4_llama):
    _, q4 = q4_llama
    ids = torch.randint(0, 96, (1, 10))
    # compile=True compiles the module path (the int16-activation block kernels); a batch-1 eager
    # call would take the fused 8-bit-activation step instead (zoo.run.qstep, compared with the
    # module path in tests/run/test_qstep.py), so the eager side of this equality is the module path
    from zoo.run import qstep

    with qstep.disabled():
        eager = q4.generate(ids, 40, do_sample=False)
    compiled = q4.generate(ids, 40, do_sample=False, compile=True)
    assert torch.equal(eager, compiled)
    from zoo.run import compiled as c

    assert c.last_steps(q4).recompiles == 0

"""`zoo bench` and zoo.inside.speed: the timing protocol, FLOP accounting and every task on every
architecture.  Functional checks only: nothing here asserts a speed (the machine is shared)."""
import json
import subprocess
import sys

import pytest
import torch

import zoo
from zoo.inside.speed import Timing, bench, count_flops, greedy, time_fn

SMALL = dict(num_layers=1, d_model=32, num_heads=2, d_ff=64, vocab_size=97, max_len=64)


def zoo_cli(*args):
    return subprocess.run([sys.executable, "-m", "zoo.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_time_fn_warms_up_then_times_each_repeat():
    calls = []
    t = time_fn(lambda: calls.append(1), warmup=3, repeats=5)
    assert len(calls) == 8 and len(t.times) == 5
    assert all(x >= 0 for x in t.times)
    timing = Timing([1.0, 2.0, 3.0, 4.0, 100.0])
    assert timing.median == 3.0 and timing.min == 1.0  # the median ignores the outlier
    assert timing.spread > 0


def test_count_flops_matches_the_hand_count():
    """2 FLOPs per multiply-add in every projection and the LM head, plus 4 B h T^2 hd per layer for
    attention (q k^T and weights @ v); the CPU flash kernel is counted too."""
    m = zoo.build("gpt_tiny", seed=0, **SMALL).eval()
    B, T, D, V, L, h = 2, 16, 32, 97, 1, 2
    ids = torch.randint(0, V, (B, T))
    with torch.inference_mode():
        got = count_flops(lambda: m(ids))
    linear = L * (D * 3 * D + D * D + 2 * D * 64) + D * V  # qkv, out, ffn up+down, lm head
    attention = L * 4 * B * h * T * T * (D // h)
    assert got == 2 * B * T * linear + attention


@pytest.mark.parametrize("preset,tasks", [
    ("gpt_tiny", {"forward", "prefill", "generate", "train"}),
    ("bert_tiny", {"forward", "train"}),  # an encoder does not generate
    ("t5_tiny", {"forward", "prefill", "generate", "train"}),
])
def test_bench_runs_every_task(preset, tasks):
    model = zoo.build(preset, seed=0, **SMALL)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rep = bench(model, batch=2, seq_len=16, prompt_len=4, new_tokens=5, train_batch=2, warmup=0,
                repeats=2, peak=100.0, bandwidth=10.0)
    assert {r.task for r in rep.results} == tasks
    for r in rep.results:
        assert r.median_s > 0 and r.tokens > 0 and r.tokens_per_s > 0
        if r.task != "generate":
            assert r.flops > 0
            assert r.fraction_of_peak == pytest.approx(r.flops / r.median_s / 1e9 / 100.0)
    gen = [r for r in rep.results if r.task == "generate"]
    if gen:
        assert gen[0].tokens == 2 * 5 and gen[0].shape == "2x4+5" and gen[0].steps == 5
        stack = sum(p.numel() for p in model.decoder.parameters()) + model.lm_head.weight.numel()
        assert gen[0].bytes_read > 5 * stack * 4 * 0.5  # (nearly) every decoder weight, per step
        assert gen[0].fraction_of_roofline == pytest.approx(
            gen[0].bytes_read / gen[0].median_s / 1e9 / 10.0)
        assert "% roofline" in rep.table() and "memory bandwidth 10.0 GB/s" in rep.table()
    # the training step really trained: weights moved
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert "tokens/s" in rep.table() and preset in rep.table()


def test_greedy_fallback_matches_generate_and_full_recompute():
    model = zoo.build("gpt_tiny", seed=0, **SMALL).eval()
    prompt = torch.randint(0, 97, (2, 5))
    out = greedy(model, prompt, 6)
    seq = prompt
    with torch.no_grad():
        for _ in range(6):  # no cache: recompute everything, take the argmax
            seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, seq)


def test_unknown_task_is_refused():  # (loading specs and checkpoints: tests/io/test_loader.py)
    m = zoo.build("gpt_tiny", seed=0, **SMALL)
    with pytest.raises(zoo.ZooError, match="unknown task"):
        bench(m, tasks=("fly",), peak=1.0)


def test_cli_json_report(tmp_path):
    r = zoo_cli("bench", "gpt_tiny", "--set", "num_layers=1", "--set", "d_model=32", "--seq-len", "16",
                "--new-tokens", "4", "--train-batch", "2", "-r", "2", "--warmup", "0", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["model"] == "gpt_tiny" and rep["peak_gflops"] > 0 and rep["threads"] >= 1
    tasks = {x["task"]: x for x in rep["results"]}
    assert set(tasks) == {"forward", "prefill", "generate", "train"}
    assert rep["bandwidth_gbs"] > 0 and 0 < tasks["generate"]["fraction_of_roofline"]
    assert tasks["forward"]["shape"] == "1x16" and tasks["forward"]["tokens"] == 16
    assert 0 < tasks["forward"]["fraction_of_peak"]


def test_cli_table_and_errors():
    r = zoo_cli("bench", "gpt_tiny", "--set", "num_layers=1", "--task", "forward", "-t", "8", "-r", "2")
    assert r.returncode == 0, r.stderr
    assert "forward" in r.stdout and "% peak" in r.stdout and "train" not in r.stdout
    r = zoo_cli("bench", "gpt_tiny", "--batch", "0")
    assert r.returncode == 2 and "--batch" in r.stderr and "Traceback" not in r.stderr
    r = zoo_cli("bench", "gpt_tny")
    assert r.returncode == 2 and "did you mean" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["gpt_tiny", "bert_tiny", "t5_tiny", "prefix_lm_tiny", "llama_tiny"])
def test_torch_compile_traces_every_tiny_preset_without_graph_breaks(preset):
    """``fullgraph=True`` fails on any graph break (a ``.item()``/``bool(tensor)`` in forward, a
    data-dependent branch); the eager backend keeps the test fast (no code generation)."""
    torch._dynamo.reset()
    m = zoo.build(preset, seed=0, num_layers=1).eval()
    spec = m.spec
    ids = torch.randint(1, spec.vocab_size, (2, 12))
    if spec.pad_id is not None:
        ids[0, -3:] = spec.pad_id  # padding: the mask path must trace too
    call = (lambda f: f(ids, ids)) if spec.arch == "encoder_decoder" else (lambda f: f(ids))
    compiled = torch.compile(m, backend="eager", fullgraph=True)
    with torch.no_grad():
        ref, got = call(m), call(compiled)
    torch.testing.assert_close(got, ref)


def test_converted_and_loaded_weights_are_contiguous(tmp_path):
    """A transposed view as a Linear weight (GPT-2 stores Conv1D weights as (in, out)) computes the
    same numbers but makes every matmul take a slower path: conversion and loading must not leave
    one behind."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    hf = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=97, n_positions=64))
    model = zoo.convert.from_transformers(hf)
    assert all(p.is_contiguous() for p in model.parameters())
    zoo.save(model, tmp_path / "m")
    assert all(p.is_contiguous() for p in zoo.load(tmp_path / "m").parameters())


def test_decode_bytes_is_the_hand_count():
    """One decoding step reads every weight of the decoder stack and the (tied) LM head once, one
    embedding row per table, and 2 x layers x h_kv x hd x context floats of KV cache."""
    from zoo.inside.costs import decode_bytes

    L, D, F, V, h, T = 2, 32, 64, 97, 2, 64
    m = zoo.build("gpt_tiny", seed=0, num_layers=L, d_model=D, num_heads=h, d_ff=F, vocab_size=V,
                  max_len=T, tie_embeddings=True)
    per_layer = (D * 3 * D + 3 * D) + (D * D + D) + (D * F + F) + (F * D + D) + 2 * (2 * D)
    weights = L * per_layer + 2 * D + V * D + D  # final norm, tied head, token row
    if m.spec.positions.kind in ("learned", "sinusoidal"):
        weights += D  # the position table's row
    got = decode_bytes(m, 10)
    assert got["weights"] == 4 * weights
    assert got["kv_cache"] == 4 * 2 * L * D * 10
    assert decode_bytes(m, 20)["kv_cache"] == 2 * got["kv_cache"]  # grows with the context


def test_memory_bandwidth_is_measured():
    from zoo.inside.speed import memory_bandwidth

    bw = memory_bandwidth(nbytes=64 << 20, repeats=3)
    assert 0.1 < bw < 10_000  # GB/s: a real number, not a placeholder


def test_int8_linear_matches_the_hand_quantized_product():
    """Per-channel int8 weights, quantized here by hand (round(W / (max|row| / 127))), times the
    float input: FBGEMM's kernel (``activations="dynamic"``, which also quantizes the input per
    call) lands within int8 rounding of it, and of the float32 layer.  (The default int8 is
    weight-only: tests/run/test_precision_quality.py.)"""
    from zoo.run.precision import Int8DynamicLinear as Int8Linear, int8_supported

    if not int8_supported():
        pytest.skip("no int8 engine in this PyTorch build")
    g = torch.Generator().manual_seed(0)
    lin = torch.nn.Linear(64, 48, bias=False)
    rows = torch.tensor([0.01, 0.1, 1.0, 10.0]).repeat(12)[:, None]  # rows of very different size
    with torch.no_grad():
        lin.weight.copy_(torch.randn(48, 64, generator=g) * rows)
    x = torch.randn(3, 5, 64, generator=g)
    scale = lin.weight.abs().amax(1, keepdim=True) / 127  # one scale per output row
    w_hand = (lin.weight / scale).round().clamp(-127, 127) * scale  # (48, 64)
    ref = x @ w_hand.t()
    got = Int8Linear(lin)(x)
    assert got.shape == (3, 5, 48)
    err = ((got - ref).abs().amax((0, 1)) / ref.abs().amax((0, 1))).max()  # worst output row
    assert err < 0.06, err  # activation rounding (7 bits) only; small rows kept their precision
    assert (got - ref).abs().max() > 0  # it did quantize the activations: not a float path
    exact = lin(x)
    assert ((got - exact).abs().amax((0, 1)) / exact.abs().amax((0, 1))).max() < 0.08


def test_quantize_int8_model_generates_and_stays_close():
    from zoo.run.precision import int8_supported, quantize_int8

    if not int8_supported():
        pytest.skip("no int8 engine in this PyTorch build")
    m = zoo.build("gpt_tiny", seed=0, **SMALL).eval()
    ids = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        ref = m(ids)
        q = quantize_int8(zoo.build("gpt_tiny", seed=0, **SMALL))
        got = q(ids)
    assert not any(type(x) is torch.nn.Linear for x in q.modules())
    rep = bench(q, tasks=("generate",), prompt_len=4, new_tokens=3, warmup=0, repeats=1, peak=1.0,
                bandwidth=1.0)
    assert rep.parameters == m.num_parameters() + 97 * 32  # the int8 head is an untied copy
    assert rep.precision == "int8" and "int8" in rep.table()
    assert (got - ref).norm() / ref.norm() < 0.05
    out = q.generate(ids, 20)  # the LM head is an Int8Linear: generation takes the plain path
    assert out.shape == (2, 32)
    with pytest.raises(zoo.ZooError, match="bfloat16"):
        quantize_int8(torch.nn.Linear(2, 2).to("meta"))


def test_decode_speed_and_the_run_tab_speed_line():
    """The UI's line after a generation: tokens/s, bytes per token and the roofline fraction, by
    hand from decode_bytes; then a real run of the shipped poet_gpt fills it in both languages."""
    from zoo.inside.costs import decode_bytes
    from zoo.inside.speed import decode_speed
    from zoo.ui.common import raw
    from zoo.ui.run_tab import run, speed_line

    m = zoo.build("gpt_tiny", seed=0, **SMALL)
    s = decode_speed(m, 10, 0.5, 20, bandwidth=2.0)
    per_token = decode_bytes(m, 20)["total"]
    assert s["tokens_per_s"] == 20.0 and s["bytes_per_token"] == per_token
    assert s["roofline"] == pytest.approx(20.0 * per_token / 1e9 / 2.0)
    stats: dict = {}
    for out, _ in raw(run)("poet_gpt", "床前明月光", 0.0, 0, 1.0, 8, 0, lang="en", stats=stats):
        pass
    assert out and stats["tokens_per_s"] > 0 and 0 < stats["roofline"] < 1
    assert stats["bytes_per_token"] > 4 * 1_000_000  # poet_gpt: 1.5 M float32 weights per token
    en, zh = speed_line(stats, "en"), speed_line(stats, "zh")
    assert "tokens/s" in en and "roofline" in en and "memory-bound" in en and "compute-bound" in en
    assert "访存受限" in zh and "计算受限" in zh and "个 token" in zh


def test_cli_int8_and_roofline_columns():
    r = zoo_cli("bench", "gpt_tiny", "--set", "num_layers=1", "--int8", "--task", "prefill",
                "--task", "generate", "--task", "train", "--new-tokens", "4", "-r", "2", "--warmup", "0")
    assert r.returncode == 0, r.stderr
    assert "(int8," in r.stdout and "memory bandwidth" in r.stdout and "% roofline" in r.stdout
    assert "prefill" in r.stdout and "generate" in r.stdout and "train" not in r.stdout.split("\n", 2)[2]

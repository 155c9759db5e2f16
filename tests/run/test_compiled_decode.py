"""Compiled decoding (zoo.run.compiled, ``generate(..., compile=True)``): the same tokens as eager
decoding, one graph for every step (no recompiles), compiled once per model and shape.

Compiling on a CPU costs ~10-40 s per graph, so the gpt_tiny model and its graphs are shared by a
module fixture; every gpt_tiny test below that uses the shape ``(1, 16)`` + up to 48 tokens (one
capacity bucket) runs on those same two graphs.
"""
from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

import zoo
from zoo.run import compiled
from zoo.errors import ZooError

pytestmark = pytest.mark.slow  # each new model or shape compiles for tens of seconds on a CPU

T0, N = 16, 24


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = zoo.build("gpt_tiny", seed=0).eval()
    ids = torch.randint(0, model.spec.vocab_size, (1, T0), generator=torch.Generator().manual_seed(3))
    out = model.generate(ids, N, compile=True)  # compiles the prefill and the decoding step
    return model, ids, out


def dynamo_graphs() -> int:
    """Graphs Dynamo has produced in this process (its own counter, independent of zoo's)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def test_compiled_tokens_equal_eager_tokens(tiny):
    model, ids, out = tiny
    eager = model.generate(ids, N)
    assert out.shape == (1, T0 + N)
    assert torch.equal(out, eager)


def assert_same_logits(model, ids, padding, steps):
    """The logits themselves, step by step, fed the same (eager-chosen) tokens: compiled (static
    cache, every step attending over all its slots behind a mask) against eager (the growing
    cache).  Stronger than equal tokens: a random-weight model's argmax can survive a wrong
    attention."""
    from zoo.run import steps as g

    with torch.inference_mode():
        comp = compiled.decoder_logits(model, ids, padding, steps)
        eager = g.decoder_logits(model, ids, padding, True, None, g.make_head(model, steps), steps)
        a, b = next(comp), next(eager)
        for _ in range(steps - 1):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)  # float32, reordered sums
            nxt = b.argmax(-1)
            a, b = comp.send(nxt), eager.send(nxt)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_compiled_logits_match_eager_logits_at_every_step(tiny):
    model, ids, _ = tiny
    assert_same_logits(model, ids, None, N)


def test_padded_batch_with_score_bias_positions():
    """ALiBi reads every cached key's position (StaticCache.pos, counted per row from its first
    real token) and a left-padded batch masks its pads: logits as eager, step by step."""
    model = zoo.build("gpt_tiny", positions="alibi", num_layers=2, seed=0).eval()
    ids, padding = zoo.run.arguments.left_pad([[5, 6, 7, 8, 9, 10, 11, 12, 13], [40, 41, 42]], 0)
    assert_same_logits(model, ids, padding, 12)
    assert compiled.last_steps(model).recompiles == 0


def test_every_decoding_step_runs_one_graph_without_recompiling(tiny):
    model, ids, _ = tiny
    cs = compiled.last_steps(model)
    graphs, decode_calls = dynamo_graphs(), cs.calls["decode"]
    out = model.generate(ids, 40, compile=True)  # 39 decoding steps, same capacity bucket (64)
    assert cs.calls["decode"] - decode_calls == 39
    assert cs.compiles == {"prefill": 1, "decode": 1} and cs.recompiles == 0
    assert dynamo_graphs() == graphs  # Dynamo's own counter agrees: no graph was compiled
    assert torch.equal(out, model.generate(ids, 40))


def test_a_second_call_reuses_the_graphs_and_the_cache(tiny):
    model, ids, out = tiny
    cs = compiled.last_steps(model)
    seconds = dict(cs.compile_seconds)
    graphs = dynamo_graphs()
    again = model.generate(ids, N, compile=True)
    assert compiled.last_steps(model) is cs  # the same compiled steps, kept on the model
    assert cs.compile_seconds == seconds and dynamo_graphs() == graphs
    assert torch.equal(again, out)


def test_eager_choices_run_on_the_compiled_logits(tiny):
    """Sampling, top-k/top-p, the repetition penalty and stop tokens stay eager, on the compiled
    step's logits: the same tokens as eager decoding with the same seed, and no new graph."""
    model, ids, out = tiny
    cs = compiled.last_steps(model)
    opts = dict(do_sample=True, temperature=0.8, top_k=50, top_p=0.9, seed=7,
                repetition_penalty=1.3)
    assert torch.equal(model.generate(ids, N, compile=True, **opts), model.generate(ids, N, **opts))
    stop = int(out[0, T0 + 5])
    a = model.generate(ids, N, compile=True, stop_tokens=[stop], pad_id=0)
    assert torch.equal(a, model.generate(ids, N, stop_tokens=[stop], pad_id=0))
    assert cs.recompiles == 0


def test_streaming_compiled(tiny):
    model, ids, out = tiny
    steps = list(zoo.run.generate.stream(model, ids, N, compile=True))
    assert torch.equal(torch.stack(steps, dim=1), out[:, T0:])


def test_llama_family_compiled_matches_eager_and_transformers():
    """A converted Llama (RoPE, GQA, RMSNorm, SwiGLU): a left-padded batch of two prompts gives
    the same tokens compiled as eager, and the unpadded row the tokens of transformers' own
    greedy ``generate`` on the same weights."""
    from convert_cases import llama

    hf = llama()
    model = zoo.convert.from_transformers(hf).eval()
    g = torch.Generator().manual_seed(5)
    long, short = torch.randint(3, 101, (12,), generator=g).tolist(), torch.randint(3, 101, (7,), generator=g).tolist()
    batch = [long, short]  # left-padded by generate
    comp = model.generate(batch, 20, compile=True, pad_id=0)
    assert torch.equal(comp, model.generate(batch, 20, pad_id=0))
    ids = torch.tensor([long])
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, min_new_tokens=20,
                      do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(ids, 20, compile=True), ref)
    assert compiled.last_steps(model).recompiles == 0


def test_zoo_run_compile_prints_the_eager_text():
    from zoo.cli import cli

    runner = CliRunner()
    args = ["run", "poet_gpt", "--prompt", "春眠不觉晓", "-n", "12"]
    eager = runner.invoke(cli, args)
    comp = runner.invoke(cli, args + ["--compile"])
    assert eager.exit_code == 0, eager.output
    assert comp.exit_code == 0, comp.output
    assert comp.stdout == eager.stdout and len(comp.stdout.strip()) > len("春眠不觉晓")


@pytest.mark.parametrize("preset, options, where", [
    ("gpt_tiny", dict(num_beams=2), "generate.compile"),
    ("gpt_tiny", dict(use_cache=False), "generate.compile"),
    ("t5_tiny", {}, "generate.compile"),
    ("prefix_lm_tiny", {}, "decoder.mask"),
])
def test_what_cannot_be_compiled_is_refused_by_name(preset, options, where):
    model = zoo.build(preset, seed=0).eval()
    with pytest.raises(ZooError) as err:
        model.generate([[1, 2, 3]], 4, compile=True, **options)
    assert err.value.where == where
    assert "compile" in str(err.value).lower() or "compile" in (err.value.fix or "")


def test_forward_hooks_are_refused(tiny):
    model, ids, _ = tiny
    handle = model.decoder.blocks[0].register_forward_hook(lambda *a: None)
    try:
        with pytest.raises(ZooError, match="hooks on decoder.blocks.0"):
            model.generate(ids, 4, compile=True)
    finally:
        handle.remove()


def test_release_drops_the_kept_steps():
    model = zoo.build("gpt_tiny", num_layers=1, seed=0)
    model.__dict__["_zoo_compiled"] = {"shape": object()}  # what compiled_steps keeps
    assert compiled.release(model) == 1 and compiled.last_steps(model) is None
    assert "_zoo_compiled" not in model.__dict__ and compiled.release(model) == 0


def test_capacity_buckets():
    assert compiled.capacity_bucket(10, 256) == 64
    assert compiled.capacity_bucket(65, 256) == 128
    assert compiled.capacity_bucket(200, 256) == 256
    assert compiled.capacity_bucket(200, 210) == 210  # never beyond max_len


def test_bench_reports_compiled_against_eager_decoding(tiny):
    """``zoo.bench(compile=True)``: the generate row times compiled decoding, paired with eager;
    the report carries both rates and the recompile count (the fixture's graphs are reused: the
    same (1, 16) + 24 shape)."""
    from zoo.inside.speed import bench

    model, _, _ = tiny
    graphs = dynamo_graphs()
    report = bench(model, tasks=("generate",), compile=True, prompt_len=T0, new_tokens=N,
                   warmup=0, repeats=6, peak=1.0, bandwidth=1.0)
    dc = report.decode_compiled
    assert dc["graphs"] == {"prefill": 1, "decode": 1} and dc["recompiles"] == 0
    assert dc["recompiles_while_timed"] == 0 and dynamo_graphs() == graphs
    assert len(dc["compiled_s"]) == len(dc["eager_s"]) == 3
    (row,) = report.results
    assert row.task == "generate" and row.median_s == pytest.approx(sorted(dc["compiled_s"])[1])
    assert dc["speedup"] == pytest.approx(
        sorted(dc["eager_s"])[1] / sorted(dc["compiled_s"])[1])
    assert "compiled decoding:" in report.table() and "recompiles 0" in report.table()


def test_zoo_bench_compile_prints_compiled_vs_eager():
    from zoo.cli import cli

    r = CliRunner().invoke(cli, ["bench", "gpt_tiny", "--task", "generate", "--compile",
                                 "--prompt-len", str(T0), "--new-tokens", str(N), "-r", "6",
                                 "--warmup", "0"])
    assert r.exit_code == 0, r.output
    assert "compiled decoding:" in r.output and "recompiles 0" in r.output


def test_bench_compile_of_an_uncompilable_model_says_why():
    from zoo.inside.speed import bench

    model = zoo.build("t5_tiny", seed=0)
    report = bench(model, tasks=("generate",), compile=True, prompt_len=8, new_tokens=4,
                   warmup=0, repeats=3, peak=1.0, bandwidth=1.0)
    assert "decoder-only" in report.decode_compiled["refused"]
    assert "not available" in report.table()

"""Issue 27, goal 2: compiled training and the MFU the trainer logs.

The FLOPs a step is credited with are checked against two references nobody here wrote: the
PaLM / nanoGPT formula ``6 N + 12 L d T`` per token, and PyTorch's own ``FlopCounterMode`` over a
real forward and backward.  The compiled path is checked to be *used* (a counting backend sees the
frames), to compile once (no recompiles across steps), to train the same numbers as eager, and to
save the same checkpoint keys; one slow test runs the real inductor backend end to end."""
from __future__ import annotations

import json
import warnings

import pytest
import torch
from click.testing import CliRunner

import zoo
from zoo.errors import TrainError, ZooError
from zoo.train import TrainConfig, read_metrics, train
from zoo.train.mfu import machine_peak, step_flops

TEXT = "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 6
#: a GPT-2-shaped decoder (learned positions, pre-LN, tanh-GELU MLP, tied head), tiny
GPT2ISH = dict(vocab_size=64, max_len=32, d_model=32, num_layers=2, num_heads=2, d_ff=128,
               dropout=0.0)
Q = dict(batch_size=4, block_size=16, progress=False, holdout=0.2, eval_every=100, warmup=0)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def data(tmp_path):
    p = tmp_path / "d.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


def gpt2ish(**kw):
    return zoo.spec("gpt2", **{**GPT2ISH, **kw})


# ---------------------------------------------------------------------- the FLOPs of a step
def test_step_flops_is_the_palm_nanogpt_formula():
    """6 N + 12 L d T per token, N = the weights in matrices (attention 4 d^2, MLP 2 d d_ff per
    layer, and the d x V head; embeddings are lookups, not matmuls) -- PaLM appendix B."""
    spec = gpt2ish()
    B, T = 3, 16
    L, d, f, V = spec.num_layers, spec.d_model, spec.d_ff, spec.vocab_size
    n = L * (4 * d * d + 2 * d * f) + d * V
    per_token = 6 * n + 12 * L * d * T
    batch = {"ids": torch.zeros(B, T, dtype=torch.long), "labels": torch.zeros(B, T, dtype=torch.long)}
    assert step_flops(spec, batch) == B * T * per_token


def test_step_flops_equals_pytorchs_flop_counter_over_forward_and_backward():
    """PyTorch's FlopCounterMode counts every matmul of a real forward + backward (the eager
    attention kernel computes the full T x T scores, as the count assumes)."""
    from torch.utils.flop_counter import FlopCounterMode

    from zoo.train.objectives import ce_sum

    spec = gpt2ish(attention="eager")
    model = zoo.build(spec, seed=0)
    ids = torch.randint(0, spec.vocab_size, (2, 16))
    with FlopCounterMode(display=False) as counter:
        ce_sum(model(ids), ids).backward()
    assert step_flops(spec, {"ids": ids, "labels": ids}) == counter.get_total_flops()


def test_the_peak_is_measured_once_and_named_in_the_log(data, tmp_path):
    first = machine_peak("cpu", torch.float32)
    again = machine_peak("cpu", torch.float32)
    assert again == first and first["peak_flops"] > 1e8  # cached: the very same measurement
    assert "zoo.inside.speed.matmul_peak" in first["peak_method"] and "1 thread" in first["peak_method"]
    train(gpt2ish(), data, out=tmp_path / "o", steps=4, log_every=2, **Q)
    start = read_metrics(tmp_path / "o")[0]
    assert start["event"] == "start" and start["peak_gflops"] == first["peak_flops"] / 1e9
    assert start["peak_method"] == first["peak_method"] and start["compile"] is False


def test_each_log_line_has_mfu_from_counted_flops_time_and_peak(data, tmp_path):
    """mfu = step FLOPs (by the formula, counted here by hand) / seconds per step / peak."""
    spec = gpt2ish()
    res = train(spec, data, out=tmp_path / "o", steps=4, log_every=2, **Q)
    recs = read_metrics(tmp_path / "o")
    peak = recs[0]["peak_gflops"] * 1e9
    L, d, f, V, T = spec.num_layers, spec.d_model, spec.d_ff, res.model.spec.vocab_size, 16
    per_step = 4 * T * (6 * (L * (4 * d * d + 2 * d * f) + d * V) + 12 * L * d * T)
    lines = [r for r in recs if "loss" in r and "event" not in r]
    assert len(lines) == 2
    for r in lines:
        assert r["tokens_per_s"] > 0 and 0 < r["step_s"]
        assert r["mfu"] == pytest.approx(per_step / r["step_s"] / peak, rel=1e-9)
    end = recs[-1]
    assert end["event"] == "end" and 0 < end["mfu"] and end["train_tokens_per_s"] > 0


# ---------------------------------------------------------------------- the compiled path
@pytest.fixture
def counting_compile(monkeypatch):
    """torch.compile with a counting backend over aot_eager (forward and backward traced by
    AOTAutograd, no code generation: seconds, not minutes)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager")
    real = torch.compile

    def compile_(model, **kw):
        return real(model, backend=counter, **kw)

    monkeypatch.setattr(torch, "compile", compile_)
    torch._dynamo.reset()
    yield counter
    torch._dynamo.reset()


def test_compiled_training_is_used_compiles_once_and_trains_the_same_numbers(data, tmp_path,
                                                                           counting_compile):
    eager = train(gpt2ish(), data, out=tmp_path / "e", steps=5, log_every=1, **Q)
    assert counting_compile.frame_count == 0
    comp = train(gpt2ish(), data, out=tmp_path / "c", steps=5, log_every=1, compile=True, **Q)
    assert counting_compile.frame_count == 1  # one graph for all five steps: no recompiles
    le = [r["loss"] for r in eager.history if "loss" in r and "event" not in r]
    lc = [r["loss"] for r in comp.history if "loss" in r and "event" not in r]
    assert len(le) == len(lc) == 5
    torch.testing.assert_close(torch.tensor(lc), torch.tensor(le), rtol=1e-5, atol=1e-6)
    compiled = [r for r in comp.history if r.get("event") == "compiled"]
    assert len(compiled) == 1 and compiled[0]["step"] == 1 and compiled[0]["first_step_s"] > 0
    assert "mfu" not in comp.history[[i for i, r in enumerate(comp.history)
                                      if r.get("step") == 1 and "loss" in r][0]]
    assert set(zoo.load(tmp_path / "c").state_dict()) == set(zoo.load(tmp_path / "e").state_dict())
    assert read_metrics(tmp_path / "c")[0]["compile"] is True


def test_zoo_train_compile_flag(data, tmp_path, counting_compile):
    from zoo.cli import cli

    res = CliRunner().invoke(cli, ["train", "gpt2", "--set", "vocab_size=64", "--set", "max_len=32",
                                    "--set", "d_model=32", "--set", "num_layers=1", "--set",
                                    "num_heads=2", "--set", "d_ff=64", "--data", str(data),
                                    "--out", str(tmp_path / "o"), "--steps", "3", "--batch-size",
                                    "2", "--block-size", "8", "--compile", "--no-progress"])
    assert res.exit_code == 0, res.output
    assert counting_compile.frame_count == 1
    assert "MFU" in res.output and "tokens/s" in res.output
    assert json.loads((tmp_path / "o" / "metrics.jsonl").read_text().splitlines()[0])["compile"]


def test_compile_must_be_a_bool():
    with pytest.raises(ZooError, match="train.compile"):
        TrainConfig(compile="yes").validate()


def test_a_compiler_failure_is_a_train_error_with_the_fix(data, tmp_path, monkeypatch):
    from torch._dynamo.exc import BackendCompilerFailed

    def broken(gm, example_inputs):
        raise RuntimeError("no C++ compiler")

    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda m, **kw: real(m, backend=broken, **kw))
    torch._dynamo.reset()
    try:
        with pytest.raises(TrainError, match="without --compile") as info:
            train(gpt2ish(), data, out=tmp_path / "o", steps=2, compile=True, **Q)
        assert isinstance(info.value.__cause__, BackendCompilerFailed)
        assert not (tmp_path / "o" / "model.safetensors").exists()
    finally:
        torch._dynamo.reset()


def test_training_uses_no_deprecated_zoo_name(data, tmp_path):
    """The trainer imports zoo's names from where they live now (zoo.deprecation forwards the old
    ones with a DeprecationWarning naming the new place)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(gpt2ish(), data, out=tmp_path / "o", steps=2, **Q)
    moved = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)
             and "is deprecated" in str(w.message)]
    assert not moved


@pytest.mark.slow
def test_inductor_compiled_training_matches_eager(data, tmp_path):
    """The real backend (inductor, generated C++): the same losses as eager to float32 accuracy."""
    torch._dynamo.reset()
    spec = gpt2ish(num_layers=1)
    eager = train(spec, data, out=tmp_path / "e", steps=3, log_every=1, **Q)
    comp = train(spec, data, out=tmp_path / "c", steps=3, log_every=1, compile=True, **Q)
    le = [r["loss"] for r in eager.history if "loss" in r and "event" not in r]
    lc = [r["loss"] for r in comp.history if "loss" in r and "event" not in r]
    torch.testing.assert_close(torch.tensor(lc), torch.tensor(le), rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()

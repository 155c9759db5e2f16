"""Issue 22, goal 2: work sized before it starts (zoo.guard.run_budget) -- a forward, a trace, a
generation and a training step are refused with the field to change when they cannot fit, before
any tensor is made; ordinary work passes untouched."""
from __future__ import annotations

import time

import pytest
import torch

import zoo
import zoo.guard.run_budget as workload
from zoo.errors import ZooError


def _budget(monkeypatch, value: float) -> None:
    """Set the work budget in every copy of zoo.guard.run_budget the entry points actually use: a test that
    re-imports zoo's modules (the plugin tests clear sys.modules) leaves the engine bound to another
    module object, and a budget patched only on this file's copy would let a 10 GB generation run."""
    import zoo.run.generate as gen
    import zoo.inside.trace as insp
    import zoo.model.models as models
    import zoo.train.loop as loop

    monkeypatch.setattr(workload, "BUDGET", value)
    for fn in (gen.check_generate, models.check_forward, insp.check_trace, loop.check_train_step):
        if fn.__globals__ is not vars(workload):  # another copy of the module
            monkeypatch.setitem(fn.__globals__, "BUDGET", value)


@pytest.fixture
def budget_16gb(monkeypatch):
    _budget(monkeypatch, 16e9)


def _tiny(**kw):
    return zoo.build("gpt_tiny", seed=0, **kw)


def test_the_issue_s_eager_forward_of_65536_tokens_is_refused_naming_the_scores(budget_16gb):
    model = _tiny(max_len=65536, attention={"kind": "eager"}).eval()
    ids = torch.zeros(1, 65536, dtype=torch.long)
    t = time.perf_counter()
    with pytest.raises(ZooError) as info, torch.no_grad():
        model(ids)
    assert time.perf_counter() - t < 1.0  # refused from the shapes, nothing computed
    msg = str(info.value)
    assert info.value.where == "forward.ids" and "the attention scores alone" in msg
    # by hand: scores and softmax, 2 x (1 x 4 heads x 65536 x 65536) float32 = 137.4 GB
    assert "137.4 GB" in msg and "sdpa" in info.value.fix


def test_the_same_length_through_sdpa_is_not_charged_for_scores(budget_16gb):
    p = workload.plan(_tiny(max_len=65536))
    total, scores = workload.forward_bytes(p, 1, 65536)
    assert scores == 0
    # by hand: widest layer transient 65536 x (4*128 + 2*512) x 4 B + logits 65536 x 512 x 4 B
    assert total == 65536 * (4 * 128 + 2 * 512) * 4 + 65536 * 512 * 4


def test_a_trace_of_8192_tokens_is_refused(monkeypatch):
    model = _tiny(max_len=8192)
    # by hand, per layer kept: 8192 x (4*128 + 2*512) x 4 B + 3 x (4 x 8192 x 8192) x 4 B;
    # 4 layers, plus the widest transient (activations + 2 score matrices) and the logits
    act, sc = 8192 * 1536 * 4, 4 * 8192 * 8192 * 4
    want = 4 * (act + 3 * sc) + (act + 2 * sc) + 8192 * 512 * 4
    p = workload.plan(model)
    assert workload.forward_bytes(p, 1, 8192, keep=True, scores=True)[0] == want  # 15.3 GB
    _budget(monkeypatch, want - 1)
    t = time.perf_counter()
    with pytest.raises(ZooError, match="a trace of 1 x 8192 tokens needs about 15.3 GB") as info:
        zoo.trace(model, torch.zeros(1, 8192, dtype=torch.long))
    assert info.value.where == "trace.ids" and time.perf_counter() - t < 1.0
    _budget(monkeypatch, want)  # the same with room: traced (a short one)
    assert zoo.trace(model, torch.zeros(1, 64, dtype=torch.long)).logits.shape == (1, 64, 512)


def test_10000_prompts_x_250_new_tokens_are_refused_naming_the_cache(monkeypatch):
    _budget(monkeypatch, 8e9)
    model = _tiny(max_len=512)
    ids = torch.ones(10000, 10, dtype=torch.long)
    t = time.perf_counter()
    with pytest.raises(ZooError) as info:
        zoo.run.generate.generate(model, ids, 250)
    assert time.perf_counter() - t < 2.0
    msg = str(info.value)
    # by hand: 2 x 4 layers x 10000 x 4 heads x 260 x 32 x 4 B = 10.6 GB of cache
    assert "the KV cache 10.6 GB" in msg and info.value.where == "generate.max_new_tokens", msg


def test_beam_search_counts_its_beams(monkeypatch):
    _budget(monkeypatch, 8e9)
    model = _tiny(max_len=512)
    ids = torch.ones(1000, 10, dtype=torch.long)  # 1.06 GB of cache: fits ...
    workload.check_generate(model, 1000, 10, 250)
    with pytest.raises(ZooError, match="10000 rows"):  # ... but not with 10 beams each
        zoo.run.generate.generate(model, ids, 250, num_beams=10)


def test_a_training_step_is_refused_before_the_run(tmp_path, budget_16gb):
    data = tmp_path / "d.txt"
    data.write_text("春眠不觉晓，处处闻啼鸟。\n\n" * 50, encoding="utf-8")
    with pytest.raises(ZooError, match="a training step of 65536 x 256 tokens") as info:
        zoo.train.train(zoo.spec("gpt_tiny"), data, out=tmp_path / "run", steps=1,
                        batch_size=65536, block_size=256)
    assert info.value.where == "train.batch_size"
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_ordinary_work_passes_and_the_default_budget_is_the_machine(monkeypatch):
    model = _tiny()
    assert zoo.run.generate.generate(model, [[1, 2, 3]], 4).shape == (1, 7)
    assert zoo.trace(model, [1, 2, 3]).logits.shape == (1, 3, 512)
    # no BUDGET: a petabyte-sized forward is refused against the memory actually available
    assert workload.BUDGET is None
    big = _tiny(max_len=10 ** 7, positions={"kind": "none"}, attention={"kind": "eager"})
    with pytest.raises(ZooError, match="available memory|free memory"):
        big(torch.zeros(1, 10 ** 7, dtype=torch.long))
    _budget(monkeypatch, float("inf"))
    workload.check_generate(model, 10 ** 6, 10, 250)  # inf: the check is off


def test_the_forward_check_costs_microseconds():
    """Shapes only: a small forward never reads the memory; the check is a few microseconds."""
    model = _tiny()
    ids = torch.zeros(4, 256, dtype=torch.long)
    workload.check_forward(model, (ids,), {})
    n = 2000
    t = time.perf_counter()
    for _ in range(n):
        workload.check_forward(model, (ids,), {})
    per_call = (time.perf_counter() - t) / n
    assert per_call < 50e-6, per_call


def test_a_latent_attention_cache_is_sized_by_its_latents(monkeypatch):
    """MLA (DeepSeek-V2) caches ``kv_lora_rank + qk_rope_head_dim`` numbers per token per layer (the
    paper's 512 + 64 = 576 for V2-Lite; here 16 + 8 = 24), not ``2 x heads x head_dim``: the refusal
    counts what the layers really allocate."""
    pytest.importorskip("transformers")
    from convert_cases import deepseek_v2_small
    from zoo.convert import from_transformers

    model = from_transformers(deepseek_v2_small(max_position_embeddings=512), certify=False)
    cache = model.new_cache(capacity=5)  # the real buffers after a 3-token prompt, 2 rows
    with torch.no_grad():
        model(torch.randint(0, 64, (2, 3)), cache=cache)
    per_token = sum(t.numel() for t in (cache.layers[0].k, cache.layers[0].v)) // (2 * 5)
    assert per_token == 16 + 8
    # by hand: 2 layers x 10000 rows x 24 x 260 tokens x 4 B = 499.2 MB (2 x 4 heads x 8 would be 1.3 GB)
    _budget(monkeypatch, 0.45e9)
    with pytest.raises(ZooError) as info:
        zoo.run.generate.generate(model, torch.ones(10000, 10, dtype=torch.long), 250)
    assert "the KV cache 499.2 MB" in str(info.value), info.value

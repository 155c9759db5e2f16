"""Issue 35: ``model.run_with_cache`` and ``model.generate(..., return_cache=True)`` are sized by the
work budget (zoo.guard.run_budget.check_cache) before the forward runs: the estimate is an upper
bound of what the cache really records (measured here on three architectures), an over-budget cache
is a ZooError naming the largest hook points, and a names_filter that keeps little passes."""
from __future__ import annotations

import pytest
import torch

import zoo
import zoo.guard.run_budget as workload
from zoo.inside.hooks import hook_names


def _budget(monkeypatch, value: float) -> None:
    import zoo.inside.hooks as hooks

    monkeypatch.setattr(workload, "BUDGET", value)
    if hooks.check_cache.__globals__ is not vars(workload):  # another copy of the module
        monkeypatch.setitem(hooks.check_cache.__globals__, "BUDGET", value)


def _estimate(model, names, B, T, T_src=None) -> int:
    p = workload.plan(model)
    s = max(p.stacks.values(), key=lambda x: x.heads * x.d + x.d_ff)
    Tk = max(T, T_src or 0)
    return sum(B * Tk * workload._hook_width(n, p, s, Tk) * 4 for n in names)


@pytest.mark.parametrize("preset, kw", [("gpt_tiny", {}), ("llama_tiny", {}), ("t5_tiny", {})])
def test_the_estimate_bounds_what_the_cache_records(preset, kw):
    model = zoo.build(preset, **kw).eval()
    B, T = 2, 48
    ids = torch.randint(0, model.spec.vocab_size, (B, T))
    args = (ids, ids[:, :16]) if model.spec.arch == "encoder_decoder" else (ids,)
    _, cache = model.run_with_cache(*args)
    recorded = sum(v.numel() * 4 for v in cache.values())  # as float32
    est = _estimate(model, list(cache.keys()), B, 16 if len(args) == 2 else T, T if len(args) == 2 else None)
    assert recorded <= est <= 3 * recorded, (recorded, est)
    assert set(cache.keys()) <= set(hook_names(model))


def test_an_over_budget_cache_is_refused_before_the_forward(monkeypatch):
    model = zoo.build("gpt_tiny", max_len=4096, positions={"kind": "rope"}).eval()
    _budget(monkeypatch, 300 * 2**20)
    calls = []
    ids = torch.zeros(1, 2048, dtype=torch.long)
    with pytest.raises(zoo.ZooError, match="caching .* hook points over 1 x 2048 tokens needs about") as e:
        model.run_with_cache(ids, fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, hook: calls.append(1))])
    assert e.value.where == "run_with_cache.ids" and calls == []
    assert "hook_attn_scores" in str(e.value) and "names_filter" in e.value.fix
    out, cache = model.run_with_cache(ids, names_filter="blocks.0.hook_resid_post")  # 8 MB: passes
    assert list(cache.keys()) == ["blocks.0.hook_resid_post"]


def test_generate_return_cache_is_sized_with_its_new_tokens(monkeypatch):
    model = zoo.build("gpt_tiny", max_len=4096, positions={"kind": "rope"}).eval()
    _budget(monkeypatch, 300 * 2**20)
    with pytest.raises(zoo.ZooError, match=r"over 4 x 2000 tokens") as e:
        model.generate(torch.zeros(4, 1000, dtype=torch.long), 1000, return_cache=True)
    assert e.value.where == "generate.max_new_tokens"
    seq, cache = model.generate(torch.zeros(1, 8, dtype=torch.long), 4, return_cache=True)
    assert seq.shape == (1, 12) and cache["blocks.0.hook_resid_post"].shape[1] == 12

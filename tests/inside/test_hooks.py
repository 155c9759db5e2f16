"""Hook points, run_with_hooks / run_with_cache, and hooks during generation (issue 26, goals 1, 3).

References: the model's own plain forward (a hooked call that edits nothing must give the same
logits; a cached generation must equal one forward over the final sequence), and a decoding loop
written here without a KV cache (a hook that edits one position must steer cached generation
exactly as it steers full forwards over the growing sequence).
"""
from __future__ import annotations

import pytest
import torch

import zoo
from zoo.errors import ZooError
from zoo.inside.hooks import ActivationCache, act_name, edit_positions, hook_names

from helpers import shrunk

PRESETS = zoo.list_presets()


def _model(preset, seed=0):
    return zoo.build(shrunk(preset), seed=seed, budget=float("inf")).eval()


def _inputs(model, T=9, B=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, model.spec.vocab_size, (B, T), generator=g)
    return (ids, ids[:, : T - 2]) if model.spec.arch == "encoder_decoder" else (ids,)


def _untouched(model) -> None:
    """No instance override and no torch hook left on any module."""
    for name, m in model.named_modules():
        assert "forward" not in m.__dict__, name
        assert not m._forward_hooks and not m._forward_pre_hooks, name
    assert "decode" not in model.__dict__ and "encode" not in model.__dict__


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_caches_every_point_and_stays_the_same(preset):
    model = _model(preset)
    keys = list(model.state_dict())
    args = _inputs(model)
    with torch.no_grad():
        plain = model(*args)
        out, cache = model.run_with_cache(*args)
    _untouched(model)
    assert list(model.state_dict()) == keys
    torch.testing.assert_close(out, plain, atol=2e-5, rtol=1e-4)  # eager kernel where pattern is asked
    names = hook_names(model)
    # every point of every block is reached (the unembed of an encoder without an LM head excepted)
    assert set(cache) == set(names), set(names) ^ set(cache)
    B, T = args[-1].shape
    stack = "decoder." if model.spec.arch == "encoder_decoder" else ""
    h = model.spec.stack("decoder" if stack else model.spec.roles[0]).num_heads
    assert cache[f"{stack}blocks.1.attn.hook_z"].shape[:3] == (B, T, h)
    assert cache[f"{stack}blocks.0.hook_resid_post"].shape == (B, T, model.spec.d_model)
    # the residual stream adds up: resid_post = resid_mid + mlp_out for pre-norm blocks
    if model.spec.stack(model.spec.roles[-1]).placement.kind == "pre" \
            and not model.spec.stack(model.spec.roles[-1]).parallel_residual and not stack:
        torch.testing.assert_close(cache["blocks.1.hook_resid_post"],
                                   cache["blocks.1.hook_resid_mid"] + cache["blocks.1.hook_mlp_out"])


def test_a_hook_that_raises_leaves_no_hook_behind():
    model = _model("gpt_tiny")

    def boom(x, hook):
        raise RuntimeError("inside the hook")

    with pytest.raises(RuntimeError, match="inside the hook"):
        model.run_with_hooks(*_inputs(model), fwd_hooks=[("blocks.0.attn.hook_pattern", boom)])
    _untouched(model)


def test_bad_names_and_bad_returns_are_zoo_errors():
    model = _model("gpt_tiny")
    with pytest.raises(ZooError, match="hook_pattern"):  # the suggestion
        model.run_with_hooks(*_inputs(model), fwd_hooks=[("blocks.0.attn.hook_patern", lambda x, h: x)])
    with pytest.raises(ZooError, match="shape"):
        model.run_with_hooks(*_inputs(model), fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, h: x[:, :1])])
    _untouched(model)


def test_patterns_filters_and_short_names():
    model = _model("gpt_tiny")
    seen = []
    with torch.no_grad():
        _, cache = model.run_with_cache(*_inputs(model), names_filter="*hook_pattern",
                                        fwd_hooks=[("blocks.*.attn.hook_z", lambda x, h: seen.append(h.name))])
    assert sorted(cache) == [f"blocks.{i}.attn.hook_pattern" for i in range(2)]
    assert seen == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
    assert cache["pattern", 1] is cache["blocks.1.attn.hook_pattern"]
    assert act_name("resid_pre", 3) == "blocks.3.hook_resid_pre" and act_name("embed") == "hook_embed"
    assert isinstance(cache, ActivationCache) and cache.stack("pattern").shape[0] == 2
    torch.testing.assert_close(cache["pattern", 0].sum(-1), torch.ones(2, 4, 9))


def test_zeroing_a_head_equals_trace_ablation():
    """zoo.trace's head ablation (its own mechanism) and a hook_z edit agree."""
    model = _model("gpt_tiny")
    ids = _inputs(model)[0]

    def zero_head(x, hook):
        x = x.clone()
        x[:, :, 1] = 0
        return x

    with torch.no_grad():
        a = model.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
    b = zoo.trace(model, ids, ablate=[(1, 1)]).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert (a - model(ids)).abs().max() > 1e-4


@pytest.mark.parametrize("preset", ["gpt_tiny", "llama_tiny", "t5_tiny", "gemma2_2b"])
def test_cache_from_generate_equals_one_forward_over_the_sequence(preset):
    model = _model(preset)
    prompt = _inputs(model, T=5)[0]
    with torch.no_grad():
        seq, gen_cache = model.generate(prompt, 6, return_cache=True)
        if model.spec.arch == "encoder_decoder":  # the start token is real (it may be pad_id)
            _, one = model.run_with_cache(prompt, seq, tgt_padding=torch.ones_like(seq))
        else:
            _, one = model.run_with_cache(seq)
    _untouched(model)
    names = [n for n in one if not n.startswith("unembed.")]
    assert sorted(gen_cache) == sorted(names)
    for n in names:
        torch.testing.assert_close(gen_cache[n], one[n], atol=1e-5, rtol=1e-4, msg=lambda m, n=n: f"{n}: {m}")


def _greedy_without_cache(model, prompt, steps, hooks):
    seq = prompt
    for _ in range(steps):
        with torch.no_grad():
            logits = model.run_with_hooks(seq, fwd_hooks=hooks)
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return seq


@pytest.mark.parametrize("p", [2, 7])  # in the prompt; computed in a decoding step
@pytest.mark.parametrize("name", ["blocks.0.hook_resid_post", "blocks.1.attn.hook_v", "blocks.0.attn.hook_pattern"])
def test_an_edit_at_position_p_happens_once_and_steers_like_full_forwards(p, name):
    model = _model("llama_tiny", seed=3)
    prompt = _inputs(model, T=5, B=1, seed=2)[0]
    calls = []

    def push(x):
        calls.append(1)
        if "pattern" in name:  # all attention on the first token (a rule of any row length)
            return torch.zeros_like(x).index_fill_(-1, torch.tensor([0]), 1.0)
        return x * 0.1 + 2.0

    hooks = [(name, edit_positions(p, push))]
    with torch.no_grad():
        seq, cache = model.generate(prompt, 6, fwd_hooks=hooks, return_cache=True)
    assert len(calls) == 1, "the edit must happen exactly once"
    want = _greedy_without_cache(model, prompt, 6, hooks)
    assert torch.equal(seq, want)
    plain = model.generate(prompt, 6)
    _, want_cache = model.run_with_cache(seq, fwd_hooks=hooks)
    torch.testing.assert_close(cache[name], want_cache[name], atol=1e-5, rtol=1e-4)
    assert not torch.equal(seq, plain) or (cache[name] - model.run_with_cache(seq)[1][name]).abs().max() > 1e-3


def test_streaming_and_a_hooks_context():
    model = _model("gpt_tiny")
    prompt = _inputs(model, T=4, B=1)[0]
    seen = []
    with model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, h: seen.append((h.offset, x.size(1))))]):
        toks = list(model.generate(prompt, 3, stream_tokens=True))
    _untouched(model)
    assert len(toks) == 3 and seen == [(0, 4), (4, 1), (5, 1)]


def test_compiled_model_after_hooks():
    model = _model("gpt_tiny")
    ids = _inputs(model)[0]
    with torch.no_grad():
        model.run_with_cache(ids)
        compiled = torch.compile(model, backend="aot_eager")
        torch.testing.assert_close(compiled(ids), model(ids))
        a = compiled.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, h: x * 0)]) \
            if hasattr(compiled, "run_with_hooks") else model.run_with_hooks(
                ids, fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, h: x * 0)])
    assert (a - model(ids)).abs().max() > 1e-4

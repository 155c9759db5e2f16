"""Issue 22, goal 4: non-finite logits stop generation with a ZooError naming the step and the
cause, in every decoding path (greedy, sampling, streaming, beam search, encoder-decoder)."""
from __future__ import annotations

import pytest
import torch

import zoo
from zoo.errors import ZooError


def _model(preset="gpt_tiny", **kw):
    return zoo.build(preset, num_layers=1, d_model=16, num_heads=2, vocab_size=64, max_len=32,
                     seed=0, **kw)


def _poison(model, name_part="decoder.blocks.0.ffn.down"):
    """Put a NaN into one weight of ``model`` (as a diverged run or an accepted conversion would)."""
    name, p = next((n, p) for n, p in model.named_parameters() if name_part in n and p.dim() == 2)
    with torch.no_grad():
        p[0, 0] = float("nan")
    return name


CALLS = {
    "greedy": lambda m, ids: zoo.run.generate.generate(m, ids, 4),
    "sample": lambda m, ids: zoo.run.generate.generate(m, ids, 4, do_sample=True, seed=1),
    "sample_top_p": lambda m, ids: zoo.run.generate.generate(m, ids, 4, do_sample=True, top_p=0.9, seed=1),
    "stream": lambda m, ids: list(zoo.run.generate.stream(m, ids, 4)),
    "no_cache": lambda m, ids: zoo.run.generate.generate(m, ids, 4, use_cache=False),
    "beam": lambda m, ids: zoo.run.generate.generate(m, ids, 4, num_beams=2),
    "beam_sample": lambda m, ids: zoo.run.generate.generate(m, ids, 4, num_beams=2, do_sample=True, seed=1),
}


@pytest.mark.parametrize("preset", ["gpt_tiny", "t5_tiny"])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_nan_weights_are_named_not_a_multinomial_error(preset, call):
    model = _model(preset)
    CALLS[call](model, [[1, 2, 3]])  # healthy: runs
    name = _poison(model)
    with pytest.raises(ZooError) as info:
        CALLS[call](model, [[1, 2, 3]])
    msg = str(info.value)
    assert "logits of step 0" in msg and "weights hold NaN" in msg and name in msg, msg
    assert info.value.where == "generate" and "zoo check" in info.value.fix


def test_the_step_is_the_one_that_went_wrong():
    """Logits finite for two steps, then NaN: the error names step 2 (the prompt's is step 0)."""
    model = _model()
    real = model.forward
    calls = {"n": 0}

    def forward(*a, **kw):
        out = real(*a, **kw)
        calls["n"] += 1
        return out * float("nan") if calls["n"] == 3 else out

    model.forward = forward
    with pytest.raises(ZooError, match="logits of step 2 hold") as info:
        zoo.run.generate.generate(model, [[1, 2, 3]], 5)
    assert "though every weight is finite" in str(info.value)


def test_finite_weights_that_overflow_are_told_apart():
    model = _model()
    with torch.no_grad():
        model.lm_head.weight.mul_(1e37) if hasattr(model, "lm_head") else None
        for n, p in model.named_parameters():
            if "norm" in n and n.endswith("weight") and "blocks" not in n:
                p.fill_(3e38)
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    with pytest.raises(ZooError, match="every weight is finite: the activations overflowed"):
        zoo.run.generate.generate(model, [[1, 2, 3]], 3, do_sample=True, seed=0)


def test_healthy_generation_is_unchanged():
    model = _model()
    out = zoo.run.generate.generate(model, [[1, 2, 3]], 6)
    # the same tokens as an uncached greedy loop over full forwards
    ids = torch.tensor([[1, 2, 3]])
    with torch.no_grad():
        for _ in range(6):
            ids = torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out, ids)


def test_huge_but_finite_logits_pass_and_each_kind_of_bad_value_is_caught():
    """The check reads one sum: a sum that overflows on finite logits is re-checked exactly."""
    from zoo.guard.health import finite_steps

    model = _model()

    def steps(rows):
        for r in rows:
            yield torch.tensor([r])

    huge = [3e38, 3e38, -1.0]  # the float32 sum is inf; every logit is finite
    assert len(list(finite_steps(steps([huge, huge]), model))) == 2
    for bad in ([1.0, float("nan")], [float("inf"), 0.0], [float("-inf"), 0.0],
                [float("inf"), float("-inf")]):
        with pytest.raises(ZooError, match="logits of step 1 hold"):
            list(finite_steps(steps([[0.0, 1.0], bad]), model))

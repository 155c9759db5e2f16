"""Batched generation of many prompts of mixed lengths (issue 27, item 4), against transformers.

Sixteen prompts whose lengths spread over 8..256 tokens, generated greedily in one batch (left-padded
inside ``generate``), must give each prompt the tokens it gets alone, and the tokens transformers'
own batched ``generate`` gives on the same weights and the same left-padded batch.  The speed side
is ``benchmarks/batched_generate.py``; here only the behaviour, which the benchmark also checks.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import zoo.convert  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import batched_generate as bench  # noqa: E402

NEW = 16  # new tokens per prompt (the benchmark takes 64; 16 keeps the suite quick)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def pair(request):
    hf = bench.hf_model(request.param, "tiny")
    return hf, zoo.convert.from_transformers(hf).eval()


def test_sixteen_mixed_prompts_are_spread_over_8_to_256_tokens():
    rows = bench.mixed_prompts(1024)
    lengths = sorted(map(len, rows))
    assert len(rows) == 16 and lengths[0] == 8 and lengths[-1] == 256
    assert len(set(lengths)) == 16  # every length different: each row has its own padding
    assert all(1 <= x < 1024 for r in rows for x in r)  # never the pad id 0


def test_batch_gives_each_prompt_its_own_tokens_and_transformers_tokens(pair):
    hf, z = pair
    rows = bench.mixed_prompts(hf.config.vocab_size)
    ids, mask = bench.left_padded(rows)
    T = ids.size(1)
    with torch.inference_mode():
        batch = z.generate(rows, NEW)
        ref = bench.hf_generate(hf, ids, mask, NEW)
    assert batch.shape == (16, T + NEW)
    assert torch.equal(batch[:, :T], ids)  # the prompts, left-padded, come back as given
    assert torch.equal(batch[:, T:], ref[:, T:])  # transformers' batched greedy tokens
    for i, r in enumerate(rows[:6]):  # six rows alone (all sixteen: the benchmark does it)
        with torch.inference_mode():
            alone = z.generate(r, NEW)
        assert torch.equal(batch[i, T:], alone[0, len(r):]), f"row {i} (length {len(r)})"
    # not a degenerate model: the rows do not all repeat one token
    assert len(set(batch[:, T:].flatten().tolist())) > 16


def test_rows_that_stop_are_padded_and_the_rest_go_on(pair):
    hf, z = pair
    rows = bench.mixed_prompts(hf.config.vocab_size)
    T = max(map(len, rows))
    with torch.inference_mode():
        free = z.generate(rows, NEW)[:, T:]
    stop = int(free[0, NEW // 2])  # a token row 0 emits half-way
    with torch.inference_mode():
        out = z.generate(rows, NEW, stop_tokens=stop, pad_id=0)[:, T:]
    for i in range(16):
        hits = (free[i] == stop).nonzero()
        if len(hits):  # up to and including the stop token: unchanged; after it: padding
            k = int(hits[0, 0])
            assert torch.equal(out[i, :k + 1], free[i, :k + 1])
            assert bool((out[i, k + 1:] == 0).all())
        else:
            assert torch.equal(out[i, :out.size(1)], free[i, :out.size(1)])


def test_ragged_prefill_is_taken_and_gives_what_the_padded_prefill_gives(pair, monkeypatch):
    """The 16 prompts carry ~48% padding, so generate prefills them one by one and merges the
    caches (zoo.run.steps.ragged_prefill); forced back to the one padded prefill, the tokens and
    the logits of every step are the same."""
    import zoo.run.generate as gen
    import zoo.run.steps as steps
    from zoo.model.layers import KVCache

    hf, z = pair
    rows = bench.mixed_prompts(hf.config.vocab_size)
    merged = []
    real = KVCache.from_rows.__func__

    def spy(cls, caches, lengths, capacity):
        merged.append(list(lengths))
        return real(cls, caches, lengths, capacity)

    monkeypatch.setattr(KVCache, "from_rows", classmethod(spy))
    with torch.inference_mode():
        ragged = z.generate(rows, NEW)
        ragged_steps = list(gen.stream(z, rows, 4))
    assert merged and merged[0] == [len(r) for r in rows]
    monkeypatch.setattr(steps, "RAGGED_MIN_PADDING", 1.01)  # never: the padded prefill
    merged.clear()
    with torch.inference_mode():
        padded = z.generate(rows, NEW)
    assert not merged
    assert torch.equal(ragged, padded)
    # the merged cache against the padded one, logits of the first steps (float32 tolerance)
    ids, mask = bench.left_padded(rows)
    head = steps.make_head(z, 4)
    with torch.inference_mode():  # a coroutine prefills at its first next(): each under its setting
        a = steps.decoder_logits(z, ids, mask.bool(), True, None, head, 4)
        la = next(a)  # padded (RAGGED_MIN_PADDING is still 1.01)
        monkeypatch.setattr(steps, "RAGGED_MIN_PADDING", 0.0)
        merged.clear()
        b = steps.decoder_logits(z, ids, mask.bool(), True, None, head, 4)
        lb = next(b)  # ragged
        assert merged
        for step in ragged_steps:
            torch.testing.assert_close(la, lb, atol=2e-5, rtol=1e-4)
            la, lb = a.send(step), b.send(step)
        torch.testing.assert_close(la, lb, atol=2e-5, rtol=1e-4)

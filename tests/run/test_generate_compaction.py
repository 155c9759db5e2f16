"""Finished rows stop costing compute (issue 27, item 4): a batch drops the rows that have stopped.

A row that produced a stop token only yields padding afterwards.  ``generate`` therefore shrinks
the batch the model runs on once enough rows have finished (``zoo.run.steps.LiveRows``, the KV cache
keeping the live rows, :meth:`zoo.model.layers.KVCache.keep`).  What must hold:

- the tokens are transformers' own: its batched ``generate`` with the same end-of-sequence ids on
  the same weights and left-padded batch (it keeps finished rows; the tokens must not care);
- the model really runs on fewer rows (the batch size each decoder forward saw, by a forward
  pre-hook on the first block);
- sampling with a seed and the repetition penalty give what the uncompacted batch gives: the
  caller still sees ``(B, V)`` logits, so the random stream and the per-row records are unchanged;
- an encoder-decoder (T5 from transformers) compacts its cross-attention cache and memory too.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import zoo.convert  # noqa: E402
import zoo.run.steps as G  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import batched_generate as bench  # noqa: E402

NEW = 24


@pytest.fixture(scope="module")
def llama():
    hf = bench.hf_model("llama", "tiny")
    return hf, zoo.convert.from_transformers(hf).eval()


def _stops_at_different_steps(free: torch.Tensor, rows: int = 8) -> list[int]:
    """End-of-sequence ids that end rows 0..rows-1 at different steps (row i's token at step
    2i + 1, which may end other rows too)."""
    return sorted({int(free[i, 2 * i + 1]) for i in range(rows)})


def _batch_sizes(model, fn):
    """Run ``fn()`` and return the batch size of every decoder forward (prefill calls included)."""
    seen: list[int] = []
    block = model.decoder.blocks[0]
    handle = block.register_forward_pre_hook(lambda m, args: seen.append(args[0].size(0)))
    try:
        out = fn()
    finally:
        handle.remove()
    return out, seen


def test_stopped_rows_are_dropped_and_tokens_are_transformers(llama):
    hf, z = llama
    rows = bench.mixed_prompts(hf.config.vocab_size)
    ids, mask = bench.left_padded(rows)
    T = ids.size(1)
    with torch.inference_mode():
        free = z.generate(rows, NEW)[:, T:]
    stops = _stops_at_different_steps(free)
    with torch.inference_mode():
        out, sizes = _batch_sizes(z, lambda: z.generate(rows, NEW, stop_tokens=stops, pad_id=0))
        ref = bench.hf_generate(hf, ids, mask, NEW, eos=stops)
    # transformers pads a finished row with pad_token_id and ends when every row has stopped
    assert out.shape == ref.shape
    assert torch.equal(out, ref)
    ended = [bool(torch.isin(out[i, T:], torch.tensor(stops)).any()) for i in range(16)]
    assert sum(ended) >= 6, "the stop ids must end several rows for this test to mean anything"
    assert sizes[:16] == [1] * 16  # the 16 prompts are prefilled one by one (ragged prefill)
    decode = sizes[16:]
    assert decode == sorted(decode, reverse=True)  # the batch only ever shrinks ...
    assert 16 - sum(ended) <= decode[-1] < 16  # rows that never stop are never dropped
    # ... and the row-steps computed are far fewer than 16 per step
    assert sum(decode) < 0.8 * 16 * len(decode)


@pytest.mark.parametrize("options", [dict(do_sample=True, seed=3, top_k=50, temperature=1.5),
                                     dict(repetition_penalty=1.3),
                                     dict(do_sample=True, seed=11, top_p=0.9)],
                         ids=["top_k", "repetition", "top_p"])
def test_compaction_changes_no_token_of_sampling_or_penalties(llama, monkeypatch, options):
    hf, z = llama
    rows = bench.mixed_prompts(hf.config.vocab_size)
    T = max(map(len, rows))
    with torch.inference_mode():
        free = z.generate(rows, NEW, **options)[:, T:]
    stops = _stops_at_different_steps(free)
    with torch.inference_mode():
        compact, sizes = _batch_sizes(z, lambda: z.generate(rows, NEW, stop_tokens=stops, pad_id=0,
                                                            **options))
        monkeypatch.setattr(G, "COMPACT_SHARE", None)
        whole, whole_sizes = _batch_sizes(z, lambda: z.generate(rows, NEW, stop_tokens=stops,
                                                                pad_id=0, **options))
    # after the 16 one-row prefills: one run compacted, the other did not
    assert min(sizes[16:]) < 16 and min(whole_sizes[16:]) == 16
    assert torch.equal(compact, whole)


def test_encoder_decoder_drops_rows_with_their_memory():
    """T5 (relative position buckets, cross-attention): the cross keys and the encoder memory
    shrink with the batch, and the tokens stay transformers' batched greedy ones."""
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(0)
    cfg = T5Config(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
                   dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
    hf = T5ForConditionalGeneration(cfg).eval()
    z = zoo.convert.from_transformers(hf).eval()
    g = torch.Generator().manual_seed(1)
    lengths = [5, 9, 13, 17, 7, 11, 15, 19]
    src = [torch.randint(2, 256, (n,), generator=g).tolist() for n in lengths]
    ids, mask = bench.left_padded(src)  # zoo takes left-padded sources; T5's buckets are relative
    with torch.inference_mode():
        free = hf.generate(ids, attention_mask=mask, max_new_tokens=NEW, min_new_tokens=NEW,
                           do_sample=False)[:, 1:]
    stops = sorted({int(free[i, i + 1]) for i in range(6)})
    with torch.inference_mode():
        ref = hf.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False,
                          eos_token_id=stops)
        out, sizes = _batch_sizes(z, lambda: z.generate(ids, NEW, attention_mask=mask.bool(),
                                                        stop_tokens=stops, pad_id=0))
    assert torch.equal(out, ref)
    assert sizes[0] == 8 and min(sizes) < 8
    assert sizes == sorted(sizes, reverse=True)


def test_kvcache_keep_selects_rows_of_every_buffer():
    """A hand-made cache: keys, values, positions, padding and cross keys of the kept rows, in
    order, with the capacity kept."""
    from zoo.model.layers import KVCache

    c = KVCache(1, capacity=6)
    k = torch.arange(4 * 2 * 3 * 2, dtype=torch.float32).view(4, 2, 3, 2) + 1
    c.layers[0].update(k, -k)
    c.layers[0].cross = (k[:, :, :1] * 10, k[:, :, :1] * 20)
    pos, pad = torch.arange(12).view(4, 3), torch.tensor([[0, 1, 1], [1, 1, 1], [0, 0, 1], [1, 1, 1]]).bool()
    c.append(pos, pad)
    c.length = 3
    keep = torch.tensor([1, 3])
    c.keep(keep)
    L = c.layers[0]
    assert L.k.shape == (2, 2, 6, 2)  # two rows, the capacity kept
    assert torch.equal(L.k[:, :, :3], k[keep]) and torch.equal(L.v[:, :, :3], -k[keep])
    assert torch.equal(L.cross[0], k[keep][:, :, :1] * 10)
    assert torch.equal(c.key_pos, pos[keep]) and torch.equal(c.key_padding, pad[keep])

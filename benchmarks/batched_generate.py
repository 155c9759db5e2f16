"""Batched generation: 16 prompts of mixed lengths at once, zoo against transformers (issue 27, item 4).

Not a test: a script that prints a table.  It builds a Hugging Face causal LM from a config (random
weights, nothing downloaded), converts it with ``zoo.convert.from_transformers`` so both run *the
same weights*, and generates greedily from 16 prompts whose lengths are spread over 8..256 tokens,
64 new tokens each:

- ``zoo``  ``model.generate(rows, 64)``: the ragged rows are left-padded inside, one static KV cache
  of ``256 + 64`` slots per row, one forward per step for the whole batch;
- ``hf``   ``hf.generate(ids, attention_mask=mask, max_new_tokens=64, min_new_tokens=64)`` on the
  same left-padded batch (transformers derives each row's positions from the mask, as zoo does);
- ``zoo compiled`` (``--compile``)  ``model.generate(rows, 64, compile=True)``: the padded batch's
  prefill and decoding step compiled (:mod:`zoo.run.compiled`), checked to give the eager tokens.

Both must give the same tokens, and the same tokens as 16 single-prompt zoo runs (checked first).
Runs alternate; the ratio is the median of the rounds' paired ratios.  Target: zoo >= 1.5x hf in
total tokens/s.  zoo prefills a batch with this much padding prompt by prompt, without the padding
(``zoo.run.steps.ragged_prefill``), then decodes all rows together from the merged cache.

Rows that finish early (an end-of-sequence token) stop costing compute: once enough rows have
stopped, zoo drops them from the batch the model runs on (``zoo.run.steps.LiveRows``; the KV cache
keeps the live rows).  The second table measures it: end-of-sequence ids chosen so that rows stop
at different steps, the same call with compaction on and off (``zoo.run.steps.COMPACT_SHARE = None``),
paired; it reports the row-steps each computed and the time ratio, and checks both give the same
tokens.

    python benchmarks/batched_generate.py [--family llama|gpt2] [--shape tiny|small] [--repeats 3]
                                          [--threads N] [--compile]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

SHAPES = {  # d_model, layers, heads, kv heads, d_ff, vocab
    "tiny": (128, 4, 4, 2, 344, 1024),
    "small": (512, 8, 8, 4, 1376, 32000),
}
PROMPTS, NEW, MIN_LEN, MAX_LEN = 16, 64, 8, 256


def hf_model(family: str, shape: str):
    d, L, h, kv, ff, V = SHAPES[shape]
    torch.manual_seed(0)
    if family == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(hidden_size=d, num_hidden_layers=L, num_attention_heads=h, num_key_value_heads=kv,
                          intermediate_size=ff, vocab_size=V, max_position_embeddings=MAX_LEN + NEW,
                          bos_token_id=None, eos_token_id=None, pad_token_id=0, tie_word_embeddings=False)
        return LlamaForCausalLM(cfg).eval()
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_embd=d, n_layer=L, n_head=h, vocab_size=V, n_positions=MAX_LEN + NEW,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None,
                     eos_token_id=None, pad_token_id=0)
    return GPT2LMHeadModel(cfg).eval()


def mixed_prompts(vocab: int, n: int = PROMPTS, lo: int = MIN_LEN, hi: int = MAX_LEN, seed: int = 0):
    """``n`` prompts with lengths spread evenly over ``lo..hi`` (shuffled), ids in ``1..vocab-1``."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.linspace(lo, hi, n).round().long()[torch.randperm(n, generator=g)].tolist()
    return [torch.randint(1, vocab, (t,), generator=g).tolist() for t in lengths]


def left_padded(rows, pad: int = 0):
    from zoo.run.arguments import left_pad

    ids, mask = left_pad(rows, pad)
    return ids, mask.long()


def hf_generate(hf, ids, mask, new, eos=None):
    return hf.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=None if eos else new,
                       do_sample=False, pad_token_id=0, eos_token_id=eos)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=["llama", "gpt2"], default="llama")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--compile", action="store_true",
                    help="also time generate(..., compile=True) (zoo.run.compiled) in the same rounds")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import zoo.convert

    hf = hf_model(args.family, args.shape)
    z = zoo.convert.from_transformers(hf).eval()
    rows = mixed_prompts(hf.config.vocab_size)
    ids, mask = left_padded(rows)
    T = ids.size(1)
    with torch.inference_mode():
        zb = z.generate(rows, NEW)
        hb = hf_generate(hf, ids, mask, NEW)
        singles = [z.generate(r, NEW)[0, len(r):] for r in rows]
    same_hf = torch.equal(zb[:, T:], hb[:, T:])
    same_single = all(torch.equal(zb[i, T:], s) for i, s in enumerate(singles))
    print(f"{args.family}-{args.shape}: {PROMPTS} prompts of {min(map(len, rows))}..{max(map(len, rows))} "
          f"tokens, {NEW} new each; same tokens as transformers: {same_hf}; as {PROMPTS} single runs: "
          f"{same_single}")
    runs = {"zoo": lambda: z.generate(rows, NEW), "hf": lambda: hf_generate(hf, ids, mask, NEW)}
    if args.compile:  # compiled decoding of the padded batch (one graph for every step)
        t = time.perf_counter()
        with torch.inference_mode():
            same_compiled = torch.equal(z.generate(rows, NEW, compile=True), zb)
        print(f"  zoo compiled: first call {time.perf_counter() - t:.1f} s (compiles), same tokens as "
              f"eager: {same_compiled}")
        runs["zoo compiled"] = lambda: z.generate(rows, NEW, compile=True)
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(args.repeats):  # alternate, so that a change of load hits all alike
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            t = time.perf_counter()
            with torch.inference_mode():
                runs[name]()
            times[name].append(time.perf_counter() - t)
    tokens = PROMPTS * NEW
    med = {k: statistics.median(v) for k, v in times.items()}
    for k in runs:
        print(f"  {k:12s} {med[k]:7.3f} s   {tokens / med[k]:8.1f} new tokens/s   "
              f"(runs: {', '.join(f'{x:.3f}' for x in times[k])})")
    ratios = {}
    for k in [k for k in runs if k != "hf"]:
        each = [h / z_ for z_, h in zip(times[k], times["hf"])]  # paired: the runs of one round
        ratios[k] = statistics.median(each)
        print(f"  {k} / transformers tokens/s = {ratios[k]:.2f}x, median of the rounds' ratios "
              f"{', '.join(f'{x:.2f}' for x in each)}   (target >= 1.5x)")
    ratio = ratios["zoo"]

    # finished rows: end-of-sequence ids that end rows at different steps (row i's token at step
    # 3i + 2 for half the rows), generated with and without dropping finished rows
    import zoo.run.steps as G

    ref = zb[:, T:]
    eos = sorted({int(ref[i, 3 * i + 2]) for i in range(PROMPTS // 2)})
    block = z.decoder.blocks[0]
    seen: list[int] = []
    # rows of each decoding forward (one new token per row; the prefill's forwards have T > 1)
    hook = block.register_forward_pre_hook(
        lambda m, a: seen.append(a[0].size(0)) if a[0].size(1) == 1 else None)
    share = G.COMPACT_SHARE
    outs, computed = {}, {}
    for name, value in (("compacted", share), ("kept", None)):
        G.COMPACT_SHARE, seen[:] = value, []
        with torch.inference_mode():
            outs[name] = z.generate(rows, NEW, stop_tokens=eos)
        computed[name] = sum(seen)
    hook.remove()
    same_stop = torch.equal(outs["compacted"], outs["kept"])
    steps_run = outs["kept"].size(1) - T
    stopped = sum(bool(torch.isin(r, torch.tensor(eos)).any()) for r in outs["kept"][:, T:])
    tc: dict[str, list[float]] = {"compacted": [], "kept": []}
    for _ in range(args.repeats):
        for name, value in (("compacted", share), ("kept", None)):
            G.COMPACT_SHARE = value
            t = time.perf_counter()
            with torch.inference_mode():
                z.generate(rows, NEW, stop_tokens=eos)
            tc[name].append(time.perf_counter() - t)
    G.COMPACT_SHARE = share
    gain = statistics.median([k / c for c, k in zip(tc["compacted"], tc["kept"])])
    print(f"  with {len(eos)} eos ids: {stopped} of {PROMPTS} rows stop, {steps_run} steps; same tokens "
          f"with and without dropping finished rows: {same_stop}")
    print(f"  row-steps computed: {computed['compacted']} dropping finished rows vs "
          f"{computed['kept']} keeping them ({1 - computed['compacted'] / computed['kept']:.0%} fewer); "
          f"time {statistics.median(tc['compacted']):.3f} s vs {statistics.median(tc['kept']):.3f} s: "
          f"{gain:.2f}x faster (median of paired rounds "
          f"{', '.join(f'{k / c:.2f}' for c, k in zip(tc['compacted'], tc['kept']))})")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores, torch threads "
          f"{torch.get_num_threads()}")
    return {"ratio": ratio, "same_hf": same_hf, "same_single": same_single,
            "same_stop": same_stop, "compaction_gain": gain, "ratios": ratios,
            "row_steps": computed}


if __name__ == "__main__":
    main()

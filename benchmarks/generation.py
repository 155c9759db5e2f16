"""Generation speed: zoo with the KV cache vs zoo without it vs Hugging Face ``generate``.

Not a test: a script that prints a table (and optionally writes JSON).  For each shape it builds a
Hugging Face ``GPT2LMHeadModel`` from a config (random weights, nothing downloaded), converts it with
``zoo.convert.from_transformers`` so both run *the same weights*, checks that greedy tokens agree,
then times batch-1 greedy generation of ``--new`` tokens after a ``--prompt``-token prompt:

- ``zoo``           ``model.generate(ids, N)`` (KV cache)
- ``zoo no-cache``  ``model.generate(ids, N, use_cache=False)`` (recomputes the whole sequence)
- ``hf``            ``hf_model.generate(ids, max_new_tokens=N, min_new_tokens=N, do_sample=False)``

Runs are interleaved and the best of ``--repeats`` is kept, so background load hits all three alike.
Targets (issue 4): zoo >= 2x HF on the tiny shape, >= 1.1x on GPT-2 small.

    python benchmarks/generation.py                       # tiny and gpt2-small, CPU
    python benchmarks/generation.py --shapes tiny --repeats 5 --json out.json
    python benchmarks/generation.py --device cuda
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

SHAPES = {
    "tiny": dict(n_embd=128, n_layer=4, n_head=4, vocab_size=512, n_positions=256),
    "gpt2-small": dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024),
}


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device):
    _sync(device)
    t = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t, out


def bench_shape(name, prompt_len, new, repeats, device, no_cache_repeats):
    from transformers import GPT2Config, GPT2LMHeadModel

    import zoo.convert

    torch.manual_seed(0)
    cfg = GPT2Config(**SHAPES[name], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=None, eos_token_id=None, pad_token_id=None)
    try:
        hf = GPT2LMHeadModel(cfg, attn_implementation="sdpa")
    except TypeError:
        hf = GPT2LMHeadModel(cfg)
    hf = hf.eval().to(device)
    zm = zoo.convert.from_transformers(hf.cpu()).to(device).eval()
    hf = hf.to(device)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (1, prompt_len), generator=g).to(device)
    mask = torch.ones_like(ids)

    def run_hf():
        return hf.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                           do_sample=False, pad_token_id=0)

    def run_zoo():
        return zm.generate(ids, new)

    def run_zoo_nc():
        return zm.generate(ids, new, use_cache=False)

    with torch.no_grad():
        # warm-up + correctness: the same weights must give the same greedy tokens
        a, b = run_zoo(), run_hf()
        same = int((a[0] == b[0]).float().mean().item() * 1000) / 10
        times = {"zoo": [], "hf": [], "zoo_no_cache": []}
        for r in range(repeats):
            times["hf"].append(timed(run_hf, device)[0])
            times["zoo"].append(timed(run_zoo, device)[0])
            if r < no_cache_repeats:
                times["zoo_no_cache"].append(timed(run_zoo_nc, device)[0])
    best = {k: min(v) for k, v in times.items() if v}
    return {"shape": name, **SHAPES[name], "prompt": prompt_len, "new_tokens": new,
            "greedy_tokens_equal_pct": same, "seconds": best,
            "tokens_per_s": {k: new / v for k, v in best.items()},
            "speedup_vs_hf": best["hf"] / best["zoo"],
            "cache_speedup": best.get("zoo_no_cache", float("nan")) / best["zoo"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-cache-repeats", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("ZOO_DISABLE_PLUGIN_AUTOLOAD", "1")
    device = torch.device(args.device)
    import transformers

    rows = []
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {platform.machine()}, "
          f"{torch.get_num_threads()} threads, device {device}; batch 1, prompt {args.prompt}, "
          f"{args.new} new tokens, best of {args.repeats}")
    print(f"{'shape':<11} {'zoo s':>8} {'no-cache s':>11} {'hf s':>8} {'zoo tok/s':>10} "
          f"{'vs hf':>7} {'cache x':>8} {'same tokens':>12}")
    for name in args.shapes:
        r = bench_shape(name, args.prompt, args.new, args.repeats, device, args.no_cache_repeats)
        rows.append(r)
        s = r["seconds"]
        print(f"{name:<11} {s['zoo']:>8.3f} {s.get('zoo_no_cache', float('nan')):>11.3f} "
              f"{s['hf']:>8.3f} {r['tokens_per_s']['zoo']:>10.1f} {r['speedup_vs_hf']:>6.2f}x "
              f"{r['cache_speedup']:>7.2f}x {r['greedy_tokens_equal_pct']:>11.1f}%")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)
    return rows


if __name__ == "__main__":
    main()

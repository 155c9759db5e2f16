"""Compiled decoding vs eager zoo vs Hugging Face ``generate``, paired in one process (issue 27).

Not a test: a script that prints a table (and optionally writes JSON).  Batch 1, greedy, a
``--prompt``-token prompt and ``--new`` new tokens (default 32 + 128), on the CPU by default.

Contestants, timed as whole ``generate`` calls (prefill included, as Hugging Face's is):

- ``zoo compiled``  ``model.generate(ids, N, compile=True)``: the prefill and the decoding step
  compiled (``zoo.run.compiled``), static KV cache, one graph for every step;
- ``zoo eager``     ``model.generate(ids, N)``: the eager static-cache loop;
- ``hf``            ``GPT2LMHeadModel.generate`` (``min_new_tokens=N``, greedy), built offline from a
  ``GPT2Config`` of the tiny shape; the zoo model of that row is converted from it
  (``zoo.convert.from_transformers``), so both run the same weights.

Two rows: the ``gpt_tiny`` preset (compiled vs eager zoo) and ``gpt2-tiny-hf`` (the preset's shape
as a GPT-2: learned positions; compiled vs eager vs hf).  Each round runs every contestant once, in
an order that alternates between rounds, so background load hits all alike; the table gives the
median seconds per call, tokens/s and the ratios of the medians.  Before timing, the tokens are
checked: compiled == eager (both rows) and compiled == hf (the converted row).

``--compile-times`` also measures the first call's compile time in two fresh processes sharing one
new ``TORCHINDUCTOR_CACHE_DIR``: the first compiles from nothing, the second finds Inductor's FX
graph cache filled (what a second ``zoo run --compile`` of the same model pays).

    python benchmarks/compiled_decode.py                        # 32 + 128 tokens, 15 rounds
    python benchmarks/compiled_decode.py --rounds 25 --json out.json --compile-times
    python benchmarks/compiled_decode.py --device cuda --dtype bfloat16
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch

TINY_HF = dict(n_embd=128, n_layer=4, n_head=4, n_inner=512, vocab_size=512, n_positions=256)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _hf_tiny(device, dtype):
    """A ``GPT2LMHeadModel`` of the tiny shape (random weights, nothing downloaded) and the zoo
    model converted from it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    import zoo.convert

    torch.manual_seed(0)
    cfg = GPT2Config(**TINY_HF, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                     bos_token_id=None, eos_token_id=None, pad_token_id=None)
    try:
        hf = GPT2LMHeadModel(cfg, attn_implementation="sdpa")
    except TypeError:
        hf = GPT2LMHeadModel(cfg)
    hf = hf.eval()
    zm = zoo.convert.from_transformers(hf).eval()
    return hf.to(device=device, dtype=dtype), zm.to(device=device, dtype=dtype)


def paired(contestants: dict, rounds: int, device) -> dict:
    """Median seconds per call of each contestant over ``rounds`` rounds, alternating the order."""
    times = {k: [] for k in contestants}
    names = list(contestants)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for k in order:
            _sync(device)
            t = time.perf_counter()
            contestants[k]()
            _sync(device)
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}, times


def run(args) -> dict:
    import zoo
    from zoo.run import compiled

    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    N, T = args.new, args.prompt
    g = torch.Generator().manual_seed(1)
    rows = []
    with torch.inference_mode():
        # -- row 1: the gpt_tiny preset, compiled vs eager
        model = zoo.build("gpt_tiny", device=str(device)).to(dtype).eval()
        ids = torch.randint(0, model.spec.vocab_size, (1, T), generator=g).to(device)
        t0 = time.perf_counter()
        comp = model.generate(ids, N, compile=True)  # the first call compiles
        first = time.perf_counter() - t0
        cs = compiled.last_steps(model)
        eager = model.generate(ids, N)
        row = dict(model="gpt_tiny", same_tokens_eager=bool(torch.equal(comp, eager)),
                   first_call_s=first, compile_s=dict(cs.compile_seconds))
        med, raw = paired({"zoo compiled": lambda: model.generate(ids, N, compile=True),
                           "zoo eager": lambda: model.generate(ids, N)}, args.rounds, device)
        row.update(median_s=med, raw_s=raw, recompiles=cs.recompiles, graphs=dict(cs.compiles))
        rows.append(row)

        # -- row 2: the tiny shape as a GPT-2, against transformers
        hf, zm = _hf_tiny(device, dtype)
        mask = torch.ones_like(ids)

        def run_hf():
            return hf.generate(ids, attention_mask=mask, max_new_tokens=N, min_new_tokens=N,
                               do_sample=False, pad_token_id=0)

        t0 = time.perf_counter()
        comp = zm.generate(ids, N, compile=True)
        first = time.perf_counter() - t0
        cs = compiled.last_steps(zm)
        ref = run_hf()
        row = dict(model="gpt2-tiny-hf", same_tokens_eager=bool(torch.equal(comp, zm.generate(ids, N))),
                   same_tokens_hf=bool(torch.equal(comp, ref)), first_call_s=first,
                   compile_s=dict(cs.compile_seconds))
        med, raw = paired({"zoo compiled": lambda: zm.generate(ids, N, compile=True),
                           "zoo eager": lambda: zm.generate(ids, N), "hf": run_hf},
                          args.rounds, device)
        row.update(median_s=med, raw_s=raw, recompiles=cs.recompiles, graphs=dict(cs.compiles))
        rows.append(row)
    for row in rows:
        m = row["median_s"]
        row["tokens_per_s"] = {k: N / v for k, v in m.items()}
        row["compiled_vs_eager"] = m["zoo eager"] / m["zoo compiled"]
        if "hf" in m:
            row["compiled_vs_hf"] = m["hf"] / m["zoo compiled"]
            row["eager_vs_hf"] = m["hf"] / m["zoo eager"]
    return dict(device=str(device), dtype=args.dtype, prompt=T, new=N, rounds=args.rounds,
                threads=torch.get_num_threads(), torch=torch.__version__,
                machine=platform.processor() or platform.machine(),
                load_average=os.getloadavg() if hasattr(os, "getloadavg") else None, rows=rows)


def compile_once(args) -> dict:
    """In a fresh process: the wall time of the first ``generate(compile=True)`` call of gpt_tiny
    (Dynamo tracing + Inductor code generation / cache look-up + the run itself)."""
    t_import = time.perf_counter()
    import zoo
    from zoo.run import compiled

    model = zoo.build("gpt_tiny").eval()
    ids = torch.randint(0, model.spec.vocab_size, (1, args.prompt),
                        generator=torch.Generator().manual_seed(1))
    t0 = time.perf_counter()
    model.generate(ids, args.new, compile=True)
    total = time.perf_counter() - t0
    return dict(first_call_s=total, import_s=t0 - t_import,
                compile_s=dict(compiled.last_steps(model).compile_seconds))


def compile_times(args) -> dict:
    """Two fresh processes, one new Inductor cache folder: cold, then warm."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="zoo-inductor-") as cache_dir:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache_dir)
        for label in ("cold cache", "warm cache (2nd process)"):
            res = subprocess.run([sys.executable, __file__, "--compile-once", "--prompt",
                                  str(args.prompt), "--new", str(args.new)], env=env,
                                 capture_output=True, text=True, check=True)
            out[label] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def table(report: dict) -> str:
    lines = [f"batch 1, {report['prompt']} + {report['new']} tokens, greedy, {report['device']} "
             f"{report['dtype']}, {report['threads']} threads, torch {report['torch']}, "
             f"{report['rounds']} paired rounds, load average {report['load_average']}"]
    for row in report["rows"]:
        lines.append(f"\n{row['model']}: first call {row['first_call_s']:.1f} s (compile "
                     + ", ".join(f"{k} {v:.1f} s" for k, v in row["compile_s"].items())
                     + f"); graphs {row['graphs']}, recompiles {row['recompiles']}; same tokens "
                     f"as eager: {row['same_tokens_eager']}"
                     + (f", as hf: {row['same_tokens_hf']}" if "same_tokens_hf" in row else ""))
        lines.append(f"  {'':14} {'median s':>9} {'tokens/s':>9}")
        for k, v in row["median_s"].items():
            lines.append(f"  {k:14} {v:9.4f} {row['tokens_per_s'][k]:9.1f}")
        lines.append(f"  compiled / eager zoo: {row['compiled_vs_eager']:.2f}x"
                     + (f"   compiled / hf: {row['compiled_vs_hf']:.2f}x   eager zoo / hf: "
                        f"{row['eager_vs_hf']:.2f}x" if "compiled_vs_hf" in row else ""))
    if "compile_times" in report:
        lines.append("\nfirst generate(compile=True) call in a fresh process (gpt_tiny):")
        for k, v in report["compile_times"].items():
            lines.append(f"  {k:26} {v['first_call_s']:6.1f} s  ("
                         + ", ".join(f"{n} {s:.1f} s" for n, s in v["compile_s"].items()) + ")")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: "
                    "torch's own choice)")
    ap.add_argument("--json", default=None, help="also write the report here")
    ap.add_argument("--compile-times", action="store_true",
                    help="measure compile time in two fresh processes (cold / warm Inductor cache)")
    ap.add_argument("--compile-once", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.compile_once:
        print(json.dumps(compile_once(args)))
        return
    report = run(args)
    if args.compile_times:
        report["compile_times"] = compile_times(args)
    print(table(report))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()

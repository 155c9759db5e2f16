"""Weight-only int4 decoding on the CPU: tokens/s against float32, bfloat16 and int8, paired.

Not a test: a script that prints tables (and optionally writes JSON).

1. **Speed.**  GPT-2 small (preset ``gpt2``, random weights: speed does not depend on their values)
   in four precisions made from the *same* float32 tensors: ``float32``, ``bfloat16``
   (``.to(torch.bfloat16)``), ``int8`` (:func:`zoo.run.precision.quantize_int8`) and ``int4``
   (:func:`zoo.run.precision.quantize_int4`).  Batch 1, a ``--prompt``-token prompt and ``--new``
   greedy tokens through ``model.generate``.  The four run in one process, in a fresh random order
   every round; the speed-up is the median over rounds of ``float32 time / variant time`` (paired:
   a busy neighbour slows both sides of a round alike).
2. **Quality.**  The held-out loss of the shipped ``poet_gpt`` (char-level Tang poems) on
   ``data/tang_heldout.txt`` in windows of its ``max_len``, in each precision (the same
   measurement as ``tests/perf/compare.py --sections precision``), int4 at group sizes 32 and 128.
3. **Without AVX-512** (``--no-avx512-check`` skips it): the same float32 / int4 pair in child
   processes with ``ATEN_CPU_CAPABILITY=avx2`` and ``=default``, which make PyTorch dispatch its
   own CPU kernels as on a CPU with AVX2 only, and with no vector unit it uses
   (``quantize_int4(..., allow_slow=True)``; float32's matmul is oneDNN/MKL's, which picks its
   instructions itself, so the float32 side is unchanged).

    python benchmarks/int4_decode.py                        # all three, 2 threads
    python benchmarks/int4_decode.py --rounds 3 --new 32 --json int4.json
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import zoo
from zoo.run.precision import int8_supported, quantize_int4, quantize_int8

ROOT = Path(__file__).resolve().parents[1]


CLOCK = time.perf_counter  # --clock cpu: time.process_time (this process's CPU time)


def paired_times(fns: dict, rounds: int, warmup: int = 1) -> dict[str, list[float]]:
    """Seconds per call of each function, ``rounds`` rounds, a fresh random order per round."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {k: [] for k in fns}
    rng = random.Random(rounds)
    for _ in range(rounds):
        for k in rng.sample(list(fns), len(fns)):
            t0 = CLOCK()
            fns[k]()
            times[k].append(CLOCK() - t0)
    return times


def ratio(base: list[float], other: list[float]) -> float:
    """Median over rounds of ``base[i] / other[i]``: the speed-up of ``other``."""
    return statistics.median(b / o for b, o in zip(base, other))


def variants_of(model, group_size: int, precisions, allow_slow: bool = False) -> dict:
    out = {}
    for p in precisions:
        if p == "float32":
            out[p] = model
        elif p == "bfloat16":
            out[p] = copy.deepcopy(model).to(torch.bfloat16)
        elif p == "int8" and int8_supported():
            out[p] = quantize_int8(copy.deepcopy(model))
        elif p.startswith("int4"):
            g = int(p.partition("/g")[2] or group_size)
            out[p] = quantize_int4(copy.deepcopy(model), g, allow_slow=allow_slow)
    return out


def speed(args, precisions) -> dict:
    """Paired tokens/s of GPT-2 small in each precision; greedy agreement with float32."""
    model = zoo.build(args.preset, seed=0).eval()
    variants = variants_of(model, args.group_size, precisions, allow_slow=args.allow_slow)
    prompt = torch.randint(0, model.spec.vocab_size, (1, args.prompt),
                           generator=torch.Generator().manual_seed(1))
    fns = {k: (lambda m=m: m.generate(prompt, max_new_tokens=args.new, do_sample=False))
           for k, m in variants.items()}
    with torch.inference_mode():
        outs = {k: fn() for k, fn in fns.items()}
        times = paired_times(fns, args.rounds, warmup=0)  # the call above warmed each up
    base = next(iter(variants))
    rows = {}
    for k in fns:
        rows[k] = {"tokens_per_s": args.new / statistics.median(times[k]),
                   "speedup": ratio(times[base], times[k]),
                   "same_tokens": float((outs[k][0, args.prompt:] == outs[base][0, args.prompt:])
                                        .float().mean()),
                   "times_s": times[k]}
    return rows


def heldout_losses(windows: int) -> dict:
    """Mean next-token cross-entropy of poet_gpt on held-out poems, per precision."""
    model = zoo.load("poet_gpt").eval()
    tok = model.tokenizer
    ids = torch.tensor(tok.encode((ROOT / "data" / "tang_heldout.txt").read_text("utf-8")))
    W = model.spec.max_len
    n = min(windows, (ids.numel() - 1) // W)
    x = ids[: n * W].view(n, W)  # (n, W) inputs
    y = ids[1: n * W + 1].view(n, W)  # (n, W) next tokens
    out = {"tokens": n * W, "window": W, "loss": {}, "groups": {}, "top1_same": {}}
    ref = None
    for k, m in variants_of(model, 128, ("float32", "bfloat16", "int8", "int4/g128",
                                         "int4/g32")).items():
        with torch.inference_mode():
            logits = m(x).float()  # (n, W, V)
        out["loss"][k] = F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
        top1 = logits.argmax(-1)  # (n, W)
        ref = top1 if ref is None else ref
        out["top1_same"][k] = (top1 == ref).float().mean().item()
        if hasattr(m, "int4_groups"):
            out["groups"][k] = m.int4_groups
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpt2")
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--group-size", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--windows", type=int, default=64, help="held-out windows for the loss table")
    ap.add_argument("--no-quality", action="store_true")
    ap.add_argument("--no-avx512-check", action="store_true")
    ap.add_argument("--only", default=None, help=argparse.SUPPRESS)  # child: comma-separated precisions
    ap.add_argument("--allow-slow", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: time.perf_counter; cpu: this process's CPU time (time.process_time), "
                         "steadier on a machine others load, and exact at --threads 1")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    if args.only:  # the child process of the AVX2 check: print JSON rows, nothing else
        print(json.dumps(speed(args, args.only.split(","))))
        return
    load0 = os.getloadavg()[0]
    result = {"torch": torch.__version__, "capability": torch.backends.cpu.get_cpu_capability(),
              "threads": args.threads, "preset": args.preset, "prompt": args.prompt,
              "new": args.new, "rounds": args.rounds, "group_size": args.group_size,
              "clock": args.clock}
    print(f"{args.preset}, batch 1, {args.prompt}-token prompt + {args.new} greedy tokens, "
          f"{args.rounds} paired rounds, {args.threads} threads, {args.clock} clock, kernels: "
          f"{result['capability']}, torch {torch.__version__}, load {load0:.2f}", flush=True)
    result["speed"] = rows = speed(args, ("float32", "bfloat16", "int8", "int4"))
    print("| weights | tok/s | speed-up over float32 (paired median) | greedy tokens = float32's |")
    print("|---|---:|---:|---:|")
    for k, r in rows.items():
        print(f"| {k} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | {100 * r['same_tokens']:.0f}% |")
    if not args.no_quality:
        q = result["quality"] = heldout_losses(args.windows)
        print(f"\nheld-out loss of poet_gpt ({q['tokens']:,} tokens of data/tang_heldout.txt, "
              f"windows of {q['window']}); int4 layers per group size: {q['groups']}")
        print("| weights | held-out loss (nats/char) | vs float32 | top-1 next char = float32's |\n"
              "|---|---:|---:|---:|")
        for k, v in q["loss"].items():
            print(f"| {k} | {v:.4f} | {v - q['loss']['float32']:+.4f} | "
                  f"{100 * q['top1_same'][k]:.1f}% |")
    if not args.no_avx512_check:
        for cap, new in (("avx2", max(8, args.new // 2)), ("default", 4)):
            env = {**os.environ, "ATEN_CPU_CAPABILITY": cap}
            cmd = [sys.executable, __file__, "--only", "float32,int4", "--allow-slow", "--preset",
                   args.preset, "--prompt", str(args.prompt), "--new", str(new),
                   "--rounds", str(max(2, args.rounds // 2)), "--threads", str(args.threads),
                   "--group-size", str(args.group_size), "--clock", args.clock]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            child = result[cap] = json.loads(done.stdout.strip().splitlines()[-1])
            print(f"\nATEN_CPU_CAPABILITY={cap} ({new} tokens): "
                  + ", ".join(f"{k} {r['tokens_per_s']:.1f} tok/s ({r['speedup']:.2f}x)"
                              for k, r in child.items()))
    result["load"] = [load0, os.getloadavg()[0]]
    print(f"\nload average before / after: {load0:.2f} / {result['load'][1]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

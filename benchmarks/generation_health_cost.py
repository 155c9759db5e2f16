"""Cost of the non-finite-logits check in generation (issue 22, goal 4), paired.

Greedy decoding of gpt_tiny (and a GPT-2-small-shaped model with ``--gpt2``) with the check
(:func:`zoo.guard.health.finite_steps`) and without it (the coroutine unwrapped), alternating sides in
random order each round on one thread; the median of per-round time ratios is printed.

    python benchmarks/generation_health_cost.py [--rounds 15] [--new 64] [--gpt2]
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

import torch

import zoo
import zoo.run.generate as gen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--gpt2", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model = zoo.build("gpt2" if a.gpt2 else "gpt_tiny", seed=0).eval()
    prompt = torch.randint(0, 256, (1, 16))
    checked = gen.finite_steps

    def run(on: bool) -> float:
        gen.finite_steps = checked if on else (lambda steps, model, where="generate": steps)
        t = time.perf_counter()
        gen.generate(model, prompt, a.new)
        return time.perf_counter() - t

    run(True), run(False)  # warm up
    ratios = []
    for _ in range(a.rounds):
        sides = [True, False]
        random.shuffle(sides)
        t = {s: run(s) for s in sides}
        ratios.append(t[True] / t[False])
    gen.finite_steps = checked
    print(f"{'gpt2' if a.gpt2 else 'gpt_tiny'}: greedy, prompt 16, {a.new} new tokens, {a.rounds} "
          f"rounds: checked / unchecked = {statistics.median(ratios):.4f} (median), quartiles "
          f"{statistics.quantiles(ratios, n=4)[0]:.4f}-{statistics.quantiles(ratios, n=4)[2]:.4f}")


if __name__ == "__main__":
    main()

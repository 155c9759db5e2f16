"""Zero cost when unused: a model's forward after hooked calls is as fast as one never hooked (issue 26).

zoo's hook points are installed only for the duration of a hooked call (``run_with_hooks``,
``run_with_cache``, ``model.hooks()``, ``generate(fwd_hooks=..., return_cache=True)``) and removed
afterwards, so a model is never slower for having them.  This measures it: for every preset (the
large ones shrunk to two small layers, as tests/helpers.shrunk does), two copies with the same
weights, *fresh* and *used* (the latter went through ``run_with_cache`` and ``run_with_hooks``
first) and a third untouched *control* copy whose ratio to *fresh* is the machine's noise floor, time the fastest of a few forwards each, the two in random order, one thread; a preset's ratio is the
median over rounds of ``used / fresh`` in the same round.  The whole-commit comparison (the model
code before and after issue 26) is benchmarks/preset_speed.py's job::

    OMP_NUM_THREADS=1 python benchmarks/hooks_zero_cost.py --rounds 15
    python benchmarks/preset_speed.py --base 59688f1~1 --commits 59688f1
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import zoo  # noqa: E402
from helpers import shrunk  # noqa: E402

BIG = 2_000_000  # parameters above which a preset is shrunk (a CPU shared by several people)


def model_of(preset: str):
    spec = zoo.spec(preset)
    try:
        m = zoo.build(preset, seed=0, init=True, budget=BIG * 8)
        if m.num_parameters() > BIG:
            raise ValueError
    except Exception:  # too large for a CPU benchmark: the same components, small sizes
        m = zoo.build(shrunk(preset), seed=0, budget=float("inf"))
    return m.eval(), spec


def inputs(model, B: int, T: int):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.spec.vocab_size, (B, min(T, model.spec.max_len)), generator=g)
    return (ids, ids) if model.spec.arch == "encoder_decoder" else (ids,)


def once(model, args) -> float:
    t = time.perf_counter()
    model(*args)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default=",".join(zoo.list_presets()))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--iters", type=int, default=7, help="forwards per side per round (fastest)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rng = random.Random(0)
    rows = []
    for preset in a.presets.split(","):
        built, _ = model_of(preset)
        # both sides are copies made the same way (a copy's weights sit together in memory, which
        # alone can change the speed of a small model), and only one goes through hooked calls
        fresh, used, control = copy.deepcopy(built), copy.deepcopy(built), copy.deepcopy(built)
        del built
        args = inputs(fresh, a.batch, a.seq)
        with torch.no_grad():
            used.run_with_cache(*args)
            used.run_with_hooks(*args, fwd_hooks=[("*hook_resid_post", lambda x, h: x)])
            for _ in range(3):  # warm-up
                once(fresh, args), once(used, args), once(control, args)
            ratios, noise, base = [], [], []
            for _ in range(a.rounds):
                sides = [("fresh", fresh), ("used", used), ("control", control)]
                rng.shuffle(sides)
                # the fastest of a few forwards: other processes on a shared machine only add time
                t = {k: min(once(m, args) for _ in range(a.iters)) for k, m in sides}
                ratios.append(t["used"] / t["fresh"])
                noise.append(t["control"] / t["fresh"])  # A/A: two untouched copies, the noise floor
                base.append(t["fresh"])
        row = {"preset": preset, "ms": round(1e3 * statistics.median(base), 3),
               "ratio": round(statistics.median(ratios), 4), "control": round(statistics.median(noise), 4),
               "params": fresh.num_parameters()}
        rows.append(row)
        print(f"{preset:16s} {row['params']:>11,d} params  {row['ms']:8.2f} ms  used/fresh {row['ratio']:.4f}"
              f"  control/fresh {row['control']:.4f}", flush=True)
    dev = sorted(abs(r["ratio"] - 1) for r in rows)
    ctl = sorted(abs(r["control"] - 1) for r in rows)
    print(f"|used/fresh - 1|: median {statistics.median(dev):.2%}, largest {dev[-1]:.2%}; "
          f"untouched control |control/fresh - 1|: median {statistics.median(ctl):.2%}, largest {ctl[-1]:.2%} "
          f"({len(rows)} presets)")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Throughput of experiment trials (issue 21, item 8).

(a) A trial against the same training run started alone with ``zoo train``: the same spec, data
    (the Tang poems, character LM), batch, block and seed, one intra-op thread each.  Compared by the
    trainer's own steady-state tokens/s (``metrics.jsonl``, first log window dropped: warm-up), and
    end to end (process start to exit).  Target: a trial >= 90% of ``zoo train``.
(b) N trials on N cores against one trial alone: the summed steady-state tokens/s of N concurrent
    trials (``--jobs N --threads 1``) over one trial's.  Target: >= 0.8 N.

    python benchmarks/experiment_throughput.py [--steps 300] [--jobs N] [--rounds 3]

The three measurements alternate, round after round, and the ratios are medians over rounds: a
change in the machine's load during the run then hits all three alike.

Prints a table and the two ratios.  On a machine shared with other work the ratios measure the
sharing too: run it on an idle machine for the numbers that describe zoo.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"num_layers": 2, "d_model": 64, "num_heads": 4, "d_ff": 128, "max_len": 64}
TRAIN = {"batch_size": 16, "block_size": 64, "lr": 3e-3, "warmup": 20, "log_every": 10}


def steady_tps(run_dir: Path) -> float:
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    tps = [r["tokens_per_s"] for r in recs if "tokens_per_s" in r][1:]  # drop the first window
    return sum(tps) / len(tps)


def env1() -> dict:
    e = dict(os.environ)
    e.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    return e


def zoo_train(out: Path, steps: int) -> tuple[float, float]:
    cmd = [sys.executable, "-m", "zoo.cli", "train", "gpt_tiny", "--data", str(ROOT / "data" / "poems.txt"),
           "--objective", "clm", "--steps", str(steps), "--out", str(out), "--fit-vocab", "--no-progress",
           "--eval-every", str(10 * steps), "--save-every", str(10 * steps), "--seed", "0"]
    for k, v in SPEC.items():
        cmd += ["--set", f"{k}={v}"]
    for k, v in TRAIN.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env1(), stdout=subprocess.DEVNULL)
    return steady_tps(out), time.perf_counter() - t0


def experiment(out: Path, steps: int, seeds: int, jobs: int) -> tuple[list[float], float]:
    exp = {"name": "throughput", "base": {"preset": "gpt_tiny", **SPEC},
           "variants": [{"name": "a", "set": {}}], "seeds": seeds, "task": "poems",
           "train": {**TRAIN, "eval_every": 10 * steps, "save_every": 10 * steps},
           "budget": {"steps": steps}, "metrics": ["train_loss"]}
    path = out.parent / f"{out.name}.yaml"
    import yaml

    path.write_text(yaml.safe_dump(exp), encoding="utf-8")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "zoo.cli", "experiment", "run", str(path), "--out", str(out),
                    "--jobs", str(jobs), "--threads", "1"], check=True, env=env1(), stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    return [steady_tps(d) for d in sorted((out / "trials" / "a").iterdir())], wall


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds (alone, trial, N trials); the ratios are medians over rounds")
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="zoo-bench-"))
    rows = []
    try:
        for r in range(args.rounds):  # alternate, so that a change in the machine's load hits all three
            alone_tps, alone_wall = zoo_train(tmp / f"alone{r}", args.steps)
            (trial_tps,), trial_wall = experiment(tmp / f"one{r}", args.steps, 1, 1)
            many_tps, many_wall = experiment(tmp / f"many{r}", args.steps, args.jobs, args.jobs)
            rows.append((alone_tps, trial_tps, many_tps, alone_wall, trial_wall, many_wall))
            print(f"round {r + 1}: zoo train alone {alone_tps:8.0f} tokens/s (wall {alone_wall:5.1f} s)   "
                  f"one trial {trial_tps:8.0f} (wall {trial_wall:5.1f} s, with process start, plan, "
                  f"evaluation and report)   {args.jobs} trials {sum(many_tps):8.0f} summed "
                  f"({', '.join(f'{x:.0f}' for x in many_tps)}; wall {many_wall:5.1f} s)", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    a_each = [t / a for a, t, *_ in rows]
    b_each = [sum(m) / t for _, t, m, *_ in rows]
    a, b = statistics.median(a_each), statistics.median(b_each)
    print(f"(a) trial / zoo train   = {a:.3f} median of {', '.join(f'{x:.3f}' for x in a_each)}"
          f"   (target >= 0.90)")
    print(f"(b) {args.jobs} trials / one trial = {b:.2f} median of {', '.join(f'{x:.2f}' for x in b_each)}"
          f"   (target >= {0.8 * args.jobs:.2f} = 0.8 x {args.jobs})")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores")
    return {"trial_over_alone": a, "n_over_one": b, "jobs": args.jobs, "rounds": args.rounds}


if __name__ == "__main__":
    main()

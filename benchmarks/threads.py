"""What a second thread buys: ``zoo train`` and ``zoo bench --task generate`` at ``--threads 1`` and
``--threads 2``, paired and alternating (issue 36, goal 4).

Not a test: a script that prints a table.  Each round runs every command once with 1 thread and once
with 2, as a user would (a fresh ``python -m zoo.cli`` process each time), the order of the two
alternating from round to round; it reads the speed the command itself reports (training: the
median ``step_s`` of the logged steps after the first log line; decoding: ``tokens_per_s`` of
``zoo bench --json``) and the 1-minute load average before each run.  The table gives the median of
each, the median of the rounds' paired ratios (2 threads / 1 thread, > 1: the second thread helps)
and the load seen.

    python benchmarks/threads.py [--rounds 5] [--checkpoint DIR ...]

``--checkpoint`` adds a decoding row for a converted checkpoint (e.g. SmolLM2-135M from
``zoo convert SmolLM2-135M-Instruct.Q4_1.gguf DIR``); ``--q4`` a second one decoding it with
``--q4`` (the fused step of :mod:`zoo.run.qstep`, 128 new tokens).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def zoo(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    r = subprocess.run([sys.executable, "-m", "zoo.cli", *args], capture_output=True, text=True,
                       cwd=ROOT, env=env, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"zoo {' '.join(args)} failed: {r.stderr[-500:]}")
    return r.stdout


def train_speed(threads: int, out: Path, steps: int) -> float:
    """Training steps per second of ``zoo train gpt_tiny`` (median of the logged steps)."""
    zoo("train", "gpt_tiny", "--data", "data/poems.txt", "--fit-vocab", "--steps", str(steps),
        "--batch-size", "8", "--block-size", "64", "--log-every", "2", "--eval-every", "100000",
        "--save-every", "100000", "--no-progress", "--overwrite", "--out", str(out),
        "--threads", str(threads))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps_s = [r["step_s"] for r in rows if "step_s" in r][1:]
    return 1.0 / statistics.median(steps_s)


def decode_speed(threads: int, source: str, new_tokens: int, *extra: str) -> float:
    """Tokens per second of ``zoo bench SOURCE --task generate`` (batch 1, 32-token prompt)."""
    report = json.loads(zoo("bench", source, "--task", "generate", "--prompt-len", "32", "--new-tokens",
                            str(new_tokens), "--repeats", "3", "--warmup", "1", "--json",
                            "--threads", str(threads), *extra))
    return report["results"][0]["tokens_per_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=13)
    ap.add_argument("--checkpoint", action="append", default=[])
    ap.add_argument("--q4", action="store_true", help="also decode each checkpoint with --q4 (the fused step)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="zoo-threads-"))
    rows = {"zoo train gpt_tiny (steps/s)": lambda t: train_speed(t, tmp / f"run{t}", args.steps),
            "zoo bench gpt_tiny --task generate (tok/s)": lambda t: decode_speed(t, "gpt_tiny", 64)}
    for c in args.checkpoint:
        rows[f"zoo bench {Path(c).name} --task generate (tok/s)"] = lambda t, c=c: decode_speed(t, c, 32)
        if args.q4:
            rows[f"zoo bench {Path(c).name} --task generate --q4 (tok/s)"] = \
                lambda t, c=c: decode_speed(t, c, 128, "--q4")
    speed = {name: {1: [], 2: []} for name in rows}
    load = {name: [] for name in rows}
    for r in range(args.rounds):
        for name, run in rows.items():
            for t in ((1, 2) if r % 2 == 0 else (2, 1)):
                load[name].append(os.getloadavg()[0])
                speed[name][t].append(run(t))
            print(f"round {r + 1}: {name}: 1 thread {speed[name][1][-1]:.2f}, 2 threads "
                  f"{speed[name][2][-1]:.2f}, load {load[name][-1]:.1f}", file=sys.stderr, flush=True)
    print(f"| command | 1 thread | 2 threads | 2 / 1 (median of {args.rounds} paired rounds) | "
          "load average (1 min) |")
    print("|---|---|---|---|---|")
    for name in rows:
        one, two = speed[name][1], speed[name][2]
        ratio = statistics.median(b / a for a, b in zip(one, two))
        print(f"| {name} | {statistics.median(one):.2f} | {statistics.median(two):.2f} | "
              f"**{ratio:.2f}x** (range {min(b / a for a, b in zip(one, two)):.2f}-"
              f"{max(b / a for a, b in zip(one, two)):.2f}) | {min(load[name]):.1f}-{max(load[name]):.1f} |")


if __name__ == "__main__":
    main()

"""What integrity costs on GPT-2 small (the ``gpt2`` preset, random weights): ``zoo.save`` with its
digest, ``zoo.load`` with and without ``verify=True``, and ``zoo check`` (in process and as the CLI).

    python scripts/check_cost.py [--rounds 3]

Each round times every step in one process, in a rotating order; medians are printed.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import zoo
import zoo.io.loading
from zoo.io.checkpoint import dedupe, tensor_digest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = zoo.build("gpt2", seed=0)
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = zoo.save(model, Path(tmp) / "gpt2")
        steps = {
            "digest of the tensors in memory (part of zoo.save)":
                lambda: tensor_digest(dedupe(model.state_dict())[0]),
            "zoo.save (writes the digest)": lambda: zoo.save(model, Path(tmp) / "gpt2"),
            "zoo.load": lambda: zoo.load(path),
            "zoo.load(verify=True)": lambda: zoo.load(path, verify=True),
            "zoo.io.loading.check (every load check + digest)": lambda: zoo.io.loading.check(path),
            "zoo.io.loading.check(digest=False)": lambda: zoo.io.loading.check(path, digest=False),
            "`zoo check PATH` (CLI, new process)": lambda: subprocess.run(
                [sys.executable, "-m", "zoo.cli", "check", str(path)], check=True,
                capture_output=True),
        }
        names = list(steps)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                t0 = time.perf_counter()
                steps[name]()
                times.setdefault(name, []).append(time.perf_counter() - t0)
        size = path.stat().st_size
    print(f"GPT-2 small ({sum(p.numel() for p in model.parameters()):,} parameters, "
          f"{size / 1e6:.0f} MB file), median of {args.rounds} rounds, 1 torch thread:")
    for name in names:
        print(f"  {name:<52} {statistics.median(times[name]):6.2f} s")


if __name__ == "__main__":
    main()

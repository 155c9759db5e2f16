"""Paired before/after forward time of the shipped presets: does a change slow models that do not use it?

Two clean checkouts are made with ``git worktree`` (nothing in the working tree is touched): *base* at
``--base``, and *new* at ``--new`` (default ``HEAD``).  ``--commits C ...`` makes *new* the base plus
only those commits' patches (``--only PATH ...``: plus only the changes to those paths between the two
commits), so one person's change is measured without the other commits that landed in between.  Each checkout runs in its own subprocess with
``PYTHONPATH`` pointing at it (the ``zoo.plugins`` / ``zoo.checkpoints`` / ``zoo.ui`` packages are
mapped by symlinks inside the temporary checkout, as the installed package maps them).

Timing: ``--rounds`` rounds; in each round both sides run once, in a random order, each in a fresh
process that builds every preset (seed 0, eval, one thread) and takes the median of ``--iters``
forward passes after warm-up.  A preset's ratio is the median over rounds of ``new / base`` within
the same round, so drifts of a shared machine hit both sides alike.

    python benchmarks/preset_speed.py --base 5104ac7~1 --commits 5104ac7 a72cb0b afbb7b6
    python benchmarks/preset_speed.py --base HEAD~3 --presets gpt_tiny,llama_tiny --rounds 9
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PRESETS = "gpt_tiny,bert_tiny,t5_tiny,llama_tiny,prefix_lm_tiny"
LINKS = {"zoo/plugins": "../plugins", "zoo/checkpoints": "../checkpoints", "zoo/ui": "../ui"}


def child(presets: list[str], iters: int, batch: int, seq: int) -> dict:
    """In the checkout's own process: median seconds of one forward pass per preset."""
    import time

    import torch

    import zoo

    torch.set_num_threads(1)
    out = {}
    for name in presets:
        model = zoo.build(name, seed=0).eval()
        spec = model.spec
        T = min(seq, spec.max_len)
        ids = torch.randint(0, spec.vocab_size, (batch, T), generator=torch.Generator().manual_seed(0))
        if spec.arch == "encoder_decoder":
            def fwd():
                return model(ids, ids)
        else:
            def fwd():
                return model(ids)
        times = []
        with torch.inference_mode():
            for _ in range(3):
                fwd()
            for _ in range(iters):
                t0 = time.perf_counter()
                fwd()
                times.append(time.perf_counter() - t0)
        out[name] = statistics.median(times)
    return out


def checkout(repo: Path, commit: str, where: Path, base: str | None = None, only: list[str] | None = None,
             commits: list[str] | None = None) -> Path:
    """A detached worktree of ``commit``, or of ``base`` plus ``only``'s changes up to ``commit``, or
    of ``base`` plus the patches of ``commits``."""
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(where), base or commit],
                   check=True, capture_output=True)
    for c in commits or ():
        patch = subprocess.run(["git", "-C", str(repo), "show", "--binary", "--format=", c],
                               check=True, capture_output=True).stdout
        subprocess.run(["git", "-C", str(where), "apply", "--binary", "-"], input=patch, check=True)
    if only:
        patch = subprocess.run(["git", "-C", str(repo), "diff", "--binary", base, commit, "--", *only],
                               check=True, capture_output=True).stdout
        if patch:
            subprocess.run(["git", "-C", str(where), "apply", "--binary", "-"], input=patch, check=True)
    for link, target in LINKS.items():
        if not (where / link).exists():
            os.symlink(target, where / link)
    return where


def run_side(tree: Path, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "ZOO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    code = (f"import sys, json; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
            f"import preset_speed as p; "
            f"print(json.dumps(p.child({args.presets.split(',')!r}, {args.iters}, {args.batch}, {args.seq})))")
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"{tree}: {res.stderr[-2000:]}")
    got = json.loads(res.stdout.strip().splitlines()[-1])
    return got


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="commit before the change")
    ap.add_argument("--new", default="HEAD", help="commit with the change (default HEAD)")
    ap.add_argument("--only", nargs="*", help="apply only these paths' changes from base to new")
    ap.add_argument("--commits", nargs="*", help="new = base plus only these commits' patches")
    ap.add_argument("--presets", default=PRESETS)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    repo = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                               check=True).stdout.strip())
    tmp = Path(tempfile.mkdtemp(prefix="zoo_speed_"))
    trees = {}
    try:
        trees["base"] = checkout(repo, args.base, tmp / "base")
        trees["new"] = checkout(repo, args.new, tmp / "new", base=args.base if args.only or args.commits else None,
                                only=args.only, commits=args.commits)
        rounds = []
        rng = random.Random(0)
        for r in range(args.rounds):
            order = ["base", "new"]
            rng.shuffle(order)
            got = {side: run_side(trees[side], args) for side in order}
            rounds.append(got)
            print(f"round {r + 1}/{args.rounds}: " + ", ".join(
                f"{p} {got['new'][p] / got['base'][p]:.3f}" for p in got["base"]), flush=True)
        rows = []
        for p in args.presets.split(","):
            ratios = sorted(rd["new"][p] / rd["base"][p] for rd in rounds)
            rows.append({"preset": p, "base_ms": 1e3 * statistics.median(rd["base"][p] for rd in rounds),
                         "new_ms": 1e3 * statistics.median(rd["new"][p] for rd in rounds),
                         "ratio": statistics.median(ratios), "min": ratios[0], "max": ratios[-1]})
        print(f"\nforward, batch {args.batch} x {args.seq} tokens, 1 thread, {args.rounds} paired rounds "
              f"of {args.iters} passes (median)")
        print(f"| preset | base ms | new ms | new/base (median) | range |\n|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['preset']} | {r['base_ms']:.2f} | {r['new_ms']:.2f} | {r['ratio']:.3f} | "
                  f"{r['min']:.3f}-{r['max']:.3f} |")
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    finally:
        for side in trees.values():
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(side)],
                           capture_output=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


if __name__ == "__main__":
    main()

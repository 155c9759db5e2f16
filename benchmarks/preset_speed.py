"""Paired before/after forward time of the shipped presets: does a change slow models that do not use it?

Two clean checkouts are made with ``git worktree`` (nothing in the working tree is touched): *base* at
``--base``, and *new* at ``--new`` (default ``HEAD``).  ``--commits C ...`` makes *new* the base plus
only those commits' patches (``--only PATH ...``: plus only the changes to those paths between the two
commits), so one person's change is measured without the other commits that landed in between.  Each checkout runs in its own subprocess with
``PYTHONPATH`` pointing at it (the ``zoo.plugins`` / ``zoo.checkpoints`` / ``zoo.ui`` packages are
mapped by symlinks inside the temporary checkout, as the installed package maps them).

Timing: both sides start once, as two long-lived processes (one thread each) that build every
preset (seed 0, eval) and then wait for requests.  For each preset, ``--rounds`` rounds; in each
round both sides run ``--iters`` forward passes, in a random order, and report their fastest.  A
preset's ratio is the median over rounds of ``new / base`` within the same round: the two sides
alternate every few hundred milliseconds, so the load of a shared machine hits both alike.

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


def serve(presets: list[str], batch: int, seq: int) -> None:
    """In the checkout's own process: build the presets, then answer ``PRESET ITERS`` lines with the
    fastest of ITERS forward passes in seconds (after two warm-up passes): the minimum is the pass
    least disturbed by other work on the machine."""
    import time

    import torch

    import zoo

    torch.set_num_threads(1)
    fwds = {}
    for name in presets:
        model = zoo.build(name, seed=0).eval()
        spec = model.spec
        ids = torch.randint(0, spec.vocab_size, (batch, min(seq, spec.max_len)),
                            generator=torch.Generator().manual_seed(0))
        enc_dec = spec.arch == "encoder_decoder"
        fwds[name] = (lambda m=model, x=ids, ed=enc_dec: m(x, x) if ed else m(x))
    print("ready", flush=True)
    for line in sys.stdin:
        name, iters = line.split()
        times = []
        with torch.inference_mode():
            for i in range(int(iters) + 2):
                t0 = time.perf_counter()
                fwds[name]()
                if i >= 2:
                    times.append(time.perf_counter() - t0)
        print(min(times), flush=True)


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


def start(tree: Path, args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "ZOO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); "
            f"import preset_speed as p; p.serve({args.presets.split(',')!r}, {args.batch}, {args.seq})")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=tree, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"{tree}: the benchmark process did not start")
    return proc


def ask(proc: subprocess.Popen, preset: str, iters: int) -> float:
    proc.stdin.write(f"{preset} {iters}\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="commit before the change")
    ap.add_argument("--new", default="HEAD", help="commit with the change (default HEAD)")
    ap.add_argument("--only", nargs="*", help="apply only these paths' changes from base to new")
    ap.add_argument("--commits", nargs="*", help="new = base plus only these commits' patches")
    ap.add_argument("--presets", default=PRESETS)
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    repo = Path(subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                               check=True).stdout.strip())
    tmp = Path(tempfile.mkdtemp(prefix="zoo_speed_"))
    trees, procs = {}, {}
    try:
        trees["base"] = checkout(repo, args.base, tmp / "base")
        trees["new"] = checkout(repo, args.new, tmp / "new", base=args.base if args.only or args.commits else None,
                                only=args.only, commits=args.commits)
        for side, tree in trees.items():
            procs[side] = start(tree, args)
        rng = random.Random(0)
        rows = []
        for p in args.presets.split(","):
            got = {"base": [], "new": []}
            for _ in range(args.rounds):
                order = ["base", "new"]
                rng.shuffle(order)
                for side in order:
                    got[side].append(ask(procs[side], p, args.iters))
            ratios = sorted(n / b for n, b in zip(got["new"], got["base"]))
            rows.append({"preset": p, "base_ms": 1e3 * statistics.median(got["base"]),
                         "new_ms": 1e3 * statistics.median(got["new"]),
                         "ratio": statistics.median(ratios), "q1": ratios[len(ratios) // 4],
                         "q3": ratios[(3 * len(ratios)) // 4]})
            print(f"{p}: {rows[-1]['ratio']:.3f}", flush=True)
        for proc in procs.values():
            proc.stdin.close()
            proc.wait()
        print(f"\nforward, batch {args.batch} x {args.seq} tokens, 1 thread, {args.rounds} paired rounds "
              f"of {args.iters} passes (fastest of each)")
        print("| preset | base ms | new ms | new/base (median) | quartiles |\n|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['preset']} | {r['base_ms']:.2f} | {r['new_ms']:.2f} | {r['ratio']:.3f} | "
                  f"{r['q1']:.3f}-{r['q3']:.3f} |")
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        for side in (tmp / "base", tmp / "new"):  # also a checkout whose patches failed to apply
            if side.exists():
                subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(side)],
                               capture_output=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)


if __name__ == "__main__":
    main()

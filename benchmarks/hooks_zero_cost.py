"""Zero cost when unused: the engine with its hook points (taps) against the engine before them (issue 32).

Every hook point is an identity tap in the engine's own forward: a stack looks the hooked call's
taps up once per forward (``zoo.components.current_taps``), each block and attention layer reads
its own from its attention arguments, a norm or a feed-forward block calls ``taps_for(self)``, and
``if tap is not None`` guards each named place.  With no hooked call open in the process a lookup
is ``torch.compiler.is_compiling()`` and one global read.  This measures what that costs against a
source tree of the engine before the taps (``--base``; the tree to measure is ``--new``, default
this checkout):

- ``decode``   one KV-cached decoding step, eager, batch 1 (``model(tok, cache=...)``);
- ``forward``  one full forward, batch 4 x 64 tokens;
- ``train``    one training step (forward, backward, AdamW), batch 4 x 64;
- ``compiled`` one compiled decoding step (``model.generate(ids, 48, compile=True)``, after a first
  call compiled it; the call's time divided by its tokens);
- ``calls``    the Python calls one decoding step makes, counted (``sys.setprofile``): the ones the
  taps add, by function, and their cost estimated from each function's measured time per call;
- ``graph``    the FX graphs Dynamo hands Inductor for compiled decoding's prefill and step: the same
  in both engines node for node (ops, targets, arguments, shapes; not the names Dynamo gives values
  after Python variables): a compiled graph without active hooks does not change.

**Paired in one process.**  Timing two engines in two processes on a shared machine measures the
neighbours: here both engines are imported into *one* process, each tree copied under a package
name of its own (``zoo_base``, ``zoo_new``: ``zoo.`` rewritten in its imports), both models built
with the same seed, and every round times a block of base calls and a block of new calls back to
back, the order rotating; a round's ratio is new / base, a row's the median over the rounds,
printed with its quartiles, beside the ratio of the engines' 10th percentiles (noise on a shared
machine only ever adds time, so the fast tail is the least disturbed).  ``--control`` adds a second copy of the base engine (``zoo_base2``)
to the same rounds: its ratio to the base is what the machine's noise alone gives (an A/A test).
One thread.

    OMP_NUM_THREADS=1 python benchmarks/hooks_zero_cost.py --base /tmp/bench/base --control
    python benchmarks/hooks_zero_cost.py --base DIR --workloads graph

A tree is a folder holding ``zoo/`` with ``zoo/plugins`` and ``zoo/checkpoints`` inside (as
installed): ``git archive COMMIT | tar -x -C DIR`` and move ``plugins``, ``checkpoints`` and ``ui``
into ``DIR/zoo``.  ``--new`` defaults to this checkout arranged the same way.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the clock: this thread's CPU time, so that the time the scheduler gives the machine's other
#: processes is not counted (on a shared machine wall-clock rounds of the same engine differ by 20%)
clock = time.thread_time
WORKLOADS = ("graph", "calls", "decode", "forward", "train", "compiled")
#: rounds of each workload per ``--rounds`` (a round of gpt_tiny's decode is milliseconds, of
#: llama_tiny's train step a second); llama_tiny runs a third as many
ROUNDS = {"decode": 1.0, "forward": 0.2, "train": 0.1, "compiled": 0.1}
_IMPORT = [(re.compile(r"^(\s*)from zoo\.", re.M), r"\1from {p}."),
           (re.compile(r"^(\s*)from zoo import", re.M), r"\1from {p} import"),
           (re.compile(r"^(\s*)import zoo$", re.M), r"\1import {p} as zoo"),
           (re.compile(r"([\"'])zoo\."), r"\1{p}."),
           (re.compile(r"\bzoo\.plugins\b"), r"{p}.plugins")]


def as_package(tree: Path, name: str, dest: Path):
    """``tree``'s ``zoo`` package copied to ``dest/name`` with its imports of ``zoo`` renamed, and
    imported: two engines side by side in one process."""
    shutil.copytree(tree / "zoo", dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    for f in (dest / name).rglob("*.py"):
        s = f.read_text(encoding="utf-8")
        for pattern, repl in _IMPORT:
            s = pattern.sub(repl.replace("{p}", name), s)
        f.write_text(s, encoding="utf-8")
    if str(dest) not in sys.path:
        sys.path.insert(0, str(dest))
    return importlib.import_module(name)


def checkout_tree(dest: Path) -> Path:
    """This checkout arranged as an installed tree (``zoo/plugins``, ``zoo/checkpoints``)."""
    root = HERE.parent
    shutil.copytree(root / "zoo", dest / "zoo", ignore=shutil.ignore_patterns("__pycache__"))
    for src, name in (("plugins", "plugins"), ("checkpoints", "checkpoints")):
        shutil.copytree(root / src, dest / "zoo" / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.safetensors", "zoo-linear-attention"))
    return dest


def canonical(gm) -> str:
    """An FX graph as text without the names Dynamo takes from Python variables: each node's kind,
    target, arguments and shape, nodes numbered in order (the same ops on the same values read the
    same)."""
    import torch.fx

    index = {}
    lines = []
    for i, node in enumerate(gm.graph.nodes):
        index[node] = f"%{i}"
        args = torch.fx.node.map_arg((node.args, node.kwargs), lambda a: index[a])
        target = "" if node.op in ("placeholder", "output") else getattr(node.target, "__name__", node.target)
        meta = node.meta.get("example_value")
        shape = tuple(meta.shape) if hasattr(meta, "shape") else ""
        lines.append(f"{index[node]} = {node.op} {target} {args} {shape}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- one engine's calls
def make_call(pkg, workload: str, preset: str):
    """``(call, per)``: a function running one block of the workload on ``pkg``'s engine, and how
    many steps a block holds (its time is divided by that)."""
    import torch

    model = pkg.build(preset, seed=0).eval()
    V = model.spec.vocab_size
    g = torch.Generator().manual_seed(0)
    if workload == "decode":
        prompt = torch.randint(3, V, (1, 16), generator=g)
        state = {}

        def call():
            with torch.inference_mode():
                if state.get("n", 64) >= 64:  # a fresh cache every 64 steps
                    state["cache"], state["n"] = model.new_cache(16 + 64), 0
                    model(prompt, cache=state["cache"])
                for _ in range(8):
                    model(prompt[:, -1:], cache=state["cache"])
                state["n"] += 8
        return call, 8
    if workload == "forward":
        ids = torch.randint(3, V, (4, 64), generator=g)

        def call():
            with torch.inference_mode():
                model(ids)
        return call, 1
    if workload == "train":
        ids = torch.randint(3, V, (4, 64), generator=g)
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def call():
            logits = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), ids[:, 1:].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return call, 1
    if workload == "compiled":
        prompt = torch.randint(3, V, (1, 16), generator=g)

        def call():
            with torch.inference_mode():
                model.generate(prompt, 48, compile=True)
        call()  # compiles the prefill and the step
        return call, 48
    raise ValueError(workload)


def graphs_of(pkg, preset: str) -> dict[str, str]:
    """The canonical FX graphs of compiled decoding's prefill and step on ``pkg``'s engine."""
    import torch

    compiled = importlib.import_module(f"{pkg.__name__}.run.compiled")
    graphs: dict[str, str] = {}
    counting = compiled._counting_backend

    def recording(counts, name, options):
        inner = counting(counts, name, options)

        def backend(gm, example_inputs):
            graphs[name] = canonical(gm)
            return inner(gm, example_inputs)
        return backend

    compiled._counting_backend = recording
    try:
        model = pkg.build(preset, seed=0).eval()
        prompt = torch.randint(3, model.spec.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
        with torch.inference_mode():
            model.generate(prompt, 8, compile=True)
    finally:
        compiled._counting_backend = counting
    return graphs


def python_calls(pkgs: dict, preset: str) -> dict:
    """Per engine: the Python calls of one cached decoding step of ``preset``, ``{(file, function):
    count}``; and the step's CPU time (the fastest of many)."""
    import collections

    import torch

    out = {}
    for name, pkg in pkgs.items():
        model = pkg.build(preset, seed=0).eval()
        prompt = torch.randint(3, model.spec.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
        counts: collections.Counter = collections.Counter()

        def profile(frame, event, arg):
            if event == "call":
                counts[(Path(frame.f_code.co_filename).name, frame.f_code.co_name)] += 1

        with torch.inference_mode():
            cache = model.new_cache(16 + 2)
            model(prompt, cache=cache)
            model(prompt[:, -1:], cache=cache)
            sys.setprofile(profile)
            model(prompt[:, -1:], cache=cache)
            sys.setprofile(None)
        out[name] = counts
    return out


def per_call_ns(fn, n: int = 20000, reps: int = 15) -> float:
    """``fn()``'s CPU time per call in ns, the fastest of ``reps`` loops, less an empty call's."""
    def loop(f):
        best = float("inf")
        for _ in range(reps):
            t = clock()
            for _ in range(n):
                f()
            best = min(best, (clock() - t) / n)
        return best
    return 1e9 * (loop(fn) - loop(lambda: None))


def paired(calls: dict, per: int, rounds: int, blocks: int):
    """Per round: ``blocks`` timed calls of each engine back to back (the order rotating from round
    to round), the fastest block of each; returns every other engine's ratios to ``base`` over the
    rounds, the base's median seconds, and every other engine's ratio of 10th percentiles."""
    names = list(calls)
    ratios: dict[str, list[float]] = {n: [] for n in names if n != "base"}
    times: dict[str, list[float]] = {n: [] for n in names}
    base = []
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        if (r // len(names)) % 2:
            order.reverse()
        best = {}
        for name in order:
            fn = calls[name]
            ts = []
            for _ in range(blocks):
                t = clock()
                fn()
                ts.append(clock() - t)
            best[name] = min(ts) / per
        for n in ratios:
            ratios[n].append(best[n] / best["base"])
        for n in names:
            times[n].append(best[n])
        base.append(best["base"])
    # a second estimate: the ratio of the engines' 10th percentiles (noise only ever adds time)
    p10 = {n: statistics.quantiles(times[n], n=10)[0] for n in names}
    return ratios, statistics.median(base), {n: p10[n] / p10["base"] for n in ratios}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the tree before the taps")
    ap.add_argument("--new", help="the tree to measure (default: this checkout)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--presets", default="gpt_tiny,llama_tiny")
    ap.add_argument("--rounds", type=int, default=1500, help="rounds of gpt_tiny's decode (others: ROUNDS)")
    ap.add_argument("--blocks", type=int, default=1, help="timed blocks per engine per round (the fastest counts)")
    ap.add_argument("--control", action="store_true", help="also time a second copy of the base (A/A)")
    ap.add_argument("--json", help="write the rows here")
    a = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    os.environ["ZOO_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    tmp = Path(tempfile.mkdtemp(prefix="zoo_pair_"))
    new_tree = Path(a.new) if a.new else checkout_tree(tmp / "checkout")
    pkgs = {"base": as_package(Path(a.base), "zoo_base", tmp), "new": as_package(new_tree, "zoo_new", tmp)}
    if a.control:
        pkgs["control"] = as_package(Path(a.base), "zoo_base2", tmp)
    assert hasattr(pkgs["new"].components, "taps_for") and not hasattr(pkgs["base"].components, "taps_for"), \
        "--base must be a tree before the taps, --new one with them"
    la = os.getloadavg()
    print(f"load average {la[0]:.1f} {la[1]:.1f} {la[2]:.1f}, {os.cpu_count()} CPUs, 1 thread; "
          f"{a.rounds} rounds of {a.blocks} blocks per engine", flush=True)
    rows = []
    for workload in a.workloads.split(","):
        for preset in a.presets.split(","):
            if workload == "calls":
                counts = python_calls({k: p for k, p in pkgs.items() if k != "control"}, preset)
                extra = {k: counts["new"][k] - counts["base"].get(k, 0) for k in counts["new"]
                         if counts["new"][k] != counts["base"].get(k, 0)}
                c = pkgs["new"].components
                model = pkgs["new"].build(preset, seed=0).eval()
                norm = next(m for m in model.modules() if isinstance(m, c.Norm))
                import torch

                x = torch.randn(1, 1, model.spec.d_model)
                with torch.inference_mode():
                    cost = {"taps_for": per_call_ns(lambda: c.taps_for(norm)),
                            "kernel_taps": per_call_ns(c.kernel_taps), "current_taps": per_call_ns(c.current_taps),
                            "__call__": per_call_ns(lambda: norm(x)) - per_call_ns(lambda: c._module_call(norm, x)),
                            "is_dynamo_compiling": per_call_ns(c._tracing)}
                # is_dynamo_compiling runs inside the others (counted in their cost); a negative
                # difference of two timings is noise and counts as 0
                est = sum(n * max(cost.get(fn, 0.0), 0.0) for (_, fn), n in extra.items() if fn != "is_dynamo_compiling")
                row = {"workload": "calls", "preset": preset, "base": sum(counts["base"].values()),
                       "new": sum(counts["new"].values()), "extra": {f"{f}:{fn}": n for (f, fn), n in extra.items()},
                       "ns_per_call": {k: round(v, 1) for k, v in cost.items()}, "estimated_us": round(est / 1e3, 2)}
                rows.append(row)
                print(f"calls    {preset:11s} Python calls per decoding step: base {row['base']}, new {row['new']}; "
                      f"added {row['extra']}; at {row['ns_per_call']} ns each: ~{row['estimated_us']} us per step",
                      flush=True)
                continue
            if workload == "graph":
                g = {k: graphs_of(p, preset) for k, p in pkgs.items() if k != "control"}
                same = g["base"] == g["new"] and set(g["new"]) == {"prefill", "decode"}
                digest = {k: hashlib.sha256(v.encode()).hexdigest()[:12] for k, v in g["new"].items()}
                rows.append({"workload": "graph", "preset": preset, "same": same, "sha256": digest,
                             "nodes": {k: v.count("\n") + 1 for k, v in g["new"].items()}})
                print(f"graph    {preset:11s} prefill and decode graphs the same node for node: {same} "
                      f"({rows[-1]['nodes']} nodes)", flush=True)
                continue
            calls, per = {}, 1
            for k, p in pkgs.items():
                calls[k], per = make_call(p, workload, preset)
            for fn in calls.values():  # warm-up
                fn()
                fn()
            rounds = max(20, int(a.rounds * ROUNDS[workload] * (3 if "llama" not in preset else 1) / 3))
            ratios, base_s, p10 = paired(calls, per, rounds, a.blocks)
            row = {"workload": workload, "preset": preset, "base_ms": round(1e3 * base_s, 4), "rounds": rounds}
            line = f"{workload:8s} {preset:11s} base {row['base_ms']:8.3f} ms {rounds:5d} rounds"
            for name, rs in ratios.items():
                q = statistics.quantiles(rs, n=4)
                row[name] = {"ratio": round(statistics.median(rs), 4), "q1": round(q[0], 4), "q3": round(q[2], 4),
                             "p10_ratio": round(p10[name], 4)}
                line += (f"  {name}/base {row[name]['ratio']:.4f} ({row[name]['q1']:.4f}-{row[name]['q3']:.4f};"
                         f" p10 {row[name]['p10_ratio']:.4f})")
            rows.append(row)
            print(line, flush=True)
            if workload == "compiled":
                torch._dynamo.reset()
    la = os.getloadavg()
    print(f"load average at the end {la[0]:.1f} {la[1]:.1f} {la[2]:.1f}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

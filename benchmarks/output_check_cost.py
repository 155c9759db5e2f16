"""Cost of the component output check (issue 22, goal 6), paired.

**Forward.**  Each preset's forward with components checked against the same model with no
check, alternating sides in random order each round on one thread; printed: the median of per-round
time ratios (checked / unchecked) and its quartiles.  Two sets of checked components: ``all``
(``zoo.guard.outputs.install(model, "all")``, the worst case -- by default only third-party
components are checked, so a model of built-ins pays nothing) and ``attention`` (only the attention
kernels: what a model whose attention comes from a third-party plugin pays by default), and
``none`` as a control (both sides unchecked: how far from 1 the noise of the machine puts a ratio).  Two
workloads: a full forward (batch 1 x ``--len`` tokens) and greedy-style cached decoding (a 16-token
prompt, then ``--steps`` one-token forwards through the KV cache, where a forward is shortest and a
fixed per-call cost weighs most).  Times are the calling thread's CPU time
(``time.thread_time``; torch runs on that one thread), which a busy shared machine disturbs far
less than wall-clock time.

**Build.**  ``zoo.build`` with the probe of before this change (``probe_attention``), with the
build probe as shipped (``probe_components``: a no-op for built-in components) and with the probe
run over every component (``which="all"``), alternating; medians in milliseconds.

**sdpa.**  ``--sdpa``: the forward of ``gpt_tiny`` (and the decode loop) with the ``sdpa`` kernel
as shipped against the kernel without its NaN-propagation term (``out.add(q.sum(-1), alpha=0)``).

    python benchmarks/output_check_cost.py [--rounds 15] [--repeat 10] [--len 64] [--steps 32]
        [--presets gpt_tiny,llama_tiny,bert_tiny,t5_tiny] [--gpt2] [--build] [--sdpa]
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

import torch

import zoo
import zoo.model.build  # noqa: F401 - the module (``zoo.build`` the attribute is the function)
from zoo.model import assembly
from zoo.guard import outputs as output_contract

BUILD = sys.modules["zoo.build"]


def inputs(model, T: int) -> tuple:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, model.spec.vocab_size, (1, T), generator=g)
    return (ids, ids) if model.spec.arch == "encoder_decoder" else (ids,)


def forward_fn(model, T: int):
    args = inputs(model, T)
    return lambda: model(*args)


def decode_fn(model, steps: int):
    """16-token prompt then ``steps`` cached one-token forwards (decoders only)."""
    prompt, nxt = inputs(model, 16)[0], torch.tensor([[5]])

    def run():
        cache = model.new_cache(16 + steps)
        model(prompt, cache=cache)
        for _ in range(steps):
            model(nxt, cache=cache)
    return run


def check(model, which: str) -> list:
    """The check on ``which`` components (``all``, one family, or ``none``): installs the wrappers
    and returns them."""
    wrappers = output_contract.install(model, "off" if which == "none" else "all")
    for w in wrappers:
        if which != "all" and w.family != which:
            del w.module.__dict__[w.method]
    return output_contract.installed(model)


def paired(model, fn, rounds: int, which: str = "all", repeat: int = 10) -> tuple[float, float, float]:
    """Median and quartiles of (checked / unchecked) time over ``rounds`` alternating rounds, each
    side of a round ``repeat`` calls of ``fn``.  The wrappers are installed once and put in front
    of their methods or taken away between sides, keeping the shapes they have seen: the steady
    state (the check of each new shape is paid in the warm-up, once)."""
    wrappers = check(model, which)

    def timed(on: bool) -> float:
        for w in wrappers:
            if on:
                w.module.__dict__[w.method] = w
            else:
                w.module.__dict__.pop(w.method, None)
        t = time.thread_time()
        with torch.no_grad():
            for _ in range(repeat):
                fn()
        return time.thread_time() - t

    timed(True), timed(False), timed(True), timed(False)  # warm up (the first checked call checks)
    ratios = []
    for _ in range(rounds):
        sides = [True, False]
        random.shuffle(sides)
        t = {s: timed(s) for s in sides}
        ratios.append(t[True] / t[False])
    output_contract.uninstall(model)
    q = statistics.quantiles(ratios, n=4)
    return statistics.median(ratios), q[0], q[2]


def build_times(name: str, rounds: int) -> dict[str, float]:
    shipped = BUILD.probe_components
    variants = {"before (probe_attention)": assembly.probe_attention,
                "after (probe_components)": shipped,
                "probe over all components": lambda m: shipped(m, "all")}
    zoo.build(name, seed=0)
    times: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for _ in range(rounds):
            order = list(variants)
            random.shuffle(order)
            for k in order:
                BUILD.probe_components = variants[k]
                t = time.thread_time()
                zoo.build(name, seed=0)
                times[k].append(time.thread_time() - t)
    finally:
        BUILD.probe_components = shipped
    return {k: 1000 * statistics.median(v) for k, v in times.items()}


def sdpa_cost(rounds: int, T: int, steps: int, repeat: int = 10) -> None:
    import zoo.plugins.attention_sdpa as sdpa

    shipped = sdpa.nonfinite_query_rows  # the one line the NaN propagation adds to the kernel

    def without(out, q):
        return out

    model = zoo.build("gpt_tiny", seed=0).eval()
    for label, fn in (("forward", forward_fn(model, T)), ("decode", decode_fn(model, steps))):
        ratios = []
        for _ in range(rounds):
            t = {}
            for side in random.sample([True, False], 2):
                sdpa.nonfinite_query_rows = shipped if side else without
                s = time.thread_time()
                with torch.no_grad():
                    for _ in range(repeat):
                        fn()
                t[side] = time.thread_time() - s
            ratios.append(t[True] / t[False])
        sdpa.nonfinite_query_rows = shipped
        print(f"sdpa NaN propagation, gpt_tiny {label}: with / without = "
              f"{statistics.median(ratios):.4f} (median of {rounds})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--len", type=int, default=64)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=10, help="calls per side of a round")
    ap.add_argument("--presets", default="gpt_tiny,llama_tiny,bert_tiny,t5_tiny")
    ap.add_argument("--gpt2", action="store_true", help="also gpt2 (GPT-2 small)")
    ap.add_argument("--build", action="store_true", help="build times of gpt_tiny and gpt2")
    ap.add_argument("--sdpa", action="store_true", help="cost of sdpa's NaN propagation")
    a = ap.parse_args()
    torch.set_num_threads(1)
    random.seed(0)
    names = [n for n in a.presets.split(",") if n] + (["gpt2"] if a.gpt2 else [])
    print(f"torch {torch.__version__}, 1 thread; ratio = all components checked / none checked")
    for name in names:
        model = zoo.build(name, seed=0).eval()
        for which in ("all", "attention", "none"):
            n = len(check(model, which))
            output_contract.uninstall(model)
            med, lo, hi = paired(model, forward_fn(model, a.len), a.rounds, which, a.repeat)
            print(f"{name:11s} {which:9s} ({n:2d} checked methods) forward 1x{a.len}: {med:.4f} "
                  f"(quartiles {lo:.4f}-{hi:.4f})")
            if model.spec.arch == "decoder":
                med, lo, hi = paired(model, decode_fn(model, a.steps), a.rounds, which, a.repeat)
                print(f"{name:11s} {which:9s} ({n:2d} checked methods) decode 16+{a.steps}: "
                      f"{med:.4f} (quartiles {lo:.4f}-{hi:.4f})")
    if a.build:
        for name, rounds in (("gpt_tiny", max(a.rounds, 15)), ("gpt2", 5)):
            times = build_times(name, rounds)
            print(f"build {name}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in times.items()))
    if a.sdpa:
        sdpa_cost(a.rounds, a.len, a.steps, a.repeat)


if __name__ == "__main__":
    main()

"""One training step: zoo's trainer (eager and ``--compile``) against a hand-written nanoGPT step.

Not a test: a script that prints a table (and optionally writes JSON).

Three steps on the *same weights and the same batch*, timed in one process, alternating in a fresh
random order every round (a busy neighbour slows every side of a round alike):

- ``zoo eager``     :func:`zoo.train.loop.optimizer_step` on a run set up exactly as ``zoo train``
                    sets one up (:func:`zoo.train.loop.prepare_run`): the trainer's own objective
                    (``clm``), AdamW with its weight-decay groups, gradient clipping, everything
                    the loop does per step;
- ``zoo compiled``  the same with ``compile=True`` (``zoo train --compile``): the loss runs through
                    ``torch.compile(model)``;
- ``nanoGPT``       the model written here the way nanoGPT writes it (token + position embedding,
                    pre-LN blocks with one fused ``c_attn`` Linear, ``F.scaled_dot_product_attention
                    (is_causal=True)``, tanh-GELU MLP, tied head), zoo's state dict copied in, and
                    nanoGPT's step: cross-entropy, backward, ``clip_grad_norm_``, ``AdamW.step``.

Before timing, the script checks that zoo and nanoGPT compute the same function: the same loss on
the batch and the same gradient of every matrix (float32, 1e-4 relative).  It reports the median
seconds per step, the paired ratios (the median over rounds of the per-round ratio), and the MFU of
each: the step's model FLOPs counted by :func:`zoo.train.mfu.step_flops` (``zoo.inside.costs``'s
forward cost, x3 for the backward) over the median time and the matmul peak measured here by
:func:`zoo.train.mfu.machine_peak` (best of ten 1024 x 1024 matmuls, ``zoo bench``'s method).

    python benchmarks/train_step.py                          # GPT-2 small, 4 x 256, 2 threads
    python benchmarks/train_step.py --set num_layers=2 --set d_model=128 --set num_heads=4 \
        --set d_ff=512 --set vocab_size=512 --rounds 10      # a tiny GPT-2 shape
    python benchmarks/train_step.py --rounds 3 --json step.json
    python benchmarks/train_step.py --profile --no-compile --rounds 1   # where an eager step goes
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo.train.loop import batch_generator, optimizer_step, prepare_run
from zoo.train.mfu import machine_peak, step_flops

ROOT = Path(__file__).resolve().parents[1]


# ====================================================================== nanoGPT, as nanoGPT writes it
class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.n_head = h
        self.c_attn = nn.Linear(d, 3 * d)  # q, k, v in one matmul
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, h, T, hd)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, h, T, hd)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, h, T, hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, hd)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, d: int, d_ff: int):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(d, d_ff), nn.Linear(d_ff, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d: int, h: int, d_ff: int):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), CausalSelfAttention(d, h)
        self.ln_2, self.mlp = nn.LayerNorm(d), MLP(d, d_ff)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, block: int, layers: int, d: int, h: int, d_ff: int):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.h = nn.ModuleList(Block(d, h, d_ff) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, d)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))  # (B, T, V)


#: zoo's GPT-2 state-dict names -> nanoGPT's (per block: ``{i}``)
ZOO_TO_NANO = {"tok_emb.weight": "wte.weight", "decoder.positions.table.weight": "wpe.weight",
               "decoder.final_norm.weight": "ln_f.weight", "decoder.final_norm.bias": "ln_f.bias"}
BLOCK = {"attn_res.norm": "ln_1", "attn.qkv": "attn.c_attn", "attn.out": "attn.c_proj",
         "ffn_res.norm": "ln_2", "ffn.up": "mlp.c_fc", "ffn.down": "mlp.c_proj"}


def nano_from_zoo(model) -> GPT:
    """A nanoGPT module holding a copy of ``model``'s weights (a zoo GPT-2-shaped decoder)."""
    s = model.spec
    nano = GPT(s.vocab_size, s.max_len, s.num_layers, s.d_model, s.num_heads, s.d_ff)
    sd = {}
    for k, v in model.state_dict().items():
        if k == "lm_head.weight":
            continue  # tied to wte
        if k in ZOO_TO_NANO:
            sd[ZOO_TO_NANO[k]] = v.clone()
            continue
        _, _, i, rest = k.split(".", 3)  # decoder.blocks.{i}.{part}.{weight|bias}
        part, _, leaf = rest.rpartition(".")
        sd[f"h.{i}.{BLOCK[part]}.{leaf}"] = v.clone()
    missing, unexpected = nano.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    return nano


def nano_step_fn(nano: GPT, ids, labels, cfg):
    """nanoGPT's step: forward, mean cross-entropy, backward, clip, AdamW (decay on matrices)."""
    decay = [p for p in nano.parameters() if p.dim() >= 2]
    plain = [p for p in nano.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": plain, "weight_decay": 0.0}], lr=cfg.lr,
                            betas=(cfg.beta1, cfg.beta2))

    def step():
        logits = nano(ids)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), labels.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(nano.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step


def same_function(run, nano, ids, labels) -> dict:
    """zoo's loss and every matrix gradient against nanoGPT's, on the batch (before any step)."""
    from zoo.train.objectives import ce_sum

    z = ce_sum(run.net(ids), labels) / labels.numel()
    z.backward()
    n = F.cross_entropy(nano(ids).view(-1, run.spec.vocab_size), labels.reshape(-1))
    n.backward()
    nano_params = dict(nano.named_parameters())
    worst = 0.0
    for k, p in run.net.named_parameters():
        if k == "lm_head.weight" or p.dim() < 2:
            continue
        nk = ZOO_TO_NANO.get(k)
        if nk is None:
            _, _, i, rest = k.split(".", 3)
            part, _, leaf = rest.rpartition(".")
            nk = f"h.{i}.{BLOCK[part]}.{leaf}"
        g, h = p.grad, nano_params[nk].grad
        worst = max(worst, ((g - h).norm() / h.norm().clamp(min=1e-30)).item())
    run.net.zero_grad(set_to_none=True)
    nano.zero_grad(set_to_none=True)
    return {"zoo_loss": z.item(), "nano_loss": n.item(), "max_rel_grad_diff": worst}


#: operator name -> share of the eager step it belongs to (``--profile``)
GROUPS = (("matmul (mm, addmm, bmm)", ("aten::mm", "aten::addmm", "aten::bmm")),
          ("attention (flash kernel, forward + backward)", ("scaled_dot_product",)),
          ("cross-entropy (log-softmax, nll)", ("log_softmax", "nll_loss")),
          ("GELU", ("gelu",)), ("LayerNorm", ("layer_norm",)), ("embedding backward", ("embedding",)),
          ("AdamW and clipping", ("foreach", "addcdiv", "addcmul", "lerp", "sqrt", "norm",
                                  "Optimizer.step")))


def profile_shares(step) -> dict[str, float]:
    """Share of the self CPU time of one ``step()`` per operator group (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    shares: dict[str, float] = {}
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    for e in events:
        group = next((g for g, keys in GROUPS if any(k in e.key for k in keys)), "other")
        shares[group] = shares.get(group, 0.0) + e.self_cpu_time_total / total
    return dict(sorted(shares.items(), key=lambda kv: -kv[1]))


def cpu_clock_peak(n: int = 1024, repeats: int = 10) -> float:
    """FLOP/s of the best of ``repeats`` ``n x n`` float32 matmuls, timed by process CPU time."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        a @ b
        best = min(best, time.process_time() - t0)
    return 2 * n ** 3 / best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpt2")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--profile", action="store_true",
                    help="also profile one eager zoo step: where its time goes, by operator group")
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a spec field of the preset, e.g. --set num_layers=2")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    load0 = os.getloadavg()[0]
    out = tempfile.mkdtemp(prefix="zoo_train_step_")
    data = ROOT / "data" / "poems.txt"
    knobs = dict(tokenizer="byte", batch_size=args.batch, block_size=args.block, progress=False,
                 warmup=0)
    from zoo.commands import parse_sets

    model = zoo.build(args.preset, seed=0, **{"dropout": 0.0, **parse_sets(args.sets)})
    run = prepare_run(model, data, out=out, **knobs)
    nano = nano_from_zoo(run.net)
    batch = run.objective.train_batch(batch_generator(run.cfg, run.step), run.cfg.batch_size)
    ids, labels = batch["ids"], batch["labels"]  # (B, T) each: the batch optimizer_step draws
    check = same_function(run, nano, ids, labels)
    flops = step_flops(run.spec, batch)
    peak = machine_peak("cpu", torch.float32)
    if args.clock == "cpu":  # the same method on the same clock as the steps
        peak = {"peak_flops": cpu_clock_peak(), "peak_method": "best of 10 1024x1024 float32 "
                "matmuls timed by this process's CPU time (zoo.inside.speed.matmul_peak's method on the "
                "clock of --clock cpu)", "wall_peak_flops": peak["peak_flops"]}
    print(f"{args.preset}: batch {args.batch} x {args.block}, {args.threads} threads, "
          f"{args.clock} clock, torch {torch.__version__}, load {load0:.2f}; "
          f"{flops / 1e9:,.1f} GFLOP a step (zoo.train.mfu.step_flops); peak "
          f"{peak['peak_flops'] / 1e9:,.1f} GFLOP/s ({peak['peak_method']})", flush=True)
    print(f"same function: loss zoo {check['zoo_loss']:.6f} / nanoGPT {check['nano_loss']:.6f}, "
          f"largest relative gradient difference {check['max_rel_grad_diff']:.1e}", flush=True)
    assert abs(check["zoo_loss"] - check["nano_loss"]) < 1e-4 * abs(check["nano_loss"])
    assert check["max_rel_grad_diff"] < 1e-4

    steps = {"zoo eager": lambda: optimizer_step(run),
             "nanoGPT": nano_step_fn(nano, ids, labels, run.cfg)}
    compile_s = None
    if not args.no_compile:
        crun = prepare_run(copy.deepcopy(model), data, out=out, compile=True, **knobs)
        t0 = time.perf_counter()
        optimizer_step(crun)  # compiles the forward and the backward
        compile_s = time.perf_counter() - t0
        print(f"compiled: the first step took {compile_s:.1f} s (wall)", flush=True)
        steps["zoo compiled"] = lambda: optimizer_step(crun)
    for fn in steps.values():  # warm-up: AdamW's moments are allocated on the first step
        fn()
    times = {k: [] for k in steps}
    rng = random.Random(args.rounds)
    for r in range(args.rounds):
        for k in rng.sample(list(steps), len(steps)):
            t0 = clock()
            steps[k]()
            times[k].append(clock() - t0)
        print(f"round {r + 1}: " + ", ".join(f"{k} {times[k][-1]:.2f} s" for k in steps), flush=True)

    def ratio(a, b):  # median over rounds of a / b
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    rows = {k: {"median_s": statistics.median(v), "times_s": v,
                "tokens_per_s": args.batch * args.block / statistics.median(v),
                "mfu": flops / statistics.median(v) / peak["peak_flops"]} for k, v in times.items()}
    print("\n| step | median s | tokens/s | MFU |\n|---|---:|---:|---:|")
    for k, r in rows.items():
        print(f"| {k} | {r['median_s']:.3f} | {r['tokens_per_s']:,.0f} | {100 * r['mfu']:.1f}% |")
    result = {"preset": args.preset, "sets": args.sets, "batch": args.batch, "block": args.block,
              "threads": args.threads, "clock": args.clock, "torch": torch.__version__,
              "flops_per_step": flops, **peak, "check": check, "rows": rows,
              "compile_s": compile_s, "zoo_over_nano": ratio("zoo eager", "nanoGPT")}
    print(f"\nzoo eager / nanoGPT time (paired median): {result['zoo_over_nano']:.3f}x (target <= 1.03x)")
    result["ceiling"] = 1 / rows["zoo eager"]["mfu"]
    print(f"eager MFU {100 * rows['zoo eager']['mfu']:.0f}%: the matmuls alone (at the measured peak) "
          f"take that share of the step, so a compiler that fuses everything else away but keeps "
          f"the matmuls gains at most {result['ceiling']:.2f}x")
    if "zoo compiled" in steps:
        result["compiled_speedup"] = ratio("zoo eager", "zoo compiled")
        print(f"zoo compiled speed-up over eager (paired median): {result['compiled_speedup']:.2f}x "
              f"(target >= 1.3x); compile (first step) {compile_s:.1f} s")
    if args.profile:
        result["profile"] = shares = profile_shares(steps["zoo eager"])
        print("eager zoo step, share of self CPU time (torch.profiler): "
              + ", ".join(f"{k} {100 * v:.1f}%" for k, v in shares.items()))
    result["load"] = [load0, os.getloadavg()[0]]
    print(f"load average before / after: {load0:.2f} / {result['load'][1]:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python
"""Peer comparison: zoo vs Hugging Face GPT-2 vs x-transformers vs a hand-written GPT.

Not part of the CI test run (it takes minutes); run it by hand; ``--doc`` puts the report into
docs/PERFORMANCE.md (between markers, keeping the rest of the page):

    python tests/perf/compare.py --doc docs/PERFORMANCE.md             # CPU, fp32, full set
    python tests/perf/compare.py --device cuda --dtype bfloat16 --quick # GPU, bf16, reduced set

Method.  Everything runs in one process.  The four models of a shape hold the *same weights*: a
Hugging Face ``GPT2LMHeadModel`` is built from a config (random init, offline) and its tensors are
copied into zoo (through ``zoo.convert.from_transformers`` when available, else a 10-line mapping),
into the hand-written GPT, and into x-transformers where its layout allows (x-transformers has no
attention biases and bias-free LayerNorms, so it computes a slightly different function of the same
shape; it also uses exact GELU where GPT-2 uses the tanh approximation).  zoo, HF and the hand GPT are
checked to produce the same logits and the same greedy tokens before anything is timed.

Timing: warm-up calls first, then ``repeats`` rounds; in each round every model runs once, in a
fresh random order, so slow drifts of a shared machine and "who ran just before" effects hit all
models alike.  We report medians and
*paired* ratios: the median over rounds of ``zoo time / peer time`` within the same round.

The hand-written GPT (class ``HandGPT``, about 100 lines) is nanoGPT's model with a KV cache: the
best a person would write by hand for this shape, with the fused ``c_attn`` projection and
``F.scaled_dot_product_attention(is_causal=True)``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
import weakref

import torch
import torch.nn.functional as F
import torch.utils._python_dispatch
import torch.utils._pytree
from torch import nn

import zoo
from zoo.inside.speed import count_flops, synchronize
from zoo.model.build import resolve_dtype

SHAPES = {
    "tiny": dict(n_layer=4, n_embd=256, n_head=4, vocab_size=8192, n_positions=1024),
    "gpt2": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
}
SHAPE_LABEL = {"tiny": "tiny (4L d256 h4 V8192)", "gpt2": "GPT-2 small (12L d768 h12)"}


# ============================================================== the hand-written GPT (nanoGPT-style)
class HandAttention(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.c_attn = nn.Linear(d, 3 * d)  # fused q, k, v
        self.c_proj = nn.Linear(d, d)

    def forward(self, x, cache=None, start=0):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.h, C // self.h).transpose(1, 2)  # (B, h, T, hd)
        k = k.view(B, T, self.h, C // self.h).transpose(1, 2)
        v = v.view(B, T, self.h, C // self.h).transpose(1, 2)
        if isinstance(cache, tuple):  # static cache: preallocated (B, h, max_T, hd), written in place
            kb, vb = cache
            kb[:, :, start:start + T] = k
            vb[:, :, start:start + T] = v
            k, v = kb[:, :, :start + T], vb[:, :, :start + T]  # views, no copy
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)  # prompt causal, step not
            return self.c_proj(y.transpose(1, 2).reshape(B, T, C))
        if cache:  # decoding: the new token sees every cached one
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
            y = F.scaled_dot_product_attention(q, k, v)
        else:  # a whole sequence (or the prompt): causal
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if cache is not None:
            cache[:] = [k, v]
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class HandMLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc, self.c_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class HandBlock(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(d), HandAttention(d, h)
        self.ln_2, self.mlp = nn.LayerNorm(d), HandMLP(d)

    def forward(self, x, cache=None, start=0):
        x = x + self.attn(self.ln_1(x), cache, start)
        return x + self.mlp(self.ln_2(x))


class HandGPT(nn.Module):
    def __init__(self, n_layer, n_embd, n_head, vocab_size, n_positions):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, n_embd), nn.Embedding(n_positions, n_embd)
        self.h = nn.ModuleList(HandBlock(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, ids, caches=None, start=0):
        pos = torch.arange(start, start + ids.size(1), device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for i, block in enumerate(self.h):
            x = block(x, caches[i] if caches is not None else None, start)
        return self.lm_head(self.ln_f(x))

    @torch.no_grad()
    def generate(self, ids, new_tokens):
        caches = [[] for _ in self.h]
        logits, out = self(ids, caches), [ids]
        for i in range(new_tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
            if i + 1 < new_tokens:
                logits = self(nxt, caches, start=ids.size(1) + i)
        return torch.cat(out, 1)

    @torch.no_grad()
    def generate_static(self, ids, new_tokens):
        """The anchor of the generation targets: every layer's k/v buffers allocated once for the
        whole run, written in place; the LM head applied to the last position only."""
        B, P = ids.shape
        C, h = self.wte.weight.shape[1], self.h[0].attn.h
        kv = (B, h, P + new_tokens, C // h)
        caches = [(self.wte.weight.new_empty(kv), self.wte.weight.new_empty(kv)) for _ in self.h]
        pos = torch.arange(P + new_tokens, device=ids.device)
        out = torch.empty(B, P + new_tokens, dtype=ids.dtype, device=ids.device)
        out[:, :P] = ids
        x, start = ids, 0
        for i in range(new_tokens):
            hidden = self.wte(x) + self.wpe(pos[start:start + x.size(1)])
            for block, cache in zip(self.h, caches):
                hidden = block(hidden, cache, start)
            logits = self.lm_head(self.ln_f(hidden[:, -1]))  # (B, V)
            start += x.size(1)
            x = logits.argmax(-1, keepdim=True)  # (B, 1)
            out[:, P + i] = x[:, 0]
        return out

    @classmethod
    def from_hf(cls, hf, cfg):
        m = cls(**cfg).to(hf.device if hasattr(hf, "device") else "cpu")
        sd = {}
        for k, v in hf.state_dict().items():
            if k.endswith(".attn.bias") or k.endswith("masked_bias"):
                continue
            k = k.removeprefix("transformer.")
            if any(k.endswith(s) for s in ("c_attn.weight", "c_proj.weight", "c_fc.weight")):
                v = v.t()  # HF's Conv1D stores (in, out)
            sd[k] = v
        m.load_state_dict(sd, strict=False)
        m.lm_head.weight = m.wte.weight
        return m


# ============================================================== building the four models
def build_hf(cfg, device, dtype, seed=0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(**cfg, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        attn_implementation="sdpa", bos_token_id=None, eos_token_id=None)
    return GPT2LMHeadModel(config).to(device=device, dtype=dtype).eval()


def zoo_spec(cfg, name):
    return dict(name=name, arch="decoder", vocab_size=cfg["vocab_size"], max_len=cfg["n_positions"],
                d_model=cfg["n_embd"], num_layers=cfg["n_layer"], num_heads=cfg["n_head"],
                d_ff=4 * cfg["n_embd"], dropout=0.0, tie_embeddings=True, scale_embeddings=False,
                qkv_bias=True, out_bias=True, attention="sdpa", mask="causal", positions="learned",
                norm={"kind": "layernorm", "placement": "pre", "eps": 1e-5},
                ffn={"kind": "mlp", "activation": "gelu_tanh"})


def build_zoo(hf, cfg, name, device, dtype):
    """zoo with the HF weights: through the converter when it exists, else a direct mapping."""
    try:
        from zoo.convert import from_transformers  # the issue-3 converter

        model = from_transformers(hf)
        how = "zoo.convert.from_transformers"
    except ImportError:
        model, how = _zoo_from_hf_by_hand(hf, cfg, name), "mapping in compare.py"
    return model.to(device=device, dtype=dtype).eval(), how


def _zoo_from_hf_by_hand(hf, cfg, name):
    model = zoo.build(zoo_spec(cfg, name), device="meta", init=False)
    sd = {}
    for k, v in hf.state_dict().items():
        k = k.removeprefix("transformer.")
        if k.endswith(".attn.bias") or k.endswith("masked_bias") or k == "lm_head.weight":
            continue
        conv = any(k.endswith(s) for s in ("c_attn.weight", "c_proj.weight", "c_fc.weight"))
        v = v.t() if conv else v
        if k.startswith("h."):
            _, i, rest = k.split(".", 2)
            rest = {"ln_1.weight": "attn_res.norm.weight", "ln_1.bias": "attn_res.norm.bias",
                    "ln_2.weight": "ffn_res.norm.weight", "ln_2.bias": "ffn_res.norm.bias",
                    "attn.c_attn.weight": "attn.qkv.weight", "attn.c_attn.bias": "attn.qkv.bias",
                    "attn.c_proj.weight": "attn.out.weight", "attn.c_proj.bias": "attn.out.bias",
                    "mlp.c_fc.weight": "ffn.up.weight", "mlp.c_fc.bias": "ffn.up.bias",
                    "mlp.c_proj.weight": "ffn.down.weight", "mlp.c_proj.bias": "ffn.down.bias"}[rest]
            k = f"decoder.blocks.{i}.{rest}"
        else:
            k = {"wte.weight": "tok_emb.weight", "wpe.weight": "decoder.positions.table.weight",
                 "ln_f.weight": "decoder.final_norm.weight", "ln_f.bias": "decoder.final_norm.bias"}[k]
        sd[k] = v.detach().clone()
    model = model.to_empty(device="cpu")
    model.load_state_dict(sd, strict=False, assign=True)
    model.tie_weights()
    model.reset_buffers()
    return model


def build_xt(hf, cfg, device, dtype):
    """x-transformers of the same shape; weights copied where its layout agrees with GPT-2's."""
    from x_transformers import Decoder, TransformerWrapper

    d, h = cfg["n_embd"], cfg["n_head"]
    m = TransformerWrapper(num_tokens=cfg["vocab_size"], max_seq_len=cfg["n_positions"],
                           tie_embedding=True,
                           attn_layers=Decoder(dim=d, depth=cfg["n_layer"], heads=h, attn_dim_head=d // h,
                                               attn_flash=True, ff_mult=4))
    src = {k.removeprefix("transformer."): v for k, v in hf.state_dict().items()}
    sd = {"token_emb.emb.weight": src["wte.weight"], "pos_emb.emb.weight": src["wpe.weight"],
          "attn_layers.final_norm.gamma": src["ln_f.weight"]}
    for i in range(cfg["n_layer"]):
        a, f = f"attn_layers.layers.{2 * i}", f"attn_layers.layers.{2 * i + 1}"
        q, k, v = src[f"h.{i}.attn.c_attn.weight"].t().split(d, 0)
        sd.update({f"{a}.0.0.gamma": src[f"h.{i}.ln_1.weight"], f"{a}.1.to_q.weight": q,
                   f"{a}.1.to_k.weight": k, f"{a}.1.to_v.weight": v,
                   f"{a}.1.to_out.weight": src[f"h.{i}.attn.c_proj.weight"].t(),
                   f"{f}.0.0.gamma": src[f"h.{i}.ln_2.weight"],
                   f"{f}.1.ff.0.0.weight": src[f"h.{i}.mlp.c_fc.weight"].t(),
                   f"{f}.1.ff.0.0.bias": src[f"h.{i}.mlp.c_fc.bias"],
                   f"{f}.1.ff.2.weight": src[f"h.{i}.mlp.c_proj.weight"].t(),
                   f"{f}.1.ff.2.bias": src[f"h.{i}.mlp.c_proj.bias"]})
    missing, unexpected = m.load_state_dict({k: v.contiguous() for k, v in sd.items()}, strict=False)
    if unexpected:
        raise RuntimeError(f"x-transformers layout changed: unexpected {unexpected[:4]}")
    return m.to(device=device, dtype=dtype).eval()


# ============================================================== calls under test
def zoo_generate(model, prompt, n):
    if hasattr(model, "generate"):
        try:
            return model.generate(prompt, max_new_tokens=n, do_sample=False)
        except TypeError:
            pass
    from zoo.inside.speed import greedy

    return greedy(model, prompt, n)


def hf_generate(model, prompt, n):
    return model.generate(prompt, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                          pad_token_id=0, attention_mask=torch.ones_like(prompt))


def xt_generate(wrapper, prompt, n):
    out = wrapper.generate(prompt, n, temperature=0.0, cache_kv=True)
    return torch.cat([prompt, out], 1)


def as_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (list, tuple)):
        return out[0]
    return getattr(out, "sequences", None) if hasattr(out, "sequences") else out.logits


# ============================================================== measurement helpers
CLOCK = time.perf_counter  # --clock cpu switches to time.process_time (see main)


class Timer:
    """Alternating, paired timing of several callables."""

    def __init__(self, device):
        self.device = device

    def run(self, fns: dict, repeats: int, warmup: int = 1) -> dict[str, list[float]]:
        for _ in range(warmup):
            for fn in fns.values():
                fn()
        synchronize(self.device)
        times = {k: [] for k in fns}
        names = list(fns)
        rng = random.Random(len(names) * 1000 + repeats)
        for r in range(repeats):
            # a fresh random order each round: who runs first, and who runs right after whom (a
            # model that follows one with the same allocation pattern reuses warm memory), must not
            # favour anyone systematically
            order = rng.sample(names, len(names))
            for k in order:
                t0 = CLOCK()
                fns[k]()
                synchronize(self.device)
                times[k].append(CLOCK() - t0)
        return times


def med(xs):
    return statistics.median(xs)


def spread(xs):
    if len(xs) < 4:
        return (max(xs) - min(xs)) / med(xs)
    q = statistics.quantiles(xs, n=4)
    return (q[2] - q[0]) / med(xs)


def paired(a, b):
    """Median over rounds of a[i] / b[i]."""
    return med([x / y for x, y in zip(a, b)])


class LiveTensorBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """Peak bytes of tensor storage allocated during a call and still alive (CPU peak memory).

    Every op's output storage is counted when first seen and released when the last tensor that
    refers to it dies.  Kernel-internal scratch space is invisible (it never becomes a tensor)."""

    def __init__(self):
        super().__init__()
        self.refs: dict[int, list] = {}
        self.cur = self.peak = 0

    def _release(self, key):
        entry = self.refs.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.cur -= entry[0]
            del self.refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                key = t.untyped_storage().data_ptr()
                if not key:
                    continue
                if key in self.refs:
                    self.refs[key][1] += 1
                else:
                    self.refs[key] = [t.untyped_storage().nbytes(), 1]
                    self.cur += self.refs[key][0]
                    self.peak = max(self.peak, self.cur)
                weakref.finalize(t, self._release, key)
        return out


def peak_memory(fn, device) -> int:
    """Peak bytes allocated by ``fn()`` beyond what existed before."""
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        del out
        return torch.cuda.max_memory_allocated() - base
    mode = LiveTensorBytes()
    with mode:
        out = fn()
    del out
    return mode.peak


def fmt_ms(s):
    if s != s:
        return "n/a"
    return f"{s * 1e3:,.2f}" if s < 0.01 else f"{s * 1e3:,.1f}" if s < 10 else f"{s * 1e3:,.0f}"


def fmt_t(s, sp):
    """Milliseconds ± half the inter-quartile range."""
    return "n/a" if s != s else f"{fmt_ms(s)} ±{50 * sp:.0f}%"


def fmt_mb(b):
    return "n/a" if b != b else f"{b / 2 ** 20:,.0f}"


# ============================================================== the sections
PEERS = ("zoo", "hand", "hf", "xt")
ACTIVE = list(PEERS)  # x-transformers is dropped when it is not installed (e.g. on the GPU image)
NAN = float("nan")


def fr(x, spec=".3f"):
    """A number for the table, or n/a."""
    return "n/a" if x is None or x != x else format(x, spec)


class NA(dict):
    """A dict that answers nan for peers that did not run."""

    def __missing__(self, key):
        return NAN
PEER_NAME = {"zoo": "zoo", "hand": "hand GPT", "hf": "HF GPT-2", "xt": "x-transformers"}


class Compare:
    def __init__(self, args):
        self.a = args
        self.device = torch.device(args.device)
        self.dtype = resolve_dtype(args.dtype)
        self.lines: list[str] = []
        self.targets: list[tuple[str, str, str, bool | None]] = []  # (target, measured, goal, ok)
        self.models = {}
        self.notes: list[str] = []

    def log(self, *a):
        print(*a, flush=True)

    def models_for(self, shape):
        if shape in self.models:
            return self.models[shape]
        cfg = SHAPES[shape]
        hf = build_hf(cfg, "cpu", torch.float32)
        z, how = build_zoo(hf, cfg, f"{shape}_cmp", "cpu", torch.float32)
        hand = HandGPT.from_hf(hf, cfg).eval()
        ms = {"zoo": z, "hand": hand, "hf": hf}
        if "xt" in ACTIVE:
            ms["xt"] = build_xt(hf, cfg, "cpu", torch.float32)
        ms = {k: m.to(device=self.device, dtype=self.dtype).eval() for k, m in ms.items()}
        for p in (m for mm in ms.values() for m in mm.parameters()):
            p.requires_grad_(False)
        ids = torch.randint(0, cfg["vocab_size"], (2, 64), device=self.device)
        with torch.inference_mode():
            ref = ms["hf"](ids, use_cache=False).logits.float()
            for k in ("zoo", "hand"):
                diff = (ms[k](ids).float() - ref).abs().max().item()
                tol = 1e-3 if self.dtype == torch.float32 else 0.25 * ref.abs().max().item()
                if not diff <= tol:
                    raise SystemExit(f"{k} logits differ from HF by {diff:.3g} on {shape}: the weight "
                                     f"copy is wrong, timings would be meaningless")
                self.log(f"  {shape}: {k} logits match HF (max |diff| {diff:.2e})")
        self.notes.append(f"{shape}: zoo weights from HF via {how}")
        self.models[shape] = ms
        return ms

    def drop_models(self, shape):
        self.models.pop(shape, None)
        gc.collect()

    # ---------------------------------------------------------- forward
    def forward(self):
        a = self.a
        rows = []
        for shape in a.shapes:
            ms = self.models_for(shape)
            fwd = {"zoo": lambda m, x: m(x), "hand": lambda m, x: m(x),
                   "hf": lambda m, x: m(x, use_cache=False).logits, "xt": lambda m, x: m(x)}
            for B in a.batches:
                for T in a.lengths:
                    ids = torch.randint(0, SHAPES[shape]["vocab_size"], (B, T), device=self.device)
                    fns = {k: (lambda k=k: fwd[k](ms[k], ids)) for k in ACTIVE}
                    reps = a.repeats if shape == "tiny" else max(3, a.repeats // 2)
                    with torch.inference_mode():
                        flops = count_flops(fns["zoo"])
                        times = Timer(self.device).run(fns, reps, warmup=1)
                    zt = times["zoo"]
                    r = dict(shape=shape, B=B, T=T, med=NA({k: med(v) for k, v in times.items()}),
                             spread=NA({k: spread(v) for k, v in times.items()}),
                             ratio=NA({k: paired(zt, times[k]) for k in ACTIVE if k != "zoo"}),
                             gflops=NA({k: flops / med(v) / 1e9 for k, v in times.items()}))
                    rows.append(r)
                    self.log(f"  forward {shape} {B}x{T}: " + ", ".join(
                        f"{k} {fmt_ms(r['med'][k])} ms" for k in PEERS) + " | zoo/hand "
                        f"{r['ratio']['hand']:.3f} zoo/HF {r['ratio']['hf']:.3f}")
        self.fwd_rows = rows
        L = ["### Forward (logits for every position, eval, no grad)", "",
             "| shape | B x T | zoo ms | hand GPT ms | HF ms | x-transformers ms | zoo / hand | "
             "zoo / HF | zoo / x-t | zoo GFLOP/s | zoo % of peak |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            L.append(f"| {SHAPE_LABEL[r['shape']]} | {r['B']} x {r['T']} | " + " | ".join(
                fmt_t(r['med'][k], r['spread'][k]) for k in PEERS) + " | " +
                " | ".join(fr(r['ratio'][k]) for k in ("hand", "hf", "xt")) +
                f" | {r['gflops']['zoo']:,.0f} | {100 * r['gflops']['zoo'] / self.peak:.0f}% |")
        self.lines += L + [""]
        worst_hand = max(rows, key=lambda r: r["ratio"]["hand"])
        worst_hf = max(rows, key=lambda r: r["ratio"]["hf"])
        self.targets.append(("forward: zoo / hand GPT, every shape (worst)",
                             f"{worst_hand['ratio']['hand']:.3f} ({worst_hand['shape']} "
                             f"{worst_hand['B']}x{worst_hand['T']})", "<= 1.03",
                             worst_hand["ratio"]["hand"] <= 1.03))
        self.targets.append(("forward: zoo / HF, every shape (worst)",
                             f"{worst_hf['ratio']['hf']:.3f} ({worst_hf['shape']} "
                             f"{worst_hf['B']}x{worst_hf['T']})", "<= 0.95",
                             worst_hf["ratio"]["hf"] <= 0.95))
        big = [r for r in rows if r["shape"] == "gpt2" and r["B"] == 1 and r["T"] == 512]
        if big:
            frac = big[0]["gflops"]["zoo"] / self.peak
            self.targets.append(("forward: GPT-2 small 1 x 512, fraction of matmul peak",
                                 f"{100 * frac:.0f}%", ">= 70%", frac >= 0.70))

    # ---------------------------------------------------------- training step
    def train(self):
        a = self.a
        cfg = SHAPES["tiny"]
        ms = self.models_for("tiny")
        B, T = a.train_batch, a.train_len
        ids = torch.randint(0, cfg["vocab_size"], (B, T), device=self.device)
        fns, opts, models = {}, {}, {}
        for k in ACTIVE:
            m = _clone_module(ms[k]).train()
            for p in m.parameters():
                p.requires_grad_(True)
            models[k] = m
            opt = torch.optim.AdamW(m.parameters(), lr=1e-4, fused=self.device.type == "cuda")

            def step(m=m, opt=opt, k=k):
                opt.zero_grad(set_to_none=True)
                out = m(ids, use_cache=False).logits if k == "hf" else m(ids)
                loss = F.cross_entropy(out.flatten(0, 1).float(), ids.flatten())
                loss.backward()
                opt.step()
                return loss
            fns[k] = step
        times = Timer(self.device).run(fns, a.repeats, warmup=2)
        mem = NA({k: peak_memory(fns[k], self.device) for k in ACTIVE})
        tok = NA({k: B * T / med(v) for k, v in times.items()})
        ratio = NA({k: paired(times[k], times["zoo"]) for k in ACTIVE if k != "zoo"})  # tokens/s
        times = NA(times)
        self.lines += ["### Training step (AdamW, cross-entropy, forward + backward + step)", "",
                       f"Tiny shape, batch {B} x {T} tokens.", "",
                       "| | zoo | hand GPT | HF | x-transformers |", "|---|---:|---:|---:|---:|",
                       "| ms / step | " + " | ".join(
                           fmt_t(med(times[k]), spread(times[k])) if k in ACTIVE else "n/a"
                           for k in PEERS) + " |",
                       "| tokens / s | " + " | ".join(fr(tok[k], ",.0f") for k in PEERS) + " |",
                       "| zoo tokens/s ÷ peer's (paired) | 1 | " + " | ".join(
                           fr(ratio[k]) for k in ("hand", "hf", "xt")) + " |",
                       "| peak memory of a step, MiB | " + " | ".join(fmt_mb(mem[k]) for k in PEERS)
                       + " |", ""]
        self.log("  train: " + ", ".join(f"{k} {tok[k]:,.0f} tok/s" for k in ACTIVE))
        self.targets.append(("training step: zoo tokens/s / HF's (tiny)", f"{ratio['hf']:.3f}",
                             ">= 1.05", ratio["hf"] >= 1.05))
        del models, fns, opts

    # ---------------------------------------------------------- generation
    def generate(self):
        """Greedy decoding, paired in one process.  The anchor is the hand-written static-cache loop
        (``HandGPT.generate_static``); the hand loop that grows its cache by concatenation, HF and
        x-transformers run beside it."""
        a = self.a
        rows = []
        for shape in a.gen_shapes:
            ms = self.models_for(shape)
            P, N = a.prompt_len, a.new_tokens
            prompt = torch.randint(0, SHAPES[shape]["vocab_size"], (1, P), device=self.device)
            fns = {"zoo": lambda: zoo_generate(ms["zoo"], prompt, N),
                   "static": lambda: ms["hand"].generate_static(prompt, N),
                   "hand": lambda: ms["hand"].generate(prompt, N),
                   "hf": lambda: hf_generate(ms["hf"], prompt, N),
                   }
            if "xt" in ACTIVE:
                from x_transformers import AutoregressiveWrapper

                xtw = AutoregressiveWrapper(ms["xt"]).eval()
                fns["xt"] = lambda: xt_generate(xtw, prompt, N)
            with torch.inference_mode():
                outs = {k: as_tensor(fn()) for k, fn in fns.items()}
                same = {k: bool(torch.equal(outs[k].cpu(), outs["hf"].cpu()))
                        for k in ("zoo", "static", "hand")}
                reps = a.gen_repeats if shape == "tiny" else max(2, a.gen_repeats // 2)
                times = Timer(self.device).run(fns, reps, warmup=1)
            names = list(fns)
            r = dict(shape=shape, med=NA({k: med(v) for k, v in times.items()}),
                     spread=NA({k: spread(v) for k, v in times.items()}),
                     speed=NA({k: paired(times[k], times["zoo"]) for k in names if k != "zoo"}),
                     vs_static=paired(times["zoo"], times["static"]),
                     same=same, N=N, P=P)
            rows.append(r)
            self.log(f"  generate {shape}: " + ", ".join(f"{k} {N / r['med'][k]:,.0f} tok/s" for k in names)
                     + f" | zoo time / static loop {r['vs_static']:.3f} | same tokens as HF: {same}")
        L = ["### Greedy generation with a KV cache", "",
             f"Batch 1, {a.prompt_len}-token prompt, {a.new_tokens} new tokens (forced: no early "
             "stop).  *hand static*: the hand-written GPT with every layer's k/v buffers allocated "
             "once and written in place (the anchor); *hand concat*: the same GPT growing its cache "
             "by concatenation.  `zoo / static` = zoo's time over the static loop's (paired); "
             "`zoo x` = zoo's tokens/s over the peer's (paired).", "",
             "| shape | hand static tok/s | zoo tok/s | zoo / static (time) | hand concat tok/s | "
             "HF tok/s | x-transformers tok/s | zoo x HF | zoo x x-t | same tokens as HF "
             "(zoo, static, concat) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            L.append(f"| {SHAPE_LABEL[r['shape']]} | " + " | ".join(
                fr(r['N'] / r['med'][k], ",.0f") for k in ("static", "zoo")) +
                f" | {r['vs_static']:.3f} | " + " | ".join(
                fr(r['N'] / r['med'][k], ",.0f") for k in ("hand", "hf", "xt")) + " | " +
                " | ".join(fr(r['speed'][k], ".2f") for k in ("hf", "xt")) +
                f" | {r['same']['zoo']}, {r['same']['static']}, {r['same']['hand']} |")
        self.lines += L + [""]
        goal = {"tiny": 2.0, "gpt2": 1.1}
        for r in rows:
            self.targets.append((f"generation: zoo time / hand static-cache loop's ({r['shape']})",
                                 f"{r['vs_static']:.3f}", "<= 1.03", r["vs_static"] <= 1.03))
            self.targets.append((f"generation: zoo speed / HF's ({r['shape']})",
                                 f"{r['speed']['hf']:.2f}x", f">= {goal[r['shape']]}x",
                                 r["speed"]["hf"] >= goal[r["shape"]]))

    # ---------------------------------------------------------- loading
    def load(self):
        from transformers import GPT2LMHeadModel

        a = self.a
        shape = a.load_shape
        ms = self.models_for(shape)
        with tempfile.TemporaryDirectory() as tmp:
            hf_dir, zoo_dir = os.path.join(tmp, "hf"), os.path.join(tmp, "zoo")
            ms["hf"].save_pretrained(hf_dir, safe_serialization=True)
            zoo.save(ms["zoo"], zoo_dir)
            dev = str(self.device)
            fns = {"zoo": lambda: zoo.load(zoo_dir, device=dev),
                   "hf": lambda: GPT2LMHeadModel.from_pretrained(hf_dir, device_map=dev
                                                                 if self.device.type == "cuda" else None)}
            times = Timer(self.device).run(fns, a.load_repeats, warmup=1)
            sizes = {k: sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
                     for k, d in (("zoo", zoo_dir), ("hf", hf_dir))}
        ratio = paired(times["zoo"], times["hf"])
        self.lines += ["### Loading the same weights from local safetensors files", "",
                       f"{SHAPE_LABEL[shape]}, saved by `zoo.save` and by `save_pretrained`.", "",
                       "| | zoo.load | from_pretrained | zoo / HF (paired) |", "|---|---:|---:|---:|",
                       f"| ms | {fmt_ms(med(times['zoo']))} ±{50 * spread(times['zoo']):.0f}% | "
                       f"{fmt_ms(med(times['hf']))} ±{50 * spread(times['hf']):.0f}% | {ratio:.3f} |",
                       f"| files, MiB | {fmt_mb(sizes['zoo'])} | {fmt_mb(sizes['hf'])} | |", ""]
        self.log(f"  load: zoo {fmt_ms(med(times['zoo']))} ms, HF {fmt_ms(med(times['hf']))} ms, "
                 f"ratio {ratio:.3f}")
        self.targets.append((f"zoo.load / from_pretrained ({shape})", f"{ratio:.3f}", "<= 0.5",
                             ratio <= 0.5))

    # ---------------------------------------------------------- memory
    def memory(self):
        rows = []
        for shape in self.a.shapes:
            ms = self.models_for(shape)
            B, T = max(self.a.batches), max(self.a.lengths)
            ids = torch.randint(0, SHAPES[shape]["vocab_size"], (B, T), device=self.device)
            with torch.inference_mode():
                mem = {k: peak_memory((lambda k=k: ms[k](ids, use_cache=False).logits if k == "hf"
                                       else ms[k](ids)), self.device) for k in ACTIVE}
            mem = NA(mem)
            rows.append((shape, B, T, mem))
        how = ("torch.cuda.max_memory_allocated" if self.device.type == "cuda" else
               "live tensor storage tracked by a dispatch mode; kernel scratch space not seen")
        L = ["### Peak memory of one forward (beyond the weights)", "", f"Measured as: {how}.", "",
             "| shape | B x T | zoo MiB | hand GPT MiB | HF MiB | x-transformers MiB |",
             "|---|---|---:|---:|---:|---:|"]
        for shape, B, T, mem in rows:
            L.append(f"| {SHAPE_LABEL[shape]} | {B} x {T} | " + " | ".join(fmt_mb(mem[k]) for k in PEERS)
                     + " |")
        self.lines += L + [""]

    # ---------------------------------------------------------- startup
    def startup(self):
        py = sys.executable
        # as in a normal install, imports read cached bytecode: allow writing it, outside the tree
        env = dict(os.environ, PYTHONPYCACHEPREFIX=os.path.join(tempfile.gettempdir(), "zoo-perf-pycache"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if self.a.threads:
            env["OMP_NUM_THREADS"] = str(self.a.threads)  # as in this process
        code = {"torch": "import time; t=time.perf_counter(); import torch; print(time.perf_counter()-t)",
                "zoo": "import time; t=time.perf_counter(); import torch, zoo; print(time.perf_counter()-t)",
                "build": "import torch, zoo, time; t=time.perf_counter(); zoo.build('gpt_tiny'); "
                         "a=time.perf_counter()-t; t=time.perf_counter(); zoo.build('gpt_tiny'); "
                         "print(a, time.perf_counter()-t)"}
        if CLOCK is time.process_time:  # CPU time of the child: robust to other jobs on the box
            code = {k: v.replace("perf_counter", "process_time") for k, v in code.items()}
        res = {k: [] for k in code}
        for k in code:  # warm-up: compiles and caches the bytecode
            subprocess.run([py, "-c", code[k]], capture_output=True, env=env, check=True)
        for r in range(self.a.startup_repeats):
            for k in code:
                out = subprocess.run([py, "-c", code[k]], capture_output=True, text=True, env=env,
                                     check=True).stdout.split()
                res[k].append([float(x) for x in out])
        t_torch = med([x[0] for x in res["torch"]])
        t_zoo = med([x[0] for x in res["zoo"]])
        extra = med([z[0] - t[0] for z, t in zip(res["zoo"], res["torch"])])
        b_first = med([x[0] for x in res["build"]])
        b_warm = med([x[1] for x in res["build"]])
        self.lines += ["### Start-up", "",
                       "Fresh interpreter per sample (subprocess, bytecode cached as in a normal "
                       "install), medians"
                       f"{' of CPU time' if CLOCK is time.process_time else ''}.", "",
                       "| | seconds |", "|---|---:|",
                       f"| `import torch` | {t_torch:.3f} |", f"| `import torch, zoo` | {t_zoo:.3f} |",
                       f"| extra for zoo (paired) | {extra:.3f} |",
                       f"| first `zoo.build(\"gpt_tiny\")` (loads the registry) | {b_first:.3f} |",
                       f"| next `zoo.build(\"gpt_tiny\")` | {b_warm:.3f} |", ""]
        self.log(f"  startup: import extra {extra:.3f}s, build first {b_first * 1e3:.0f} ms, "
                 f"warm {b_warm * 1e3:.0f} ms")
        self.targets.append(("`import zoo` over `import torch`", f"{extra:+.3f} s", "<= +0.2 s",
                             extra <= 0.2))
        self.targets.append(("`zoo.build(\"gpt_tiny\")` (first call in a process)",
                             f"{b_first * 1e3:.0f} ms", "< 50 ms", b_first < 0.05))

    # ---------------------------------------------------------- precision
    def precision(self):
        """float32 / bfloat16 / int8 weights, decoding GPT-2 small (the same tensors), paired; and
        what each costs in quality: the held-out loss of the shipped poet_gpt in each precision."""
        import copy

        from zoo.inside.costs import decode_bytes
        from zoo.run.precision import int8_supported, quantize_int8

        a = self.a
        shape = a.shapes[-1]
        base = self.models_for(shape)["zoo"]
        variants = {"float32": base, "bfloat16": copy.deepcopy(base).to(torch.bfloat16)}
        if int8_supported() and self.device.type == "cpu":
            variants["int8"] = quantize_int8(copy.deepcopy(base))
        P, N = a.prompt_len, a.new_tokens
        prompt = torch.randint(0, SHAPES[shape]["vocab_size"], (1, P), device=self.device)
        fns = {k: (lambda m=m: zoo_generate(m, prompt, N)) for k, m in variants.items()}
        bw = read_bandwidth(self.device)
        with torch.inference_mode():
            outs = {k: fn() for k, fn in fns.items()}
            agree = {k: (outs[k][0, P:] == outs["float32"][0, P:]).float().mean().item() for k in fns}
            reps = max(2, a.gen_repeats // 2)
            times = Timer(self.device).run(fns, reps, warmup=1)
        bw = max(bw, read_bandwidth(self.device))
        speed = {k: paired(times["float32"], times[k]) for k in fns}
        step_bytes = {k: decode_bytes(m, P + N // 2)["total"] for k, m in variants.items()}
        roof = {k: N / med(times[k]) * step_bytes[k] / 1e9 / bw for k in fns}
        quality = self._heldout_losses()
        flags = _cpu_flags()
        L = ["### Reduced-precision weights for decoding", "",
             f"{SHAPE_LABEL[shape]}, batch 1, {P}-token prompt + {N} greedy tokens, paired rounds.  "
             f"Memory read bandwidth measured in this run, with the same clock: {bw:,.1f} GB/s "
             f"(best of two measurements, 256 MiB sums).  Roofline = measured bytes/s over it, with the bytes "
             f"read per step at the mean context.  Quality: held-out loss of the shipped "
             f"`poet_gpt` (char-level, {quality['tokens']:,} tokens of `data/tang_heldout.txt` "
             f"in windows of {quality['window']}) in each precision.  CPU features: "
             f"{', '.join(flags) or 'none of avx512_bf16 / amx / avx512_vnni / avx_vnni'}.", "",
             "| weights | tok/s | speed-up over float32 (paired) | MB read / step | % roofline | "
             "greedy tokens equal to float32's | held-out loss (poet_gpt) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
        for k in fns:
            L.append(f"| {k} | {N / med(times[k]):,.1f} ±{50 * spread(times[k]):.0f}% | "
                     f"{speed[k]:.2f}x | {step_bytes[k] / 1e6:,.0f} | {100 * roof[k]:.0f}% | "
                     f"{100 * agree[k]:.0f}% | {fr(quality.get(k), '.4f')} |")
        self.lines += L + [""]
        self.log("  precision: " + ", ".join(f"{k} {N / med(times[k]):,.1f} tok/s ({speed[k]:.2f}x, "
                                              f"{100 * roof[k]:.0f}% roofline, loss "
                                              f"{fr(quality.get(k), '.4f')})" for k in fns))
        best = max((k for k in fns if k != "float32"), key=lambda k: speed[k])
        self.targets.append((f"decoding with reduced-precision weights: tokens/s over float32's "
                             f"({shape}, best: {best})", f"{speed[best]:.2f}x", ">= 1.5x",
                             speed[best] >= 1.5))
        self.precision_rows = {k: dict(tok_s=N / med(times[k]), speed=speed[k], roof=roof[k],
                                       loss=quality.get(k)) for k in fns}
        del variants, fns, outs

    def _heldout_losses(self, windows: int = 64) -> dict:
        """Mean next-token cross-entropy of the shipped poet_gpt on held-out poems, per precision."""
        import copy

        from zoo.run.precision import int8_supported, quantize_int8

        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(here, "..", "..", "data", "tang_heldout.txt")
        model = zoo.load("poet_gpt").eval()
        tok = model.tokenizer
        with open(path, encoding="utf-8") as fh:
            ids = torch.tensor(tok.encode(fh.read()), dtype=torch.long)
        W = model.spec.max_len
        n = min(windows, (ids.numel() - 1) // W)
        x = ids[: n * W].view(n, W)  # (n, W) inputs
        y = ids[1: n * W + 1].view(n, W)  # next tokens
        out = {"tokens": n * W, "window": W}
        variants = {"float32": model, "bfloat16": copy.deepcopy(model).to(torch.bfloat16)}
        if int8_supported():
            variants["int8"] = quantize_int8(copy.deepcopy(model))
        with torch.inference_mode():
            for k, m in variants.items():
                logits = m(x).float()  # (n, W, V)
                out[k] = F.cross_entropy(logits.flatten(0, 1), y.flatten()).item()
        return out

    # ---------------------------------------------------------- torch.compile
    def compile(self):
        rows = []
        for name in self.a.presets or zoo.list_presets():
            torch._dynamo.reset()
            try:
                m = zoo.build(name, seed=0).to(device=self.device, dtype=self.dtype).eval()
                spec = m.spec
                lo = 1 if spec.pad_id == 0 else 0
                ids = torch.randint(lo, spec.vocab_size, (4, min(128, spec.max_len)), device=self.device)
                call = (lambda mm: mm(ids, ids)) if spec.arch == "encoder_decoder" else (lambda mm: mm(ids))
                cm = torch.compile(m)
                with torch.inference_mode():
                    t0 = time.perf_counter()
                    ref, got = call(m), call(cm)
                    synchronize(self.device)
                    ct = time.perf_counter() - t0
                    err = (ref.float() - got.float()).abs().max().item()
                    times = Timer(self.device).run({"eager": lambda: call(m), "compiled": lambda: call(cm)},
                                                   self.a.repeats, warmup=1)
                rows.append((name, med(times["eager"]), med(times["compiled"]),
                             paired(times["eager"], times["compiled"]), ct, err, ""))
            except Exception as exc:  # noqa: BLE001 - report, keep going
                rows.append((name, math.nan, math.nan, math.nan, math.nan, math.nan,
                             f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"))
            self.log(f"  compile {name}: {rows[-1]}")
        L = ["### torch.compile on every preset", "",
             "Forward, batch 4 x 128 (or max_len).  Speed-up = eager time / compiled time (paired).", "",
             "| preset | eager ms | compiled ms | speed-up | first call (compile) s | max abs diff | error |",
             "|---|---:|---:|---:|---:|---:|---|"]
        for name, e, c, s, ct, err, msg in rows:
            L.append(f"| {name} | {fmt_ms(e) if e == e else '-'} | {fmt_ms(c) if c == c else '-'} | "
                     f"{s:.2f}x | {ct:.1f} | {err:.1e} | {msg} |".replace("nanx", "-").replace("nan", "-"))
        self.lines += L + [""]
        ok = all(not r[6] for r in rows)
        self.targets.append(("torch.compile works on every preset",
                             f"{sum(not r[6] for r in rows)}/{len(rows)}", "all", ok))

    # ---------------------------------------------------------- report
    def report(self, started, load_before):
        a = self.a
        load_after = os.getloadavg() if hasattr(os, "getloadavg") else (math.nan,) * 3
        cpu = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo") as fh:
                cpu = next((l.split(":", 1)[1].strip() for l in fh if l.startswith("model name")), cpu)
        except OSError:
            pass
        dev = (torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else
               f"{cpu}, {torch.get_num_threads()} thread{'s' if torch.get_num_threads() != 1 else ''}")
        head = [f"## Peer comparison ({datetime.datetime.now():%Y-%m-%d %H:%M})", "",
                f"Command: `{' '.join(['python'] + [os.path.relpath(sys.argv[0])] + sys.argv[1:])}`", "",
                f"Device: {dev}; dtype {str(self.dtype).replace('torch.', '')}; torch "
                f"{torch.__version__}; measured matmul peak **{self.peak:,.0f} GFLOP/s** "
                f"(best {a.peak_n}x{a.peak_n} matmul).  Load average before / after: "
                f"{load_before[0]:.2f} / {load_after[0]:.2f}; wall time "
                f"{time.perf_counter() - started:,.0f} s.  Clock: "
                f"{'CPU time of this process (time.process_time)' if a.clock == 'cpu' else 'wall'}"
                f".  Times are medians ±half the inter-quartile range; ratios are medians of "
                f"per-round ratios.", ""]
        tgt = ["### Targets", "", "| target | measured | goal | met |", "|---|---:|---:|---|"]
        for t, m, g, ok in self.targets:
            tgt.append(f"| {t} | {m} | {g} | {'yes' if ok else 'NO'} |")
        notes = ["", "Notes: " + "; ".join(self.notes + [
            "x-transformers has no attention biases, bias-free LayerNorms and exact GELU, so its "
            "weights are the same tensors where the layouts agree but its function differs slightly",
            "HF runs with attn_implementation='sdpa' and use_cache=False for forward/training"]) + ".", ""]
        return "\n".join(head + tgt + [""] + self.lines + notes)


def _cpu_flags() -> list[str]:
    """The CPU's native bf16 / int8 matrix features, from /proc/cpuinfo (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((l.split(":", 1)[1].split() for l in fh if l.startswith("flags")), [])
    except OSError:
        return []
    want = ("avx512_bf16", "amx_bf16", "amx_int8", "avx512_vnni", "avx_vnni", "avx512f", "avx2")
    return [f for f in want if f in flags]


def read_bandwidth(device, nbytes=256 << 20):
    """GB/s of a sum over a buffer far larger than the caches, timed with the comparison's clock
    (so a roofline fraction compares times taken the same way)."""
    x = torch.ones(nbytes // 4, device=device)
    t = Timer(torch.device(device)).run({"sum": lambda: x.sum()}, 10, warmup=2)["sum"]
    return nbytes / min(t) / 1e9


def peak_gflops(device, dtype, n):
    """The best of ten n x n matmuls, timed with the comparison's clock."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    t = Timer(torch.device(device)).run({"mm": lambda: a @ b}, 10, warmup=2)["mm"]
    return 2 * n ** 3 / min(t) / 1e9


def _clone_module(m):
    import copy

    return copy.deepcopy(m)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="cpu: time.process_time, robust to other jobs on a shared CPU machine "
                        "(use with --threads 1: spinning worker threads would count)")
    p.add_argument("--quick", action="store_true", help="reduced set (for the GPU check / a smoke run)")
    p.add_argument("--sections", default="startup,forward,train,generate,precision,load,memory,compile",
                   help="comma-separated subset")
    p.add_argument("--shapes", default="tiny,gpt2", help="model shapes for forward/memory/generate")
    p.add_argument("--presets", default="", help="presets for the compile section (default: all)")
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--gen-repeats", type=int, default=4)
    p.add_argument("--out", default=None, help="write the markdown table here")
    p.add_argument("--doc", default=None,
                   help="also put the report into this markdown file (docs/PERFORMANCE.md), "
                        "between the markers it leaves there; the rest of the file is kept")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    try:
        import x_transformers  # noqa: F401
    except ImportError:
        ACTIVE.remove("xt")
        print("x-transformers is not installed: its columns read n/a")
    if args.threads:
        torch.set_num_threads(args.threads)
    global CLOCK
    if args.clock == "cpu":
        if args.device != "cpu":
            raise SystemExit("--clock cpu measures CPU work; on a GPU use the default wall clock")
        CLOCK = time.process_time
    args.shapes = [s for s in args.shapes.split(",") if s]
    args.presets = [s for s in args.presets.split(",") if s]
    args.batches, args.lengths = [1, 4], [128, 512]
    args.gen_shapes, args.load_shape = args.shapes, args.shapes[-1]
    args.train_batch, args.train_len = 8, 256
    args.prompt_len, args.new_tokens = 32, 128
    args.load_repeats, args.startup_repeats = 5, 5
    args.peak_n = 2048 if args.device == "cpu" else 8192
    if args.quick:
        args.repeats, args.gen_repeats, args.load_repeats, args.startup_repeats = 5, 2, 3, 3
    sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    started, load_before = time.perf_counter(), os.getloadavg()
    c = Compare(args)
    torch.manual_seed(0)
    c.peak = peak_gflops(args.device, c.dtype, args.peak_n)
    c.log(f"matmul peak {c.peak:,.1f} GFLOP/s on {args.device} ({args.dtype})")
    for s in sections:
        c.log(f"[{s}]")
        getattr(c, s)()
        if args.out:  # a partial report after every section: a run cut short still leaves one
            with open(args.out, "w", encoding="utf-8") as fh:
                fh.write(c.report(started, load_before))
    peak2 = peak_gflops(args.device, c.dtype, args.peak_n)
    c.notes.append(f"matmul peak re-measured at the end: {peak2:,.0f} GFLOP/s")
    text = c.report(started, load_before)
    print("\n" + text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"wrote {args.out}")
    if args.doc:
        write_into_doc(args.doc, text)
        print(f"updated {args.doc}")


DOC_START = "<!-- tests/perf/compare.py: start of the generated report -->"
DOC_END = "<!-- tests/perf/compare.py: end of the generated report -->"


def write_into_doc(path: str, text: str) -> None:
    """Replace the generated block of ``path`` (between DOC_START and DOC_END) with ``text``;
    append the block when the markers are absent; create the file when it does not exist."""
    block = f"{DOC_START}\n{text.strip()}\n{DOC_END}\n"
    try:
        with open(path, encoding="utf-8") as fh:
            doc = fh.read()
    except FileNotFoundError:
        doc = "# Performance\n\n"
    if DOC_START in doc and DOC_END in doc:
        doc = doc[:doc.index(DOC_START)] + block + doc[doc.index(DOC_END) + len(DOC_END) + 1:]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(doc)


if __name__ == "__main__":
    main()

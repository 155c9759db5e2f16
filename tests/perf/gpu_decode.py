#!/usr/bin/env python
"""Decoding at the HBM roofline on a GPU: zoo's static KV cache captured as one CUDA graph.

One greedy step at batch 1 reads every weight once (bf16: 2 bytes per parameter) and does one
multiply-add with it, so its speed limit is ``HBM bandwidth / bytes per step``.  On a GPU the other
enemy is the host: a Python loop launches ~15 kernels per layer per token, and each launch costs
microseconds of CPU time, more than the kernel itself for a 1024-wide layer.  A CUDA graph records
the whole kernel sequence once and replays it with one launch, so what is left is the GPU's work.

What makes zoo's decoding capturable: the KV cache is preallocated (``model.new_cache(capacity)``)
and written in place, positions and greedy choices stay on the device, and nothing in the step asks
the host for a value.  So the prefill and all ``N - 1`` steps of one generation are recorded as one
graph (each step's shapes are fixed by its position, so the recording is exact); replaying it
reproduces ``zoo.generate``'s tokens, which the script checks.

Reported (one table, also written to ``$OUT/gpu_decode.md`` and ``.json``):

- decoding: ms per token from graph replays (prefill subtracted), tokens/s, bytes per step
  (:func:`zoo.accounting.decode_bytes`), % of the HBM roofline against the spec bandwidth (H200:
  4.8 TB/s) and against the bandwidth measured here; the same model's eager loop and
  ``zoo.generate`` beside it;
- prefill: a ``1 x 512`` prompt, FLOPs counted by PyTorch, MFU against the spec bf16 dense peak
  (H200: 989 TFLOP/s) and against a measured matmul peak.

Run (the device script wraps this):  ``python tests/perf/gpu_decode.py --out $OUT``
On a CPU (a dry run of the same code, tiny model, float32, no graph):  ``--dry``
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

import zoo
from zoo.accounting import decode_bytes
from zoo.bench import count_flops, matmul_peak, memory_bandwidth

SHAPES = {  # GPT-2-style decoders with random weights (the speed does not depend on the values)
    "gpt2-medium": dict(num_layers=24, d_model=1024, num_heads=16, d_ff=4096),  # 355 M
    "wide-8L-2048": dict(num_layers=8, d_model=2048, num_heads=16, d_ff=8192),  # 506 M
    "tiny": dict(num_layers=2, d_model=64, num_heads=4, d_ff=256),  # for --dry
}
SPEC_BW = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}  # bytes/s, the vendors' numbers
SPEC_PEAK = {"H200": 989e12, "H100": 989e12, "A100": 312e12}  # bf16 dense FLOP/s


def gpt_spec(shape: str, vocab: int = 50257, max_len: int = 1024) -> dict:
    return dict(name=shape, arch="decoder", vocab_size=vocab, max_len=max_len, dropout=0.0,
                tie_embeddings=True, qkv_bias=True, out_bias=True, attention="sdpa",
                mask="causal", positions="learned", norm={"kind": "layernorm", "placement": "pre"},
                ffn={"kind": "mlp", "activation": "gelu_tanh"}, **SHAPES[shape])


def decode_all(model, prompt: torch.Tensor, n: int) -> torch.Tensor:
    """Greedy decoding of ``n`` tokens, device-side only (no host sync): prefill, then ``n - 1``
    single-token steps into a preallocated cache.  Returns the new tokens ``(B, n)``."""
    B, P = prompt.shape
    cache = model.new_cache(capacity=P + n)
    out = torch.empty(B, n, dtype=torch.long, device=prompt.device)
    hidden = model(prompt, cache=cache, return_hidden=True)  # (B, P, D)
    nxt = model.lm_head(model.head_input(hidden[:, -1])).argmax(-1)  # (B,)
    out[:, 0] = nxt
    for i in range(1, n):
        hidden = model(nxt[:, None], cache=cache, return_hidden=True)  # (B, 1, D)
        nxt = model.lm_head(model.head_input(hidden[:, -1])).argmax(-1)
        out[:, i] = nxt
    return out


def capture(fn, device):
    """Record ``fn()`` as a CUDA graph (after warm-up on a side stream); returns (graph, output)."""
    s = torch.cuda.Stream(device)
    s.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream(device).wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    return graph, out


def timed(fn, device, repeats: int) -> float:
    """Median seconds of ``fn()`` (synchronised; CUDA events on a GPU)."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    return statistics.median(times)


def gpu_name(device) -> tuple[str, str | None]:
    if device.type != "cuda":
        return "cpu", None
    name = torch.cuda.get_device_name(device)
    return name, next((k for k in SPEC_BW if k in name), None)


@torch.inference_mode()
def run_shape(shape: str, device, dtype, P: int, N: int, prefill_len: int, repeats: int,
              bw: float, peak: float, spec_key: str | None) -> dict:
    torch.manual_seed(0)
    model = zoo.build(gpt_spec(shape), device=device, dtype=dtype, seed=0).eval()
    params = model.num_parameters()
    V = model.spec.vocab_size
    prompt = torch.randint(0, V, (1, P), device=device)
    ref = model.generate(prompt, N)[:, P:]  # zoo's own API, eager
    eager = decode_all(model, prompt, N)
    row = dict(shape=shape, params=params, same_tokens_eager=bool(torch.equal(eager, ref)))
    t_gen = timed(lambda: model.generate(prompt, N), device, max(2, repeats // 4))
    t_eager = timed(lambda: decode_all(model, prompt, N), device, max(2, repeats // 4))
    if device.type == "cuda":
        g_all, out_all = capture(lambda: decode_all(model, prompt, N), device)
        g_pre, _ = capture(lambda: decode_all(model, prompt, 1), device)
        g_all.replay()
        torch.cuda.synchronize(device)
        row["same_tokens_graph"] = bool(torch.equal(out_all, ref))
        t_all = timed(g_all.replay, device, repeats)
        t_pre = timed(g_pre.replay, device, repeats)
    else:  # the dry run: no graphs; the eager loop stands in, so the arithmetic is exercised
        row["same_tokens_graph"] = None
        t_all, t_pre = t_eager, timed(lambda: decode_all(model, prompt, 1), device, repeats)
    per_tok = (t_all - t_pre) / (N - 1)
    step_bytes = statistics.mean(decode_bytes(model, P + i)["total"] for i in range(1, N))
    row.update(ms_per_token=1e3 * per_tok, tok_s=1 / per_tok, gen_tok_s=N / t_gen,
               eager_tok_s=N / t_eager, graph_tok_s=N / t_all, mb_per_step=step_bytes / 1e6,
               roofline_measured=step_bytes / per_tok / bw,
               roofline_spec=(step_bytes / per_tok / SPEC_BW[spec_key]) if spec_key else None)
    # prefill: one long prompt, as generation does it (LM head on the last position only)
    long = torch.randint(0, V, (1, prefill_len), device=device)

    def prefill():
        h = model(long, cache=model.new_cache(capacity=prefill_len), return_hidden=True)
        return model.lm_head(model.head_input(h[:, -1]))

    flops = count_flops(prefill)
    t = timed(prefill, device, repeats)
    row.update(prefill_ms=1e3 * t, prefill_tflops=flops / t / 1e12,
               mfu_measured=flops / t / (peak * 1e9),
               mfu_spec=(flops / t / SPEC_PEAK[spec_key]) if spec_key else None)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def pct(x):
    return "n/a" if x is None else f"{100 * x:.0f}%"


def table(rows, head) -> str:
    L = [head, "",
         "| model | params | graph tok/s (decode only) | ms/token | MB/step | % HBM roofline (spec) | "
         "% roofline (measured bw) | eager loop tok/s | zoo.generate tok/s | same tokens | "
         "prefill ms | prefill TFLOP/s | MFU (spec) | MFU (measured peak) |",
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        same = f"{r['same_tokens_eager']}, {r['same_tokens_graph']}"
        L.append(f"| {r['shape']} | {r['params'] / 1e6:,.0f} M | {r['tok_s']:,.0f} | "
                 f"{r['ms_per_token']:.3f} | {r['mb_per_step']:,.0f} | {pct(r['roofline_spec'])} | "
                 f"{pct(r['roofline_measured'])} | {r['eager_tok_s']:,.0f} | {r['gen_tok_s']:,.0f} | "
                 f"{same} | {r['prefill_ms']:.2f} | {r['prefill_tflops']:,.1f} | "
                 f"{pct(r['mfu_spec'])} | {pct(r['mfu_measured'])} |")
    return "\n".join(L)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry", action="store_true", help="CPU, tiny model, float32: check the code")
    p.add_argument("--shapes", default="gpt2-medium,wide-8L-2048")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prefill-len", type=int, default=512)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--out", default=os.environ.get("OUT"), help="folder for gpu_decode.md/.json")
    a = p.parse_args(argv)
    if a.dry:
        device, dtype, shapes = torch.device("cpu"), torch.float32, ["tiny"]
        a.new_tokens, a.prefill_len, a.repeats = min(a.new_tokens, 8), min(a.prefill_len, 64), 3
    else:
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device: use --dry for a CPU check of this script")
        device, dtype = torch.device("cuda"), torch.bfloat16
        shapes = [s for s in a.shapes.split(",") if s]
        torch.backends.cuda.matmul.allow_tf32 = True
    name, key = gpu_name(device)
    t0 = time.perf_counter()
    bw = memory_bandwidth(device)
    peak = matmul_peak(device, dtype)
    rows = []
    for s in shapes:
        rows.append(run_shape(s, device, dtype, a.prompt_len, a.new_tokens, a.prefill_len,
                              a.repeats, bw * 1e9, peak, key))
        print(f"{s}: {rows[-1]}", flush=True)
    head = (f"### Decoding with a CUDA-graph-captured static KV cache ({name}, "
            f"{str(dtype).replace('torch.', '')}, batch 1)\n\n"
            f"{a.prompt_len}-token prompt + {a.new_tokens} greedy tokens; prefill: 1 x "
            f"{a.prefill_len} tokens; decode-only time = "
            f"(graph replay of the whole generation - graph replay of the prefill) / "
            f"{a.new_tokens - 1}.  Measured here: read bandwidth {bw:,.0f} GB/s (a sum over "
            f"{'1 GiB' if device.type == 'cuda' else '256 MiB'}), {str(dtype).replace('torch.', '')} "
            f"matmul peak {peak / 1e3:,.1f} TFLOP/s"
            + (f"; spec: {SPEC_BW[key] / 1e12:.2f} TB/s, {SPEC_PEAK[key] / 1e12:.0f} TFLOP/s"
               if key else "") + f".  torch {torch.__version__}; {time.perf_counter() - t0:.0f} s.")
    text = table(rows, head)
    print("\n" + text)
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "gpu_decode.md"), "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        with open(os.path.join(a.out, "gpu_decode.json"), "w", encoding="utf-8") as fh:
            json.dump(dict(device=name, bandwidth_gbs=bw, peak_gflops=peak, rows=rows), fh, indent=2)
        print(f"wrote {a.out}/gpu_decode.md")


if __name__ == "__main__":
    main()

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
reproduces ``zoo.run.generate``'s tokens, which the script checks.

Reported (one table, also written to ``$OUT/gpu_decode.md`` and ``.json``):

- decoding: ms per token from graph replays (prefill subtracted), tokens/s, bytes per step
  (:func:`zoo.inside.costs.decode_bytes`), % of the HBM roofline against the spec bandwidth (H200:
  4.8 TB/s) and against the bandwidth measured here; the same model's eager loop and
  ``zoo.run.generate`` beside it;
- prefill: a ``1 x 512`` prompt, FLOPs counted by PyTorch, MFU against the spec bf16 dense peak
  (H200: 989 TFLOP/s) and against a measured matmul peak.

Issue 27 adds three sections (``--sections``; all by default):

- ``compiled``: ``zoo.generate(..., compile=True)`` on the same shapes (:mod:`zoo.run.compiled`: the
  prefill and the static-cache decoding step compiled by Inductor, on CUDA with
  ``mode="reduce-overhead"``, i.e. CUDA graphs), bf16, batch 1: whole-call tokens/s, decode-only
  ms per token (the compiled step called ``N - 1`` times on its own, without the host's choosing
  between steps) and its % of the HBM roofline, the compile time, the
  graphs and recompiles (0 expected), and how many tokens agree with eager bf16 decoding (bf16
  kernels round differently, so a near-tie may flip: reported, not asserted);
- ``cpu_check``: tokens of the GPU path against the CPU path on the same weights, in float32
  (TF32 off) on a 4-layer, 1024-wide model: compiled GPU decoding vs eager CPU decoding must give
  the same greedy tokens (the script exits 1 if not);
- ``train``: a compiled bf16 training step (``torch.compile`` of the model, autocast bf16 over
  float32 weights, fused AdamW) on the GPT-2-small shape, batch 8 x 1024: ms per step, tokens/s and
  MFU = FLOPs counted by PyTorch on the eager step / time / peak (spec and measured), beside the
  eager step's.

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
from zoo.inside.costs import decode_bytes
from zoo.inside.speed import count_flops, matmul_peak, memory_bandwidth, time_paired

SHAPES = {  # GPT-2-style decoders with random weights (the speed does not depend on the values)
    "gpt2-medium": dict(num_layers=24, d_model=1024, num_heads=16, d_ff=4096),  # 355 M
    "gpt2-small": dict(num_layers=12, d_model=768, num_heads=12, d_ff=3072),  # 124 M (training)
    "check-4L-1024": dict(num_layers=4, d_model=1024, num_heads=16, d_ff=4096),  # the CPU check
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


def _agreement(a: torch.Tensor, b: torch.Tensor) -> tuple[int, float]:
    """(index of the first differing token or -1, fraction of equal tokens) of two ``(B, N)``."""
    a, b = a.cpu(), b.cpu()
    diff = (a != b).flatten().nonzero()
    return (int(diff[0]) if len(diff) else -1), float((a == b).float().mean())


@torch.inference_mode()
def run_compiled(shape: str, device, dtype, P: int, N: int, repeats: int, bw: float,
                 spec_key: str | None) -> dict:
    """``generate(..., compile=True)``: compile time, whole-call and decode-only tokens/s, %
    roofline, recompiles, agreement with eager decoding of the same dtype."""
    from zoo.run import compiled

    torch.manual_seed(0)
    model = zoo.build(gpt_spec(shape), device=device, dtype=dtype, seed=0).eval()
    prompt = torch.randint(0, model.spec.vocab_size, (1, P), device=device)
    _sync(device)
    t0 = time.perf_counter()
    out = model.generate(prompt, N, compile=True)
    _sync(device)
    first = time.perf_counter() - t0
    cs = compiled.last_steps(model)
    eager = model.generate(prompt, N)
    first_diff, agree = _agreement(out[:, P:], eager[:, P:])
    t = time_paired({"compiled": lambda: model.generate(prompt, N, compile=True),
                     "eager": lambda: model.generate(prompt, N)}, warmup=1,
                    repeats=max(3, repeats // 2), device=device)  # alternating calls
    t_n, t_e = t["compiled"].median, t["eager"].median
    # (1, 1) with strides (1, 1), as generate feeds it (a slice of `out` would have another
    # stride, a guard failure, and a recompile)
    tok = torch.tensor([[int(out[0, P])]], device=device)

    def steps():  # the compiled decoding step alone, N - 1 times (no host-side choosing)
        cs.cache.slot.fill_(P)
        for _ in range(N - 1):
            cs.decode(tok)

    per_tok = timed(steps, device, max(3, repeats // 2)) / (N - 1)
    step_bytes = statistics.mean(decode_bytes(model, P + i)["total"] for i in range(1, N))
    row = dict(shape=shape, params=model.num_parameters(), first_call_s=first,
               compile_s=dict(cs.compile_seconds), graphs=dict(cs.compiles),
               recompiles=cs.recompiles, compiled_tok_s=N / t_n, eager_tok_s=N / t_e,
               speedup=t_e / t_n, decode_ms_per_token=1e3 * per_tok, decode_tok_s=1 / per_tok,
               mb_per_step=step_bytes / 1e6, roofline_measured=step_bytes / per_tok / bw,
               roofline_spec=(step_bytes / per_tok / SPEC_BW[spec_key]) if spec_key else None,
               first_difference_vs_eager=first_diff, agreement_vs_eager=agree)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


@torch.inference_mode()
def run_cpu_check(shape: str, device, P: int, N: int) -> dict:
    """Greedy tokens of compiled decoding on ``device`` against eager decoding on the CPU, the
    same float32 weights (TF32 off on the device, so both compute in float32)."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        cpu = zoo.build(gpt_spec(shape), seed=0).eval()  # float32 on the CPU
        dev_model = zoo.build(gpt_spec(shape), seed=0).to(device).eval()
        prompt = torch.randint(0, cpu.spec.vocab_size, (1, P), generator=torch.Generator().manual_seed(2))
        ref = cpu.generate(prompt, N)
        got = dev_model.generate(prompt.to(device), N, compile=True).cpu()
        eager = dev_model.generate(prompt.to(device), N).cpu()
        first_diff, agree = _agreement(got, ref)
        # how close the CPU's top two logits were where the tokens part (a near-tie flips on rounding)
        gap = None
        if first_diff >= 0:
            logits = cpu(got[:, :P + first_diff])[0, -1]
            top = logits.topk(2).values
            gap = float(top[0] - top[1])
        return dict(shape=shape, new_tokens=N, same_tokens=bool(torch.equal(got, ref)),
                    same_tokens_eager_device=bool(torch.equal(eager, ref)),
                    first_difference=first_diff, agreement=agree, cpu_top2_gap_at_difference=gap)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def run_train(shape: str, device, batch: int, T: int, steps: int, peak: float,
              spec_key: str | None) -> dict:
    """A compiled bf16 training step (autocast over float32 weights, fused AdamW) vs the eager
    step, on random tokens; MFU = FLOPs counted on the eager step / time / peak."""
    import torch.nn.functional as F

    from zoo.inside.speed import count_flops

    torch.manual_seed(0)
    model = zoo.build(gpt_spec(shape), device=device, seed=0).train()
    V = model.spec.vocab_size
    ids = torch.randint(0, V, (batch, T + 1), device=device)
    x, y = ids[:, :-1], ids[:, 1:]
    fused = device.type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused) if fused else \
        torch.optim.AdamW(model.parameters(), lr=1e-4)
    amp = dict(device_type=device.type, dtype=torch.bfloat16)
    compiled_model = torch.compile(model)

    def step_of(run):
        def step():
            with torch.autocast(**amp):
                logits = run(x)  # (B, T, V)
                loss = F.cross_entropy(logits.float().view(-1, V), y.reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
        return step

    eager_step, comp_step = step_of(model), step_of(compiled_model)
    flops = count_flops(eager_step)
    _sync(device)
    t0 = time.perf_counter()
    comp_step()
    _sync(device)
    compile_s = time.perf_counter() - t0
    t_c = timed(comp_step, device, steps)
    t_e = timed(eager_step, device, max(3, steps // 2))
    n_tok = batch * T
    row = dict(shape=shape, params=model.num_parameters(), batch=batch, seq=T, flops=flops,
               compile_s=compile_s, compiled_ms=1e3 * t_c, eager_ms=1e3 * t_e,
               compiled_tok_s=n_tok / t_c, eager_tok_s=n_tok / t_e, speedup=t_e / t_c,
               mfu_compiled_measured=flops / t_c / (peak * 1e9),
               mfu_eager_measured=flops / t_e / (peak * 1e9),
               mfu_compiled_spec=(flops / t_c / SPEC_PEAK[spec_key]) if spec_key else None,
               mfu_eager_spec=(flops / t_e / SPEC_PEAK[spec_key]) if spec_key else None)
    del model, compiled_model, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def pct(x):
    return "n/a" if x is None else f"{100 * x:.0f}%"


def compiled_table(rows) -> str:
    L = ["", "", "#### Compiled decoding: generate(..., compile=True)", "",
         "| model | params | first call s | graphs | recompiles | tok/s (whole call) | eager tok/s | "
         "speedup | decode ms/token | % HBM roofline (spec) | % roofline (measured bw) | "
         "agreement with eager |", "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        L.append(f"| {r['shape']} | {r['params'] / 1e6:,.0f} M | {r['first_call_s']:.0f} | "
                 f"{r['graphs']} | {r['recompiles']} | {r['compiled_tok_s']:,.0f} | "
                 f"{r['eager_tok_s']:,.0f} | {r['speedup']:.2f}x | {r['decode_ms_per_token']:.3f} | "
                 f"{pct(r['roofline_spec'])} | {pct(r['roofline_measured'])} | "
                 f"{100 * r['agreement_vs_eager']:.0f}% (first difference: "
                 f"{r['first_difference_vs_eager']}) |")
    return "\n".join(L)


def check_table(rows) -> str:
    L = ["", "", "#### Tokens: compiled GPU decoding vs eager CPU decoding (float32, TF32 off)", ""]
    for r in rows:
        L.append(f"- {r['shape']}, {r['new_tokens']} tokens: same tokens {r['same_tokens']} "
                 f"(eager on the device: {r['same_tokens_eager_device']}); agreement "
                 f"{100 * r['agreement']:.0f}%, first difference {r['first_difference']}"
                 + (f", CPU top-2 logit gap there {r['cpu_top2_gap_at_difference']:.2e}"
                    if r["cpu_top2_gap_at_difference"] is not None else ""))
    return "\n".join(L)


def train_table(rows) -> str:
    L = ["", "", "#### Training step (bf16 autocast, fused AdamW)", "",
         "| model | batch x seq | compile s | compiled ms | eager ms | speedup | tokens/s compiled | "
         "MFU compiled (spec) | MFU compiled (measured) | MFU eager (spec) | MFU eager (measured) |",
         "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        L.append(f"| {r['shape']} | {r['batch']} x {r['seq']} | {r['compile_s']:.0f} | "
                 f"{r['compiled_ms']:.1f} | {r['eager_ms']:.1f} | {r['speedup']:.2f}x | "
                 f"{r['compiled_tok_s']:,.0f} | {pct(r['mfu_compiled_spec'])} | "
                 f"{pct(r['mfu_compiled_measured'])} | {pct(r['mfu_eager_spec'])} | "
                 f"{pct(r['mfu_eager_measured'])} |")
    return "\n".join(L)


def table(rows, head) -> str:
    L = [head, "",
         "| model | params | graph tok/s (decode only) | ms/token | MB/step | % HBM roofline (spec) | "
         "% roofline (measured bw) | eager loop tok/s | zoo.run.generate tok/s | same tokens | "
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
    p.add_argument("--sections", default="graph,compiled,cpu_check,train",
                   help="comma-separated: graph (the hand-captured CUDA graph), compiled, "
                        "cpu_check, train")
    p.add_argument("--compiled-shapes", default="gpt2-medium")
    p.add_argument("--check-shape", default="check-4L-1024")
    p.add_argument("--check-tokens", type=int, default=24)
    p.add_argument("--train-shape", default="gpt2-small")
    p.add_argument("--train-batch", type=int, default=8)
    p.add_argument("--train-seq", type=int, default=1024)
    p.add_argument("--train-steps", type=int, default=10)
    a = p.parse_args(argv)
    sections = {x for x in a.sections.split(",") if x}
    if a.dry:
        device, dtype, shapes = torch.device("cpu"), torch.float32, ["tiny"]
        a.new_tokens, a.prefill_len, a.repeats = min(a.new_tokens, 8), min(a.prefill_len, 64), 3
        a.compiled_shapes = a.check_shape = a.train_shape = "tiny"
        a.check_tokens, a.train_batch, a.train_seq, a.train_steps = 8, 2, 64, 3
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: skipped (use --dry for a CPU check of this script)")
            return
        device, dtype = torch.device("cuda"), torch.bfloat16
        shapes = [s for s in a.shapes.split(",") if s]
        torch.backends.cuda.matmul.allow_tf32 = True
    name, key = gpu_name(device)
    t0 = time.perf_counter()
    bw = memory_bandwidth(device)
    peak = matmul_peak(device, dtype)
    rows, comp_rows, check_rows, train_rows = [], [], [], []
    failed = False

    def report(final: bool = False) -> None:
        """The report so far, printed at the end and written after every section (a run cut
        short by the device script's timeout keeps what it finished)."""
        head = (f"### Decoding with a CUDA-graph-captured static KV cache ({name}, "
                f"{str(dtype).replace('torch.', '')}, batch 1)\n\n"
                f"{a.prompt_len}-token prompt + {a.new_tokens} greedy tokens; prefill: 1 x "
                f"{a.prefill_len} tokens; decode-only time = "
                f"(graph replay of the whole generation - graph replay of the prefill) / "
                f"{a.new_tokens - 1}.  Measured here: read bandwidth {bw:,.0f} GB/s (a sum over "
                f"{'1 GiB' if device.type == 'cuda' else '256 MiB'}), "
                f"{str(dtype).replace('torch.', '')} matmul peak {peak / 1e3:,.1f} TFLOP/s"
                + (f"; spec: {SPEC_BW[key] / 1e12:.2f} TB/s, {SPEC_PEAK[key] / 1e12:.0f} TFLOP/s"
                   if key else "")
                + f".  torch {torch.__version__}; {time.perf_counter() - t0:.0f} s"
                + ("." if final else " (partial: sections still running)."))
        text = (table(rows, head) + (compiled_table(comp_rows) if comp_rows else "")
                + (check_table(check_rows) if check_rows else "")
                + (train_table(train_rows) if train_rows else ""))
        if final:
            print("\n" + text)
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, "gpu_decode.md"), "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
            with open(os.path.join(a.out, "gpu_decode.json"), "w", encoding="utf-8") as fh:
                json.dump(dict(device=name, bandwidth_gbs=bw, peak_gflops=peak, rows=rows,
                               compiled=comp_rows, cpu_check=check_rows, train=train_rows), fh,
                          indent=2)
            if final:
                print(f"wrote {a.out}/gpu_decode.md")

    for s in (shapes if "graph" in sections else []):
        rows.append(run_shape(s, device, dtype, a.prompt_len, a.new_tokens, a.prefill_len,
                              a.repeats, bw * 1e9, peak, key))
        print(f"{s}: {rows[-1]}", flush=True)
        report()
    for s in ([x for x in a.compiled_shapes.split(",") if x] if "compiled" in sections else []):
        comp_rows.append(run_compiled(s, device, dtype, a.prompt_len, a.new_tokens, a.repeats,
                                      bw * 1e9, key))
        print(f"compiled {s}: {comp_rows[-1]}", flush=True)
        report()
    if "cpu_check" in sections:
        check_rows.append(run_cpu_check(a.check_shape, device, a.prompt_len, a.check_tokens))
        print(f"cpu check: {check_rows[-1]}", flush=True)
        failed |= not check_rows[-1]["same_tokens"]
        report()
    if "train" in sections:
        tpeak = peak if dtype == torch.bfloat16 else matmul_peak(device, torch.bfloat16)
        train_rows.append(run_train(a.train_shape, device, a.train_batch, a.train_seq,
                                    a.train_steps, tpeak, key))
        print(f"train: {train_rows[-1]}", flush=True)
    report(final=True)
    if failed:
        raise SystemExit("the GPU path's tokens differ from the CPU path's (see cpu_check)")


if __name__ == "__main__":
    main()

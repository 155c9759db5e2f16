"""Benchmarks: how fast is this model, here, and how close to the hardware's limit?

``zoo bench SPEC_OR_CHECKPOINT`` (and :func:`bench` in code) times three things a user cares about:

- **forward**: one batch of ``(B, T)`` random token ids through the model, in eval mode, no grad;
- **generate**: greedy decoding with the KV cache, ``new_tokens`` after a ``prompt_len`` prompt
  (decoder and encoder-decoder models);
- **train**: one AdamW step (forward, cross-entropy, backward, optimizer step) in train mode.

Every timing follows the same protocol: a few warm-up calls (first calls allocate memory, pick
kernels and, under ``torch.compile``, compile), then ``repeats`` timed calls, each bracketed by a
device synchronisation.  We report the **median** (robust to a noisy neighbour on a shared machine)
and the **spread** ``(p75 - p25) / median`` so you can see whether a number can be trusted.

Throughput is reported three ways: tokens/s; achieved GFLOP/s, where the FLOPs of one call are
*counted* by PyTorch's ``FlopCounterMode`` on the real model (so plugins with unusual shapes are
counted correctly; attention counts the full ``Tq x Tk`` product, the usual convention); and the
fraction of a **matmul peak measured in the same run** (the best of several large square matmuls in
the model's dtype on the model's device).  A forward at 70-80% of that peak is as good as PyTorch
gets on a CPU; a small model at 10% is dominated by per-op overhead, not by arithmetic.

Decoding is judged by a different yardstick, the **roofline**.  One greedy step at batch 1 reads
every weight once and does one multiply-add with it (two FLOPs per 4 bytes in float32), while a
CPU can do ~50 FLOPs in the time it reads 4 bytes: the step waits on memory, it is
*memory-bound*.  Its speed limit is ``memory bandwidth / bytes read per token`` (weights + KV cache,
:func:`zoo.inside.costs.decode_bytes`), with the bandwidth **measured in the same run**
(:func:`memory_bandwidth`); the ``% roofline`` column says how close decoding gets.  A prefill
(the prompt's forward) multiplies a whole ``T x D`` block by each weight, reusing every byte ``T``
times: it is *compute-bound* and judged by the fraction of the matmul peak.

Under ``compile=True`` (``zoo bench --compile``) the forward and the training step time the
``torch.compile``'d model, and decoding times ``generate(..., compile=True)`` (:mod:`zoo.run.compiled`:
the prefill and the static-cache decoding step compiled, one graph for every step) **paired** with
eager decoding (alternating calls): the report gives both tokens/s, their ratio, the graphs compiled
and the recompiles counted over the timed calls (0 when every step runs the same graph), and the
first call's compile time.
"""
from __future__ import annotations

import functools
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch

from .costs import decode_bytes
from ..errors import ZooError


# ---------------------------------------------------------------------- timing
def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels (CUDA runs asynchronously; the CPU does not)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        torch.mps.synchronize()


@dataclass
class Timing:
    """Seconds per call over ``repeats`` timed calls."""

    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def spread(self) -> float:
        """Inter-quartile range relative to the median (0.05 = the middle half lies within 5%)."""
        if len(self.times) < 4:
            return (max(self.times) - min(self.times)) / self.median if self.median else 0.0
        q = statistics.quantiles(self.times, n=4)
        return (q[2] - q[0]) / self.median if self.median else 0.0


def time_fn(fn: Callable[[], Any], *, warmup: int = 2, repeats: int = 10,
            device: torch.device | str = "cpu", min_time: float = 0.0) -> Timing:
    """Call ``fn`` ``warmup`` times, then time ``repeats`` calls (each synchronised).

    ``min_time``: keep timing past ``repeats`` until this many seconds were spent (short calls get
    more samples)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times: list[float] = []
    spent = 0.0
    while len(times) < repeats or spent < min_time:
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        dt = time.perf_counter() - t0
        times.append(dt)
        spent += dt
        if len(times) >= 10 * max(repeats, 1):
            break
    return Timing(times)


def time_paired(fns: dict[str, Callable[[], Any]], *, warmup: int = 1, repeats: int = 5,
                device: torch.device | str = "cpu") -> dict[str, Timing]:
    """Time several functions against each other: ``warmup`` calls of each, then ``repeats``
    rounds calling each once, in an order that alternates between rounds, so a noisy neighbour
    (or the CPU's clock) hits every contestant alike.  One :class:`Timing` per name."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    names, times = list(fns), {k: [] for k in fns}
    for r in range(repeats):
        for k in (names if r % 2 == 0 else names[::-1]):
            synchronize(device)
            t0 = time.perf_counter()
            fns[k]()
            synchronize(device)
            times[k].append(time.perf_counter() - t0)
    return {k: Timing(v) for k, v in times.items()}


def matmul_peak(device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32,
                n: int | None = None, repeats: int = 10) -> float:
    """Measured peak of a large square ``n x n`` matmul in GFLOP/s (the best of ``repeats``).

    The yardstick for "fraction of peak": the same device, dtype and thread count as the model."""
    dev = torch.device(device)
    if n is None:
        n = 1024 if dev.type == "cpu" else 8192
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    t = time_fn(lambda: a @ b, warmup=2, repeats=repeats, device=dev)
    return 2 * n ** 3 / t.min / 1e9


def memory_bandwidth(device: torch.device | str = "cpu", nbytes: int | None = None,
                     repeats: int = 10) -> float:
    """Measured read bandwidth in GB/s: the best of ``repeats`` sums over a float32 buffer far
    larger than the caches (256 MiB on a CPU, 1 GiB on a GPU), with this process's thread count.

    A sum reads each byte once and does one addition per 4 bytes, so like a decoding step it is
    limited by memory, not arithmetic: the yardstick for "fraction of the roofline"."""
    dev = torch.device(device)
    if nbytes is None:
        nbytes = (256 << 20) if dev.type == "cpu" else (1 << 30)
    x = torch.ones(nbytes // 4, device=dev, dtype=torch.float32)
    t = time_fn(lambda: x.sum(), warmup=2, repeats=repeats, device=dev)
    return nbytes / t.min / 1e9


@functools.lru_cache(maxsize=4)
def machine_bandwidth(device: str = "cpu") -> float:
    """:func:`memory_bandwidth` measured once per process and device (for the UI's speed line)."""
    return memory_bandwidth(device, repeats=5)


def decode_speed(model, new_tokens: int, seconds: float, context_len: int,
                 bandwidth: float | None = None) -> dict:
    """How a finished generation compares with the memory roofline.

    ``new_tokens`` generated in ``seconds`` (batch 1) at about ``context_len`` tokens of context:
    ``{"tokens_per_s", "bytes_per_token", "bandwidth_gbs", "roofline"}`` where ``roofline`` is the
    achieved bytes/s over the bandwidth (measured once per process unless given, in GB/s)."""
    per_token = decode_bytes(model, max(1, context_len))["total"]
    bw = bandwidth if bandwidth is not None else machine_bandwidth(str(model_device(model)))
    rate = new_tokens / seconds if seconds > 0 else 0.0
    return {"tokens_per_s": rate, "bytes_per_token": per_token, "bandwidth_gbs": bw,
            "roofline": rate * per_token / 1e9 / bw if bw else 0.0}


def _attention_flops(q, k, v, *args, out_shape=None, **kwargs) -> int:
    """``softmax(q k^T) v``: two ``(Tq x hd) @ (hd x Tk)``-sized products per head."""
    B, h, Tq, hd = q
    return 4 * B * h * Tq * k[-2] * hd


def _attention_backward_flops(grad, q, k, v, *args, out_shape=None, **kwargs) -> int:
    return 2 * _attention_flops(q, k, v)


def count_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of one call of ``fn``, counted by ``torch.utils.flop_counter.FlopCounterMode``.

    PyTorch's counter knows the CUDA attention kernels but not the CPU flash-attention kernel; we
    add it (full ``Tq x Tk`` product, the usual convention, also for causal attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    extra = {}
    aten = torch.ops.aten
    if hasattr(aten, "_scaled_dot_product_flash_attention_for_cpu"):
        extra[aten._scaled_dot_product_flash_attention_for_cpu] = _attention_flops
        extra[aten._scaled_dot_product_flash_attention_for_cpu_backward] = _attention_backward_flops
    with FlopCounterMode(display=False, custom_mapping=extra) as counter:
        fn()
    return int(counter.get_total_flops())


# ---------------------------------------------------------------------- inputs and steps
def model_device(model: torch.nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def model_dtype(model: torch.nn.Module) -> torch.dtype:
    p = next((p for p in model.parameters() if p.is_floating_point()), None)
    return p.dtype if p is not None else torch.float32


def random_ids(spec, batch: int, length: int, device, generator: torch.Generator | None = None):
    """``(batch, length)`` token ids avoiding the pad id (so no padding mask is built)."""
    lo = 1 if spec.pad_id == 0 else 0
    ids = torch.randint(lo, spec.vocab_size, (batch, length), generator=generator)
    if spec.pad_id is not None and spec.pad_id > 0:
        ids[ids == spec.pad_id] = (spec.pad_id + 1) % spec.vocab_size
    return ids.to(device)


def forward_fn(model, spec, ids: torch.Tensor) -> Callable[[], torch.Tensor]:
    """A no-argument callable running one forward of ``model`` on ``ids``."""
    if spec.arch == "encoder_decoder":
        return lambda: model(ids, ids)
    return lambda: model(ids)


def loss_of(out: torch.Tensor, spec, ids: torch.Tensor) -> torch.Tensor:
    """A cross-entropy loss for any head: next-token / MLM logits ``(B, T, V)`` against ``ids``,
    classifier logits ``(B, L)`` against label 0, hidden states against zero (mean square)."""
    import torch.nn.functional as F

    if out.dim() == 3 and out.size(-1) == spec.vocab_size:
        return F.cross_entropy(out.flatten(0, 1).float(), ids.flatten())
    if out.dim() == 2:
        return F.cross_entropy(out.float(), torch.zeros(out.size(0), dtype=torch.long,
                                                        device=out.device))
    return out.float().pow(2).mean()


def train_step_fn(model, spec, ids: torch.Tensor, lr: float = 1e-4):
    """A callable running one AdamW step (forward, loss, backward, step) on ``ids``."""
    params = [p for p in model.parameters() if p.requires_grad]
    fused = params[0].device.type == "cuda" if params else False
    opt = torch.optim.AdamW(params, lr=lr, fused=fused) if fused else torch.optim.AdamW(params, lr=lr)
    fwd = forward_fn(model, spec, ids)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_of(fwd(), spec, ids)
        loss.backward()
        opt.step()
        return loss

    return step


@torch.no_grad()
def greedy(model, prompt: torch.Tensor, new_tokens: int, src: torch.Tensor | None = None):
    """Greedy decoding with the KV cache: ``prompt (B, P) -> (B, P + new_tokens)``.

    Uses ``model.generate`` when the model has one (zoo's generation API), else a minimal loop over
    ``model(ids, cache=...)`` (decoder) or ``model.decode`` (encoder-decoder)."""
    if hasattr(model, "generate"):
        try:
            if src is not None:
                return model.generate(src, max_new_tokens=new_tokens, do_sample=False)
            return model.generate(prompt, max_new_tokens=new_tokens, do_sample=False)
        except TypeError:
            pass  # an older/other generate signature: fall back to the plain loop
    cache = model.new_cache()
    if src is not None:
        memory, mem_pad = model.encode(src)
        logits = model.decode(prompt, memory, mem_pad, cache=cache)
    else:
        logits = model(prompt, cache=cache)
    out = [prompt]
    for i in range(new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        out.append(nxt)
        if i + 1 == new_tokens:
            break
        logits = model.decode(nxt, memory, mem_pad, cache=cache) if src is not None else \
            model(nxt, cache=cache)
    return torch.cat(out, dim=1)


# ---------------------------------------------------------------------- the benchmark
@dataclass
class Result:
    """One timed task.  ``tokens``: tokens processed (or generated) per call."""

    task: str
    shape: str
    median_s: float
    min_s: float
    spread: float
    tokens: int
    flops: int | None = None
    peak_gflops: float | None = None
    repeats: int = 0
    bytes_read: int | None = None  # memory traffic of one call (decoding: weights + KV cache)
    steps: int = 1  # forward passes in one call (decoding: one per new token)
    bandwidth_gbs: float | None = None  # measured in the same run

    @property
    def gbytes_per_s(self) -> float | None:
        return None if self.bytes_read is None else self.bytes_read / self.median_s / 1e9

    @property
    def fraction_of_roofline(self) -> float | None:
        """Achieved bytes/s over the measured bandwidth: 1.0 = as fast as memory allows."""
        g = self.gbytes_per_s
        return None if g is None or not self.bandwidth_gbs else g / self.bandwidth_gbs

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.median_s

    @property
    def gflops(self) -> float | None:
        return None if self.flops is None else self.flops / self.median_s / 1e9

    @property
    def fraction_of_peak(self) -> float | None:
        g = self.gflops
        return None if g is None or not self.peak_gflops else g / self.peak_gflops

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(tokens_per_s=self.tokens_per_s, gflops=self.gflops,
                 fraction_of_peak=self.fraction_of_peak, gbytes_per_s=self.gbytes_per_s,
                 fraction_of_roofline=self.fraction_of_roofline)
        return d


@dataclass
class Report:
    model: str
    device: str
    dtype: str
    threads: int
    parameters: int
    peak_gflops: float
    compiled: bool = False
    bandwidth_gbs: float | None = None
    precision: str = ""
    results: list[Result] = field(default_factory=list)
    #: compiled decoding (``compile=True``): eager vs compiled tokens/s, graphs, recompiles
    decode_compiled: dict | None = None

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "results"}
        d["results"] = [r.to_dict() for r in self.results]
        return d

    def table(self) -> str:
        """A plain-text table, one row per task."""
        head = (f"{self.model}: {self.parameters:,} parameters on {self.device} "
                f"({self.precision or self.dtype}, "
                f"{self.threads} thread{'s' if self.threads != 1 else ''}"
                f"{', torch.compile' if self.compiled else ''}); "
                f"matmul peak {self.peak_gflops:,.1f} GFLOP/s"
                + (f"; memory bandwidth {self.bandwidth_gbs:,.1f} GB/s"
                   if self.bandwidth_gbs else ""))
        rows = [("task", "shape", "median", "spread", "tokens/s", "GFLOP/s", "% peak", "MB/step",
                 "GB/s", "% roofline")]
        for r in self.results:
            per_tok = None if r.bytes_read is None else r.bytes_read / r.steps
            rows.append((r.task, r.shape, _fmt_time(r.median_s), f"±{100 * r.spread / 2:.1f}%",
                         f"{r.tokens_per_s:,.0f}",
                         "-" if r.gflops is None else f"{r.gflops:,.1f}",
                         "-" if r.fraction_of_peak is None else f"{100 * r.fraction_of_peak:.0f}%",
                         "-" if per_tok is None else f"{per_tok / 1e6:,.1f}",
                         "-" if r.gbytes_per_s is None else f"{r.gbytes_per_s:,.1f}",
                         "-" if r.fraction_of_roofline is None
                         else f"{100 * r.fraction_of_roofline:.0f}%"))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines = [head]
        for j, row in enumerate(rows):
            lines.append("  " + "  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                                          for i, (c, w) in enumerate(zip(row, widths))))
            if j == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
        dc = self.decode_compiled
        if dc and dc.get("refused"):
            lines.append(f"compiled decoding: not available ({dc['refused']}); generate is eager")
        elif dc:
            lines.append(
                f"compiled decoding: {dc['compiled_tokens_per_s']:,.0f} tokens/s vs eager "
                f"{dc['eager_tokens_per_s']:,.0f} tokens/s = {dc['speedup']:.2f}x (paired, "
                f"{dc['repeats']} rounds); graphs {dc['graphs']}, recompiles {dc['recompiles']}; "
                "first call " + ", ".join(f"{k} {v:.1f} s" for k, v in dc["compile_s"].items()))
        return "\n".join(lines)


def _fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.1f} ms"
    return f"{s * 1e6:.0f} us"


TASKS = ("forward", "prefill", "generate", "train")


def bench(model: torch.nn.Module, *, batch: int = 1, seq_len: int = 128, prompt_len: int = 32,
          new_tokens: int = 64, train_batch: int | None = None, warmup: int = 2, repeats: int = 10,
          tasks: tuple[str, ...] = TASKS, compile: bool = False,
          peak: float | None = None, bandwidth: float | None = None, name: str | None = None,
          seed: int = 0) -> Report:
    """Time ``tasks`` on ``model`` (on its current device and dtype) and return a :class:`Report`.

    ``prefill``: the prompt's forward into a fresh KV cache (``batch x prompt_len``), judged by the
    fraction of the matmul ``peak``; ``generate``: greedy decoding of ``new_tokens`` after it,
    judged by the fraction of the memory roofline (``bandwidth``; both measured here when None).

    ``seq_len`` is clipped to the spec's ``max_len``.  ``compile=True`` wraps the model in
    ``torch.compile`` (compilation happens in an untimed first call) and decodes with
    ``generate(..., compile=True)``, timed against eager decoding (``Report.decode_compiled``).  The training step updates
    ``model``'s weights in place: benchmark a throw-away model.
    """
    spec = getattr(model, "spec", None)
    if spec is None:
        raise ZooError("the model has no zoo spec", where="model",
                       fix="benchmark models built by zoo.build / zoo.load")
    unknown = set(tasks) - set(TASKS)
    if unknown:
        raise ZooError(f"unknown task(s) {sorted(unknown)}", where="tasks", options=list(TASKS))
    dev, dt = model_device(model), model_dtype(model)
    decodes = spec.arch != "encoder" and ("generate" in tasks or "prefill" in tasks)
    peak = matmul_peak(dev, dt) if peak is None else peak
    if bandwidth is None and decodes:
        bandwidth = memory_bandwidth(dev)
    report = Report(model=name or spec.name, device=str(dev), dtype=str(dt).replace("torch.", ""),
                    threads=torch.get_num_threads(), parameters=_num_weights(model),
                    peak_gflops=peak, compiled=compile, bandwidth_gbs=bandwidth,
                    precision=getattr(model, "quantized", ""))
    b = _Bench(model, torch.compile(model) if compile else model, spec, dev,
               torch.Generator().manual_seed(seed), warmup, repeats, peak, bandwidth)
    T = min(seq_len, spec.max_len)
    P = max(1, min(prompt_len, spec.max_len - new_tokens))  # the prompt, and what follows it
    n_new = min(new_tokens, spec.max_len - P)
    was_training = model.training
    try:
        if "forward" in tasks:
            report.results.append(b.forward(batch, T))
        prompt = random_ids(spec, batch, P, dev, b.gen) if decodes else None  # drawn after forward's
        if "prefill" in tasks and decodes:
            report.results.append(b.prefill(prompt))
        if "generate" in tasks and decodes:
            if compile:
                result, report.decode_compiled = b.generate_compiled(prompt, n_new)
                report.results.append(result)
            else:
                report.results.append(b.generate(prompt, n_new))
        if "train" in tasks:
            report.results.append(b.train(train_batch or max(batch, 8), T))
    finally:
        model.train(was_training)
    return report


@dataclass
class _Bench:
    """What every timed task of one :func:`bench` shares; one method per task, each returning its
    :class:`Result`.  ``run`` is the model to time (compiled or not); FLOPs are counted on
    ``model`` itself."""

    model: torch.nn.Module
    run: Callable
    spec: Any
    dev: torch.device
    gen: torch.Generator
    warmup: int
    repeats: int
    peak: float
    bandwidth: float | None

    def forward(self, batch: int, T: int) -> Result:
        self.model.eval()
        ids = random_ids(self.spec, batch, T, self.dev, self.gen)
        fwd = forward_fn(self.run, self.spec, ids)
        with torch.inference_mode():
            fwd()  # compile (if any) outside the FLOP counter
            flops = count_flops(forward_fn(self.model, self.spec, ids))
            t = time_fn(fwd, warmup=self.warmup, repeats=self.repeats, device=self.dev)
        n_tok = batch * T * (2 if self.spec.arch == "encoder_decoder" else 1)
        return Result("forward", f"{batch}x{T}", t.median, t.min, t.spread, n_tok, flops, self.peak,
                      len(t.times))

    def prefill(self, prompt: torch.Tensor) -> Result:
        """What generation does first: the prompt into a fresh cache, the LM head on the last
        position only (an encoder-decoder: the source through the encoder, one decoder step)."""
        m, spec = self.model, self.spec
        m.eval()

        def pre():
            if spec.arch == "encoder_decoder":
                h = m.decode(prompt[:, :1], *m.encode(prompt), cache=m.new_cache(), return_hidden=True)
            else:
                h = m(prompt, cache=m.new_cache(), return_hidden=True)
            return m.lm_head(m.head_input(h[:, -1]))

        with torch.inference_mode():
            pre()
            flops = count_flops(pre)
            t = time_fn(pre, warmup=self.warmup, repeats=self.repeats, device=self.dev)
        B, P = prompt.shape
        return Result("prefill", f"{B}x{P}", t.median, t.min, t.spread, B * P, flops, self.peak,
                      len(t.times))

    def generate(self, prompt: torch.Tensor, n_new: int) -> Result:
        m = self.model
        m.eval()
        B, P = prompt.shape
        if self.spec.arch == "encoder_decoder":
            g = lambda: greedy(m, prompt[:, :1], n_new, prompt)  # noqa: E731 - the source is the prompt
        else:
            g = lambda: greedy(m, prompt, n_new)  # noqa: E731
        t = time_fn(g, warmup=max(1, self.warmup // 2), repeats=max(3, self.repeats // 2),
                    device=self.dev)
        return Result("generate", f"{B}x{P}+{n_new}", t.median, t.min, t.spread, B * n_new, None,
                      self.peak, len(t.times), bytes_read=generate_bytes(m, P, n_new, B),
                      bandwidth_gbs=self.bandwidth, steps=n_new)

    def generate_compiled(self, prompt: torch.Tensor, n_new: int) -> tuple[Result, dict]:
        """Greedy decoding with ``compile=True`` (:mod:`zoo.run.compiled`) paired with eager decoding:
        the compiled :class:`Result` (the table's ``generate`` row) and the comparison.  A model
        compiled decoding refuses (an encoder-decoder, a non-causal mask) is timed eagerly, and
        the reason reported."""
        from ..run import compiled

        m = self.model
        m.eval()
        try:
            compiled.check_compilable(m)
        except ZooError as exc:
            return self.generate(prompt, n_new), {"refused": str(exc)}
        B, P = prompt.shape
        with torch.inference_mode():
            t0 = time.perf_counter()
            m.generate(prompt, n_new, do_sample=False, compile=True)  # compiles
            first = time.perf_counter() - t0
            cs = compiled.last_steps(m)
            graphs = dict(cs.compiles)
            t = time_paired({"compiled": lambda: m.generate(prompt, n_new, do_sample=False,
                                                            compile=True),
                             "eager": lambda: m.generate(prompt, n_new, do_sample=False)},
                            warmup=max(1, self.warmup // 2), repeats=max(3, self.repeats // 2),
                            device=self.dev)
        tc, te = t["compiled"], t["eager"]
        result = Result("generate", f"{B}x{P}+{n_new}", tc.median, tc.min, tc.spread, B * n_new,
                        None, self.peak, len(tc.times), bytes_read=generate_bytes(m, P, n_new, B),
                        bandwidth_gbs=self.bandwidth, steps=n_new)
        return result, dict(
            compiled_tokens_per_s=B * n_new / tc.median, eager_tokens_per_s=B * n_new / te.median,
            speedup=te.median / tc.median, compiled_s=tc.times, eager_s=te.times,
            repeats=len(tc.times), graphs=dict(cs.compiles),
            recompiles=cs.recompiles, recompiles_while_timed=sum(cs.compiles.values()) - sum(graphs.values()),
            first_call_s=first, compile_s=dict(cs.compile_seconds))

    def train(self, tb: int, T: int) -> Result:
        self.model.train()
        ids = random_ids(self.spec, tb, T, self.dev, self.gen)
        step = train_step_fn(self.run, self.spec, ids)
        step()  # allocate optimizer state (and compile) outside the counter
        flops = count_flops(train_step_fn(self.model, self.spec, ids))  # the step's matmuls, fwd + bwd
        t = time_fn(step, warmup=self.warmup, repeats=max(3, self.repeats // 2), device=self.dev)
        n_tok = tb * T * (2 if self.spec.arch == "encoder_decoder" else 1)
        return Result("train", f"{tb}x{T}", t.median, t.min, t.spread, n_tok, flops, self.peak,
                      len(t.times))


def _num_weights(model) -> int:
    """Parameters, counting the packed weights of int8 layers (which are not ``Parameter``s)."""
    n = model.num_parameters() if hasattr(model, "num_parameters") else \
        sum(p.numel() for p in model.parameters())
    return n + sum(getattr(m, "num_weights", 0) for m in model.modules())


def generate_bytes(model, prompt_len: int, new_tokens: int, batch: int = 1) -> int:
    """Bytes read from memory by greedy generation of ``new_tokens`` after ``prompt_len``.

    ``new_tokens`` forward passes (the prefill, which yields the first token, then one step per
    further token) each read every weight once; the KV cache read grows with the context.  For an
    encoder-decoder the prompt is the source and the decoder starts from one token."""
    src = prompt_len if model.spec.arch == "encoder_decoder" else 0
    start = 1 if src else prompt_len  # decoder tokens at the first pass
    total = 0
    for i in range(new_tokens):
        total += decode_bytes(model, start + i, batch=batch, src_len=src)["total"]
    return total

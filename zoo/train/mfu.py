"""Model FLOPs utilisation (MFU): how much of this machine's matmul peak a training step uses.

``MFU = FLOPs the model needs for a step / seconds the step took / peak FLOP/s``.

- **The step's FLOPs** are *counted from the model's shape*, not measured: the forward cost of
  :func:`zoo.inside.costs.forward_cost` over the micro-batch's real shapes (every projection, the
  FFN read off its weight shapes, the full ``T x T`` attention core, the LM head), times 3: the
  backward pass computes two products per forward product (the gradient with respect to the
  input and to the weight), so ``forward + backward = 3 x forward``.  For a GPT this is the usual
  ``6 N + 12 L h hd T`` FLOPs per token (PaLM's appendix B; nanoGPT's ``estimate_mfu``) with
  ``N`` the weights in matrices.  Work a kernel skips (a causal flash-attention kernel never
  computes the upper triangle) or adds (recomputation) does not change the count: MFU measures
  useful work.  A masked LM counts its vocabulary projection only at the predicted positions, as
  the model computes it.
- **The peak** is *measured here*, once per process, device, dtype and thread count, by
  :func:`zoo.inside.speed.matmul_peak` (the best of ten large square matmuls, the yardstick ``zoo bench``
  uses), not taken from a data sheet: a CPU shared with other work, or pinned to 2 threads, has a
  lower peak than its specification, and MFU against the measured peak says how well the *step*
  uses what the matmul unit delivers here.  The run's start record says which peak was used.
- **The seconds** are those of the optimizer steps alone (forward, backward, clipping, AdamW),
  not of evaluations and saves between them; a compiled run's first step (which compiles) is
  reported apart, as ``first_step_s``.
"""
from __future__ import annotations

import functools

import torch

from ..inside.costs import forward_cost

#: the side of the square matmul whose best time is the peak (``zoo.inside.speed.matmul_peak``'s default)
PEAK_N = {"cpu": 1024, "cuda": 8192}


def step_flops(spec, batch: dict) -> int:
    """Training FLOPs (forward + backward = 3 x forward) of one (micro-)batch of an objective.

    ``batch`` holds ``ids (B, T)`` (decoder or encoder) or ``src (B, S)`` and ``tgt (B, T)``
    (encoder-decoder); a masked-LM batch's ``labels`` decide where the head runs."""
    if "src" in batch:  # encoder-decoder: the encoder over S, the decoder over T with S in cross
        B, T = batch["tgt"].shape
        total, head = _forward_flops(spec, T, B, batch["src"].size(1))
    else:
        B, T = batch["ids"].shape
        total, head = _forward_flops(spec, T, B, None)
        if spec.arch == "encoder" and spec.head.kind == "mlm":
            picked = int((batch["labels"] != -100).sum())  # the head runs at these positions only
            total -= head * (1 - picked / max(1, B * T))
    return int(3 * total)


@functools.lru_cache(maxsize=256)
def _forward_flops(spec, T: int, B: int, S: int | None) -> tuple[int, int]:
    """``(total, head)`` forward FLOPs (cached: a run repeats a few shapes)."""
    cost = forward_cost(spec, T, batch=B, src_len=S)
    return cost["total_flops"], cost["head_flops"]


@functools.lru_cache(maxsize=8)
def _peak(device: str, dtype: torch.dtype, threads: int) -> float:
    from ..inside.speed import matmul_peak  # measured like `zoo bench` measures it

    n = PEAK_N.get(torch.device(device).type, 1024)
    return matmul_peak(device, dtype, n=n) * 1e9


def machine_peak(device, dtype: torch.dtype = torch.float32) -> dict:
    """The matmul peak of ``device`` in ``dtype`` with this process's threads, measured on the
    first call and cached for the process: ``{"peak_flops", "peak_method"}`` (the method in words,
    for the run's log)."""
    dev = torch.device(device)
    threads = torch.get_num_threads()
    flops = _peak(str(dev), dtype, threads)
    n = PEAK_N.get(dev.type, 1024)
    where = f"{threads} thread{'s' if threads != 1 else ''}" if dev.type == "cpu" else str(dev)
    return {"peak_flops": flops,
            "peak_method": f"best of 10 {n}x{n} {str(dtype).replace('torch.', '')} matmuls on "
                           f"{dev.type} ({where}), zoo.inside.speed.matmul_peak, measured at the start"}

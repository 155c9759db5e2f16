"""Fewer bytes per weight for decoding: bfloat16 and int8 weights, as an explicit choice.

Generating one token at batch 1 reads every weight of the model once and does only two FLOPs per
weight read, so a CPU (or GPU) spends its time waiting for memory, not multiplying: decoding is
**memory-bound**.  Its speed limit, the *roofline*, is ``memory bandwidth / bytes per token``
(:func:`zoo.bench.decode_roofline`).  The only way past the float32 roofline is to read fewer bytes
per weight:

=========  ============  ======================================================================
precision  bytes/weight  how
=========  ============  ======================================================================
float32    4             ``zoo.build(spec)`` (the default)
bfloat16   2             ``zoo.build(spec, dtype="bfloat16")``: 8 exponent bits like float32, 7
                         mantissa bits (~3 significant digits); fast where the CPU has native bf16
                         matrix instructions (``avx512_bf16``, AMX) and on every recent GPU
int8       1             :func:`quantize_int8` (CPU): each output row of every ``nn.Linear`` is
                         stored as int8 times one float scale (symmetric, per channel); the
                         activations are quantized on the fly per call (``dynamic`` quantization)
                         and the product runs in PyTorch's FBGEMM int8 kernel
=========  ============  ======================================================================

What a CPU without native support does: a bfloat16 matmul on a CPU lacking ``avx512_bf16``/AMX is
computed by converting to float32 inside the kernel, so it reads half the bytes but converts every
one, and is often *slower* than float32 (``zoo bench --dtype bfloat16`` shows it).  FBGEMM's int8
kernel needs only AVX2 (it multiplies u8 x s8 pairs with ``vpmaddubsw``; VNNI, where present, does
it in one instruction), so int8 pays off on any x86-64 CPU of the last decade.

The price is accuracy: the held-out loss of a trained model in each precision is in
``docs/PERFORMANCE.md`` (``python tests/perf/compare.py --sections precision``).  Keep float32
weights for training and saving; quantize a loaded model for inference only.
"""
from __future__ import annotations

import warnings

import torch
from torch import nn

from .errors import ZooError


class Int8Linear(nn.Module):
    """``nn.Linear`` with int8 weights, one scale per output row: ``y = (x q^T) * scale + bias``.

    ``q = round(W / scale)`` with ``scale = max|W_row| / 127`` (symmetric, per channel).  The
    weight is packed once, here, into FBGEMM's layout; ``forward`` quantizes ``x`` per call
    (``reduce_range``: 7-bit activations, so that AVX2's 16-bit pair sums cannot overflow) and runs
    PyTorch's ``quantized::linear_dynamic`` kernel, which returns float32."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach().float().cpu()  # (out, in)
        scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)  # (out,)
        with warnings.catch_warnings():  # PyTorch plans to retire qint8 tensors (torchao instead);
            warnings.filterwarnings("ignore", message=".*quantized tensor creation.*")  # still here
            q = torch.quantize_per_channel(w, scale.double(), torch.zeros_like(scale, dtype=torch.long),
                                           axis=0, dtype=torch.qint8)
        bias = linear.bias.detach().float().cpu() if linear.bias is not None else None
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.num_weights = linear.weight.numel() + (bias.numel() if bias is not None else 0)
        self.packed = torch.ops.quantized.linear_prepack(q, bias)
        self.weight_bytes = q.numel() + scale.numel() * 4 + (bias.numel() * 4 if bias is not None else 0)
        self.dtype = linear.weight.dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.quantized.linear_dynamic(x.float(), self.packed, True)  # reduce_range
        return y if self.dtype == torch.float32 else y.to(self.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def int8_supported() -> bool:
    """True when this PyTorch build has the FBGEMM (x86) or QNNPACK (ARM) int8 engine."""
    engines = torch.backends.quantized.supported_engines
    return any(e in engines for e in ("fbgemm", "x86", "qnnpack"))


@torch.no_grad()
def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (the projections, the FFN and the LM head) by an
    :class:`Int8Linear`, in place; returns ``model``.  Embedding tables stay as they are (decoding
    reads one row of them per token); a tied LM head gets its own int8 copy.

    CPU only (the kernels are FBGEMM's).  For inference: the quantized model cannot be trained or
    saved with ``zoo.save`` (save the float model and quantize after loading)."""
    p = next(model.parameters(), None)
    if p is not None and p.device.type != "cpu":
        raise ZooError(f"int8 weights use PyTorch's CPU int8 kernels; the model is on {p.device}",
                       where="quantize_int8", fix="on a GPU use dtype='bfloat16' instead, or move "
                                                  "the model to the CPU first")
    if not int8_supported():
        raise ZooError("this PyTorch build has no int8 engine (fbgemm / qnnpack)",
                       where="quantize_int8", fix="use dtype='bfloat16', or a PyTorch build for "
                                                  "x86-64 or ARM")
    if torch.backends.quantized.engine == "none":
        torch.backends.quantized.engine = "x86" if "x86" in torch.backends.quantized.supported_engines \
            else "qnnpack"
    model.eval()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, Int8Linear(child))
    model.quantized = "int8"
    return model

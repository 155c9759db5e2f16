"""Fewer bytes per weight for decoding: bfloat16, int8 and int4 weights, as an explicit choice.

Generating one token at batch 1 reads every weight of the model once and does only two FLOPs per
weight read, so a CPU (or GPU) spends its time waiting for memory, not multiplying: decoding is
**memory-bound**.  Its speed limit, the *roofline*, is ``memory bandwidth / bytes per token``
(:func:`zoo.inside.speed.decode_roofline`).  The only way past the float32 roofline is to read fewer bytes
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
int4       ~0.56         :func:`quantize_int4` (CPU): weight-only, asymmetric, per group of
                         ``group_size`` inputs (below); the product runs in PyTorch's own int4
                         kernel ``aten._weight_int4pack_mm_for_cpu`` with bfloat16 activations
=========  ============  ======================================================================

**int4, weight-only, grouped.**  Sixteen levels are too few for one scale per row: a single large
weight would stretch the row's grid and flatten every other weight to the same level.  So each row
of ``W (out, in)`` is cut into groups of ``group_size`` consecutive inputs (32 to 256), and each
group gets its own grid from its own minimum and maximum (*asymmetric*: a zero point, so a group of
only positive weights uses all 16 levels)::

    scale = (max - min) / 15                 q = round((w - min) / scale), clamped to 0..15
    w ~ q * scale + min  =  (q - 8) * scale + zero,   zero = min + 8 * scale

The second form is the layout PyTorch's kernel reads (from gpt-fast's "tinygemm"): two 4-bit
values per byte, and a ``(in / group_size, out, 2)`` table of bfloat16 ``(scale, zero)`` pairs.
Per weight that is 4 bits + 32 bits / group_size: 4.25 bits at ``group_size=128``, 5 at 32.  Only
the weights are quantized; the activations are cast to bfloat16 per call (hence *weight-only*), the
kernel unpacks each group on the fly and accumulates in float32.  A smaller group follows the
weights more closely and reads a few more bytes (on the shipped poet_gpt the held-out loss does not
tell 32 from 128 apart; the table is in docs/PERFORMANCE.md).  The kernel wants the output size a
multiple of 16 (an LM head of 50,257 rows is padded to 50,272 with zero rows, and the output cut
back) and the input size a multiple of the group size: a layer whose ``in_features`` the asked
group size does not divide takes the largest of 256 / 128 / 64 / 32 that does and is no larger
than asked (recorded per layer, ``model.int4_groups`` counts them), and a layer no group size
divides stays float32 (listed in ``model.int4_skipped``; none in any preset).

**What happens on a CPU without AVX-512.**  PyTorch's int4 kernel has three paths, chosen by the
CPU's vector unit (``torch.backends.cpu.get_cpu_capability()``): AVX-512 (the fast one), AVX2, and
a scalar loop for everything else.  Measured on GPT-2 small (``benchmarks/int4_decode.py``, 1 and 2
threads, forcing each path with ``ATEN_CPU_CAPABILITY`` on an AVX-512 machine; float32's matmul is
oneDNN's and keeps its own instructions): int4 decodes at 3.6-5.6x float32's tokens/s on the
AVX-512 path, 1.9-3.2x on the AVX2 path, and **12-25x slower than float32** on the scalar path.
So :func:`quantize_int4` quantizes on AVX-512 and AVX2 CPUs and raises a :class:`ZooError` on any
other (naming int8 and bfloat16 as the way to go), unless
``allow_slow=True`` asks for the slow path anyway (the results are the same).

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

from ..errors import ZooError


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


# ---------------------------------------------------------------------- int4, weight-only
#: group sizes PyTorch's CPU int4 kernel accepts, largest first
INT4_GROUP_SIZES = (256, 128, 64, 32)


def int4_groups(w: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric 4-bit codes of ``w (out, in)`` per group of ``group_size`` inputs.

    Returns ``(q, scale, lo)``: ``q (out, in)`` int32 in 0..15, ``scale`` and ``lo`` (the group's
    minimum) ``(out, in / group_size)``, so that ``w ~ q * scale + lo`` group by group."""
    n, k = w.shape
    g = w.float().reshape(n, k // group_size, group_size)  # (out, groups, group_size)
    lo, hi = g.amin(dim=-1), g.amax(dim=-1)  # (out, groups)
    scale = ((hi - lo) / 15).clamp(min=1e-8)
    q = ((g - lo.unsqueeze(-1)) / scale.unsqueeze(-1)).round().clamp(0, 15)
    return q.to(torch.int32).reshape(n, k), scale, lo


def _int4_group_size(in_features: int, asked: int) -> int | None:
    """The largest kernel group size that divides ``in_features`` and is no larger than ``asked``."""
    return next((g for g in INT4_GROUP_SIZES if g <= asked and in_features % g == 0), None)


class Int4Linear(nn.Module):
    """``nn.Linear`` with 4-bit weights in groups of ``group_size`` inputs (weight-only).

    The weight ``W (out, in)`` is stored as PyTorch's packed int4 layout (two codes per byte) and a
    ``(in / group_size, out, 2)`` bfloat16 table of ``(scale, zero)``; ``forward`` casts ``x`` to
    bfloat16 and calls ``aten._weight_int4pack_mm_for_cpu``, which computes
    ``x @ ((q - 8) * scale + zero)^T`` with float32 accumulation, then adds the bias (kept in the
    model's dtype) and returns the model's dtype.  The output size is padded to a multiple of 16 for the kernel and
    the padding cut off again."""

    def __init__(self, linear: nn.Linear, group_size: int = 128):
        super().__init__()
        w = linear.weight.detach().float().cpu()  # (out, in)
        n, k = w.shape
        n_pad = -(-n // 16) * 16  # the kernel's row tiles are 16 outputs
        if n_pad != n:
            w = torch.cat([w, w.new_zeros(n_pad - n, k)])  # (n_pad, in): zero rows, cut off later
        q, scale, lo = int4_groups(w, group_size)
        zero = lo + 8 * scale  # the kernel's form: w = (q - 8) * scale + zero
        self.register_buffer("packed", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 2))
        scales_zeros = torch.stack([scale, zero], dim=-1)  # (n_pad, groups, 2)
        self.register_buffer("scales_zeros", scales_zeros.transpose(0, 1).contiguous().bfloat16())
        bias = linear.bias.detach().cpu().to(linear.weight.dtype) if linear.bias is not None else None
        self.register_buffer("bias", bias)
        self.in_features, self.out_features, self.group_size = k, n, group_size
        self.padded = n_pad != n
        self.num_weights = linear.weight.numel() + (bias.numel() if bias is not None else 0)
        self.weight_bytes = (self.packed.numel() + self.scales_zeros.numel() * 2
                             + (bias.numel() * bias.element_size() if bias is not None else 0))
        self.dtype = linear.weight.dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, self.in_features).to(torch.bfloat16)  # (M, in), contiguous after the cast
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x2, self.packed, self.group_size,
                                                       self.scales_zeros)  # (M, n_pad) bf16
        if self.padded:
            y = y[:, :self.out_features]  # (M, out)
        # the cast back and the bias in one operation (bf16 + float32 promotes to float32)
        y = torch.add(self.bias, y) if self.bias is not None else y.to(self.dtype)
        if y.dtype != self.dtype:  # a float16 model: bias + bf16 promoted to float32
            y = y.to(self.dtype)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"int4 groups of {self.group_size}")


def int4_supported() -> bool:
    """True when this PyTorch build has the CPU int4 kernels (PyTorch 2.5 and later)."""
    aten = torch.ops.aten
    return hasattr(aten, "_weight_int4pack_mm_for_cpu") and \
        hasattr(aten, "_convert_weight_to_int4pack_for_cpu")


def int4_fast() -> bool:
    """True when PyTorch dispatches its CPU kernels to a vectorised path (AVX-512 or AVX2), where
    the int4 kernel is faster than float32; elsewhere it runs a scalar loop (see the module notes)."""
    return torch.backends.cpu.get_cpu_capability().startswith(("AVX512", "AVX2"))


@torch.no_grad()
def quantize_int4(model: nn.Module, group_size: int = 128, *, allow_slow: bool = False) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` by an :class:`Int4Linear` (4-bit weights in groups
    of ``group_size`` inputs), in place; returns ``model``.  Embedding tables stay as they are; a
    tied LM head gets its own int4 copy.  ``group_size`` is one of 32, 64, 128, 256; a layer it
    does not divide takes the largest smaller one that does (``model.int4_groups`` counts the
    layers per group size), a layer none divides stays float (``model.int4_skipped``).

    CPU only; for inference, like :func:`quantize_int8` (save the float model, quantize after
    loading).  On a CPU where the kernel has no vectorised path (neither AVX-512 nor AVX2) it
    raises a :class:`ZooError` unless ``allow_slow=True`` (see the module notes)."""
    where = "quantize_int4"
    if isinstance(group_size, bool) or group_size not in INT4_GROUP_SIZES:
        raise ZooError(f"group_size must be one of {sorted(INT4_GROUP_SIZES)}, got {group_size!r}",
                       where=f"{where}.group_size", options=[str(g) for g in INT4_GROUP_SIZES],
                       fix="pass group_size=128 (4.25 bits a weight) or 32 (5 bits, closer to "
                           "float32)")
    p = next(model.parameters(), None)
    if p is not None and p.device.type != "cpu":
        raise ZooError(f"int4 weights use PyTorch's CPU int4 kernel; the model is on {p.device}",
                       where=where, fix="on a GPU use dtype='bfloat16' instead, or move the model to "
                                        "the CPU first")
    if not int4_supported():
        raise ZooError(f"this PyTorch ({torch.__version__}) has no CPU int4 kernel "
                       "(aten._weight_int4pack_mm_for_cpu)", where=where,
                       fix="install PyTorch 2.5 or later, or use quantize_int8")
    if not int4_fast() and not allow_slow:
        raise ZooError(f"PyTorch runs its int4 kernel on this CPU without AVX-512 or AVX2 (kernel "
                       f"capability {torch.backends.cpu.get_cpu_capability()}): its scalar loop "
                       "decodes 12-25x slower than float32", where=where,
                       fix="use quantize_int8 or dtype='bfloat16', or pass allow_slow=True to "
                           "quantize anyway (the same results, slowly)")
    model.eval()
    groups: dict[int, int] = {}
    skipped: list[str] = []
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:
                continue
            g = _int4_group_size(child.in_features, group_size)
            if g is None:
                skipped.append(f"{parent_name}.{name}".lstrip("."))
                continue
            setattr(parent, name, Int4Linear(child, g))
            groups[g] = groups.get(g, 0) + 1
    model.quantized = "int4"
    model.int4_groups, model.int4_skipped = groups, skipped
    return model

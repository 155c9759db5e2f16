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
int8       1             :func:`quantize_int8` (CPU): weight-only; each output row of every
                         ``nn.Linear`` is stored as int8 times one scale (symmetric, per channel)
                         and the product runs in PyTorch's own ``aten._weight_int8pack_mm`` with
                         bfloat16 activations (``activations="dynamic"``: the old FBGEMM path
                         that also rounds the activations to int8, below)
int4       ~0.56         :func:`quantize_int4` (CPU): weight-only, asymmetric, per group of
                         ``group_size`` inputs (below); the product runs in PyTorch's own int4
                         kernel ``aten._weight_int4pack_mm_for_cpu`` with bfloat16 activations;
                         the LM head is int8 (``head=``)
q4         ~0.56         :func:`quantize_q4` (CPU): GGUF's own Q4_1 blocks (4-bit codes, a float
                         scale and minimum per 32 inputs) and a Q8_0 LM head, kept exactly as a
                         converted file stores them and multiplied in zoo's block kernels
                         (:mod:`zoo.run.qkernels`): the float32 conversion's answers
=========  ============  ======================================================================

**Why weight-only.**  Large language models carry activation outliers: a few channels of a layer's
input are 20-400 times the typical size (Dettmers et al. 2022, LLM.int8(); Xiao et al. 2023,
SmoothQuant).  Rounding such an input to int8 with one scale for the whole tensor (FBGEMM's dynamic
quantisation) leaves the ordinary channels a handful of levels: on the real SmolLM2-135M the down
projection of block 11 reads a channel of 2,755 beside a typical size of 6.6, the logits of the
last position of "The capital of France is" move by up to 13.6, and it continues " located in
the North America" instead of " Paris".  Rounding only the weights, each row on its own grid,
keeps what the model says (those logits move by 1.1; the figures are in docs/PERFORMANCE.md).
The price is speed: PyTorch's weight-only kernel widens each int8 weight before it multiplies,
where FBGEMM's multiplies int8 pairs (VNNI), so the weight-only int8 decodes at 0.73-0.83x the
dynamic one and prefills 2.4-3.7x slower; int4 (half the bytes) decodes faster than both.
``activations="dynamic"`` keeps the old path for models without outliers (the small poem
models), and the quality check below says when it does not hold.

**The head and the embeddings.**  Decoding reads one row of the embedding table per token, so the
table stays float (quantising it saves memory, not time).  The LM head is the largest matrix a
step reads (28 M of SmolLM2's 135 M weights) and the one its answer comes out of: GGUF files keep it
at 8 bits or more when the blocks are 4-bit, so :func:`quantize_int4` gives it int8 weight-only
rows (``head="int8"``) rather than cutting it to 4 bits (``head="int4"``; ``head="float"`` keeps it).
A tied head gets its own quantised copy; the embedding table stays as it was.

**The quality check.**  Quantising a model that has a tokenizer measures it at once: the logits
of the float weights and of the quantised ones on an English paragraph (:data:`CHECK_TEXT`, or
``text=``) give the *top-1 agreement* (the share of positions whose most likely next token is
unchanged) and *ΔNLL* (the change of the mean negative log-likelihood of the paragraph's next
tokens, nats per token).  The bound, :data:`QUALITY_BOUND`, is top-1 agreement >= 90% and ΔNLL <=
+0.05 nats (5% perplexity): what weight-only int8 and int4 keep on SmolLM2-135M with margin, and
what the old dynamic int8 and double-rounded int4 miss by far.  A scheme that misses it warns
(:class:`QualityWarning`, with the measured figures), or with ``check="error"`` puts the float
layers back and raises a :class:`ZooError`; ``check="off"`` skips the measurement.  The figures
are kept as ``model.quality`` (``zoo bench --int8`` prints them).  A model without a tokenizer,
or one whose tokenizer cannot read the text, is not measured (``model.quality`` says why).

A quantised model is for inference on the CPU in the dtype it was quantised in: ``.to(dtype)``,
``.to(device)`` and a backward pass through a packed layer are :class:`ZooError` s (cast or move
the float model first, then quantise; train the float model).

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
one, and is often *slower* than float32 (``zoo bench --dtype bfloat16`` shows it).  The
weight-only int8 kernel has AVX-512 and AVX2 paths (its AVX-512 path reads the inputs 16 at a
time: :class:`Int8Linear` pads them); FBGEMM's dynamic int8 kernel needs only AVX2 (it
multiplies u8 x s8 pairs with ``vpmaddubsw``; VNNI, where present, does it in one instruction).

The price is accuracy: top-1 agreement and ΔNLL of every scheme on a real model, and the
held-out loss of a trained poem model, are in ``docs/PERFORMANCE.md``
(``python benchmarks/quantize_quality.py``; ``python tests/perf/compare.py --sections
precision``).  Keep float32 weights for training and saving; quantize a loaded model for
inference only.
"""
from __future__ import annotations

import types
import warnings

import torch
from torch import nn

from ..errors import ZooError


#: what a quantised model must keep of its float self on the check text (see the module notes):
#: ``top1``, the least share of positions whose most likely next token is unchanged, and ``dnll``,
#: the most its mean next-token negative log-likelihood may grow (nats per token)
QUALITY_BOUND = {"top1": 0.90, "dnll": 0.05}

#: The English paragraph of the quality check (written for zoo, so no model has seen it; 114 words)
CHECK_TEXT = (
    "A river begins as rain or melting snow high in the hills. The water gathers in small streams, "
    "and the streams join as they run downhill, carving valleys through soft rock and carrying sand, "
    "stones and leaves along with them. Where the land flattens out, the river slows down, drops much "
    "of what it carries, and begins to wind from side to side. Towns have long been built on its "
    "banks, because the river gave people water to drink, fish to eat, a road for boats and power "
    "for mills. Today many rivers are measured every hour, so that a flood can be seen coming days "
    "before it reaches the houses nearest the water."
)

#: at most this many tokens of the check text are measured (two forwards of the model)
CHECK_TOKENS = 256
CHECKS = ("warn", "error", "off")


class QualityWarning(UserWarning):
    """A quantised model misses :data:`QUALITY_BOUND` on the check text (the message has the
    measured figures)."""


class _InferenceOnly(torch.autograd.Function):
    """The forward of a packed layer where autograd is recording: the same numbers, and a
    :class:`ZooError` instead of PyTorch's "derivative ... is not implemented" at ``backward``."""

    @staticmethod
    def forward(ctx, x, fn, scheme):  # noqa: ARG004 - autograd's signature
        ctx.scheme = scheme
        return fn(x)

    @staticmethod
    def backward(ctx, grad):  # noqa: ARG004
        raise ZooError(f"{ctx.scheme} weights (zoo.run.precision) are for inference: a packed "
                       f"{ctx.scheme} layer has no gradient", where="backward",
                       fix="train the float model (zoo.train), save it, and quantise the loaded "
                           "checkpoint for decoding")


def _refuse_cast(scheme: str, dtype: torch.dtype, fn) -> bool:
    """True when ``fn`` (what ``Module._apply`` hands each tensor: ``.to``, ``.cuda``, ``.half``
    ...) leaves a CPU tensor of ``dtype`` as it is; else the :class:`ZooError` of a packed model."""
    try:
        probe = fn(torch.zeros(1, dtype=dtype))
    except Exception:  # noqa: BLE001 - e.g. .cuda() on a machine without CUDA
        probe = None
    if isinstance(probe, torch.Tensor) and probe.dtype == dtype and probe.device.type == "cpu":
        return False
    to = "somewhere else" if probe is None else f"{str(probe.dtype).replace('torch.', '')} on {probe.device}"
    raise ZooError(f"{scheme} weights are packed for PyTorch's CPU kernels in "
                   f"{str(dtype).replace('torch.', '')}; they cannot be cast or moved to {to}",
                   where="model.to", fix="cast or move the float model first (e.g. model.to("
                                         "torch.bfloat16)), then quantise it; or reload the float "
                                         "checkpoint")


class _Packed(nn.Module):
    """What the packed layers share: inference only (a backward is a :class:`ZooError`), and
    ``.to(...)`` a no-op for their own storage when it changes nothing, a :class:`ZooError` when
    it would cast or move it."""

    scheme = "quantised"
    dtype = torch.float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.requires_grad and torch.is_grad_enabled():
            return _InferenceOnly.apply(x, self.product, self.scheme)
        return self.product(x)

    def product(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _apply(self, fn, recurse=True):
        _refuse_cast(self.scheme, self.dtype, fn)
        return self  # the packed tensors stay exactly as the kernel wants them


_INT8_MM = getattr(getattr(torch.ops.aten, "_weight_int8pack_mm", None), "default", None)
_INT4_MM = getattr(getattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu", None), "default", None)


def _int8_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 codes of ``w (out, in)``, one scale per output row: ``(q (out, in) int8,
    scale (out,) float32)`` with ``w ~ q * scale``, ``scale = max|w_row| / 127``."""
    w = w.detach().float().cpu()
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)  # (out,)
    q = (w / scale[:, None]).round().clamp(-127, 127).to(torch.int8)
    return q, scale


class Int8Linear(_Packed):
    """``nn.Linear`` with int8 weights, one scale per output row (weight-only):
    ``y = (x q^T) * scale + bias``.

    ``q = round(W / scale)`` with ``scale = max|W_row| / 127`` (symmetric, per channel).  Only the
    weights are rounded: ``forward`` casts ``x`` to bfloat16 and calls PyTorch's
    ``aten._weight_int8pack_mm`` (which widens each int8 weight and multiplies it with the
    activation, accumulating in float32), then adds the bias in the model's dtype.  That kernel's
    AVX-512 path reads the inputs 16 at a time (and returns garbage otherwise), so an input size
    that is not a multiple of 16 is padded with zero columns, and the input with zeros."""

    scheme = "int8"

    def __init__(self, linear: nn.Linear):
        super().__init__()
        q, scale = _int8_rows(linear.weight)
        n, k = q.shape
        k_pad = -(-k // 16) * 16
        if k_pad != k:
            q = torch.cat([q, q.new_zeros(n, k_pad - k)], dim=1)  # (out, k_pad): zero columns
        self.register_buffer("qweight", q.contiguous())
        self.register_buffer("scale", scale.to(torch.bfloat16))  # the kernel wants x's dtype
        self.dtype = linear.weight.dtype
        bias = linear.bias.detach().cpu().to(self.dtype) if linear.bias is not None else None
        self.register_buffer("bias", bias)
        # the same tensors as a plain attribute: a buffer is found through nn.Module.__getattr__,
        # ~1 us a look-up, which 211 layers a token pay three times (nothing moves them: _apply)
        self._kernel = (self.qweight, self.scale, self.bias)
        self.in_features, self.out_features, self.pad = k, n, k_pad - k
        self.num_weights = linear.weight.numel() + (bias.numel() if bias is not None else 0)
        self.weight_bytes = (q.numel() + scale.numel() * 2
                             + (bias.numel() * bias.element_size() if bias is not None else 0))

    def product(self, x: torch.Tensor) -> torch.Tensor:
        q, scale, bias = self._kernel
        x2 = x.reshape(-1, self.in_features).to(torch.bfloat16)  # (M, in)
        if self.pad:
            x2 = nn.functional.pad(x2, (0, self.pad))  # (M, k_pad)
        y = _INT8_MM(x2, q, scale)  # (M, out) bf16
        y = torch.add(bias, y) if bias is not None else y.to(self.dtype)
        if y.dtype != self.dtype:  # a float16 model: its bias + bf16 promoted to float32
            y = y.to(self.dtype)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                "int8 weight-only per-channel")


class Int8DynamicLinear(_Packed):
    """``nn.Linear`` with int8 weights *and* int8 activations (``quantize_int8(model,
    activations="dynamic")``): ``y = (x q^T) * scale + bias`` in PyTorch's FBGEMM kernel.

    The weights are rounded as in :class:`Int8Linear`, packed once into FBGEMM's layout;
    ``forward`` rounds ``x`` to int8 per call with one scale for the whole tensor (``reduce_range``:
    7-bit activations, so that AVX2's 16-bit pair sums cannot overflow) and runs
    ``quantized::linear_dynamic``, which returns float32.  Fast (VNNI multiplies int8 pairs), and
    exact enough for a model without activation outliers; a real LLM has them (the module notes)."""

    scheme = "int8"

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

    def product(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.quantized.linear_dynamic(x.float(), self.packed, True)  # reduce_range
        return y if self.dtype == torch.float32 else y.to(self.dtype)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                "int8 per-channel, dynamic int8 activations")


def int8_supported() -> bool:
    """True when this PyTorch build has the FBGEMM (x86) or QNNPACK (ARM) int8 engine."""
    engines = torch.backends.quantized.supported_engines
    return any(e in engines for e in ("fbgemm", "x86", "qnnpack"))


def int8_weight_only_supported() -> bool:
    """True when this PyTorch build has the CPU weight-only int8 kernel
    (``aten._weight_int8pack_mm``, PyTorch 2.3 and later)."""
    return hasattr(torch.ops.aten, "_weight_int8pack_mm")


# ---------------------------------------------------------------------- the quality check
def _check_ids(model: nn.Module, text: str | None) -> tuple[torch.Tensor | None, str]:
    """``(ids (1, T), what)`` of the check text for ``model``, or ``(None, why not)``."""
    spec = getattr(model, "spec", None)
    tok = getattr(model, "tokenizer", None)
    if spec is None or getattr(spec, "arch", None) != "decoder":
        return None, "the check measures decoder-only language models"
    if tok is None:
        return None, "the model has no tokenizer"
    from .input_contract import MAX_UNKNOWN, unknown_characters

    given = text is not None
    text = CHECK_TEXT if text is None else text
    unknown, counted = unknown_characters(tok, text)
    if len(unknown) > MAX_UNKNOWN * counted:
        return None, (f"its tokenizer does not read the check text ({len(unknown)} of {counted} "
                      "characters unknown): pass text= in the model's own language")
    ids = list(tok.encode(text))[: min(CHECK_TOKENS, spec.max_len)]
    if len(ids) < 16:
        return None, f"the check text gives {len(ids)} tokens, fewer than 16"
    return torch.tensor([ids]), ("the text given" if given else "zoo's English check text")


def _logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(ids).float()[0]  # (T, V)


def _figures(ref: torch.Tensor, got: torch.Tensor, ids: torch.Tensor) -> dict:
    """Top-1 agreement and the next-token NLL of ``got`` against ``ref`` (both ``(T, V)``)."""
    y = ids[0, 1:]
    nll_ref = float(nn.functional.cross_entropy(ref[:-1], y))
    nll = float(nn.functional.cross_entropy(got[:-1], y))
    return {"top1": float((ref.argmax(-1) == got.argmax(-1)).float().mean()),
            "nll_float": nll_ref, "nll": nll, "dnll": nll - nll_ref,
            "max_logit_change": float((got - ref).abs().max())}


def _check_arg(check: str, where: str) -> str:
    if check not in CHECKS:
        raise ZooError(f"check must be one of {list(CHECKS)}, got {check!r}", where=f"{where}.check",
                       options=list(CHECKS), fix="pass check='warn' (the default), 'error' to refuse a "
                                                 "model that misses the bound, or 'off'")
    return check


def _describe(q: dict) -> str:
    b = q["bound"]
    return (f"top-1 agreement with the float weights {100 * q['top1']:.1f}% (bound >= "
            f"{100 * b['top1']:.0f}%), next-token NLL {q['nll_float']:.4f} -> {q['nll']:.4f} "
            f"({q['dnll']:+.4f} nats/token; bound <= +{b['dnll']:.2f}), on {q['tokens']} tokens of "
            f"{q['text']}")


def quality_line(model: nn.Module) -> str | None:
    """One line on ``model.quality`` (what the check of :func:`quantize_int8` / :func:`quantize_int4`
    measured), or None for a model that was not quantised here."""
    q = getattr(model, "quality", None)
    if not q:
        return None
    if not q.get("measured"):
        return f"quality of {q['scheme']}: not measured ({q['why']})"
    verdict = "within the bound" if q["passed"] else "MISSES the bound"
    return f"quality of {q['scheme']}: {_describe(q)}: {verdict}"


class _Swap:
    """The float layers a quantisation replaced, so a refused one can put them back."""

    def __init__(self, model: nn.Module, scheme: str, check: str, text: str | None):
        self.model, self.scheme, self.check = model, scheme, check
        self.done: list[tuple[nn.Module, str, nn.Module]] = []
        self.dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
        self.ids, self.what = _check_ids(model, text) if check != "off" else (None, "check='off'")
        self.ref = _logits(model, self.ids) if self.ids is not None else None

    def put(self, parent: nn.Module, name: str, layer: nn.Module) -> None:
        self.done.append((parent, name, getattr(parent, name)))
        setattr(parent, name, layer)

    def finish(self, **attrs) -> nn.Module:
        """Measure, record ``model.quality``, warn or refuse; guard ``.to``; return the model."""
        model = self.model
        if self.ref is None:
            q = {"scheme": self.scheme, "measured": False, "why": self.what}
        else:
            q = {"scheme": self.scheme, "measured": True, "tokens": self.ids.size(1), "text": self.what,
                 "bound": dict(QUALITY_BOUND), **_figures(self.ref, _logits(model, self.ids), self.ids)}
            q["passed"] = q["top1"] >= QUALITY_BOUND["top1"] and q["dnll"] <= QUALITY_BOUND["dnll"]
            if not q["passed"] and self.check == "error":
                for parent, name, old in reversed(self.done):  # the float model, as it was
                    setattr(parent, name, old)
                raise ZooError(f"{self.scheme} changes this model's answers: {_describe(q)}",
                               where=f"quantize_{self.scheme.split()[0]}",
                               fix=_advice(self.scheme))
            if not q["passed"]:
                warnings.warn(QualityWarning(f"{self.scheme} changes this model's answers: "
                                             f"{_describe(q)}; {_advice(self.scheme)}"),
                              stacklevel=4)  # finish, quantize_*, torch.no_grad's wrapper, the caller
        model.quantized, model.quality = self.scheme.split()[0], q
        for k, v in attrs.items():
            setattr(model, k, v)
        model._apply = types.MethodType(_guarded_apply, model)  # before any child is converted
        model._quantized_dtype = self.dtype
        return model


def _advice(scheme: str) -> str:
    if scheme == "int8 dynamic":
        return "use the weight-only int8 (quantize_int8(model), the default), or keep the float weights"
    if scheme == "int8":
        return "keep the float weights, or check on text the model knows (text=)"
    return ("try group_size=32 with head='int8', or int8 (quantize_int8), or keep the float "
            "weights")


def _guarded_apply(self, fn, recurse=True):
    """``model._apply`` of a quantised model: refuses a cast or a move before any tensor changes."""
    _refuse_cast(self.quantized, self._quantized_dtype, fn)
    return type(self)._apply(self, fn, recurse)


def _on_cpu(model: nn.Module, where: str, what: str) -> None:
    p = next(model.parameters(), None)
    if p is None:
        p = next((b for m in model.modules() if isinstance(m, _Packed) for b in m.buffers()), None)
    if p is not None and p.device.type != "cpu":
        raise ZooError(f"{what} use PyTorch's CPU kernels; the model is on {p.device}", where=where,
                       fix="on a GPU use dtype='bfloat16' instead, or move the model to the CPU first")
    if getattr(model, "quantized", None):
        raise ZooError(f"the model already holds {model.quantized} weights", where=where,
                       fix="quantise the float model (reload it) once")


@torch.no_grad()
def quantize_int8(model: nn.Module, *, activations: str = "float", check: str = "warn",
                  text: str | None = None) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` (the projections, the FFN and the LM head) by an
    :class:`Int8Linear` (weight-only, one scale per output row), in place; returns ``model``.
    Embedding tables stay as they are (decoding reads one row of them per token); a tied LM head
    gets its own int8 copy.

    ``activations="dynamic"``: :class:`Int8DynamicLinear` instead, which also rounds each layer's
    input to int8 (FBGEMM; faster, and wrong on models with activation outliers: the module notes).
    ``check``: ``"warn"`` (a :class:`QualityWarning` when the model misses :data:`QUALITY_BOUND`
    on ``text``, default :data:`CHECK_TEXT`), ``"error"`` (a :class:`ZooError`, the float layers
    put back) or ``"off"``; the figures land in ``model.quality``.

    CPU only.  For inference: the quantized model cannot be trained, cast, moved or saved with
    ``zoo.save`` (save the float model and quantize after loading)."""
    where = "quantize_int8"
    if activations not in ("float", "dynamic"):
        raise ZooError(f"activations must be 'float' or 'dynamic', got {activations!r}",
                       where=f"{where}.activations", options=["dynamic", "float"],
                       fix="pass activations='float' (weight-only, the default) or 'dynamic'")
    _check_arg(check, where)
    _on_cpu(model, where, "int8 weights")
    dynamic = activations == "dynamic"
    if dynamic and not int8_supported():
        raise ZooError("this PyTorch build has no int8 engine (fbgemm / qnnpack)",
                       where=where, fix="use dtype='bfloat16', or a PyTorch build for "
                                        "x86-64 or ARM")
    if not dynamic and not int8_weight_only_supported():
        raise ZooError(f"this PyTorch ({torch.__version__}) has no CPU weight-only int8 kernel "
                       "(aten._weight_int8pack_mm)", where=where,
                       fix="install PyTorch 2.3 or later, or pass activations='dynamic'")
    if dynamic and torch.backends.quantized.engine == "none":
        torch.backends.quantized.engine = "x86" if "x86" in torch.backends.quantized.supported_engines \
            else "qnnpack"
    model.eval()
    swap = _Swap(model, "int8 dynamic" if dynamic else "int8", check, text)
    make = Int8DynamicLinear if dynamic else Int8Linear
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                swap.put(parent, name, make(child))
    return swap.finish(int8_activations=activations)


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


def int4_exact(w: torch.Tensor, group_size: int) -> bool:
    """True when ``w (out, in)`` already lies on a 4-bit grid per group of ``group_size`` inputs:
    each group's 16 levels from its own minimum and maximum give back every weight to within a
    thousandth of a level.  So it is for a model converted from a GGUF file whose 4-bit blocks
    (Q4_1: a scale and a minimum per 32 weights) span their own range: quantising it again at that
    group size keeps the file's codes, where another group size would round them a second time."""
    if w.size(1) % group_size:
        return False
    for rows in (w[:16], w):  # a few rows first: most weights fail at once
        q, scale, lo = int4_groups(rows, group_size)
        n, k = rows.shape
        back = q.float().view(n, -1, group_size) * scale.unsqueeze(-1) + lo.unsqueeze(-1)
        err = (back - rows.float().view(n, -1, group_size)).abs().amax(-1)  # (out, groups)
        if bool((err > 1e-3 * scale).any()):
            return False
    return True


def _int4_auto_group(w: torch.Tensor) -> tuple[int | None, bool]:
    """``(group size, exact)`` for ``group_size=None``: the largest kernel group size at which ``w``
    is already exactly 4-bit (:func:`int4_exact`), else the largest of 128 / 64 / 32 dividing its
    input size (None: none does)."""
    for g in INT4_GROUP_SIZES:
        if int4_exact(w, g):
            return g, True
    return _int4_group_size(w.size(1), 128), False


class Int4Linear(_Packed):
    """``nn.Linear`` with 4-bit weights in groups of ``group_size`` inputs (weight-only).

    The weight ``W (out, in)`` is stored as PyTorch's packed int4 layout (two codes per byte) and a
    ``(in / group_size, out, 2)`` bfloat16 table of ``(scale, zero)``; ``forward`` casts ``x`` to
    bfloat16 and calls ``aten._weight_int4pack_mm_for_cpu``, which computes
    ``x @ ((q - 8) * scale + zero)^T`` with float32 accumulation, then adds the bias (kept in the
    model's dtype) and returns the model's dtype.  The output size is padded to a multiple of 16 for the kernel and
    the padding cut off again."""

    scheme = "int4"

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
        self._kernel = (self.packed, self.scales_zeros, self.bias)  # as Int8Linear's
        self.in_features, self.out_features, self.group_size = k, n, group_size
        self.padded = n_pad != n
        self.num_weights = linear.weight.numel() + (bias.numel() if bias is not None else 0)
        self.weight_bytes = (self.packed.numel() + self.scales_zeros.numel() * 2
                             + (bias.numel() * bias.element_size() if bias is not None else 0))
        self.dtype = linear.weight.dtype

    def product(self, x: torch.Tensor) -> torch.Tensor:
        packed, scales_zeros, bias = self._kernel
        x2 = x.reshape(-1, self.in_features).to(torch.bfloat16)  # (M, in), contiguous after the cast
        y = _INT4_MM(x2, packed, self.group_size, scales_zeros)  # (M, n_pad) bf16
        if self.padded:
            y = y[:, :self.out_features]  # (M, out)
        # the cast back and the bias in one operation (bf16 + float32 promotes to float32)
        y = torch.add(bias, y) if bias is not None else y.to(self.dtype)
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


HEADS = ("int8", "int4", "float")


@torch.no_grad()
def quantize_int4(model: nn.Module, group_size: int | None = None, *, head: str = "int8",
                  allow_slow: bool = False, check: str = "warn", text: str | None = None) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` by an :class:`Int4Linear` (4-bit weights in groups
    of ``group_size`` inputs), in place, and the LM head by an :class:`Int8Linear`; returns
    ``model``.  Embedding tables stay as they are.

    ``group_size``: one of 32, 64, 128, 256; a layer it does not divide takes the largest smaller
    one that does, a layer none divides stays float (``model.int4_skipped``).  ``None`` (the
    default): each layer whose weights are already exactly 4-bit in groups of some kernel size (a
    model converted from a 4-bit GGUF file: :func:`int4_exact`) keeps those groups, so its codes are
    the file's own, not rounded twice; any other takes 128 (or the largest smaller size that
    divides it).  ``model.int4_groups`` counts the layers per group size, ``model.int4_exact``
    those that kept their own codes.

    ``head``: ``"int8"`` (weight-only int8 rows, the default: GGUF files keep the output layer at
    8 bits or more), ``"int4"`` or ``"float"``.  ``check`` and ``text``: the quality check of
    :func:`quantize_int8` (``model.quality``).

    CPU only; for inference, like :func:`quantize_int8` (save the float model, quantize after
    loading).  On a CPU where the kernel has no vectorised path (neither AVX-512 nor AVX2) it
    raises a :class:`ZooError` unless ``allow_slow=True`` (see the module notes)."""
    where = "quantize_int4"
    if group_size is not None and (isinstance(group_size, bool) or group_size not in INT4_GROUP_SIZES):
        raise ZooError(f"group_size must be one of {sorted(INT4_GROUP_SIZES)}, got {group_size!r}",
                       where=f"{where}.group_size", options=[str(g) for g in INT4_GROUP_SIZES],
                       fix="pass group_size=None (the source's own 4-bit blocks where it has them, "
                           "else 128), 128 (4.25 bits a weight) or 32 (5 bits, closer to float32)")
    if head not in HEADS:
        raise ZooError(f"head must be one of {list(HEADS)}, got {head!r}", where=f"{where}.head",
                       options=list(HEADS), fix="pass head='int8' (the default), 'int4' or 'float'")
    _check_arg(check, where)
    _on_cpu(model, where, "int4 weights")
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
    if head == "int8" and not int8_weight_only_supported():
        raise ZooError(f"this PyTorch ({torch.__version__}) has no CPU weight-only int8 kernel for "
                       "the LM head (aten._weight_int8pack_mm)", where=f"{where}.head",
                       fix="pass head='int4' or head='float'")
    model.eval()
    lm_head = getattr(model, "lm_head", None)
    lm_head = lm_head if type(lm_head) is nn.Linear else None
    swap = _Swap(model, "int4" if head == "int8" else f"int4 head {head}", check, text)
    groups: dict[int, int] = {}
    skipped: list[str] = []
    exact = 0
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:
                continue
            if child is lm_head and head != "int4":
                if head == "int8":
                    swap.put(parent, name, Int8Linear(child))
                continue
            if group_size is None:
                g, kept = _int4_auto_group(child.weight)
            else:
                g = _int4_group_size(child.in_features, group_size)
                kept = g is not None and int4_exact(child.weight, g)
            if g is None:
                skipped.append(f"{parent_name}.{name}".lstrip("."))
                continue
            swap.put(parent, name, Int4Linear(child, g))
            groups[g] = groups.get(g, 0) + 1
            exact += kept
    return swap.finish(int4_groups=groups, int4_skipped=skipped, int4_exact=exact, int4_head=head)


# ---------------------------------------------------------------------- GGUF's blocks, as stored
def _q4_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``w (out, in)`` as 4-bit blocks of 32 inputs (GGUF's Q4_1 grid: ``w ~ scale * q + lo``, ``q``
    in 0..15 from the block's own minimum and maximum): ``(codes (out, in/2) uint8, scale, lo (out,
    in/32) float32)``, packed as :func:`zoo.run.qkernels.pack_q4`.  On weights that already lie on
    such a grid (a Q4_1 file, converted) it gives back the file's codes."""
    from .qkernels import pack_q4

    q, scale, lo = int4_groups(w, 32)
    return pack_q4(q), scale.contiguous(), lo.contiguous()


def _q8_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``w (out, in)`` as symmetric 8-bit blocks of 32 inputs (GGUF's Q8_0: ``w ~ scale * q``,
    ``scale = max|w_block| / 127``): ``(codes (out, in) int8, scale (out, in/32) float32)``.  On a
    Q8_0 file, converted, it gives back the file's codes and scales exactly (``d * 127 / 127 = d``
    in float32 for a float16 ``d``)."""
    n, k = w.shape
    g = w.detach().float().reshape(n, k // 32, 32)
    scale = (g.abs().amax(-1) / 127.0)  # (out, in/32)
    q = torch.where(scale[..., None] > 0, g / scale.clamp(min=1e-30)[..., None], torch.zeros_like(g))
    return q.round().clamp(-127, 127).to(torch.int8).reshape(n, k), scale.contiguous()


class BlockLinear(_Packed):
    """``nn.Linear`` with GGUF-style block-quantised weights: 4-bit (Q4_1's grid,
    ``w = scale * q + lo`` per block of 32 inputs, ``bits=4``) or 8-bit (Q8_0's, ``w = scale * q``,
    ``bits=8``), multiplied by :mod:`zoo.run.qkernels`.

    ``forward`` keeps the activations in float32: a decoding step (fewer than
    :data:`zoo.run.qkernels.DEQUANT_ROWS` rows) runs ``torch.ops.zoo.q4_mm`` / ``q8_mm``, which
    round each block of 32 activations to int16 for the dot products (a relative error of at most
    2^-16 of the block's largest value; the minimum's term uses the exact float sums); a prefill
    dequantises the whole matrix to float32 once and runs PyTorch's float32 GEMM, so its logits are
    those of the float32 model on the dequantised weights up to the order of the additions."""

    scheme = "q4"

    def __init__(self, linear: nn.Linear, bits: int):
        super().__init__()
        w = linear.weight.detach().float().cpu()
        n, k = w.shape
        self.bits = bits
        if bits == 4:
            codes, scale, lo = _q4_blocks(w)
        else:
            (codes, scale), lo = _q8_blocks(w), None
        self.register_buffer("codes", codes)
        self.register_buffer("scale", scale)
        self.register_buffer("lo", lo)
        bias = linear.bias.detach().cpu().to(linear.weight.dtype) if linear.bias is not None else None
        self.register_buffer("bias", bias)
        self._kernel = (codes, scale, lo, bias)  # a plain attribute: see Int8Linear
        from . import qkernels

        qkernels.available()  # builds the ops once (quantize_q4 checked they build)
        self._ops, self._dequant_rows = qkernels.OPS, qkernels.DEQUANT_ROWS
        self.in_features, self.out_features = k, n
        self.dtype = linear.weight.dtype
        self.num_weights = linear.weight.numel() + (bias.numel() if bias is not None else 0)
        self.weight_bytes = sum(t.numel() * t.element_size() for t in (codes, scale, lo, bias)
                                if t is not None)

    def dequantized(self) -> torch.Tensor:
        """The float32 weights ``(out, in)`` the blocks stand for."""
        codes, scale, lo, _ = self._kernel
        if self.bits == 4:
            return self._ops["q4_dequant"](codes, scale, lo)
        return self._ops["q8_dequant"](codes, scale)

    def product(self, x: torch.Tensor) -> torch.Tensor:
        codes, scale, lo, bias = self._kernel
        x2 = x.reshape(-1, self.in_features)
        if x2.dtype != torch.float32:
            x2 = x2.float()
        x2 = x2.contiguous()
        if x2.size(0) >= self._dequant_rows:  # a prefill: one float32 GEMM on the unpacked weights
            y = nn.functional.linear(x2, self.dequantized(), bias=None)
        elif self.bits == 4:
            y = self._ops["q4_mm"](x2, codes, scale, lo)
        else:
            y = self._ops["q8_mm"](x2, codes, scale)
        if bias is not None:
            y = y + bias
        if y.dtype != self.dtype:
            y = y.to(self.dtype)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        kind = "Q4_1" if self.bits == 4 else "Q8_0"
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"{self.bits}-bit blocks of 32 ({kind} layout)")


def q4_exact(w: torch.Tensor) -> bool:
    """True when ``w (out, in)`` already lies on GGUF's Q4_1 grid (4-bit blocks of 32 inputs from
    each block's minimum and maximum: :func:`int4_exact` at group 32)."""
    return int4_exact(w, 32)


def q8_exact(w: torch.Tensor) -> bool:
    """True when ``w (out, in)`` already lies on GGUF's Q8_0 grid (``scale * q``, ``q`` in
    -127..127, ``scale = max|block| / 127``): the blocks give back every weight exactly."""
    if w.size(1) % 32:
        return False
    codes, scale = _q8_blocks(w)
    back = codes.float().view(w.size(0), -1, 32) * scale[..., None]
    return bool((back.view_as(w) == w.float()).all())


@torch.no_grad()
def quantize_q4(model: nn.Module, *, head: str = "q8", check: str = "warn",
                text: str | None = None) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` by a 4-bit :class:`BlockLinear` (GGUF's Q4_1
    layout: blocks of 32 inputs, a float scale and minimum each) and the LM head by an 8-bit one
    (Q8_0's layout, ``head="q8"``; ``"q4"`` or ``"float"``), in place; returns ``model``.

    For a model converted from a Q4_1 GGUF file (``zoo.convert.from_gguf``) the blocks are the
    file's own: the codes come back exactly (``model.q4_exact`` counts the layers whose weights lay
    on the grid already, ``model.q8_exact`` the head), so the quantised model computes what the
    float32 conversion computes, from the file's 4.5 bits a weight.  Any other float model is
    rounded to that grid (like ``quantize_int4(model, 32)``, with float scales instead of
    bfloat16 ones).

    Needs the block kernels (:func:`zoo.run.qkernels.available`: a C++ compiler, once per machine)
    and weights whose input size is a multiple of 32; a layer that is not stays float
    (``model.q4_skipped``).  ``check`` and ``text``: the quality check of :func:`quantize_int8`.
    CPU and inference only, like the other schemes."""
    from . import qkernels

    where = "quantize_q4"
    if head not in ("q8", "q4", "float"):
        raise ZooError(f"head must be one of ['q8', 'q4', 'float'], got {head!r}",
                       where=f"{where}.head", options=["q8", "q4", "float"],
                       fix="pass head='q8' (the default: GGUF's 8-bit output layer), 'q4' or 'float'")
    _check_arg(check, where)
    _on_cpu(model, where, "q4 blocks")
    if not qkernels.available():
        raise ZooError(f"zoo's block kernels could not be built here ({qkernels.unavailable()})",
                       where=where, fix="install a C++ compiler (g++ or clang++) and retry, or use "
                                        "quantize_int4 (PyTorch's own int4 kernel)")
    model.eval()
    lm_head = getattr(model, "lm_head", None)
    lm_head = lm_head if type(lm_head) is nn.Linear else None
    swap = _Swap(model, "q4" if head == "q8" else f"q4 head {head}", check, text)
    skipped: list[str] = []
    exact = {"q4": 0, "q8": 0}
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if type(child) is not nn.Linear:
                continue
            if child.in_features % 32:
                skipped.append(f"{parent_name}.{name}".lstrip("."))
                continue
            if child is lm_head and head != "q4":
                if head == "q8":
                    exact["q8"] += q8_exact(child.weight)
                    swap.put(parent, name, BlockLinear(child, 8))
                continue
            exact["q4"] += q4_exact(child.weight)
            swap.put(parent, name, BlockLinear(child, 4))
    return swap.finish(q4_exact=exact["q4"], q8_exact=exact["q8"], q4_skipped=skipped, q4_head=head)

"""A memory budget for building models: refuse a spec that would not fit, before allocating it.

``zoo.build("gpt_tiny", vocab_size=10**9)`` asks for a 10**9 x 128 embedding table: 512 GB.  Without
a budget PyTorch tries, and the process dies or the machine swaps.  Here every tensor *factory* call
made while a model is constructed (``torch.empty`` inside ``nn.Linear``, ``torch.zeros`` inside a
position table, ...) is seen by :class:`Guard` *before* it runs; the bytes it would allocate are
added to a running total, and once the total would pass the budget the build stops with a
:class:`~zoo.errors.SpecError` that names the spec field responsible::

    vocab_size: building this model needs more than the budget of 31.2 GB (available memory on
    cpu): vocab_size = 1000000000 makes a tensor of shape (1000000000, 128), 512.0 GB ...

Why watch the factories instead of computing a formula from the spec?  Plugins own their tensors
(a T5 bias table sized by ``num_buckets``, a rope cache sized by ``max_len``), so only the build
itself knows what it allocates; and building on the ``meta`` device to count would cost a second
of PyTorch imports per process.  The guard costs a few microseconds per factory call.

:func:`zoo.model.build.estimate` gives the exact parameter + buffer bytes of a spec for reports (it builds
one or two layers per stack on ``meta`` and scales by the layer count); :func:`check` is handed that
exact layout by the build, so this module needs nothing above the guards.

Budget: by default the memory available on the target device right now (``MemAvailable`` on the
CPU, free memory on a GPU).  ``zoo.build(..., budget=BYTES)`` sets it explicitly (raise it to
build something large on purpose; ``float("inf")`` turns the check off).
"""
from __future__ import annotations

import math
import os
import re
from typing import Any

import torch

from ..components import SPEC_FAMILIES
from ..deprecation import moved
from ..errors import SpecError
from .run_budget import available_bytes, human_bytes  # noqa: F401  (one reading of memory, shared with the work checks)

_FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn,
              torch.randint, torch.empty_strided, torch.eye, torch.arange, torch.linspace,
              torch.logspace, torch.Tensor.new_empty, torch.Tensor.new_zeros, torch.Tensor.new_ones,
              torch.Tensor.new_full}


def resolve_budget(budget: Any, device: Any = None) -> tuple[float, str]:
    """The budget in bytes and how it was chosen: ``None`` -> available memory; a number -> itself."""
    if budget is None:
        return available_bytes(device)
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or math.isnan(budget) \
            or budget <= 0:
        raise SpecError(f"budget must be a positive number of bytes, got {budget!r:.40}",
                        where="budget", fix="pass e.g. budget=64e9, or float('inf') for no limit")
    return float(budget), "the budget you set"


_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20,
          "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str, where: str = "--budget") -> float:
    """``"64GB"``, ``"512 MiB"``, ``"1e9"`` or ``"inf"`` -> bytes (for ``--budget``)."""
    m = re.fullmatch(r"\s*([0-9.eE+]+|inf)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise SpecError(f"cannot read {str(text)[:40]!r} as a size", where=where,
                        fix="write e.g. 64GB, 512MiB or inf")
    try:
        value = float(m.group(1)) * _UNITS[unit]
    except ValueError:
        raise SpecError(f"cannot read {str(text)[:40]!r} as a size", where=where,
                        fix="write e.g. 64GB, 512MiB or inf") from None
    return resolve_budget(value)[0]


# ---------------------------------------------------------------------- naming the field
#: the spec fields holding one component entry whose integer parameters may size a tensor (a
#: rope cache by ``max_len``, a T5 bias table by ``num_buckets``), from the family table
_SIZED_FIELDS = tuple(f.field for f in SPEC_FAMILIES if not f.many)


def _candidates(spec) -> list[tuple[str, int]]:
    """``(where, value)`` of every integer size in the spec, most likely culprits first."""
    out = [("vocab_size", spec.vocab_size), ("max_len", spec.max_len),
           ("type_vocab_size", spec.type_vocab_size)]
    if spec.head is not None:
        out.append(("head.num_labels", spec.head.num_labels))
    for role in spec.roles:
        over = dict(spec.encoder if role == "encoder" else spec.decoder)
        st = spec.stack(role)
        src = lambda k: f"{role}.{k}" if k in over else k  # noqa: E731
        out.append((src("d_ff"), st.d_ff))
        for field in _SIZED_FIELDS:
            comp = getattr(st, field)
            for k, v in comp.params().items():
                if isinstance(v, int) and not isinstance(v, bool):
                    out.append((f"{src(field)}.{k}", v))
    out.append(("d_model", spec.d_model))
    for role in spec.roles:
        over = dict(spec.encoder if role == "encoder" else spec.decoder)
        st = spec.stack(role)
        for k in ("head_dim", "num_heads", "num_kv_heads"):
            out.append((f"{role}.{k}" if k in over else k, getattr(st, k)))
    return [(w, v) for w, v in out if v and v > 1]


def culprit(spec, shape: tuple[int, ...]) -> tuple[str, int]:
    """The spec field that makes a tensor of ``shape`` large: one equal to its largest dimension,
    else the largest one dividing it (``3 * d_model`` rows of a fused qkv), else ``d_model``."""
    big = max(shape, default=1)
    cands = _candidates(spec)
    for where, v in cands:
        if v == big:
            return where, v
    dividing = [(w, v) for w, v in cands if big % v == 0]
    if dividing:
        return max(dividing, key=lambda wv: wv[1])
    return "d_model", spec.d_model


def _layers_field(spec) -> tuple[str, int]:
    best = ("num_layers", spec.num_layers)
    for role in spec.roles:
        over = dict(spec.encoder if role == "encoder" else spec.decoder)
        if "num_layers" in over and over["num_layers"] > best[1]:
            best = (f"{role}.num_layers", over["num_layers"])
    return best


# ---------------------------------------------------------------------- the guard
def _request(func, args, kwargs) -> tuple[tuple[int, ...], torch.dtype] | None:
    """Shape and dtype a factory call would allocate (None when it cannot be told)."""
    dtype = kwargs.get("dtype")
    try:
        if func in (torch.arange, torch.linspace, torch.logspace):
            nums = [float(a) for a in args if isinstance(a, (int, float))]
            if func is torch.arange:
                start, end, step = ((0.0, nums[0], 1.0) if len(nums) == 1 else
                                    (nums[0], nums[1], nums[2] if len(nums) > 2 else 1.0))
                n = max(0, math.ceil((end - start) / step)) if step else 0
                ints = all(isinstance(a, int) for a in args[:3] if not isinstance(a, torch.Tensor))
                dtype = dtype or (torch.int64 if ints else torch.get_default_dtype())
            else:
                n = int(nums[2]) if len(nums) > 2 else int(kwargs.get("steps", 0))
            return (n,), dtype or torch.get_default_dtype()
        if func is torch.eye:
            n = int(args[0])
            m = int(args[1]) if len(args) > 1 and isinstance(args[1], int) else kwargs.get("m", n)
            return (n, int(m)), dtype or torch.get_default_dtype()
        if func in (torch.Tensor.new_empty, torch.Tensor.new_zeros, torch.Tensor.new_ones,
                    torch.Tensor.new_full):
            dtype = dtype or args[0].dtype
            args = args[1:]
        size = kwargs.get("size", args[0] if args else ())
        if func is torch.randint:  # randint(low?, high, size)
            size = kwargs.get("size", next((a for a in args if isinstance(a, (tuple, list,
                                                                             torch.Size))), ()))
        if isinstance(size, int):
            size = tuple(a for a in args if isinstance(a, int)) \
                if func not in (torch.full, torch.Tensor.new_full) else (size,)
        shape = tuple(int(s) for s in size)
        return shape, dtype or (torch.int64 if func is torch.randint else torch.get_default_dtype())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


class Guard(torch.overrides.TorchFunctionMode):
    """Counts the bytes of tensor factory calls; refuses the call that would pass ``limit``."""

    def __init__(self, spec, limit: float, why: str):
        super().__init__()
        self.spec, self.limit, self.why = spec, limit, why
        self.total = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _FACTORIES:
            req = _request(func, args, kwargs)
            if req is not None:
                shape, dtype = req
                nbytes = math.prod(shape) * (dtype.itemsize if isinstance(dtype, torch.dtype) else 4)
                if self.total + nbytes > self.limit:
                    self.refuse(shape, nbytes)
                self.total += nbytes
        return func(*args, **kwargs)

    def refuse(self, shape: tuple[int, ...], nbytes: int):
        if nbytes > self.limit / 2 or self.total < nbytes:
            where, value = culprit(self.spec, shape)
            _refuse("budget.tensor", self.limit, self.why, where, value=value, shape=shape[:4],
                    size=human_bytes(nbytes))
        where, value = _layers_field(self.spec)  # many moderate tensors: the layer count multiplies them
        _refuse("budget.allocated", self.limit, self.why, where, value=value, size=human_bytes(nbytes),
                allocated=human_bytes(self.total))


def guard(spec, budget: Any = None, device: Any = None, *, layout=None) -> Guard:
    """:func:`check`, then the backstop :func:`zoo.build` wraps around constructing the model: it
    catches a plugin tensor that :func:`rough` did not foresee, before it is allocated."""
    limit, why = check(spec, budget, device, layout=layout)
    return Guard(spec, limit, why)


# ---------------------------------------------------------------------- before building
def lower_bound(spec) -> list[tuple[int, str, int, tuple[int, ...]]]:
    """Tensors every zoo model of ``spec`` has, whatever its plugins: ``(bytes, where, value,
    shape)`` for the token table, the segment table and each stack's q/out projections.  Pure
    arithmetic: refuses ``vocab_size=10**9`` in microseconds."""
    d = spec.d_model
    out = [(4 * spec.vocab_size * d, "vocab_size", spec.vocab_size, (spec.vocab_size, d)),
           (4 * spec.type_vocab_size * d, "type_vocab_size", spec.type_vocab_size,
            (spec.type_vocab_size, d))]
    for role in spec.roles:
        st = spec.stack(role)
        proj = 2 * d * st.num_heads * st.head_dim * 4  # q and out, (h*hd, D) each
        where, value = culprit(spec, (d, st.num_heads * st.head_dim))
        if st.num_layers >= max(d, st.num_heads * st.head_dim):
            where, value = _layers_field(spec)
        out.append((proj * st.num_layers, where, value, (st.num_heads * st.head_dim, d)))
    return out


def rough(spec) -> int:
    """A generous over-estimate for the usual components (no building): embeddings, attention,
    a GLU-sized feed-forward, and a ``value x d_model`` table for every integer in the spec.  When
    it is well under the budget the exact :func:`layout` is skipped (it costs a one-off second of
    PyTorch imports)."""
    d = spec.d_model
    total = sum(v * d for _, v in _candidates(spec)) + 2 * spec.vocab_size * d
    for role in spec.roles:
        st = spec.stack(role)
        attn = 2 * d * st.num_heads * st.head_dim + 2 * d * st.num_kv_heads * st.head_dim
        total += st.num_layers * (2 * attn + 3 * d * st.d_ff + 8 * d)
    return 4 * total


def check(spec, budget: Any = None, device: Any = None, *, layout=None) -> tuple[float, str]:
    """Refuse ``spec`` with a :class:`SpecError` naming the responsible field when its model would
    not fit in ``budget`` bytes (default: memory available on ``device``).  Three steps, cheapest
    first: the :func:`lower_bound` (arithmetic), then -- only when the :func:`rough` over-estimate
    gets near the budget -- the exact ``layout(spec)`` (:func:`zoo.model.build.layout`, which builds on the
    meta device: the model's wing owns building, so it is handed in).  Returns the budget and how it
    was chosen."""
    limit, why = resolve_budget(budget, device)
    if math.isinf(limit):
        return limit, why
    lows = lower_bound(spec)
    if sum(b for b, *_ in lows) > limit:
        nbytes, where, value, shape = max(lows)
        per_layer = where.endswith(("num_layers", "d_model", "num_heads", "head_dim"))
        _refuse("budget.tensor_layers" if per_layer else "budget.tensor", limit, why, where, value=value,
                shape=shape, size=human_bytes(nbytes))
    if rough(spec) < limit / 2 or layout is None:
        return limit, why
    total, rows = layout(spec)
    if total <= limit:
        return limit, why
    nbytes, name, shape, reps = rows[0]
    if reps > 1 and reps + 1 > max(shape, default=1):
        where, value = _layers_field(spec)
        _refuse("budget.repeats", limit, why, where, total=human_bytes(total), value=value, name=name,
                shape=shape)
    where, value = culprit(spec, shape)
    _refuse("budget.makes", limit, why, where, total=human_bytes(total), value=value, name=name, shape=shape,
            size=human_bytes(nbytes))


def _refuse(message_id: str, limit: float, why: str, where: str, **detail):
    """The refusal ``message_id`` (``budget.*`` in :mod:`zoo.messages`): the budget, how it was
    chosen, the field to lower and ``detail``."""
    raise SpecError.of(message_id, where=where, fix="budget.fix", limit=human_bytes(limit), why=why,
                       field=where, **detail)


__getattr__ = moved(__name__)  # the old names it had: zoo.deprecation.NAMES

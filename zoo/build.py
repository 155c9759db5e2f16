"""The front door: ``zoo.build(spec)`` -> a plain ``nn.Module``."""
from __future__ import annotations

import contextlib
from typing import Any

import torch

from . import budget as budgets
from .errors import SpecError, ZooError
from .models import ARCH_CLASSES, init_weights
from .registry import get_registry
from .spec import ModelSpec, parse_spec

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "float64": torch.float64,
           "bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
           "fp16": torch.float16, "half": torch.float16}


def resolve_dtype(dtype: Any) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.replace("torch.", "") in _DTYPES:
        return _DTYPES[dtype.replace("torch.", "")]
    raise ZooError(f"unknown dtype {dtype!r}", where="dtype", options=_DTYPES,
                   fix="use e.g. 'float32' or 'bfloat16'")


def resolve_device(device: Any) -> torch.device | None:
    if device is None:
        return None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ZooError(f"invalid device {device!r}", where="device", options=["cpu", "cuda", "cuda:0"],
                       fix="pass 'cpu' or 'cuda'") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ZooError("CUDA is not available on this machine", where="device", fix="use device='cpu'")
    return dev


class _SkipRandomInit(torch.overrides.TorchFunctionMode):
    """Makes random initialisers no-ops while building a model whose weights will be loaded.

    (Building directly under ``torch.device("meta")`` would skip them too, but the first factory
    call on meta imports PyTorch's Python reference kernels: 0.5-3 s once per process.)"""

    SKIP = frozenset({torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.random_,
                      torch.Tensor.bernoulli_, torch.Tensor.exponential_, torch.Tensor.log_normal_,
                      torch.Tensor.cauchy_, torch.Tensor.geometric_, torch.Tensor.erfinv_,
                      *(getattr(torch.nn.init, n) for n in (
                          "normal_", "uniform_", "trunc_normal_", "kaiming_uniform_",
                          "kaiming_normal_", "xavier_uniform_", "xavier_normal_", "orthogonal_",
                          "sparse_") if hasattr(torch.nn.init, n))})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.SKIP:
            t = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            if isinstance(t, torch.Tensor):
                return t
        return func(*args, **kwargs)


def spec(source: Any, **overrides: Any) -> ModelSpec:
    """Parse and validate a spec (path, preset name, YAML text, dict or ModelSpec) without building."""
    return parse_spec(source, **overrides)


def build(source: Any, *, device: Any = None, dtype: Any = None, seed: int | None = None,
          init: bool = True, budget: float | None = None, **overrides: Any) -> torch.nn.Module:
    """Build a model from a spec.

    ``source``: a YAML path, a preset name (``"gpt_tiny"`` finds ``checkpoints/gpt_tiny.yaml`` when no
    such file exists here), YAML text, a dict or a :class:`~zoo.spec.ModelSpec`.  ``overrides``
    replace spec fields (``num_layers=2``).  ``seed`` makes the initial weights reproducible without
    touching the global RNG.  ``init=False`` skips the initialisation (used when weights are loaded
    right after).  ``budget``: the most bytes the build may allocate (default: the memory available
    on the device; see :mod:`zoo.budget`) -- a spec that needs more is refused, naming the field,
    before the big tensor is allocated.  Returns an ``nn.Module`` with ``.spec``.
    """
    model_spec = parse_spec(source, **overrides)
    dev, dt = resolve_device(device), resolve_dtype(dtype)
    registry = get_registry()
    registry.check_runtime(model_spec, dtype=dt, device=dev)  # declared dtypes / devices
    cls = ARCH_CLASSES[model_spec.arch]
    # the meta path below allocates (uninitialised) on the CPU first, so that is what is budgeted
    guard = budgets.guard(model_spec, budget, dev if dev is not None and dev.type != "meta" else None)
    rng = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    with rng:
        if seed is not None:
            torch.manual_seed(seed)
        if dev is not None and dev.type == "meta":
            # Built on the CPU with every random initialiser skipped (parameters stay
            # uninitialised ``torch.empty``, which costs no time), then moved to meta: zoo.load of
            # GPT-2 small spends milliseconds here instead of a second of random numbers.
            with _SkipRandomInit(), guard:
                model = cls(model_spec, registry)
        else:
            with torch.device(dev) if dev is not None else contextlib.nullcontext():
                with guard:
                    model = cls(model_spec, registry)
                if init:
                    init_weights(model)
    if dev is not None and dev.type == "meta":
        model = model.to("meta")
    if dt is not None:
        if not dt.is_floating_point:
            raise SpecError("dtype must be a floating-point type", where="dtype")
        model = model.to(dt)
    return model

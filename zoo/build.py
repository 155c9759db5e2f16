"""The front door: ``zoo.build(spec)`` -> a plain ``nn.Module``."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

import torch

from . import budget as budgets
from .errors import CheckpointError, SpecError, ZooError, did_you_mean
from .io import list_checkpoints, load, resolve_checkpoint
from .models import ARCH_CLASSES, init_weights
from .registry import get_registry
from .spec import ModelSpec, list_presets, parse_spec, resolve_spec_source
from .trust import probe_attention

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
        model = model.to("meta")  # CPU -> meta makes new Parameters, which unties shared weights:
        if hasattr(model, "tie_weights"):  # tie them again, so meta models count parameters right
            model.tie_weights()
    if dt is not None:
        if not dt.is_floating_point:
            raise SpecError("dtype must be a floating-point type", where="dtype")
        model = model.to(dt)
    if dev is None or dev.type != "meta":
        probe_attention(model)  # a plugin kernel of the wrong shape fails here, naming its plugin
    return model


# ---------------------------------------------------------------------- checkpoint or spec
def checkpoint_or_spec(source: Any) -> Path | ModelSpec:
    """What ``source`` names, decided in one place for ``zoo run``, ``zoo bench``, ``zoo train`` and
    ``zoo inspect``: a checkpoint's weights file (a ``.safetensors`` file, a folder holding one, a
    shipped checkpoint's name) if it is one, else a parsed spec (a YAML path, a preset name, YAML
    text, a dict, a ``ModelSpec``).  Neither: a ``CheckpointError`` naming both kinds of options."""
    if isinstance(source, (str, os.PathLike)):
        try:
            return resolve_checkpoint(source)
        except CheckpointError as not_checkpoint:
            try:
                resolve_spec_source(source)  # a spec file, preset or YAML text?
            except SpecError:
                names = list_checkpoints() + [p for p in list_presets() if p not in list_checkpoints()]
                raise CheckpointError(
                    f"'{source}' is neither a checkpoint nor a spec ({not_checkpoint.what})",
                    where=str(source), options=names,
                    fix=did_you_mean(str(source), names) or "pass a checkpoint (a .safetensors file, a "
                    "folder holding one, a shipped name) or a spec (a YAML file, a preset name)"
                ) from None
    return parse_spec(source)


def load_or_build(source: Any, *, device: Any = None, dtype: Any = None, seed: int = 0,
                  **overrides: Any) -> torch.nn.Module:
    """The checkpoint ``source`` names (:func:`zoo.load`), else the spec it names built with random
    weights from ``seed`` (:func:`zoo.build`, with ``overrides`` of spec fields); see
    :func:`checkpoint_or_spec`.  Overrides apply to specs only: a trained checkpoint is loaded as
    saved."""
    what = checkpoint_or_spec(source)
    if isinstance(what, Path):
        if overrides:
            raise ZooError(f"overrides (--set {', '.join(sorted(overrides))}) apply to specs, not to "
                           "trained checkpoints", where=str(source),
                           fix="name the spec instead (zoo bench SPEC --set ...), or drop the overrides")
        return load(what, device=device, dtype=dtype)
    return build(what, device=device, dtype=dtype, seed=seed, **overrides)

"""The front door: ``zoo.build(spec)`` -> a plain ``nn.Module``."""
from __future__ import annotations

import contextlib
import math
import sys
import types
from typing import Any

import torch

from ..guard import build_budget as budgets
from .assembly import SkipRandomInit, construct, on_meta, probe_components
from ..guard.compat import check_runtime
from ..deprecation import moved
from ..errors import SpecError, ZooError
from .models import init_weights
from ..registry import get_registry
from .spec import parse_spec

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


def build(source: Any, *, device: Any = None, dtype: Any = None, seed: int | None = None,
          init: bool = True, budget: float | None = None, **overrides: Any) -> torch.nn.Module:
    """Build a model from a spec.

    ``source``: a YAML path, a preset name (``"gpt_tiny"`` finds ``checkpoints/gpt_tiny.yaml`` when no
    such file exists here), YAML text, a dict or a :class:`~zoo.model.spec.ModelSpec`.  ``overrides``
    replace spec fields (``num_layers=2``).  ``seed`` makes the initial weights reproducible without
    touching the global RNG.  ``init=False`` skips the initialisation (used when weights are loaded
    right after); ``init`` given a scheme name or mapping (``init="kaiming"``,
    ``init={"scheme": "normal", "std": 1.0}``) is the spec's ``init:`` field instead, like any other
    override.  ``budget``: the most bytes the build may allocate (default: the memory available
    on the device; see :mod:`zoo.guard.build_budget`) -- a spec that needs more is refused, naming the field,
    before the big tensor is allocated.  Returns an ``nn.Module`` with ``.spec``.
    """
    if not isinstance(init, bool):  # the spec field `init:` (a scheme), not the on/off switch
        overrides["init"], init = init, True
    model_spec = parse_spec(source, **overrides)
    dev, dt = resolve_device(device), resolve_dtype(dtype)
    registry = get_registry()
    check_runtime(model_spec, dtype=dt, device=dev, registry=registry)  # declared dtypes / devices
    # the meta path below allocates (uninitialised) on the CPU first, so that is what is budgeted
    guard = budgets.guard(model_spec, budget, dev if dev is not None and dev.type != "meta" else None,
                          layout=layout)
    rng = torch.random.fork_rng(devices=[]) if seed is not None else contextlib.nullcontext()
    with rng:
        if seed is not None:
            torch.manual_seed(seed)
        if dev is not None and dev.type == "meta":
            model = on_meta(model_spec, registry, guard)  # no random numbers for weights to come
        else:
            with torch.device(dev) if dev is not None else contextlib.nullcontext():
                with guard:
                    model = construct(model_spec, registry)
                if init:
                    init_model(model, model_spec.init)
    if dt is not None:
        if not dt.is_floating_point:
            raise SpecError("dtype must be a floating-point type", where="dtype")
        model = model.to(dt)
    if dev is None or dev.type != "meta":
        probe_components(model)  # a component breaking its contract fails here, naming its plugin
    return model


#: the last name segment of a block's residual output projections (what ``scaled`` divides): the
#: attention's ``out`` and the feed-forward's ``down`` (every built-in attention and MLP / GLU names
#: them so; a plugin layer named otherwise keeps the plain ``std``)
RESIDUAL_OUT = ("out", "down")


def init_model(model: torch.nn.Module, init=None) -> torch.nn.Module:
    """Draw ``model``'s weights by the spec's ``init:`` (an :class:`~zoo.model.spec.InitSpec`, or
    None for the default: N(0, 0.02), exactly what zoo always did, so old runs keep their numbers).

    Every scheme starts from the default pass (linear and embedding weights N(0, std), biases 0,
    components with their own ``reset_parameters`` keep theirs), then redraws by the scheme:
    ``scaled`` divides each block's residual output projections by sqrt(2 x num_layers) (GPT-2:
    the residual stream's variance then stays O(1) with depth instead of growing with the number of
    sums); ``xavier_uniform`` and ``kaiming`` redraw every linear weight from its fan-in / fan-out.
    A tied LM head (the embedding's own tensor) keeps the embedding's N(0, std)."""
    if init is None:
        init_weights(model)
        return model
    init_weights(model, std=init.std)
    emb = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    for name, m in model.named_modules():
        if not isinstance(m, torch.nn.Linear) or id(m.weight) in emb:
            continue
        w = m.weight
        if init.scheme == "scaled" and ".blocks." in name and name.rsplit(".", 1)[-1] in RESIDUAL_OUT:
            layers = model.spec.stack(name.split(".", 1)[0]).num_layers \
                if name.split(".", 1)[0] in model.spec.roles else model.spec.num_layers
            with torch.no_grad():
                w.mul_(1.0 / math.sqrt(2 * layers))
        elif init.scheme == "xavier_uniform":
            torch.nn.init.xavier_uniform_(w, gain=init.gain)
        elif init.scheme == "kaiming":
            torch.nn.init.normal_(w, 0.0, init.gain / math.sqrt(w.shape[1]))  # (out, in): fan_in
    return model


#: what reads checkpoints moved up to :mod:`zoo.io.loading` (building reads no files); ``zoo.spec(...)``
#: is the spec module itself, callable
__getattr__ = moved(__name__)  # the old names it had: zoo.deprecation.NAMES


# ---------------------------------------------------------------------- the exact size of a spec
def layout(spec) -> tuple[int, list[tuple[int, str, tuple[int, ...], int]]]:
    """Exact parameter + buffer bytes of ``spec``'s model (shared tensors once), and the tensors
    ``(total bytes over all layers, name, shape, repeats)``, largest first.

    Builds each stack with at most two layers on the ``meta`` device (nothing allocated) and
    scales the second layer by the layer count, so a 4096-layer spec costs what a 2-layer one does.
    """
    layers = {role: spec.stack(role).num_layers for role in spec.roles}
    raw = spec.to_dict()
    raw["num_layers"] = min(raw["num_layers"], 2)
    for role in ("encoder", "decoder"):
        if role in raw and "num_layers" in raw[role]:
            raw[role]["num_layers"] = min(raw[role]["num_layers"], 2)
    small = parse_spec(raw)
    with SkipRandomInit(), torch.device("meta"):
        model = construct(small)
    rows, seen = [], set()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if id(t) in seen:
            continue
        seen.add(id(t))
        role = name.split(".", 1)[0]
        reps = layers[role] - 1 if f"{role}.blocks.1." in name and role in layers else 1
        rows.append((t.numel() * t.element_size() * reps, name, tuple(t.shape), reps))
    rows.sort(reverse=True)
    return sum(r[0] for r in rows), rows


def estimate(spec) -> int:
    """Exact bytes of the parameters and buffers of ``spec``'s model (see :func:`layout`)."""
    return layout(spec)[0]


class _BuildModule(types.ModuleType):
    """``zoo.build(...)`` keeps building even after ``import zoo.build`` (the 0.x module path,
    :data:`zoo.deprecation.MODULES`) binds the name ``zoo.build`` to this module."""

    def __call__(self, source: Any, **kwargs: Any) -> torch.nn.Module:
        return build(source, **kwargs)


sys.modules[__name__].__class__ = _BuildModule

"""Assembling a model object from a spec: construct, build on meta, fill with weights, probe.

The one place that knows how a zoo model comes into being, below everything that makes one
(:func:`zoo.build`, :func:`zoo.load`, the converters, the memory budget):

- :func:`construct` -- the architecture class of ``spec.arch`` over the registry's components;
- **build on meta, load, tie, materialize** -- a model whose weights come from a file is never
  randomly initialised: :func:`on_meta` builds it with every initialiser skipped and moves it to
  the ``meta`` device (shapes, no storage), and :func:`fill` assigns the read tensors as its
  weights, ties the shared ones again, gives what is still on meta (non-persistent buffers)
  storage, and recomputes those buffers;
- :func:`probe_attention` -- each attention kernel of a freshly built model runs once on tiny
  tensors, so a plugin kernel that breaks the contract fails at build time, naming its plugin.
"""
from __future__ import annotations

import contextlib
from typing import Any, Mapping

import torch
from torch import nn

from .errors import PluginError
from .layers import Attention, AttnArgs, call_kernel
from .models import ARCH_CLASSES
from .registry import get_registry
from .trust import clip


class SkipRandomInit(torch.overrides.TorchFunctionMode):
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


def construct(spec, registry=None) -> nn.Module:
    """The model object of ``spec`` (its architecture class over the registry's components), built
    on the current default device, initialised as the components initialise themselves."""
    return ARCH_CLASSES[spec.arch](spec, registry if registry is not None else get_registry())


def on_meta(spec, registry=None, guard: Any = None) -> nn.Module:
    """``spec``'s model on the ``meta`` device: every shape, no storage, no random numbers.

    Built on the CPU with every random initialiser skipped (parameters stay uninitialised
    ``torch.empty``, which costs no time), then moved to meta: ``zoo.load`` of GPT-2 small spends
    milliseconds here instead of a second of random numbers.  ``guard``: a context around the
    construction (the memory budget's :class:`~zoo.budget.Guard`)."""
    with SkipRandomInit(), (guard if guard is not None else contextlib.nullcontext()):
        model = construct(spec, registry)
    model = model.to("meta")  # CPU -> meta makes new Parameters, which unties shared weights:
    if hasattr(model, "tie_weights"):  # tie them again, so meta models count parameters right
        model.tie_weights()
    return model


def materialize(model: nn.Module, device: torch.device) -> None:
    """Give every tensor still on the meta device (uninitialised) storage on ``device``.

    Cheaper than ``Module.to_empty`` before loading: that would allocate every weight only for
    ``load_state_dict(assign=True)`` to replace it."""
    for m in model.modules():
        for name, b in m._buffers.items():
            if b is not None and b.is_meta:
                m._buffers[name] = torch.empty(b.shape, dtype=b.dtype, device=device)
        for name, p in m._parameters.items():
            if p is not None and p.is_meta:
                m._parameters[name] = torch.nn.Parameter(
                    torch.empty(p.shape, dtype=p.dtype, device=device), requires_grad=p.requires_grad)


def fill(model: nn.Module, state: Mapping[str, torch.Tensor], device: torch.device) -> nn.Module:
    """A meta model (:func:`on_meta`) made real: the tensors of ``state`` become its weights
    (assigned, not copied), shared weights are tied again, what is still on meta (non-persistent
    buffers; gaps of a non-strict load) gets storage on ``device``, and derived buffers are
    recomputed.  Returns ``model``."""
    model.load_state_dict(dict(state), strict=False, assign=True)  # the tensors become the weights
    model.tie_weights()
    materialize(model, device)
    model.reset_buffers()
    return model


def probe_attention(model: nn.Module) -> None:
    """Run each attention kernel of a freshly built ``model`` once on tiny tensors (1 x h x 3 x hd)
    through the engine's contract, and raise a :class:`~zoo.errors.PluginError` naming the plugin
    when the kernel raises or returns the wrong shape -- at build time, not mid-generation.

    A layer whose weights are still on the meta device is skipped (nothing can run there); the
    other layers are probed all the same."""
    owners = {c.cls: c for c in get_registry().components.get("attention", {}).values()}
    seen = set()
    for module in model.modules():
        if not isinstance(module, Attention):
            continue
        param = next(module.parameters(), None)
        if param is None or param.is_meta:
            continue  # this layer cannot run; the next one may
        key = (type(module.kernel), module.h, module.h_kv, module.hd)
        if key not in seen:
            seen.add(key)
            _probe_one(module, param, owners.get(type(module.kernel)))


def _probe_one(module: Attention, param: torch.Tensor, comp) -> None:
    kernel = module.kernel
    who = (f"attention '{comp.name}' from plugin {comp.plugin} {comp.version}" if comp
           else f"attention kernel {type(kernel).__name__}")

    def broken(what: str) -> PluginError:
        return PluginError(what, where=comp.plugin if comp else "attention",
                           fix="fix the kernel, or choose another attention kind")

    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(1, h, 3, module.hd, generator=g).to(param.device, param.dtype)
               for h in (module.h, module.h_kv, module.h_kv))
    caps = kernel.capabilities
    args = AttnArgs.make(3, 3, param.device, is_causal=True, fused_causal=caps.fused_causal)
    try:
        with torch.no_grad():
            out, weights = call_kernel(kernel, q, k, v, args, need_weights=bool(caps.returns_weights))
    except Exception as exc:  # noqa: BLE001 - a plugin may raise anything
        raise broken(f"{who} fails on a tiny probe (q {tuple(q.shape)}, k/v {tuple(k.shape)}): "
                     f"{type(exc).__name__}: {clip(exc, 160)}") from exc
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(q.shape):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise broken(f"{who} returns output of shape {got} for q {tuple(q.shape)}; the contract "
                     f"is (B, h, Tq, hd) = {tuple(q.shape)}")
    if weights is not None and tuple(weights.shape) != (1, module.h, 3, 3):
        raise broken(f"{who} returns weights of shape {tuple(weights.shape)}; the contract is "
                     f"(B, h, Tq, Tk) = {(1, module.h, 3, 3)}")

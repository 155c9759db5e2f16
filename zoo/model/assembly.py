"""Assembling a model object from a spec: construct, build on meta, fill with weights, probe.

The one place that knows how a zoo model comes into being, below everything that makes one
(:func:`zoo.build`, :func:`zoo.load`, the converters, the memory budget):

- :func:`construct` -- the architecture class of ``spec.arch`` over the registry's components;
- **build on meta, load, tie, materialize** -- a model whose weights come from a file is never
  randomly initialised: :func:`on_meta` builds it with every initialiser skipped and moves it to
  the ``meta`` device (shapes, no storage), and :func:`fill` assigns the read tensors as its
  weights, ties the shared ones again, gives what is still on meta (non-persistent buffers)
  storage, and recomputes those buffers;
- :func:`probe_components` -- the build probe: a freshly built model runs on tiny inputs of two
  lengths with every component's output held to its family's contract
  (:mod:`zoo.guard.outputs`), so a plugin component that breaks it fails at build time, naming
  its plugin; :func:`probe_attention` is the older, attention-only probe (kept for models whose
  weights are partly on the meta device);
- the run-time check: :func:`construct` puts the output-contract check in front of every
  component of a third-party plugin (once per new input shape; ``ZOO_CHECK_OUTPUTS``).
"""
from __future__ import annotations

import contextlib
from typing import Any, Mapping

import torch
from torch import nn

from ..guard import outputs as output_contract
from ..guard.compat import require
from ..errors import IncompatibleComponentsError, PluginError
from .layers import Attention, AttnArgs, call_kernel
from .models import ARCH_CLASSES
from ..registry import get_registry
from ..guard.files import clip


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
    on the current default device, initialised as the components initialise themselves, with the
    run-time output check in front of each third-party component (:func:`zoo.guard.outputs.install`;
    ``ZOO_CHECK_OUTPUTS`` chooses which components)."""
    registry = registry if registry is not None else get_registry()
    model = ARCH_CLASSES[spec.arch](spec, registry)
    output_contract.install(model, registry=registry)
    return model


def on_meta(spec, registry=None, guard: Any = None) -> nn.Module:
    """``spec``'s model on the ``meta`` device: every shape, no storage, no random numbers.

    Built on the CPU with every random initialiser skipped (parameters stay uninitialised
    ``torch.empty``, which costs no time), then moved to meta: ``zoo.load`` of GPT-2 small spends
    milliseconds here instead of a second of random numbers.  ``guard``: a context around the
    construction (the memory budget's :class:`~zoo.guard.build_budget.Guard`)."""
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


#: the sequence lengths of the build probe: one token, and a short length that is not a power of
#: two (both cut to ``max_len``); a decoder that supports a KV cache runs the longer one as a prompt
#: and then one cached step, so the cached path (queries a suffix of the keys) is probed as well
PROBE_LENGTHS = (3, 1)


def _probe_ids(spec, n: int, device) -> torch.Tensor:
    """``(1, n)`` token ids for the probe, never the pad id (so no position is padding)."""
    ids = [t for t in range(1, min(spec.vocab_size, n + 2)) if t != spec.pad_id] or [0]
    return torch.tensor([[ids[i % len(ids)] for i in range(n)]], device=device)


def probe_components(model: nn.Module, which: str | None = None) -> None:
    """The build probe: run the freshly built ``model`` on tiny inputs of :data:`PROBE_LENGTHS`
    (1 x 3 tokens and 1 x 1 token; for a decoder with a KV cache, a 3-token prompt and one cached
    step) with each component's output held to its family's contract (dtype, device, shape,
    finiteness; :mod:`zoo.guard.outputs`), so a component that breaks it -- or raises -- fails
    here with a :class:`~zoo.errors.PluginError` naming its plugin, at build time rather than
    mid-generation.  Every family the spec uses runs through its own code path: attention kernels,
    mask rules, position schemes, norms, placements, feed-forward blocks.

    ``which`` (default: ``ZOO_CHECK_OUTPUTS``, else ``"plugins"``) chooses the components held to
    their contract, as for the run-time check: by default those of plugins not shipped with zoo
    (the components :func:`construct` put the run-time check on), so a model of built-in
    components (held to the contracts by zoo's own tests) skips the probe and builds as fast as
    before; ``"all"`` probes the built-ins too; ``"off"`` nothing.

    Runs in eval mode under ``torch.no_grad`` (no dropout, no random numbers, no gradient; BatchNorm
    statistics untouched) and leaves the model's modes and its run-time wrappers as they were.  A
    model with weights on the meta device cannot run: its real attention layers get
    :func:`probe_attention` instead."""
    which = output_contract.policy(which)
    if which == "off":
        return
    modules = list(model.modules())
    if which == "plugins" and not output_contract.installed(model, modules):
        return  # no third-party component (construct put the run-time check on each): built-ins only
    tensors = [t for m in modules for t in (*m._parameters.values(), *m._buffers.values())
               if t is not None]
    if not tensors or any(t.is_meta for t in tensors):
        probe_attention(model)
        return
    modes = [(m.__dict__, m.training) for m in modules]
    try:
        with output_contract.checking(model, which, probing=True, modules=modules) as wrappers, \
                torch.no_grad():
            if wrappers:  # else nothing to hold to a contract
                for d, _ in modes:
                    d["training"] = False  # eval mode (what Module.eval sets, minus its recursion)
                _probe_forwards(model, wrappers, tensors[0].device)
    finally:
        for d, training in modes:
            d["training"] = training


def _probe_forwards(model: nn.Module, wrappers: list, device: torch.device) -> None:
    spec = model.spec
    lengths = sorted({min(n, spec.max_len) for n in PROBE_LENGTHS}, reverse=True)  # (3, 1)
    first = lengths[0]
    ids = _probe_ids(spec, first + 1, device)  # (1, 4)
    cached = spec.arch == "decoder" and spec.max_len > first
    if cached:
        try:
            require(spec, "supports_kv_cache", "the build probe's cached step")
        except IncompatibleComponentsError:
            cached = False

    def run(what: str, call) -> None:
        for w in wrappers:
            w.context = f"on the build probe ({what})"
        call()

    if cached:  # a prompt, then one token under the KV cache: lengths 3 and 1
        cache = model.new_cache(first + 1)
        run(f"a prompt of {first} tokens", lambda: model(ids[:, :first], cache=cache))
        run(f"one cached step after {first} tokens", lambda: model(ids[:, first:first + 1], cache=cache))
        return
    for T in lengths:
        if spec.arch == "encoder_decoder":
            run(f"{T} source and {T} target tokens", lambda: model(ids[:, :T], ids[:, :T]))
        else:
            run(f"{T} tokens", lambda: model(ids[:, :T]))

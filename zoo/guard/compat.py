"""Which components can work together: the compatibility rules, checked once.

Components declare what they can do (:class:`~zoo.components.Capabilities`); the rules here hold
those declarations against a spec and say, with the fix, what cannot work:

- :func:`check_compatible` -- one stack's components with each other (a score bias needs a kernel
  that takes one; a kernel without masks needs a causal or no mask); the spec parser calls it once
  per stack;
- :func:`check_runtime` -- every component against the dtype and device a model is built for;
- :func:`require` -- a capability a feature needs (``supports_kv_cache`` for cached generation).

The registry (:mod:`zoo.registry`) loads plugins and looks components up; it knows no rule.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..components import FAMILIES, Capabilities
from ..errors import IncompatibleComponentsError
from ..registry import KNOWN_DTYPES, Component, Registry, get_registry

#: (spec field, family) of the one-per-stack components, for compatibility messages
STACK_COMPONENTS = tuple((f.field, f.name) for f in FAMILIES if f.per_stack and not f.many)


def stack_components(spec, role: str, registry: Registry | None = None) -> list[tuple[str, Component]]:
    """``(spec field, component)`` for every component one stack of ``spec`` uses."""
    reg = registry if registry is not None else get_registry()
    st = spec.stack(role)
    out = [(fld, reg.get(fam, getattr(st, fld).kind)) for fld, fam in STACK_COMPONENTS]
    out += [(f"mask[{i}]" if len(st.mask) > 1 else "mask", reg.get("mask", m.kind))
            for i, m in enumerate(st.mask)]
    return out


def check_compatible(spec, role: str, src=None, registry: Registry | None = None) -> None:
    """Raise :class:`IncompatibleComponentsError` if the components of one stack cannot work
    together.  ``src(field)`` names where a field's value came from (``decoder.attention`` when a
    per-stack section set it); called once per stack by the spec parser."""
    reg = registry if registry is not None else get_registry()
    src = src or (lambda k: k)
    st = spec.stack(role)
    attn = reg.get("attention", st.attention.kind)
    pos = reg.get("position", st.positions.kind)
    caps = attn.capabilities
    a = f"attention '{attn.name}' (plugin {attn.plugin})"

    def kernels(flag):
        return [c.name for c in reg.list("attention") if getattr(c.capabilities, flag)]

    if pos.cls.acts_on_scores and not caps.supports_bias:
        raise IncompatibleComponentsError(
            f"positions '{pos.name}' (plugin {pos.plugin}) adds a bias to the attention scores, "
            f"but {a} cannot take a score bias", where=f"{src('attention')}.kind",
            options=kernels("supports_bias"),
            fix=f"change {src('attention')} to a kernel that accepts a bias (the options), or "
                f"{src('positions')} to a scheme that does not act on the scores (e.g. rope, "
                f"sinusoidal)")
    masks = [reg.get("mask", m.kind) for m in st.mask]
    plain_causal = all(m.cls.is_causal for m in masks)
    trivial = plain_causal or all(m.name == "bidirectional" for m in masks)
    shown = [m.kind for m in st.mask]
    if caps.causal_only and not plain_causal:
        raise IncompatibleComponentsError(
            f"{a} only supports a plain causal mask, but mask is {shown}",
            where=f"{src('attention')}.kind", options=kernels("supports_mask"),
            fix=f"set {src('mask')}: causal, or change {src('attention')} to one of the options")
    if not caps.supports_mask:
        if not trivial:
            raise IncompatibleComponentsError(
                f"{a} supports only causal or no masking, but mask is {shown}",
                where=src("mask"), options=kernels("supports_mask"),
                fix=f"set {src('mask')}: causal or bidirectional, or change "
                    f"{src('attention')} to one of the options")
        if spec.pad_id is not None:
            raise IncompatibleComponentsError(
                f"pad_id {spec.pad_id} makes zoo mask padding tokens, but {a} cannot take a "
                f"mask", where=f"{src('attention')}.kind", options=kernels("supports_mask"),
                fix=f"remove pad_id (and batch only equal-length sequences), or change "
                    f"{src('attention')} to one of the options")


def check_runtime(spec, *, dtype: Any = None, device: Any = None,
                  registry: Registry | None = None) -> None:
    """Raise :class:`IncompatibleComponentsError` if a component of ``spec`` does not declare
    support for ``dtype`` (a ``torch.dtype`` or name; default: torch's default dtype) or the
    type of ``device`` (default ``cpu``; the ``meta`` device is always fine)."""
    reg = registry if registry is not None else get_registry()
    dt = dtype if dtype is not None else torch.get_default_dtype()
    dt_name = str(dt).replace("torch.", "")
    dev = "cpu" if device is None else torch.device(device).type
    for role in spec.roles:
        prefix = f"{role}." if spec.arch == "encoder_decoder" else ""
        for fld, comp in stack_components(spec, role, reg):
            kind = f"{comp.family} '{comp.name}' (plugin {comp.plugin})"
            for what, value, skip in (("dtype", dt_name, dt_name not in KNOWN_DTYPES),
                                      ("device", dev, dev == "meta")):
                declared = getattr(comp.capabilities, what + "s")
                if skip or value in declared:
                    continue
                alts = [c.name for c in reg.list(comp.family)
                        if value in getattr(c.capabilities, what + "s")]
                raise IncompatibleComponentsError(
                    f"{kind} declares {what}s {list(declared)}, not {value}",
                    where=f"{prefix}{fld}", options=alts,
                    fix=f"build with {what}={declared[0]!r}, or choose a {comp.family} that "
                        f"supports {value}")


def require(spec, capability: str, purpose: str, registry: Registry | None = None) -> None:
    """Raise :class:`IncompatibleComponentsError` unless every attention kernel of ``spec``
    declares ``capability`` (a :class:`~zoo.components.Capabilities` flag), e.g.
    ``require(spec, "supports_kv_cache", "generation with a KV cache")``."""
    reg = registry if registry is not None else get_registry()
    if capability not in {f.name for f in dataclasses.fields(Capabilities)}:
        raise ValueError(f"unknown capability {capability!r}")
    for role in spec.roles:
        prefix = f"{role}." if spec.arch == "encoder_decoder" else ""
        for fld, comp in stack_components(spec, role, reg):
            if not getattr(comp.capabilities, capability):
                alts = [c.name for c in reg.list(comp.family)
                        if getattr(c.capabilities, capability)]
                raise IncompatibleComponentsError.of(
                    "compat.undeclared", where=f"{prefix}{fld}", options=alts, purpose=purpose,
                    capability=capability.replace("_", " "), family=comp.family, name=comp.name,
                    plugin=comp.plugin, field=f"{prefix}{fld}",
                    example=f"model.spec.replace({fld.split('[')[0]}={(alts or ['...'])[0]!r})")

"""Model specs: YAML (or a dict) -> frozen, validated dataclasses -> YAML again.

A spec is parsed once, every value is checked, and each component entry ``{kind: NAME, **params}`` is
validated by that component's own config dataclass.  ``spec.to_yaml()`` writes it back out so that
``parse_spec(spec.to_yaml()) == spec``.  Values derived from others (``num_kv_heads`` defaults to
``num_heads``, ``head_dim`` to ``d_model // num_heads``, ``d_ff`` to ``4 * d_model``) stay ``None`` in
the spec, so overriding ``num_heads`` later does what you mean; :meth:`ModelSpec.stack` resolves them.

An ``encoder_decoder`` spec may carry ``encoder:`` and ``decoder:`` sections that override the shared
per-stack fields (:data:`STACK_FIELDS`) for that stack only.
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Union

import yaml

from ..checkpoints import __file__ as _shipped_init  # the shipped folder, installed as the package ``zoo.checkpoints``
from ..guard import files as trust
from ..guard.compat import check_compatible
from ..components import FAMILY, SPEC_FAMILIES, BuildContext, Registered
from ..errors import SpecError, closest
from ..registry import get_registry
from ..guard.files import short

ARCHS = ("encoder", "decoder", "encoder_decoder")
HEADS = ("mlm", "classifier", "none")
POOLINGS = ("mean", "cls", "max")


# ---------------------------------------------------------------------- component entries
@dataclass(frozen=True)
class ComponentSpec:
    """One ``{kind: NAME, **params}`` entry, its params already validated into ``config``."""

    family: str
    kind: str
    config: Any = None  # an instance of the component's config dataclass, or None

    def params(self, changed: bool = False) -> dict[str, Any]:
        """The entry's parameters, every one (``changed=False``: what a saved spec records, so a
        later release's new default cannot change a saved model), or only those that differ from
        the component's defaults (``changed=True``: what a person reads -- ``rope`` rather than
        ``rope(base=10000.0, interleaved=False, fraction=1.0, scaling=none, ...)``)."""
        if self.config is None:
            return {}
        out = {f.name: _plain(getattr(self.config, f.name)) for f in dataclasses.fields(self.config)}
        if changed:
            defaults = _config_defaults(type(self.config))
            out = {k: v for k, v in out.items() if k not in defaults or defaults[k] != v}
        return out

    def to_yaml_value(self, brief: bool = False) -> Any:
        """``NAME`` or ``{kind: NAME, **params}``; ``brief``: only the parameters that differ from
        the defaults (:meth:`params`), as a card shows a spec."""
        params = self.params(changed=brief)
        return {"kind": self.kind, **params} if params else self.kind

    def __str__(self) -> str:
        """``kind(param=value, ...)`` with the parameters that differ from the defaults: the form
        every summary, card and diagram shows (``rope``, ``layernorm(eps=1e-12)``)."""
        params = ", ".join(f"{k}={v}" for k, v in self.params(changed=True).items())
        return f"{self.kind}({params})" if params else self.kind


def _config_defaults(cls: type) -> dict[str, Any]:
    """Field -> default value of a component's config dataclass (fields without a default left out)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = _plain(f.default)
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = _plain(f.default_factory())  # type: ignore[misc]
    return out


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


def parse_component(family: str, value: Any, where: str, registry=None) -> ComponentSpec:
    """``"causal"`` or ``{kind: "sliding_window", window: 64}`` -> a validated ComponentSpec."""
    reg = registry or get_registry()
    if isinstance(value, str):
        kind, params = value, {}
    elif isinstance(value, Mapping):
        if "kind" not in value:
            raise SpecError("component entry has no 'kind'", where=where, options=reg.names(family),
                            fix=f"write e.g. {{kind: {(reg.names(family) or ['NAME'])[0]}}}")
        kind, params = value["kind"], {k: v for k, v in value.items() if k != "kind"}
        if not isinstance(kind, str):
            raise SpecError(f"'kind' must be a name, got {short(kind)}", where=f"{where}.kind",
                            options=reg.names(family))
    else:
        raise SpecError(f"expected a name or a mapping with 'kind', got {type(value).__name__} "
                        f"{short(value)}", where=where, options=reg.names(family))
    comp = reg.get(family, kind, where=f"{where}.kind")
    return ComponentSpec(family, kind, make_config(comp.config, params, where, kind))


def make_config(config_cls: type | None, params: Mapping[str, Any], where: str, kind: str = "") -> Any:
    """Validate ``params`` against a config dataclass: unknown keys, types, ``__post_init__``."""
    if config_cls is None:
        if params:
            raise SpecError(f"'{kind}' takes no parameters, got {sorted(params)}", where=where,
                            fix=f"write just `{kind}`")
        return None
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls, include_extras=True)  # keeps Registered markers
    values = {}
    for key, val in params.items():
        if key not in fields:
            best = closest(key, fields)
            raise SpecError.of("spec.unknown_parameter", where=f"{where}.{key}", options=fields,
                               param=key, kind=kind, suggestion=best,
                               fix="hint.did_you_mean" if best else "hint.remove_it")
        values[key] = coerce(val, hints[key], f"{where}.{key}")
    missing = [n for n, f in fields.items() if n not in values and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
    if missing:
        raise SpecError(f"'{kind}' needs parameter(s) {missing}", where=where,
                        fix=f"add e.g. `{missing[0]}: ...` to the entry")
    try:
        return config_cls(**values)
    except (ValueError, TypeError) as exc:
        if getattr(exc, "message_id", None):  # a ParamError: its message keeps its id, here
            raise SpecError.of(exc.message_id, where=where, fix=exc.fix_ids or "spec.component_docs",
                               **exc.params) from exc
        raise SpecError.of("spec.component_refused", where=where, fix="spec.component_docs",
                           text=str(exc)) from exc


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Check ``value`` against a type hint, converting the harmless cases (int -> float, list ->
    tuple).  Supports int, float, bool, str, None, Optional/Union, Literal, tuple[X, ...] and
    ``Annotated[str, Registered(family)]`` (the name of a registered component, such as a
    feed-forward block's ``activation``: checked against the live registry)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is typing.Annotated:  # Annotated[str, Registered("activation")]: a registered name
        base, *marks = typing.get_args(tp)
        value = coerce(value, base, where)
        for mark in marks:
            if isinstance(mark, Registered):
                get_registry().get(mark.family, value, where=where)  # unknown: lists the names
        return value
    if origin is Union or origin is types.UnionType:  # Optional[int] and int | None alike
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce(value, a, where)
            except SpecError:
                continue
        names = " or ".join(_type_name(a) for a in args)
        raise SpecError.of("value.expected", where=where, expected=names, value=short(value))
    if origin is Literal:
        opts = typing.get_args(tp)
        if value not in opts:
            best = closest(str(value), [str(o) for o in opts])
            raise SpecError.of("value.invalid", where=where, options=[str(o) for o in opts],
                               value=short(value), suggestion=best,
                               fix=["hint.did_you_mean" if best else None])
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise SpecError.of("value.expected_list", where=where, value=short(value))
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        return tuple(coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError.of("value.expected_bool", where=where, value=short(value))
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError.of("value.expected_int", where=where, value=short(value))
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpecError.of("value.expected_number", where=where, value=short(value))
        if not math.isfinite(value):
            raise SpecError.of("value.expected_finite", where=where, value=short(value))
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise SpecError.of("value.expected_string", where=where, value=short(value))
        return value
    if tp is type(None):
        if value is not None:
            raise SpecError.of("value.expected", where=where, expected="null", value=short(value))
        return None
    return value


def _type_name(tp: Any) -> str:
    return {int: "an integer", float: "a number", bool: "true/false", str: "a string",
            type(None): "null"}.get(tp, str(tp))


# ---------------------------------------------------------------------- the spec
@dataclass(frozen=True)
class HeadSpec:
    """The task head of an encoder: ``mlm`` (masked-LM), ``classifier`` (pooled) or ``none``.

    ``transform``: BERT's dense + activation + norm before the MLM decoder.
    """

    kind: str = "mlm"
    num_labels: int = 2
    pooling: str = "mean"
    transform: bool = False


#: Initialisation schemes of ``init: {scheme: ...}`` (applied by :func:`zoo.model.build.init_model`):
#: ``normal`` N(0, std) for every linear and embedding weight (GPT-2 / BERT; the default, std 0.02);
#: ``scaled`` the same, with each block's residual output projections (attention ``out``, feed-forward
#: ``down``) divided by sqrt(2 x num_layers) (GPT-2's depth scaling, as nanoGPT writes it);
#: ``xavier_uniform`` U(+-gain sqrt(6 / (fan_in + fan_out))) for linear weights (Glorot & Bengio 2010);
#: ``kaiming`` N(0, gain^2 / fan_in) for linear weights: a layer keeps its input's variance, so with
#: unit-variance (normed) inputs q and k have unit-variance entries and q.k has variance d_k -- the
#: condition of the lectures' 1/sqrt(d_k) argument.  Embeddings are N(0, std) in every scheme; biases 0.
INIT_SCHEMES = ("normal", "scaled", "xavier_uniform", "kaiming")


@dataclass(frozen=True)
class InitSpec:
    """How a fresh model's weights are drawn: ``init: {scheme: kaiming, std: 0.02, gain: 1.0}``.

    ``std``: the normal's standard deviation (weights under ``normal`` / ``scaled``; embeddings
    under every scheme).  ``gain``: the multiplier of ``xavier_uniform`` and ``kaiming``.  A spec
    without ``init:`` is initialised exactly as before it existed (``normal``, std 0.02)."""

    scheme: str = "normal"
    std: float = 0.02
    gain: float = 1.0


_NO_DEFAULT = object()


def per_stack(default: Any = _NO_DEFAULT, *, quiet: bool = False, basic: bool = False) -> Any:
    """A :class:`ModelSpec` field that an ``encoder:`` / ``decoder:`` section may override.

    Declaring the field is all a new per-stack setting needs: its type (the annotation) is what the
    parser checks, :data:`STACK_FIELDS` lists it, and :class:`StackSpec` (what the layers are built
    from) carries it resolved for each stack.  ``quiet``: a flag written out only when set, so the
    specs written before it existed stay as they were.  ``basic``: see :func:`basic`."""
    meta = {"per_stack": True, "quiet": quiet, "basic": basic}
    if default is _NO_DEFAULT:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def basic(default: Any = _NO_DEFAULT) -> Any:
    """A model-wide :class:`ModelSpec` field that is one of the *basic* settings: the name and the
    sizes a newcomer sets first (the UI's Build form shows exactly these, as :data:`BASIC_FIELDS`,
    each as a box of its annotated type).  A per-stack one is ``per_stack(..., basic=True)``."""
    meta = {"basic": True}
    if default is _NO_DEFAULT:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def component_field_type(family: Any) -> Any:
    """The :class:`ModelSpec` field type of a spec family (a row of :data:`zoo.components.FAMILIES`):
    one validated entry, or a tuple of them for a family whose rules compose (``many``); None when
    the spec has none (a family without a default left out)."""
    return (tuple[ComponentSpec, ...] if family.many else ComponentSpec) | None


def _family_fields(cls: type) -> type:
    """Give the class (before ``@dataclass``) one field per spec family of the family table, in
    the table's order, before ``head``: ``attention: ComponentSpec | None = None``, ...  The family
    row is the declaration: its field name, its type (:func:`component_field_type`), its parsing
    (:func:`parse_component`, its ``default`` when the spec leaves it out) and its per-stack
    override all follow from it, so adding a family touches no line here."""
    annotations: dict[str, Any] = {}
    for name, tp in cls.__dict__.get("__annotations__", {}).items():
        if name == "head":
            for family in SPEC_FAMILIES:
                annotations[family.field] = component_field_type(family)
                setattr(cls, family.field, None)
        annotations[name] = tp
    cls.__annotations__ = annotations
    return cls


@dataclass(frozen=True)
@_family_fields
class ModelSpec:
    """A validated model description.  Build it with :func:`parse_spec` (or ``zoo.spec(...)``).

    Besides the fields written below it has one field per spec family of the family table
    (:data:`zoo.components.FAMILIES`: ``attention``, ``mask``, ``positions``, ``norm``,
    ``placement``, ``ffn``, ...), placed before ``head`` by :func:`_family_fields`."""

    arch: str
    vocab_size: int = basic()
    d_model: int = basic()
    num_layers: int = per_stack(basic=True)
    num_heads: int = per_stack(basic=True)
    name: str = basic("model")
    max_len: int = basic(512)
    num_kv_heads: int | None = per_stack(None, basic=True)  # None: num_heads
    head_dim: int | None = per_stack(None)  # None: d_model // num_heads
    d_ff: int | None = per_stack(None, basic=True)  # None: 4 * d_model
    dropout: float = per_stack(0.0, basic=True)
    attn_scale: float | None = per_stack(None)  # None: 1 / sqrt(head_dim)
    qkv_bias: bool = per_stack(True)
    out_bias: bool = per_stack(True)
    tie_embeddings: bool = True
    scale_embeddings: bool = True
    embed_norm: bool = False
    type_vocab_size: int = 0
    pad_id: int | None = None
    head_scale: float | None = None  # multiplies the final hidden states before the LM head (T5 tied: d_model**-0.5)
    # the LM head of a decoder / encoder-decoder has a bias (BART, Marian)
    head_bias: bool = dataclasses.field(default=False, metadata={"quiet": True})
    logit_softcap: float | None = None  # logits -> cap * tanh(logits / cap) (Gemma 2)
    qk_norm: bool = per_stack(False, quiet=True)  # the norm type, per head, on q and k (Qwen3)
    parallel_residual: bool = per_stack(False, quiet=True)  # x + attn(n1(x)) + ffn(n2(x)) (GPT-J)
    mask_pattern: tuple[tuple[ComponentSpec, ...], ...] | None = per_stack(None)  # layer i: [i % len]
    # the first dense_layers layers use this feed-forward entry (width dense_d_ff, None: d_ff) instead
    # of ffn: DeepSeek's dense layers before its mixture-of-experts ones (first_k_dense_replace)
    dense_ffn: ComponentSpec | None = per_stack(None)
    dense_layers: int | None = per_stack(None)
    dense_d_ff: int | None = per_stack(None)
    # (here: one field per spec family of the family table, from _family_fields)
    head: HeadSpec | None = None
    init: InitSpec | None = None  # None: normal, std 0.02 (see INIT_SCHEMES)
    encoder: tuple[tuple[str, Any], ...] = ()  # overrides, as sorted (field, value) pairs
    decoder: tuple[tuple[str, Any], ...] = ()

    # -------------------------------------------------------------- derived views
    @property
    def roles(self) -> tuple[str, ...]:
        return {"encoder": ("encoder",), "decoder": ("decoder",),
                "encoder_decoder": ("encoder", "decoder")}[self.arch]

    def stack(self, role: str) -> "StackSpec":
        """The resolved ``encoder`` or ``decoder`` stack: the one object its layers and components
        are built from (a :class:`~zoo.components.BuildContext`, with the stack's components)."""
        if role not in self.roles:
            raise SpecError(f"a {self.arch} model has no {role} stack", where="arch",
                            options=self.roles)
        over = dict(self.encoder if role == "encoder" else self.decoder)

        def get(name):
            return over[name] if name in over else getattr(self, name)

        heads = get("num_heads")
        head_dim = get("head_dim") if get("head_dim") is not None else self.d_model // heads
        kv = get("num_kv_heads") if get("num_kv_heads") is not None else heads
        d_ff = get("d_ff") if get("d_ff") is not None else 4 * self.d_model
        scale = get("attn_scale") if get("attn_scale") is not None else 1.0 / math.sqrt(head_dim)
        return StackSpec(d_model=self.d_model, num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
                         d_ff=d_ff, max_len=self.max_len, num_layers=get("num_layers"),
                         dropout=get("dropout"), causal=(role == "decoder"), scale=scale, role=role,
                         cross_attention=(self.arch == "encoder_decoder" and role == "decoder"),
                         **{name: get(name) for name in _AS_WRITTEN})

    # -------------------------------------------------------------- serialisation
    def to_dict(self, brief: bool = False) -> dict[str, Any]:
        """A plain dict that :func:`parse_spec` turns back into an equal spec.  ``brief``: component
        entries keep only the parameters that differ from their defaults (a card's *Spec* block; it
        still parses back to an equal spec as long as the defaults stay what they are -- a saved
        checkpoint records every parameter, ``brief=False``)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name in ("placement", "encoder", "decoder", "head", "init"):
                continue
            v = getattr(self, f.name)
            if v is None or (f.name in _QUIET and v is False):
                continue
            out[f.name] = _field_to_yaml(f.name, v, self.placement, brief)
        if self.head is not None:
            out["head"] = dataclasses.asdict(self.head)
        if self.init is not None:
            out["init"] = dataclasses.asdict(self.init)
        for role in ("encoder", "decoder"):
            section = dict(getattr(self, role))
            if section:
                placement = section.pop("placement", None)
                out[role] = {k: _field_to_yaml(k, v, placement, brief) for k, v in section.items()}
        return out

    def to_yaml(self, brief: bool = False) -> str:
        """The spec as YAML (:meth:`to_dict`; ``brief`` for a card)."""
        return yaml.safe_dump(self.to_dict(brief), sort_keys=False, allow_unicode=True)

    def replace(self, **overrides: Any) -> "ModelSpec":
        """A new spec with some fields overridden (validated like a fresh spec)."""
        return parse_spec(self.to_dict(), **overrides)


#: The basic settings (:func:`basic`), in declaration order: the name and the sizes.
BASIC_FIELDS = tuple(f.name for f in dataclasses.fields(ModelSpec) if f.metadata.get("basic"))

#: Fields an ``encoder:`` / ``decoder:`` section may override: the :func:`per_stack` fields and the
#: field of every per-stack component family (from the family table, :data:`zoo.components.FAMILIES`;
#: a placement rides inside its ``norm:`` entry).
STACK_FIELDS = tuple(f.name for f in dataclasses.fields(ModelSpec) if f.metadata.get("per_stack")) \
    + tuple(f.field for f in SPEC_FAMILIES if f.per_stack and f.parent is None)
_PARENTS = {f.parent for f in SPEC_FAMILIES if f.parent}
#: spec field -> family, for the fields that hold one plain ``{kind: ...}`` entry (not a list of
#: mask rules, not a norm with its placement inside)
_COMPONENT_FIELDS = {f.field: f.name for f in SPEC_FAMILIES
                     if not f.many and f.parent is None and f.field not in _PARENTS}
_HINTS = typing.get_type_hints(ModelSpec)
#: per-stack fields a :class:`StackSpec` carries as written (the sizes are resolved into the
#: :class:`~zoo.components.BuildContext` fields; ``attn_scale`` becomes ``scale``)
_AS_WRITTEN = tuple(n for n in STACK_FIELDS + tuple(f.field for f in SPEC_FAMILIES if f.parent)
                    if n not in {f.name for f in dataclasses.fields(BuildContext)} | {"attn_scale"})


def _stack_layer_mask(self, i: int) -> tuple[ComponentSpec, ...]:
    """The mask rules of layer ``i``: ``mask_pattern[i % len]`` when a pattern is set."""
    return self.mask_pattern[i % len(self.mask_pattern)] if self.mask_pattern else self.mask


#: One block stack, resolved once from a spec (:meth:`ModelSpec.stack`): the sizes every component
#: is built with (it *is* the :class:`~zoo.components.BuildContext` they receive: ``d_model``,
#: ``num_heads``, ``head_dim``, ``scale``, ...), plus ``role``, ``cross_attention`` and every other
#: per-stack field of :class:`ModelSpec` as written (``qkv_bias``, ``qk_norm``, the component
#: entries ``attention``, ``mask``, ``positions``, ``norm``, ``placement``, ``ffn``, ...).  Its fields
#: are generated from ModelSpec's, so a per-stack setting is declared once, there.
StackSpec = dataclasses.make_dataclass(
    "StackSpec", [("role", str), ("cross_attention", bool)]
    + [(n, _HINTS[n]) for n in _AS_WRITTEN],
    bases=(BuildContext,), frozen=True,
    namespace={"layer_mask": _stack_layer_mask,
               "attn_scale": property(lambda self: self.scale, doc="The spec's name for ``scale``."),
               "__doc__": "One block stack resolved from a spec: a BuildContext (the sizes) with the "
                          "stack's role, components and per-stack settings (see zoo.spec)."})
StackSpec.__module__ = __name__  # pickling and reprs name zoo.model.spec.StackSpec


#: flags written out only when set, so the specs written before they existed stay as they were
#: (``quiet`` in a field's metadata)
_QUIET = tuple(f.name for f in dataclasses.fields(ModelSpec) if f.metadata.get("quiet"))


def _field_to_yaml(name: str, v: Any, placement: ComponentSpec | None, brief: bool = False) -> Any:
    if name == "mask_pattern":
        return [_field_to_yaml("mask", m, None, brief) for m in v]
    if name == "mask":
        vals = [m.to_yaml_value(brief) for m in v]
        return vals[0] if len(vals) == 1 else vals
    if name == "norm":
        d = {"kind": v.kind, **v.params(changed=brief)}
        if placement is not None:
            d["placement"] = placement.to_yaml_value(brief)
        return d
    if isinstance(v, ComponentSpec):
        return v.to_yaml_value(brief)
    return v


# ---------------------------------------------------------------------- parsing
#: field -> type of every plain value of a spec, from ModelSpec's annotations (what is left: the
#: component entries, ``mask_pattern``, ``head`` and the per-stack sections have parsers of their own)
_SCALARS: dict[str, Any] = {n: tp for n, tp in _HINTS.items()
                            if n not in {f.field for f in SPEC_FAMILIES}
                            | {"mask_pattern", "dense_ffn", "head", "init", "encoder", "decoder"}}
_REQUIRED = ("arch", "vocab_size", "d_model", "num_layers", "num_heads")
_ALL_KEYS = tuple(f.name for f in dataclasses.fields(ModelSpec))
_DEFAULTS = {f.field: f.default for f in SPEC_FAMILIES if f.default and f.parent is None}


def load_yaml(source: str | os.PathLike) -> dict:
    """Read a spec file into a dict through zoo's one bounded YAML loader (:mod:`zoo.guard.files`)."""
    path = Path(source)
    return yaml_to_dict(trust.read_text(path, where=str(path)), str(path))


def yaml_to_dict(text: str | bytes, where: str) -> dict:
    """Spec YAML text -> dict: bounded parsing (size, depth, aliases, duplicate keys), then a mapping.

    The one way spec text becomes a dict (files, ``--set`` values, checkpoint metadata, the UI editor);
    ``where`` names the source in error messages."""
    data = trust.load_yaml(text, where=where)
    if not isinstance(data, dict):
        raise SpecError.of("spec.not_mapping", where=where, type=type(data).__name__)
    return data


def resolve_spec_source(source: Any) -> dict:
    """Turn a path, preset name, YAML text, dict or ModelSpec into a raw dict."""
    if isinstance(source, ModelSpec):
        return source.to_dict()
    if isinstance(source, Mapping):
        return dict(source)
    if isinstance(source, (str, os.PathLike)):
        s = str(source)
        if isinstance(source, str) and "\n" in s:
            return yaml_to_dict(s, "<yaml text>")
        path = trust.user_path(source, where="spec", error=SpecError)  # NUL, too long: refused
        if path.is_file():
            return load_yaml(path)
        preset = find_preset(s)
        if preset is not None:
            return load_yaml(preset)
        best = closest(Path(s).stem, list_presets())
        raise SpecError.of("spec.no_source", where="spec", options=list_presets(), name=s,
                           suggestion=best, fix="hint.did_you_mean" if best else None)
    raise SpecError(f"cannot make a spec from {type(source).__name__}", where="spec",
                    fix="pass a YAML path, a preset name, a dict or a ModelSpec")


def preset_dirs() -> list[Path]:
    """Where preset specs are looked up: ``$ZOO_CHECKPOINTS`` (os.pathsep-separated), then the
    shipped ``checkpoints/`` folder."""
    extra = [Path(p) for p in os.environ.get("ZOO_CHECKPOINTS", "").split(os.pathsep) if p]
    return extra + [Path(_shipped_init).resolve().parent]


def find_preset(name: str) -> Path | None:
    stem = name[:-5] if name.endswith(".yaml") else name[:-4] if name.endswith(".yml") else name
    if not stem or "/" in stem or "\\" in stem or stem.startswith("."):
        return None
    for d in preset_dirs():
        for cand in (d / f"{stem}.yaml", d / stem / "spec.yaml"):
            if cand.is_file():
                return cand
    return None


def list_presets() -> list[str]:
    names = set()
    for d in preset_dirs():
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.yaml"))
            names.update(p.parent.name for p in d.glob("*/spec.yaml"))
    return sorted(names)


def parse_spec(source: Any, registry=None, **overrides: Any) -> ModelSpec:
    """Parse and validate a spec from a path, preset name, YAML text, dict or ModelSpec.

    ``overrides`` are applied before validation by the one override rule, :func:`apply_overrides`
    (``num_layers=2``, ``attention="eager"``, ``decoder={"num_layers": 1}``, and dotted paths such
    as ``**{"norm.kind": "rmsnorm"}``).
    """
    return _validate(apply_overrides(resolve_spec_source(source), overrides), registry)


#: spec fields (at the top level or in an ``encoder:`` / ``decoder:`` section) that hold one
#: ``{kind: NAME, **params}`` component entry, and the entries nested in them that belong to
#: another component and so survive a change of kind (a norm's ``placement``)
_ENTRY_FIELDS = {"attention": (), "positions": (), "ffn": (), "dense_ffn": (), "norm": ("placement",),
                 "placement": ()}


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict:
    """``raw`` (a spec as a dict) with ``overrides`` applied: the one override rule of ``zoo.build(spec,
    **overrides)``, ``zoo build --set KEY=VALUE`` and an experiment's ``set: {KEY: VALUE}``.

    A key is a field (``num_layers``) or a dotted path into one (``norm.placement``, ``ffn.activation``,
    ``decoder.num_layers``, ``norm.placement.kind``); a string entry on the way becomes ``{kind: ...}``.
    Setting a component entry's kind -- ``norm: rmsnorm``, ``norm: {kind: rmsnorm, eps: 1e-6}`` or
    ``norm.kind: rmsnorm`` alike -- replaces the component: the old component's own parameters go
    (LayerNorm's ``bias`` means nothing to RMSNorm), what belongs to another component stays (the
    norm's ``placement``, unless the new value names one), and the new value's parameters apply.
    ``norm.kind`` set to the kind already there changes nothing.  Any other key is set as given.
    An unknown first field is a :class:`SpecError` listing the fields."""
    out = copy.deepcopy(dict(raw))
    for key, value in overrides.items():
        parts = str(key).split(".")
        if parts[0] not in _ALL_KEYS or not all(parts):
            best = closest(parts[0], _ALL_KEYS)
            raise SpecError.of("spec.unknown_override", where=str(key), options=_ALL_KEYS, field=key,
                               suggestion=best, fix="hint.did_you_mean" if best else None)
        _override(out, parts, value, str(key))
    return out


def _override(d: dict, parts: list[str], value: Any, key: str) -> None:
    head, rest = parts[0], parts[1:]
    if head in _ENTRY_FIELDS and (rest == ["kind"] or (not rest and _is_entry(value))):
        d[head] = _replace_entry(d.get(head), value if not rest else {"kind": value}, _ENTRY_FIELDS[head],
                                 dotted=bool(rest))
        return
    if not rest:
        d[head] = value
        return
    cur = d.get(head)
    if isinstance(cur, str):
        cur = {"kind": cur}
    elif cur is None:
        cur = {}
    elif isinstance(cur, Mapping):
        cur = dict(cur)
    else:
        raise SpecError(f"cannot set '{key}': '{head}' holds {short(cur)}, not a mapping", where=key,
                        fix=f"set `{head}` itself")
    _override(cur, rest, value, key)
    d[head] = cur


def _is_entry(value: Any) -> bool:
    """A component entry as written: a name, or a mapping with a ``kind``."""
    return isinstance(value, str) or (isinstance(value, Mapping) and "kind" in value)


def _replace_entry(old: Any, new: Any, children: tuple[str, ...], dotted: bool) -> Any:
    old_entry = {"kind": old} if isinstance(old, str) else dict(old) if isinstance(old, Mapping) else {}
    new_entry = {"kind": new} if isinstance(new, str) else dict(new)
    if dotted and old_entry and new_entry["kind"] == old_entry.get("kind"):
        return old  # norm.kind: layernorm on a layernorm: nothing changes
    kept = {c: old_entry[c] for c in children if c in old_entry and c not in new_entry}
    merged = {**new_entry, **kept}
    return merged["kind"] if list(merged) == ["kind"] else merged


def _validate(raw: dict, registry) -> ModelSpec:
    for key in raw:
        if key not in _ALL_KEYS or key == "placement":
            best = closest(str(key), _ALL_KEYS)
            raise SpecError.of("spec.unknown_field", where=str(key), options=_ALL_KEYS, field=key,
                               suggestion=best, fix="hint.did_you_mean" if best else "hint.remove_it")
    for key in _REQUIRED:
        if key not in raw:
            raise SpecError.of("spec.missing_field", where=key, field=key)
    values: dict[str, Any] = {}
    for key, tp in _SCALARS.items():
        if key in raw:
            values[key] = coerce(raw[key], tp, key)
    arch = values["arch"]
    if arch not in ARCHS:
        best = closest(arch, ARCHS)
        raise SpecError.of("spec.unknown_arch", where="arch", options=ARCHS, arch=arch, suggestion=best,
                           fix=["hint.did_you_mean" if best else None])
    for key in ("vocab_size", "d_model", "num_layers", "num_heads", "max_len"):
        if key in values and values[key] < 1:
            raise SpecError.of("value.positive_int", where=key, value=values[key])
    _check_shared(values, raw)

    # components shared by both stacks (a family without a default, left out: none)
    for key, family in _COMPONENT_FIELDS.items():
        if key in raw or key in _DEFAULTS:
            values[key] = parse_component(family, raw.get(key, _DEFAULTS.get(key)), key, registry)
    values["norm"], values["placement"] = _parse_norm(raw.get("norm", _DEFAULTS["norm"]), "norm",
                                                      registry)
    default_mask = {"encoder": "bidirectional", "decoder": "causal", "encoder_decoder": None}[arch]
    mask_raw = raw.get("mask", default_mask)
    # ``mask: null`` means "each stack's default" only in an encoder-decoder; elsewhere it is parsed
    # (and refused with the options) like any other value
    values["mask"] = _parse_mask(mask_raw, "mask", registry) \
        if mask_raw is not None or arch != "encoder_decoder" else None
    if raw.get("mask_pattern") is not None:
        values["mask_pattern"] = _parse_mask_pattern(raw["mask_pattern"], "mask_pattern", registry)
    if raw.get("dense_ffn") is not None:
        values["dense_ffn"] = parse_component("ffn", raw["dense_ffn"], "dense_ffn", registry)

    # head
    if "head" in raw and raw["head"] is not None:
        if arch != "encoder":
            raise SpecError(f"only encoder models take a 'head' (a {arch} always has an LM head)",
                            where="head", fix="remove the head field")
        values["head"] = _parse_head(raw["head"])
    elif arch == "encoder":
        values["head"] = HeadSpec()
    if raw.get("init") is not None:
        values["init"] = _parse_init(raw["init"])

    # per-stack sections
    for role in ("encoder", "decoder"):
        section = raw.get(role)
        if section is None:
            continue
        if arch != "encoder_decoder":
            raise SpecError(f"'{role}:' sections are only for encoder_decoder models", where=role,
                            fix=f"put the fields at the top level of a {arch} spec")
        if not isinstance(section, Mapping):
            raise SpecError(f"expected a mapping of overrides, got {short(section)}", where=role)
        values[role] = _parse_section(role, section, registry)
    if arch == "encoder_decoder" and values["mask"] is None:
        for role, m in (("encoder", "bidirectional"), ("decoder", "causal")):
            sec = dict(values.get(role, ()))
            if "mask" not in sec:
                sec["mask"] = _parse_mask(m, f"{role}.mask", registry)
                values[role] = tuple(sorted(sec.items()))

    spec = ModelSpec(**values)
    for role in spec.roles:
        _check_stack(spec, role, registry)
    return spec


def _check_shared(values: dict, raw: dict) -> None:
    if not 0.0 <= values.get("dropout", 0.0) < 1.0:
        raise SpecError.of("spec.dropout", where="dropout", value=values["dropout"])
    pad = values.get("pad_id")
    if pad is not None and not 0 <= pad < values["vocab_size"]:
        raise SpecError(f"pad_id {pad} is outside the vocabulary [0, {values['vocab_size']})",
                        where="pad_id", fix="use an id below vocab_size, or null for no padding")
    if values.get("logit_softcap") is not None and not values["logit_softcap"] > 0:
        raise SpecError(f"must be > 0, got {values['logit_softcap']}", where="logit_softcap",
                        fix="use e.g. 30.0 (Gemma 2), or null for no soft-capping")
    if values.get("head_scale") is not None and not values["head_scale"] > 0:
        raise SpecError(f"must be > 0, got {values['head_scale']}", where="head_scale",
                        fix="use e.g. d_model ** -0.5 (T5 with tied embeddings), or null")
    if values.get("type_vocab_size", 0) < 0:
        raise SpecError("must be >= 0", where="type_vocab_size")
    for key in _DERIVED:
        _check_derived(key, values.get(key), key)
    if values.get("attn_scale") is not None and not values["attn_scale"] > 0:
        raise SpecError(f"must be > 0, got {values['attn_scale']}", where="attn_scale",
                        fix="omit it (or write null) for 1/sqrt(head_dim)")


#: Optional sizes whose ``null`` means "derived": the spec keeps null (so a later override of
#: ``num_heads`` or ``d_model`` still does what you mean) and :meth:`ModelSpec.stack` reports the
#: value actually used.  ``0`` is not a way to ask for the default: it is an error.
_DERIVED = {"num_kv_heads": "num_heads", "head_dim": "d_model // num_heads", "d_ff": "4 * d_model"}


def _check_derived(key: str, value: Any, where: str) -> None:
    if value is not None and value < 1:
        raise SpecError.of("value.positive_int", where=where, value=value, default=_DERIVED[key],
                           fix="spec.derived_default")


def _parse_norm(value: Any, where: str, registry) -> tuple[ComponentSpec, ComponentSpec]:
    placement_raw: Any = FAMILY["placement"].default
    if isinstance(value, Mapping):
        value = dict(value)
        placement_raw = value.pop("placement", placement_raw)
    norm = parse_component("norm", value, where, registry)
    placement = parse_component("placement", placement_raw, f"{where}.placement", registry)
    return norm, placement


def _parse_mask_pattern(value: Any, where: str, registry) -> tuple[tuple[ComponentSpec, ...], ...]:
    """A per-layer pattern of masks: layer ``i`` uses entry ``i % len``, each entry written like
    ``mask`` (Gemma 2: ``[[causal, {kind: sliding_window, window: 4096}], causal]``)."""
    if not isinstance(value, (list, tuple)) or not value:
        raise SpecError(f"expected a non-empty list of masks, got {short(value)}", where=where,
                        fix="write e.g. [[causal, {kind: sliding_window, window: 64}], causal]")
    return tuple(_parse_mask(v, f"{where}[{i}]", registry) for i, v in enumerate(value))


def _parse_mask(value: Any, where: str, registry) -> tuple[ComponentSpec, ...]:
    if isinstance(value, (list, tuple)):
        if not value:
            raise SpecError("an empty list of mask rules", where=where,
                            fix="write `bidirectional` for no masking")
        return tuple(parse_component("mask", v, f"{where}[{i}]", registry) for i, v in enumerate(value))
    return (parse_component("mask", value, where, registry),)


def _parse_head(value: Any) -> HeadSpec:
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, Mapping):
        raise SpecError(f"expected a head name or mapping, got {short(value)}", where="head",
                        options=HEADS)
    fields = {f.name for f in dataclasses.fields(HeadSpec)}
    for k in value:
        if k not in fields:
            best = closest(k, fields)
            raise SpecError.of("spec.unknown_head_param", where=f"head.{k}", options=fields, param=k,
                               suggestion=best, fix=["hint.did_you_mean" if best else None])
    kw = {k: coerce(v, {"kind": str, "num_labels": int, "pooling": str, "transform": bool}[k],
                    f"head.{k}") for k, v in value.items()}
    head = HeadSpec(**kw)
    if head.kind not in HEADS:
        best = closest(head.kind, HEADS)
        raise SpecError.of("spec.unknown_head", where="head.kind", options=HEADS, head=head.kind,
                           suggestion=best, fix=["hint.did_you_mean" if best else None])
    if head.pooling not in POOLINGS:
        best = closest(head.pooling, POOLINGS)
        raise SpecError.of("spec.unknown_pooling", where="head.pooling", options=POOLINGS,
                           pooling=head.pooling, suggestion=best,
                           fix=["hint.did_you_mean" if best else None])
    if head.num_labels < 1:
        raise SpecError("must be >= 1", where="head.num_labels")
    return head


def _parse_init(value: Any) -> InitSpec:
    """``init: kaiming`` or ``init: {scheme: ..., std: ..., gain: ...}`` -> an :class:`InitSpec`."""
    if isinstance(value, str):
        value = {"scheme": value}
    if not isinstance(value, Mapping):
        raise SpecError(f"expected a scheme name or a mapping, got {short(value)}", where="init",
                        options=INIT_SCHEMES, fix="write e.g. init: {scheme: normal, std: 0.02}")
    fields = [f.name for f in dataclasses.fields(InitSpec)]
    for k in value:
        if k not in fields:
            best = closest(str(k), fields)
            raise SpecError.of("spec.unknown_init_param", where=f"init.{k}", options=fields, param=k,
                               suggestion=best, fix=["hint.did_you_mean" if best else None])
    kw = {}
    for k, v in value.items():
        try:
            kw[k] = coerce(v, {"scheme": str, "std": float, "gain": float}[k], f"init.{k}")
        except SpecError as exc:
            example = "init: {scheme: kaiming} or {scheme: normal, std: 0.02, gain: 1.0}"
            raise SpecError(exc.what, where=f"init.{k}", options=INIT_SCHEMES if k == "scheme" else None,
                            fix=f"e.g. {example}", message_id=exc.message_id,  # the same words, re-placed
                            params={**exc.params, "example": example}, fix_ids=("hint.example",)) from exc
    init = InitSpec(**kw)
    if init.scheme not in INIT_SCHEMES:
        best = closest(init.scheme, INIT_SCHEMES)
        raise SpecError.of("spec.unknown_init", where="init.scheme", options=INIT_SCHEMES,
                           scheme=init.scheme, suggestion=best, fix=["hint.did_you_mean" if best else None])
    for k in ("std", "gain"):
        v = getattr(init, k)
        if not (math.isfinite(v) and 0 < v <= 100):
            raise SpecError.of("spec.init_value", where=f"init.{k}", value=short(v))
    return init


def _parse_section(role: str, section: Mapping, registry) -> tuple[tuple[str, Any], ...]:
    out: dict[str, Any] = {}
    for key, val in section.items():
        where = f"{role}.{key}"
        if key not in STACK_FIELDS:
            best = closest(str(key), STACK_FIELDS)
            raise SpecError.of("spec.not_per_stack", where=where, options=STACK_FIELDS, field=key,
                               suggestion=best, fix="hint.did_you_mean" if best else None)
        if key in _COMPONENT_FIELDS:
            out[key] = parse_component(_COMPONENT_FIELDS[key], val, where, registry)
        elif key == "mask":
            out[key] = _parse_mask(val, where, registry)
        elif key == "mask_pattern":
            out[key] = _parse_mask_pattern(val, where, registry)
        elif key == "dense_ffn":
            out[key] = parse_component("ffn", val, where, registry)
        elif key == "norm":
            out["norm"], out["placement"] = _parse_norm(val, where, registry)
        else:
            out[key] = coerce(val, _SCALARS[key], where)
            if key in ("num_layers", "num_heads") and out[key] < 1:
                raise SpecError.of("value.positive_int", where=where, value=out[key])
            if key in _DERIVED:
                _check_derived(key, out[key], where)
    return tuple(sorted(out.items()))


def _check_stack(spec: ModelSpec, role: str, registry) -> None:
    """Cross-field checks and component compatibility, once, at parse time."""
    reg = registry or get_registry()
    over = dict(spec.encoder if role == "encoder" else spec.decoder)
    src = lambda k: f"{role}.{k}" if k in over else k  # noqa: E731 - where a value came from
    heads = over.get("num_heads", spec.num_heads)
    head_dim = over.get("head_dim", spec.head_dim)
    if head_dim is None and spec.d_model % heads:
        raise SpecError.of("spec.heads_divide", where=src("num_heads"), d_model=spec.d_model,
                           num_heads=heads)
    st = spec.stack(role)
    if st.num_kv_heads < 1 or st.num_heads % st.num_kv_heads:
        raise SpecError.of("spec.kv_heads_divide", where=src("num_kv_heads"), num_heads=st.num_heads,
                           num_kv_heads=st.num_kv_heads)
    if st.d_ff < 1 or st.head_dim < 1:
        raise SpecError("d_ff and head_dim must be positive", where=src("d_ff"))
    if (st.dense_layers is not None or st.dense_d_ff is not None) and st.dense_ffn is None:
        raise SpecError("dense_layers / dense_d_ff say which layers take dense_ffn, but there is no dense_ffn",
                        where=src("dense_layers"), fix="add e.g. `dense_ffn: {kind: swiglu}`, or drop them")
    if st.dense_ffn is not None and (st.dense_layers or 0) < 1:  # >= num_layers: every layer dense
        raise SpecError(f"dense_layers must be >= 1 with a dense_ffn, got {st.dense_layers}",
                        where=src("dense_layers"), fix="set how many of the first layers use dense_ffn")
    if st.dense_d_ff is not None and st.dense_d_ff < 1:
        raise SpecError.of("value.positive_int", where=src("dense_d_ff"), value=st.dense_d_ff,
                           fix="spec.dense_d_ff_default")
    if st.num_layers > 4096:
        raise SpecError(f"{st.num_layers} layers is unreasonably deep", where=src("num_layers"),
                        fix="use at most 4096 layers")
    if st.head_dim > 65536:
        raise SpecError(f"head_dim {st.head_dim} is unreasonably wide", where=src("head_dim"),
                        fix="use at most 65536 features per head")
    check_compatible(spec, role, src, reg)  # capabilities (zoo.guard.compat), once per stack


# ---------------------------------------------------------------------- zoo.spec(...)
class _SpecModule(types.ModuleType):
    """This module, callable: ``zoo.spec("gpt_tiny", num_layers=2)`` parses a spec (it is
    :func:`parse_spec`), while ``import zoo.model.spec`` and ``zoo.model.spec.ModelSpec`` still name the
    module -- one name, one thing, and the short front door keeps working."""

    def __call__(self, source: Any, **overrides: Any) -> ModelSpec:
        return parse_spec(source, **overrides)


sys.modules[__name__].__class__ = _SpecModule

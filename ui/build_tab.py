"""The Build tab: a form and a YAML editor over one spec, kept in sync.

The YAML text is the single source of truth.  Editing a form field rewrites one entry of the YAML
(:func:`set_field`, :func:`set_param`); editing the YAML refills the form (:func:`form_values`).
Every change re-validates the spec through ``zoo.spec`` and shows, inline, either the parameter table
and block diagram or the error with its field and fix (:func:`analyse`).

The dropdowns list what the registry holds (``zoo.list_components``), and each chosen component's
parameters become form fields built from its config dataclass, so a third-party plugin's component
appears here, parameters and all, the moment it is installed.
"""
from __future__ import annotations

import dataclasses
import functools
import html
import typing
from typing import Any

import yaml

import zoo
from zoo import components
from zoo.errors import SpecError, ZooError
from zoo.model.spec import yaml_to_dict
from zoo.inside.summary import parameter_table

from .common import (LIMITS, check_name, check_spec_limits, check_value, error_box, error_outputs, handler,
                     inline_errors, raw, runs_dir, safe_markdown, shown_path)
from .i18n import format_error, t, ui_error



def scalar_kind(field: str) -> tuple[type, bool]:
    """(``int``, ``float`` or ``str``, optional?) of a spec field, from ModelSpec's annotation: an
    optional size (``int | None``, derived when left out) shows 0 for "derived"."""
    tp = typing.get_type_hints(zoo.ModelSpec)[field]
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return (args[0] if args else tp), bool(args)


def scalar_fields() -> tuple[str, ...]:
    """The form's scalar fields: the spec's basic settings (``zoo.model.spec.basic`` /
    ``per_stack(basic=True)`` in ModelSpec's declaration, :data:`zoo.model.spec.BASIC_FIELDS`), text boxes
    first, then number boxes, each in declaration order; ``build.<field>`` is the label.  Read when
    called: a setting declared basic is a box here without a line changed in ``ui/``."""
    from zoo.model import spec

    return tuple(sorted(spec.BASIC_FIELDS, key=lambda f: scalar_kind(f)[0] is not str))
_DEFAULT_MASK = {"encoder": "bidirectional", "decoder": "causal"}


# ---------------------------------------------------------------------- the families the form shows
def form_families() -> tuple:
    """The component families the form shows: every per-stack family of the one family table
    (:data:`zoo.components.SPEC_FAMILIES`), in table order.  Read when called, so a row added to the
    table is a dropdown here (and a label in :mod:`ui.i18n`) without touching ``ui/``."""
    return tuple(f for f in components.SPEC_FAMILIES if f.per_stack)


def component_fields() -> dict[str, str]:
    """Form field -> registry family (``{"attention": "attention", "positions": "position", ...}``)."""
    return {f.field: f.name for f in form_families()}


def form_fields() -> tuple[str, ...]:
    """Every field of the form, in layout order: the architecture, the scalars, the components."""
    return ("arch",) + scalar_fields() + tuple(component_fields())


def _children(fam) -> list:
    """The families whose entry lives inside ``fam``'s (a norm's ``placement``)."""
    return [f for f in form_families() if f.parent == fam.field]


# ---------------------------------------------------------------------- YAML <-> dict
def _load(text: str) -> dict:
    """YAML text -> dict, with the engine's error for bad YAML."""
    return yaml_to_dict(text or "", "yaml")


def _dump(raw: dict) -> str:
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)


def preset_yaml(name: str) -> str:
    """The validated YAML of a preset, every default filled in."""
    return zoo.spec(name).to_yaml()


def _parse(text: str):
    """The spec of the editor's text (a one-line text is a preset name or a path)."""
    return zoo.spec(text if "\n" in (text or "") else (text or "") + "\n")


def _kind_of(entry: Any) -> str | None:
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        return entry.get("kind")
    return None


def _set_scalar(raw: dict, field: str, value: Any) -> None:
    """Write a scalar as its annotated type (:func:`scalar_kind`); 0 or empty for an optional size
    leaves it out (derived from the other sizes)."""
    kind, optional = scalar_kind(field)
    if optional and (value in (None, 0, "") or (isinstance(value, float) and value == 0)):
        raw.pop(field, None)
    elif kind is str:
        raw[field] = str(value or "")
    elif value is not None and (isinstance(value, bool) or not isinstance(value, (int, float, str))):
        raise ui_error(SpecError, "build.takes_number", fix="build.takes_number_fix", where=field, field=field,
                       value=type(value).__name__)
    else:
        try:
            raw[field] = (float(value) if value is not None else 0.0) if kind is float else \
                (int(value) if value is not None else value)
        except (TypeError, ValueError, OverflowError):
            raise ui_error(SpecError, "build.takes_number", fix="build.takes_number_fix", where=field, field=field,
                           value=repr(str(value)[:40])) from None


def _set_arch(raw: dict, value: Any) -> None:
    """Switching architecture adjusts what only some architectures take: the mask default,
    ``head``, the ``encoder:`` / ``decoder:`` sections."""
    old = raw.get("arch")
    raw["arch"] = value
    if value == old:
        return
    if value == "encoder_decoder":
        raw.pop("mask", None)
        raw.setdefault("encoder", {"mask": "bidirectional"})
        raw.setdefault("decoder", {"mask": "causal"})
    else:
        raw.pop("encoder", None)
        raw.pop("decoder", None)
        raw["mask"] = _DEFAULT_MASK[value] if value in _DEFAULT_MASK else raw.get("mask")
    if value != "encoder":
        raw.pop("head", None)


def _set_component(raw: dict, fam, value: str) -> None:
    """Choose kind ``value`` for family ``fam``.  A new kind drops the old kind's parameters (they
    belong to it); an entry nested in another (``norm: {kind, placement}``) is written inside its
    parent, and a parent keeps the entries nested in it."""
    if fam.parent is not None:
        parent_default = next((f.default for f in form_families() if f.field == fam.parent), None)
        parent = raw.get(fam.parent, {"kind": parent_default})
        parent = {"kind": parent} if isinstance(parent, str) else dict(parent)
        parent[fam.field] = value
        raw[fam.parent] = parent
        return
    children = _children(fam)
    if children:
        old = raw.get(fam.field, {})
        old = old if isinstance(old, dict) else {}
        raw[fam.field] = {"kind": value, **{c.field: old.get(c.field, c.default) for c in children}}
    elif _kind_of(raw.get(fam.field)) != value or not isinstance(raw.get(fam.field), (str, dict)):
        raw[fam.field] = value


def set_field(text: str, field: str, value: Any) -> str:
    """Rewrite one form field into the YAML (see :func:`_set_scalar`, :func:`_set_arch`,
    :func:`_set_component`)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int, float))):
        raise ui_error(SpecError, "build.one_value", fix="build.one_value_fix", where=field, field=field,
                       value=type(value).__name__)
    raw = _load(text)
    families = {f.field: f for f in form_families()}
    if field == "arch":
        _set_arch(raw, value)
    elif field in scalar_fields():
        _set_scalar(raw, field, value)
    elif field in families:
        _set_component(raw, families[field], value)
    else:
        raise ui_error(SpecError, "build.unknown_form_field", where=field, options=form_fields(), field=field)
    return _dump(raw)


def _entry_path(raw: dict, path: tuple) -> tuple[Any, Any, Any]:
    """(container, key, entry) of a component entry at ``path`` (e.g. ``("mask", 1)``)."""
    container: Any = raw
    for key in path[:-1]:
        container = container[key]
    return container, path[-1], container[path[-1]]


def set_param(text: str, path: list | tuple, param: str, value: Any) -> str:
    """Set parameter ``param`` of the component entry at ``path`` (``["attention"]``,
    ``["mask", 0]``, ``["norm"]``, ``["norm", "placement"]``) in the YAML."""
    raw = _load(text)
    try:
        container, key, entry = _entry_path(raw, tuple(path))
    except (KeyError, IndexError, TypeError):
        raise ui_error(SpecError, "build.component_gone", fix="build.component_gone_fix",
                       where=".".join(map(str, path))) from None
    if isinstance(entry, str):
        entry = {"kind": entry}
    entry = dict(entry)
    entry[param] = value
    container[key] = entry
    return _dump(raw)


def parse_param_text(value: str) -> Any:
    """A parameter typed into a text field, read as a YAML scalar or list (``64``, ``[1, 2]``)."""
    from zoo.guard.files import load_yaml

    try:
        return load_yaml(value, where="param") if isinstance(value, str) else value
    except ZooError:
        return value


# ---------------------------------------------------------------------- spec -> form
def _chosen(spec, fam) -> list:
    """The component entries ``spec`` holds for family ``fam`` (model-wide, else its last stack's;
    a list only for families that compose, like masks)."""
    entry = getattr(spec, fam.field, None)
    if not entry and spec.roles:
        entry = getattr(spec.stack(spec.roles[-1]), fam.field, None)
    if entry is None:
        return []
    return list(entry) if fam.many else [entry]


def form_values(text: str) -> dict[str, Any] | None:
    """The form's field values for the YAML (None when the YAML is not a valid spec)."""
    try:
        spec = _parse(text)
    except ZooError:
        return None
    values = {"arch": spec.arch}
    for f in scalar_fields():  # an optional size left to be derived shows 0
        values[f] = getattr(spec, f) if getattr(spec, f) is not None or not scalar_kind(f)[1] else 0
    for fam in form_families():  # the first entry's kind (a composed mask shows its first rule)
        chosen = _chosen(spec, fam)
        values[fam.field] = chosen[0].kind if chosen else fam.default
    return values


def component_entries(text: str) -> list[dict]:
    """The top-level component entries of the spec with their parameters, for the parameter fields:
    ``[{family, path, kind, params: [{name, type, value, choices}]}]`` (empty when invalid).  ``path``
    locates the entry in the YAML: ``["attention"]``, ``["mask", 1]`` in a list, ``["norm",
    "placement"]`` inside its parent."""
    try:
        spec = _parse(text)
    except ZooError:
        return []
    reg = zoo.get_registry()
    out = []
    for fam in form_families():
        top = getattr(spec, fam.field, None)
        chosen = (list(top) if fam.many else [top]) if top else []
        for i, cs in enumerate(chosen):
            path = [fam.parent, fam.field] if fam.parent else \
                [fam.field, i] if fam.many and len(chosen) > 1 else [fam.field]
            comp = reg.get(fam.name, cs.kind)
            out.append({"family": fam.name, "path": path, "kind": cs.kind,
                        "params": _param_fields(comp.config, cs.config)})
    return out


def lessons(text: str, lang: str = "en") -> str:
    """Markdown: the lesson of each chosen component that carries one (``Component.lesson``: the
    problem it solves, its equation, when it helps), in the page's language; English when a lesson
    has no translation; empty for an invalid spec or when no chosen component has a lesson."""
    try:
        spec = _parse(text)
    except ZooError:
        return ""
    reg, out, seen = zoo.get_registry(), [], set()
    for fam in form_families():
        for cs in _chosen(spec, fam):
            if (fam.name, cs.kind) in seen:
                continue
            seen.add((fam.name, cs.kind))
            lesson = reg.get(fam.name, cs.kind).lesson
            text_ = lesson.get(lang) or lesson.get("en")
            if text_:
                out.append(f"**{fam.name}: {cs.kind}** — {' '.join(text_.split())}")
    return "\n\n".join(out)


def registered_family(tp: Any) -> str | None:
    """The family of ``Annotated[str, Registered(family)]`` (a field naming a registered component,
    such as a feed-forward block's ``activation``), else None."""
    from zoo.components import Registered

    if typing.get_origin(tp) is not typing.Annotated:
        return None
    return next((m.family for m in typing.get_args(tp)[1:] if isinstance(m, Registered)), None)


def _param_fields(config_cls, config) -> list[dict]:
    if config_cls is None:
        return []
    hints = typing.get_type_hints(config_cls, include_extras=True)
    fields = []
    for f in dataclasses.fields(config_cls):
        tp, value = hints.get(f.name, Any), getattr(config, f.name) if config is not None else None
        family = registered_family(tp)
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
        origin = typing.get_origin(tp)
        if family is not None:  # Annotated[str, Registered("activation")]: the live registry's names
            kind, choices = "choice", zoo.get_registry().names(family)
        elif tp is bool:
            kind, choices = "bool", None
        elif tp is int:
            kind, choices = "int", None
        elif tp is float:
            kind, choices = "float", None
        elif origin is typing.Literal:
            kind, choices = "choice", list(typing.get_args(tp))
        elif tp is str:
            kind, choices = "str", None
        else:  # Optional, tuples, unions: typed as YAML
            kind, choices = "yaml", None
            value = yaml.safe_dump(list(value) if isinstance(value, tuple) else value,
                                   default_flow_style=True).strip().removesuffix("...").strip()
        fields.append({"name": f.name, "type": kind, "value": value, "choices": choices})
    return fields


# ---------------------------------------------------------------------- hints
def _future_rows(spec, role: str, T: int = 16) -> int:
    """How many query rows of ``role``'s composed mask see a later key, outside a prefix rule's
    bidirectional prefix (the mask built by the same rules the model uses)."""
    import torch

    from zoo.components import MaskContext
    from zoo.model.layers import make_parts

    T = max(2, min(T, spec.max_len))
    mask = torch.ones(T, T, dtype=torch.bool)
    for rule in make_parts(spec, role, zoo.get_registry()).masks():
        m = rule(MaskContext(q_len=T, k_len=T, device=torch.device("cpu")))
        if m is not None:
            mask = mask & m.reshape(-1, T, T)[0]
    future = mask & torch.ones(T, T, dtype=torch.bool).triu(1)  # (Tq, Tk): key after the query
    prefix = max([getattr(m.config, "length", 0) or 0 for m in spec.stack(role).mask if m.kind == "prefix"],
                 default=0)
    return int(future[prefix:].any(-1).sum())


def hints(spec, lang: str = "en") -> list[str]:
    """What a valid spec probably does not mean: a decoder that sees the future (it cannot generate
    left to right), a window or prefix that covers all of ``max_len`` (it restricts nothing), an
    encoder that only looks left, a bidirectional stack without positions (a bag of words),
    BatchNorm outside teaching, very high dropout, very narrow heads."""
    out = []
    for role in spec.roles:
        st = spec.stack(role)
        where = f"{role}." if spec.arch == "encoder_decoder" else ""
        masks = " & ".join(m.kind for m in st.mask)
        if role == "decoder" and _future_rows(spec, role):
            out.append(t("hint.future", lang, where=where, mask=masks))
        if role == "encoder" and spec.arch == "encoder" and not _future_rows(spec, role) \
                and any(m.kind == "causal" for m in st.mask):
            out.append(t("hint.encoder_causal", lang, where=where))
        for m in st.mask:
            size = getattr(m.config, "window", None) if m.kind == "sliding_window" else \
                getattr(m.config, "length", None) if m.kind == "prefix" else None
            if size is not None and size >= spec.max_len:
                out.append(t("hint.window", lang, where=where, kind=m.kind, size=size, max_len=spec.max_len))
        if st.positions.kind == "none" and _future_rows(spec, role, 8) and role != "decoder":
            out.append(t("hint.no_positions", lang, where=where))
        if st.norm.kind == "batchnorm":
            out.append(t("hint.batchnorm", lang, where=where))
        if st.head_dim < 8:
            out.append(t("hint.narrow", lang, where=where, hd=st.head_dim))
    if spec.dropout >= 0.5:
        out.append(t("hint.dropout", lang, p=spec.dropout))
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------- analysis
def _same_yaml(text: str | None) -> str:
    """One cache key per spec: the editor hands its YAML back without the last newline (gr.Code),
    while the page was built from the file's text with it (:func:`_parse` reads both alike)."""
    return (text or "").rstrip("\n")


@functools.lru_cache(maxsize=16)
def _facts(text: str) -> tuple:
    """What the analysis of the YAML ``text`` finds, in no language: ``(spec, parameter count,
    parameters per component)``, or ``(the ZooError, None, None)``; remembered by text.

    Building on the meta device (twice: the limits' count and the table) is most of an analysis: a
    language switch words the same findings again, and re-analysing cost it about 0.5 s on the
    server (issue 34); the findings depend on the text alone (and the installed plugins, fixed while
    the server runs)."""
    try:
        spec = _parse(text)
        total = check_spec_limits(spec)
    except ZooError as exc:
        return exc, None, None
    import torch

    with torch.device("meta"):
        model = zoo.build(spec, init=False)
    return spec, total, parameter_table(model)


def analyse(text: str, lang: str = "en") -> tuple[str, list[list], str, bool]:
    """Validate the YAML.  Returns ``(status markdown, parameter table rows, diagram html, ok)``;
    a ``ZooError`` (including a size limit) becomes the status message, never an exception."""
    spec, total, table = _facts(_same_yaml(text))
    if isinstance(spec, ZooError):
        msg = safe_markdown(format_error(spec, lang)).replace("\n", "  \n")
        return f"✗ **{t('build.invalid', lang)}**  \n{msg}", [], "", False
    rows = [[k, f"{v:,}", f"{100 * v / max(total, 1):.1f}%"] for k, v in table.items()]
    rows.append([t("col.total", lang), f"{total:,}", "100.0%"])  # columns: TABLE_HEADERS
    status = f"✓ {t('build.valid', lang, params=f'{total:,}')}"
    notes = hints(spec, lang)
    if notes:
        status += "  \n" + "  \n".join(f"⚠ {safe_markdown(n)}" for n in notes)
    return status, rows, block_diagram(spec, lang), True


def block_diagram(spec, lang: str = "en") -> str:
    """An HTML diagram of the assembled model: embeddings, each stack's block (sub-layers in the
    order the placement applies them), final norm, head."""
    reg = zoo.get_registry()
    e = html.escape

    def d(key, **fmt):
        return t(f"diag.{key}", lang, **fmt)

    def box(label, color, note=""):
        note_html = f"<div style='font-size:0.8em;opacity:0.8'>{e(note)}</div>" if note else ""
        return (f"<div style='border:1px solid #888;border-radius:6px;padding:4px 8px;margin:3px 0;"
                f"background:{color};color:#111'>{e(label)}{note_html}</div>")

    def sublayer(name, note, st):
        placement = st.placement.kind
        norm = box(f"{st.norm}", "#fde68a")
        core = box(name, "#bfdbfe", note)
        add = box(d("residual"), "#e5e7eb")
        if placement == "pre":
            parts = [norm, core, add]
        elif placement == "post":
            parts = [core, add, norm]
        else:
            parts = [box(f"{d('placement')}: {placement}", "#fde68a"), core, add]
        return "<div style='border-left:3px solid #60a5fa;padding-left:6px;margin:4px 0'>" + \
            "".join(parts) + "</div>"

    cols = []
    for role in spec.roles:
        st = spec.stack(role)
        pos = reg.get("position", st.positions.kind).cls
        where = d("pos_embed") if pos.acts_on_embeddings else d("pos_qk") if pos.acts_on_qk \
            else d("pos_bias") if pos.acts_on_scores else d("pos_none")
        mask = " & ".join(m.kind for m in st.mask)
        heads = d("heads", h=st.num_heads) + (", " + d("kv_heads", h=st.num_kv_heads)
                                              if st.num_kv_heads != st.num_heads else "") + \
            f", head_dim {st.head_dim}"
        inner = sublayer(f"{d('self_attention')} ({st.attention.kind})", f"{heads}; {d('mask')}: {mask}", st)
        if st.cross_attention:
            inner += sublayer(f"{d('cross_attention')} ({st.attention.kind})", d("cross_note"), st)
        inner += sublayer(f"{d('ffn')} ({st.ffn})", f"{spec.d_model} → {st.d_ff} → {spec.d_model}", st)
        final = reg.get("placement", st.placement.kind).cls.final_norm
        col = [f"<div style='font-weight:bold;margin-bottom:4px'>{e(d(role))}</div>",
               box(d("token_embeddings"), "#d1fae5", f"{spec.vocab_size} × {spec.d_model}"),
               box(f"{d('positions')}: {st.positions}", "#d1fae5", where),
               f"<div style='border:2px dashed #888;border-radius:8px;padding:6px;margin:6px 0'>"
               f"<div style='font-weight:bold'>× {st.num_layers}</div>{inner}</div>"]
        if final:
            col.append(box(f"{d('final_norm')}: {st.norm}", "#fde68a"))
        if role == "decoder":
            col.append(box(d("lm_head"), "#fecaca", f"{spec.d_model} → {spec.vocab_size}"
                           + (f" ({d('tied')})" if spec.tie_embeddings else "")))
        elif spec.arch == "encoder" and spec.head is not None and spec.head.kind != "none":
            note = (f"{spec.d_model} → {spec.vocab_size}" if spec.head.kind == "mlm"
                    else d("pooling", how=spec.head.pooling, n=spec.head.num_labels))
            col.append(box(f"{d('head')}: {spec.head.kind}", "#fecaca", note))
        cols.append("<div style='flex:1;min-width:220px'>" + "".join(col) + "</div>")
    return ("<div class='zoo-diagram' style='display:flex;gap:16px;font-family:sans-serif;"
            "font-size:0.9em'>" + "".join(cols) + "</div>")


def cost_available() -> bool:
    """Whether zoo's accounting and plots are installed (matplotlib is in the ``ui`` extra)."""
    try:
        from zoo.inside import costs as accounting, plots  # noqa: F401
    except ImportError:
        return False
    return hasattr(plots, "compute_cost_curve") and hasattr(accounting, "forward_cost")


COST_LENGTHS = (64, 256, 1024, 4096)
TABLE_HEADERS = ("col.component", "col.params", "col.share")


def cost(text: str, lang: str = "en", *, figure: bool = True):
    """``(figure, rows)``: FLOPs per forward against sequence length (attention core vs projections
    vs feed-forward, with the crossover) and a memory table; ``(None, [])`` when the spec is invalid
    or the accounting module is absent."""
    if not cost_available():
        return None, []
    from zoo.inside import costs as accounting, plots

    spec = _facts(_same_yaml(text))[0]
    if isinstance(spec, ZooError):
        return None, []
    fig = plots.compute_cost_curve(spec) if figure else None
    return fig, [list(r) for r in _cost_rows(_same_yaml(text))]


@functools.lru_cache(maxsize=16)
def _cost_rows(text: str) -> tuple:
    """The memory table's rows of a valid spec's ``text`` (numbers and units: no language)."""
    from zoo.inside import costs as accounting

    spec, human, rows = _facts(text)[0], accounting.human, []
    for T in COST_LENGTHS:
        c = accounting.forward_cost(spec, T)
        rows.append((T, human(c["total_flops"]), f"{100 * c['attention_core'] / max(c['total'], 1):.1f}%",
                     human(c["params_bytes"], "B"), human(c["scores_bytes"], "B"),
                     human(c["kv_cache_bytes"], "B")))
    return tuple(rows)


COST_HEADERS = ("col.seq_len", "col.flops", "col.core_share", "col.mem_params", "col.mem_scores",
                "col.mem_kv")


@handler
def save(text: str, name: str, seed: Any, lang: str = "en") -> str:
    """Build the spec with random weights (``seed``) and save it under the runs folder as ``name``;
    returns the message the page shows."""
    return saved_message(lang, raw(save_model)(text, name, seed, lang))


def saved_message(lang: str, kept: dict | None) -> str | None:
    """"Saved NAME (N parameters) to runs/NAME/..." in ``lang``, from :func:`save_model`'s record."""
    if not kept:
        return None
    return t("build.saved", lang, name=kept["name"], params=f"{kept['params']:,}", path=kept["path"])


@handler
def save_model(text: str, name: str, seed: Any, lang: str = "en") -> dict:
    """Build the spec with random weights (``seed``) and save it under the runs folder as ``name``;
    returns what was saved (name, parameter count, file as the page names it)."""
    name = check_name(name, lang)
    if name in zoo.list_checkpoints():
        raise ui_error(ZooError, "build.shipped", fix="build.other_name", where="checkpoint name", name=name)
    spec = _parse(text)
    n = check_spec_limits(spec, lang)
    runs = runs_dir()
    existing = [p.parent.name for p in runs.glob("*/model.safetensors")] if runs.is_dir() else []
    if name not in existing:
        check_value("runs", len(existing) + 1, lang=lang)
    model = zoo.build(spec, seed=int(seed or 0))
    path = zoo.save(model, runs_dir() / name, metadata={"created_by": "zoo ui", "seed": int(seed or 0)})
    return {"name": name, "params": n, "path": shown_path(path)}  # runs/NAME/..., never the server's path


def registry_choices() -> dict[str, list[str]]:
    """Dropdown choices for each component field, live from the registry."""
    return {field: zoo.get_registry().names(family) for field, family in component_fields().items()}


# ---------------------------------------------------------------------- layout
def build(tr, lang_state) -> dict:
    """Create the tab's components (inside an open ``gr.Tab``) and wire its events."""
    import gradio as gr

    ui = _layout(tr, lang_state)
    _wire_form(ui, lang_state)
    _wire_validation(ui, lang_state, tr)

    @inline_errors(2, kept=True)
    def save_ui(text, name, seed, lang):
        kept = raw(save_model)(text, name, seed, lang)
        return saved_message(lang, kept), kept

    ui["saved_event"] = ui["save_btn"].click(
        save_ui, inputs=[ui["code"], ui["save_name"], ui["seed"], lang_state],
        outputs=[ui["saved"], ui["saved_kept"], *error_outputs(ui["save_error"])], api_name="save_ui",
        api_visibility="private", concurrency_limit=2)

    def save_api(text: str, name: str, seed: int = 0, lang: str = "en") -> str:
        """The HTTP API: save the spec with random weights; an error is an error response."""
        return save(text, name, seed, lang=lang)

    gr.api(save_api, api_name="save", concurrency_limit=2)
    return {k: ui[k] for k in ("code", "status", "fields", "table", "diagram", "save_name", "saved",
                               "saved_event", "preset", "load")}


def _start_yaml() -> tuple[str | None, str]:
    """(preset shown first, its YAML): ``gpt_tiny`` when present."""
    presets = zoo.list_presets()
    first = "gpt_tiny" if "gpt_tiny" in presets else (presets[0] if presets else None)
    start = preset_yaml(first) if first else "arch: decoder\nvocab_size: 256\nd_model: 64\n" \
        "num_layers: 2\nnum_heads: 4\n"
    return first, start


def _layout(tr, lang_state) -> dict:
    """The components, top to bottom: preset picker, form | YAML, status, parameter table and
    diagram, cost, save.  Returns them by name."""
    import gradio as gr

    first, start = _start_yaml()
    ui: dict[str, Any] = {}
    tr.add(gr.Markdown(tr("build.intro")), value="build.intro")
    with gr.Row():
        ui["preset"] = tr.add(gr.Dropdown(zoo.list_presets(), value=first, label=tr("build.preset"),
                                          elem_id="build-preset"), label="build.preset")
        ui["load"] = tr.add(gr.Button(tr("build.load"), elem_id="build-load"), value="build.load")
    # the YAML editor is made first (placed in the right column below): the parameter fields read it
    ui["code"] = tr.add(gr.Code(start, language="yaml", label=tr("build.yaml"), interactive=True, lines=24,
                                elem_id="build-yaml", render=False), label="build.yaml")
    with gr.Row():
        with gr.Column(scale=1):
            ui["fields"] = _form(tr, form_values(start) or {})
            tr.add(gr.Markdown(f"#### {tr('build.params_heading')}"), value="#### {build.params_heading}")
            ui["entries"] = gr.State(component_entries(start))
            ui["no_params"] = tr.add(gr.Markdown(tr("build.no_params"), elem_id="build-no-params",
                                                 visible=not _shown(ui["entries"].value)), value="build.no_params")
            _param_area(ui, lang_state)
        with gr.Column(scale=1):
            ui["code"].render()
            tr.add(gr.Markdown(tr("build.stack_note")), value="build.stack_note")
    _analysis_area(tr, ui, start)
    _save_area(tr, ui)
    return ui


def _number(tr, values: dict, field: str, **limits):
    import gradio as gr

    return tr.add(gr.Number(values.get(field), label=tr(f"build.{field}"), elem_id=f"build-{field}",
                            **limits), label=f"build.{field}")


def _form(tr, values: dict) -> dict:
    """The form's fields (architecture, sizes, one dropdown per component family), by field."""
    import gradio as gr

    from zoo.model.spec import ARCHS

    fields: dict[str, Any] = {}
    fields["arch"] = tr.add(gr.Dropdown(list(ARCHS), value=values.get("arch"), label=tr("build.arch"),
                                        elem_id="build-arch"), label="build.arch")
    texts = [f for f in scalar_fields() if scalar_kind(f)[0] is str]
    numbers = [f for f in scalar_fields() if f not in texts]
    for f in texts:
        fields[f] = tr.add(gr.Textbox(values.get(f), label=tr(f"build.{f}"), elem_id=f"build-{f}"),
                           label=f"build.{f}")
    for i in range(0, len(numbers), 3):  # three to a row; bounds from the UI's LIMITS
        with gr.Row():
            for f in numbers[i:i + 3]:
                kind, optional = scalar_kind(f)
                if kind is float:
                    fields[f] = _number(tr, values, f, minimum=0, maximum=LIMITS.get(f), step=0.05)
                else:
                    fields[f] = _number(tr, values, f, precision=0, minimum=0 if optional else 1,
                                        maximum=LIMITS.get(f))
    choices = registry_choices()
    # three to a row too: six in one row wrapped at 1920 px (five fit the column, "Feed-forward" sat
    # on a row of its own); two rows of three hold from 1280 px up
    families = list(component_fields())
    for i in range(0, len(families), 3):
        with gr.Row():
            for f in families[i:i + 3]:
                fields[f] = tr.add(gr.Dropdown(choices[f], value=values.get(f), label=tr(f"build.{f}"),
                                               elem_id=f"build-{f}"), label=f"build.{f}")
    return fields


def _param_area(ui: dict, lang_state) -> None:
    """The parameter fields of the chosen components, re-rendered on load and whenever the entries
    change -- not on a language switch: the fields are labelled by the parameters' own names, and
    "no parameters" is a translated line outside the render (``ui["no_params"]``, shown by
    :func:`on_change`), so a switch re-renders nothing here (issue 34: it cost seconds in the browser).

    A render draws the YAML as it is when the render runs, not the entries that triggered it: renders
    and edits interleave (a component chosen, then a value typed before its fields arrive), and a
    render of older entries would show a value the YAML no longer holds.  While the YAML is invalid
    the last valid entries stay."""
    import gradio as gr

    root = gr.context.Context.root_block
    triggers = [ui["entries"].change] + ([root.load] if root is not None else [])

    @gr.render(inputs=[ui["code"], ui["entries"]], triggers=triggers)
    def _params(text, last):
        entries = [e for e in component_entries(text) or last or [] if e["params"]]
        # One slot per family, always present (hidden while empty): the browser reuses widgets by
        # position, and a row inserted before the others (positions' fields appearing) once handed
        # an old value to a widget of another type ("gelu" in a number box).
        for fam in form_families():
            mine = [e for e in entries if e["family"] == fam.name]
            with gr.Column(key=f"params-{fam.name}", visible=bool(mine)):
                for entry in mine:
                    _entry_row(entry, ui["code"])


def _entry_row(entry: dict, code) -> None:
    """One component's parameter fields in a row, each writing its value into the YAML."""
    import gradio as gr

    where = "-".join(map(str, entry["path"]))
    with gr.Row(key=f"row-{where}-{entry['kind']}"):
        gr.Markdown(f"**{'.'.join(map(str, entry['path']))}: {entry['kind']}**", key=f"title-{where}-{entry['kind']}")
        for p in entry["params"]:
            w, events = _param_widget(p, f"param-{where}-{p['name']}", entry["kind"])
            gr.on(events, handler(param_setter(p, entry["path"])), inputs=[w, code], outputs=[code],
                  show_progress="hidden", api_visibility="private")


def _param_widget(p: dict, eid: str, kind: str):
    """(widget, the events that commit it) for one parameter field.

    The key names the field, the component kind, the widget type and the value the YAML holds: a
    re-render never hands one field's value to another kind of widget (a Number shown "gelu"), a
    changed YAML value makes a new widget showing it, and a repeated render of the same entries
    keeps what the user is typing (``preserved_by_key``) instead of resetting it to the YAML's value.
    """
    import gradio as gr

    opts = dict(label=p["name"], elem_id=eid, key=f"{eid}-{kind}-{p['type']}-{p['value']!r}",
                preserved_by_key=["value"], interactive=True)
    if p["type"] == "bool":
        w = gr.Checkbox(bool(p["value"]), **opts)
        return w, [w.input]
    if p["type"] in ("int", "float"):
        w = gr.Number(p["value"], precision=0 if p["type"] == "int" else None, **opts)
        return w, [w.submit, w.blur]
    if p["type"] == "choice":
        w = gr.Dropdown([(str(c), str(c)) for c in p["choices"]], value=str(p["value"]), **opts)
        return w, [w.input]
    w = gr.Textbox(str(p["value"]) if p["value"] is not None else "", **opts)
    return w, [w.submit, w.blur]


def param_setter(p: dict, path: list):
    """The handler of one parameter field: its widget's value, typed as the config field wants,
    written into the YAML at ``path``."""
    ptype, name = p["type"], p["name"]
    options = {str(c): c for c in p["choices"] or ()}  # label -> typed value

    def on_param(value, text):
        if ptype == "int":
            value = int(value) if value is not None else None
        elif ptype == "yaml":
            value = parse_param_text(value)
        elif ptype == "choice":
            value = options.get(str(value), value)
        return set_param(text, path, name, value)

    return on_param


def _analysis_area(tr, ui: dict, start: str) -> None:
    """Status line, parameter table, block diagram, cost plot and memory table of the start spec."""
    import gradio as gr

    status0, rows0, diagram0, _ = analyse(start)
    ui["status"] = gr.Markdown(status0, elem_id="build-status")
    ui["lessons"] = gr.Markdown(lessons(start), elem_id="build-lessons")
    with gr.Row():
        ui["table"] = tr.add(gr.Dataframe(rows0, headers=[tr(h) for h in TABLE_HEADERS], label=tr("build.table"),
                                          interactive=False, elem_id="build-table"), label="build.table")
        with gr.Column():
            tr.add(gr.Markdown(f"**{tr('build.diagram')}**"), value="**{build.diagram}**")
            ui["diagram"] = gr.HTML(diagram0, elem_id="build-diagram")
    fig0, cost_rows0 = cost(start)
    with gr.Column(visible=cost_available()):  # the table below the plot: all its columns fit
        ui["cost_plot"] = tr.add(gr.Plot(fig0, label=tr("build.cost"), elem_id="build-cost",
                                         elem_classes=["zoo-plot"]), label="build.cost")
        ui["cost_table"] = tr.add(gr.Dataframe(cost_rows0, headers=[tr(h) for h in COST_HEADERS],
                                               label=tr("build.memory"), interactive=False,
                                               elem_id="build-memory"), label="build.memory")


def _save_area(tr, ui: dict) -> None:
    import gradio as gr

    with gr.Row():
        ui["save_name"] = tr.add(gr.Textbox("my_model", label=tr("build.save_name"), info=tr("build.save_info"),
                                            elem_id="build-save-name"), label="build.save_name",
                                 info="build.save_info")
        ui["seed"] = tr.add(gr.Number(0, label=tr("build.seed"), precision=0, elem_id="build-seed"),
                            label="build.seed")
        ui["save_btn"] = tr.add(gr.Button(tr("build.save"), variant="primary", elem_id="build-save"),
                                value="build.save")
    ui["saved"] = gr.Markdown(elem_id="build-saved")
    ui["saved_kept"] = gr.State(None)  # what was saved: the message is worded again on a switch
    ui["save_error"] = error_box("build-error", tr)  # its message follows a language switch


# ---------------------------------------------------------------------- wiring
def refill(text: str, lang: str | None = None) -> list:
    """YAML -> the form's values, in :func:`form_fields` order (unchanged while the YAML is invalid);
    ``lang``: the page's language, in which :func:`~zoo.ui.common.handler` words a refusal."""
    import gradio as gr

    vals = form_values(text)
    if vals is None:
        return [gr.skip()] * len(form_fields())
    return [vals[f] for f in form_fields()]


def _wire_form(ui: dict, lang_state) -> None:
    """Form -> YAML on user edits (``.input``, so programmatic refills never loop); YAML -> form when
    the user types in the editor or loads a preset.  The page's language goes along so that a
    refusal reads in it."""
    import gradio as gr

    fields, code = ui["fields"], ui["code"]
    for f, w in fields.items():
        def on_field(value, text, lang=None, _f=f):
            return set_field(text, _f, value)
        w.input(handler(on_field), inputs=[w, code, lang_state], outputs=[code], show_progress="hidden",
                api_visibility="private")
    form = [fields[f] for f in form_fields()]
    gr.on([code.input, code.blur], handler(refill), inputs=[code, lang_state], outputs=form, show_progress="hidden",
          api_visibility="private", trigger_mode="always_last")

    def on_load(name, lang=None):
        presets = zoo.list_presets()
        if not isinstance(name, str) or name not in presets:  # the list's names only, never a path
            raise ui_error(zoo.SpecError, "build.no_preset", fix="build.no_preset_fix", where="preset",
                           options=presets, name=str(name)[:80])
        text = preset_yaml(name)
        return [text] + refill(text)

    ui["load"].click(handler(on_load), inputs=[ui["preset"], lang_state], outputs=[code] + form,
                     api_name="load_preset")


def on_change(text: str, lang: str, current: list | None = None):
    """Any YAML change: validation status, parameter table, diagram, parameter fields (skipped when
    the fields would show the same), cost plot and memory table."""
    import gradio as gr
    import pandas as pd

    st, rows, diag, ok = analyse(text, lang)
    entries = component_entries(text) if ok else gr.skip()
    no_params = gr.update(visible=not _shown(entries)) if ok else gr.skip()
    if ok and current is not None and _shown(entries) == _shown(current):
        entries = gr.skip()  # the same fields with the same values: no re-render
    # an invalid spec has no structure or cost: say so instead of showing the last valid one
    diag = diag if ok else f"<div class='zoo-stale'>{html.escape(t('build.stale', lang))}</div>"
    fig, crow = cost(text, lang) if ok else (None, [])
    rows = pd.DataFrame(rows, columns=[t(h, lang) for h in TABLE_HEADERS])
    crow = pd.DataFrame(crow, columns=[t(h, lang) for h in COST_HEADERS])
    return st, rows, diag, entries, fig, crow, no_params


def _shown(entries) -> list:
    """The entries the parameter fields show: those with parameters."""
    return [e for e in entries or [] if isinstance(e, dict) and e.get("params")]


def redraw(text: str, lang: str) -> tuple:
    """A language switch's redraw of the analysis: the status line, the two tables (translated
    headers) and the diagram, in ``lang`` -- not the cost plot (its figure is the same in every
    language) nor the parameter fields (labelled by the parameters' names)."""
    import pandas as pd

    st, rows, diag, ok = analyse(text, lang)
    diag = diag if ok else f"<div class='zoo-stale'>{html.escape(t('build.stale', lang))}</div>"
    crow = cost(text, lang, figure=False)[1] if ok else []
    return (st, pd.DataFrame(rows, columns=[t(h, lang) for h in TABLE_HEADERS]), diag,
            pd.DataFrame(crow, columns=[t(h, lang) for h in COST_HEADERS]))


def _wire_validation(ui: dict, lang_state, tr) -> None:
    outputs = [ui[k] for k in ("status", "table", "diagram", "entries", "cost_plot", "cost_table", "no_params")]
    ui["code"].change(handler(on_change), inputs=[ui["code"], lang_state, ui["entries"]], outputs=outputs,
                      show_progress="hidden", trigger_mode="always_last", api_name="validate")
    ui["code"].change(handler(lessons), inputs=[ui["code"], lang_state], outputs=[ui["lessons"]],  # the
                      show_progress="hidden", trigger_mode="always_last", api_visibility="private")  # lessons
    # a language switch: the analysis and the lessons of the YAML on the page, in the new language
    tr.keep([ui[k] for k in ("status", "table", "diagram", "cost_table")], lambda lang, text: redraw(text, lang),
            [ui["code"]])
    tr.keep([ui["lessons"]], lambda lang, text: lessons(text, lang), [ui["code"]])
    tr.keep([ui["saved"]], saved_message, [ui["saved_kept"]])

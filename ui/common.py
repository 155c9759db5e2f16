"""What every tab shares: size limits, checkpoint look-up by name, the model cache and error handling.

Safety rules of the UI (a browser is untrusted input):

- **Checkpoints are chosen by name** from the checkpoint folders (``zoo.list_checkpoints()``: the
  shipped ``checkpoints/`` folder and ``$ZOO_CHECKPOINTS``) and the runs folder (``$ZOO_RUNS``, default
  ``./runs``).  A name is a plain identifier; anything that looks like a path (``../../etc/passwd``,
  ``/etc/passwd``, ``a/b``) is refused before the file system is touched, and the resolved file must
  lie inside one of those folders.
- **Sizes are bounded** (:data:`LIMITS`): a spec typed into the browser cannot ask for 10,000 layers,
  a 1M-token context or 10,000 new tokens.  A *stored* checkpoint is held to memory and work instead
  of its shape (``ui/budget.py``): it opens when its weights fit the process's budget, and a long
  ``max_len`` is capped per request (prompt + new tokens).
- **Errors are messages**: :func:`handler` turns a ``ZooError`` into ``gr.Error`` with the field and the
  fix; any other exception becomes a short "something went wrong" (the traceback goes to the server
  log, never to the page).
"""
from __future__ import annotations

import functools
import logging
import os
import re
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import zoo
from zoo.errors import CheckpointError, SpecError, ZooError, ZooInternalError

from .budget import check_fits
from .i18n import format_error, t, ui_error
from .paths import ABS_PATH, runs_dir, shown_path, shown_paths  # noqa: F401 - the tabs' names for them

log = logging.getLogger("zoo.ui")

from .limits import LIMITS  # noqa: E402,F401 - the tabs' name for it (ui/limits.py)

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}$")


# ---------------------------------------------------------------------- errors
def handler(fn: Callable) -> Callable:
    """Wrap a UI handler: ``ZooError`` -> ``gr.Error`` (localised headings), other exceptions ->
    a generic ``gr.Error`` (traceback logged).  The language is the handler's ``lang`` keyword or
    its last positional argument when that is a language name."""
    import inspect

    sig = inspect.signature(fn)
    expected = _expected_types(fn)

    def _lang(args, kwargs):
        if "lang" in kwargs:
            return kwargs["lang"]
        try:
            bound = sig.bind_partial(*args, **kwargs)
        except TypeError:
            return "en"
        return bound.arguments.get("lang", "en")

    def _raise(exc, args, kwargs):
        import gradio as gr

        lang = _lang(args, kwargs)
        if isinstance(exc, gr.Error):
            raise exc
        if isinstance(exc, ZooError) and not isinstance(exc, ZooInternalError):  # the user's mistake
            raise gr.Error(_html(format_error(exc, lang)), title=t("err.title", lang),
                           print_exception=False) from None
        log.exception("UI handler %s failed", fn.__name__)
        raise gr.Error(t("err.internal", lang, kind=type(exc.__cause__ if isinstance(exc, ZooInternalError)
                                                          and exc.__cause__ else exc).__name__),
                       title=t("err.title", lang), print_exception=False) from None

    def _check(args, kwargs):
        if expected:
            check_arguments(fn.__name__, sig, expected, args, kwargs)

    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen_wrapper(*args, **kwargs):
            try:
                _check(args, kwargs)
                yield from fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - converted to a visible message
                _raise(exc, args, kwargs)
        return gen_wrapper

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            _check(args, kwargs)
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - converted to a visible message
            _raise(exc, args, kwargs)
    return wrapper


#: what a handler's annotation admits, by the annotation's name (an int is a float too; None
#: passes for an ``Optional`` one); unannotated parameters are checked by the handler itself
_ADMITS = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "list": (list, tuple),
           "dict": (dict,)}
#: what each annotation expects is worded by the STRINGS keys err.arg_<type> (ui/i18n.py)


def _expected_types(fn: Callable) -> dict[str, tuple[str, bool]]:
    """``{parameter: (type name, None allowed)}`` for the parameters of ``fn`` annotated with one of
    :data:`_ADMITS` (or ``X | None`` / ``Optional[X]``); others are not checked here."""
    import inspect

    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        ann = p.annotation
        if ann is p.empty:
            continue
        text = (ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))).replace(" ", "")
        text = text.replace("typing.", "")
        optional = text.endswith("|None") or text.startswith("Optional[") or p.default is None
        base = text[:-5] if text.endswith("|None") else text[9:-1] if text.startswith("Optional[") else text
        base = base.split("[")[0]
        if base in _ADMITS:
            out[name] = (base, optional)
    return out


def check_arguments(where: str, sig, expected: dict, args: tuple, kwargs: dict) -> None:
    """The UI's argument contract (the first thing :func:`handler` does): each annotated argument
    is of its type -- a browser or an HTTP client can send anything, and a wrong type deep inside
    zoo would surface as an "internal error" instead of a message naming the field."""
    try:
        bound = sig.bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise ui_error(ZooError, "err.arg_call", fix="err.arg_call_fix", where=where, detail=exc) from None
    for name, value in bound.arguments.items():
        if name not in expected:
            continue
        base, optional = expected[name]
        if value is None and optional:
            continue
        _check_type(f"{where}.{name}", name, base, value)


def _check_type(where: str, name: str, base: str, value: Any) -> None:
    """``value`` is of the :data:`_ADMITS` type ``base`` (an ``int`` field takes 3.0, a number is
    never NaN), or a ``ZooError`` at ``where`` worded by ``err.arg_<base>``."""
    ok = isinstance(value, _ADMITS[base]) and not (base in ("int", "float") and isinstance(value, bool))
    if base == "int" and isinstance(value, float) and value.is_integer():
        ok = True  # a gr.Number sends 3.0 (float("inf").is_integer() is False: no setting)
    if base in ("int", "float") and ok and value != value:
        ok = False  # NaN is no setting
    if not ok:
        if value is None:  # an empty field: said in the page's language, not shown as a value
            raise ui_error(ZooError, f"err.arg_{base}_none", fix=f"err.arg_{base}_fix", where=where, name=name)
        got = "NaN" if value != value else repr(value[:40]) if isinstance(value, str) else \
            str(value) if isinstance(value, float) and abs(value) == float("inf") else type(value).__name__
        raise ui_error(ZooError, f"err.arg_{base}", fix=f"err.arg_{base}_fix", where=where, name=name, got=got)


def _html(text: str) -> str:
    """Error toasts render HTML: escape the message, keep its lines."""
    import html

    return "<br>".join(html.escape(line, quote=False) for line in text.split("\n"))


# ---------------------------------------------------------------------- text shown as Markdown
_CODE = re.compile(r"(```.*?```|`[^`\n]*`)", re.S)


def safe_markdown(text: str) -> str:
    """``text`` for a ``gr.Markdown``: every ``<`` and ``&`` outside code spans becomes an entity, so
    the page shows tokens like ``<mask>`` and ``<eos>`` instead of swallowing them as HTML tags;
    Markdown itself (headings, lists, tables, images, code) still renders."""
    parts = _CODE.split(text or "")
    return "".join(p if i % 2 else p.replace("&", "&amp;").replace("<", "&lt;")
                   for i, p in enumerate(parts))


def error_markdown(exc: "BaseException | dict", lang: str = "en") -> str:
    """A ``ZooError`` (or its :func:`error_record`) as the Markdown of a tab's error box: a heading,
    then where / problem / valid options / fix on their own lines, localised (:func:`format_error`)
    and escaped."""
    lines = safe_markdown(format_error(exc, lang)).split("\n")
    return f"**✗ {t('err.title', lang)}**  \n" + "  \n".join(lines)


def error_record(exc: BaseException) -> dict:
    """What an error box keeps of an error to word it again in another language: its parts
    (where / what / valid options / fix as raised) and its message id and params
    (:mod:`zoo.messages`), or the kind of an internal error."""
    if not isinstance(exc, ZooError) or isinstance(exc, ZooInternalError):
        return {"internal": type(getattr(exc, "__cause__", None) or exc).__name__
                if isinstance(exc, ZooInternalError) else type(exc).__name__}
    return {"where": exc.where, "what": getattr(exc, "what", None) or str(exc),
            "options": [str(o) for o in exc.options or ()], "fix": exc.fix,
            "message_id": exc.message_id, "params": dict(exc.params), "fix_ids": list(exc.fix_ids)}


def error_again(lang: str, record: dict | None) -> str | None:
    """An error box's Markdown in ``lang`` from :func:`error_record` (None when the box is empty):
    worded again from its message id and params (:func:`~zoo.ui.i18n.error_text`), with the
    headings in the new language."""
    if not record:
        return None
    if "internal" in record:
        return f"**✗ {t('err.title', lang)}**  \n" + t("err.internal", lang, kind=record["internal"])
    return error_markdown(record, lang)


def error_outputs(box) -> list:
    """The outputs an ``inline_errors(n, kept=True)`` function writes after its ``n`` values: the
    box's kept record (:func:`error_box` with a translator), then the box."""
    return [box.zoo_kept, box]


def inline_errors(n_outputs: int, lang_arg: str = "lang", kept: bool = False):
    """Decorate a tab's main event function whose outputs are ``n_outputs`` components followed by
    the tab's error box (a ``gr.Markdown``).  The function returns (or yields) the ``n_outputs``
    values; the decorator appends ``""`` (clearing an old error) or, on a ``ZooError``, leaves the
    outputs as they were and fills the box with where / problem / fix.  The message stays on the
    page until the next action: no toast that vanishes, no other tab's stale message, no red badge
    without a text.  Other exceptions become a short "something went wrong" (traceback in the log).
    Wrapped functions call the plain (undecorated) handlers: ``raw(run)``.

    ``kept``: the box of :func:`error_box` made with a translator, wired as ``outputs=[...,
    *error_outputs(box)]``: the function also writes the error's record (:func:`error_record`, None
    when it succeeds) before the box, and a language switch words the message again."""
    import inspect

    def deco(fn):
        sig = inspect.signature(fn)

        def fail(exc, args, kwargs):
            import gradio as gr

            try:
                lang = sig.bind_partial(*args, **kwargs).arguments.get(lang_arg, "en")
            except TypeError:
                lang = "en"
            if isinstance(exc, ZooError) and not isinstance(exc, ZooInternalError):
                box = error_markdown(exc, lang)
            else:
                log.exception("UI handler %s failed", fn.__name__)
                box = f"**✗ {t('err.title', lang)}**  \n" + t("err.internal", lang, kind=type(exc).__name__)
            return tuple([gr.skip()] * n_outputs + ([error_record(exc)] if kept else []) + [box])

        def ok(values):
            values = values if isinstance(values, tuple) else (values,)
            return tuple(values) + ((None,) if kept else ()) + ("",)

        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen(*args, **kwargs):
                import gradio as gr

                first = True
                try:
                    for values in fn(*args, **kwargs):
                        if first:  # the old message goes when the run starts ...
                            yield ok(values)
                            first = False
                        else:  # ... and a run still streaming never wipes a newer one's message
                            values = values if isinstance(values, tuple) else (values,)
                            yield tuple(values) + (gr.skip(),) * (2 if kept else 1)
                except Exception as exc:  # noqa: BLE001 - shown in the error box
                    yield fail(exc, args, kwargs)
            return gen

        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                return ok(fn(*args, **kwargs))
            except Exception as exc:  # noqa: BLE001 - shown in the error box
                return fail(exc, args, kwargs)
        return call
    return deco


def raw(fn: Callable) -> Callable:
    """The function under :func:`handler` (its errors are ``ZooError``, not ``gr.Error``)."""
    return getattr(fn, "__wrapped__", fn)


def error_box(elem_id: str, tr=None):
    """The error box of a tab (empty until an action fails).  With the translator ``tr``, the box
    keeps the record of its error (``box.zoo_kept``, a ``gr.State``) and a language switch words the
    message again in the new language (:func:`error_again`); wire it with :func:`error_outputs`."""
    import gradio as gr

    box = gr.Markdown("", elem_id=elem_id, elem_classes=["zoo-error"])
    if tr is not None:
        box.zoo_kept = gr.State(None)
        tr.keep([box], error_again, [box.zoo_kept])
    return box


# ---------------------------------------------------------------------- tables
def frame(rows, headers, lang: str = "en"):
    """``rows`` as a table whose headers are the i18n keys ``headers`` worded in ``lang``."""
    import pandas as pd

    return pd.DataFrame(rows, columns=[t(h, lang) for h in headers])


def empty_table(headers):
    """A table's value for the language switch while it holds no rows: its headers in the new
    language (``tr.add(gr.Dataframe(...), label=..., value=empty_table(HEADERS))``).  A table's
    ``headers=`` are drawn once, in the page's first language: Compare's and Verify's empty tables
    kept "metric / Model A / Model B" under 中文 until their first result (issue 34).  The keys are
    listed as ``i18n_keys`` for the translation checks."""
    def empty(lang):
        return frame([], headers, lang)
    empty.i18n_keys = tuple(headers)
    return empty


# ---------------------------------------------------------------------- the result in view
def show_result_js(result: str, error: str | None = None) -> str:
    """The browser side of "a click shows its result" (issue 34), for ``event.then(None, js=...)``:
    a tab's result sits below its controls, under the fold of a 1280x800 window, so the script
    scrolls the tab's ``error`` box (a CSS selector) to the top of the window when it holds a
    message, else its ``result``.  The result's top is the anchor: what it draws below that
    afterwards (a heatmap, a table's rows) leaves it in place.  One script for the tabs that show a
    result below their controls (Run, Inspect, Interpret, Compare)."""
    import json

    err = f"document.querySelector({json.dumps(error)})" if error else "null"
    return (f"() => {{ const err = {err};\n"
            f"  const el = err && err.querySelector('strong') ? err : document.querySelector({json.dumps(result)});\n"
            "  if (el) el.scrollIntoView({block: 'start', behavior: 'instant'}); }")


# ---------------------------------------------------------------------- limits
def check_value(field: str, value: Any, limit_key: str | None = None, lang: str = "en",
                kind: str | None = None) -> Any:
    """Raise a ``SpecError`` naming ``field`` when ``value`` exceeds its limit; returns ``value``.

    ``kind`` (``"int"`` or ``"float"``): ``value`` is what a browser or an HTTP client sent for a
    number field, so it can be anything ("abc", NaN, 1e400, a list, nothing): it is held to the
    UI's argument contract first (:func:`check_arguments`: a ``ZooError`` at ``field`` saying what
    was sent and what to send, in the page's language) and returned as that type."""
    if kind is not None:
        _check_type(field, field, kind, value)
        value = int(value) if kind == "int" else float(value)
    limit = LIMITS[limit_key or field]
    if value is not None and value > limit:
        raise ui_error(SpecError, "err.limit", fix="err.limit_fix", where=field, field=field, value=value,
                       limit=limit)
    return value


def check_spec_limits(spec: "zoo.ModelSpec", lang: str = "en", base: "zoo.ModelSpec | None" = None) -> int:
    """Check a parsed spec against :data:`LIMITS`; returns its parameter count (built on the meta
    device, so nothing is allocated).  ``base``: the stored checkpoint a typed-in change starts from
    (Compare's overrides): a value no larger than the checkpoint's own passes, so only what was
    typed is held to the limits, never the released model's shape."""
    def check(field, value, key, base_value):
        if base_value is None or value > base_value:
            check_value(field, value, key, lang)

    for key in ("d_model", "vocab_size", "max_len"):
        check(key, getattr(spec, key), key, getattr(base, key, None))
    for role in spec.roles:
        st = spec.stack(role)
        was = base.stack(role) if base is not None and role in base.roles else None
        prefix = f"{role}." if spec.arch == "encoder_decoder" else ""
        for field, value, key in (("num_layers", st.num_layers, "num_layers"), ("num_heads", st.num_heads, "num_heads"),
                                  ("d_ff", st.d_ff, "d_ff"), ("head_dim", st.head_dim * st.num_heads, "d_model")):
            before = None if was is None else (was.head_dim * was.num_heads if field == "head_dim"
                                               else getattr(was, field))
            check(prefix + field, value, key, before)
    import torch

    def count(s):
        with torch.device("meta"):  # shapes only: no memory, no initialisation
            model = zoo.build(s, init=False)
        return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())

    n = count(spec)
    check("parameters", n, "parameters", None if base is None else count(base))
    return n


# ---------------------------------------------------------------------- checkpoints by name
def _allowed_roots() -> list[Path]:
    from zoo.model.spec import preset_dirs

    return [p.resolve() for p in preset_dirs()] + [runs_dir()]


def checkpoint_table() -> dict[str, Path]:
    """name -> weights file, for every checkpoint the UI may open (checkpoint folders first, then
    the runs folder; a name found in both resolves to the checkpoint folder)."""
    from zoo.io.checkpoint import WEIGHTS, resolve_checkpoint

    out: dict[str, Path] = {}
    for name in zoo.list_checkpoints():
        try:
            out[name] = resolve_checkpoint(name).resolve()
        except ZooError:
            continue
    runs = runs_dir()
    if runs.is_dir():
        for f in sorted(runs.glob(f"*/{WEIGHTS}")):
            name = f.parent.name
            if _NAME_RE.match(name) and name not in out:
                out[name] = f.resolve()
    roots = _allowed_roots()
    return {n: p for n, p in out.items() if any(p.is_relative_to(r) for r in roots)}


def checkpoint_names() -> list[str]:
    return list(checkpoint_table())


def default_checkpoint(names: list[str] | None = None) -> str | None:
    """The checkpoint a tab starts on: the first one that can read text (a stored tokenizer),
    preferring decoders (they have the most to show), else the first name, else None."""
    names = checkpoint_names() if names is None else names
    table = checkpoint_table()
    ranked = []
    for name in names:
        try:
            meta = zoo.read_metadata(table[name])
            arch = zoo.load_spec(table[name]).arch
        except (ZooError, KeyError):
            continue
        if "zoo.tokenizer" in meta:
            ranked.append((arch != "decoder", name))
    return min(ranked)[1] if ranked else (names[0] if names else None)


def check_name(name: Any, lang: str = "en") -> str:
    """A plain checkpoint / run name, or a ``CheckpointError`` (paths, ``..``, empty)."""
    if not name or not isinstance(name, str) or not name.strip():
        raise ui_error(CheckpointError, "err.no_ckpt", fix="err.bad_name_fix", where="checkpoint",
                       options=checkpoint_names())
    name = name.strip()
    if not _NAME_RE.match(name) or ".." in name:
        raise ui_error(CheckpointError, "err.bad_name", fix="err.bad_name_fix", where="checkpoint",
                       name=name[:80])
    return name


def checkpoint_path(name: Any, lang: str = "en") -> Path:
    """The weights file of checkpoint ``name``; never a path outside the checkpoint folders."""
    name = check_name(name, lang)
    table = checkpoint_table()
    if name not in table:
        raise ui_error(CheckpointError, "err.unknown_ckpt", fix="err.bad_name_fix", where="checkpoint",
                       options=list(table), name=name)
    return table[name]


_CACHE: "OrderedDict[tuple, Any]" = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 4


def _free_cache() -> bool:
    """Let go of every cached model (a checkpoint that does not fit asks for their memory back);
    True when there was one."""
    import gc

    with _CACHE_LOCK:
        held = bool(_CACHE)
        _CACHE.clear()
    if held:
        gc.collect()
    return held


def load_checkpoint(name: Any, lang: str = "en"):
    """Load (and cache) checkpoint ``name``.  Its stored weights are held against the process's
    memory budget (``ui/budget.py``: the figure from the file's header, before any tensor is read;
    the cache lets go of its models first), never its shape.  Returns an eval-mode model; treat it
    as read-only (it is shared)."""
    path = checkpoint_path(name, lang)
    key = (str(path), path.stat().st_mtime_ns)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    check_fits(check_name(name, lang), path, free=_free_cache, others=checkpoint_table)
    model = zoo.load(path)
    with _CACHE_LOCK:
        _CACHE[key] = model
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return model


def check_text(text: Any, lang: str = "en") -> str:
    if not isinstance(text, str) or not text.strip():
        raise ui_error(ZooError, "err.empty_text", fix="err.empty_text_fix", where="text")
    if len(text) > LIMITS["text_chars"]:
        raise ui_error(ZooError, "err.limit", fix="err.limit_fix", where="text", field="text", value=len(text),
                       limit=LIMITS["text_chars"])
    return text

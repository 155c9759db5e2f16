"""Tokenizers: the front door to the ``tokenizer`` component family.

A tokenizer turns text into ids and back.  The built-in ones are plugins like any other
(``plugins/tok_char.py``, ``tok_byte.py``, ``tok_hf.py``); a third-party package adds more through
the ``register_tokenizers`` hook.  Build one by name with its parameters::

    tok = zoo.tokenizer("char", text="今天天气很好。The weather is fine.")
    tok = zoo.tokenizer("byte")                       # UTF-8 bytes + special tokens, no training
    tok = zoo.tokenizer("hf", path="tokenizer.json")  # a local Hugging Face tokenizers file

A tokenizer travels inside a checkpoint: ``zoo.save(model, path, tokenizer=tok)`` stores
``{"kind": ..., "data": tok.to_json()}`` as JSON in the safetensors metadata, and ``zoo.load(path)``
gives it back as ``model.tokenizer``, so a loaded checkpoint encodes and decodes text by itself.
"""
from __future__ import annotations

import json
import re
from typing import Any, Iterable

from ..components import Tokenizer
from ..errors import TokenizerError
from ..registry import get_registry
from ..model.spec import make_config
from ..guard.tokenizer_files import is_panic
from ..guard.files import clip, short

#: metadata key under which a checkpoint stores its tokenizer
META_KEY = "zoo.tokenizer"

#: the special tokens the built-in tokenizers reserve, in id order
DEFAULT_SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>", "<mask>")


def tokenizer(kind: str, **params: Any) -> Tokenizer:
    """Build the registered tokenizer ``kind`` with ``params`` (validated by its config class)."""
    comp = get_registry().get("tokenizer", kind, where="tokenizer.kind")
    config = make_config(comp.config, params, "tokenizer", kind)
    try:
        tok = comp.cls(config) if comp.config is not None else comp.cls()
    except (ValueError, TypeError, KeyError, OSError) as exc:
        raise TokenizerError(f"cannot build tokenizer '{kind}': {exc}", where="tokenizer",
                             fix="check the tokenizer's parameters (`zoo components tokenizer`)") from exc
    tok.kind = kind
    return tok


def kind_of(tok: Tokenizer) -> str:
    """The registered name of ``tok``'s class."""
    kind = getattr(tok, "kind", None)
    if kind:
        return kind
    for comp in get_registry().list("tokenizer"):
        if comp.cls is type(tok):
            return comp.name
    raise TokenizerError(f"{type(tok).__name__} is not a registered tokenizer", where="tokenizer",
                         fix="register it through the register_tokenizers hook")


def to_json(tok: Tokenizer) -> str:
    """``tok`` as one JSON string (non-ASCII kept as is: Chinese stays readable in the header),
    with the plugin that provides it, so a machine without that plugin is told what to install."""
    kind = kind_of(tok)
    comp = get_registry().components["tokenizer"].get(kind)
    plugin = {"plugin": comp.plugin, "version": comp.version} if comp is not None else {}
    return json.dumps({"kind": kind, **plugin, "data": tok.to_json()}, ensure_ascii=False)


def from_json(text: str | dict) -> Tokenizer:
    """The tokenizer stored by :func:`to_json`; names the plugin to install when it is missing.

    Typed reading: ``text`` must be JSON (or a dict) of an object with a string ``kind`` and, if
    present, an object ``data``; whatever the plugin's ``from_json`` raises on the stored data (a
    ``KeyError`` for a missing field, a ``TypeError`` for a wrong type, a panic of a foreign
    library) becomes a :class:`TokenizerError` naming the plugin."""
    fix = "store tokenizers with zoo.save(model, path, tokenizer=tok)"
    if isinstance(text, (str, bytes, bytearray)):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise TokenizerError(f"the stored tokenizer is not JSON: {clip(exc, 120)}",
                                 where=META_KEY, fix=fix) from exc
    else:
        data = text
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise TokenizerError(f"not a stored zoo tokenizer (an object with a string 'kind'), got "
                             f"{short(data)}", where=META_KEY, fix=fix)
    if not isinstance(data.get("data", {}), dict):
        raise TokenizerError(f"the stored tokenizer's 'data' must be an object, got "
                             f"{short(data['data'])}", where=f"{META_KEY}.data", fix=fix)
    reg = get_registry()
    if data["kind"] not in reg.components["tokenizer"]:
        said = [clip(v, 60) if isinstance(v, str) else short(v)
                for v in (data.get("plugin", "?"), data.get("version", ""))]
        raise TokenizerError(f"the stored tokenizer '{clip(data['kind'], 60)}' is not installed (it "
                             f"came from plugin {said[0]} {said[1]}".rstrip() + ")",
                             where=f"{META_KEY}.kind", options=reg.names("tokenizer"),
                             fix="install that plugin (`zoo plugins` lists what is loaded)")
    comp = reg.get("tokenizer", data["kind"], where=f"{META_KEY}.kind")
    try:
        tok = comp.cls.from_json(data.get("data", {}))
    except TokenizerError:
        raise
    except BaseException as exc:  # noqa: BLE001 - a plugin (or its library) may raise anything
        if not (isinstance(exc, Exception) or is_panic(exc)):
            raise
        raise TokenizerError(f"the stored '{data['kind']}' tokenizer cannot be rebuilt: "
                             f"{type(exc).__name__}: {clip(exc, 160)} (plugin {comp.plugin} "
                             f"{comp.version})", where=f"{META_KEY}.data", fix=fix) from exc
    tok.kind = data["kind"]
    return tok


#: Longest text a tokenizer encodes in one call (characters), so one request is bounded work.
MAX_TEXT_CHARS = 10_000_000


def check_text(text: Any, where: str = "tokenizer.encode") -> None:
    """Tokenizers call this first: ``text`` must be a ``str`` of at most :data:`MAX_TEXT_CHARS`."""
    if not isinstance(text, str):
        raise TokenizerError(f"expected text (a str), got {type(text).__name__}", where=where,
                             fix="pass a string; for several prompts pass a list of strings")
    if len(text) > MAX_TEXT_CHARS:
        raise TokenizerError(f"the text has {len(text):,} characters, more than {MAX_TEXT_CHARS:,}",
                             where=where, fix="split it into smaller pieces")


def check_ids(ids: Any, where: str = "tokenizer.decode") -> list[int]:
    """``ids`` (a 1-D tensor or a sequence of ints) as a list of Python ints, or a TokenizerError."""
    try:
        out = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    except TypeError:
        out = None
    if out is None or not all(isinstance(i, int) and not isinstance(i, bool) for i in out):
        raise TokenizerError(f"expected a flat sequence of integer ids, got {type(ids).__name__}",
                             where=where, fix="pass one row of ids, e.g. ids[0].tolist()")
    return out


def split_specials(text: str, specials: Iterable[str]) -> list[str]:
    """Split ``text`` around occurrences of the special-token strings (longest first), keeping them:
    ``"a<mask>b" -> ["a", "<mask>", "b"]``.  Lets users write ``<mask>`` in fill-mask prompts."""
    specials = sorted((s for s in specials if s), key=len, reverse=True)
    if not specials:
        return [text] if text else []
    pattern = "(" + "|".join(re.escape(s) for s in specials) + ")"
    return [p for p in re.split(pattern, text) if p]


def get_tokenizer(model: Any, tokenizer: Tokenizer | None = None, *, where: str = "tokenizer"
                  ) -> Tokenizer:
    """``tokenizer`` or the model's own (``model.tokenizer`` from a checkpoint); a clear error if none."""
    tok = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if tok is None:
        raise TokenizerError.of("tokenizer.missing", where=where)
    return checked_tokenizer(tok, where)


def checked_tokenizer(tok: Any, where: str = "tokenizer") -> Any:
    """``tok`` when it is a tokenizer (callable ``encode`` and ``decode``), else a TokenizerError at
    ``where`` -- so an int or a string passed as ``tokenizer=`` is refused, not an AttributeError later."""
    if not (callable(getattr(tok, "encode", None)) and callable(getattr(tok, "decode", None))):
        raise TokenizerError(f"expected a tokenizer (with encode and decode), got {type(tok).__name__}",
                             where=where, fix="pass zoo.tokenizer(...) or model.tokenizer, or leave it out")
    return tok


def check_fits(tok: Tokenizer, vocab_size: int, where: str = "tokenizer") -> None:
    """A tokenizer whose ids do not fit the model's embedding table is an error, not a crash later."""
    if tok.vocab_size > vocab_size:
        raise TokenizerError(f"the tokenizer has {tok.vocab_size} ids but the model's vocab_size is "
                             f"{vocab_size}", where=where,
                             fix=f"build the model with vocab_size >= {tok.vocab_size}")

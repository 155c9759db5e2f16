"""One error family for everything a user can get wrong.

Every message answers four questions: *where* (a spec path such as ``decoder.attention.kind``, a file,
a plugin), *what* is wrong, *which* values would be valid, and *how* to fix it.  Code never uses
``assert`` on user input; it raises one of these.

**Error boundaries** (issue 35.4): one per public entry point.  The command line
(:func:`zoo.cli.as_zoo_error`), the UI (:func:`zoo.ui.common.handler`) and the Python API -- the
functions of ``zoo``'s front door (``zoo.build``, ``zoo.load``, ...), a model's methods that reach the
wings (``model.generate``, ``model.chat``, ``model.run_with_cache``, ...: :mod:`zoo.model.doors`) and
every function checked by :func:`zoo.run.arguments.entry` (the inside view) -- each turn a
non-``ZooError`` that escapes into a :class:`ZooInternalError` (:func:`boundary`, :func:`internal_error`):
it says where it escaped, keeps the original as its ``__cause__``, and *is still an instance of the
original's type* (a class made of both, per type: ``except ValueError`` around ``zoo.build`` keeps
working; where the two cannot be combined, e.g. ``UnicodeDecodeError``'s five-argument constructor,
a plain ``ZooInternalError``).  It is a bug report, never a refusal: the fuzzers
(``tests/guard/test_api_boundary.py``, ``tests/guard/test_trust_fuzz_entry_points.py``) and the
hostile table count it as "other exception", and the UI shows it as an internal error.  Bad input
is still refused where it is parsed -- :mod:`zoo.run.input_contract` and :mod:`zoo.run.arguments`
(models, ids, texts, tensors), :mod:`zoo.model.spec` (specs), :mod:`zoo.run.options` (generation
options), :mod:`zoo.guard.files` / :mod:`zoo.guard.transaction` (paths) -- with a plain ``ZooError``.
A ``ZooError`` that must stay catchable as a builtin is both (:class:`ParamError` is a
``ValueError``).
"""
from __future__ import annotations

import difflib
from typing import Any, Iterable

from . import messages
from .messages import MAX_PART, cap as _cap  # noqa: F401 - MAX_PART: the cap of each part


class ZooError(Exception):
    """Base class of every error zoo raises on purpose.

    ``where``: the spec field, file or plugin concerned; ``options``: the valid choices (if a finite
    set); ``fix``: one sentence telling the user what to do.  Each part is capped at
    :data:`MAX_PART` characters.

    Raised with :meth:`of`, an error carries the id of its message in the catalogue
    (:mod:`zoo.messages`) and its parameters, ``message_id`` and ``params``, and ``fix_ids`` (the
    ids whose fix sentences make its fix), so a front end words it in its own language; raised
    with a plain English text, ``message_id`` is None and a front end shows the English.  A front
    end with a catalogue of its own passes its text and its ids itself (``message_id=``,
    ``params=``, ``fix_ids=``: the UI's ``ui_error``).
    """

    #: the catalogue id of the message (:mod:`zoo.messages`), None for a plain English message
    message_id: str | None = None
    #: the values the message's templates are formatted with
    params: dict[str, Any]
    #: the ids whose fix templates make the fix, in order
    fix_ids: tuple[str, ...] = ()

    def __init__(self, message: str, *, where: str | None = None, options: Iterable[str] | None = None,
                 fix: str | None = None, message_id: str | None = None,
                 params: dict[str, Any] | None = None, fix_ids: Iterable[str] = ()):
        self.message_id, self.params, self.fix_ids = message_id, dict(params or {}), tuple(fix_ids)
        where, message, fix = _cap(where), _cap(message), _cap(fix)
        self.where = where
        self.what = message
        self.options = sorted(options) if options is not None else None
        self.fix = fix
        parts = [f"{where}: {message}" if where else message]
        if self.options is not None:
            shown = ", ".join(self.options) if self.options else "(none registered)"
            parts.append(f"valid options: {shown}")
        if fix:
            parts.append(f"fix: {fix}")
        text = ". ".join(p.rstrip(".") for p in parts)
        super().__init__(text if text.endswith(("?", "!")) else text + ".")

    @classmethod
    def of(cls, message_id: str, *, where: str | None = None, options: Iterable[str] | None = None,
           fix: "str | Iterable[str | None] | None" = None, **params: Any) -> "ZooError":
        """The error of catalogue entry ``message_id`` (:data:`zoo.messages.MESSAGES`), its English
        ``what`` and ``fix`` formatted with ``params``; ``raise SpecError.of("spec.unknown_field",
        where=key, field=key)``.  ``fix``: the id (or ids, joined by "; ") whose fix templates make the
        fix instead of the entry's own (``fix=()``: none), e.g. ``fix="hint.did_you_mean"`` with a
        ``suggestion=`` param.  An unknown id or a missing param is a ``KeyError`` (a bug)."""
        fixes = messages.fix_ids(message_id, fix)
        what, fix_text = messages.render(message_id, params, fixes)
        return cls(what, where=where, options=options, fix=fix_text, message_id=message_id, params=params,
                   fix_ids=fixes)


class SpecError(ZooError):
    """A model spec (YAML or dict) is malformed or has an invalid value."""


class UnknownComponentError(SpecError):
    """A component name is not registered in its family."""


class IncompatibleComponentsError(SpecError):
    """Components that are each valid cannot work together (e.g. sdpa cannot return weights)."""


class CheckpointError(ZooError):
    """A checkpoint file is missing, corrupt, or does not match the model."""


class PluginError(ZooError):
    """A plugin failed to load or registered something invalid."""


class ParamError(SpecError, ValueError):
    """A component's parameter is out of range: what a config dataclass's ``__post_init__`` raises,
    ``raise ParamError.of("param.at_least", name="window", minimum=1, value=self.window)`` -- a
    ``ValueError`` too, so code that builds configs by hand catches it as before."""


class TokenizerError(ZooError):
    """Text cannot be encoded or decoded by the chosen tokenizer."""


class DataError(ZooError):
    """Training or evaluation data is unusable."""


class TrainError(ZooError):
    """A training run cannot go on (e.g. its loss or weights became non-finite); the last good
    checkpoint is kept."""


def closest(name: str, options: Iterable[str]) -> str | None:
    """The registered name most similar to ``name`` (for "did you mean" hints), or None."""
    found = difflib.get_close_matches(str(name), list(options), n=1, cutoff=0.5)
    return found[0] if found else None


def did_you_mean(name: str, options: Iterable[str]) -> str | None:
    best = closest(name, options)
    return f"did you mean '{best}'?" if best else None


class ZooInternalError(ZooError):
    """A non-``ZooError`` escaped a public entry point: a bug in zoo or a plugin, not the user's
    mistake (see the module doc).  ``__cause__`` is the original exception; an instance is also an
    instance of the original's type wherever the two classes combine."""

    def __str__(self) -> str:  # the message as written (KeyError's own __str__ would quote it)
        return BaseException.__str__(self)


_INTERNAL: dict[type, type] = {}


def internal_error(exc: BaseException, *, where: str, fix: str | None = None) -> ZooInternalError:
    """``exc`` (not a ZooError) as the :class:`ZooInternalError` of the entry point ``where``, with
    ``exc`` as its ``__cause__``, of a class that is both (cached per type)."""
    said = " ".join(str(exc).split())
    said = said if len(said) <= 300 else said[:297] + "..."
    text = f"unexpected {type(exc).__name__}: {said} -- this is a bug in zoo or a plugin"
    fix = fix or "see the traceback of its __cause__ (zoo --debug ... on the command line) and report it"
    kind = type(exc)
    cls = _INTERNAL.get(kind)
    if cls is None:
        try:
            cls = type(f"ZooInternal{kind.__name__}", (ZooInternalError, kind), {"__module__": __name__})
        except TypeError:  # a layout that cannot be combined
            cls = ZooInternalError
        _INTERNAL[kind] = cls
    try:
        err = cls(text, where=where, fix=fix)
    except Exception:  # noqa: BLE001 - a base constructor that wants other arguments
        _INTERNAL[kind] = cls = ZooInternalError
        err = cls(text, where=where, fix=fix)
    err.__cause__ = exc
    return err


def boundary(fn=None, *, where: str | None = None):
    """Decorate a public entry point: a ``ZooError`` passes unchanged, any other ``Exception`` is
    raised as :func:`internal_error` at ``where`` (default the function's name).  ``KeyboardInterrupt``
    and ``SystemExit`` pass.  Costs one ``try`` per call."""
    if fn is None:
        return lambda f: boundary(f, where=where)
    import functools

    name = where or getattr(fn, "__qualname__", getattr(fn, "__name__", "zoo"))

    @functools.wraps(fn)
    def bounded(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ZooError:
            raise
        except Exception as exc:  # noqa: BLE001 - the boundary: reported as a bug, the cause kept
            raise internal_error(exc, where=name) from exc

    bounded.__zoo_boundary__ = True
    return bounded

"""The arguments every engine entry point shares, checked once: the model and its token ids.

``zoo.run.generate``, ``zoo.stream``, ``zoo.trace``, ``zoo.fill_mask`` and ``zoo.classify`` all take a
model and ids.  Before this module each reached for ``model.spec`` or ``torch.as_tensor(ids)`` on
its own, so ``generate(-1, [])`` was an ``AttributeError`` (``'int' object has no attribute
'spec'``) and ``trace(model, [[1], [2, 3]])`` a ``ValueError`` from torch.  Here:

- :func:`zoo_model` -- the model is a ``torch.nn.Module`` carrying a :class:`~zoo.model.spec.ModelSpec`
  (what ``zoo.build`` / ``zoo.load`` return), else a :class:`ZooError` naming the argument;
- :func:`token_ids` -- ids as a ``(B, T)`` long tensor on the model's device: a tensor of
  integers, a list of ints or a rectangular list of lists, non-empty, every id in
  ``[0, vocab_size)``;
- :func:`prompt_batch` -- the same rules for generation's prompts, where a list of lists of
  different lengths is a batch to left-pad (:func:`left_pad`) and a tensor may come with a
  left-padded ``attention_mask``.

One reading of ids serves both (:func:`_id_rows`, :func:`_id_tensor`, :func:`_id_batch`), so a
``1.5`` or a ``True`` is refused alike by ``trace`` and ``generate``.  They run before any work and
cost microseconds (type checks and one min/max over the ids).
"""
from __future__ import annotations

import collections.abc
import functools
import inspect
import types
import typing
from typing import Any, Sequence

import torch

from ..errors import ZooError, internal_error
from ..model.spec import ModelSpec
from ..guard.files import short

_MODEL_FIX = "build or load one: model = zoo.build('gpt_tiny') or zoo.load(PATH)"


def zoo_model(model: Any, where: str) -> ModelSpec:
    """Return ``model.spec`` when ``model`` is a zoo model; else a :class:`ZooError` at ``where``."""
    spec = getattr(model, "spec", None) if isinstance(model, torch.nn.Module) else None
    if not isinstance(spec, ModelSpec):
        what = (f"a {type(model).__name__} without a zoo spec" if isinstance(model, torch.nn.Module)
                else f"{short(model)} ({type(model).__name__})")
        raise ZooError(f"expected a zoo model (built by zoo.build or zoo.load), got {what}",
                       where=where, fix=_MODEL_FIX)
    return spec


def ids_as_passed(model: Any, ids: Any, where: str) -> Any:
    """``ids`` checked by :func:`token_ids`, passed on unchanged when they already are a long / int32
    tensor (their shape is the caller's), else as the checked ``(B, T)`` long tensor (lists, uint8 or
    int16 tensors) -- what :func:`entry` and the hooked forwards hand on."""
    t = token_ids(model, ids, where)
    return ids if isinstance(ids, torch.Tensor) and ids.dtype in (torch.long, torch.int32) else t


def token_ids(model: Any, ids: Any, where: str) -> torch.Tensor:
    """``ids`` as a ``(B, T)`` long tensor on ``model``'s device, checked (see the module doc)."""
    spec = zoo_model(model, "model")
    fix = _fix(spec, "a list of equal-length lists")
    if isinstance(ids, torch.Tensor):
        t = _id_tensor(ids, where, fix)
    elif isinstance(ids, (list, tuple)):
        rows = _id_rows(ids, spec, where, fix)
        if len({len(r) for r in rows}) > 1:
            raise ZooError(f"rows of different lengths: {[len(r) for r in rows][:8]}", where=where,
                           fix="pad the rows to one length (or pass one row at a time)")
        t = torch.tensor(rows, dtype=torch.long)
    else:
        raise ZooError(f"cannot read ids from {short(ids)} ({type(ids).__name__})", where=where,
                       fix=fix)
    return _id_batch(t, spec, where, fix).to(device=next(model.parameters()).device)


def prompt_batch(model: Any, ids: Any, attention_mask: Any, pad_id: int, where: str = "generate"
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Generation's prompts -> ``(ids (B, T) long, mask (B, T) bool or None)`` on ``model``'s device.

    ``ids``: a ``(B, T)`` or ``(T,)`` integer tensor (with an optional ``attention_mask``, left
    padding False), a list of ids, or a list of lists, left-padded here with ``pad_id``.  The ids
    are read as :func:`token_ids` reads them; the mask must be left padding (every row's last
    column real) with no empty row.  ``mask`` is None when every position is real.  Errors name
    ``<where>.ids`` / ``<where>.attention_mask``."""
    spec = zoo_model(model, f"{where}.model")
    w_ids, w_mask = f"{where}.ids", f"{where}.attention_mask"
    fix = _fix(spec, "a list of lists (left-padded here)")
    device = next(model.parameters()).device
    if attention_mask is not None and not isinstance(ids, torch.Tensor):
        raise ZooError("attention_mask is only used with a tensor of ids (lists are left-padded here, "
                       "with their own mask)", where=w_mask,
                       fix="drop attention_mask, or pass ids as a (B, T) tensor")
    mask = None
    if isinstance(ids, torch.Tensor):
        t = _id_tensor(ids, w_ids, fix)
        if attention_mask is not None:
            mask = _as_tensor(attention_mask, w_mask).to(device).bool()
            mask = mask[None] if mask.dim() == 1 else mask
    elif isinstance(ids, (list, tuple)) and ids and all(isinstance(r, (list, tuple)) for r in ids):
        t, mask = left_pad(_id_rows(ids, spec, w_ids, fix), pad_id)
    elif isinstance(ids, (list, tuple)):
        t = torch.tensor(_id_rows(ids, spec, w_ids, fix), dtype=torch.long)
    else:
        raise ZooError(f"cannot generate from {type(ids).__name__}", where=w_ids,
                       fix="pass a (B, T) tensor of ids, a list of ids, a list of lists, or text")
    t = _id_batch(t, spec, w_ids, fix).to(device)
    if mask is None:
        return t, None
    mask = mask.to(device)
    if mask.shape != t.shape:
        raise ZooError(f"attention_mask shape {tuple(mask.shape)} != ids shape {tuple(t.shape)}",
                       where=w_mask)
    if bool(mask.all()):
        return t, None
    if bool(mask[:, -1].logical_not().any()):
        raise ZooError("prompts must be left-padded (the last column is padding in some row)",
                       where=w_mask, fix="pad on the left, e.g. with zoo.run.arguments.left_pad(rows, pad_id)")
    if bool((~mask.any(dim=1)).any()):
        raise ZooError("a prompt in the batch is empty", where=w_ids, fix="give every row at least one token")
    return t, mask


def left_pad(rows: Sequence[Sequence[int]], pad_id: int, device=None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Ragged id lists -> ``ids (B, T)`` left-padded with ``pad_id`` and ``attention_mask (B, T)``."""
    T = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(len(rows), T, dtype=torch.bool, device=device)
    for i, r in enumerate(rows):
        if len(r):
            ids[i, T - len(r):] = torch.as_tensor(list(r), dtype=torch.long, device=device)
            mask[i, T - len(r):] = True
    return ids, mask


# ---------------------------------------------------------------------- the one reading of ids
def _fix(spec: ModelSpec, lists: str) -> str:
    return f"pass token ids as ints in [0, {spec.vocab_size}): a list, {lists}, or a (B, T) integer tensor"


def _range_fix(spec: ModelSpec) -> str:
    return f"encode with a tokenizer that fits the model's vocab_size ({spec.vocab_size})"


def _id_tensor(ids: torch.Tensor, where: str, fix: str) -> torch.Tensor:
    """A tensor of ids: integers (not floats, complex numbers or booleans)."""
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ZooError(f"ids must be integers, got a {ids.dtype} tensor", where=where, fix=fix)
    return ids


def _id_rows(ids: Sequence, spec: ModelSpec, where: str, fix: str) -> list:
    """A list of ids, or of lists of ids, as rows of Python ints inside the vocabulary (checked
    before torch sees them, so a ``2**70`` is a range error, not an overflow)."""
    rows = ids if ids and all(isinstance(r, (list, tuple)) for r in ids) else [ids]
    flat = [v for r in rows for v in r]
    if any(isinstance(v, bool) or not isinstance(v, int) for v in flat):
        raise ZooError(f"ids must be integers, got {short(ids)}", where=where, fix=fix)
    if any(v < 0 or v >= spec.vocab_size for v in flat):
        raise ZooError(f"ids must lie in [0, {spec.vocab_size}), got {short(ids)}", where=where,
                       fix=_range_fix(spec))
    return [list(r) for r in rows]


def _id_batch(t: torch.Tensor, spec: ModelSpec, where: str, fix: str) -> torch.Tensor:
    """``(T,)`` or ``(B, T)`` ids -> a non-empty ``(B, T)`` long tensor, every id in the vocabulary."""
    if t.dim() == 1:
        t = t[None]  # (T,) -> (1, T)
    if t.dim() != 2 or t.numel() == 0:
        raise ZooError(f"need a non-empty (B, T) batch of ids, got shape {tuple(t.shape)}",
                       where=where, fix=fix)
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= spec.vocab_size:
        raise ZooError(f"ids must lie in [0, {spec.vocab_size}), got [{lo}, {hi}]", where=where,
                       fix=_range_fix(spec))
    return t.to(dtype=torch.long)


def _as_tensor(values: Any, where: str) -> torch.Tensor:
    """A mask given as a list, as a tensor: a ZooError (not a TypeError) for anything else."""
    if isinstance(values, torch.Tensor):
        return values
    try:
        return torch.as_tensor(values)
    except (TypeError, ValueError, RuntimeError, OverflowError) as exc:
        raise ZooError(f"{where.rpartition('.')[2]} must be a tensor or (nested) list of 0 / 1 flags, "
                       f"got {short(values)}", where=where, fix="pass a (B, T) mask, 1 = a real token") from exc


# ---------------------------------------------------------------------- one check for every entry point
#: argument names that hold token ids (checked by :func:`token_ids` against the call's ``model``)
ID_ARGUMENTS = ("ids", "clean", "corrupted")
#: integer arguments that must be at least 1, and those that must be at least 0
POSITIVE = frozenset({"length", "batch", "vocab_size", "top_k", "max_new_tokens"})
NON_NEGATIVE = frozenset({"seed", "low", "layer", "src_layer", "src_head"})
_INT_LIMIT = 2 ** 31


def entry(fn=None, *, where: str | None = None):
    """Check a public entry point's arguments before it runs: the one boundary of the inside view
    (``zoo.inside.hooks / lens / patching``) and of any function that takes a model and ids.

    From the signature, nothing written per function: a parameter named ``model`` must be a zoo
    model (:func:`zoo_model`); ``ids`` / ``clean`` / ``corrupted`` are read by :func:`token_ids`
    (lists become the ``(B, T)`` tensor, tensors are checked and passed as given); parameters
    annotated ``int`` / ``float`` / ``bool`` / ``str`` / ``torch.nn.Module`` / ``Callable`` (or
    ``X | None``) must be one; the integer counts in :data:`POSITIVE` are >= 1, those in
    :data:`NON_NEGATIVE` >= 0, all below 2**31.  A wrong call (a missing or unknown argument) is a
    :class:`ZooError` too, showing the signature.  It runs in microseconds before any work.  It is
    also the API's error boundary: any other exception escaping the call is a
    :class:`~zoo.errors.ZooInternalError` (a bug, the original as its cause)."""
    if fn is None:
        return lambda f: entry(f, where=where)
    name = where or fn.__name__
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # noqa: BLE001 - an annotation that cannot be resolved is not checked
        hints = {}

    @functools.wraps(fn)
    def checked(*args, **kwargs):
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:
            raise ZooError(f"{exc}", where=name, fix=f"call it as {name}{sig}") from None
        a = bound.arguments
        if "model" in sig.parameters and "model" in a:
            zoo_model(a["model"], f"{name}.model")
            for p in ID_ARGUMENTS:
                if p in a and a[p] is not None:
                    a[p] = ids_as_passed(a["model"], a[p], f"{name}.{p}")
        for p, value in a.items():
            kind = sig.parameters[p].kind
            if kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                continue
            _check_annotated(value, hints.get(p), p, f"{name}.{p}")
        try:
            return fn(*bound.args, **bound.kwargs)
        except ZooError:
            raise
        except Exception as exc:  # noqa: BLE001 - the API's error boundary (zoo.errors.boundary)
            raise internal_error(exc, where=name) from exc

    checked.__wrapped_entry__ = fn
    return checked


def _check_annotated(value: Any, hint: Any, pname: str, where: str) -> None:
    """``value`` against a simple annotation (see :func:`entry`); other annotations are not checked."""
    if hint is None:
        return
    options = list(typing.get_args(hint)) if typing.get_origin(hint) in (typing.Union, types.UnionType) \
        else [hint]
    if value is None and type(None) in options:
        return
    options = [o for o in options if o is not type(None)]
    if any(o is collections.abc.Callable or typing.get_origin(o) is collections.abc.Callable for o in options):
        if len(options) == 1 and not callable(value):
            raise ZooError(f"expected a function, got {short(value)} ({type(value).__name__})", where=where,
                           fix=f"pass a callable as {pname}")
        return
    if not options or any(o not in (int, float, bool, str, torch.nn.Module) for o in options):
        return  # a type this check does not know: left to the function
    ok = any((o is int and isinstance(value, int) and not isinstance(value, bool))
             or (o is float and isinstance(value, (int, float)) and not isinstance(value, bool)
                 and value == value and abs(value) != float("inf"))
             or (o is bool and isinstance(value, bool))
             or (o is str and isinstance(value, str))
             or (o is torch.nn.Module and isinstance(value, torch.nn.Module)) for o in options)
    if not ok:
        want = " or ".join(o.__name__ for o in options)
        raise ZooError(f"expected {want}, got {short(value)} ({type(value).__name__})", where=where,
                       fix=f"pass {pname} as {want}" + (" (a finite number)" if float in options else ""))
    if isinstance(value, int) and not isinstance(value, bool):
        low = 1 if pname in POSITIVE else 0 if pname in NON_NEGATIVE else None
        if (low is not None and value < low) or abs(value) >= _INT_LIMIT:
            raise ZooError(f"{pname} = {value} is out of range", where=where,
                           fix=f"give {pname} >= {low if low is not None else -_INT_LIMIT + 1} and < 2**31")

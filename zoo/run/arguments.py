"""The arguments every engine entry point shares, checked once: the model and its token ids.

``zoo.run.generate``, ``zoo.stream``, ``zoo.trace``, ``zoo.fill_mask`` and ``zoo.classify`` all take a
model and ids.  Before this module each reached for ``model.spec`` or ``torch.as_tensor(ids)`` on
its own, so ``generate(-1, [])`` was an ``AttributeError`` (``'int' object has no attribute
'spec'``) and ``trace(model, [[1], [2, 3]])`` a ``ValueError`` from torch.  Here:

- :func:`zoo_model` -- the model is a ``torch.nn.Module`` carrying a :class:`~zoo.model.spec.ModelSpec`
  (what ``zoo.build`` / ``zoo.load`` return), else a :class:`ZooError` naming the argument;
- :func:`token_ids` -- ids as a ``(B, T)`` long tensor on the model's device: a tensor of
  integers, a list of ints or a rectangular list of lists, non-empty, every id in
  ``[0, vocab_size)``.

Both run before any work and cost microseconds (type checks and one min/max over the ids).
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import ZooError
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


def token_ids(model: Any, ids: Any, where: str) -> torch.Tensor:
    """``ids`` as a ``(B, T)`` long tensor on ``model``'s device, checked (see the module doc)."""
    spec = zoo_model(model, "model")
    fix = f"pass token ids as ints in [0, {spec.vocab_size}): a list, a list of equal-length lists, " \
          f"or a (B, T) integer tensor"
    if isinstance(ids, torch.Tensor):
        if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
            raise ZooError(f"ids must be integers, got a {ids.dtype} tensor", where=where, fix=fix)
        t = ids
    elif isinstance(ids, (list, tuple)):
        rows = ids if ids and all(isinstance(r, (list, tuple)) for r in ids) else [ids]
        flat = [v for r in rows for v in r]
        if any(isinstance(v, bool) or not isinstance(v, int) for v in flat):
            raise ZooError(f"ids must be integers, got {short(ids)}", where=where, fix=fix)
        if len({len(r) for r in rows}) > 1:
            raise ZooError(f"rows of different lengths: {[len(r) for r in rows][:8]}", where=where,
                           fix="pad the rows to one length (or pass one row at a time)")
        if any(v < 0 or v >= spec.vocab_size for v in flat):  # before torch sees a 2**70
            raise ZooError(f"ids must lie in [0, {spec.vocab_size}), got {short(ids)}", where=where,
                           fix=fix)
        t = torch.tensor(rows, dtype=torch.long)
    else:
        raise ZooError(f"cannot read ids from {short(ids)} ({type(ids).__name__})", where=where,
                       fix=fix)
    if t.dim() == 1:
        t = t[None]  # (T,) -> (1, T)
    if t.dim() != 2 or t.numel() == 0:
        raise ZooError(f"need a non-empty (B, T) batch of ids, got shape {tuple(t.shape)}",
                       where=where, fix=fix)
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= spec.vocab_size:
        raise ZooError(f"ids must lie in [0, {spec.vocab_size}), got [{lo}, {hi}]", where=where,
                       fix=fix)
    dev = next(model.parameters()).device
    return t.to(device=dev, dtype=torch.long)

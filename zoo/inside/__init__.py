"""Looking inside: hook points, traces, patching, lenses, costs, plots, speed.

``hooks`` (TransformerLens-style hook points, caches), ``trace`` (:func:`zoo.trace`: the lectures'
view of one forward), ``patching`` and ``lens`` (interpretability on top of the hooks), ``costs``
(parameters, FLOPs, memory), ``summary`` (parameter tables), ``plots`` (matplotlib figures) and
``speed`` (``zoo bench``: timings against the hardware's limit).

May import: every wing below it (front door, registry, guard, model, io, run).
"""
from __future__ import annotations

import importlib

#: The modules of this wing, reachable as ``zoo.inside.NAME`` after ``import zoo`` (imported on
#: first use, so ``import zoo`` stays light).
MODULES = ('hooks', 'trace', 'patching', 'lens', 'costs', 'summary', 'plots', 'speed')


def __getattr__(name: str):
    if name in MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(MODULES))

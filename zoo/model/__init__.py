"""The model: a spec, the layers, the three architectures, and building them.

``spec`` (the YAML spec as frozen dataclasses), ``layers`` (attention, blocks, the stack, the KV
cache), ``kernels`` (the shared pieces of attention kernels, for ``plugins/attention_*``),
``models`` (encoder, decoder, encoder-decoder), ``assembly`` (spec + registry -> modules),
``build`` (:func:`zoo.build`: budget, device, dtype, initialisation) and ``doors`` (the one table
through which a model's ``generate`` / ``chat`` / ``run_with_cache`` methods reach the wings that use
the model).

May import: the front door, ``zoo.registry`` and ``zoo.guard``.  Never ``zoo.io``, ``zoo.run`` or
``zoo.inside``: those use the model (a model method reaches them through ``doors``).
"""
from __future__ import annotations

import importlib

#: The modules of this wing, reachable as ``zoo.model.NAME`` after ``import zoo`` (imported on
#: first use, so ``import zoo`` stays light).
MODULES = ('spec', 'layers', 'kernels', 'models', 'assembly', 'build', 'doors')


def __getattr__(name: str):
    if name in MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(MODULES))

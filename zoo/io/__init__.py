"""Reading and writing: checkpoint files, loading them back, tokenizers, stored chat templates.

``checkpoint`` (:func:`zoo.save`, the safetensors metadata, strict reading), ``loading``
(:func:`zoo.load`: rebuild the exact model, verify it), ``tokenizers`` (:func:`zoo.tokenizer` and
the tokenizer contract), ``chat_templates`` (a model's template as stored data; rendering it is
``zoo.run.chat``) and ``generation_config`` (a converted model's generation settings as stored
data; applying them is ``zoo.run.options``).

May import: the front door, ``zoo.registry``, ``zoo.guard`` and ``zoo.model``.
"""
from __future__ import annotations

import importlib

from ..deprecation import warn

#: The modules of this wing, reachable as ``zoo.io.NAME`` after ``import zoo`` (imported on
#: first use, so ``import zoo`` stays light).
MODULES = ('checkpoint', 'loading', 'tokenizers', 'chat_templates', 'generation_config')


def __getattr__(name: str):
    if name in MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    checkpoint = importlib.import_module(f"{__name__}.checkpoint")
    if not name.startswith("_") and hasattr(checkpoint, name):  # 0.x's zoo.io module is .checkpoint now
        warn(f"{__name__}.{name}", f"{__name__}.checkpoint.{name}")
        return getattr(checkpoint, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(MODULES))

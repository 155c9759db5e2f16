"""The model's declared door to the code that uses it.

A model offers ``model.generate(...)``, ``model.chat(...)`` and the TransformerLens-style
``model.run_with_cache(...)``, but generating, chatting and looking inside are *users* of the model:
they live in the wings above it (``zoo.run``, ``zoo.inside``) and import the model, never the other
way round (``tests/core/test_architecture.py`` checks it).  So the model's methods reach them through
this one table of names, resolved when first called -- the way the registry loads the built-in
plugins by name.  A new model method that needs an upper wing adds one row here, and the
architecture test keeps every other import pointing down.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from ..errors import boundary

#: What a model's methods call, by name: ``"module:function"``.
DOORS: dict[str, str] = {
    "generate": "zoo.run.generate:generate",
    "chat": "zoo.run.chat:chat",
    "hooks.generate": "zoo.inside.hooks:generate",
    "hooks.run_with_hooks": "zoo.inside.hooks:run_with_hooks",
    "hooks.run_with_cache": "zoo.inside.hooks:run_with_cache",
    "hooks.hooks": "zoo.inside.hooks:hooks",
    "hooks.hook_names": "zoo.inside.hooks:hook_names",
}


def door(name: str) -> Callable[..., Any]:
    """The function behind ``name`` in :data:`DOORS`, imported on first use.  Looked up at every
    call (a dictionary read once the module is imported), so patching ``zoo.run.generate.generate``
    patches ``model.generate`` too.  Behind the API's error boundary (:func:`zoo.errors.boundary`)."""
    module, _, attr = DOORS[name].partition(":")
    fn = getattr(importlib.import_module(module), attr)
    bounded = _BOUNDED.get(name)
    if bounded is None or bounded[0] is not fn:
        bounded = _BOUNDED[name] = (fn, boundary(fn, where=f"model.{attr}"))
    return bounded[1]


#: name -> (function, the function behind the API's error boundary): made once per function
_BOUNDED: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}

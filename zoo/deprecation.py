"""Names that moved: the old spelling keeps working for one release, with a ``DeprecationWarning``.

Everything that moved is in the two tables below, and nowhere else:

- :data:`MODULES` -- whole modules, old dotted path -> new one (the flat ``zoo/*.py`` of 0.x became
  the wings ``zoo.guard``, ``zoo.model``, ``zoo.io``, ``zoo.run``, ``zoo.inside``).  ``import
  zoo.trust`` and ``zoo.precision`` (after a bare ``import zoo``) still work: a finder on
  ``sys.meta_path`` hands back the new module itself, so old and new spellings are one object;
- ``zoo.io`` was the checkpoint-file module and is now the io wing: the wing's own ``__getattr__``
  hands on 0.x's names from its ``checkpoint`` module, with the same warning;
- :data:`NAMES` -- single names that moved out of a module that stayed: a module lists itself here
  and ends with ``__getattr__ = moved(__name__)`` (PEP 562).

The new module is imported only when an old name is used, so an alias never turns into an import
that runs up the house (``tests/core/test_architecture.py`` checks the import graph).  The README and
docs show only the new names; ``docs/ARCHITECTURE.md`` has the old -> new table for readers.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from typing import Any, Callable

#: Old module path -> new module path (0.x's flat modules -> the wings).
MODULES: dict[str, str] = {
    "zoo.trust": "zoo.guard.files",
    "zoo.tokenizer_rules": "zoo.guard.tokenizer_files",
    "zoo.output_contract": "zoo.guard.outputs",
    "zoo.compat": "zoo.guard.compat",
    "zoo.health": "zoo.guard.health",
    "zoo.workload": "zoo.guard.run_budget",
    "zoo.budget": "zoo.guard.build_budget",
    "zoo.spec": "zoo.model.spec",
    "zoo.layers": "zoo.model.layers",
    "zoo.models": "zoo.model.models",
    "zoo.assembly": "zoo.model.assembly",
    "zoo.build": "zoo.model.build",
    "zoo.loading": "zoo.io.loading",
    "zoo.tokenizers": "zoo.io.tokenizers",
    "zoo.generate": "zoo.run.generate",
    "zoo.beam": "zoo.run.beam",
    "zoo.chat": "zoo.run.chat",
    "zoo.compiled": "zoo.run.compiled",
    "zoo.precision": "zoo.run.precision",
    "zoo.arguments": "zoo.run.arguments",
    "zoo.contract": "zoo.run.input_contract",
    "zoo.tasks": "zoo.run.pipelines",
    "zoo.hooks": "zoo.inside.hooks",
    "zoo.inspection": "zoo.inside.trace",
    "zoo.patching": "zoo.inside.patching",
    "zoo.lens": "zoo.inside.lens",
    "zoo.accounting": "zoo.inside.costs",
    "zoo.plots": "zoo.inside.plots",
    "zoo.summary": "zoo.inside.summary",
    "zoo.bench": "zoo.inside.speed",
    "zoo.data": "zoo.train.data",
}

#: Module -> {old name: "new.module" or "new.module:new_name"} for names that left a module.
NAMES: dict[str, dict[str, str]] = {
    "zoo.model.build": {"checkpoint_or_spec": "zoo.io.loading", "load_or_build": "zoo.io.loading",
                        "spec": "zoo.model.spec:parse_spec", },
    "zoo.guard.build_budget": {"estimate": "zoo.model.build", "layout": "zoo.model.build"},
    "zoo.convert": {"Family": "zoo.convert.core:Converter", "FAMILIES": "zoo.convert.core:CONVERTERS"},
    "zoo.convert.core": {"Family": "zoo.convert.core:Converter", "FAMILIES": "zoo.convert.core:CONVERTERS"},
    "zoo.registry": {"STACK_COMPONENTS": "zoo.guard.compat", "FAMILIES": "zoo.registry:FAMILY_NAMES"},
    "zoo.io.checkpoint": {"load": "zoo.io.loading", "check": "zoo.io.loading", "match_tensors": "zoo.io.loading"},
    "zoo.guard.files": {"blame": "zoo.registry", "probe_attention": "zoo.model.assembly"},
    "zoo.run.generate": {"Option": "zoo.run.options", "MIN_TEMPERATURE": "zoo.run.options",
                         "MIN_TOP_P": "zoo.run.options", "MAX_BEAMS": "zoo.run.options",
                         "MAX_REPETITION_PENALTY": "zoo.run.options", "pick_next": "zoo.run.sampling",
                         "warp": "zoo.run.sampling", "penalize_repeats": "zoo.run.sampling",
                         "left_pad": "zoo.run.arguments",
                         "cli_options": "zoo.commands:generation_options"},
    "zoo.run.beam": {"banned_ngram_tokens": "zoo.run.sampling"},
}


def warn(old: str, new: str, stacklevel: int = 3) -> None:
    """The one ``DeprecationWarning`` of a moved name: ``old is deprecated: use new``."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=stacklevel)


def moved(module: str) -> Callable[[str], Any]:
    """The module-level ``__getattr__`` of ``module``: each old name of ``NAMES[module]`` forwarded
    to where it lives now, with a ``DeprecationWarning``."""
    names = NAMES[module]

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        target, _, new_name = names[name].partition(":")
        new_name = new_name or name
        warn(f"{module}.{name}", f"{target}.{new_name}")
        return getattr(importlib.import_module(target), new_name)
    return __getattr__


def old_module(name: str) -> Any:
    """The module an old dotted path names now (``zoo.precision`` -> ``zoo.run.precision``)."""
    warn(name, MODULES[name], stacklevel=4)
    return importlib.import_module(MODULES[name])


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import zoo.trust`` -> the module ``zoo.guard.files`` itself (one object, two names)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MODULES:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return None  # a throw-away module; exec_module puts the real one in its place

    def exec_module(self, module) -> None:
        sys.modules[module.__name__] = old_module(module.__name__)


def install() -> None:
    """Put the old-path finder on ``sys.meta_path`` (once; ``import zoo`` calls it)."""
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.append(_OldPaths())


def moved_method(cls_name: str, name: str, target: str) -> Callable[..., Any]:
    """A deprecated method of ``cls_name`` that became the function ``target``
    (``"module:function"``) taking the object as its ``registry=`` keyword; resolved when called."""
    module, _, func = target.partition(":")

    def method(self, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(f"{cls_name}.{name} is deprecated: use {module}.{func}(..., registry=...)",
                      DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(module), func)(*args, registry=self, **kwargs)

    method.__name__ = name
    method.__doc__ = f"Deprecated: :func:`{module}.{func}` with ``registry=self``."
    return method

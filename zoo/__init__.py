"""zoo: a plugin-based Transformer model zoo.

    import zoo
    model = zoo.build("gpt_tiny")          # a preset from checkpoints/, a YAML path, or a dict
    logits = model(ids)                    # (B, T, vocab)
    zoo.save(model, "runs/gpt")            # safetensors, self-describing
    same = zoo.load("runs/gpt")

Public API (this face): :func:`build`, :func:`spec`, :func:`save`, :func:`load`, :func:`load_spec`,
:func:`list_components`, :func:`list_plugins`, :func:`list_presets`, :func:`list_checkpoints`,
:data:`hookimpl`, the :class:`ZooError` family, :func:`tokenizer`, :func:`trace`,
:func:`fill_mask`, :func:`classify`; ``model.generate`` / ``model.chat`` / ``model.run_with_cache``
on every built model.

The wings, each a sub-package whose ``__init__`` says what it holds and may import (see
``docs/ARCHITECTURE.md``): :mod:`zoo.model` (spec, layers, models, building), :mod:`zoo.io`
(checkpoints, loading, tokenizers), :mod:`zoo.run` (generation, chat, precision),
:mod:`zoo.inside` (hooks, traces, patching, costs, plots, speed), :mod:`zoo.guard` (the trust
rules and budgets), and the tools :mod:`zoo.convert`, :mod:`zoo.train`, :mod:`zoo.experiment`,
:mod:`zoo.testing` -- each reachable after a bare ``import zoo`` (``zoo.run.precision``), imported
on first use.  Components are plugins (see ``zoo.hookspecs``); importing zoo registers nothing
until first use.  Old module paths (``zoo.precision``, ``zoo.hooks``) still work for one release,
with a ``DeprecationWarning`` (:mod:`zoo.deprecation`).
"""
from __future__ import annotations

from .version import __version__
from . import deprecation as _deprecation
from .model.build import build
from .model import spec  # the module, callable: zoo.spec("gpt_tiny", num_layers=2)
from .errors import (CheckpointError, DataError, IncompatibleComponentsError, PluginError, SpecError,
                     TokenizerError, UnknownComponentError, ZooError)
from .hookspecs import hookimpl
from .io.checkpoint import list_checkpoints, load_spec, read_metadata, save
from .io.loading import load, load_or_build
from .registry import get_registry, list_components, list_plugins
from .model.spec import ModelSpec, list_presets, parse_spec
from .io.tokenizers import tokenizer
from .inside.trace import Trace, trace
from .run.pipelines import classify, fill_mask
from .run.options import GenerationOptions
from .run.input_contract import InputContract, InputError, InputWarning
from . import convert  # noqa: E402 - zoo.convert.from_transformers / to_transformers (no transformers import)

__all__ = [
    "__version__", "build", "spec", "save", "load", "load_or_build", "load_spec", "read_metadata", "list_components",
    "list_plugins", "list_presets", "list_checkpoints", "get_registry", "hookimpl", "ModelSpec",
    "parse_spec", "ZooError", "SpecError", "UnknownComponentError", "IncompatibleComponentsError",
    "CheckpointError", "PluginError", "TokenizerError", "DataError",
    "tokenizer", "trace", "Trace", "fill_mask", "classify", "GenerationOptions",
    "InputContract", "InputError", "InputWarning",
]

#: The sub-packages of the public API, reachable as ``zoo.NAME`` after a bare ``import zoo``,
#: imported on first use so that ``import zoo`` stays light (``zoo.inside.plots`` needs matplotlib).
from .errors import boundary as _boundary  # noqa: E402

#: The front door's functions behind the API's error boundary (:func:`zoo.errors.boundary`): a
#: non-ZooError escaping one is a ZooInternalError (still an instance of the original type), a bug
build, save, load, load_or_build, load_spec, read_metadata, list_checkpoints, list_components, \
    list_plugins, list_presets, parse_spec, tokenizer, trace, fill_mask, classify = (
        _boundary(f, where=f"zoo.{f.__name__}") for f in (
            build, save, load, load_or_build, load_spec, read_metadata, list_checkpoints, list_components,
            list_plugins, list_presets, parse_spec, tokenizer, trace, fill_mask, classify))

SUBPACKAGES = ("model", "io", "run", "inside", "guard", "convert", "train", "experiment", "testing")
#: Front-door modules a plugin author or a test imports by name (``zoo.components``, ``zoo.errors``).
FRONT_DOOR = ("components", "errors", "hookspecs", "messages", "registry", "version")

_deprecation.install()  # ``import zoo.trust`` -> zoo.guard.files, with a DeprecationWarning


def __getattr__(name: str):
    """``zoo.run.precision.quantize_int8(model)`` without ``import zoo.run`` first (PEP 562); an old
    module path (``zoo.precision``) with a ``DeprecationWarning``."""
    import importlib

    if name in SUBPACKAGES or name in FRONT_DOOR:
        return importlib.import_module(f"{__name__}.{name}")
    if f"{__name__}.{name}" in _deprecation.MODULES:
        return _deprecation.old_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API and the documented sub-packages -- not the internal modules."""
    return sorted(set(__all__) | set(SUBPACKAGES) | set(FRONT_DOOR))

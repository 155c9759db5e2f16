"""zoo: a plugin-based Transformer model zoo.

    import zoo
    model = zoo.build("gpt_tiny")          # a preset from checkpoints/, a YAML path, or a dict
    logits = model(ids)                    # (B, T, vocab)
    zoo.save(model, "runs/gpt")            # safetensors, self-describing
    same = zoo.load("runs/gpt")

Public API: :func:`build`, :func:`spec`, :func:`save`, :func:`load`, :func:`load_spec`,
:func:`list_components`, :func:`list_plugins`, :func:`list_presets`, :func:`list_checkpoints`,
:data:`hookimpl`, and the :class:`ZooError` family; running and looking inside: ``model.generate``
(:mod:`zoo.generate`), :func:`tokenizer`, :func:`trace` (:mod:`zoo.inspection`), :func:`fill_mask`,
:func:`classify`, and the modules :mod:`zoo.accounting`, :mod:`zoo.precision` and :mod:`zoo.plots`
(matplotlib), imported on first use (``zoo.precision`` works after a bare ``import zoo``);
input contracts of trained checkpoints: :mod:`zoo.contract`;
converting Hugging Face models: :mod:`zoo.convert`.
Components are plugins (see ``zoo.hookspecs``); importing zoo registers nothing until first use.
"""
from __future__ import annotations

from .version import __version__
from .build import build
from .errors import (CheckpointError, DataError, IncompatibleComponentsError, PluginError, SpecError,
                     TokenizerError, UnknownComponentError, ZooError)
from .hookspecs import hookimpl
from .io import list_checkpoints, load_spec, read_metadata, save
from .loading import load, load_or_build
from .registry import get_registry, list_components, list_plugins
from .spec import ModelSpec, list_presets, parse_spec
from .tokenizers import tokenizer
from .inspection import Trace, trace
from .tasks import classify, fill_mask
from .generate import GenerationOptions
from .contract import InputContract, InputError, InputWarning
from . import convert  # noqa: E402 - zoo.convert.from_transformers / to_transformers (no transformers import)

__all__ = [
    "__version__", "build", "spec", "save", "load", "load_or_build", "load_spec", "read_metadata", "list_components",
    "list_plugins", "list_presets", "list_checkpoints", "get_registry", "hookimpl", "ModelSpec",
    "parse_spec", "ZooError", "SpecError", "UnknownComponentError", "IncompatibleComponentsError",
    "CheckpointError", "PluginError", "TokenizerError", "DataError",
    "tokenizer", "trace", "Trace", "fill_mask", "classify", "GenerationOptions",
    "InputContract", "InputError", "InputWarning",
]

#: Submodules reachable as ``zoo.NAME`` after a bare ``import zoo``, imported on first use so that
#: ``import zoo`` stays light (``zoo.plots`` needs matplotlib, ``zoo.train`` the trainer).
LAZY_MODULES = ("accounting", "bench", "contract", "data", "experiment", "plots", "precision",
                "testing", "train")


def __getattr__(name: str):
    """``zoo.precision.quantize_int8(model)`` without ``import zoo.precision`` first (PEP 562)."""
    if name in LAZY_MODULES:
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'zoo' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(LAZY_MODULES))

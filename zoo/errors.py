"""One error family for everything a user can get wrong.

Every message answers four questions: *where* (a spec path such as ``decoder.attention.kind``, a file,
a plugin), *what* is wrong, *which* values would be valid, and *how* to fix it.  Code never uses
``assert`` on user input; it raises one of these.
"""
from __future__ import annotations

import difflib
from typing import Iterable


#: Longest ``what`` / ``where`` / ``fix`` a message keeps (a safety net: values quoted in messages
#: go through :func:`zoo.guard.files.short` already, so no message grows with a hostile input).
MAX_PART = 600


def _cap(text: str | None) -> str | None:
    if text is None:
        return None
    text = str(text)
    return text if len(text) <= MAX_PART else text[:MAX_PART - 3] + "..."


class ZooError(Exception):
    """Base class of every error zoo raises on purpose.

    ``where``: the spec field, file or plugin concerned; ``options``: the valid choices (if a finite
    set); ``fix``: one sentence telling the user what to do.  Each part is capped at
    :data:`MAX_PART` characters.
    """

    def __init__(self, message: str, *, where: str | None = None, options: Iterable[str] | None = None,
                 fix: str | None = None):
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

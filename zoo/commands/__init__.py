"""The ``zoo`` sub-commands, one module each (see ``zoo.cli.COMMANDS``), and what they share."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence


def parse_sets(items: Iterable[str]) -> dict[str, Any]:
    """``--set FIELD=VALUE`` options -> spec overrides; each VALUE is read as YAML (``2``, ``eager``,
    ``{kind: rope}``)."""
    from ..errors import SpecError
    from ..guard.files import load_yaml

    overrides = {}
    for item in items:
        if "=" not in item:
            raise SpecError(f"expected FIELD=VALUE, got '{item}'", where="--set",
                            fix="write e.g. --set num_layers=2")
        k, v = item.split("=", 1)
        overrides[k.strip()] = load_yaml(v, where=f"--set {k.strip()}")
    return overrides


def generation_options(*, skip: Sequence[str] = (), defaults: dict | None = None,
                       helps: dict | None = None) -> Callable:
    """A decorator adding a click option for every :class:`zoo.run.options.GenerationOptions` field
    with a ``cli`` flag (``zoo run`` and ``zoo chat`` use it), its help and type from the
    declaration; ``defaults`` / ``helps`` override a field's default / help for that command."""
    import dataclasses

    import click

    from ..run.options import GenerationOptions

    defaults, helps = defaults or {}, helps or {}

    def decorate(fn):
        for f in reversed(dataclasses.fields(GenerationOptions)):
            opt = f.metadata["option"]
            if opt.cli is None or f.name in skip:
                continue
            names = [opt.cli] + ([opt.short] if opt.short else [])
            default = defaults.get(f.name, f.default)
            kw = dict(default=default, help=helps.get(f.name, opt.help), show_default=default is not None)
            if opt.kind != "bool":
                kw["type"] = int if opt.kind == "int" else float
            fn = click.option(*names, f.name, **kw)(fn)
        return fn
    return decorate

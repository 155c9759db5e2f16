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
    declaration; ``defaults`` / ``helps`` override a field's default / help for that command.

    A flag whose option a converted model's generation config can set (``Option.hf``:
    ``--no-repeat-ngram-size``, ``--length-penalty``, ...) defaults to *not given*, so the
    checkpoint's own setting applies unless the flag is on the command line."""
    import dataclasses
    import functools

    import click

    from ..run.options import GenerationOptions

    defaults, helps = defaults or {}, helps or {}
    fields = [f for f in dataclasses.fields(GenerationOptions)
              if f.metadata["option"].cli is not None and f.name not in skip]
    sourced = {f.name for f in fields if f.metadata["option"].hf is not None and f.name not in defaults}

    def decorate(fn):
        @functools.wraps(fn)
        def command(*args, **options):  # a flag not given leaves the model's setting in force
            return fn(*args, **{k: v for k, v in options.items() if not (k in sourced and v is None)})

        for f in reversed(fields):
            opt = f.metadata["option"]
            names = [opt.cli] + ([opt.short] if opt.short else [])
            default = None if f.name in sourced else defaults.get(f.name, f.default)
            help = helps.get(f.name, opt.help)
            if f.name in sourced:
                help += f"  [default: the checkpoint's generation config, else {f.default}]"
            kw = dict(default=default, help=help, show_default=default is not None)
            if opt.kind != "bool":
                kw["type"] = int if opt.kind == "int" else float
            command = click.option(*names, f.name, **kw)(command)
        return command
    return decorate

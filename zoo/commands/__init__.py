"""The ``zoo`` sub-commands, one module each (see ``zoo.cli.COMMANDS``), and what they share."""
from __future__ import annotations

from typing import Any, Iterable


def parse_sets(items: Iterable[str]) -> dict[str, Any]:
    """``--set FIELD=VALUE`` options -> spec overrides; each VALUE is read as YAML (``2``, ``eager``,
    ``{kind: rope}``)."""
    import yaml

    from ..errors import SpecError

    overrides = {}
    for item in items:
        if "=" not in item:
            raise SpecError(f"expected FIELD=VALUE, got '{item}'", where="--set",
                            fix="write e.g. --set num_layers=2")
        k, v = item.split("=", 1)
        try:
            overrides[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError as exc:
            raise SpecError(f"value of '{k.strip()}' is not valid YAML: {v!r}", where="--set") from exc
    return overrides

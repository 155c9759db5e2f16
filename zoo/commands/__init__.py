"""The ``zoo`` sub-commands, one module each (see ``zoo.cli.COMMANDS``), and what they share."""
from __future__ import annotations

from typing import Any, Iterable


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

"""State-dict key names are a declared contract: the converters (``zoo.convert``), saved checkpoints
and users' scripts address weights by name, so a renamed module must be a deliberate change.

``tests/snapshots/state_dict_keys.json`` pins, for every preset, each key and its shape.  A change
here fails this test; if it is intended, regenerate the snapshot with
``python tests/model/test_state_dict_keys.py --update``, update the converters, and say so in the change.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import zoo

SNAPSHOT = Path(__file__).resolve().parents[1] / "snapshots" / "state_dict_keys.json"


def keys_of(preset: str) -> dict[str, list[int]]:
    with torch.device("meta"):  # shapes only: nothing is allocated, so no memory budget applies
        model = zoo.build(preset, init=False, budget=float("inf"))
    return {k: list(v.shape) for k, v in model.state_dict().items()}


def _pinned() -> dict:
    return json.loads(SNAPSHOT.read_text(encoding="utf-8"))


def test_every_preset_is_pinned():
    assert sorted(_pinned()) == sorted(zoo.list_presets()), \
        "a preset was added or removed: regenerate the snapshot (see the module docstring)"


@pytest.mark.parametrize("preset", zoo.list_presets())
def test_state_dict_keys_are_the_pinned_ones(preset):
    pinned = _pinned()
    if preset not in pinned:
        pytest.fail(f"preset {preset} is not pinned: regenerate the snapshot (see the module docstring)")
    want, got = pinned[preset], keys_of(preset)
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    assert not missing and not extra, f"{preset}: keys gone {missing[:5]}, keys new {extra[:5]}"
    assert list(got) == list(want), f"{preset}: same keys in a different order"
    assert got == want, f"{preset}: shapes changed"


if __name__ == "__main__" and "--update" in sys.argv:
    SNAPSHOT.parent.mkdir(exist_ok=True)
    data = {p: keys_of(p) for p in sorted(zoo.list_presets())}
    lines = []  # one key per line, so a diff of the snapshot reads as a list of renamed keys
    for i, (preset, keys) in enumerate(data.items()):
        rows = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in keys.items())
        lines.append(f"{json.dumps(preset)}: {{\n{rows}\n}}" + ("," if i < len(data) - 1 else ""))
    SNAPSHOT.write_text("{\n" + "\n".join(lines) + "\n}\n", encoding="utf-8")
    print(f"wrote {SNAPSHOT.name}: {sum(map(len, data.values()))} keys of {len(data)} presets")

"""Fair comparisons across a hyper-parameter sweep: each variant at its own best setting.

An experiment with ``tune: {train.lr: [1e-3, 3e-3, 1e-2]}`` trains every variant at every value
(times every seed).  A trial of variant ``softmax`` at ``lr = 3e-3`` is named
``softmax@lr=0.003``; besides its metrics it records ``val_<select>``, the selection metric on the
**validation** half of the held-out examples, while its reported metrics are scored on the
**test** half (:meth:`zoo.experiment.tasks.SyntheticTask.using_split`: the halves split by a bit
of each example's own hash, so they never overlap).  Per variant the setting with the best mean
validation score over seeds is selected (ties: the first in the sweep's order); the comparison
table then holds, per variant, only the trials of its selected setting, named by the plain
variant, and says so ("at its best lr: 0.003, selected on validation").  Selecting on the test
half would reward the luck of the sweep itself (the max of several noisy means is biased up); a
variant that is better only at its own lr is then compared fairly with one that is better at
another.

This module is pure bookkeeping (names, combinations, the choice); :mod:`.run` plans and runs the
trials and :class:`~zoo.experiment.results.Results` applies the choice.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Iterable

#: the separator between a variant's name and its tuned setting (not allowed in variant names)
SEP = "@"
VAL_PREFIX = "val_"


def combos(tune: Iterable[tuple[str, tuple]]) -> list[dict[str, Any]]:
    """Every combination of a tune space ``((key, values), ...)``, in the sweep's order."""
    keys = [k for k, _ in tune]
    return [dict(zip(keys, vals)) for vals in itertools.product(*(v for _, v in tune))]


def label(combo: dict[str, Any]) -> str:
    """``lr=0.003`` / ``lr=0.003,weight_decay=0.1``: a setting as the tables and folders show it."""
    return ",".join(f"{k.split('.')[-1]}={_val(v)}" for k, v in combo.items())


def _val(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, dict):
        return str(v.get("kind", "x"))
    return "none" if v is None else str(v)


def tuned_name(variant: str, combo: dict[str, Any]) -> str:
    """The trial variant name of ``variant`` at ``combo``: ``softmax@lr=0.003``."""
    return f"{variant}{SEP}{label(combo)}"


def base_of(name: str) -> str:
    """``softmax@lr=0.003`` -> ``softmax`` (a plain name stays as it is)."""
    return name.split(SEP, 1)[0]


def setting_of(name: str) -> str:
    """``softmax@lr=0.003`` -> ``lr=0.003`` ("" for a plain name)."""
    return name.split(SEP, 1)[1] if SEP in name else ""


def select(scores: dict[str, dict[int, float]], direction: str) -> dict[str, dict]:
    """Per variant, the best setting.  ``scores``: trial variant name -> ``{seed: validation
    score}``.  Returns ``{variant: {"setting", "name", "mean", "n", "candidates": [(setting, mean,
    n), ...]}}``; a setting's mean is over its finite seeds, a setting with none can never be
    chosen (a sweep where every setting diverged selects nothing: ``setting`` None)."""
    out: dict[str, dict] = {}
    for name, vals in scores.items():
        base = base_of(name)
        finite = [v for v in vals.values() if isinstance(v, (int, float)) and math.isfinite(v)]
        mean = sum(finite) / len(finite) if finite else math.nan
        entry = out.setdefault(base, {"setting": None, "name": None, "mean": math.nan, "n": 0,
                                      "candidates": []})
        entry["candidates"].append((setting_of(name), mean, len(finite)))
        better = (mean > entry["mean"] if direction == "max" else mean < entry["mean"])
        if finite and (entry["setting"] is None or better):
            entry.update(setting=setting_of(name), name=name, mean=mean, n=len(finite))
    return out

"""A trial, as data: one (variant, seed) of an experiment, and the names of the files a results
folder holds.  The lowest module of :mod:`zoo.experiment`: the runner (:mod:`.run`), the worker
process (:mod:`.worker`) and the reader of results (:mod:`.results`) all stand on it."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

RESULT = "result.json"      # a trial's completion record (atomic)
TRIAL = "trial.json"        # what the worker runs
EXPERIMENT = "experiment.json"  # the resolved experiment of a results folder


@dataclass(frozen=True)
class Trial:
    """One (variant, seed): everything a worker needs, JSON-serialisable."""

    variant: str
    seed: int
    spec: dict
    train: dict
    task: str
    task_params: dict
    steps: int
    seq_len: int
    params: int
    flops_per_step: float
    metrics: tuple
    probe: tuple
    plugins: tuple

    @property
    def id(self) -> str:
        return f"{self.variant}/seed{self.seed}"

    def folder(self, out: Path) -> Path:
        return Path(out) / "trials" / self.variant / f"seed{self.seed}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Trial":
        d = dict(d)
        d["metrics"], d["probe"], d["plugins"] = tuple(d["metrics"]), tuple(d["probe"]), tuple(d["plugins"])
        return cls(**d)

    def key(self) -> str:
        """What makes two trials the same run (16 hex digits)."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @property
    def train_flops(self) -> float:
        return self.flops_per_step * self.steps

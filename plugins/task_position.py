"""``lag``: at every position, name the token ``lag`` places back -- a task only positions solve.
The input is a random string; the answer at position ``t`` is the token at ``t - lag``.  All
tokens are random, so *what* a token is says nothing about where the answer is: the model must
attend by relative position.  Without positional information a bidirectional model cannot do it at
all; a causal decoder can only guess positions from how many tokens its mask lets it see.  The
evaluation is run at the training length (``acc``) and at ``extrapolate`` times it (``acc_2x`` at
the default 2), where absolute schemes meet positions they never trained on: the classic
length-extrapolation test (Press et al. 2022, ALiBi).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.experiment.tasks import PAST_METRICS, SyntheticTask, symbols


@dataclass(frozen=True)
class LagConfig:
    vocab: int = 16
    length: int = 32          # training sequence length
    lag: int = 3
    extrapolate: int = 2      # also evaluate at this multiple of the training length
    heldout: float = 0.2
    eval_examples: int = 256

    def __post_init__(self):
        if not 2 <= self.vocab <= 120:
            raise ValueError("vocab must be in [2, 120]")
        if not 1 <= self.lag < self.length:
            raise ValueError("lag must be in [1, length)")
        if self.extrapolate < 2:
            raise ValueError("extrapolate must be at least 2 (the issue asks for >= 2x)")


class Lag(SyntheticTask):
    metrics = {"acc": "max", "acc_2x": "max", "past_acc_2x": "max", "exact": "max"}  # _{extrapolate}x per config

    def __init__(self, config: LagConfig):
        self.alphabet = symbols(config.vocab)
        super().__init__(config)
        k = config.extrapolate
        self.metrics = {**PAST_METRICS, f"past_acc_{k}x": "max", "acc": "max", f"acc_{k}x": "max",
                        "exact": "max"}

    def seq_len(self):
        return self.config.length

    def max_eval_len(self):
        return self.config.extrapolate * self.config.length

    def draw(self, gen, n, length=None):
        T, k = length or self.config.length, self.config.lag
        x = torch.randint(0, self.config.vocab, (n, T), generator=gen)  # (n, T)
        lab = torch.full((n, T), -1, dtype=torch.long)
        lab[:, k:] = x[:, :-k]  # position t answers x[t - k]
        return {"ids": x, "labels": lab, "start": None}

    def evaluate(self, model):
        was = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = self.score(model, self.eval_examples(), "")
                long = self.score(model, self.eval_examples(self.max_eval_len()),
                                  f"_{self.config.extrapolate}x")
            for m in ("acc", "past_acc"):  # teacher-forced and past-only, at the longer length
                out[f"{m}_{self.config.extrapolate}x"] = long[f"{m}_{self.config.extrapolate}x"]
        finally:
            model.train(was)
        return out


@zoo.hookimpl
def register_tasks(register):
    register("lag", Lag, config=LagConfig)

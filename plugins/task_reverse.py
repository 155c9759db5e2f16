"""``reverse``: write a random string backwards after a separator.
Each example is ``x1 … xn | xn … x1``; loss and metrics on the reversed half.  Unlike copying, the
token to produce next is found by *mirrored position* (answer step ``k`` reads input ``n + 1 - k``),
not by content following the previous one, so the model must know how far it is from the
separator: reversal probes whether positional information is precise enough to address tokens.
Metrics: ``acc``, ``exact``, ``gen_exact`` (generated greedily).
"""
from __future__ import annotations

from dataclasses import dataclass

import zoo


from .task_copy import Copy


@dataclass(frozen=True)
class ReverseConfig:
    vocab: int = 16
    length: int = 10
    min_length: int | None = None
    heldout: float = 0.2
    eval_examples: int = 256

    def __post_init__(self):
        if not 2 <= self.vocab <= 120 or self.length < 1:
            raise ValueError("vocab must be in [2, 120] and length >= 1")
        if self.min_length is not None and not 1 <= self.min_length <= self.length:
            raise ValueError("min_length must be in [1, length]")


class Reverse(Copy):  # Copy's sequences with the second half reversed: alphabet, lengths, metrics
    transform = staticmethod(lambda r: r.flip(0))


@zoo.hookimpl
def register_tasks(register):
    register("reverse", Reverse, config=ReverseConfig)

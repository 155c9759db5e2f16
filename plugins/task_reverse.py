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


from .task_copy import Copy, CopyConfig


@dataclass(frozen=True)
class ReverseConfig(CopyConfig):  # copy's fields and checks; a shorter default string
    length: int = 10


class Reverse(Copy):  # Copy's sequences with the second half reversed: alphabet, lengths, metrics
    transform = staticmethod(lambda r: r.flip(0))


@zoo.hookimpl
def register_tasks(register):
    register("reverse", Reverse, config=ReverseConfig)

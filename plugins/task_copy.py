"""``copy``: repeat a random string after a separator -- the induction-head task.
Each example is ``x1 … xn | x1 … xn``: ``n`` random symbols, a separator, then the same symbols
again; the loss and the metrics cover the second copy only.  Nothing about the symbols can be
memorised (they are random), so a model must learn the *mechanism* Olsson et al. (2022) call an
induction head: find where the current token appeared earlier and copy the token that followed it.
It probes in-context retrieval by content and relative position; ``min_length`` makes the lengths
vary, so batches are right-padded (what the BatchNorm experiment needs).  Metrics: ``acc``
(teacher-forced, per answer token), ``exact`` (whole copy right) and ``gen_exact`` (the copy
generated greedily from the prompt).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.experiment.tasks import SyntheticTask, symbols


@dataclass(frozen=True)
class CopyConfig:
    vocab: int = 16           # distinct content symbols
    length: int = 12          # symbols to copy (the longest, when lengths vary)
    min_length: int | None = None  # None: every example has ``length``; else uniform in [min, length]
    heldout: float = 0.2      # fraction of the example space reserved for evaluation
    eval_examples: int = 256

    def __post_init__(self):
        if not 2 <= self.vocab <= 120 or self.length < 1:
            raise ValueError("vocab must be in [2, 120] and length >= 1")
        if self.min_length is not None and not 1 <= self.min_length <= self.length:
            raise ValueError("min_length must be in [1, length]")


def draw_pairs(gen, n, L, lo, vocab, transform):
    """Shared by copy and reverse: ``x | transform(x)`` rows, right-padded to ``2 L``."""
    lens = torch.full((n,), L) if lo is None else torch.randint(lo, L + 1, (n,), generator=gen)
    x = torch.randint(0, vocab, (n, L), generator=gen)  # (n, L)
    full = torch.zeros(n, 2 * L + 1, dtype=torch.long)  # (n, 2L + 1): x | answer
    lab = torch.full((n, 2 * L), -1, dtype=torch.long)
    for i, m in enumerate(lens.tolist()):
        row = x[i, :m]
        full[i, :m], full[i, m] = row, vocab  # the separator is symbol ``vocab``
        full[i, m + 1:2 * m + 1] = transform(row)
        lab[i, m:2 * m] = full[i, m + 1:2 * m + 1]  # label t is token t + 1 (next-token)
    ids = full[:, :-1]  # (n, 2L)
    out = {"ids": ids, "labels": lab, "start": lens + 1}
    if lo is not None:
        out["length"] = 2 * lens
    return out


class Copy(SyntheticTask):
    answer_at_end = True
    metrics = {"acc": "max", "exact": "max", "gen_exact": "max"}
    #: what the second half is made of, from the first (one row of symbols); Reverse flips it
    transform = staticmethod(lambda r: r)

    def __init__(self, config: CopyConfig):
        self.alphabet = symbols(config.vocab) + "|"
        super().__init__(config)

    def seq_len(self):
        return 2 * self.config.length

    def draw(self, gen, n, length=None):
        c = self.config
        return draw_pairs(gen, n, length or c.length, c.min_length, c.vocab, self.transform)


@zoo.hookimpl
def register_tasks(register):
    register("copy", Copy, config=CopyConfig)

"""``modadd``: ``a + b = c`` with ``c = (a + b) mod p`` -- the grokking setting.
Power et al. (2022) train a small Transformer on a fraction of the ``p × p`` addition table and
evaluate on the rest: training accuracy reaches 100% early, held-out accuracy much later (or never),
once the network finds the algorithm (Nanda et al. 2023: Fourier features) instead of a lookup
table.  Here the held-out pairs are a fixed ``heldout`` fraction of the table (a hash of ``(a, b)``),
so no pair seen in training is ever scored.  It probes generalisation from a small, complete,
structured dataset, and weight decay's role in it.  Metrics: ``acc`` (= ``exact``, one answer token)
and ``gen_exact``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.experiment.tasks import SyntheticTask, symbols


@dataclass(frozen=True)
class ModAddConfig:
    p: int = 23               # the modulus (Power et al. use 97)
    heldout: float = 0.5      # fraction of the p*p table held out (the grokking papers: 0.5-0.7)
    eval_examples: int = 4096

    def __post_init__(self):
        if not 2 <= self.p <= 118:
            raise ValueError("p must be in [2, 118] (one symbol per residue)")
        if not 0.05 <= self.heldout <= 0.95:
            raise ValueError("heldout must be in [0.05, 0.95]")


class ModAdd(SyntheticTask):
    answer_at_end = True
    metrics = {"acc": "max", "gen_exact": "max"}

    def __init__(self, config: ModAddConfig):
        self.alphabet = symbols(config.p) + "+="
        super().__init__(config)

    def seq_len(self):
        return 4

    def rows(self, a, b):
        p = self.config.p
        n = a.numel()
        ids = torch.stack([a, torch.full((n,), p), b, torch.full((n,), p + 1)], 1)  # (n, 4): a + b =
        lab = torch.full((n, 4), -1, dtype=torch.long)
        lab[:, 3] = (a + b) % p  # after "=" comes c
        return {"ids": ids, "labels": lab, "start": torch.full((n,), 4)}

    def draw(self, gen, n, length=None):
        p = self.config.p
        return self.rows(torch.randint(0, p, (n,), generator=gen), torch.randint(0, p, (n,), generator=gen))

    def eval_examples(self, length=None):
        """Every held-out pair of the table (up to ``eval_examples``), in table order."""
        p = self.config.p
        a, b = torch.arange(p).repeat_interleave(p), torch.arange(p).repeat(p)
        ex = self.rows(a, b)
        keep = self.is_heldout(ex).nonzero().squeeze(1)[: self.config.eval_examples]
        return {k: v[keep] for k, v in ex.items()}


@zoo.hookimpl
def register_tasks(register):
    register("modadd", ModAdd, config=ModAddConfig)

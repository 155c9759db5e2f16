"""``mqar``: multi-query associative recall, as defined by Zoology (Arora et al. 2023).
The sequence starts with ``num_kv_pairs`` key-value pairs ``k1 v1 k2 v2 …`` (keys from the first half
of the vocabulary, values from the second, both drawn without replacement); later, each key is asked
again at a random position and the model must answer with its value.  Query positions follow
Zoology's power law (``power_a``: small values push queries far from the context); every other
position holds a random token (Zoology's ``random_non_queries``).  With ``filler: false`` there
are no such tokens: the queries follow the key-value pairs directly, each key once in a random
order, then its value (``k1 v1 .. kN vN  q a q a ..``, ``4 * num_kv_pairs`` tokens; a longer
``seq_len`` ends in unscored random tokens) -- what Zoology's figures train on when the sequence is
just long enough.  Loss and metrics only at the answers.  Zoology showed that this separates attention (which looks the key up exactly) from
efficient mixers with a fixed-size state (linear attention, convolutions), whose recall falls as
the number of pairs grows past what their state holds.  Metrics: ``acc`` (per answer), ``exact``
(every query of an example right).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.experiment.tasks import SyntheticTask, symbols


@dataclass(frozen=True)
class MQARConfig:
    vocab_size: int = 64      # Zoology uses 8192; keys are its first half, values its second
    seq_len: int = 64         # input length (Zoology: 64 .. 512)
    num_kv_pairs: int = 8     # pairs in the context, each queried once (Zoology: 4 .. 64)
    power_a: float = 0.01     # query-gap distribution p(g) ~ a * g^(a-1) (Zoology's default)
    filler: bool = True       # random tokens between the queries; false: the queries follow the pairs
    heldout: float = 0.1
    eval_examples: int = 256

    def __post_init__(self):
        if not 4 <= self.vocab_size <= 150 or self.vocab_size % 2:
            raise ValueError("vocab_size must be even and in [4, 150]")
        if self.num_kv_pairs < 1 or self.num_kv_pairs > self.vocab_size // 2:
            raise ValueError("num_kv_pairs must be in [1, vocab_size / 2]")
        if self.seq_len < 4 * self.num_kv_pairs:
            raise ValueError("seq_len must be at least 4 * num_kv_pairs (context + query slots)")
        if not 0 < self.power_a <= 1:
            raise ValueError("power_a must be in (0, 1]")
        if not isinstance(self.filler, bool):
            raise ValueError(f"filler must be true or false, got {self.filler!r}")


class MQAR(SyntheticTask):
    metrics = {"acc": "max", "exact": "max"}

    def __init__(self, config: MQARConfig):
        self.alphabet = symbols(config.vocab_size)
        super().__init__(config)

    def seq_len(self):
        return self.config.seq_len

    def draw(self, gen, n, length=None):
        c = self.config
        V, N, T = c.vocab_size, c.num_kv_pairs, c.seq_len
        half = V // 2
        keys = torch.rand(n, half, generator=gen).argsort(1)[:, :N]  # (n, N) distinct keys
        values = torch.rand(n, half, generator=gen).argsort(1)[:, :N] + half  # (n, N) distinct values
        ctx = 2 * N
        kvs = torch.stack([keys, values], 2).reshape(n, ctx)  # (n, 2N): k1 v1 k2 v2 ...
        space = (T - ctx) // 2
        if c.filler:
            g = torch.arange(1, space + 1, dtype=torch.float64)
            p = c.power_a * g ** (c.power_a - 1)
            gaps = torch.multinomial((p / p.sum()).float().expand(n, space), N, replacement=False,
                                     generator=gen)  # (n, N) distinct query slots
        else:  # the N query slots right after the pairs, the keys in a random order
            gaps = torch.rand(n, N, generator=gen).argsort(1)  # (n, N) slot of each key
        full = torch.randint(0, V, (n, T + 1), generator=gen)  # random non-query tokens
        full[:, :ctx] = kvs
        full.scatter_(1, ctx + 2 * gaps, keys)           # the query key ...
        full.scatter_(1, ctx + 2 * gaps + 1, values)     # ... followed by its value
        lab = torch.full((n, T + 1), -1, dtype=torch.long)
        lab.scatter_(1, ctx + 2 * gaps + 1, values)
        return {"ids": full[:, :-1], "labels": lab[:, 1:], "start": None}  # label t = token t + 1


@zoo.hookimpl
def register_tasks(register):
    register("mqar", MQAR, config=MQARConfig)

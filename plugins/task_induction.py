"""``induction``: a random sequence seen twice, at a random offset -- the task of Olsson et al.
(2022), "In-context Learning and Induction Heads" (Transformer Circuits Thread), whose Figure/claim
"induction heads form in two-layer attention-only models and not in one-layer ones" the shipped
``induction_heads`` experiment reproduces.

Each example is a row of ``width`` tokens filled with chunk pairs ``x1 … xL  x1 … xL``: a chunk of
``L`` tokens (uniform in ``[min_length, length]``, distinct within the chunk) followed by itself,
then the next pair, the last one cut at the row's end (the recipe of TransformerLens' and
``scripts/train_induction.py``'s repeated random chunks).  Since ``L`` varies, the distance between
a token and its earlier copy varies too: no fixed positional offset solves it.  The loss and the
metrics cover each second copy from its second token on (``x2 … xL``): each is predictable only
*in context*, by finding where the current token occurred before and copying the token that
followed it -- the induction mechanism, which needs two attention layers composed (a previous-token
head writes "my previous token was a" into each position, an induction head in the next layer
matches on it).  A one-layer attention-only model cannot form it: its keys see only their own
token and position, so it can at best learn which tokens are likely (a token seen earlier in the
row), not which one comes next.

Metrics: ``acc`` (teacher-forced accuracy on the scored positions: the in-context accuracy),
``exact`` (every scored position of a row right) and ``induction_score``: the largest, over layers
and heads, mean attention weight from each scored position (token ``x_j`` of a second copy) to the
position right after ``x_j``'s first occurrence (the token ``x_{j+1}``), ``L - 1`` back --
TransformerLens' induction score, at each chunk's own offset.

``loss_on``: which positions the *training* loss covers -- ``copies`` (the default: the scored
positions above) or ``all`` (every next token of the row, the first copies' unpredictable tokens
included: the language-model loss of ``scripts/train_induction.py``, the recipe of the shipped
``induction_2l``).  The metrics and the held-out loss always cover the scored positions only.  The in-context accuracy jumps (a
model forms the circuit or does not), so the task declares ``success: {acc: 0.9}`` and the results
table adds the success rate with its Wilson interval.  Chance level for the accuracy is ``1 / vocab``.

``specials``: whether the vocabulary also holds the char tokenizer's reserved tokens (``<pad> <unk>
<bos> <eos> <mask>``, the default of every synthetic task) -- five output classes that are never a
target here (rows have no padding and no markers).  ``specials: false`` makes the vocabulary exactly
the ``vocab`` symbols, as in ``scripts/train_induction.py``, and that matters: with the script's
loop, batches and initial weights unchanged, one extra never-target logit in the softmax keeps the
two-layer model on the plateau (in-context accuracy 0.10 after 1,500 steps instead of 0.93; see the
experiment's ``REPRODUCTION.md``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

import zoo
from zoo.experiment.tasks import SyntheticTask, symbols
from zoo.inside.trace import trace


@dataclass(frozen=True)
class InductionConfig:
    vocab: int = 64           # symbols (>= length: a chunk's tokens are distinct)
    width: int = 48           # tokens per row (the model's input is width - 1)
    length: int = 12          # the longest chunk
    min_length: int = 4       # the shortest
    heldout: float = 0.2
    eval_examples: int = 256
    loss_on: str = "copies"   # training loss on the scored positions ("copies") or every token ("all")
    specials: bool = True     # the char tokenizer's 5 reserved tokens in the vocabulary (false: exactly `vocab`)

    def __post_init__(self):
        if not isinstance(self.specials, bool):
            raise ValueError(f"specials must be true or false, got {self.specials!r}")
        if self.loss_on not in ("copies", "all"):
            raise ValueError(f"loss_on must be 'copies' or 'all', got {self.loss_on!r}")
        if not 2 <= self.min_length <= self.length:
            raise ValueError("min_length must be in [2, length]")
        if not self.length <= self.vocab <= 120:
            raise ValueError(f"vocab must be in [length, 120] = [{self.length}, 120]: a chunk's tokens are distinct")
        if not 2 * self.length <= self.width <= 1024:
            raise ValueError(f"width must be in [2 * length, 1024] = [{2 * self.length}, 1024]: one pair fits")


class Induction(SyntheticTask):
    metrics: ClassVar[dict] = {"acc": "max", "exact": "max", "induction_score": "max"}
    #: the in-context accuracy jumps (a model either forms the circuit or stays near chance): a seed
    #: whose acc reaches 0.9 formed it (the results table adds its success rate)
    success: ClassVar[dict] = {"acc": 0.9}

    def __init__(self, config: InductionConfig):
        self.alphabet = symbols(config.vocab)
        super().__init__(config)

    def seq_len(self):
        return self.config.width - 1

    def draw(self, gen, n, length=None):
        """Rows of chunk pairs; ``offset (n, T)``: at each scored position, how far back the position
        after the current token's first occurrence lies (``L - 1``); 0 elsewhere."""
        c = self.config
        W = length + 1 if length else c.width
        full = torch.zeros(n, W, dtype=torch.long)
        lab = torch.full((n, W - 1), -1, dtype=torch.long)
        off = torch.zeros(n, W - 1, dtype=torch.long)
        for i in range(n):
            pos = 0
            while pos < W:
                L = int(torch.randint(c.min_length, c.length + 1, (1,), generator=gen))
                x = torch.randperm(c.vocab, generator=gen)[:L]
                pair = torch.cat([x, x])[: W - pos]
                full[i, pos:pos + pair.numel()] = pair
                # scored: input positions pos+L .. pos+2L-2 (x1 .. x_{L-1} of the copy) predict x2 .. xL
                a, e = pos + L, min(pos + 2 * L - 1, W - 1)
                if e > a:
                    lab[i, a:e] = full[i, a + 1:e + 1]
                    off[i, a:e] = L - 1
                pos += 2 * L
        return {"ids": full[:, :-1], "labels": lab, "start": None, "offset": off, "next": full[:, 1:]}

    def sample(self, gen, n, *, heldout, length=None):
        """Training draws with ``loss_on: all`` label every position with its next token."""
        ex = super().sample(gen, n, heldout=heldout, length=length)
        if self.config.loss_on == "all" and not heldout:
            ex = {**ex, "labels": ex["next"]}
        return ex

    def eval_examples(self, length=None):
        """The fixed held-out set, drawn once per task object (the row loop is Python)."""
        cache = self.__dict__.setdefault("_eval_cache", {})
        if length not in cache:
            cache[length] = super().eval_examples(length)
        return cache[length]

    @torch.no_grad()
    def evaluate(self, model) -> dict:
        """The synthetic metrics, plus ``induction_score`` where there are attention patterns to
        read: a zoo model (``model.spec``).  Any other predictor (a reference oracle in the tests,
        a hand-written module) is scored on the answer metrics alone."""
        out = super().evaluate(model)
        if getattr(model, "spec", None) is None:
            return out
        was = model.training
        model.eval()
        try:
            ex = self.eval_examples()
            out["induction_score"] = induction_score(model, self.to_batch(ex), ex["offset"])
        finally:
            model.train(was)
        return out


@torch.no_grad()
def induction_score(model, batch: dict, offset: torch.Tensor, rows: int = 128) -> float:
    """Max over (layer, head) of the mean attention from each scored query position ``t`` to
    ``t - offset[t]`` (the token after the current token's first occurrence); ``offset (n, T)``."""
    ids, labels, offset = batch["ids"][:rows], batch["labels"][:rows], offset[:rows]
    w = trace(model, ids).attention_stack()  # (L, B, h, T, T)
    b, q = (labels != -100).nonzero(as_tuple=True)  # every scored (row, position)
    k = q - offset[b, q]
    hit = w.permute(1, 3, 4, 0, 2)[b, q, k]  # (N, L, h): attention to the induction target
    return float(hit.mean(0).max())


@zoo.hookimpl
def register_tasks(register):
    register("induction", Induction, config=InductionConfig)

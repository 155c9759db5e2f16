"""``grokking``: modular addition scored on *both* halves of the table -- the grokking measurement.
Grokking (Power et al. 2022, "Grokking: generalization beyond overfitting on small algorithmic
datasets"; Nanda et al. 2023, "Progress measures for grokking via mechanistic interpretability") is a
claim about *two* curves: a small Transformer trained on part of the ``p x p`` table of
``(a + b) mod p`` reaches 100% accuracy on its training pairs long before it reaches it on the
held-out pairs; with weight decay the held-out accuracy eventually jumps to 100% (the network
replaces its lookup table by the Fourier algorithm Nanda et al. read out of its weights).

This is the ``modadd`` task (the same sequences ``a + b =`` and the same fixed hash split of the
table, so ``acc`` here equals ``modadd``'s) with one more metric: ``train_acc``, the accuracy on every
pair of the *training* half, computed exactly like ``acc`` on the held-out half.  Logged during
training and thresholded (``steps_to_train_acc_0.99`` vs ``steps_to_acc_0.99``), the gap between the
two is the grokking delay.  Metrics: ``acc`` (held-out pairs), ``train_acc`` (training pairs),
``gen_exact`` (held-out, generated).

Options beyond ``modadd``'s: ``full_batch: true`` makes every training step use every training pair
exactly once (the papers' full-batch setting: Nanda et al. train on the whole 30% at each step)
instead of ``batch_size`` pairs drawn with replacement.  The trainer cuts every drawn batch to
``batch_size`` rows, so ``train.batch_size`` must be at least the number of training pairs (a
smaller one is refused with the number to set).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.errors import ZooError
from zoo.experiment.tasks import predict

from .task_modadd import ModAdd, ModAddConfig


@dataclass(frozen=True)
class GrokkingConfig(ModAddConfig):
    full_batch: bool = False  # each training step: every training pair once (else batch_size drawn)

    def __post_init__(self):
        super().__post_init__()
        if not isinstance(self.full_batch, bool):
            raise ValueError(f"full_batch must be true or false, got {self.full_batch!r}")


class Grokking(ModAdd):
    metrics = {"acc": "max", "train_acc": "max", "gen_exact": "max"}
    #: scored teacher-forced, like ``acc`` (for a causal model the same as past-only)
    teacher_forced = tuple(getattr(ModAdd, "teacher_forced", ("acc", "exact"))) + ("train_acc",)

    def train_examples(self) -> dict:
        """Every pair of the table on the training side of the split, in table order (the finite
        training set: training batches are drawn from exactly these pairs, with replacement)."""
        p = self.config.p
        a, b = torch.arange(p).repeat_interleave(p), torch.arange(p).repeat(p)
        ex = self.rows(a, b)
        keep = (~self.is_heldout(ex)).nonzero().squeeze(1)
        return {k: v[keep] for k, v in ex.items()}

    def sample(self, gen, n, *, heldout, length=None):
        """With ``full_batch``, a training draw is the whole training half (every pair once, ``n``
        at least the number of training pairs: the trainer keeps the first ``n`` rows); otherwise, and
        for held-out draws, ``modadd``'s sampling."""
        if self.config.full_batch and not heldout:
            cache = self.__dict__.setdefault("_train_cache", {})
            if "ex" not in cache:
                cache["ex"] = self.train_examples()
            have = cache["ex"]["ids"].size(0)
            if n < have:
                raise ZooError(f"full_batch trains on all {have} training pairs at each step, but "
                               f"batches hold {n} rows (the trainer would keep only the first {n})",
                               where="train.batch_size", fix=f"set train.batch_size: {have} (or more), "
                               "or task full_batch: false")
            return dict(cache["ex"])
        return super().sample(gen, n, heldout=heldout, length=length)

    @torch.no_grad()
    def evaluate(self, model) -> dict:
        """``modadd``'s held-out metrics plus ``train_acc`` (answer accuracy on all training pairs)."""
        out = super().evaluate(model)
        was = model.training
        model.eval()
        try:
            b = self.to_batch(self.train_examples())
            pred = predict(model, b["ids"])  # (n, 4) argmax ids; the answer is predicted at "="
            sel = b["labels"] >= 0
            out["train_acc"] = float((pred == b["labels"])[sel].float().mean())
        finally:
            model.train(was)
        return out


@zoo.hookimpl
def register_tasks(register):
    register("grokking", Grokking, config=GrokkingConfig)

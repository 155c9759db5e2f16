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
"""
from __future__ import annotations

import torch

import zoo
from zoo.experiment.tasks import predict

from .task_modadd import ModAdd, ModAddConfig


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
    register("grokking", Grokking, config=ModAddConfig)

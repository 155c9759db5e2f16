"""``padded_copy``: the copy task on right-padded, variable-length batches, with the metrics that
show what BatchNorm does to them -- in *training* mode, where the lecture's failure lives.

Everything of :mod:`plugins.task_copy` (``x1 … xn | x1 … xn``, lengths uniform in
``[min_length, length]``, answer = the second copy), plus nine measurements of the trained model,
each the largest change of a logit at a *real* (non-pad) position of a fixed held-out batch of
``probe_rows`` examples when something that should not matter changes:

- ``pad_leak_train`` / ``pad_leak_eval``: the padding's content changes -- the pad positions hold
  random symbols instead of the pad token (still masked as padding), the batch's shape unchanged;
- ``padwidth_leak_train`` / ``padwidth_leak_eval``: the amount of padding changes -- ``extra_pad``
  (8) more pad columns are appended (a per-token norm moves only by float rounding of the wider
  batch, ~1e-7);
- ``row_leak_train`` / ``row_leak_eval``: the *other* rows of the batch change -- the second half of
  the batch is replaced by other held-out examples, the first half is scored;
- ``future_leak_train`` / ``future_leak_eval``: a row's own *future* changes -- its last real token
  is replaced, every earlier position of that row is scored (a causal model must not move);
- ``train_eval_gap``: the same batch in training mode vs evaluation mode.

"Training mode" means every norm layer in ``.train()`` and everything else (dropout) in
``.eval()``: the norm's own mode is what is measured, and no random dropout mask hides or fakes a
difference.  It runs on a deep copy of the model, so BatchNorm's running statistics are untouched.
LayerNorm normalises each token over its own features: its ``*_train`` and ``*_eval`` leaks and its
gap are exactly 0 (pinned in the tests).  BatchNorm (:mod:`plugins.norm_batchnorm`) takes each
feature's mean and variance over all ``B·T`` positions of the batch, pads included, in training mode
-- so pads, other rows and the row's own future move its outputs -- and uses running averages in
evaluation mode, where those leaks vanish and a train/eval gap appears instead.  The accuracy
metrics (``acc``, ``gen_exact`` ...) are scored in evaluation mode, as every task's are; these
metrics are what the accuracy table cannot show.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import torch

import zoo
from zoo.components import Norm
from zoo.experiment.tasks import predict

from .task_copy import Copy, CopyConfig

#: the nine dependence metrics: all "min" (0 is the per-token ideal)
LEAK_METRICS = ("pad_leak_train", "pad_leak_eval", "padwidth_leak_train", "padwidth_leak_eval",
                "row_leak_train", "row_leak_eval", "future_leak_train", "future_leak_eval",
                "train_eval_gap")


@dataclass(frozen=True)
class PaddedCopyConfig(CopyConfig):
    min_length: int | None = 2      # variable lengths: batches are right-padded
    probe_rows: int = 32            # rows of the probe batch the dependence metrics use
    extra_pad: int = 8              # pad columns appended by the "more padding" perturbation

    def __post_init__(self):
        super().__post_init__()
        if self.min_length is None or self.min_length >= self.length:
            raise ValueError("min_length must be below length: the task is about variable lengths")
        if not 4 <= self.probe_rows <= 256 or self.probe_rows % 2:
            raise ValueError("probe_rows must be an even number in [4, 256]")
        if not 1 <= self.extra_pad <= 64:
            raise ValueError("extra_pad must be in [1, 64]")


def norms_mode(model, train: bool) -> None:
    """Every :class:`zoo.components.Norm` in ``train`` mode, everything else in eval mode."""
    model.eval()
    if train:
        for m in model.modules():
            if isinstance(m, Norm):
                m.train()


@torch.no_grad()
def _logits(model, ids, mask):
    return model(ids, attention_mask=mask).float()  # (B, T, V)


@torch.no_grad()
def dependence(model, batch: dict, other: dict, pad_id: int, symbol_ids: torch.Tensor, extra_pad: int,
               gen: torch.Generator) -> dict:
    """The nine measurements of the module docstring on ``batch`` (``ids (B, T)``, ``mask (B, T)``
    True at real tokens) and ``other`` (a second batch of the same shape: the rows swapped in);
    ``symbol_ids``: the token ids of the content symbols (what pads and changed tokens become)."""
    ids, mask = batch["ids"], batch["mask"]
    B, T = ids.shape
    h = B // 2
    # perturbations (token ids), each with the positions that must not move
    V = symbol_ids.numel()
    noise = symbol_ids[torch.randint(0, V, ids.shape, generator=gen)]
    pad_content = torch.where(mask, ids, noise)  # pads hold symbols, still masked
    more_ids = torch.cat([ids, torch.full((B, extra_pad), pad_id)], 1)
    more_mask = torch.cat([mask, torch.zeros(B, extra_pad, dtype=torch.bool)], 1)
    rows_ids = torch.cat([ids[:h], other["ids"][h:]])
    rows_mask = torch.cat([mask[:h], other["mask"][h:]])
    last = mask.sum(1) - 1  # (B,) the last real position of each row
    fut = ids.clone()
    r = torch.arange(B)
    k = torch.randint(0, V, (B,), generator=gen)
    new = symbol_ids[k]
    same = new == ids[r, last]
    new[same] = symbol_ids[(k[same] + 1) % V]  # always a different symbol
    fut[r, last] = new
    before = mask & (torch.arange(T)[None, :] < last[:, None])  # real positions before the changed one
    out = {}
    original = model
    for mode in ("train", "eval"):
        # a fresh copy per mode: each training-mode forward updates BatchNorm's running statistics,
        # which the evaluation-mode measurements (and the caller's model) must not see
        model = copy.deepcopy(original)
        norms_mode(model, mode == "train")
        base = _logits(model, ids, mask)
        d_pad = (_logits(model, pad_content, mask) - base).abs()[mask]
        d_more = (_logits(model, more_ids, more_mask)[:, :T] - base).abs()[mask]
        d_rows = (_logits(model, rows_ids, rows_mask)[:h] - base[:h]).abs()[mask[:h]]
        d_fut = (_logits(model, fut, mask) - base).abs()[before]
        out[f"pad_leak_{mode}"] = float(d_pad.max())
        out[f"padwidth_leak_{mode}"] = float(d_more.max())
        out[f"row_leak_{mode}"] = float(d_rows.max())
        out[f"future_leak_{mode}"] = float(d_fut.max())
        out[mode] = base
    out["train_eval_gap"] = float((out.pop("train") - out.pop("eval")).abs()[mask].max())
    return out


class PaddedCopy(Copy):
    metrics: ClassVar[dict] = {**Copy.metrics, **{m: "min" for m in LEAK_METRICS}, "acc_trainmode": "max"}
    #: a logit change below 0.01 is no finding (float noise of a different batch shape is ~1e-6)
    min_effects: ClassVar[dict] = {m: 0.01 for m in LEAK_METRICS}

    @torch.no_grad()
    def max_eval_len(self) -> int:
        """Evaluation feeds rows of ``seq_len() + extra_pad`` tokens (the "more padding"
        perturbation), so the model's ``max_len`` must hold them."""
        return super().max_eval_len() + self.config.extra_pad

    def evaluate(self, model) -> dict:
        """The copy task's metrics (evaluation mode), ``acc_trainmode`` (teacher-forced accuracy on
        the same held-out set with the norms in training mode, batches of ``probe_rows``) and the
        nine dependence measurements."""
        out = super().evaluate(model)
        was = model.training
        c = self.config
        try:
            ex = self.eval_examples()
            b = self.to_batch(ex)
            n = c.probe_rows
            if b["ids"].size(0) < 2 * n:
                raise ValueError(f"padded_copy needs eval_examples >= {2 * n} (2 x probe_rows)")
            first = {k: v[:n] for k, v in b.items()}
            second = {k: v[n:2 * n] for k, v in b.items()}
            gen = torch.Generator().manual_seed(4321)
            out.update(dependence(model, first, second, self.tok.pad_id, self.sym2id[:c.vocab], c.extra_pad, gen))
            probe = copy.deepcopy(model)
            norms_mode(probe, True)
            pred = predict(probe, b["ids"], b["mask"], batch=n)
            sel = b["labels"] != -100
            out["acc_trainmode"] = float((pred == b["labels"])[sel].float().mean())
        finally:
            model.train(was)
        return out


@zoo.hookimpl
def register_tasks(register):
    register("padded_copy", PaddedCopy, config=PaddedCopyConfig)

"""Configuration of a training run: every knob in one frozen-by-convention dataclass, and what a
run returns.

The config is stored in the trainer state, so a resumed run reuses it exactly (``steps`` may be
raised to extend a run).  :meth:`TrainConfig.validate` turns bad values into a :class:`ZooError`
that names the field (``train.lr``), the problem and the fix.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from ..errors import ZooError

OBJECTIVES = ("clm", "mlm", "prefix_lm", "seq2seq")
#: where a training window cut from the document stream may begin: at ``any`` token, or only at a
#: ``line`` start (the first token, or right after a newline or a document separator), or only at
#: a ``document`` start.  A model trained on windows that may begin mid-line never learns that the
#: first token of its context starts a line, and a prompt always does: a poem's first line typed
#: into the UI is continued by a line of the right length 71% of the time after ``any`` training,
#: and (the same model given a newline first) 97% of the time when it knows where the line began.
WINDOW_STARTS = ("any", "line", "document")
#: the model architectures each objective can train
ARCH_FOR = {"clm": ("decoder",), "prefix_lm": ("decoder",), "mlm": ("encoder",),
            "seq2seq": ("encoder_decoder",)}
#: what ``zoo train`` learns when no objective is named: the first objective that fits the arch
DEFAULT_OBJECTIVE = {arch: next(o for o, archs in ARCH_FOR.items() if arch in archs)
                     for arch in ("decoder", "encoder", "encoder_decoder")}


@dataclass
class TrainConfig:
    """Every knob of a run (stored in the trainer state; a resumed run reuses it)."""

    objective: str = "clm"
    steps: int = 1000             # optimizer steps in total
    batch_size: int = 32          # sequences per optimizer step, summed over accumulation and ranks
    grad_accum: int = 1           # micro-batches per step (each rank): batch_size / (world * accum)
    block_size: int | None = None  # window length for documents; None = min(max_len, 128)
    window_starts: str = "any"    # documents: where training windows may begin (WINDOW_STARTS)
    lr: float = 1e-3
    min_lr_ratio: float = 0.1     # cosine decays to lr * min_lr_ratio
    warmup: int = 100             # linear warm-up steps
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.98
    grad_clip: float = 1.0        # max global grad norm (0 = off)
    holdout: float = 0.05         # fraction of documents / examples held out for evaluation
    eval_every: int = 200
    eval_batches: int = 20        # at most this many batches of batch_size per evaluation
    exact_match_samples: int = 256  # seq2seq: examples greedily decoded per periodic evaluation
    save_every: int = 500
    log_every: int = 10
    mask_prob: float = 0.15       # mlm: fraction of the tokens picked for prediction
    mask_token_frac: float = 0.8  # mlm: of the picked, this share becomes <mask>; the rest is half
                                  # random tokens, half left as they are (BERT: 0.8 = 80/10/10)
    seed: int = 0
    bf16: bool = True             # autocast to bfloat16 on CUDA (ignored on CPU)
    tokenizer: str = "char"       # for a fresh model: "char" (vocabulary from the data) or "byte"
    keep_best: bool = False       # also save the model with the lowest held-out loss to out/best/
    progress: bool = True

    def validate(self) -> "TrainConfig":
        def bad(field_, msg, fix=None, options=None):
            raise ZooError(msg, where=f"train.{field_}", fix=fix, options=options)

        if self.objective not in OBJECTIVES:
            bad("objective", f"unknown objective {self.objective!r}", options=OBJECTIVES,
                fix="pick one of the objectives listed")
        for name in ("steps", "batch_size", "grad_accum", "eval_every", "save_every", "log_every",
                     "eval_batches"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                bad(name, f"must be a positive integer, got {getattr(self, name)!r}")
        if self.window_starts not in WINDOW_STARTS:
            bad("window_starts", f"unknown window start {self.window_starts!r}",
                options=WINDOW_STARTS, fix="pick one of the options listed")
        if self.block_size is not None and self.block_size < 2:
            bad("block_size", f"must be at least 2, got {self.block_size}")
        if not self.lr > 0:
            bad("lr", f"must be positive, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            bad("min_lr_ratio", f"must be in [0, 1], got {self.min_lr_ratio}")
        if not 0 < self.mask_prob < 1:
            bad("mask_prob", f"must be in (0, 1), got {self.mask_prob}")
        if not 0 <= self.mask_token_frac <= 1:
            bad("mask_token_frac", f"must be in [0, 1], got {self.mask_token_frac}",
                fix="0.8 is BERT's 80/10/10; 1.0 replaces every picked token by <mask>")
        if self.warmup < 0 or self.grad_clip < 0:
            bad("warmup", "warmup and grad_clip must not be negative")
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass
class TrainResult:
    """What :func:`zoo.train.train` returns: the trained model (with ``.tokenizer``), the metric
    history, the final evaluation, where things were written, and whether the run was interrupted."""

    model: nn.Module
    tokenizer: Any
    final: dict
    history: list[dict] = field(default_factory=list)
    out: Path | None = None
    step: int = 0
    interrupted: bool = False
    wall_time: float = 0.0

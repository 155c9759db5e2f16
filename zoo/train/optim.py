"""The optimisation recipe: AdamW with decoupled weight decay (on matrices only by default, on every
parameter with ``weight_decay_scope: all``), and a learning-rate schedule that is a pure function of
the step (linear warm-up, then cosine decay)."""
from __future__ import annotations

import math

import torch
from torch import nn

from .config import TrainConfig


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine from ``lr`` to ``lr * min_lr_ratio``.
    ``step`` counts from 0 (the LR used for the ``step+1``-th update); a pure function of the step,
    so resuming needs no scheduler object."""
    if cfg.warmup and step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    span = max(1, cfg.steps - cfg.warmup)
    t = min(1.0, (step - cfg.warmup) / span)
    lo = cfg.lr * cfg.min_lr_ratio
    return lo + 0.5 * (cfg.lr - lo) * (1 + math.cos(math.pi * t))


def _no_decay(name: str, p: nn.Parameter) -> bool:
    return p.ndim < 2 or "emb" in name or "norm" in name


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with two parameter groups: ``weight_decay`` on the first, 0 on the second.

    ``cfg.weight_decay_scope`` says what is decayed: ``"matrices"`` (the default, GPT-2 / nanoGPT
    practice) decays the weight matrices of the linear layers only -- biases, norm gains and
    embeddings go to the second group; ``"all"`` decays every trainable parameter, embeddings, norms
    and biases included (``torch.optim.AdamW(model.parameters(), weight_decay=...)``, what the
    grokking papers use) and leaves the second group empty.  Tied parameters appear once; frozen
    ones (``requires_grad`` False) not at all."""
    seen, decay, plain = set(), [], []
    decay_all = cfg.weight_decay_scope == "all"
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        (plain if not decay_all and _no_decay(name, p) else decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": plain, "weight_decay": 0.0}]
    kw = {"fused": True} if next(model.parameters()).is_cuda else {}
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), **kw)

"""``batchnorm``: BatchNorm over the features of every token in the batch — for teaching only.

BatchNorm (Ioffe & Szegedy, 2015) takes each feature's mean and variance *across the batch* (here
across all B·T token positions), where LayerNorm takes them across the features of one token.  The
consequence the lecture scripts demonstrate: in training mode a sequence's output depends on the
*other* sequences in its batch (and on padding), and it changes between train and eval mode, when the
running statistics replace the batch ones.  Variable-length text and batch size 1 generation make this
a poor fit for Transformers, which is why they use LayerNorm / RMSNorm.  The test suite shows the
cross-sample dependence.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

import zoo
from zoo.components import Norm


@dataclass(frozen=True)
class BatchNormConfig:
    eps: float = 1e-5
    momentum: float = 0.1


class BatchNorm(Norm):
    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        self.bn = nn.BatchNorm1d(ctx.d_model, eps=config.eps, momentum=config.momentum)
        # BatchNorm counts batches only for momentum=None (a cumulative average), which a float
        # momentum never is: the counter stays out of the checkpoint, which holds floats only
        del self.bn.num_batches_tracked
        self.bn.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long),
                                persistent=False)

    def reset_parameters(self):
        self.bn.reset_parameters()

    def forward(self, x):
        shape = x.shape
        y = self.bn(x.reshape(-1, shape[-1]))  # statistics over all (B*T) positions, per feature
        return y.view(shape)


@zoo.hookimpl
def register_norms(register):
    register("batchnorm", BatchNorm, config=BatchNormConfig)

"""``relu``: ``max(0, x)``, the activation of the original Transformer's feed-forward block
(Vaswani et al., 2017) and of OPT; ``reglu``'s gate.

An activation is a registered component of the ``activation`` family: a feed-forward block names it
(``ffn: {kind: mlp, activation: relu}``) and calls its ``fn``, here ``torch.nn.functional.relu``
itself, so a spec that names it computes exactly what ``F.relu`` computes.
"""
from __future__ import annotations

import torch.nn.functional as F

import zoo
from zoo.components import ActivationFunction


class ReLU(ActivationFunction):
    """ReLU, ``max(0, x)`` (Nair & Hinton, 2010): exact zeros for negative inputs."""

    fn = staticmethod(F.relu)


@zoo.hookimpl
def register_activations(register):
    register("relu", ReLU)

"""``mish``: ``x · tanh(softplus(x))`` (Misra, 2019, "Mish: A Self Regularized Non-Monotonic
Activation Function", arXiv 1908.08681), as a zoo activation.

A feed-forward block names an activation (``ffn: {kind: mlp, activation: mish}``, also
``swiglu``, ``geglu``, ``reglu``, ``normformer``); the block looks the name up in the registry
once, when it is built, and calls the class's ``fn`` on its hidden layer.  So a new activation is
this one small file, not a new feed-forward block.

    ffn: {kind: mlp, activation: mish}

The tested example of docs/PLUGINS.md (section 2, "An activation"): tests/docs/test_activation_plugin.py
installs it as a pip package and compares a model that names it with one computing ``F.mish`` by hand.
"""
from __future__ import annotations

import torch.nn.functional as F

import zoo
from zoo.components import ActivationFunction


class Mish(ActivationFunction):
    """Mish, ``x · tanh(softplus(x))``: smooth and non-monotonic like SiLU, unbounded above."""

    # the function itself (staticmethod: a plain function, not a method); the block calls it directly
    fn = staticmethod(F.mish)


@zoo.hookimpl
def register_activations(register):
    register("mish", Mish)

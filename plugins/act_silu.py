"""``silu``: ``x · sigmoid(x)``, the SiLU or Swish (Elfwing et al., 2017; Ramachandran et al.,
2017), the gate of ``swiglu`` in Llama, Mistral, Qwen and their relatives.

``fn`` is ``torch.nn.functional.silu`` itself.
"""
from __future__ import annotations

import torch.nn.functional as F

import zoo
from zoo.components import ActivationFunction


class SiLU(ActivationFunction):
    """SiLU (Swish-1), ``x · sigmoid(x)``: smooth, non-monotonic just below zero."""

    fn = staticmethod(F.silu)


@zoo.hookimpl
def register_activations(register):
    register("silu", SiLU)

"""``gelu`` and ``gelu_tanh``: the Gaussian error linear unit ``x · Φ(x)`` (Hendrycks & Gimpel,
2016, arXiv 1606.08415) and its tanh approximation.

``gelu`` is the exact, erf-based GELU (BERT, RoBERTa, GPT-NeoX; ``geglu``'s gate).  ``gelu_tanh`` is
``0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))``: GPT-2's ``gelu_new``, Gemma's and T5 v1.1's
"gated-gelu".  The two differ by up to about 5e-4, enough to break a converted model's exact parity,
so each checkpoint names the one it was trained with.  ``fn`` is PyTorch's own function (a
``functools.partial`` for the approximation: no Python frame per call).
"""
from __future__ import annotations

import functools

import torch.nn.functional as F

import zoo
from zoo.components import ActivationFunction


class GELU(ActivationFunction):
    """GELU, ``x · Φ(x)`` with the exact normal CDF (Hendrycks & Gimpel, 2016)."""

    fn = staticmethod(F.gelu)


class GELUTanh(ActivationFunction):
    """GELU's tanh approximation (GPT-2's ``gelu_new``)."""

    fn = staticmethod(functools.partial(F.gelu, approximate="tanh"))


@zoo.hookimpl
def register_activations(register):
    register("gelu", GELU)
    register("gelu_tanh", GELUTanh)

"""zoo-linear-attention: a third-party plugin package for zoo, and the template to copy.

It adds two components that zoo does not have built in:

- attention ``linear``: linear attention with the ``elu + 1`` feature map (Katharopoulos et al.,
  2020), causal and non-causal;
- norm ``scalenorm``: one learned scale per vector (Nguyen & Salazar, 2019).

zoo finds this package through the entry point in ``pyproject.toml``::

    [project.entry-points.zoo]
    linear_attention = "zoo_linear_attention"

and calls the hook implementations below, each with a ``register`` callback.  That is the whole
contract; see ``docs/PLUGINS.md`` in the zoo repository.
"""
from __future__ import annotations

import zoo

from .linear_attention import LinearAttention, LinearAttentionConfig, feature_map
from .scalenorm import ScaleNorm, ScaleNormConfig

__version__ = "0.1.0"
__all__ = ["LinearAttention", "LinearAttentionConfig", "ScaleNorm", "ScaleNormConfig", "feature_map"]


@zoo.hookimpl
def register_attention(register):
    register("linear", LinearAttention, config=LinearAttentionConfig)


@zoo.hookimpl
def register_norms(register):
    register("scalenorm", ScaleNorm, config=ScaleNormConfig)

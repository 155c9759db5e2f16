"""``none``: no positional information at all.

Self-attention is permutation-equivariant: shuffle the input tokens and the outputs shuffle the same
way.  Without positions a bidirectional model sees a bag of words.  (A causal decoder can still infer
some order from how many tokens each position sees — Haviv et al., 2022, "Transformer Language Models
without Positional Encodings Still Learn Positional Information".)  Useful as the control in
experiments.
"""
import zoo
from zoo.components import PositionScheme


class NoPositions(PositionScheme):
    pass


@zoo.hookimpl
def register_positions(register):
    register("none", NoPositions)

"""``yarn``: rotary positions extended to a longer context by YaRN (Peng, Quesnelle, Fan & Shippole, 2023, "YaRN: Efficient Context Window Extension of Large Language Models", arXiv 2309.00071).

A RoPE model trained on ``L`` tokens sees unknown rotation angles beyond ``L``.  Position
interpolation divides every frequency by the extension ``s`` — but that also blurs the fast pairs
that encode *local* order.  YaRN interpolates by wavelength instead ("NTK-by-parts")::

    θ_i = base^(-2i/d)                                # pair i's frequency
    γ_i = 1 - clamp((i - lo) / (hi - lo), 0, 1)       # 1 for fast pairs, 0 for slow ones
    θ'_i = γ_i · θ_i + (1 - γ_i) · θ_i / s             # fast pairs keep their frequency, slow ones are divided
    cos, sin *= 0.1·ln(s) + 1                         # "attention temperature": logits grow by its square

``lo`` and ``hi`` are the pair indices that make ``β_fast = 32`` and ``β_slow = 1`` turns over the old
context ``L``, rounded outwards, exactly as Hugging Face's ``_compute_yarn_parameters``.  Used to
extend Qwen 2.5, DeepSeek-V3 and Llama-derived models to 4-32x their pre-training context.
Pairs are "rotate half" (``j`` with ``j + d/2``), as in Hugging Face Llama.  Keys are rotated with
their absolute positions before entering the KV cache.

This plugin is the catalogue's name for ``rope`` with ``scaling: yarn`` (the scaling converted Qwen 2.5
and DeepSeek checkpoints use): the same code computes both, so the lesson and the converted models
cannot drift apart.  What it adds is the default ``L = max_len / factor``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

import zoo
from zoo.errors import ParamError
from zoo.plugins.pos_rope import Rope, RopeConfig, rope_frequencies, rope_scale


@dataclass(frozen=True)
class YarnConfig:
    factor: float = 4.0                   # s: how much longer the context became
    original_max_len: int | None = None   # L: the pre-training context; None: max_len / factor
    base: float = 10000.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None  # None: 0.1·ln(s) + 1

    def __post_init__(self):
        if not self.factor >= 1:
            raise ParamError.of("param.at_least", name="factor", minimum=1, value=self.factor)
        if self.base <= 1:
            raise ValueError(f"base must be > 1, got {self.base}")
        if not self.beta_fast > self.beta_slow > 0:
            raise ValueError("need beta_fast > beta_slow > 0")
        if self.original_max_len is not None and self.original_max_len < 1:
            raise ParamError.of("param.at_least", name="original_max_len", minimum=1,
                                value=self.original_max_len)


def rope_config(config: YarnConfig, original_max_len: int) -> RopeConfig:
    """The catalogue's ``yarn`` is rope with ``scaling: yarn``: one implementation of the frequencies
    and the temperature (:func:`zoo.plugins.pos_rope.rope_frequencies`, the one converted Qwen 2.5 /
    DeepSeek models use), this plugin only names it and derives ``L`` from ``max_len`` by default."""
    return RopeConfig(base=config.base, scaling="yarn", factor=config.factor,
                      original_max_len=original_max_len, beta_fast=config.beta_fast,
                      beta_slow=config.beta_slow, attention_factor=config.attention_factor)


def yarn_frequencies(dim: int, config: YarnConfig, original_max_len: int) -> tuple[torch.Tensor, float]:
    """``(dim/2,)`` frequencies after YaRN's by-parts interpolation, and the attention factor."""
    rope = rope_config(config, original_max_len)
    return rope_frequencies(dim, rope), rope_scale(rope)


class Yarn(Rope):
    """RoPE extended by YaRN's by-parts frequency interpolation and attention temperature (Peng et al., 2023, "YaRN: Efficient Context Window Extension of Large Language Models", arXiv 2309.00071)."""

    lesson = {
        "en": "Problem: a RoPE model meets unseen rotation angles past its training length, and dividing "
              "all frequencies (position interpolation) blurs the fast ones that encode local order. YaRN "
              "interpolates by wavelength: pairs that turn many times over the old context keep their "
              "frequency, slow ones are divided by the extension s, a ramp blends between, and logits are "
              "sharpened by (0.1·ln s + 1)². Fine-tuning on ~0.1% of the pre-training data then extends "
              "context 4-32x (Qwen 2.5, DeepSeek-V3).",
        "zh": "问题：RoPE 模型超出训练长度后会遇到没见过的旋转角度，而把所有频率都除以扩展倍数（位置插值）又会模糊编码局部"
              "顺序的高频分量。YaRN 按波长分段插值：在原上下文内转很多圈的分量保持频率，慢的分量除以扩展倍数 s，中间线性"
              "过渡，并把分数放大 (0.1·ln s + 1)² 倍。只需约 0.1% 预训练数据的微调即可把上下文扩展 4-32 倍"
              "（Qwen 2.5、DeepSeek-V3）。",
    }

    def __init__(self, config, ctx):
        if ctx.head_dim % 2:
            raise zoo.SpecError(f"yarn rotates feature pairs; head_dim {ctx.head_dim} is odd",
                                where="positions.kind", fix="use an even head_dim")
        self.original = config.original_max_len or max(int(ctx.max_len / config.factor), 1)
        super().__init__(rope_config(config, self.original), ctx)  # self.config: the rope settings
        self.yarn_config = config  # as declared in the spec


@zoo.hookimpl
def register_positions(register):
    register("yarn", Yarn, config=YarnConfig)

"""``strided`` / ``global_window``: two sparse attention patterns from the long-context literature.

- ``strided`` (Child, Gray, Radford & Sutskever, 2019, "Generating Long Sequences with Sparse
  Transformers", arXiv 1904.10509): query ``i`` sees key ``j`` when they are close, ``|i - j| < stride``,
  or when ``i - j`` is a multiple of ``stride``.  Two hops (local, then strided) connect any pair, so
  information can cross ``n`` tokens with ``O(n·sqrt(n))`` attended pairs when ``stride ≈ sqrt(n)``.
- ``global_window`` (Beltagy, Peters & Cohan, 2020, "Longformer: The Long-Document Transformer",
  arXiv 2004.05150): a sliding window ``|i - j| < window`` plus ``globals`` global tokens (the first
  positions, e.g. [CLS]) that see and are seen by every token.

Both are rules on absolute positions, so they stay right under a KV cache offset; compose them with
``causal`` in decoders (``mask: [causal, {kind: strided, stride: 8}]``).
"""
from __future__ import annotations

from dataclasses import dataclass

import zoo
from zoo.components import MaskRule
from zoo.errors import ParamError


@dataclass(frozen=True)
class StridedConfig:
    stride: int = 8

    def __post_init__(self):
        if self.stride < 1:
            raise ParamError.of("param.at_least", name="stride", minimum=1, value=self.stride)


class Strided(MaskRule):
    """Sparse Transformer's strided pattern: |i - j| < stride or (i - j) divisible by stride (Child et al., 2019, "Generating Long Sequences with Sparse Transformers", arXiv 1904.10509)."""

    lesson = {
        "en": "Problem: full attention costs O(n²). The Sparse Transformer lets query i see only nearby keys "
              "(|i-j| < s) and every s-th key before it ((i-j) mod s = 0); with s ≈ sqrt(n) that is "
              "O(n·sqrt(n)) pairs, yet any two positions are linked in two hops. It generated images, audio "
              "and text of tens of thousands of tokens.",
        "zh": "问题：全注意力的代价是 O(n²)。Sparse Transformer 让查询 i 只看附近的键（|i-j| < s）以及每隔 s 个的键"
              "（(i-j) mod s = 0）；取 s ≈ sqrt(n) 时只有 O(n·sqrt(n)) 对，但任意两个位置两跳即可相连。它生成了长达"
              "数万个词元的图像、音频和文本。",
    }

    def forward(self, ctx):
        dist = ctx.query_positions() - ctx.key_positions()  # (Tq, Tk)
        s = self.config.stride
        return (dist.abs() < s) | (dist % s == 0)


@dataclass(frozen=True)
class GlobalWindowConfig:
    window: int = 16
    globals: int = 1  # the first `globals` positions are global tokens

    def __post_init__(self):
        if self.window < 1 or self.globals < 0:
            raise ValueError(f"need window >= 1 and globals >= 0, got {self.window}, {self.globals}")


class GlobalWindow(MaskRule):
    """Longformer's pattern: a sliding window plus global tokens that see and are seen by all (Beltagy et al., 2020, "Longformer: The Long-Document Transformer", arXiv 2004.05150)."""

    lesson = {
        "en": "Problem: a sliding window is linear in length but no token can see the whole document. "
              "Longformer adds a few global tokens: allowed(i, j) = |i-j| < w or i < g or j < g. Global "
              "tokens (e.g. [CLS] or the question) gather and broadcast information for the whole "
              "sequence, at O(n·(w + g)) cost; it beat RoBERTa on long-document QA and classification.",
        "zh": "问题：滑动窗口的代价随长度线性增长，但没有任何词元能看到整篇文档。Longformer 加入少量全局词元："
              "allowed(i, j) = |i-j| < w 或 i < g 或 j < g。全局词元（如 [CLS] 或问题）为整个序列汇集并广播信息，"
              "代价为 O(n·(w + g))；它在长文档问答和分类上超过了 RoBERTa。",
    }

    def forward(self, ctx):
        qpos, kpos = ctx.query_positions(), ctx.key_positions()  # (Tq, 1), (1, Tk)
        if ctx.key_padding is not None:  # count real tokens only: left padding must not move the globals
            real = ctx.key_padding.to(ctx.device).long().cumsum(-1) - 1  # (B, Tk): index among real tokens
            kpos = real[:, None, None, :]  # (B, 1, 1, Tk)
            qpos = real[:, ctx.q_offset:ctx.q_offset + ctx.q_len][:, None, :, None]  # (B, 1, Tq, 1)
        g = self.config.globals
        return ((qpos - kpos).abs() < self.config.window) | (qpos < g) | (kpos < g)


@zoo.hookimpl
def register_masks(register):
    register("strided", Strided, config=StridedConfig)
    register("global_window", GlobalWindow, config=GlobalWindowConfig)

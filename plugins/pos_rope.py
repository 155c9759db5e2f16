"""``rope``: rotary position embeddings (Su et al., 2021, "RoFormer"; used by GPT-J, GPT-NeoX, Llama).

Instead of *adding* a position vector to the token, RoPE *rotates* the query and key of a token at
position ``m`` by an angle proportional to ``m``.  Split each head's ``hd`` features into ``hd / 2``
pairs; pair ``i`` is a 2-D point rotated by ``m · θ_i`` with ``θ_i = base^(-2i / hd)``::

    [q'_a]   [cos mθ_i  -sin mθ_i] [q_a]
    [q'_b] = [sin mθ_i   cos mθ_i] [q_b]

Two facts follow, and the tests check both: a rotation never changes a vector's length, and the dot
product of a query rotated by ``m`` with a key rotated by ``n`` depends only on ``n - m`` — attention
sees *relative* offsets although every token was encoded with its absolute position.  Nothing is
learned and nothing touches the embeddings or the values.

Which features form a pair is a convention: ``interleaved: false`` (default) pairs feature ``j`` with
``j + hd/2`` (the "rotate half" layout of GPT-NeoX and Hugging Face Llama); ``interleaved: true``
pairs ``2i`` with ``2i + 1`` (the paper, GPT-J, Meta's original Llama code).  ``base`` is Llama's
``rope_theta`` (10 000; 500 000 in Llama 3).  ``fraction`` < 1 rotates only the first part of each
head (GPT-NeoX's ``rotary_pct``).

Context extension rescales the frequencies: ``scaling: linear`` divides them all by ``factor``
(position interpolation, Chen et al., 2023); ``scaling: llama3`` (Llama 3.1+) divides only the slow
ones — wavelengths longer than ``original_max_len / low_freq_factor`` — by ``factor``, keeps the fast
ones (shorter than ``original_max_len / high_freq_factor``) and blends smoothly in between.
``scaling: yarn`` (YaRN, Peng et al., 2023, arXiv 2309.00071; Qwen2.5, DeepSeek) interpolates the
pairs that turn fewer than ``beta_slow`` times over ``original_max_len`` (divides them by
``factor``), keeps those turning more than ``beta_fast`` times, ramps linearly in between, and
scales cos/sin by ``attention_factor`` (``0.1 ln(factor) + 1`` by default) to keep the attention
entropy of the longer context.

Two scalings depend on how long the sequence is, ``S = max(pos) + 1`` of the forward call (as in
transformers, which reads it from the call's ``position_ids``): ``scaling: dynamic`` ("dynamic NTK",
bloc97 / emozilla, 2023) leaves the frequencies alone up to ``original_max_len`` and beyond it raises
the base to ``base · (factor · S / original_max_len - (factor - 1)) ^ (dim / (dim - 2))``, so the
slowest pair still turns less than once over ``S`` tokens; ``scaling: longrope`` (LongRoPE, Ding et
al., 2024, arXiv 2402.13753; Phi-3 128k) divides pair ``i``'s frequency by a searched
``short_factor[i]`` up to ``original_max_len`` and by ``long_factor[i]`` beyond, and scales cos/sin
by ``attention_factor`` (``sqrt(1 + ln(factor) / ln(original_max_len))`` by default).  Under a KV
cache each call rotates its new keys with its own ``S``: keys cached before the sequence crossed
``original_max_len`` keep the frequencies they were rotated with, exactly as transformers'
``generate`` does (a full forward of the same tokens rotates every key with the final ``S``).

``pattern_base`` gives layers their own base by the spec's ``mask_pattern``: entry ``j`` is the base of
plain (unscaled) RoPE for the layers of rule group ``j``, or null for the settings above.  Gemma 3's
local (sliding-window) layers turn with base 10 000 while its global layers use 1 000 000, scaled
linearly in the larger models: the local layers see only a short window, so fast pairs suffice there.

Under a KV cache the keys are rotated *before* they are cached, with their absolute positions, so the
new queries (rotated at their own offsets) meet them exactly as in a full forward pass.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

import zoo
from zoo.components import PositionScheme


@dataclass(frozen=True)
class RopeConfig:
    base: float = 10000.0      # theta: the slowest pair turns once every 2π·base positions
    interleaved: bool = False  # pair (2i, 2i+1) instead of (i, i + hd/2)
    fraction: float = 1.0      # share of each head's features that is rotated
    scaling: Literal["none", "linear", "llama3", "yarn", "dynamic", "longrope"] = "none"  # see above
    factor: float = 1.0        # how much longer the context became
    low_freq_factor: float = 1.0   # llama3 only
    high_freq_factor: float = 4.0  # llama3 only
    original_max_len: int = 8192   # llama3, yarn, dynamic, longrope: the pre-training context length
    beta_fast: float = 32.0        # yarn: pairs turning more often than this keep their frequency
    beta_slow: float = 1.0         # yarn: pairs turning less often than this are interpolated
    attention_factor: float | None = None  # yarn, longrope: cos/sin scale (None: from factor, see above)
    truncate: bool = True          # yarn: round the ramp's ends to whole pairs
    short_factor: tuple[float, ...] = ()  # longrope: pair i's divisor up to original_max_len
    long_factor: tuple[float, ...] = ()   # longrope: pair i's divisor beyond it
    pattern_base: tuple[float | None, ...] = ()  # per mask_pattern group: a plain-RoPE base, or null

    def __post_init__(self):
        if self.base <= 1:
            raise ValueError(f"base must be > 1, got {self.base}")
        if not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {self.fraction}")
        if self.factor <= 0:
            raise ValueError(f"factor must be > 0, got {self.factor}")
        if self.scaling == "llama3" and not self.high_freq_factor > self.low_freq_factor > 0:
            raise ValueError("llama3 scaling needs high_freq_factor > low_freq_factor > 0")
        if self.scaling == "longrope" and not (
                self.short_factor and len(self.short_factor) == len(self.long_factor)
                and min(self.short_factor + self.long_factor) > 0):
            raise ValueError("longrope scaling needs short_factor and long_factor: one positive number per "
                             "rotated pair each, of the same length")
        if any(b is not None and b <= 1 for b in self.pattern_base):
            raise ValueError(f"pattern_base entries must be > 1 or null, got {list(self.pattern_base)}")
        if (self.short_factor or self.long_factor) and self.scaling != "longrope":
            raise ValueError("short_factor and long_factor are longrope's; set scaling: longrope or drop them")


def rope_frequencies(dim: int, config: RopeConfig, device=None, seq_len: torch.Tensor | None = None
                     ) -> torch.Tensor:
    """``(dim/2,)`` angular frequency of each pair, ``base^(-2i/dim)``, rescaled by ``config.scaling``.
    ``seq_len``: the call's sequence length ``S`` (a 0-d integer tensor), for dynamic and longrope
    (None: a sequence within ``original_max_len``)."""
    inv_freq = 1.0 / (config.base ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
    if config.scaling in ("dynamic", "longrope"):
        L = config.original_max_len
        long = seq_len > L if seq_len is not None else torch.tensor(False, device=device)
        if config.scaling == "longrope":
            short_f, long_f = (torch.tensor(f, dtype=torch.float32, device=device)
                               for f in (config.short_factor, config.long_factor))
            # (dim/2,) one divisor per pair, chosen by the length (a tensor op: no host sync)
            return 1.0 / (torch.where(long, long_f, short_f) * config.base ** (
                torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
        if seq_len is None:
            return inv_freq
        S = torch.clamp(seq_len, min=L)  # float32 arithmetic, in transformers' order
        base = config.base * ((config.factor * S / L) - (config.factor - 1)) ** (dim / (dim - 2))
        scaled = 1.0 / (base ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
        return torch.where(long, scaled, inv_freq)  # (dim/2,)
    if config.scaling == "linear":
        return inv_freq / config.factor
    if config.scaling == "llama3":
        wavelen = 2 * math.pi / inv_freq
        slow = wavelen > config.original_max_len / config.low_freq_factor
        fast = wavelen < config.original_max_len / config.high_freq_factor
        scaled = torch.where(slow, inv_freq / config.factor, inv_freq)
        smooth = (config.original_max_len / wavelen - config.low_freq_factor) / (
            config.high_freq_factor - config.low_freq_factor)
        blended = (1 - smooth) * scaled / config.factor + smooth * scaled
        return torch.where(~slow & ~fast, blended, scaled)
    if config.scaling == "yarn":
        def pair(turns):  # the pair index that turns `turns` times over original_max_len
            return dim * math.log(config.original_max_len / (turns * 2 * math.pi)) / (2 * math.log(config.base))
        low, high = pair(config.beta_fast), pair(config.beta_slow)
        if config.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        high = high + 0.001 if low == high else high
        ramp = ((torch.arange(dim // 2, device=device, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
        return inv_freq / config.factor * ramp + inv_freq * (1 - ramp)  # (dim/2,) fast pairs kept
    return inv_freq


def rope_scale(config: RopeConfig) -> float:
    """The factor YaRN and LongRoPE apply to cos and sin (1 for the other scalings)."""
    if config.scaling not in ("yarn", "longrope"):
        return 1.0
    if config.attention_factor is not None:
        return config.attention_factor
    if config.factor <= 1:
        return 1.0
    if config.scaling == "longrope":
        return math.sqrt(1 + math.log(config.factor) / math.log(config.original_max_len))
    return 0.1 * math.log(config.factor) + 1.0


def rope_angles(pos: torch.Tensor, dim: int, base: float = 10000.0, *,
                config: RopeConfig | None = None) -> torch.Tensor:
    """``pos (B|1, T)`` -> angles ``(B|1, T, dim/2)``: position times each pair's frequency
    (``config`` adds the scaling; without it, plain RoPE with ``base``)."""
    config = config or RopeConfig(base=base)
    seq_len = pos.max() + 1 if config.scaling in ("dynamic", "longrope") and pos.numel() else None
    inv_freq = rope_frequencies(dim, config, pos.device, seq_len)
    return pos.to(torch.float32)[..., None] * inv_freq  # (B|1, T, dim/2)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Rotate the pairs of ``x (B, h, T, dim)`` by the angles whose cos/sin are ``(B|1, 1, T, dim/2)``."""
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]  # (B, h, T, dim/2) each: pairs (2i, 2i+1)
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).flatten(-2)
    a, b = x.chunk(2, dim=-1)  # pairs (i, i + dim/2)
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


class Rope(PositionScheme):
    acts_on_qk = True

    def __init__(self, config, ctx):
        super().__init__(config, ctx)
        rot = int(ctx.head_dim * config.fraction)
        self.rot_dim = rot - rot % 2  # an even number of rotated features
        if self.rot_dim < 2:
            raise zoo.SpecError(f"head_dim {ctx.head_dim} x fraction {config.fraction} leaves no "
                                f"feature pair to rotate", where="positions.fraction",
                                fix="raise fraction or head_dim")
        if config.scaling == "longrope" and len(config.short_factor) != self.rot_dim // 2:
            raise zoo.SpecError(f"longrope needs one factor per rotated pair ({self.rot_dim // 2}), got "
                                f"{len(config.short_factor)}", where="positions.short_factor",
                                fix=f"give {self.rot_dim // 2} short_factor and long_factor entries")
        groups = len(getattr(ctx, "mask_pattern", None) or ())  # a bare BuildContext (plots) has none
        if config.pattern_base and len(config.pattern_base) != groups:
            raise zoo.SpecError(f"pattern_base has {len(config.pattern_base)} entries for {groups} mask_pattern "
                                f"groups", where="positions.pattern_base",
                                fix="give one entry (a base, or null) per mask_pattern group")
        # group j -> the plain-RoPE config of its layers (groups keeping the main settings are absent)
        self.group_configs = {j: RopeConfig(base=b, interleaved=config.interleaved, fraction=config.fraction)
                              for j, b in enumerate(config.pattern_base) if b is not None}

    @property
    def length_dependent(self) -> bool:
        """Whether the tables depend on the whole call's length ``max(pos) + 1`` (dynamic, longrope),
        so a batch row computed alone (a ragged prefill) would rotate differently than in its batch."""
        return self.config.scaling in ("dynamic", "longrope")

    def qk_state(self, pos):
        """cos/sin tables ``(B|1, 1, T, rot_dim/2)`` (float32), shared by every layer; with
        ``pattern_base`` a third entry holds the tables of each group with its own base."""
        main = self._tables(pos, self.config)
        if not self.group_configs:
            return main
        return (*main, {j: self._tables(pos, c) for j, c in self.group_configs.items()})

    def group_state(self, state, group: int):
        """The tables of the layers of ``mask_pattern`` group ``group`` (the stack asks once per group)."""
        return state[2].get(group, state[:2]) if len(state) == 3 else state

    def _tables(self, pos, config):
        ang = rope_angles(pos, self.rot_dim, config=config)[:, None]  # (B|1, 1, T, rot/2)
        scale = rope_scale(config)
        return (ang.cos(), ang.sin()) if scale == 1.0 else (ang.cos() * scale, ang.sin() * scale)

    def rotate(self, q, k, state):
        cos, sin = state[0], state[1]  # a group's own tables arrive through group_state
        return self._rotate_one(q, cos, sin), self._rotate_one(k, cos, sin)

    def _rotate_one(self, x, cos, sin):
        r = self.rot_dim
        xr = rotate(x[..., :r].float(), cos, sin, self.config.interleaved).to(x.dtype)
        return xr if r == x.size(-1) else torch.cat([xr, x[..., r:]], dim=-1)  # (B, h, T, hd)


@zoo.hookimpl
def register_positions(register):
    register("rope", Rope, config=RopeConfig)

"""Figures for the CLI and the UI: attention heatmaps, layer x head grids, mask patterns, positional
encodings and the compute-cost curve.  Every function returns a matplotlib ``Figure`` (imported
lazily: ``import zoo`` never loads matplotlib) and never calls ``plt.show``; save with
:func:`save_figure`.

Chinese labels need a CJK font.  :func:`cjk_font` finds one: ``$ZOO_CJK_FONT`` (a font file), then
an installed Simplified-Chinese face (Noto Sans CJK SC from Debian's ``fonts-noto-cjk``, Source Han,
WenQuanYi, PingFang, ...), then the font zoo depends on through PyPI (``noto-cjk-sans-otc``, installed
with the ``ui`` / ``train`` / ``test`` extras, so no system font is needed), then well-known font
files and any font whose name says CJK.  Without one, figures still render but Chinese glyphs show as
boxes and a single warning names the package to install.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch

from .costs import crossover, forward_cost, human
from ..components import BuildContext, MaskContext
from ..errors import ZooError
from ..model.layers import make_parts
from ..registry import get_registry
from ..model.spec import parse_spec

_CANDIDATES = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc",
    "/System/Library/Fonts/PingFang.ttc",
    "C:/Windows/Fonts/msyh.ttc",
)
_PREFERRED = ("Noto Sans CJK SC", "Source Han Sans SC", "Noto Sans SC", "WenQuanYi Zen Hei",
              "WenQuanYi Micro Hei", "Microsoft YaHei", "PingFang SC", "SimHei", "Noto Sans CJK TC",
              "Noto Sans CJK JP")
_FONT: dict[str, Any] = {}


def cjk_font() -> str | None:
    """Register a CJK-capable font with matplotlib and return its family name (None if none)."""
    if "name" in _FONT:
        return _FONT["name"]
    from matplotlib import font_manager

    name = None
    env = os.environ.get("ZOO_CJK_FONT", "")
    installed = {f.name for f in font_manager.fontManager.ttflist}
    if not env:  # Simplified-Chinese faces first (a .ttc file's first face is the Japanese one)
        name = next((n for n in _PREFERRED if n in installed), None)
    for p in [env, _pypi_font()] + list(_CANDIDATES) if name is None else []:
        if p and Path(p).is_file():
            try:
                font_manager.fontManager.addfont(p)
                name = font_manager.FontProperties(fname=p).get_name()
                _FONT["file"] = p
                break
            except (OSError, RuntimeError, ValueError):
                continue
    if name is None:
        name = next((n for n in sorted(installed) if "CJK" in n), None)
    if name is None:
        warnings.warn("no CJK font found: Chinese labels will show as boxes; install "
                      "`pip install noto-cjk-sans-otc` (or Debian's fonts-noto-cjk), or set "
                      "ZOO_CJK_FONT=/path/to/font.ttc", stacklevel=2)
    _FONT["name"] = name
    return name


def _pypi_font() -> str:
    """The Noto Sans CJK collection shipped by the PyPI package ``noto-cjk-sans-otc`` ("" without it)."""
    try:
        import noto_cjk_sans_otc
    except ImportError:
        return ""
    return str(noto_cjk_sans_otc.FONT_PATH)


def _setup():
    """Point matplotlib's font list at the CJK font (figures are built without pyplot, so no GUI
    backend is ever touched)."""
    import matplotlib

    name = cjk_font()
    fams = ([name] if name else []) + ["DejaVu Sans"]
    matplotlib.rcParams["font.family"] = fams  # a list: missing glyphs fall back to the next font
    matplotlib.rcParams["axes.unicode_minus"] = False  # CJK fonts often lack U+2212


def _figure(w: float, h: float):
    from matplotlib.figure import Figure

    _setup()
    return Figure(figsize=(w, h), layout="constrained")


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> Path:
    """Write ``fig`` as PNG (or by the file's suffix) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


def _np(t, dims: tuple[int, ...] | None = None, where: str = "weights"):
    """``t`` (a tensor, an array or nested lists of numbers) as a float numpy array with one of
    ``dims`` dimensions; anything else is a ZooError naming ``where``."""
    if not isinstance(t, torch.Tensor):
        try:
            t = torch.as_tensor(t, dtype=torch.float32)
        except (TypeError, ValueError, RuntimeError, OverflowError):
            raise ZooError(f"expected a tensor of weights, got {type(t).__name__}", where=where,
                           fix="pass attention weights, e.g. cache['blocks.0.attn.hook_pattern'][0, 0]") from None
    if dims is not None and t.dim() not in dims or t.numel() == 0:
        raise ZooError(f"expected {' or '.join(map(str, dims or ()))}-D weights, got shape {tuple(t.shape)}",
                       where=where, fix="pass one head's (Tq, Tk) weights")
    return t.detach().float().cpu().numpy()


def _labels(ax, tokens_q, tokens_k, n_q, n_k):
    fs = 9 if max(n_q, n_k) <= 24 else 6
    if tokens_k is not None and n_k <= 64:
        ax.set_xticks(range(n_k), [repr(t)[1:-1] if t.strip() == "" else t for t in tokens_k],
                      rotation=90, fontsize=fs)
    if tokens_q is not None and n_q <= 64:
        ax.set_yticks(range(n_q), [repr(t)[1:-1] if t.strip() == "" else t for t in tokens_q],
                      fontsize=fs)


# ---------------------------------------------------------------------- attention
def attention_heatmap(weights, tokens: Sequence[str] | None = None,
                      key_tokens: Sequence[str] | None = None, title: str | None = None):
    """One head's weights ``(Tq, Tk)``: row = query (who looks), column = key (looked at)."""
    w = _np(weights, (2,), "attention_heatmap.weights")
    fig = _figure(1.2 + 0.32 * w.shape[1], 1.0 + 0.3 * w.shape[0])
    ax = fig.add_subplot()
    im = ax.imshow(w, cmap="viridis", vmin=0.0, vmax=max(float(w.max()), 1e-9))
    _labels(ax, tokens, key_tokens if key_tokens is not None else tokens, *w.shape)
    ax.set_xlabel("key 键")
    ax.set_ylabel("query 查询")
    ax.set_title(title or "attention weights 注意力权重")
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def attention_grid(weights, tokens: Sequence[str] | None = None, title: str | None = None,
                   batch: int = 0):
    """Every layer x head: ``weights (L, B, h, Tq, Tk)`` or ``(L, h, Tq, Tk)``, or a
    :class:`zoo.inside.trace.Trace` (its last stack's self-attention)."""
    if hasattr(weights, "attention_stack"):
        tokens = tokens if tokens is not None else weights.tokens
        weights = weights.attention_stack()
    w = _np(weights)
    if w.ndim == 5:
        w = w[:, batch]
    L, H = w.shape[:2]
    fig = _figure(1.0 + 2.0 * H, 0.6 + 2.0 * L)
    axes = fig.subplots(L, H, squeeze=False)
    for l in range(L):
        for h in range(H):
            ax = axes[l][h]
            ax.imshow(w[l, h], cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_xticks([])
            ax.set_yticks([])
            if l == 0:
                ax.set_title(f"head {h} 头", fontsize=9)
            if h == 0:
                ax.set_ylabel(f"layer {l} 层", fontsize=9)
    if tokens is not None and len(tokens) <= 16:
        _labels(axes[-1][0], tokens, tokens, w.shape[2], w.shape[3])
    fig.suptitle(title or "attention, layers x heads 各层各头的注意力")
    return fig


def expert_load(counts, title: str | None = None):
    """Router statistics of a mixture of experts: ``counts (L, E)`` tokens sent to each expert per
    layer (:meth:`zoo.inside.trace.Trace.expert_counts`), drawn as each layer's *share* of its routed
    tokens, so a balanced router is one flat colour at ``1/E``.  Each row is labelled with its
    imbalance, max share x E (1.0 = perfectly balanced, E = every token to one expert: the collapse
    the load-balancing loss fights); with at most 16 experts each cell shows its token count."""
    import numpy as np

    c = _np(counts)
    L, E = c.shape
    share = c / np.maximum(c.sum(1, keepdims=True), 1)  # (L, E)
    fig = _figure(2.6 + 0.45 * min(E, 64), 1.9 + 0.45 * L)
    ax = fig.add_subplot()
    im = ax.imshow(share, cmap="viridis", vmin=0.0, vmax=max(float(share.max()), 1.0 / E), aspect="auto")
    if E <= 16:
        for l in range(L):
            for e in range(E):
                ax.text(e, l, str(int(c[l, e])), ha="center", va="center", fontsize=8,
                        color="white" if share[l, e] < 0.5 * share.max() else "black")
    ax.set_xticks(range(E) if E <= 32 else range(0, E, 8))
    ax.set_yticks(range(L), [f"{l}  ({share[l].max() * E:.2f}×)" for l in range(L)], fontsize=8)
    ax.set_xlabel("expert 专家")
    ax.set_ylabel("layer 层")
    ax.set_title((title or f"router: share of tokens per expert 路由：各专家的词元份额") +
                 f"\nrow label: max share × E (1 = balanced, {E} = collapsed) 行标：最大份额 × E", fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


def mask_pattern(spec, seq_len: int = 16, role: str | None = None, *, q_offset: int = 0,
                 prefix_length: int | None = None, padding: Sequence[bool] | None = None):
    """The boolean mask a spec's rules produce (True = may attend, drawn light), as the stack
    builds it: composed rules, plus padding when ``padding`` (True = real token) is given."""
    spec = spec if hasattr(spec, "stack") else parse_spec(spec)
    role = role or spec.roles[-1]
    rules = make_parts(spec, role, get_registry()).masks()
    k_len = q_offset + seq_len
    pad = torch.tensor([list(padding)], dtype=torch.bool) if padding is not None else None
    ctx = MaskContext(q_len=seq_len, k_len=k_len, device=torch.device("cpu"), q_offset=q_offset,
                      key_padding=pad,
                      prefix_lengths=torch.tensor([prefix_length]) if prefix_length is not None else None)
    mask = torch.ones(seq_len, k_len, dtype=torch.bool)
    for rule in rules:
        m = rule(ctx)
        if m is not None:
            mask = mask & m.reshape(-1, seq_len, k_len)[0]
    if pad is not None:
        mask = mask & pad[0][None, :]
    fig = _figure(1.4 + 0.25 * k_len, 1.2 + 0.25 * seq_len)
    ax = fig.add_subplot()
    ax.imshow(_np(mask.float()), cmap="gray", vmin=0, vmax=1)
    ax.set_xlabel("key position 键位置")
    ax.set_ylabel("query position 查询位置")
    ax.set_yticks(range(seq_len), [str(q_offset + i) for i in range(seq_len)], fontsize=7)
    ax.set_xticks(range(k_len), [str(i) for i in range(k_len)], fontsize=7)
    names = " & ".join(str(m) for m in spec.stack(role).mask)
    ax.set_title(f"mask 掩码: {names}\n(white = may attend 白色=可以看到)", fontsize=10)
    fig.mask = mask  # the plotted values, for tests and callers
    return fig


# ---------------------------------------------------------------------- positions
def _position_scheme(kind: str, ctx, **params):
    """A registered position scheme on its own: plots read tables through the scheme's interface
    (``embed``, ``qk_state``/``rotate``, ``score_bias``), never by importing a plugin."""
    return get_registry().get("position", kind, where="plots").make(ctx, **params)


def sinusoid_waves(d_model: int = 64, max_len: int = 100, dims: Sequence[int] = (0, 2, 8, 16),
                   base: float = 10000.0):
    """The sinusoidal table: a few dimensions as waves over positions, and the whole table."""
    ctx = BuildContext.for_heads(1, d_model, max_len=max_len)
    scheme = _position_scheme("sinusoidal", ctx, base=base)
    with torch.no_grad():  # what the scheme adds to a zero embedding is its table
        table = _np(scheme.embed(torch.zeros(1, max_len, d_model), torch.arange(max_len)[None])[0])
    fig = _figure(10, 4)
    a, b = fig.subplots(1, 2)
    for d in dims:
        if d < d_model:
            a.plot(table[:, d], label=f"dim {d} ({'sin' if d % 2 == 0 else 'cos'})")
    a.set_xlabel("position 位置")
    a.set_title("sinusoidal encoding, per dimension 正弦位置编码")
    a.legend(fontsize=8)
    im = b.imshow(table.T, aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    b.set_xlabel("position 位置")
    b.set_ylabel("dimension 维度")
    b.set_title("PE[pos, dim]")
    fig.colorbar(im, ax=b, shrink=0.8)
    return fig


def rope_rotation(head_dim: int = 64, positions: int = 16, pairs: Sequence[int] = (0, 4, 16),
                  base: float = 10000.0):
    """RoPE: how pair ``i`` of a query/key is rotated by ``pos · θ_i``; fast pairs spin, slow pairs
    barely move.  Left: the point (1, 0) of each pair at positions 0..N-1; right: all angles."""
    import numpy as np  # here, like matplotlib: only when a figure is drawn (the `ui` extra)

    scheme = _position_scheme("rope", BuildContext.for_heads(1, head_dim, max_len=positions),
                              base=base)
    half = head_dim // 2
    x = torch.zeros(1, 1, positions, head_dim)
    x[..., :half] = 1.0  # the point (1, 0) in every pair (i, i + hd/2)
    with torch.no_grad():  # rotate it at each position through the scheme's own interface
        rot, _ = scheme.rotate(x, x, scheme.qk_state(torch.arange(positions)[None]))
    ang = _np(torch.atan2(rot[0, 0, :, half:], rot[0, 0, :, :half]))  # (T, hd/2), in (-π, π]

    fig = _figure(10, 4.5)
    a, b = fig.subplots(1, 2)
    t = np.linspace(0, 2 * np.pi, 100)
    a.plot(np.cos(t), np.sin(t), color="0.85", lw=1)
    for i in pairs:
        if i < ang.shape[1]:
            a.plot(np.cos(ang[:, i]), np.sin(ang[:, i]), "o-", ms=3, label=f"pair {i} 第{i}对")
    a.set_aspect("equal")
    a.set_title("RoPE rotation by position 旋转位置编码")
    a.legend(fontsize=8)
    im = b.imshow(np.mod(ang, 2 * np.pi).T, aspect="auto", cmap="twilight")
    b.set_xlabel("position 位置")
    b.set_ylabel("pair i 维度对")
    b.set_title("angle pos·θ_i (mod 2π) 旋转角")
    fig.colorbar(im, ax=b, shrink=0.8)
    return fig


def position_bias(spec, seq_len: int = 16, role: str | None = None, heads: Sequence[int] = (0, 1, 2, 3)):
    """The score bias of a bias-type scheme (ALiBi, T5 relative buckets) for a few heads."""
    spec = spec if hasattr(spec, "stack") else parse_spec(spec)
    role = role or spec.roles[-1]
    scheme = make_parts(spec, role, get_registry()).positions()
    if not type(scheme).acts_on_scores:
        raise ZooError(f"positions '{spec.stack(role).positions.kind}' adds no score bias",
                       where="positions", fix="use sinusoid_waves / rope_rotation for this scheme")
    pos = torch.arange(seq_len)[None]
    with torch.no_grad():
        bias = _np(scheme.score_bias(pos, pos)[0])  # (h, T, T)
    heads = [h for h in heads if h < bias.shape[0]]
    fig = _figure(1 + 3 * len(heads), 3.4)
    for j, h in enumerate(heads):
        ax = fig.add_subplot(1, len(heads), j + 1)
        im = ax.imshow(bias[h], cmap="magma")
        ax.set_title(f"head {h} 头", fontsize=9)
        ax.set_xlabel("key 键")
        if j == 0:
            ax.set_ylabel("query 查询")
        fig.colorbar(im, ax=ax, shrink=0.7)
    fig.suptitle(f"positional score bias 位置偏置: {spec.stack(role).positions}")
    return fig


# ---------------------------------------------------------------------- cost
def compute_cost_curve(model_or_spec, seq_lens: Sequence[int] | None = None, batch: int = 1):
    """FLOPs per forward vs sequence length, split into attention core (quadratic), projections and
    feed-forward (linear), with the crossover where the core overtakes the feed-forward block."""
    seq_lens = list(seq_lens or [2 ** k for k in range(4, 15)])
    rows = [forward_cost(model_or_spec, T, batch=batch) for T in seq_lens]
    core = [2 * r["attention_core"] for r in rows]
    proj = [2 * (r["attention"] - r["attention_core"]) for r in rows]
    ffn = [2 * r["ffn"] for r in rows]
    fig = _figure(7.5, 4.8)
    ax = fig.add_subplot()
    ax.loglog(seq_lens, core, "o-", label="attention core QKᵀ, AV 注意力核心 (∝T²)")
    ax.loglog(seq_lens, proj, "s-", label="attention projections 注意力投影 (∝T)")
    ax.loglog(seq_lens, ffn, "^-", label="feed-forward 前馈网络 (∝T)")
    cross = crossover(model_or_spec)["core"]
    ax.axvline(cross, color="0.4", ls="--", lw=1)
    ax.text(cross, min(min(core), min(ffn)), f" T*={cross:.0f}", fontsize=9)
    ax.set_xlabel("sequence length T 序列长度")
    ax.set_ylabel("FLOPs per forward 每次前向的浮点运算")
    ax.set_title(f"compute cost 计算量 (total at T={seq_lens[-1]}: {human(rows[-1]['total_flops'])}FLOPs)")
    ax.legend(fontsize=8)
    return fig


def timing(rows: Sequence[dict]):
    """Measured forward time beside the FLOPs-based estimate (rows from
    :func:`zoo.inside.costs.measure`); the gap is overhead and memory traffic, largest for small
    models and short sequences."""
    lens = [r["seq_len"] for r in rows]
    fig = _figure(6.5, 4.2)
    ax = fig.add_subplot()
    ax.loglog(lens, [r["measured_s"] * 1e3 for r in rows], "o-", label="measured 实测")
    ax.loglog(lens, [r["estimated_s"] * 1e3 for r in rows], "s--",
              label="estimate: FLOPs / matmul rate 估算")
    ax.set_xlabel("sequence length T 序列长度")
    ax.set_ylabel("ms per forward 每次前向毫秒")
    ax.set_title("time per forward 前向耗时")
    ax.legend(fontsize=8)
    return fig

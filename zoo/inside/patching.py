"""Activation patching, path patching and attribution patching (issue 26, goal 4).

The question patching answers: *which activations carry the information that makes the model's
answer differ between a clean prompt and a corrupted one?*  Run the corrupted prompt, put back one
activation from the clean run, and measure how much of the clean answer returns (``metric``: a
function of the logits, e.g. a logit difference).  The helpers follow TransformerLens'
``transformer_lens.patching`` (same shapes, same order of axes, same numbers on the same model;
tests/inside/test_patching.py checks it):

- :func:`patch_layers_positions`: one residual-stream (or sub-layer output) vector at a time,
  ``(L, T)``;
- :func:`patch_heads`: one head's output ``z`` at every position, ``(L, H)``;
- :func:`patch_heads_positions`: one head at one position, ``(L, T, H)``;
- :func:`patch_direct_path`: only the direct edge from head A into the queries (keys, values) of
  each later head B (TL's ``get_act_patch_direct_path``), ``(L, H)``;
- :func:`attribution_patch`: the first-order approximation of all of the above at the cost of one
  forward and one backward pass (Nanda, 2023): ``grad(metric) · (clean - corrupted)`` at the
  corrupted run.

Every function returns a tensor; :func:`patching_figure` draws one (matplotlib, imported then).
"""
from __future__ import annotations

from typing import Callable

import torch

from ..run.arguments import entry
from ..errors import ZooError
from .hooks import Hooks, act_name, run_with_cache, run_with_hooks

Metric = Callable[[torch.Tensor], torch.Tensor]
LAYER_POS = ("resid_pre", "resid_mid", "resid_post", "attn_out", "mlp_out")
HEAD_ACTS = ("z", "q", "k", "v", "pattern")


def _check(model, clean: torch.Tensor, corrupted: torch.Tensor, where: str) -> None:
    if model.spec.arch == "encoder_decoder":
        raise ZooError("patching helpers run one stack", where=where,
                       fix="use a decoder-only or encoder-only model")
    if clean.shape != corrupted.shape:
        raise ZooError(f"clean {tuple(clean.shape)} and corrupted {tuple(corrupted.shape)} differ in "
                       "shape", where=where, fix="give prompts with the same number of tokens")


def _clean_cache(model, clean, corrupted, where: str, act: str, acts: tuple, what: str = "activation"):
    """The checks every cache-based patcher makes, then the clean run's ``act`` at every layer:
    ``(clean, corrupted, names, cache)``."""
    clean, corrupted = _ids(clean), _ids(corrupted)
    _check(model, clean, corrupted, where)
    if act not in acts:
        raise ZooError(f"unknown {what} '{act}'", where=f"{where}.act", options=list(acts))
    names = [act_name(act, i) for i in range(model.spec.num_layers)]
    _, cache = run_with_cache(model, clean, names_filter=names)
    return clean, corrupted, names, cache


def _ids(x) -> torch.Tensor:
    x = torch.as_tensor(x)
    return x[None] if x.dim() == 1 else x


def _scalar(metric: Metric, logits: torch.Tensor) -> float:
    return float(metric(logits))


@entry
@torch.no_grad()
def patch_layers_positions(model, clean, corrupted, metric: Metric, act: str = "resid_pre") -> torch.Tensor:
    """``(L, T)``: the metric of the corrupted run with ``act`` (``resid_pre``, ``resid_mid``,
    ``attn_out``, ``mlp_out``, ``resid_post``) of layer ``l`` at position ``t`` from the clean run
    (TL's ``get_act_patch_resid_pre`` and siblings)."""
    clean, corrupted, names, cache = _clean_cache(model, clean, corrupted, "patch_layers_positions", act,
                                                  LAYER_POS)
    L, T = model.spec.num_layers, clean.size(1)
    out = torch.zeros(L, T)
    for i, name in enumerate(names):
        for t in range(T):
            def put(x, hook, src=cache[name], t=t):
                x = x.clone()
                x[:, t] = src[:, t]
                return x

            out[i, t] = _scalar(metric, run_with_hooks(model, corrupted, fwd_hooks=[(name, put)]))
    return out


def _head_axis(act: str) -> int:
    return 1 if act == "pattern" else 2  # pattern (B, h, Tq, Tk); q/k/v/z (B, T, h, hd)


@entry
@torch.no_grad()
def patch_heads(model, clean, corrupted, metric: Metric, act: str = "z") -> torch.Tensor:
    """``(L, H)``: one head's ``act`` (``z`` output, ``q``, ``k``, ``v`` or ``pattern``) at every
    position from the clean run (TL's ``get_act_patch_attn_head_out_all_pos`` and siblings)."""
    clean, corrupted, names, cache = _clean_cache(model, clean, corrupted, "patch_heads", act, HEAD_ACTS,
                                                  "head activation")
    L = model.spec.num_layers
    H = cache[names[0]].size(_head_axis(act))
    out = torch.zeros(L, H)
    ax = _head_axis(act)
    for i, name in enumerate(names):
        for h in range(H):
            def put(x, hook, src=cache[name], h=h):
                x = x.clone()
                x.select(ax, h).copy_(src.select(ax, h))
                return x

            out[i, h] = _scalar(metric, run_with_hooks(model, corrupted, fwd_hooks=[(name, put)]))
    return out


@entry
@torch.no_grad()
def patch_heads_positions(model, clean, corrupted, metric: Metric, act: str = "z") -> torch.Tensor:
    """``(L, T, H)``: one head at one (query) position (TL's ``get_act_patch_attn_head_out_by_pos``)."""
    clean, corrupted, names, cache = _clean_cache(model, clean, corrupted, "patch_heads_positions", act,
                                                  HEAD_ACTS, "head activation")
    L, T = model.spec.num_layers, clean.size(1)
    H = cache[names[0]].size(_head_axis(act))
    out = torch.zeros(L, T, H)
    for i, name in enumerate(names):
        for t in range(T):
            for h in range(H):
                def put(x, hook, src=cache[name], t=t, h=h):
                    x = x.clone()
                    if act == "pattern":
                        x[:, h, t] = src[:, h, t]
                    else:
                        x[:, t, h] = src[:, t, h]
                    return x

                out[i, t, h] = _scalar(metric, run_with_hooks(model, corrupted, fwd_hooks=[(name, put)]))
    return out


def _head_write(model, cache, layer: int, head: int) -> torch.Tensor:
    """``(B, T, D)``: what one head writes into the residual stream, ``z_h @ W_O[h]`` (no bias)."""
    attn = model.decoder.blocks[layer].attn if hasattr(model, "decoder") else model.encoder.blocks[layer].attn
    z = cache[act_name("z", layer)]  # (B, T, h, hd_v)
    w = attn.out.weight.view(-1, attn.h, z.size(-1))[:, head]  # (D, hd_v)
    return z[:, :, head] @ w.T


@entry
@torch.no_grad()
def patch_direct_path(model, clean, corrupted, metric: Metric, src_layer: int, src_head: int,
                      component: str = "q") -> torch.Tensor:
    """``(L, H)``: the metric when only the direct edge from head A = ``(src_layer, src_head)`` into
    the ``component`` (``q``, ``k`` or ``v``) input of each later head B carries A's clean output;
    zero for layers ``<= src_layer``.

    As TL's ``get_act_patch_direct_path``: B's input changes by ``norm(Δ) @ W_comp[B]`` where
    ``Δ`` is A's clean minus corrupted write, pushed through B's ``ln1`` frozen at the corrupted
    run's scale (centred for LayerNorm, times the norm's weight: TL folds both into its weights)."""
    clean, corrupted = _ids(clean), _ids(corrupted)
    _check(model, clean, corrupted, "patch_direct_path")
    if component not in ("q", "k", "v"):
        raise ZooError(f"unknown component '{component}'", where="patch_direct_path.component",
                       options=["q", "k", "v"])
    st = model.decoder if hasattr(model, "decoder") else model.encoder
    L, H = model.spec.num_layers, st.blocks[0].attn.h
    if not all(hasattr(b.attn, "qkv") for b in st.blocks):
        kind = model.spec.stack("decoder" if hasattr(model, "decoder") else "encoder").attention.kind
        raise ZooError(f"the direct path needs q, k and v as one linear map of each block's normalised "
                       f"input (attn.qkv); attention '{kind}' computes them another way (MLA: keys and "
                       f"values through a normalised latent), so an edge cannot be added to its input",
                       where="patch_direct_path", options=["patch_heads", "patch_heads_positions",
                                                           "attribution_patch"],
                       fix="patch the heads' q/k/v activations instead (patch_heads(..., act='q'))")
    if not 0 <= src_layer < L or not 0 <= src_head < H:
        raise ZooError(f"no head ({src_layer}, {src_head})", where="patch_direct_path",
                       fix=f"layers 0..{L - 1}, heads 0..{H - 1}")
    zs = act_name("z", src_layer)
    scales = [act_name("scale", i) for i in range(L)]
    _, c_clean = run_with_cache(model, clean, names_filter=[zs])
    _, c_corr = run_with_cache(model, corrupted, names_filter=[zs] + scales)
    delta = _head_write(model, c_clean, src_layer, src_head) - _head_write(model, c_corr, src_layer, src_head)
    out = torch.zeros(L, H)
    for lb in range(src_layer + 1, L):
        attn, norm = st.blocks[lb].attn, st.blocks[lb].attn_res.norm
        d = delta - delta.mean(-1, keepdim=True) if type(norm).__name__ == "LayerNorm" else delta
        d = d / c_corr[scales[lb]] * norm.weight  # (B, T, D)
        h, hk, hd = attn.h, attn.h_kv, attn.hd
        rows = {"q": slice(0, h * hd), "k": slice(h * hd, (h + hk) * hd),
                "v": slice((h + hk) * hd, (h + 2 * hk) * hd)}[component]
        W = attn.qkv.weight[rows].view(-1, hd, attn.qkv.in_features)  # (heads, hd, D)
        for hb in range(H):
            idx = hb if component == "q" else hb // (h // hk)
            add = d @ W[idx].T  # (B, T, hd)

            def put(x, hook, add=add, idx=idx):
                x = x.clone()
                x[:, :, idx] += add
                return x

            out[lb, hb] = _scalar(metric, run_with_hooks(model, corrupted, fwd_hooks=[(act_name(component, lb), put)]))
    return out


@entry
def attribution_patch(model, clean, corrupted, metric: Metric, act: str = "z") -> torch.Tensor:
    """The linear approximation of patching: ``metric(corrupted) + grad · (clean - corrupted)``
    minus ``metric(corrupted)``, summed per head (``act`` in ``z, q, k, v``: ``(L, T, H)``) or per
    vector (``resid_pre`` ...: ``(L, T)``).  One clean forward, one corrupted forward and backward.

    Returns the estimated *change* of the metric; real patching's change is
    ``patch_*(...) - metric(corrupted)``."""
    clean, corrupted = _ids(clean), _ids(corrupted)
    _check(model, clean, corrupted, "attribution_patch")
    if act not in LAYER_POS + ("z", "q", "k", "v"):
        raise ZooError(f"unknown activation '{act}'", where="attribution_patch.act",
                       options=list(LAYER_POS + ("z", "q", "k", "v")))
    L = model.spec.num_layers
    names = [act_name(act, i) for i in range(L)]
    with torch.no_grad():
        _, c_clean = run_with_cache(model, clean, names_filter=names)
    with torch.enable_grad(), Hooks(model, (), names, detach=False) as h:
        value = metric(model(corrupted))
        acts = [h.records[n][0][1] for n in names]
        grads = torch.autograd.grad(value, acts, allow_unused=True)
    out = []
    for n, a, g in zip(names, acts, grads):
        g = torch.zeros_like(a) if g is None else g
        contrib = (g * (c_clean[n] - a.detach()))  # (B, T, ...)
        contrib = contrib.sum(-1).sum(0)  # (T,) or (T, H)
        out.append(contrib)
    return torch.stack(out).detach()


def patching_figure(values: torch.Tensor, *, x_labels=None, y_labels=None, title: str = "",
                    x_title: str = "position", y_title: str = "layer"):
    """A diverging heatmap of a ``(rows, cols)`` patching result (matplotlib ``Figure``)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    v = values.detach().float().cpu()
    if v.dim() != 2:
        raise ZooError(f"a figure shows a 2-d result, got {tuple(v.shape)}", where="patching_figure",
                       fix="pick a slice, e.g. values[:, :, head]")
    lim = float(v.abs().max()) or 1.0
    fig, ax = plt.subplots(figsize=(max(4.5, 1.6 + 0.4 * v.size(1)), max(2.6, 1.4 + 0.4 * v.size(0))))
    im = ax.imshow(v.numpy(), cmap="RdBu", vmin=-lim, vmax=lim, aspect="auto")
    ax.set_xticks(range(v.size(1)), x_labels if x_labels is not None else range(v.size(1)), rotation=90)
    ax.set_yticks(range(v.size(0)), y_labels if y_labels is not None else range(v.size(0)))
    ax.set_xlabel(x_title)
    ax.set_ylabel(y_title)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    return fig

"""Look inside a model: capture named activations in one forward, and change them for experiments.

    tr = zoo.trace(model, ids)                          # or text="...", tokenizer=tok
    tr["decoder.blocks.0.attn.weights"]                 # (B, h, Tq, Tk) softmax weights
    tr.attention(0)                                     # the same, by layer
    tr.logits                                           # equals model(ids)
    zoo.trace(model, ids, ablate={"decoder.blocks.1.attn": [2]})       # zero head 2 of layer 1
    zoo.trace(model, ids, patch={"decoder.blocks.0.resid_ffn": other})  # activation patching

The lectures' names, over the model's hook points: a trace is one hooked forward
(:mod:`zoo.inside.hooks`, the same taps as ``run_with_cache``), each name below read from -- and
each edit applied at -- the hook point on the right.  ``S`` is the stack, ``encoder`` or
``decoder``; ``p = S.blocks.{i}``; ``A`` is ``attn`` for self-attention and ``cross`` for
cross-attention; hook names are the model's own (an encoder-decoder prefixes them with ``S.``).

==================================  ======================================  =====================================
trace name                          hook point                              what
==================================  ======================================  =====================================
``S.token_embeddings``              ``hook_embed`` / the embedding scale    the rows of the token table ``(B, T, D)``
``S.embeddings`` (editable)         ``blocks.0.hook_resid_pre``             what enters block 0 (tokens, positions, norm)
``p.A.q`` / ``.k``                  ``A.hook_rot_q`` / ``hook_rot_k``       per-head queries, keys as the kernel sees them
                                    (cross-attention: ``hook_q``/``hook_k``) ``(B, h, T, hd)``
``p.A.v``                           ``A.hook_v``                            per-head values ``(B, h_kv, T, hd)``
``p.A.bias``                        ``A.hook_score_bias``                   the positional score bias (ALiBi, T5)
``p.A.scores_masked``               ``A.hook_attn_scores``                  ``q·kᵀ · scale + bias``, ``-inf`` where masked
``p.A.weights``                     ``A.hook_pattern``                      softmax weights ``(B, h, Tq, Tk)``
``p.A.heads`` (editable)            ``A.hook_z``                            each head's output ``(B, h, Tq, hd)``
``p.A.out`` (editable)              ``hook_attn_out`` / ``hook_cross_out``  the sub-layer output
``p.resid_attn`` (editable)         ``hook_resid_mid``                      the residual stream after attention
``p.resid_cross`` (editable)        ``hook_resid_mid_cross``                ... after cross-attention
``p.ffn.out`` (editable)            ``hook_mlp_out``                        the feed-forward output
``p.resid_ffn`` (editable)          ``hook_resid_post``                     the residual stream after the block
``p.ffn.experts``                   ``mlp.hook_expert_indices``             mixture of experts: each token's ``(B, T, k)``
``p.ffn.expert_counts``                                                     tokens per expert ``(E,)``, padding excluded
``NORM.scale`` / ``NORM.out_rms``   ``NORM.hook_scale``, ``hook_normalized`` per token ``(B, T)``: what every norm
                                                                            divides by, the RMS of what it gives
``S.output``                        ``ln_final`` (its normalised stream     the stack's final hidden states
                                    through its weight and bias)
==================================  ======================================  =====================================

``NORM`` is the norm's hook name with its stack (``decoder.blocks.0.ln1``, ``decoder.ln_final``).
Scores and weights come from the kernel itself where it shows them; softmax attention that does not
(``sdpa``, ``naive``) runs as the registry's ``eager`` kernel for the traced call (the same
function, so the logits equal the plain forward's), and a kernel that forms no softmax scores
(linear attention) is traced without them.  The model is never changed: the taps belong to the call.
"""
from __future__ import annotations

import fnmatch
from collections import OrderedDict
from typing import Any, Callable, Iterable

import torch
from torch import nn

from ..components import Norm
from ..errors import ZooError, did_you_mean
from ..guard.run_budget import check_trace
from ..io.tokenizers import get_tokenizer
from ..run.arguments import token_ids, zoo_model
from .hooks import Hooks, hook_names, points

Edit = Callable[[torch.Tensor], torch.Tensor]
#: capture points whose value an edit may replace
EDITABLE = ("embeddings", "heads", "out", "resid_attn", "resid_cross", "resid_ffn")


class Trace:
    """The result of :func:`trace`: ``logits`` plus ``acts`` (name -> tensor, in forward order)."""

    def __init__(self, model, logits, acts, tokens=None, norm_stats=None):
        self.model = model
        self.logits = logits
        self.acts: "OrderedDict[str, torch.Tensor]" = acts
        self.tokens = tokens
        self.norm_stats: dict[str, dict[str, float]] = norm_stats or {}

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self.acts:
            raise ZooError(f"nothing captured under '{name}'", where="trace", fix=did_you_mean(
                name, self.acts) or "see trace.names() for what was captured")
        return self.acts[name]

    def __contains__(self, name: str) -> bool:
        return name in self.acts

    def names(self, pattern: str = "*") -> list[str]:
        """Captured names matching a glob pattern (``"*.attn.weights"``)."""
        return [n for n in self.acts if fnmatch.fnmatch(n, pattern)]

    def attention(self, layer: int, stack: str | None = None, cross: bool = False) -> torch.Tensor:
        """Softmax weights ``(B, h, Tq, Tk)`` of one layer (default stack: the model's last)."""
        stack = stack or self.model.spec.roles[-1]
        return self[f"{stack}.blocks.{layer}.{'cross' if cross else 'attn'}.weights"]

    def attention_stack(self, stack: str | None = None, cross: bool = False) -> torch.Tensor:
        """All layers' weights stacked: ``(L, B, h, Tq, Tk)``."""
        stack = stack or self.model.spec.roles[-1]
        kind = "cross" if cross else "attn"
        return torch.stack([self.acts[n] for n in self.names(f"{stack}.blocks.*.{kind}.weights")])

    def expert_counts(self, stack: str | None = None) -> torch.Tensor:
        """Router statistics of a mixture-of-experts model: tokens sent to each expert, per layer,
        ``(L, E)`` (each real token counts once per expert it chose: rows sum to tokens x top_k)."""
        stack = stack or self.model.spec.roles[-1]
        names = self.names(f"{stack}.blocks.*.ffn.expert_counts")
        if not names:
            raise ZooError(f"the {stack} stack has no mixture-of-experts layer", where="trace.expert_counts",
                           fix="router statistics exist for models whose ffn is a mixture of experts (moe)")
        return torch.stack([self.acts[n] for n in names])

    def summary(self, batch: int = 0, top_k: int = 5) -> dict[str, Any]:
        """Compact, JSON-ready numbers for one batch row: attention weights per layer and head, the
        residual stream's norm per position after every sub-layer, norm statistics, and the top
        predictions at the last position (used by ``zoo inspect``)."""
        out: dict[str, Any] = {"tokens": self.tokens, "attention": {}, "residual_norms": {},
                               "norm_stats": self.norm_stats}
        for name in self.names("*.weights"):
            out["attention"][name] = _round(self.acts[name][batch])
        for name in self.names("*.resid_*"):
            out["residual_norms"][name] = _round(self.acts[name][batch].norm(dim=-1))
        counts = self.names("*.ffn.expert_counts")
        if counts:  # router statistics of the whole batch
            out["expert_counts"] = {name: self.acts[name].tolist() for name in counts}
        if self.logits is not None and self.logits.dim() == 3:
            probs = self.logits[batch, -1].float().softmax(-1)
            p, i = probs.topk(min(top_k, probs.numel()))
            out["next_token"] = [{"id": int(a), "p": round(float(b), 5)} for a, b in zip(i, p)]
            tok = getattr(self.model, "tokenizer", None)
            if tok is not None:
                for row in out["next_token"]:
                    row["text"] = tok.decode([row["id"]])
        return out


def _round(t: torch.Tensor, nd: int = 5):
    return torch.round(t.detach().float().cpu(), decimals=nd).tolist()


def _apply(edit: Edit | torch.Tensor, x: torch.Tensor, name: str) -> torch.Tensor:
    y = edit(x) if callable(edit) else edit.to(device=x.device, dtype=x.dtype)
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        raise ZooError(f"the edit of '{name}' must return a tensor of shape {tuple(x.shape)}, got "
                       f"{getattr(y, 'shape', type(y).__name__)}", where=f"trace.edits[{name!r}]")
    return y


def heads_ablation(heads: Iterable[int]) -> Edit:
    """An edit zeroing the given heads of a ``(B, h, T, hd)`` head output."""
    idx = sorted(set(int(h) for h in heads))

    def edit(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[:, idx] = 0.0
        return x

    return edit


# ---------------------------------------------------------------------- the names, over the hooks
def _heads(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2)  # (B, T, h, ·) <-> (B, h, T, ·)


class _View:
    """One trace name over one hook point: ``get`` turns the hook's value into the trace's,
    ``put`` a trace-shaped replacement back into the hook's."""

    def __init__(self, hook: str, get=None, put=None):
        self.hook, self.get, self.put = hook, get or (lambda t: t), put or (lambda t: t)


def _views(model) -> "OrderedDict[str, _View]":
    """trace name -> the hook point it reads, for every name this model's forward provides."""
    spec = model.spec
    have = set(hook_names(model))
    views: "OrderedDict[str, _View]" = OrderedDict()
    emb = {"decoder": "embed", "encoder": "embed"} if len(spec.roles) == 1 else \
        {"encoder": "enc_embed", "decoder": "dec_embed"}
    for stack in spec.roles:
        h = f"{stack}." if len(spec.roles) > 1 else ""
        e, st = getattr(model, emb[stack]), getattr(model, stack)
        scale = e.scale
        views[f"{stack}.token_embeddings"] = _View(h + "hook_embed", (lambda t, s=scale: t / s) if scale != 1.0 else None)
        views[f"{stack}.embeddings"] = _View(h + "blocks.0.hook_resid_pre")
        for i, block in enumerate(st.blocks):
            b, p = f"{h}blocks.{i}.", f"{stack}.blocks.{i}."
            for A, out in (("attn", "hook_attn_out"), ("cross", "hook_cross_out")):
                if getattr(block, A) is None:
                    continue
                a = b + A + "."
                rot = a + "hook_rot_q" in have
                views[p + A + ".q"] = _View(a + ("hook_rot_q" if rot else "hook_q"), _heads, _heads)
                views[p + A + ".k"] = _View(a + ("hook_rot_k" if rot else "hook_k"), _heads, _heads)
                views[p + A + ".v"] = _View(a + "hook_v", _heads, _heads)
                views[p + A + ".bias"] = _View(a + "hook_score_bias")
                views[p + A + ".scores_masked"] = _View(a + "hook_attn_scores")
                views[p + A + ".weights"] = _View(a + "hook_pattern")
                views[p + A + ".heads"] = _View(a + "hook_z", _heads, _heads)
                views[p + A + ".out"] = _View(b + out)
                views[p + ("resid_attn" if A == "attn" else "resid_cross")] = _View(
                    b + ("hook_resid_mid" if A == "attn" else "hook_resid_mid_cross"))
            views[p + "ffn.out"] = _View(b + "hook_mlp_out")
            views[p + "resid_ffn"] = _View(b + "hook_resid_post")
            views[p + "ffn.experts"] = _View(b + "mlp.hook_expert_indices")
    return OrderedDict((n, v) for n, v in views.items() if v.hook in have)


def _norms(model) -> list[tuple[str, str, nn.Module]]:
    """``(trace name, hook prefix, norm)`` of every norm whose steps the model shows."""
    one = len(model.spec.roles) == 1
    out = []
    for module, prefix, names in points(model):
        if isinstance(module, Norm) and "hook_normalized" in names:
            out.append(((model.spec.roles[0] + ".") * one + prefix[:-1], prefix, module))
    return out


def _output_view(model, stack: str) -> tuple[str, Callable] | None:
    """``S.output``: the final norm's output from its normalised stream, or the last block's
    stream when the stack ends without a norm (post-norm)."""
    h = f"{stack}." if len(model.spec.roles) > 1 else ""
    st = getattr(model, stack)
    if isinstance(st.final_norm, Norm):
        names = st.final_norm.hook_points()
        if "hook_normalized" not in names:
            return None
        return h + "ln_final.hook_normalized", lambda n, norm=st.final_norm: norm.affine(n, n)
    return f"{h}blocks.{len(st.blocks) - 1}.hook_resid_post", lambda t: t


# ---------------------------------------------------------------------- trace
@torch.no_grad()
def trace(model: nn.Module, ids: Any = None, *, text: str | None = None, tokenizer=None,
          tgt_ids: Any = None, edits: dict[str, Edit | torch.Tensor] | None = None,
          ablate: dict[str, Iterable[int]] | Iterable[tuple[int, int]] | None = None,
          patch: dict[str, torch.Tensor] | None = None, **forward_kwargs: Any) -> Trace:
    """Run ``model`` once on ``ids`` (or ``text``) and capture its named activations.

    ``tgt_ids``: decoder input of an encoder-decoder model (default: the source).  ``edits``: name ->
    function (or replacement tensor) applied where that activation is produced, for names ending in
    one of :data:`EDITABLE`.  ``ablate``: ``{"decoder.blocks.1.attn": [0, 3]}`` (or ``[(layer,
    head), ...]`` for the last stack) zeroes those heads' outputs before the output projection.
    ``patch``: name -> tensor replacing that activation (activation patching).  Other keyword
    arguments go to the model's forward.  Returns a :class:`Trace`.
    """
    zoo_model(model, "trace.model")
    ids, tokens = _input_ids(model, ids, text, tokenizer)
    if tgt_ids is not None:
        tgt_ids = token_ids(model, tgt_ids, "trace.tgt_ids")
    check_trace(model, ids, tgt_ids)  # what it keeps fits?
    all_edits = _all_edits(model.spec, edits, ablate, patch)
    views = _views(model)
    unknown = [n for n in all_edits if n not in views]
    if unknown:
        raise ZooError(f"no capture point named {unknown}", where="trace.edits",
                       fix=did_you_mean(unknown[0], list(views)) or
                       "names look like 'decoder.blocks.0.attn.heads'; see trace(...).names()")
    fwd_hooks = [(views[n].hook, _edit_hook(n, e, views[n])) for n, e in all_edits.items()]
    norms = _norms(model)
    outputs = {s: _output_view(model, s) for s in model.spec.roles}
    wanted = {v.hook for v in views.values()} | {p + n for _, p, _ in norms for n in ("hook_scale", "hook_normalized")} \
        | {o[0] for o in outputs.values() if o is not None}
    with Hooks(model, fwd_hooks, lambda n: n in wanted) as h:
        if model.spec.arch == "encoder_decoder":
            logits = model(ids, tgt_ids if tgt_ids is not None else ids, **forward_kwargs)
        else:
            logits = model(ids, **forward_kwargs)
    got = {n: recs[-1][1] for n, recs in h.records.items()}
    acts: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    order = {n: i for i, n in enumerate(h.records)}  # the order the forward computed them
    for name, view in sorted(views.items(), key=lambda kv: order.get(kv[1].hook, len(order))):
        if view.hook in got:
            acts[name] = view.get(got[view.hook])
    for stack, o in outputs.items():
        if o is not None and o[0] in got:
            acts[f"{stack}.output"] = o[1](got[o[0]])
    _router_counts(model, acts, forward_kwargs.get("attention_mask"))
    norm_stats = _norm_stats(norms, got, acts)
    return Trace(model, logits, acts, tokens, norm_stats)


def _edit_hook(name: str, edit, view: _View):
    def hook(x, _hook):
        return view.put(_apply(edit, view.get(x), name))

    hook.__qualname__ = f"trace.edits[{name!r}]"
    return hook


def _router_counts(model, acts, real) -> None:
    """``ffn.expert_counts (E,)`` beside every ``ffn.experts (B, T, k)``, over the real tokens (the
    traced ``attention_mask``; every position without one)."""
    for name in [n for n in acts if n.endswith(".ffn.experts")]:
        experts = acts[name]
        stack, rest = name.split(".blocks.", 1)
        moe = getattr(model, stack).blocks[int(rest.split(".")[0])].ffn
        if real is not None and torch.as_tensor(real).shape == experts.shape[:2]:
            experts = experts[torch.as_tensor(real, device=experts.device).bool()]  # (N_real, k)
        acts[name.removesuffix("experts") + "expert_counts"] = torch.bincount(
            experts.reshape(-1), minlength=moe.config.experts)


def _norm_stats(norms, got, acts) -> dict[str, dict[str, float]]:
    """Per norm: what it divides each token by (``scale``) and the RMS of its output, per token into
    ``acts`` and averaged into the returned statistics."""
    stats = {}
    for name, prefix, norm in norms:
        n = got.get(prefix + "hook_normalized")
        if n is None:
            continue
        out = norm.affine(n, n).float()
        out_rms = out.pow(2).mean(-1).sqrt()
        acts[f"{name}.out_rms"] = out_rms
        row = {}
        if prefix + "hook_scale" in got:
            scale = got[prefix + "hook_scale"].float().squeeze(-1)
            acts[f"{name}.scale"] = scale
            row["scale"] = float(scale.mean())
        stats[name] = {**row, "out_rms": float(out_rms.mean()), "out_mean": float(out.mean()),
                       "out_std": float(out.std())}
    return stats


def _input_ids(model, ids, text, tokenizer) -> tuple[torch.Tensor, list[str] | None]:
    """``(ids (B, T) on the model's device, token strings or None)`` from ``ids`` or ``text``."""
    tokens = None
    if text is not None:
        tok = get_tokenizer(model, tokenizer)
        id_list = tok.encode(text)
        tokens = [tok.decode([i]) for i in id_list]
        ids = torch.tensor([id_list])
    if ids is None:
        raise ZooError("nothing to trace", where="trace", fix="pass ids or text=...")
    return token_ids(model, ids, "trace.ids"), tokens


def _all_edits(spec, edits, ablate, patch) -> dict[str, Edit | torch.Tensor]:
    """Edits, patches and head ablations as one ``name -> edit`` map, every name editable."""
    all_edits: dict[str, Edit | torch.Tensor] = dict(edits or {})
    all_edits.update(patch or {})
    if ablate:
        items = ablate.items() if isinstance(ablate, dict) else _pairs(ablate, spec.roles[-1])
        for prefix, heads in items:
            all_edits[f"{prefix}.heads"] = heads_ablation(heads)
    for name in all_edits:
        if not name.endswith(EDITABLE):
            raise ZooError(f"'{name}' cannot be edited", where="trace.edits",
                           options=[f"*.{e}" for e in EDITABLE],
                           fix="edit one of the listed capture points")
    return all_edits


def _pairs(pairs, stack):
    out: dict[str, list[int]] = {}
    for layer, head in pairs:
        out.setdefault(f"{stack}.blocks.{layer}.attn", []).append(head)
    return out.items()

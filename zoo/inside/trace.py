"""Look inside a model: capture named activations in one forward, and change them for experiments.

    tr = zoo.trace(model, ids)                          # or text="...", tokenizer=tok
    tr["decoder.blocks.0.attn.weights"]                 # (B, h, Tq, Tk) softmax weights
    tr.attention(0)                                     # the same, by layer
    tr.logits                                           # equals model(ids)
    zoo.trace(model, ids, ablate={"decoder.blocks.1.attn": [2]})       # zero head 2 of layer 1
    zoo.trace(model, ids, patch={"decoder.blocks.0.resid_ffn": other})  # activation patching

What is captured (``S`` is the stack, ``encoder`` or ``decoder``; ``p = S.blocks.{i}``;
``A`` is ``attn`` for self-attention and ``cross`` for cross-attention):

=================================  ==============================================================
``S.token_embeddings``             the rows of the token table ``(B, T, D)``
``S.embeddings``                   what enters block 0: scaled tokens + positions (+ norm)
``p.A.q`` / ``.k`` / ``.v``        per-head queries, keys, values as the kernel sees them (after RoPE)
``p.A.bias``                       the positional score bias (ALiBi, T5), when there is one
``p.A.scores``                     ``q·kᵀ · scale + bias`` before masking ``(B, h, Tq, Tk)``
``p.A.scores_masked``              the same with ``-inf`` where the mask forbids attention
``p.A.weights``                    softmax weights per head ``(B, h, Tq, Tk)``, rows sum to 1
``p.A.heads``                      each head's output ``weights @ v`` ``(B, h, Tq, hd)`` (editable)
``p.A.out``                        the sub-layer output after the output projection (editable)
``p.resid_attn`` / ``resid_cross`` the residual stream after each sub-layer (editable)
``p.ffn.out`` / ``p.resid_ffn``    feed-forward output and the residual stream after it (editable)
``p.ffn.experts``                  mixture of experts: the experts each token went to ``(B, T, k)``
``p.ffn.expert_counts``            mixture of experts: tokens per expert ``(E,)``, padding excluded
``NORM.in_rms`` / ``NORM.out_rms`` per-token RMS entering / leaving every norm layer ``(B, T)``
``S.output``                       the stack's final hidden states
=================================  ==============================================================

The eager kernel shows its steps (:meth:`~zoo.components.AttentionKernel.steps`), so the trace
records them as computed, without a second attention pass.  Softmax kernels that do not (``sdpa``,
``naive``) are replaced by the registry's ``eager`` kernel for the inspected run only (same
function, so the logits equal the plain forward's); the model is left exactly as it was, even when
the run raises.  A kernel that is not softmax attention
(``capabilities.exact`` False, e.g. linear attention) is never swapped: its trace records q, k, v
and the head outputs (and weights if it returns any), but no scores.
"""
from __future__ import annotations

import fnmatch
from collections import OrderedDict
from typing import Any, Callable, Iterable

import torch
from torch import nn

from ..run.arguments import token_ids, zoo_model
from ..guard.run_budget import check_trace
from ..components import AttentionKernel, BuildContext, Norm
from ..errors import ZooError, did_you_mean
from ..model.layers import AttnArgs, call_kernel, kernel_steps
from ..model.models import Embeddings
from ..registry import get_registry
from ..io.tokenizers import get_tokenizer

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


# ---------------------------------------------------------------------- recording attention
class _AttentionRecorder:
    """Stands in for one ``Attention.run_kernel`` during a trace: runs the kernel (``eager`` for softmax
    attention whose kernel does not show its steps), records its inputs and every intermediate the
    kernel's :meth:`~zoo.components.AttentionKernel.steps` returns, and applies edits to the
    per-head outputs."""

    def __init__(self, kernel: nn.Module, name: str, sink: dict, edits: dict[str, Edit]):
        self.kernel, self.name, self.sink, self.edits = kernel, name, sink, edits

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: AttnArgs) -> torch.Tensor:
        n, sink = self.name, self.sink
        sink[f"{n}.q"], sink[f"{n}.k"], sink[f"{n}.v"] = q, k, v
        if a.bias is not None:
            sink[f"{n}.bias"] = a.bias
        steps = kernel_steps(self.kernel, q, k, v, a)  # the engine's contract, as in a model
        if steps is None:  # not softmax attention: its own output (and weights, if any)
            out, weights = call_kernel(self.kernel, q, k, v, a, need_weights=True)
            if weights is not None:
                sink[f"{n}.weights"] = weights
        else:
            for key in ("scores", "scores_masked", "weights"):
                sink[f"{n}.{key}"] = steps[key]
            out = steps["heads"]
        if f"{n}.heads" in self.edits:
            out = _apply(self.edits[f"{n}.heads"], out, f"{n}.heads")
        sink[f"{n}.heads"] = out  # (B, h, Tq, hd)
        return out


def _apply(edit: Edit | torch.Tensor, x: torch.Tensor, name: str) -> torch.Tensor:
    y = edit(x) if callable(edit) else edit.to(device=x.device, dtype=x.dtype)
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        raise ZooError(f"the edit of '{name}' must return a tensor of shape {tuple(x.shape)}, got "
                       f"{getattr(y, 'shape', type(y).__name__)}", where=f"trace.edits[{name!r}]")
    return y


def _eager_for(attn: nn.Module) -> nn.Module:
    """``kernel`` itself if it shows its steps or is not softmax attention (swapping would change
    the model; such a kernel's trace has q/k/v, head outputs and any weights it returns, but no
    scores), else the registry's eager kernel with the same sizes and scale."""
    kernel = attn.kernel
    if type(kernel).steps is not AttentionKernel.steps or not kernel.capabilities.exact:
        return kernel
    ctx = BuildContext.for_heads(attn.h, attn.hd, num_kv_heads=attn.h_kv, scale=kernel.scale,
                                 dropout=kernel.dropout_p)
    eager = get_registry().get("attention", "eager", where="trace").make(ctx)
    eager.train(kernel.training)
    return eager


def heads_ablation(heads: Iterable[int]) -> Edit:
    """An edit zeroing the given heads of a ``(B, h, T, hd)`` head output."""
    idx = sorted(set(int(h) for h in heads))

    def edit(x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[:, idx] = 0.0
        return x

    return edit


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
    rec = _Recording(all_edits)
    rec.real = forward_kwargs.get("attention_mask")  # router statistics count real tokens only
    try:
        rec.install(model)
        if model.spec.arch == "encoder_decoder":
            logits = model(ids, tgt_ids if tgt_ids is not None else ids, **forward_kwargs)
        else:
            logits = model(ids, **forward_kwargs)
    finally:
        rec.remove()
    unknown = [n for n in all_edits if n not in rec.acts]
    if unknown:
        raise ZooError(f"no capture point named {unknown}", where="trace.edits",
                       fix="names look like 'decoder.blocks.0.attn.heads'; see trace(...).names()")
    return Trace(model, logits, rec.acts, tokens, rec.norm_stats)


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


class _Recording:
    """The hooks of one trace: installed on a model, recording into ``acts`` (name -> tensor, in
    forward order) and ``norm_stats``, applying ``edits`` where an activation is produced; removed
    afterwards, leaving the model as it was."""

    def __init__(self, edits: dict[str, Edit | torch.Tensor]):
        self.edits = edits
        self.acts: "OrderedDict[str, torch.Tensor]" = OrderedDict()
        self.norm_stats: dict[str, dict[str, float]] = {}
        self.handles: list = []
        self.swaps: list[nn.Module] = []  # attention layers whose run_kernel is a recorder
        self.wrapped: list[nn.Module] = []  # placements whose exit is wrapped
        self.stack = None  # the stack whose embeddings ran last (names the token embeddings)
        self.real: Any = None  # (B, T) 1 for real tokens (the traced attention_mask), or None

    def edited(self, name: str, x: torch.Tensor) -> torch.Tensor:
        if name in self.edits:
            x = _apply(self.edits[name], x, name)
        self.acts[name] = x
        return x

    def install(self, model) -> None:
        spec = model.spec
        self.stack = spec.roles[0]
        emb_stack = {"embed": spec.roles[0], "enc_embed": "encoder", "dec_embed": "decoder"}
        for mname, mod in model.named_modules():
            if isinstance(mod, Embeddings):
                self._embeddings(mod, emb_stack.get(mname, mname))
            elif isinstance(mod, Norm):
                self.handles.append(mod.register_forward_hook(
                    lambda m, args, out, name=mname: self._norm(name, args[0], out)))
        if hasattr(model, "tok_emb"):
            self.handles.append(model.tok_emb.register_forward_hook(
                lambda m, a, out: self.acts.__setitem__(f"{self.stack}.token_embeddings", out)))
        for stack in spec.roles:
            st = getattr(model, stack)
            for i, block in enumerate(st.blocks):
                self._block(block, f"{stack}.blocks.{i}")
            self.handles.append(st.final_norm.register_forward_hook(
                lambda m, a, out, n=f"{stack}.output": self.acts.__setitem__(n, out)))

    def _embeddings(self, mod: nn.Module, stack: str) -> None:
        def pre(m, args):
            self.stack = stack

        def post(m, args, out):
            return self.edited(f"{stack}.embeddings", out)

        self.handles += [mod.register_forward_pre_hook(pre), mod.register_forward_hook(post)]

    def _norm(self, name: str, x: torch.Tensor, out: torch.Tensor) -> None:
        rms_in = x.float().pow(2).mean(-1).sqrt()
        rms_out = out.float().pow(2).mean(-1).sqrt()
        self.acts[f"{name}.in_rms"], self.acts[f"{name}.out_rms"] = rms_in, rms_out
        self.norm_stats[name] = {"in_rms": float(rms_in.mean()), "out_rms": float(rms_out.mean()),
                                 "out_mean": float(out.float().mean()),
                                 "out_std": float(out.float().std())}

    def _block(self, block: nn.Module, p: str) -> None:
        """Each sub-layer of one block: its output, its residual sum and (attention) its kernel."""
        for sub, res, resname in (("attn", "attn_res", "resid_attn"),
                                  ("cross", "cross_res", "resid_cross"),
                                  ("ffn", "ffn_res", "resid_ffn")):
            module = getattr(block, sub)
            if module is None:
                continue
            if sub != "ffn":
                self.swaps.append(module)
                module.run_kernel = _AttentionRecorder(_eager_for(module), f"{p}.{sub}", self.acts,
                                                       self.edits)
            self.handles.append(module.register_forward_hook(
                lambda m, a, out, n=f"{p}.{sub}.out": self.edited(n, out)))
            if sub == "ffn" and hasattr(module, "routing"):  # a mixture of experts: its router's choices
                self.handles.append(module.register_forward_hook(
                    lambda m, a, out, n=f"{p}.ffn": self._router(n, m)))
            placement = getattr(block, res)
            orig = placement.exit

            def exit_(x, y, orig=orig, n=f"{p}.{resname}"):
                return self.edited(n, orig(x, y))

            placement.exit = exit_
            self.wrapped.append(placement)

    def _router(self, name: str, moe: nn.Module) -> None:
        """``experts (B, T, k)`` the module routed each token to, and the tokens per expert ``(E,)``
        over the real tokens (the traced ``attention_mask``; every position without one)."""
        experts = moe.routing  # (B, T, k)
        self.acts[f"{name}.experts"] = experts
        real = self.real
        if real is not None and torch.as_tensor(real).shape == experts.shape[:2]:
            experts = experts[torch.as_tensor(real, device=experts.device).bool()]  # (N_real, k)
        self.acts[f"{name}.expert_counts"] = torch.bincount(experts.reshape(-1), minlength=moe.expert_counts.numel())

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        for module in self.swaps:
            del module.run_kernel
        for placement in self.wrapped:
            del placement.exit


def _pairs(pairs, stack):
    out: dict[str, list[int]] = {}
    for layer, head in pairs:
        out.setdefault(f"{stack}.blocks.{layer}.attn", []).append(head)
    return out.items()

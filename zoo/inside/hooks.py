"""Hook points: a stable name on every activation, ``run_with_hooks`` and ``run_with_cache``.

TransformerLens (TL) gives interpretability research its vocabulary: every activation of a model
has a name (``blocks.0.attn.hook_pattern``), a hook is a function ``fn(activation, hook)`` that may
return a replacement, and ``run_with_cache`` returns every activation by name.  zoo speaks the same
vocabulary on *every* architecture it assembles or converts::

    logits, cache = model.run_with_cache(ids)                   # (B, T, V), ActivationCache
    cache["blocks.0.attn.hook_pattern"]                         # (B, h, Tq, Tk)
    cache["pattern", 0]                                         # the same, TL's shorthand
    logits = model.run_with_hooks(ids, fwd_hooks=[("blocks.*.attn.hook_z", zero_head_3)])
    with model.hooks(fwd_hooks=...):                            # context-managed, any calls inside
        model.generate(ids, 8)

**Names.**  A decoder-only or encoder-only model uses TL's names unchanged (see :func:`hook_names`
and docs/INTERP.md for the table); an encoder-decoder prefixes each stack (``encoder.`` /
``decoder.``) and its decoder blocks add the cross-attention (``blocks.i.cross.hook_q`` ...,
``blocks.i.hook_cross_out``, ``blocks.i.hook_resid_mid_cross``).  Shapes follow TL: ``hook_q/k/v/z``
are ``(B, T, h, hd)`` (``h_kv`` heads for k and v), ``hook_attn_scores`` / ``hook_pattern`` ``(B,
h, Tq, Tk)``, ``hook_result`` ``(B, T, h, D)`` (each head's output projected: computed only when
asked for), the residual stream ``(B, T, D)``, ``ln*.hook_scale`` ``(B, T, 1)``.

**Zero cost when unused.**  Nothing is installed on the model until a hooked call starts: the
points a call needs are put in place (forward hooks, and instance-level ``forward`` overrides that
repeat the engine's code with the hook calls in between) and removed when it ends, even when it
raises.  A model outside ``run_with_hooks`` is byte-for-byte the model that was built, so its speed,
its state-dict keys and ``torch.compile`` are untouched (benchmarks/hooks_zero_cost.py measures it).

**Positions under a KV cache.**  Every hook is told where its activation sits: ``hook.offset`` is
the index in the whole sequence of the first position the activation holds (0 for a full forward;
during cached generation, the number of tokens already cached), and ``hook.seq_dim`` the axis of
positions.  So a hook that edits sequence position ``p`` (see :func:`edit_positions`) edits it
exactly once, in whichever decoding step ``p`` is computed, and the per-step activations line up
into one sequence (``model.generate(..., return_cache=True)``).
"""
from __future__ import annotations

import contextlib
import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import nn

from ..components import Norm, repeat_kv
from ..errors import ZooError, did_you_mean
from ..model.layers import Attention, Block, call_kernel, kernel_steps
from ..registry import get_registry

HookFn = Callable[[torch.Tensor, "Hook"], "torch.Tensor | None"]

#: TL's short names (``utils.get_act_name``) -> the name inside a block (or at the top).
SHORT_NAMES = {
    "embed": "hook_embed", "pos_embed": "hook_pos_embed", "resid_pre": "hook_resid_pre",
    "resid_mid": "hook_resid_mid", "resid_post": "hook_resid_post", "attn_out": "hook_attn_out",
    "mlp_out": "hook_mlp_out", "q": "attn.hook_q", "k": "attn.hook_k", "v": "attn.hook_v",
    "rot_q": "attn.hook_rot_q", "rot_k": "attn.hook_rot_k", "attn_scores": "attn.hook_attn_scores",
    "scores": "attn.hook_attn_scores", "pattern": "attn.hook_pattern", "attn": "attn.hook_pattern",
    "z": "attn.hook_z", "result": "attn.hook_result", "pre": "mlp.hook_pre",
    "pre_linear": "mlp.hook_pre_linear", "post": "mlp.hook_post", "scale": "ln_final.hook_scale",
    "normalized": "ln_final.hook_normalized",
}
_TOP_LEVEL = {"embed", "pos_embed", "scale", "normalized"}
#: names whose positions run along axis 2 (queries of ``(B, h, Tq, Tk)``); all others: axis 1
_QUERY_AXIS2 = ("hook_attn_scores", "hook_pattern")


def act_name(name: str, layer: int | None = None, stack: str = "") -> str:
    """TL's ``utils.get_act_name``: ``act_name("pattern", 0) == "blocks.0.attn.hook_pattern"``.
    ``stack``: ``"encoder"`` / ``"decoder"`` for an encoder-decoder model."""
    prefix = f"{stack}." if stack else ""
    if name not in SHORT_NAMES:
        return name
    full = SHORT_NAMES[name]
    if name in _TOP_LEVEL and layer is None:
        return prefix + full
    if layer is None:
        raise ZooError(f"'{name}' lives in a block: give the layer", where="act_name",
                       fix=f"act_name({name!r}, 0)")
    if name in ("scale", "normalized"):
        full = "ln1." + full.split(".", 1)[1]
    return f"{prefix}blocks.{layer}.{full}"


@dataclass
class Hook:
    """What a hook function is told besides the activation: its ``name``, the sequence index
    ``offset`` of the activation's first position, and ``seq_dim``, the axis of positions."""

    name: str
    offset: int = 0
    seq_dim: int = 1

    def positions(self, x: torch.Tensor) -> range:
        """The sequence indices the activation ``x`` holds along :attr:`seq_dim`."""
        return range(self.offset, self.offset + x.size(self.seq_dim))

    def layer(self) -> int | None:
        m = re.search(r"blocks\.(\d+)\.", self.name)
        return int(m.group(1)) if m else None


def edit_positions(positions: int | Iterable[int], fn: Callable[[torch.Tensor], torch.Tensor]) -> HookFn:
    """A hook that applies ``fn`` to the slices at absolute sequence ``positions`` only (each
    ``(B, ...)`` without the position axis), wherever they appear: in a full forward, in the
    prompt's forward or in the decoding step that computes them (never twice)."""
    wanted = [positions] if isinstance(positions, int) else list(positions)

    def hook_fn(x: torch.Tensor, hook: Hook) -> torch.Tensor | None:
        here = [p - hook.offset for p in wanted if hook.offset <= p < hook.offset + x.size(hook.seq_dim)]
        if not here:
            return None
        x = x.clone()
        for i in here:
            sl = x.select(hook.seq_dim, i)
            sl.copy_(fn(sl))
        return x

    return hook_fn


# ---------------------------------------------------------------------- the names of a model
def _stack_prefix(model, stack: str) -> str:
    return f"{stack}." if len(model.spec.roles) > 1 else ""


def _norm_names(placement: nn.Module, base: str) -> list[tuple[str, nn.Module]]:
    """``(name, norm)`` for the norms a placement owns: ``norm`` is ``base`` (``ln1``), any other
    norm attribute ``base_attr`` (sandwich's second norm: ``ln1_post``, say)."""
    out = []
    for attr, mod in placement.named_children():
        if isinstance(mod, Norm):
            out.append((base if attr == "norm" else f"{base}_{attr}", mod))
    return out


def _scale_eps(norm: nn.Module) -> tuple[str, float] | None:
    """``("layernorm" | "rmsnorm", eps)`` for norms whose scale TL defines, else None."""
    kind = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}.get(type(norm).__name__)
    eps = getattr(getattr(norm, "config", None), "eps", None)
    return (kind, float(eps)) if kind and eps is not None else None


def _points(model) -> list[tuple[str, str, Any]]:
    """Every hook point of ``model`` in forward order: ``(name, where, module)`` where ``where``
    says how it is installed (``embed``, ``norm``, ``block``, ``attn``, ``mlp``, ``unembed``)."""
    pts: list[tuple[str, str, Any]] = []
    spec = model.spec
    emb = {"decoder": "embed", "encoder": "embed"} if len(spec.roles) == 1 else \
        {"encoder": "enc_embed", "decoder": "dec_embed"}
    for stack in spec.roles:
        p = _stack_prefix(model, stack)
        e = getattr(model, emb[stack])
        pts.append((p + "hook_embed", "embed", e))
        if e.embeds_positions:
            pts.append((p + "hook_pos_embed", "embed", e))
        if e.types is not None:
            pts.append((p + "hook_token_type_embed", "embed", e))
        if e.has_norm:
            pts += _norm_points(p + "embed.ln", e.norm)
        st = getattr(model, stack)
        for i, block in enumerate(st.blocks):
            b = f"{p}blocks.{i}."
            pts.append((b + "hook_resid_pre", "block", block))
            for base, res, attn, out in (("ln1", "attn_res", "attn", "hook_attn_out"),
                                         ("lnc", "cross_res", "cross", "hook_cross_out")):
                if getattr(block, attn) is None:
                    continue
                for name, norm in _norm_names(getattr(block, res), b + base):
                    pts += _norm_points(name, norm)
                pts += _attn_points(b + attn + ".", getattr(block, attn))
                pts.append((b + out, "block", block))
                if not block.parallel:
                    pts.append((b + ("hook_resid_mid" if attn == "attn" else "hook_resid_mid_cross"),
                                "block", block))
            for name, norm in _norm_names(block.ffn_res, b + "ln2"):
                pts += _norm_points(name, norm)
            ffn = block.ffn
            if _linear(ffn, "up") and _linear(ffn, "down"):
                if _linear(ffn, "gate"):
                    pts += [(b + "mlp.hook_pre", "mlp", ffn), (b + "mlp.hook_pre_linear", "mlp", ffn)]
                else:
                    pts.append((b + "mlp.hook_pre", "mlp", ffn))
                pts.append((b + "mlp.hook_post", "mlp", ffn))
            pts += [(b + "hook_mlp_out", "block", block), (b + "hook_resid_post", "block", block)]
        if isinstance(st.final_norm, Norm):
            pts += _norm_points(p + "ln_final", st.final_norm)
    if getattr(model, "lm_head", None) is not None:
        pts += [("unembed.hook_in", "unembed", model.lm_head), ("unembed.hook_out", "unembed", model.lm_head)]
    return pts


def _linear(mod: nn.Module, attr: str) -> bool:
    return isinstance(getattr(mod, attr, None), nn.Linear)


def _norm_points(name: str, norm: nn.Module) -> list[tuple[str, str, Any]]:
    pts = [(name + ".hook_scale", "norm", norm)] if _scale_eps(norm) else []
    return pts + [(name + ".hook_normalized", "norm", norm)]


def _attn_points(a: str, attn: Attention) -> list[tuple[str, str, Any]]:
    if not isinstance(attn, Attention):  # a kernel's own layer (MLA): what it hands its kernel
        return [(a + n, "attn", attn) for n in ("hook_q", "hook_k", "hook_v", "hook_attn_scores",
                                                "hook_pattern", "hook_z")]
    names = ["hook_q", "hook_k", "hook_v"]
    if attn.q_norm is not None:
        names += ["q_ln.hook_normalized", "k_ln.hook_normalized"]
    if not attn.is_cross:
        names += ["hook_rot_q", "hook_rot_k"]
    names += ["hook_attn_scores", "hook_pattern", "hook_z", "hook_result"]
    return [(a + n, "attn", attn) for n in names]


def hook_names(model) -> list[str]:
    """Every hook point of ``model``, in forward order.  (``hook_rot_q/k`` exist on every
    self-attention; they equal ``hook_q/k`` when the positions do not rotate q and k.)"""
    return [n for n, _, _ in _points(model)]


# ---------------------------------------------------------------------- the cache
class ActivationCache(dict):
    """``name -> tensor``, as TL's ``ActivationCache``: also indexable as ``cache["pattern", 0]``."""

    def __init__(self, data=(), model=None):
        super().__init__(data)
        self.model = model

    def __getitem__(self, key):
        if isinstance(key, tuple):
            key = act_name(*key)
        if not dict.__contains__(self, key):
            raise ZooError(f"nothing cached under '{key}'", where="cache",
                           fix=did_you_mean(key, list(self)) or "see list(cache) for the names cached")
        return dict.__getitem__(self, key)

    def stack(self, short: str, stack: str = "") -> torch.Tensor:
        """One activation of every layer stacked: ``(L, ...)``."""
        names = [n for n in self if re.fullmatch(re.escape(act_name(short, 0, stack)).replace(
            r"blocks\.0\.", r"blocks\.\d+\."), n)]
        return torch.stack([self[n] for n in names])


# ---------------------------------------------------------------------- one hooked session
def _matcher(spec) -> Callable[[str], bool]:
    if callable(spec):
        return spec
    if isinstance(spec, str):
        return (lambda n: fnmatch.fnmatchcase(n, spec)) if any(c in spec for c in "*?[") else (lambda n: n == spec)
    if isinstance(spec, (list, tuple, set)):
        ms = [_matcher(s) for s in spec]
        return lambda n: any(m(n) for m in ms)
    raise ZooError(f"a hook target must be a name, a glob pattern or a function, got {type(spec).__name__}",
                   where="fwd_hooks", fix='("blocks.0.attn.hook_pattern", fn) or ("*hook_z", fn)')


class Hooks:
    """The hooks of one session on one model: ``with Hooks(model, fwd_hooks, cache_filter): ...``.

    ``fwd_hooks``: ``[(name | glob | predicate, fn), ...]``; ``fn(activation, hook)`` returns a
    replacement of the same shape or None.  ``cache_filter``: which names to record into
    :attr:`records` (each a list of ``(offset, tensor)``, one per forward that computed it)."""

    def __init__(self, model, fwd_hooks: Iterable = (), cache_filter=None, detach: bool = True):
        self.model = model
        self.detach = detach
        names = hook_names(model)
        self.fns: dict[str, list[HookFn]] = {}
        for target, fn in fwd_hooks or ():
            m = _matcher(target)
            hit = [n for n in names if m(n)]
            if not hit:
                t = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
                raise ZooError(f"no hook point matches {t!r}", where="fwd_hooks",
                               fix=did_you_mean(str(t), names) or "see zoo.inside.hooks.hook_names(model)")
            if not callable(fn):
                raise ZooError(f"the hook for {target!r} is not callable", where="fwd_hooks",
                               fix="give fn(activation, hook) -> tensor or None")
            for n in hit:
                self.fns.setdefault(n, []).append(fn)
        keep = _matcher(cache_filter) if cache_filter is not None else None
        self.cached = {n for n in names if keep(n)} if keep is not None else set()
        self.active = set(self.fns) | self.cached
        self.records: dict[str, list[tuple[int, torch.Tensor]]] = {}
        self.offset: dict[str, int] = {}
        self.last_call: dict[str, Any] = {}
        self._undo: list[Callable[[], None]] = []

    # -- emitting
    def emit(self, name: str, x: torch.Tensor, stack: str) -> torch.Tensor:
        if name not in self.active:
            return x
        off = self.offset.get(stack, 0)
        hook = Hook(name, off, 2 if name.endswith(_QUERY_AXIS2) else 1)
        for fn in self.fns.get(name, ()):
            y = fn(x, hook)
            if y is not None:
                if not isinstance(y, torch.Tensor) or y.shape != x.shape:
                    raise ZooError(f"the hook on '{name}' must return None or a tensor of shape "
                                   f"{tuple(x.shape)}, got {getattr(y, 'shape', type(y).__name__)}",
                                   where=f"fwd_hooks[{name!r}]")
                x = y
        if name in self.cached:
            self.records.setdefault(name, []).append((off, x.detach() if self.detach else x))
        return x

    def wants(self, prefix: str) -> bool:
        return any(n.startswith(prefix) for n in self.active)

    # -- installing
    def __enter__(self) -> "Hooks":
        try:
            self._install()
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._remove()

    def _set(self, obj, attr: str, value) -> None:
        """An instance attribute shadowing the class's (``forward``), deleted on removal."""
        setattr(obj, attr, value)
        self._undo.append(lambda: obj.__dict__.pop(attr, None))

    def _handle(self, h) -> None:
        self._undo.append(h.remove)

    def _remove(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _install(self) -> None:
        model, spec = self.model, self.model.spec
        if not self.active:
            return
        # where the sequence starts: the cache handed to the decoder (or 0)
        if spec.arch == "encoder_decoder":
            dec = model.decode

            def decode(*args, **kwargs):
                cache = kwargs.get("cache", args[4] if len(args) > 4 else None)
                self.offset["decoder"] = cache.length if cache is not None else 0
                self.last_call = {"args": args, "kwargs": kwargs, "cache": cache}
                return dec(*args, **kwargs)

            enc = model.encode

            def encode(*args, **kwargs):
                self.offset["encoder"] = 0
                return enc(*args, **kwargs)

            self._set(model, "decode", decode)
            self._set(model, "encode", encode)
        else:
            stack = spec.roles[0]

            def pre(mod, args, kwargs):
                cache = kwargs.get("cache", args[2] if len(args) > 2 and stack == "decoder" else None)
                self.offset[stack] = cache.length if cache is not None else 0
                self.last_call = {"args": args, "kwargs": kwargs, "cache": cache}

            self._handle(model.register_forward_pre_hook(pre, with_kwargs=True))
        by_module: dict[int, tuple[str, Any, set[str]]] = {}
        for name, where, mod in _points(model):
            if name in self.active:
                by_module.setdefault(id(mod), (where, mod, set()))[2].add(name)
        owner = {}
        for s in spec.roles:
            for m in getattr(model, s).modules():
                owner[id(m)] = s
        emb = {"embed": spec.roles[0], "enc_embed": "encoder", "dec_embed": "decoder"}
        for attr, s in emb.items():
            if hasattr(model, attr):
                for m in getattr(model, attr).modules():
                    owner[id(m)] = s
        for where, mod, names in by_module.values():
            s = owner.get(id(mod), spec.roles[-1])
            getattr(self, f"_install_{where}")(mod, names, s)

    def _install_embed(self, e, names: set[str], stack: str) -> None:
        p = _stack_prefix(self.model, stack)
        emit = self.emit

        def forward(ids, pos, tokens, positions, token_type_ids=None):  # zoo.model.models.Embeddings
            x = tokens(ids)  # (B, T, D)
            if e.scale != 1.0:
                x = x * e.scale
            x = emit(p + "hook_embed", x, stack)
            if e.types is not None:
                tt = token_type_ids if token_type_ids is not None else torch.zeros_like(ids)
                x = x + emit(p + "hook_token_type_embed", e.types(tt), stack)
            if e.embeds_positions:
                xp = positions.embed(x, pos)
                pe = xp - x  # the positional contribution, (B|1, T, D)
                pe2 = emit(p + "hook_pos_embed", pe, stack)
                x = xp if pe2 is pe else x + pe2
            if e.has_norm:
                x = e.norm(x)
            return e.drop(x) if e.has_dropout and e.training else x

        self._set(e, "forward", forward)

    def _install_norm(self, norm, names: set[str], stack: str) -> None:
        scale_name = next((n for n in names if n.endswith(".hook_scale")), None)
        out_name = next((n for n in names if n.endswith(".hook_normalized")), None)
        if scale_name:
            kind, eps = _scale_eps(norm)

            def pre(mod, args):
                x = args[0]
                xc = x - x.mean(-1, keepdim=True) if kind == "layernorm" else x
                scale = (xc.pow(2).mean(-1, keepdim=True) + eps).sqrt()  # (B, T, 1)
                # read-only: the norm computes its own output (edit hook_normalized to change it)
                self.emit(scale_name, scale, stack)
            self._handle(norm.register_forward_pre_hook(pre))
        if out_name:
            self._handle(norm.register_forward_hook(lambda m, a, out: self.emit(out_name, out, stack)))

    def _install_mlp(self, ffn, names: set[str], stack: str) -> None:
        b = next(iter(names)).rsplit("mlp.", 1)[0] + "mlp."
        first = ffn.gate if _linear(ffn, "gate") else ffn.up
        if b + "hook_pre" in names:
            self._handle(first.register_forward_hook(lambda m, a, out: self.emit(b + "hook_pre", out, stack)))
        if b + "hook_pre_linear" in names:
            self._handle(ffn.up.register_forward_hook(
                lambda m, a, out: self.emit(b + "hook_pre_linear", out, stack)))
        if b + "hook_post" in names:
            self._handle(ffn.down.register_forward_pre_hook(
                lambda m, a: (self.emit(b + "hook_post", a[0], stack),)))

    def _install_unembed(self, head, names: set[str], stack: str) -> None:
        if "unembed.hook_in" in names:
            self._handle(head.register_forward_pre_hook(
                lambda m, a: (self.emit("unembed.hook_in", a[0], "decoder"),)))
        if "unembed.hook_out" in names:
            self._handle(head.register_forward_hook(
                lambda m, a, out: self.emit("unembed.hook_out", out, "decoder")))

    def _install_block(self, block: Block, names: set[str], stack: str) -> None:
        b = next(iter(names)).split("blocks.", 1)[0]
        i = next(int(n.split("blocks.", 1)[1].split(".")[0]) for n in names)
        b = f"{b}blocks.{i}."
        emit = self.emit

        def forward(x, a, cross=None, cache=None):  # zoo.model.layers.Block.forward, with hook points
            drop = block.drop if block.has_dropout and block.training else (lambda t: t)
            x = emit(b + "hook_resid_pre", x, stack)
            if block.parallel:
                y = emit(b + "hook_attn_out", block.attn(block.attn_res.enter(x), a, cache), stack)
                f = emit(b + "hook_mlp_out", block.ffn(block.ffn_res.enter(x)), stack)
                return emit(b + "hook_resid_post", block.ffn_res.exit(block.attn_res.exit(x, drop(y)), drop(f)), stack)
            y = emit(b + "hook_attn_out", block.attn(block.attn_res.enter(x), a, cache), stack)
            x = emit(b + "hook_resid_mid", block.attn_res.exit(x, drop(y)), stack)
            if block.cross is not None:
                y = emit(b + "hook_cross_out", block.cross(block.cross_res.enter(x), cross, cache), stack)
                x = emit(b + "hook_resid_mid_cross", block.cross_res.exit(x, drop(y)), stack)
            y = emit(b + "hook_mlp_out", block.ffn(block.ffn_res.enter(x)), stack)
            return emit(b + "hook_resid_post", block.ffn_res.exit(x, drop(y)), stack)

        self._set(block, "forward", forward)

    def _install_attn(self, attn: Attention, names: set[str], stack: str) -> None:
        n0 = next(iter(names))
        a_ = n0[:n0.rindex("hook_")] if "_ln." not in n0 else n0[:n0.index("q_ln.") if "q_ln." in n0 else n0.index("k_ln.")]
        emit, fns = self.emit, self.fns
        need_steps = bool(names & {a_ + "hook_attn_scores", a_ + "hook_pattern"})
        kernel = _eager_for(attn) if need_steps else attn.kernel
        editable = isinstance(kernel, get_registry().get("attention", "eager", where="hooks").cls)
        want_result = a_ + "hook_result" in names
        if not isinstance(attn, Attention):  # a kernel's own layer (MLA): hooks at its kernel call
            self._install_kernel_call(attn, a_, stack, kernel, need_steps, editable)
            return

        def forward(x, a, cache=None):  # zoo.model.layers.Attention.forward, with hook points
            B, T, _ = x.shape
            h, h_kv, hd = attn.h, attn.h_kv, attn.hd
            if a.memory is None:
                qkv = attn.qkv(x).view(B, T, h + 2 * h_kv, hd)  # (B, T, h + 2 h_kv, hd)
                q, k, v = qkv.split_with_sizes([h, h_kv, h_kv], dim=2)  # (B, T, h|h_kv, hd)
                q, k, v = (emit(a_ + "hook_q", q, stack), emit(a_ + "hook_k", k, stack),
                           emit(a_ + "hook_v", v, stack))
                q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, h, T, hd)
                if attn.q_norm is not None:
                    q = emit(a_ + "q_ln.hook_normalized", attn.q_norm(q).transpose(1, 2), stack).transpose(1, 2)
                    k = emit(a_ + "k_ln.hook_normalized", attn.k_norm(k).transpose(1, 2), stack).transpose(1, 2)
                if a.rotary is not None:
                    q, k = a.rotary.rotate(q, k, a.rot_state)
                q = emit(a_ + "hook_rot_q", q.transpose(1, 2), stack).transpose(1, 2)
                k = emit(a_ + "hook_rot_k", k.transpose(1, 2), stack).transpose(1, 2)
                if cache is not None:
                    k, v = cache.update(k, v)  # (B, h_kv, T_cached + T, hd)
            else:
                q = emit(a_ + "hook_q", attn.q(x).view(B, T, h, hd), stack).transpose(1, 2)  # (B, h, T, hd)
                if cache is not None and cache.cross is not None:
                    k, v = cache.cross
                else:
                    S = a.memory.size(1)
                    k, v = attn.kv(a.memory).split([h_kv * hd, h_kv * hd], dim=-1)
                    saved = self.offset.get(stack, 0)
                    self.offset[stack] = 0  # keys are memory positions
                    k = emit(a_ + "hook_k", k.view(B, S, h_kv, hd), stack).transpose(1, 2)  # (B, h_kv, S, hd)
                    v = emit(a_ + "hook_v", v.view(B, S, h_kv, hd), stack).transpose(1, 2)
                    self.offset[stack] = saved
                    if cache is not None:
                        cache.cross = (k, v)
            if need_steps:
                out = _hooked_kernel(kernel, q, k, v, a, emit, fns, a_, stack, editable)
            else:
                out = attn.run_kernel(q, k, v, a)  # (B, h, T, hd)
            z = emit(a_ + "hook_z", out.transpose(1, 2), stack)  # (B, T, h, hd)
            if want_result:
                w = attn.out.weight.view(-1, h, hd)  # (D, h, hd)
                result = emit(a_ + "hook_result", torch.einsum("bthe,dhe->bthd", z, w), stack)  # (B, T, h, D)
                y = result.sum(2)
                return y + attn.out.bias if attn.out.bias is not None else y
            return attn.out(z.reshape(B, T, h * hd))  # merge heads: (B, T, h * hd) -> (B, T, D)

        self._set(attn, "forward", forward)

    def _install_kernel_call(self, attn, a_: str, stack: str, kernel, need_steps: bool, editable: bool) -> None:
        """Hook points of an attention layer a kernel brings (MLA): the heads it hands its kernel
        (``hook_q (B, T, h, hd)``; ``hook_k``/``hook_v``: every key so far, from position 0, after
        the cache), the scores and pattern, and the per-head output ``hook_z``."""
        emit, fns = self.emit, self.fns

        def run_kernel(q, k, v, a):
            q = emit(a_ + "hook_q", q.transpose(1, 2), stack).transpose(1, 2)  # (B, h, T, hd)
            saved, self.offset[stack] = self.offset.get(stack, 0), 0  # keys sit at positions 0..Tk-1
            k = emit(a_ + "hook_k", k.transpose(1, 2), stack).transpose(1, 2)
            v = emit(a_ + "hook_v", v.transpose(1, 2), stack).transpose(1, 2)
            self.offset[stack] = saved
            out = _hooked_kernel(kernel, q, k, v, a, emit, fns, a_, stack, editable) if need_steps \
                else call_kernel(kernel, q, k, v, a)[0]
            return emit(a_ + "hook_z", out.transpose(1, 2), stack).transpose(1, 2)  # (B, h, T, hd_v)

        self._set(attn, "run_kernel", run_kernel)


def _eager_for(attn: Attention) -> nn.Module:
    """The kernel a hooked attention layer runs when its scores or pattern are asked for: its own
    when it shows its steps (or is not softmax attention), else the registry's ``eager`` kernel with
    the same sizes and scale (the same function, so the output does not change)."""
    from ..components import AttentionKernel, BuildContext
    kernel = attn.kernel
    if type(kernel).steps is not AttentionKernel.steps or not kernel.capabilities.exact:
        return kernel
    ctx = BuildContext.for_heads(attn.h, attn.hd, num_kv_heads=attn.h_kv, scale=kernel.scale,
                                 dropout=kernel.dropout_p)
    eager = get_registry().get("attention", "eager", where="hooks").make(ctx)
    eager.train(kernel.training)
    return eager


def _hooked_kernel(kernel, q, k, v, a, emit, fns, a_, stack, editable) -> torch.Tensor:
    """The kernel's steps with ``hook_attn_scores`` (masked, ``-inf`` where forbidden, as TL's) and
    ``hook_pattern``; an edited score recomputes the softmax, an edited pattern the heads
    (softmax kernels only)."""
    steps = kernel_steps(kernel, q, k, v, a)
    if steps is None:  # not softmax attention and no steps: nothing to show
        return call_kernel(kernel, q, k, v, a)[0]
    s = steps["scores_masked"]
    s2 = emit(a_ + "hook_attn_scores", s, stack)
    w = steps["weights"]
    if s2 is not s:
        _editable(editable, a_ + "hook_attn_scores")
        w = torch.softmax(s2, dim=-1).nan_to_num(0.0)  # a fully -inf row attends to nothing
    w2 = emit(a_ + "hook_pattern", w, stack)
    if w2 is steps["weights"]:
        return steps["heads"]
    _editable(editable, a_ + "hook_pattern")
    _, vr = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
    out = torch.matmul(w2.to(vr.dtype), vr)  # (B, h, Tq, hd)
    return out.masked_fill(a.empty, 0.0) if a.empty is not None else out


def _editable(ok: bool, name: str) -> None:
    if not ok:
        raise ZooError(f"'{name}' can be read but not edited on this attention kernel",
                       where=f"fwd_hooks[{name!r}]",
                       fix="edit hook_z or hook_result instead, or build the model with attention: eager")


# ---------------------------------------------------------------------- the front door
def _assemble(records: dict[str, list[tuple[int, torch.Tensor]]], model=None) -> ActivationCache:
    """One tensor per name: a single forward's as is; several forwards' (KV-cached decoding) laid
    along the sequence axis by offset, key axes of scores/patterns padded to the longest (``-inf``
    scores, zero pattern: exactly what a causal forward over the whole sequence holds there)."""
    out = ActivationCache(model=model)
    for name, recs in records.items():
        if len(recs) == 1:
            out[name] = recs[0][1]
            continue
        recs = sorted(recs, key=lambda r: r[0])
        axis = 2 if name.endswith(_QUERY_AXIS2) else 1
        end = 0
        for off, t in recs:
            if off != end:
                raise ZooError(f"'{name}' was computed for positions from {off} but {end} came "
                               f"before: the hooked calls are not one growing sequence",
                               where="return_cache", fix="cache one sequence per hooked session")
            end += t.size(axis)
        if axis == 2:
            fill = float("-inf") if name.endswith("hook_attn_scores") else 0.0
            tk = max(t.size(-1) for _, t in recs)
            recs = [(o, torch.nn.functional.pad(t, (0, tk - t.size(-1)), value=fill)) for o, t in recs]
        out[name] = torch.cat([t for _, t in recs], dim=axis)
    return out


def run_with_hooks(model, *args, fwd_hooks: Iterable = (), **kwargs):
    """``model(*args, **kwargs)`` with ``fwd_hooks`` in place for this call only."""
    with Hooks(model, fwd_hooks):
        return model(*args, **kwargs)


def run_with_cache(model, *args, names_filter=None, fwd_hooks: Iterable = (), detach: bool = True,
                   **kwargs) -> tuple[Any, ActivationCache]:
    """``(model(*args, **kwargs), cache)`` with every activation matching ``names_filter`` (a name,
    glob, list or predicate; default all).  Hooks in ``fwd_hooks`` run first, so the cache holds
    what they returned."""
    with Hooks(model, fwd_hooks, names_filter if names_filter is not None else (lambda n: True),
               detach=detach) as h:
        out = model(*args, **kwargs)
    return out, _assemble(h.records, model)


@contextlib.contextmanager
def hooks(model, fwd_hooks: Iterable = (), names_filter=None) -> Iterator[Hooks]:
    """Hooks (and, with ``names_filter``, recording) for every call inside the block; the
    recorded activations are ``session.cache()`` afterwards."""
    with Hooks(model, fwd_hooks, names_filter) as h:
        h.cache = lambda: _assemble(h.records, model)
        yield h


def generate(model, ids, max_new_tokens: int = 32, *, fwd_hooks: Iterable = (),
             return_cache: bool = False, names_filter=None, **options):
    """Generate with hooks applied at every decoding step (``hook.offset`` = the position of the
    step's token, so :func:`edit_positions` edits a position once).  ``return_cache=True``:
    ``(sequence, cache)`` where the cache holds every position of the returned sequence, the
    last generated token included (it is run through the model once more, as one more cached
    step), laid out as one forward over the whole sequence would (equal to it for greedy
    decoding).  ``unembed.*`` is left out: decoding computes the logits of the last position only.
    Options as :func:`zoo.run.generate.generate` (``use_cache`` must stay on)."""
    from ..run.generate import generate as _generate
    if not return_cache:
        with Hooks(model, fwd_hooks):
            return _generate(model, ids, max_new_tokens, **options)
    if options.get("stream_tokens") or options.get("use_cache") is False:
        raise ZooError("return_cache needs cached, non-streaming generation", where="generate",
                       fix="drop stream_tokens / use_cache=False, or run model.run_with_cache on the result")
    if isinstance(ids, str) or (isinstance(ids, (list, tuple)) and ids and isinstance(ids[0], str)):
        raise ZooError("return_cache takes token ids", where="generate.ids",
                       fix="encode the prompt first: model.tokenizer.encode(text)")
    keep = _matcher(names_filter) if names_filter is not None else (lambda n: True)
    with Hooks(model, fwd_hooks, lambda n: keep(n) and not n.startswith("unembed.")) as h:
        seq = _generate(model, ids, max_new_tokens, **options)
        call = h.last_call
        if call.get("cache") is not None and max_new_tokens > 0:  # the last token, one more cached step
            last = seq[:, -1:]
            ones = torch.ones_like(last)
            with torch.inference_mode():
                if model.spec.arch == "encoder_decoder":
                    args = call["args"]
                    model.decode(last, args[1], args[2] if len(args) > 2 else call["kwargs"].get("memory_padding"),
                                 tgt_padding=ones, cache=call["cache"], return_hidden=True)
                else:
                    model(last, attention_mask=ones, cache=call["cache"],
                          prefix_lengths=call["kwargs"].get("prefix_lengths"), return_hidden=True)
    return seq, _assemble(h.records, model)

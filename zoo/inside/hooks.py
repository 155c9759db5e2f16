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

**One forward with taps.**  A hook point is an identity tap in the engine's own forward
(``zoo.model.layers``, ``zoo.model.models``) or a component's (a norm's steps, a feed-forward
block, an attention kernel's shared steps in ``zoo.model.kernels``): ``tap = taps_for(self)`` once
per forward, ``x = tap("hook_resid_pre", x)`` where the activation is computed.  Outside a hooked
call ``taps_for`` is None and the forward is the one that was built; nothing is ever installed on
the model.  A hooked call (a *session*: :class:`Hooks`) puts its taps in a context variable
(:data:`zoo.components.TAPS`) for its own duration, so a forward of the same model in another
thread -- the UI's Run tab while the Interpret tab caches -- sees none of them, and two sessions in
two threads never see each other's hooks or activations.  ``zoo.trace`` is a view of the same
mechanism (:mod:`zoo.inside.trace`).

**Names.**  TL's names *and meanings*: ``ln*.hook_scale`` is TL's scale and ``ln*.hook_normalized``
the normalised stream *before* the norm's weight and bias; ``mlp.hook_pre`` / ``hook_pre_linear`` /
``hook_post``; TL's optional ``hook_tokens``, ``hook_attn_in`` (one copy of the stream per head,
before ``ln1``), ``hook_q_input`` / ``hook_k_input`` / ``hook_v_input`` and ``hook_mlp_in``.  An
encoder-decoder prefixes each stack (``encoder.`` / ``decoder.``) and its decoder blocks add the
cross-attention (``blocks.i.cross.hook_q`` ..., ``blocks.i.hook_cross_out``,
``blocks.i.hook_resid_mid_cross``).  Shapes follow TL: ``hook_q/k/v/z`` are ``(B, T, h, hd)``
(``h_kv`` heads for k and v), ``hook_attn_scores`` / ``hook_pattern`` ``(B, h, Tq, Tk)``,
``hook_result`` ``(B, T, h, D)`` (computed only when asked for).  :func:`hook_names` lists exactly
the points a forward calls: each module's class says what its forward taps, and an attention
kernel's scores and pattern are listed only where the kernel shows them (:func:`kernel_view`); a
hook on a point a kernel cannot show is a ``ZooError`` naming the kernel and the kernels that can.

**A hook is held to the contract.**  Its result is None or a tensor of the activation's shape,
dtype and device, without NaN where the activation had none; anything else is a ``ZooError`` at
that hook point, naming it, the hook function, and what was expected and what came back.

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
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import nn

from ..run.arguments import entry, ids_as_passed
from ..components import KERNEL_TAPS, TAPS, AttentionKernel, BuildContext, Norm, repeat_kv, tapping
from ..errors import ZooError, did_you_mean
from ..guard.run_budget import check_cache
from ..model.layers import Attention, AttnArgs, Block, call_kernel, kernel_steps
from ..registry import get_registry

HookFn = Callable[[torch.Tensor, "Hook"], "torch.Tensor | None"]

#: TL's short names (``utils.get_act_name``) -> the name inside a block (or at the top).
SHORT_NAMES = {
    "embed": "hook_embed", "pos_embed": "hook_pos_embed", "tokens": "hook_tokens",
    "resid_pre": "hook_resid_pre", "resid_mid": "hook_resid_mid", "resid_post": "hook_resid_post",
    "attn_out": "hook_attn_out", "mlp_out": "hook_mlp_out", "attn_in": "hook_attn_in",
    "q_input": "hook_q_input", "k_input": "hook_k_input", "v_input": "hook_v_input",
    "mlp_in": "hook_mlp_in", "q": "attn.hook_q", "k": "attn.hook_k", "v": "attn.hook_v",
    "rot_q": "attn.hook_rot_q", "rot_k": "attn.hook_rot_k", "attn_scores": "attn.hook_attn_scores",
    "scores": "attn.hook_attn_scores", "pattern": "attn.hook_pattern", "attn": "attn.hook_pattern",
    "z": "attn.hook_z", "result": "attn.hook_result", "pre": "mlp.hook_pre",
    "pre_linear": "mlp.hook_pre_linear", "post": "mlp.hook_post", "scale": "ln_final.hook_scale",
    "normalized": "ln_final.hook_normalized",
}
_TOP_LEVEL = {"embed", "pos_embed", "tokens", "scale", "normalized"}
#: names whose positions run along axis 2 (queries of ``(B, h, Tq, Tk)``); all others: axis 1
_QUERY_AXIS2 = ("hook_attn_scores", "hook_pattern", "hook_score_bias")
#: an attention kernel's own points (shown by the kernel, not by the layer around it)
KERNEL_POINTS = ("hook_attn_scores", "hook_pattern")
#: TL's per-head inputs: asking for one runs ``ln1`` on a copy of the stream per head (so its
#: points hold ``(B, T, h, ·)``, as in TL with ``use_attn_in`` / ``use_split_qkv_input``); a cache
#: of "everything" leaves them out, as TL's default configuration does
PER_HEAD_INPUTS = ("hook_attn_in", "hook_q_input", "hook_k_input", "hook_v_input")


def _everything(name: str) -> bool:
    """The default ``names_filter``: every point but the per-head inputs."""
    return not name.endswith(PER_HEAD_INPUTS)


@entry
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
    """A hook that applies ``fn`` to the slices at sequence ``positions`` only (each ``(B, ...)``
    without the position axis), wherever they appear: in a full forward, in the prompt's forward
    or in the decoding step that computes them (never twice).  A negative position counts from the
    end of the activation, as Python does (``-1``: the last position of the call); generation
    refuses it, since the end moves with every new token."""
    wanted = [positions] if isinstance(positions, int) or not isinstance(positions, Iterable) else list(positions)
    bad = [p for p in wanted if isinstance(p, bool) or not isinstance(p, int)]
    if bad:
        raise ZooError(f"positions must be integers, got {bad[:3]!r}", where="edit_positions",
                       fix="edit_positions(3, fn) or edit_positions([0, 5], fn)")
    if not callable(fn):
        raise ZooError(f"the edit must be a function, got {type(fn).__name__}", where="edit_positions",
                       fix="edit_positions(p, lambda v: v * 0)")

    def hook_fn(x: torch.Tensor, hook: Hook) -> torch.Tensor | None:
        end = hook.offset + x.size(hook.seq_dim)
        absolute = [p + end if p < 0 else p for p in wanted]
        here = sorted({p - hook.offset for p in absolute if hook.offset <= p < end})
        if not here:
            return None
        x = x.clone()
        for i in here:
            sl = x.select(hook.seq_dim, i)
            sl.copy_(fn(sl))
        return x

    hook_fn.from_end = any(p < 0 for p in wanted)  # generation refuses these
    return hook_fn


# ---------------------------------------------------------------------- the names of a model
def _stack_prefix(model, stack: str) -> str:
    return f"{stack}." if len(model.spec.roles) > 1 else ""


def _norm_names(placement: nn.Module, base: str) -> list[tuple[str, nn.Module]]:
    """``(name, norm)`` for the norms a placement owns: ``norm`` is ``base`` (``ln1``), any other
    norm attribute ``base_attr`` without its ``_norm`` (sandwich's ``post_norm``: ``ln1_post``,
    TL's name for Gemma 2's second norm)."""
    out = []
    for attr, mod in placement.named_children():
        if isinstance(mod, Norm):
            out.append((base if attr == "norm" else f"{base}_{attr.removesuffix('_norm')}", mod))
    return out


#: ``(module, prefix, names)``: the points ``module``'s forward taps, each named ``prefix + name``
Point = tuple[nn.Module, str, tuple[str, ...]]


def _norm_point(norm: nn.Module, prefix: str) -> list[Point]:
    names = norm.hook_points() if isinstance(norm, Norm) else ()
    return [(norm, prefix, tuple(names))] if names else []


def _attn_points(attn: nn.Module, a: str, stack: nn.Module) -> list[Point]:
    """The points of one attention layer (``a``: ``blocks.i.attn.`` or ``blocks.i.cross.``), those
    of its q/k norms, and its kernel's scores and pattern, before ``hook_z``."""
    shown = kernel_view(attn)[1]
    own = tuple(attn.hook_points(stack.biases) if isinstance(attn, Attention) else getattr(attn, "hook_points", ()))
    i = own.index("hook_z") if "hook_z" in own else len(own)
    j = min(3, i)  # after q, k, v: the q/k norms (Qwen3, Gemma 3)
    pts: list[Point] = [(attn, a, own[:j])]
    if getattr(attn, "q_norm", None) is not None and isinstance(attn, Attention):
        pts += _norm_point(attn.q_norm, a + "q_ln.") + _norm_point(attn.k_norm, a + "k_ln.")
    pts.append((attn, a, own[j:i] + shown + own[i:]))
    return pts


def _block_points(block: Block, b: str, stack: nn.Module) -> list[Point]:
    """One block's points in forward order: its own (:meth:`zoo.model.layers.Block.hook_points`)
    around those of its norms, attention layers and feed-forward block."""
    own = block.hook_points()

    def mine(*names):
        return (block, b, tuple(n for n in names if n in own))

    pts: list[Point] = [mine("hook_resid_pre", *PER_HEAD_INPUTS)]
    for name, norm in _norm_names(block.attn_res, b + "ln1"):
        pts += _norm_point(norm, name + ".")
    pts += _attn_points(block.attn, b + "attn.", stack)
    pts.append(mine("hook_attn_out", "hook_resid_mid"))
    if block.cross is not None:
        for name, norm in _norm_names(block.cross_res, b + "lnc"):
            pts += _norm_point(norm, name + ".")
        pts += _attn_points(block.cross, b + "cross.", stack)
        pts.append(mine("hook_cross_out", "hook_resid_mid_cross"))
    pts.append(mine("hook_mlp_in"))
    for name, norm in _norm_names(block.ffn_res, b + "ln2"):
        pts += _norm_point(norm, name + ".")
    ffn_names = tuple(getattr(block.ffn, "hook_points", ()))
    if ffn_names:
        pts.append((block.ffn, b + "mlp.", ffn_names))
    pts.append(mine("hook_mlp_out", "hook_resid_post"))
    if sum(len(p[2]) for p in pts if p[0] is block) != len(own):  # a name Block lists but this misses
        raise RuntimeError(f"{b}: Block.hook_points() {own} are not all placed in forward order")
    return pts


@entry
def points(model) -> list[Point]:
    """Every hook point of ``model`` in the order of its parts, grouped by the module that taps it."""
    pts: list[Point] = []
    spec = model.spec
    emb = {"decoder": "embed", "encoder": "embed"} if len(spec.roles) == 1 else \
        {"encoder": "enc_embed", "decoder": "dec_embed"}
    for stack in spec.roles:
        p = _stack_prefix(model, stack)
        e = getattr(model, emb[stack])
        st = getattr(model, stack)
        pts.append((model, p, ("hook_tokens",)))
        pts.append((e, p, e.hook_points()))
        if e.has_norm:
            pts += _norm_point(e.norm, p + "embed.ln.")
        for i, block in enumerate(st.blocks):
            pts += _block_points(block, f"{p}blocks.{i}.", st)
        if isinstance(st.final_norm, Norm):
            pts += _norm_point(st.final_norm, p + "ln_final.")
    if getattr(model, "lm_head", None) is not None:
        pts.append((model, "", ("unembed.hook_in", "unembed.hook_out")))
    return pts


@entry
def hook_names(model) -> list[str]:
    """Every hook point of ``model``: exactly the names its forward calls in a hooked call.
    (``hook_rot_q/k`` exist on every self-attention: q and k as the kernel sees them, after any q/k
    norm and rotation; TL has them on rotary models only.)"""
    return [prefix + n for _, prefix, names in points(model) for n in names]


# ---------------------------------------------------------------------- what a kernel shows
#: kernel -> (how, names): see :func:`kernel_view`
_VIEWS: "weakref.WeakKeyDictionary[nn.Module, tuple[str | None, tuple[str, ...]]]" = weakref.WeakKeyDictionary()


def kernel_view(layer: nn.Module) -> tuple[str | None, tuple[str, ...]]:
    """How the attention layer's kernel shows its scores and pattern in a hooked call, and which of
    :data:`KERNEL_POINTS` it shows: ``("steps", both)`` through its own
    :meth:`~zoo.components.AttentionKernel.steps`; ``("eager", both)`` softmax attention without
    steps (``sdpa``, ``naive``, ``mla``), for which the registry's ``eager`` kernel -- the same
    function -- stands in during the hooked call; ``("shared", names)`` any other kernel, showing
    what the shared steps it is built from show (:mod:`zoo.model.kernels`), as found by calling it
    once on three positions; ``(None, ())`` a kernel that shows nothing (linear attention)."""
    if not hasattr(layer, "kernel"):
        raise ZooError(f"expected an attention layer (with a .kernel), got {type(layer).__name__}",
                       where="kernel_view.layer", fix="pass model.blocks[i].attn")
    kernel = layer.kernel
    if kernel in _VIEWS:
        return _VIEWS[kernel]
    if type(kernel).steps is not AttentionKernel.steps:
        view = ("steps", KERNEL_POINTS)
    elif kernel.capabilities.exact:
        view = ("eager", KERNEL_POINTS)
    else:
        shown = _probe(kernel, layer.h, getattr(layer, "h_kv", layer.h), layer.hd)
        view = ("shared", shown) if shown else (None, ())
        if shown is None:  # the probe could not run (weights not materialised yet): ask again later
            return view
    _VIEWS[kernel] = view
    return view


class _Probe:
    """A stand-in for a layer's taps that records which kernel points a kernel's forward calls."""

    def __init__(self):
        self.seen: set[str] = set()

    def __call__(self, name, x, at=None):
        self.seen.add(name)
        return x


def _probe(kernel: nn.Module, h: int, h_kv: int, hd: int) -> tuple[str, ...] | None:
    """The kernel points ``kernel`` calls through :data:`zoo.components.KERNEL_TAPS` on three causal
    positions (in forward order); None when it cannot run here."""
    p = next(iter(kernel.parameters()), None)
    dev, dt = (p.device, p.dtype) if p is not None and p.is_floating_point() else ("cpu", torch.float32)
    if getattr(dev, "type", dev) == "meta":
        dev = "cpu"
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, 3, hd, generator=g).to(dev, dt) for n in (h, h_kv, h_kv))
    a = AttnArgs.make(3, 3, q.device, is_causal=True, fused_causal=kernel.capabilities.fused_causal)
    probe = _Probe()
    try:
        with torch.no_grad(), tapping(KERNEL_TAPS, probe):
            call_kernel(kernel, q, k, v, a)
    except Exception:  # noqa: BLE001 - a kernel that cannot run on this probe shows nothing here
        return None
    return tuple(n for n in KERNEL_POINTS if n in probe.seen)


_REGISTRY_VIEWS: dict[str, tuple[str, ...]] = {}


@entry
def kernels_showing(name: str) -> list[str]:
    """The registered attention kernels that show ``name`` (``hook_pattern`` / ``hook_attn_scores``)."""
    reg = get_registry()
    out = []
    for comp in reg.list("attention"):
        if comp.name not in _REGISTRY_VIEWS:
            try:
                kernel = comp.make(BuildContext.for_heads(2, 8, causal=True))

                class _Layer:  # the sizes a layer would give it
                    h, h_kv, hd = 2, 2, 8

                _Layer.kernel = kernel
                _REGISTRY_VIEWS[comp.name] = kernel_view(_Layer)[1]
            except Exception:  # noqa: BLE001 - a kernel that needs more than a default config
                _REGISTRY_VIEWS[comp.name] = ()
        if name.rsplit(".", 1)[-1] in _REGISTRY_VIEWS[comp.name]:
            out.append(comp.name)
    return out


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
    if isinstance(spec, (list, tuple, set, frozenset)):
        ms = [_matcher(s) for s in spec]
        return lambda n: any(m(n) for m in ms)
    raise ZooError(f"a hook target must be a name, a glob pattern or a function, got {type(spec).__name__}",
                   where="fwd_hooks", fix='("blocks.0.attn.hook_pattern", fn) or ("*hook_z", fn)')


def _pairs(fwd_hooks) -> list[tuple[Any, Callable]]:
    """``fwd_hooks`` as a list of ``(target, fn)``, or a ZooError saying what is wrong with it."""
    fix = 'fwd_hooks=[("blocks.0.attn.hook_pattern", fn), ...]: a list of (name, function) pairs'
    if fwd_hooks is None:
        return []
    if isinstance(fwd_hooks, dict):
        raise ZooError("fwd_hooks is a dict; it must be a list of (name, function) pairs", where="fwd_hooks",
                       fix="fwd_hooks=list(hooks.items())")
    if isinstance(fwd_hooks, (str, bytes)) or not isinstance(fwd_hooks, Iterable):
        raise ZooError(f"fwd_hooks must be a list of (name, function) pairs, got {type(fwd_hooks).__name__}",
                       where="fwd_hooks", fix=fix)
    pairs = list(fwd_hooks)
    if len(pairs) == 2 and isinstance(pairs[0], str) and callable(pairs[1]):
        raise ZooError("fwd_hooks is one (name, function) pair, not a list of them", where="fwd_hooks",
                       fix=f"wrap it in a list: fwd_hooks=[({pairs[0]!r}, fn)]")
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            got = f"{type(pair).__name__} of length {len(pair)}" if isinstance(pair, (tuple, list)) \
                else type(pair).__name__
            raise ZooError(f"fwd_hooks[{i}] must be a (name, function) pair, got a {got}",
                           where=f"fwd_hooks[{i}]", fix=fix)
    return [tuple(p) for p in pairs]


def _fn_name(fn) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _describe(t) -> str:
    if not isinstance(t, torch.Tensor):
        return f"a {type(t).__name__}"
    return f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')} on {t.device}"


class _Taps:
    """One module's taps in one session: what :func:`zoo.components.taps_for` hands the module."""

    __slots__ = ("session", "prefix", "stack", "names", "listed", "layer", "_stacks")

    def __init__(self, session: "Hooks", prefix: str, stack: str, names: Iterable[str], listed: Iterable[str],
                 layer=None):
        self.session, self.prefix, self.stack = session, prefix, stack
        self.names = frozenset(names)  # the module's points this session asks for
        self.listed = frozenset(listed)  # every point the module's class lists
        self.layer = layer
        self._stacks: dict[str, _Taps] = {}

    def __call__(self, name: str, x, at: int | None = None):
        if name not in self.names:
            if name not in self.listed:  # a forward calling what hook_names() does not list: a bug
                raise RuntimeError(f"'{self.prefix}{name}' is tapped by a forward but not listed by its module")
            return x
        return self.session.emit(self.prefix + name, x, self.stack, at)

    def wants(self, *names: str) -> bool:
        return any(n in self.names for n in names)

    def begin(self, stack: str, cache=None, **call) -> "_Taps":
        """The model's taps: a forward of ``stack`` starts after ``cache.length`` cached tokens;
        returns the stack's own top-level taps (``hook_tokens``)."""
        s = self.session
        s.offset[stack] = cache.length if cache is not None else 0
        if stack == "decoder":
            s.last_call = {"cache": cache, **call}
        if stack not in self._stacks:
            p = _stack_prefix(s.model, stack)
            self._stacks[stack] = _Taps(s, p, stack, {"hook_tokens"} & {n[len(p):] for n in s.active if n.startswith(p)},
                                        {"hook_tokens"})
        return self._stacks[stack]

    def kernel_call(self, kernel, q, k, v, a) -> tuple[torch.Tensor, None]:
        """The layer's kernel call showing its scores and pattern (:func:`zoo.model.layers.call_kernel`)."""
        how, shown = kernel_view(self.layer)
        wanted = [n for n in KERNEL_POINTS if n in self.names]
        if how is None or not set(wanted) <= set(shown):  # refused when the session was set up
            raise ZooError(f"attention kernel '{type(kernel).__name__}' cannot show {wanted}", where=self.prefix)
        if how in ("steps", "eager"):
            runner = kernel if how == "steps" else self.session.stand_in(kernel, self.layer)
            return _shown_steps(runner, q, k, v, a, self), None
        view = _KernelTap(self, a.empty)
        with tapping(KERNEL_TAPS, view):
            out = call_kernel(kernel, q, k, v, a)[0]
        missed = [n for n in wanted if n not in view.seen]
        if missed:
            raise ZooError(f"attention kernel '{type(kernel).__name__}' did not show {missed} in this call "
                           f"(it did when probed)", where=self.prefix + missed[0],
                           fix="hook hook_z or hook_result instead, or build the model with attention: eager")
        return out, None


class _KernelTap:
    """The kernel's view of its layer's taps (:data:`zoo.components.KERNEL_TAPS`): rows the engine
    opened because every key was masked (``empty``) show ``-inf`` scores and a zero pattern, as a
    masked softmax gives them, while the kernel keeps computing on the opened rows (their output is
    zeroed afterwards, and no NaN reaches a gradient)."""

    def __init__(self, taps: _Taps, empty: torch.Tensor | None):
        self.taps, self.empty, self.seen = taps, empty, set()

    def __call__(self, name: str, x: torch.Tensor, at=None) -> torch.Tensor:
        self.seen.add(name)
        if name not in self.taps.names:
            return x
        shown = x if self.empty is None else x.masked_fill(
            self.empty, float("-inf") if name == "hook_attn_scores" else 0.0)
        y = self.taps(name, shown)
        if y is shown:
            return x
        return y if self.empty is None else torch.where(self.empty, x, y)


def _shown_steps(kernel, q, k, v, a: AttnArgs, tap: _Taps) -> torch.Tensor:
    """A kernel's :meth:`steps` with ``hook_attn_scores`` (masked, ``-inf`` where forbidden, as TL's)
    and ``hook_pattern``; an edited score recomputes the softmax, an edited pattern the heads."""
    steps = kernel_steps(kernel, q, k, v, a)
    s = tap("hook_attn_scores", steps["scores_masked"])
    w = steps["weights"]
    if s is not steps["scores_masked"]:
        w = torch.softmax(s, dim=-1).nan_to_num(0.0)  # a fully -inf row attends to nothing
        if a.empty is not None:
            w = w.masked_fill(a.empty, 0.0)
    w2 = tap("hook_pattern", w)
    if w2 is steps["weights"]:
        return steps["heads"]
    _, vr = repeat_kv(k, v, q.size(1))  # (B, h, Tk, hd)
    out = torch.matmul(w2.to(vr.dtype), vr)  # (B, h, Tq, hd)
    return out.masked_fill(a.empty, 0.0) if a.empty is not None else out


class Hooks:
    """The hooks of one session on one model: ``with Hooks(model, fwd_hooks, cache_filter): ...``.

    ``fwd_hooks``: ``[(name | glob | predicate, fn), ...]``; ``fn(activation, hook)`` returns a
    replacement of the same shape, dtype and device, or None.  ``cache_filter``: which names to
    record into :attr:`records` (each a list of ``(offset, tensor)``, one per forward that computed
    it).  Inside the ``with`` block -- in this thread only -- every forward of ``model`` calls the
    hooks; sessions nest (the outer session's hooks run first)."""

    def __init__(self, model, fwd_hooks: Iterable = (), cache_filter=None, detach: bool = True):
        self.model = model
        self.detach = detach
        pts = points(model)
        names = [prefix + n for _, prefix, ns in pts for n in ns]
        known = set(names)
        self.fns: dict[str, list[HookFn]] = {}
        for target, fn in _pairs(fwd_hooks):
            m = _matcher(target)
            hit = [n for n in names if m(n)]
            if not hit:
                self._no_match(target, names)
            if not callable(fn):
                raise ZooError(f"the hook for {target!r} is not callable, got {type(fn).__name__}",
                               where="fwd_hooks", fix="give fn(activation, hook) -> tensor or None")
            for n in hit:
                self.fns.setdefault(n, []).append(fn)
        keep = _matcher(cache_filter) if cache_filter is not None else None
        self.cached = {n for n in names if keep(n)} if keep is not None else set()
        self.active = (set(self.fns) | self.cached) & known
        self.records: dict[str, list[tuple[int, torch.Tensor]]] = {}
        self.offset: dict[str, int] = {}
        self.last_call: dict[str, Any] = {}
        self._eager: dict[int, nn.Module] = {}
        self._taps: dict[nn.Module, _Taps] = {}
        stack_of = _stacks_of(model)
        listed: dict[nn.Module, set[str]] = {}
        for module, prefix, ns in pts:
            listed.setdefault(module, set()).update(ns)
        for module, prefix, ns in pts:
            wanted = {n for n in ns if prefix + n in self.active}
            if not wanted or module is model:
                continue
            t = self._taps.get(module)
            if t is None:
                layer = module if hasattr(module, "kernel") else None
                self._taps[module] = _Taps(self, prefix, stack_of.get(module, model.spec.roles[-1]), wanted,
                                           listed[module], layer)
            else:  # one module, several groups of names (a block)
                self._taps[module] = _Taps(self, prefix, t.stack, t.names | wanted, t.listed, t.layer)
        # the model itself: where each stack's positions start, and the LM head
        unembed = {"unembed.hook_in", "unembed.hook_out"}
        self._taps[model] = _Taps(self, "", model.spec.roles[-1], unembed & self.active,
                                  unembed if getattr(model, "lm_head", None) is not None else ())
        self._open = None

    def _no_match(self, target, names: list[str]) -> None:
        t = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
        refused = _refused(self.model)
        m = _matcher(target)
        hit = [n for n in refused if m(n)]
        if hit:
            kernel = refused[hit[0]]
            can = kernels_showing(hit[0])
            raise ZooError(f"attention kernel '{kernel}' computes no {hit[0].rsplit('.', 1)[-1]} to show "
                           f"(it does not form softmax scores), so {t!r} names no hook point of this model",
                           where=f"fwd_hooks[{t!r}]", options=can,
                           fix="hook attn.hook_z or attn.hook_result instead, or build the model with one of "
                               "the listed kernels (attention: eager)")
        raise ZooError(f"no hook point matches {t!r}", where="fwd_hooks",
                       fix=did_you_mean(str(t), names) or "see model.hook_names()")

    # -- emitting
    def emit(self, name: str, x, stack: str, at: int | None = None):
        off = self.offset.get(stack, 0) if at is None else at
        fns = self.fns.get(name, ())
        if fns:
            hook = Hook(name, off, 2 if name.endswith(_QUERY_AXIS2) else 1)
            for fn in fns:
                y = fn(x, hook)
                if y is not None:
                    _held_to_contract(name, fn, x, y)
                    x = y
        if name in self.cached:
            recs = self.records.setdefault(name, [])
            rec = (off, x.detach() if self.detach else x)
            if recs and recs[-1][0] == off:  # the same positions again in one call: the last counts
                recs[-1] = rec
            else:
                recs.append(rec)
        return x

    def stand_in(self, kernel: nn.Module, layer: nn.Module) -> nn.Module:
        """The registry's ``eager`` kernel with ``kernel``'s sizes, scale and mode (for this
        session only: the model keeps its kernel)."""
        if id(kernel) not in self._eager:
            ctx = BuildContext.for_heads(layer.h, layer.hd, num_kv_heads=getattr(layer, "h_kv", layer.h),
                                         scale=kernel.scale, dropout=kernel.dropout_p)
            eager = get_registry().get("attention", "eager", where="hooks").make(ctx)
            self._eager[id(kernel)] = eager
        eager = self._eager[id(kernel)]
        eager.train(kernel.training)
        return eager

    # -- the session
    def __enter__(self) -> "Hooks":
        outer = TAPS.get()
        mine: dict = dict(self._taps) if self.active else {self.model: self._taps[self.model]}
        if outer:
            merged = dict(outer)
            for module, t in mine.items():
                merged[module] = _Chain(outer[module], t) if module in outer else t
            mine = merged
        self._open = tapping(TAPS, mine)
        self._open.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._open is not None:
            self._open, open_ = None, self._open
            open_.__exit__(*exc)


class _Chain:
    """Two nested sessions' taps on one module: the outer's hooks first, then the inner's."""

    def __init__(self, outer, inner):
        self.outer, self.inner = outer, inner
        self.layer = getattr(inner, "layer", None)

    def __call__(self, name, x, at=None):
        return self.inner(name, self.outer(name, x, at), at)

    def wants(self, *names):
        return self.outer.wants(*names) or self.inner.wants(*names)

    def begin(self, stack, cache=None, **call):
        return _Chain(self.outer.begin(stack, cache, **call), self.inner.begin(stack, cache, **call))

    def kernel_call(self, kernel, q, k, v, a):
        wants = self.inner.wants(*KERNEL_POINTS)
        return (self.inner if wants else self.outer).kernel_call(kernel, q, k, v, a)


def _held_to_contract(name: str, fn, x, y) -> None:
    """A hook's result must look like its activation: a tensor of the same shape, dtype and device,
    and no NaN where the activation had none."""
    what = None
    if not isinstance(y, torch.Tensor):
        what = f"returned {_describe(y)}, not a tensor"
    else:
        wrong = [f"{k} {g}, expected {e}" for k, g, e in (
            ("shape", tuple(y.shape), tuple(x.shape)), ("dtype", y.dtype, x.dtype), ("device", y.device, x.device))
            if g != e]
        if wrong:
            what = "returned a tensor of " + "; ".join(str(w).replace("torch.", "") for w in wrong)
        elif y.is_floating_point() and bool((torch.isnan(y) & ~torch.isnan(x)).any()):
            what = "returned NaN where the activation was a number"
    if what is not None:
        raise ZooError(f"the hook {_fn_name(fn)} on '{name}' {what} (the activation: {_describe(x)})",
                       where=f"fwd_hooks[{name!r}]",
                       fix="return None (no change) or a tensor like the one given: x.clone() edited in place, "
                           "x.to(...) for dtype and device, no NaN")


def _stacks_of(model) -> dict[nn.Module, str]:
    """module -> the stack (``encoder`` / ``decoder``) whose positions it computes."""
    spec = model.spec
    owner: dict[nn.Module, str] = {}
    emb = {"embed": spec.roles[0], "enc_embed": "encoder", "dec_embed": "decoder"}
    for attr, s in emb.items():
        if hasattr(model, attr):
            for m in getattr(model, attr).modules():
                owner[m] = s
    for s in spec.roles:
        for m in getattr(model, s).modules():
            owner[m] = s
    return owner


def _refused(model) -> dict[str, str]:
    """``name -> kernel kind`` for the kernel points this model's kernels cannot show."""
    out = {}
    for module, prefix, names in points(model):
        if hasattr(module, "kernel") and prefix.endswith(("attn.", "cross.")) and "hook_z" in names:
            shown = kernel_view(module)[1]
            for n in KERNEL_POINTS:
                if n not in shown:
                    out[prefix + n] = _kind(module.kernel)
    return out


def _kind(kernel: nn.Module) -> str:
    for comp in get_registry().list("attention"):
        if comp.cls is type(kernel):
            return comp.name
    return type(kernel).__name__


# ---------------------------------------------------------------------- the front door
def _assemble(records: dict[str, list[tuple[int, torch.Tensor]]], model=None) -> ActivationCache:
    """One tensor per name: a single forward's as is; several forwards' (KV-cached decoding) laid
    along the sequence axis by offset, key axes of scores/patterns padded to the longest (``-inf``
    scores, zero pattern: exactly what a causal forward over the whole sequence holds there).  A
    point that shows every position so far in each call (MLA's keys) keeps its last, fullest one."""
    out = ActivationCache(model=model)
    for name, recs in records.items():
        by_offset: dict[int, torch.Tensor] = {}
        for off, t in recs:
            by_offset[off] = t
        recs = sorted(by_offset.items())
        if len(recs) == 1:
            out[name] = recs[0][1]
            continue
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
    args, kwargs = _checked_ids(model, args, kwargs, "run_with_hooks")
    with Hooks(model, fwd_hooks):
        return model(*args, **kwargs)


def run_with_cache(model, *args, names_filter=None, fwd_hooks: Iterable = (), detach: bool = True,
                   **kwargs) -> tuple[Any, ActivationCache]:
    """``(model(*args, **kwargs), cache)`` with every activation matching ``names_filter`` (a name,
    glob, list or predicate; default all but :data:`PER_HEAD_INPUTS`, which are TL's opt-in).
    Hooks in ``fwd_hooks`` run first, so the cache holds what they returned."""
    args, kwargs = _checked_ids(model, args, kwargs, "run_with_cache")
    keep = _matcher(names_filter) if names_filter is not None else _everything
    _size_cache(model, keep, args[0] if args else kwargs.get("ids", kwargs.get("src")),
                args[1] if len(args) > 1 else kwargs.get("tgt"), 0, "run_with_cache.ids")
    with Hooks(model, fwd_hooks, names_filter if names_filter is not None else _everything,
               detach=detach) as h:
        out = model(*args, **kwargs)
    return out, _assemble(h.records, model)


def _checked_ids(model, args: tuple, kwargs: dict, where: str) -> tuple[tuple, dict]:
    """The forward's token ids (first positional or ``ids`` / ``src`` / ``tgt``) read by
    :func:`zoo.run.arguments.token_ids`: a list becomes the ``(B, T)`` tensor, anything unreadable
    (or out of the vocabulary) is a ZooError naming the argument before any hook is installed."""
    from ..run.arguments import zoo_model

    zoo_model(model, f"{where}.model")
    args = list(args)
    if args and args[0] is None:
        raise ZooError("no token ids given (ids is None)", where=f"{where}.ids", fix=f"{where}(model, ids, ...)")
    for i in range(min(len(args), 2)):
        if args[i] is not None and (i == 0 or model.spec.arch == "encoder_decoder"):
            args[i] = ids_as_passed(model, args[i], f"{where}.{'ids' if i == 0 else 'tgt'}")
    for k in ("ids", "src", "tgt"):
        if kwargs.get(k) is not None:
            kwargs[k] = ids_as_passed(model, kwargs[k], f"{where}.{k}")
    if not args and not any(kwargs.get(k) is not None for k in ("ids", "src")):
        raise ZooError("no token ids given", where=f"{where}.ids", fix=f"{where}(model, ids, ...)")
    return tuple(args), kwargs


def _size_cache(model, keep, ids, tgt, new: int, where: str) -> None:
    """Hold the cache these hook points will record against the work budget before anything runs
    (:func:`zoo.guard.run_budget.check_cache`); ``ids`` a tensor or list(s) of ids, ``new`` tokens
    to be generated after them.  Shapes it cannot read are left to the model's own checks."""
    if isinstance(ids, torch.Tensor) and ids.dim() == 2:
        B, T = ids.shape
    elif isinstance(ids, (list, tuple)) and ids and all(isinstance(r, (list, tuple)) for r in ids):
        B, T = len(ids), max(len(r) for r in ids)
    elif isinstance(ids, (list, tuple)):
        B, T = 1, len(ids)
    else:
        return
    T_src = None
    if getattr(model.spec, "arch", None) == "encoder_decoder":
        T_src, T = T, (tgt.size(-1) if isinstance(tgt, torch.Tensor) else 1) + new
    else:
        T += new
    if B * max(T, T_src or 0) < 256:
        return
    check_cache(model, [n for n in hook_names(model) if keep(n)], int(B), int(T),
                           None if T_src is None else int(T_src), where)


@contextlib.contextmanager
def hooks(model, fwd_hooks: Iterable = (), names_filter=None) -> Iterator[Hooks]:
    """Hooks (and, with ``names_filter``, recording) for every call inside the block, in this
    thread; the recorded activations are ``session.cache()`` afterwards."""
    with Hooks(model, fwd_hooks, names_filter) as h:
        h.cache = lambda: _assemble(h.records, model)
        yield h


@entry
def generate(model, ids, max_new_tokens: int = 32, *, fwd_hooks: Iterable = (),
             return_cache: bool = False, names_filter=None, **options):
    """Generate with hooks applied at every decoding step (``hook.offset`` = the position of the
    step's token, so :func:`edit_positions` edits a position once).  ``return_cache=True``:
    ``(sequence, cache)`` where the cache holds every position of the returned sequence, the
    last generated token included (it is run through the model once more, as one more cached
    step), laid out as one forward over the whole sequence would (equal to it for greedy
    decoding).  ``unembed.*`` is left out: decoding computes the logits of the last position only
    (a hook there is refused).  Options as :func:`zoo.run.generate.generate` (``use_cache`` must
    stay on)."""
    from ..run.generate import generate as _generate
    pairs = _pairs(fwd_hooks)
    for target, fn in pairs:
        if getattr(fn, "from_end", False):
            raise ZooError("an edit_positions hook counts a position from the end, which moves with "
                           "every generated token", where=f"fwd_hooks[{target!r}]",
                           fix="give the absolute position: len(prompt) + k for the k-th new token")
        hit = [n for n in hook_names(model) if _matcher(target)(n)]
        if hit and all(n.startswith("unembed.") for n in hit):
            raise ZooError(f"{target!r}: generation applies the LM head to the last position itself, so "
                           f"unembed.* is never called while generating", where=f"fwd_hooks[{target!r}]",
                           fix="hook ln_final.hook_normalized, or run model.run_with_hooks on the sequence")
    if not return_cache:
        with Hooks(model, pairs):
            return _generate(model, ids, max_new_tokens, **options)
    if options.get("stream_tokens") or options.get("use_cache") is False:
        raise ZooError("return_cache needs cached, non-streaming generation", where="generate",
                       fix="drop stream_tokens / use_cache=False, or run model.run_with_cache on the result")
    if isinstance(ids, str) or (isinstance(ids, (list, tuple)) and ids and isinstance(ids[0], str)):
        raise ZooError("return_cache takes token ids", where="generate.ids",
                       fix="encode the prompt first: model.tokenizer.encode(text)")
    keep = _matcher(names_filter) if names_filter is not None else _everything
    _size_cache(model, lambda n: keep(n) and not n.startswith("unembed."), ids, None,
                max_new_tokens if isinstance(max_new_tokens, int) else 0, "generate.max_new_tokens")
    with Hooks(model, pairs, lambda n: keep(n) and not n.startswith("unembed.")) as h:
        seq = _generate(model, ids, max_new_tokens, **options)
        call = h.last_call
        if call.get("cache") is not None and max_new_tokens > 0:  # the last token, one more cached step
            last = seq[:, -1:]
            ones = torch.ones_like(last)
            with torch.inference_mode():
                if model.spec.arch == "encoder_decoder":
                    model.decode(last, call["memory"], call.get("memory_padding"), tgt_padding=ones,
                                 cache=call["cache"], return_hidden=True)
                else:
                    model(last, attention_mask=ones, cache=call["cache"],
                          prefix_lengths=call.get("prefix_lengths"), return_hidden=True)
    return seq, _assemble(h.records, model)

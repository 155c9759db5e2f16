"""The small interfaces through which components meet.

A plugin implements one of these base classes; the engine (``zoo.model.layers``) only ever talks to them.
Shapes use: ``B`` batch, ``T`` sequence, ``h`` query heads, ``h_kv`` key/value heads, ``hd`` head
dim, ``D`` d_model.

Masks follow the lecture scripts' convention: **True means "may attend"**.  (``nn.MultiheadAttention``
uses the opposite for ``attn_mask``; converting between the two is a classic bug, so the engine does it
in exactly one place.)
"""
from __future__ import annotations

import contextlib
import threading
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Callable, ClassVar, Iterator, Mapping

import torch
from torch import nn


@dataclass(frozen=True)
class Capabilities:
    """What a component can do; assembly checks combinations once, at build time.

    returns_weights: the attention kernel can return the softmax weights (needed by inspection).
    supports_bias:   the kernel accepts an additive score bias (ALiBi, T5 relative positions).
    supports_mask:   the kernel honours arbitrary boolean masks (not just causal / none).
    supports_kv_cache: works when queries are a suffix of the keys (incremental decoding).
    fused_causal:    the kernel has its own causal path: it may be called with ``is_causal=True``
                     (and no mask, no bias) instead of a causal mask tensor.
    exact:           computes the same function as softmax attention (checked against the naive loop).
    causal_only:     only meaningful with a causal mask.
    dtypes / devices: where the component is known to work.
    """

    returns_weights: bool = False
    supports_bias: bool = True
    supports_mask: bool = True
    supports_kv_cache: bool = True
    fused_causal: bool = False
    exact: bool = True
    causal_only: bool = False
    dtypes: tuple[str, ...] = ("float32", "float64", "bfloat16", "float16")
    devices: tuple[str, ...] = ("cpu", "cuda")


@dataclass(frozen=True)
class BuildContext:
    """Everything a component may need to size itself, fixed at build time.

    ``causal`` is True for a decoder stack (its queries must not see later keys).  ``scale`` is the
    factor applied to q·k (default ``1/sqrt(head_dim)``; T5 uses 1).  ``num_layers`` lets a
    component scale itself by depth (DeepNet-style placements, GPT-2's residual init).

    Inside a model, a component receives its stack resolved from the spec (``spec.stack(role)``, a
    :class:`zoo.model.spec.StackSpec`: these fields plus the stack's other settings); on its own (tests,
    the UI, the conformance kit) make one with :meth:`for_heads`.
    """

    d_model: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    d_ff: int
    max_len: int
    num_layers: int
    dropout: float
    causal: bool
    scale: float

    @classmethod
    def from_spec(cls, spec: Any, role: str) -> "BuildContext":
        """The context of ``spec``'s ``role`` stack (``"encoder"`` or ``"decoder"``): the resolved
        stack itself (``spec.stack(role)``, a :class:`zoo.model.spec.StackSpec`, is a BuildContext)."""
        return spec.stack(role)

    @classmethod
    def for_heads(cls, num_heads: int, head_dim: int, *, num_kv_heads: int | None = None,
                  d_model: int | None = None, d_ff: int | None = None, max_len: int = 64,
                  num_layers: int = 1, dropout: float = 0.0, causal: bool = False,
                  scale: float | None = None) -> "BuildContext":
        """A context for given head sizes; the rest defaults as a spec would (``d_model = h · hd``,
        ``d_ff = 4 · d_model``, ``scale = 1/sqrt(hd)``, no dropout, one layer, no grouping)."""
        d_model = d_model if d_model is not None else num_heads * head_dim
        return cls(d_model=d_model, num_heads=num_heads,
                   num_kv_heads=num_kv_heads if num_kv_heads is not None else num_heads,
                   head_dim=head_dim, d_ff=d_ff if d_ff is not None else 4 * d_model,
                   max_len=max_len, num_layers=num_layers, dropout=dropout, causal=causal,
                   scale=scale if scale is not None else head_dim ** -0.5)


# ---------------------------------------------------------------------- the inside view's taps
#: The taps of the hooked call running in this thread (or task), ``module -> taps``, put here by
#: :mod:`zoo.inside.hooks` for that call only; None everywhere else.  A context variable, not an
#: attribute of the model: a forward of the same model in another thread sees none of them.
TAPS: ContextVar[Mapping[Any, Any] | None] = ContextVar("zoo_taps", default=None)
#: how many hooked calls are open in this process, in any thread: while none is, a lookup reads no
#: context variable (and ``torch.compile``, which never reads it, keeps its graph when one opens)
_OPEN = 0
#: True while Dynamo traces (``torch.compile``), False otherwise at the cost of one call: cheaper
#: than ``torch.compiler.is_compiling`` (two calls), and only Dynamo traces the engine's Python
_tracing = torch.compiler.is_dynamo_compiling
_OPEN_LOCK = threading.Lock()


@contextlib.contextmanager
def tapping(var: ContextVar, value: Any) -> Iterator[None]:
    """``var`` (:data:`TAPS` or :data:`KERNEL_TAPS`) set to ``value`` in this thread's context for
    the ``with`` block (nested blocks restore the outer value)."""
    global _OPEN
    with _OPEN_LOCK:
        _OPEN += 1
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)
        with _OPEN_LOCK:
            _OPEN -= 1


def taps_for(module: nn.Module) -> Any:
    """The taps a hooked call put on ``module``, or None -- always None outside a hooked call, in
    every other thread, and while ``torch.compile`` traces (a compiled graph holds no tap).

    Every hook point is an identity tap in the forward that computes it.  A module with hook points
    looks its taps up once per forward (the engine's blocks and attention layers read theirs from
    their attention arguments, ``a.taps``: :func:`current_taps`) and, where a named activation is
    computed, hands it over::

        tap = taps_for(self)                    # None: the forward runs exactly as built
        ...
        if tap is not None:
            x = tap("hook_resid_pre", x)        # the hooks' replacement (or x itself), recorded

    ``tap(name, x, at=None)``: ``name`` is the point's name inside the module (the session knows
    the block and the stack), ``at`` the sequence index of ``x``'s first position when it is not
    the call's own (keys of every cached token: ``at=0``).  ``tap.wants(*names)``: whether the call
    asked for any of those points -- for points that cost work to provide (``hook_result``, one
    input per head).  ``tap.begin(stack, cache, **call)`` (the model's taps only): a stack's forward
    starts after ``cache.length`` cached tokens.  The names a module's forward calls are the ones
    its class lists (:func:`zoo.inside.hooks.hook_names`)."""
    if _tracing() or not _OPEN:  # Dynamo tracing a graph (it never reads _OPEN); nothing hooked anywhere
        return None
    taps = TAPS.get()
    return None if taps is None else taps.get(module)


def current_taps() -> Mapping[Any, Any] | None:
    """The whole ``module -> taps`` mapping of the hooked call in this thread, or None (as
    :func:`taps_for`): a stack looks it up once per forward and hands it to its layers in their
    attention arguments (``AttnArgs.taps``), so each block and attention layer finds its own taps
    with one dictionary read."""
    if _tracing() or not _OPEN:
        return None
    return TAPS.get()


#: The taps of the attention layer whose kernel is running in a hooked call that asks for its
#: scores or pattern, set by :func:`zoo.model.layers.call_kernel` around that one kernel call; the
#: kernels' shared steps (:mod:`zoo.model.kernels`) hand ``hook_attn_scores`` and ``hook_pattern``
#: to it, so every kernel built from them shows both.  None everywhere else.
KERNEL_TAPS: ContextVar[Any] = ContextVar("zoo_kernel_taps", default=None)


def kernel_taps() -> Any:
    """The running kernel's view of its layer's taps (:data:`KERNEL_TAPS`), or None: outside a
    hooked call asking for scores or pattern, and while ``torch.compile`` traces."""
    if _tracing() or not _OPEN:
        return None
    return KERNEL_TAPS.get()


class AttentionKernel(nn.Module):
    """The attention maths, after the projections and before the output projection.

    ``forward(q, k, v, mask=None, bias=None, need_weights=False) -> (out, weights or None)`` with
    ``q (B, h, Tq, hd)``, ``k, v (B, h_kv, Tk, hd)``, ``mask`` boolean broadcastable to
    ``(B, h, Tq, Tk)`` (True = may attend) or None, ``bias`` additive float broadcastable to the same
    shape or None; ``out (B, h, Tq, hd)``, ``weights (B, h, Tq, Tk)`` when asked and
    ``capabilities.returns_weights``.  When ``h_kv < h`` (grouped-query attention) each k/v head
    serves ``h // h_kv`` query heads.  Queries are the *last* ``Tq`` positions of the keys.

    The engine keeps the rest out of the kernel: a causal rule arrives as a ``mask`` (unless the
    kernel declares ``Capabilities(fused_causal=True)``: then it may instead get ``is_causal=True``
    with no mask and no bias, and must accept that keyword); no mask row is ever fully False (the
    engine opens such rows and zeroes their outputs afterwards), and a ``bias`` only reaches kernels
    with ``supports_bias``.  ``zoo.model.layers.attend(kernel, q, k, v, ...)`` runs a kernel outside a
    model under the same rules.

    ``self.scale`` (from the context) multiplies q·k; ``self.dropout_p`` applies to weights in
    training.  A kernel may also override :meth:`steps` to show its intermediate tensors to
    ``zoo.trace``.
    """

    capabilities: ClassVar[Capabilities] = Capabilities()
    #: the self-attention layer (projections + cache) the engine builds around this kernel, as
    #: ``layer(stack, kernel, head_norm=None)``; None: :class:`zoo.model.layers.Attention` (q/k/v
    #: projections, cached keys and values).  A variant whose projections or cache differ (MLA's
    #: latent cache, plugins/attention_mla.py) names its own; the layer has ``forward(x, a, cache)``,
    #: ``run_kernel``, ``h``/``h_kv``/``hd`` and ``cache_layout``, like ``Attention``.
    layer: ClassVar[type | None] = None

    def __init__(self, config: Any, ctx: BuildContext):
        super().__init__()
        self.config = config
        self.scale = ctx.scale
        self.dropout_p = ctx.dropout

    def steps(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              bias: torch.Tensor | None = None) -> dict[str, torch.Tensor] | None:
        """For inspection: the named intermediates of one call, ``scores`` (``q·kᵀ·scale + bias``),
        ``scores_masked`` (``-inf`` where forbidden), ``weights`` and ``heads`` (the output), or None
        when the kernel does not show them (``zoo.trace`` then runs softmax attention through the
        ``eager`` kernel, which does)."""
        return None


@dataclass
class MaskContext:
    """What a mask rule may look at.

    q_len, k_len: query and key lengths; ``q_offset``: absolute position of the first query (the
    number of cached tokens under a KV cache), so query ``i`` sits at ``q_offset + i`` and key ``j``
    at ``j``.  ``key_padding``: ``(B, Tk)`` bool, True for real tokens (None = no padding).
    ``prefix_lengths``: ``(B,)`` long tensor or None, for prefix-LM masks.
    """

    q_len: int
    k_len: int
    device: torch.device
    q_offset: int = 0
    batch_size: int = 1
    key_padding: torch.Tensor | None = None
    prefix_lengths: torch.Tensor | None = None

    def query_positions(self) -> torch.Tensor:
        """``(Tq, 1)`` absolute query positions."""
        return torch.arange(self.q_offset, self.q_offset + self.q_len, device=self.device)[:, None]

    def key_positions(self) -> torch.Tensor:
        """``(1, Tk)`` absolute key positions."""
        return torch.arange(self.k_len, device=self.device)[None, :]


class MaskRule(nn.Module):
    """A rule deciding which keys each query may see.

    ``forward(mctx) -> bool tensor`` broadcastable to ``(B, 1, Tq, Tk)``, True = may attend, or None
    for "everything allowed".  Rules compose with logical *and* (a spec's ``mask:`` may be a list).
    ``is_causal = True`` marks the plain lower-triangular rule, letting kernels use a fused causal path.
    """

    is_causal: ClassVar[bool] = False
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, config: Any, ctx: BuildContext):
        super().__init__()
        self.config = config


class PositionScheme(nn.Module):
    """Where and how token order enters the model.  A scheme overrides one or more of:

    - ``embed(x (B, T, D), pos (B|1, T)) -> x``: added to the token embeddings (sinusoidal, learned);
    - ``rotate(q (B, h, T, hd), k (B, h_kv, T, hd), state) -> (q, k)``: applied to queries and the
      *new* keys before they enter the KV cache (RoPE); ``state = qk_state(pos (B|1, T))`` is computed
      once per stack forward (e.g. the cos/sin tables) and shared by all layers;
    - ``score_bias(pos_q (B|1, Tq), pos_k (B|1, Tk)) -> (B|1, h, Tq, Tk)``: added to the attention
      scores (ALiBi, T5 relative buckets); computed once per stack forward and shared by all layers.

    ``pos`` are absolute positions (left padding shifts them so that every row's first real token sits
    at 0), so a query offset under a KV cache is handled by construction.  The class flags say which
    hooks are active, so the assembled model never calls a no-op.
    """

    acts_on_embeddings: ClassVar[bool] = False
    acts_on_qk: ClassVar[bool] = False
    acts_on_scores: ClassVar[bool] = False
    capabilities: ClassVar[Capabilities] = Capabilities()
    #: True when what a token gets depends on the length of the whole call, not only on its own
    #: position (rope's dynamic / longrope scaling): then a batch row computed alone differs from
    #: the same row inside its batch, and generation prefills a padded batch as one block
    length_dependent: bool = False

    def __init__(self, config: Any, ctx: BuildContext):
        super().__init__()
        self.config = config

    def embed(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return x

    def qk_state(self, pos: torch.Tensor) -> Any:
        return pos

    def rotate(self, q: torch.Tensor, k: torch.Tensor, state: Any):
        return q, k

    def score_bias(self, pos_q: torch.Tensor, pos_k: torch.Tensor) -> torch.Tensor | None:
        return None

    def reset_buffers(self) -> None:
        """Recompute non-persistent buffers (called after building on the meta device)."""


_module_call = nn.Module.__call__


class Norm(nn.Module):
    """A normalisation layer ``(…, D) -> (…, D)``, built as ``cls(config, ctx)``.

    For the inside view a norm may show its steps (TransformerLens' ``hook_scale`` and
    ``hook_normalized``): :meth:`steps` splits ``x`` into ``(centred, scale)`` and :meth:`affine`
    finishes the job, so that ``forward(x) == affine(centred / scale, x)``.  In a hooked call that
    asks for those points the norm runs as exactly those three steps, with ``hook_scale`` on the
    scale and ``hook_normalized`` on ``centred / scale`` (before the weight and the bias); a norm
    without steps (the default) has no hook points and always runs its ``forward``."""

    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, config: Any, ctx: BuildContext):
        super().__init__()
        self.config = config

    def steps(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None] | None:
        """``(centred (…, D'), scale (…, 1) or None)``: what the norm divides, and by what, per
        token (LayerNorm: ``x - mean`` and ``sqrt(var + eps)``; RMSNorm: ``x`` and ``sqrt(mean x² +
        eps)``; a norm that divides by nothing, DyT: its squashed ``x`` and None).  None: no steps."""
        return None

    def affine(self, normalized: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The output from the normalised ``centred / scale``: the weight and bias, in ``x``'s
        dtype and shape."""
        raise NotImplementedError

    def hook_points(self) -> tuple[str, ...]:
        """The names this norm's forward taps: ``hook_scale`` and ``hook_normalized`` for a norm
        with steps (a norm whose steps divide by nothing lists ``hook_normalized`` only), none
        without."""
        return () if type(self).steps is Norm.steps else ("hook_scale", "hook_normalized")

    def __call__(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if _tracing() or not _OPEN or args or kwargs:  # taps_for's test, inline: a norm is called often
            return _module_call(self, x, *args, **kwargs)
        tap = taps_for(self)
        if tap is None:
            return _module_call(self, x)
        centred, scale = self.steps(x)
        if scale is not None:
            scale = tap("hook_scale", scale)  # (…, 1)
            centred = centred / scale
        return self.affine(tap("hook_normalized", centred), x)  # before the weight and the bias


class Placement(nn.Module):
    """How a norm wraps a residual sub-layer ``f``; built as ``cls(config, ctx, make_norm)``.

    The block calls ``h = enter(x)``, ``y = f(h)``, ``x = exit(x, y)``.  Pre-norm: ``enter = n``,
    ``exit = x + y``.  Post-norm: ``enter = id``, ``exit = n(x + y)``.  ``final_norm`` says whether the
    stack needs a norm after its last block (pre-norm does, post-norm does not).
    """

    final_norm: ClassVar[bool] = True
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, config: Any, ctx: BuildContext, make_norm: Callable[[], nn.Module]):
        super().__init__()
        self.config = config

    def enter(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def exit(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    #: Optional, for the inside view: ``branch(y)``, what ``exit`` adds to the stream when ``exit(x,
    #: y) == x + branch(y)`` and the branch is more than ``y`` (sandwich: ``post_norm(y)``).  A hooked
    #: call then shows ``hook_attn_out`` / ``hook_mlp_out`` as that -- TransformerLens' meaning, what
    #: the sub-layer adds to the residual stream -- and an edit changes exactly what is added.
    branch: ClassVar[Callable[..., torch.Tensor] | None] = None


class FeedForward(nn.Module):
    """A position-wise block ``(B, T, D) -> (B, T, D)`` through a hidden width ``ctx.d_ff``.

    ``hook_points``: the names its ``forward`` taps (``tap = taps_for(self)``), with
    TransformerLens' meanings: ``hook_pre`` the pre-activation (a GLU's gate), ``hook_pre_linear``
    a GLU's linear branch, ``hook_post`` the input of the down projection; a mixture of experts:
    ``hook_expert_weights`` its router's probabilities, ``hook_expert_indices`` its choices."""

    capabilities: ClassVar[Capabilities] = Capabilities()
    hook_points: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: Any, ctx: BuildContext):
        super().__init__()
        self.config = config

    def macs_per_token(self) -> int:
        """Multiply-adds one token costs here (:mod:`zoo.inside.costs`, MFU): by default every weight
        matrix once.  A block that uses only part of its weights per token (a mixture of experts:
        the router and the k chosen experts of E) says so by overriding this."""
        return sum(p.numel() for p in self.parameters() if p.dim() >= 2)


class ActivationFunction(nn.Module):
    """An element-wise nonlinearity that feed-forward blocks name (``ffn: {kind: mlp, activation: NAME}``).

    The ``activation`` family: registered with ``register_activations(register)``; a block resolves
    its ``activation:`` name once, at build time, with :func:`zoo.registry.activation_fn`.  Give the
    class ``fn``, a plain function ``tensor -> tensor`` of the same shape and dtype (declared with
    ``staticmethod``, e.g. ``fn = staticmethod(F.mish)``): the block then calls that function itself,
    with no module and no Python frame in between.  Only a nonlinearity that cannot be one function
    overrides ``forward`` instead (the block then holds an instance, built as ``cls(None, None)``).

    An activation takes no parameters (``activation:`` is a name, not an entry): a variant with a
    different constant is a second name, as ``gelu_tanh`` is GELU's tanh approximation."""

    #: the function itself; None: the class overrides ``forward``
    fn: ClassVar[Callable[[torch.Tensor], torch.Tensor] | None] = None

    def __init__(self, config: Any = None, ctx: BuildContext | None = None):
        super().__init__()
        self.config = config

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return type(self).fn(x)  # type: ignore[misc]


@dataclass(frozen=True)
class Registered:
    """A config field's marker: its value is the name of a registered component of ``family``
    (``Annotated[str, Registered("activation")]``).  The spec checks the name against the live
    registry, so a plugin's name is valid the moment the plugin is installed, and an unknown one is
    an error listing the registered names."""

    family: str


class Tokenizer:
    """Text <-> ids.  Subclasses provide ``encode``, ``decode``, ``vocab_size``, ``to_json`` and the
    classmethod ``from_json`` (a JSON-serialisable dict, stored inside checkpoints), and the special
    ids ``pad_id``, ``bos_id``, ``eos_id``, ``mask_id``, ``unk_id`` (None where absent)."""

    pad_id: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None
    mask_id: int | None = None
    unk_id: int | None = None

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def decode(self, ids) -> str:
        raise NotImplementedError

    def to_json(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_json(cls, data: dict) -> "Tokenizer":
        raise NotImplementedError


class Task:
    """A training task for experiments (``zoo.experiment``): a data generator or a corpus, with
    exact metrics and a paragraph (the class docstring) saying what it probes.  Built as
    ``cls(config)``; it provides:

    - ``arch``: the architecture it trains (``"decoder"`` or ``"encoder_decoder"``);
    - ``metrics``: metric name -> ``"max"`` or ``"min"`` (which way is better), the first the primary;
    - ``tokenizer()``: the :class:`Tokenizer` its symbols are written with (travels in checkpoints);
    - ``prepare_objective(cfg, spec, tok, fit_vocab=False) -> (objective, tok, spec, info)``: the
      trainer's data source (``zoo.train.train(spec, task, ...)`` calls it instead of reading a file);
    - ``evaluate(model) -> dict``: the exact metrics on held-out data that never overlaps training;
    - ``probe() -> list[int]``: token ids of one example, for the inside view.

    Most tasks subclass :class:`zoo.experiment.tasks.SyntheticTask`, which does all but drawing an
    example.
    """

    arch: ClassVar[str] = "decoder"
    metrics: ClassVar[dict] = {}

    def __init__(self, config: Any = None):
        self.config = config


# ---------------------------------------------------------------------- the family table
@dataclass(frozen=True)
class Family:
    """One component family, described once.  The spec parser, the registry, checkpoint metadata,
    the conformance kit and the UI all read :data:`FAMILIES`; adding a family is one row here plus
    its hook in :mod:`zoo.hookspecs` (and the engine code that uses it).

    name:      the registry family (``zoo components NAME``, ``registry.get(NAME, kind)``).
    hook:      the hookspec its plugins implement, ``HOOK(register)``.
    base:      the class every component of the family must subclass.
    field:     the spec field holding its entry (``positions: {kind: rope}``), or None when the
               family is not part of a model spec (tokenizers).
    per_stack: an ``encoder:`` / ``decoder:`` section may override it (else model-wide).
    many:      the field takes one entry or a list whose rules compose (masks: ``[causal, ...]``).
    parent:    the field whose entry it lives in (``norm: {kind: rmsnorm, placement: post}``).
    default:   the kind used when a spec leaves the field out (None: no default, or per arch).
    outputs:   the family's output contract: ``(method, expect)`` pairs, where ``expect(*args,
               **kwargs)`` takes the arguments of one call of ``method`` and returns what the call
               must give back (an :class:`Out`, or a tuple of them for a method returning a tuple).
               The build probe and the run-time check (:mod:`zoo.guard.outputs`) hold every
               component of the family to it, and name the plugin of one that breaks it.
    """

    name: str
    hook: str
    base: type
    field: str | None
    per_stack: bool
    many: bool = False
    parent: str | None = None
    default: str | None = None
    outputs: tuple[tuple[str, Callable[..., Any]], ...] = ()


# ---------------------------------------------------------------------- output contracts
@dataclass(frozen=True)
class Out:
    """What one value returned by a component must be, worked out from the inputs of the call.

    ``name``: what the value is called in messages (``out``, ``weights``, ``mask``, ``bias``).
    ``dtype``: the dtype it must have (the input's, for every activation); None: any
    floating-point dtype (a score bias).  ``device``: the device it must be on (the input's).
    ``shape``: the exact shape it must have; or ``fits``: a shape it must broadcast to, ``None``
    entries matching any size (a mask ``(B, 1, Tq, Tk)`` may come as ``(Tq, Tk)``).
    ``optional``: None may be returned instead of a tensor.
    """

    name: str
    dtype: torch.dtype | None
    device: torch.device | str
    shape: tuple[int, ...] | None = None
    fits: tuple[int | None, ...] | None = None
    optional: bool = False


def same_as(x: torch.Tensor, name: str = "out") -> Out:
    """The contract of a value that must look like ``x``: its shape, dtype and device."""
    return Out(name, x.dtype, x.device, shape=tuple(x.shape))


def _attention_returns(q, k, v, *args, **kwargs) -> tuple[Out, Out]:
    """``(out, weights)``: ``out (B, h, Tq, hd_v)`` in ``q``'s dtype and device (``hd_v`` the value
    features: ``hd``, or MLA's ``v_head_dim``); ``weights (B, h, Tq, Tk)`` or None."""
    B, h, Tq, _ = q.shape
    return (Out("out", q.dtype, q.device, shape=(B, h, Tq, v.shape[-1])),
            Out("weights", q.dtype, q.device, shape=(B, h, Tq, k.shape[-2]), optional=True))


def _mask_returns(mctx, *args, **kwargs) -> Out:
    """A boolean mask broadcastable to ``(B, 1, Tq, Tk)``, or None (everything allowed)."""
    return Out("mask", torch.bool, mctx.device, fits=(mctx.batch_size, 1, mctx.q_len, mctx.k_len),
               optional=True)


def _like_first(x, *args, **kwargs) -> Out:
    """Like the first input ``x``: a norm, a feed-forward block, a placement's ``enter`` and
    ``exit(x, y)``, a position scheme's ``embed(x, pos)``."""
    return same_as(x)


def _rotate_returns(q, k, *args, **kwargs) -> tuple[Out, Out]:
    """``rotate(q, k, state) -> (q, k)``, each like its input."""
    return same_as(q, "q"), same_as(k, "k")


def _bias_returns(pos_q, pos_k, *args, **kwargs) -> Out:
    """``score_bias(pos_q (B|1, Tq), pos_k (B|1, Tk))``: a floating bias broadcastable to
    ``(B|1, h, Tq, Tk)`` on the positions' device, or None."""
    B = max(pos_q.shape[0], pos_k.shape[0])
    return Out("bias", None, pos_q.device, fits=(B, None, pos_q.shape[-1], pos_k.shape[-1]),
               optional=True)


FAMILIES: tuple[Family, ...] = (
    Family("attention", "register_attention", AttentionKernel, "attention", True, default="sdpa",
           outputs=(("forward", _attention_returns),)),
    Family("mask", "register_masks", MaskRule, "mask", True, many=True,
           outputs=(("forward", _mask_returns),)),
    Family("position", "register_positions", PositionScheme, "positions", True, default="sinusoidal",
           outputs=(("embed", _like_first), ("rotate", _rotate_returns),
                    ("score_bias", _bias_returns))),
    Family("norm", "register_norms", Norm, "norm", True, default="layernorm",
           outputs=(("forward", _like_first),)),
    Family("placement", "register_placements", Placement, "placement", True, parent="norm",
           default="pre", outputs=(("enter", _like_first), ("exit", _like_first))),
    Family("ffn", "register_ffns", FeedForward, "ffn", True, default="mlp",
           outputs=(("forward", _like_first),)),
    Family("activation", "register_activations", ActivationFunction, None, False),
    Family("tokenizer", "register_tokenizers", Tokenizer, None, False),
    Family("task", "register_tasks", Task, None, False),
)
#: family name -> its row
FAMILY: dict[str, Family] = {f.name: f for f in FAMILIES}
#: the families a model spec names, in spec order
SPEC_FAMILIES: tuple[Family, ...] = tuple(f for f in FAMILIES if f.field is not None)
FAMILY_BASES: dict[str, type] = {f.name: f.base for f in FAMILIES}


# ---------------------------------------------------------------------- helpers for component authors
#: the type of a feed-forward config's ``activation`` field (``ffn: {kind: mlp, activation: gelu}``):
#: the name of a registered :class:`ActivationFunction` (built-ins ``relu``, ``gelu``, ``gelu_tanh``,
#: ``silu``; plugins add more), checked by the spec against the registry and resolved with
#: :func:`zoo.registry.activation_fn`.
Activation = Annotated[str, Registered("activation")]


def repeat_kv(k: torch.Tensor, v: torch.Tensor, num_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped-query attention: repeat each of the ``h_kv`` key/value heads ``h // h_kv`` times so
    that ``k, v (B, h_kv, T, hd) -> (B, h, T, hd)``; a no-op for ordinary multi-head attention."""
    groups = num_heads // k.size(1)
    if groups == 1:
        return k, v
    return k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)


def nonfinite_query_rows(out: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``out (B, h, Tq, hd)`` with NaN in each query row where ``q (B, h, Tq, hd)`` holds NaN or
    infinity: what softmax attention computes there, and what the math kernel and ``eager`` give.

    PyTorch's fused CPU kernel (``F.scaled_dot_product_attention`` without a mask) takes a query
    row whose scores are all NaN for a fully masked row and returns zeros there, hiding a NaN in a
    position nobody masked (a NaN weight then gives finite logits).  A kernel calling it without a
    mask passes its output through this: it adds 0 x the row's query sum (0 x NaN = NaN, 0 x inf =
    NaN, else 0), one reduction and one add."""
    return out.add(q.sum(-1, keepdim=True), alpha=0)  # (B, h, Tq, hd) + (B, h, Tq, 1)


def causal_mask(q_len: int, k_len: int, device=None) -> torch.Tensor:
    """``(Tq, Tk)`` lower-triangular boolean mask, aligned so the last query sees the last key."""
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)


def guard_empty_rows(mask: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Make fully masked query rows safe.

    Returns ``(safe_mask, empty)``: ``safe_mask`` lets empty rows attend everywhere (so softmax never
    sees a row of -inf and neither forward nor backward produces NaN) and ``empty`` is a
    ``(…, Tq, 1)`` boolean to zero those rows' outputs afterwards.  ``empty`` is ``None`` when no
    row is empty, as far as the CPU can tell for free: on a GPU (and under ``torch.compile``) asking
    would stall the device queue (or break the graph) once per layer, so a tensor is always returned.
    """
    if mask is None:
        return None, None
    empty = ~mask.any(dim=-1, keepdim=True)  # (…, Tq, 1)
    if mask.device.type == "cpu" and not torch.compiler.is_compiling() and not bool(empty.any()):
        return mask, None
    return mask | empty, empty

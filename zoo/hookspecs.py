"""The hook specifications: the whole contract between zoo and a plugin.

There is one hook per component family.  Each receives a single ``register`` callback and returns
nothing.  Calling the callback adds one named component to the registry, attributed to the plugin whose
hook made the call::

    register(name, component, *, config=None)

``name``
    The string users write in a spec (``attention: {kind: NAME}``).  Lower-case letters, digits and
    ``_``; unique across all plugins within the family (a duplicate is reported on the plugin,
    naming both plugins, and the first registration keeps the name; see ``zoo plugins``).
``component``
    For every family but tokenizers, an ``nn.Module`` subclass constructed as ``component(config,
    ctx)`` where ``config`` is an instance of the config class below and ``ctx`` a
    :class:`zoo.components.BuildContext` (sizes, causality, dtype-independent facts).  What the module must
    provide is the family's base class in :mod:`zoo.components` (``AttentionKernel``, ``MaskRule``,
    ``PositionScheme``, ``Norm``, ``Placement``, ``FeedForward``, ``ActivationFunction``); subclassing it
    is recommended.
``config``
    A frozen dataclass holding the component's parameters with their defaults.  Spec entries are
    validated against it (unknown keys, wrong types, ``__post_init__`` checks).  ``None`` means the
    component takes no parameters.

Hooks only ever gain parameters (pluggy passes only the ones an implementation asks for), so a
plugin written against an older zoo keeps working.  The plugin author's guide (every hook with an
example, capabilities, the conformance kit ``zoo.testing``, publishing) is ``docs/PLUGINS.md``.

Example, a complete plugin module::

    import zoo
    from zoo.components import AttentionKernel

    class Talking(AttentionKernel):
        ...

    @zoo.hookimpl
    def register_attention(register):
        register("talking", Talking)
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("zoo")
hookimpl = pluggy.HookimplMarker("zoo")


@hookspec
def register_attention(register):
    """Register attention kernels: modules mapping ``q (B, h, Tq, hd)``, ``k/v (B, h_kv, Tk, hd)``,
    a boolean mask (True = may attend) and an optional additive bias to ``(out, weights | None)``.

    Example: ``register("eager", EagerAttention)``.
    """


@hookspec
def register_masks(register):
    """Register mask rules: modules that turn a :class:`zoo.components.MaskContext` into a boolean
    mask broadcastable to ``(B, h, Tq, Tk)``, True where a query may attend to a key.

    Example: ``register("sliding_window", SlidingWindow, config=SlidingWindowConfig)``.
    """


@hookspec
def register_positions(register):
    """Register positional-encoding schemes: modules that act on the embeddings, on q/k, or as an
    additive bias on the attention scores (see :class:`zoo.components.PositionScheme`).

    Example: ``register("sinusoidal", Sinusoidal, config=SinusoidalConfig)``.
    """


@hookspec
def register_norms(register):
    """Register normalisation layers: modules ``(…, d_model) -> (…, d_model)`` such as LayerNorm.

    Example: ``register("layernorm", LayerNorm, config=LayerNormConfig)``.
    """


@hookspec
def register_placements(register):
    """Register norm placements: how a norm wraps a residual sub-layer (pre, post, sandwich, ...).
    A placement module is built as ``component(config, ctx, make_norm)`` and provides ``enter(x)``
    (the sub-layer's input) and ``exit(x, y)`` (the residual output).

    Example: ``register("pre", PreNorm)``.
    """


@hookspec
def register_ffns(register):
    """Register position-wise feed-forward blocks ``d_model -> d_ff -> d_model`` (MLP, GLU family).

    Example: ``register("mlp", MLP, config=MLPConfig)``.
    """


@hookspec
def register_activations(register):
    """Register activation functions: :class:`zoo.components.ActivationFunction` subclasses whose
    ``fn`` maps a tensor to one of the same shape and dtype, element-wise.  Feed-forward blocks
    name them (``ffn: {kind: mlp, activation: NAME}``) and resolve the name at build time
    (:func:`zoo.registry.activation_fn`), so a new activation is one small plugin, not a new block.

    Example: ``register("mish", Mish)`` with ``class Mish(ActivationFunction): fn = staticmethod(F.mish)``.
    """


@hookspec
def register_tokenizers(register):
    """Register tokenizers: classes with ``encode(text) -> list[int]``, ``decode(ids) -> str``,
    ``vocab_size``, special-token ids, and ``to_json()`` / ``from_json()`` so they travel inside a
    checkpoint (see :class:`zoo.components.Tokenizer`).

    Example: ``register("char", CharTokenizer, config=CharTokenizerConfig)``.
    """


@hookspec
def register_tasks(register):
    """Register experiment tasks (``zoo.experiment``): classes built as ``component(config)`` that
    draw training batches deterministically from a seed, hold out evaluation data that never
    overlaps training, and compute exact metrics (see :class:`zoo.components.Task`).

    Example: ``register("mqar", MQAR, config=MQARConfig)``.
    """

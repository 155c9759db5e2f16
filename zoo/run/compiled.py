"""Compiled decoding: one ``torch.compile`` graph per decoding step, with no recompiles across steps.

Eager decoding of a small model is bound by Python, not by arithmetic: a GPT step is ~100 operator
calls, each a few microseconds of dispatch for a few hundred nanoseconds of maths.  Compiling the
step into one graph (gpt-fast's whole point) removes the dispatch; Inductor also fuses the small
element-wise operations between the matrix products.

A graph is only worth having if it is compiled once.  ``torch.compile`` specialises on every
Python value a function reads (an ``int`` position becomes a constant of the graph) and on every
tensor shape, so the ordinary cache (:class:`zoo.model.layers.KVCache`, whose views grow by one slot a
step and whose length is a Python ``int``) would recompile at every token.  :class:`StaticCache`
keeps every shape fixed instead:

- the keys and values live in ``(B, h_kv, capacity, hd)`` buffers, and every step attends over
  *all* ``capacity`` slots; the slots not yet written are hidden by a key-padding mask
  ``real & (slot_index <= slot)``;
- the position of the step is a **tensor**, ``slot (1,)``, that the compiled step advances in place
  (``slot += 1``): the graph reads it like any input, so step 7 and step 70 run the same graph;
- the new keys are written with ``index_copy_`` at ``slot``, in place;
- the Python values the model's forward reads (``cache.length``) are the same at every step
  (``capacity - 1``: the query is treated as the last of ``capacity`` keys, which the causal rule
  lets see every key, and the padding mask does the rest).

So after the prompt's *prefill* graph, one *decode* graph serves every step, every later call with
the same shapes (batch, capacity bucket, padded or not), and every prompt length whose capacity
falls into the same bucket (capacities are rounded up to a power of two, at most ``max_len``).
The compiled functions and their cache are kept per model (:func:`compiled_steps`), so a second
``generate`` call compiles nothing; :attr:`CompiledSteps.compiles` counts the graphs each function
compiled (the recompile counter ``zoo bench --compile`` prints).

The kept cache belongs to the model: two threads decoding the same model with ``compile=True`` at
the same time would share it (do not); :func:`release` drops a model's graphs and buffers.

What stays eager: choosing the next token (greedy, sampling, top-k/top-p, repetition penalty,
vocabulary limit, stop tokens) runs on the ``(B, V)`` logits outside the graph, so every such
option works unchanged.  What is refused with a :class:`~zoo.errors.ZooError` (see
:func:`check_compilable`): encoder-decoder and encoder-only models, ``use_cache=False``, beam search
(its cache reorder is a data-dependent gather between steps), masks other than the plain causal
rule (a sliding window or prefix-LM rule reads the query's offset as a Python ``int``), and a model
carrying forward hooks (``fwd_hooks``, :mod:`zoo.inside.hooks`): a compiled graph would run without them.

Compile time and caching: the first call compiles (on a CPU ~10-40 s for a small model: Dynamo
traces, Inductor writes and builds C++).  Inductor keeps its generated kernels and compiled graphs
on disk (the FX graph cache, under ``TORCHINDUCTOR_CACHE_DIR``, by default a folder in the system
temporary directory), so a second *process* compiling the same model skips code generation and the
C++ build and only re-traces (see docs/PERFORMANCE.md, "Compiled decoding", for measured times).
"""
from __future__ import annotations

import dataclasses
import itertools
import time
import types
from typing import Any

import torch

from ..errors import ZooError

#: The smallest capacity bucket: shorter runs share this one graph.
MIN_CAPACITY = 64


def capacity_bucket(needed: int, max_len: int) -> int:
    """Slots to allocate for ``needed`` tokens: the next power of two (at least
    :data:`MIN_CAPACITY`), never above ``max_len``, so runs of similar lengths share one graph."""
    cap = MIN_CAPACITY
    while cap < needed:
        cap *= 2
    return max(needed, min(cap, max_len))


class _StaticLayer:
    """One attention layer's keys and values: ``k, v (B, h_kv, capacity, hd)``, written in place.

    Duck-types :class:`zoo.model.layers.LayerCache` for :class:`zoo.model.layers.Attention`."""

    __slots__ = ("k", "v", "owner", "cross")

    def __init__(self, owner: "StaticCache", k: torch.Tensor, v: torch.Tensor):
        self.owner, self.k, self.v, self.cross = owner, k, v, None

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.owner.decoding:  # prefill: slots [0, T) hold the prompt, attend to it alone
            T = k.size(2)
            self.k[:, :, :T].copy_(k)
            self.v[:, :, :T].copy_(v)
            return k, v
        self.k.index_copy_(2, self.owner.slot, k)  # k (B, h_kv, 1, hd) into slot `slot`
        self.v.index_copy_(2, self.owner.slot, v)
        return self.k, self.v  # (B, h_kv, capacity, hd): unwritten slots are masked out


class StaticCache:
    """A KV cache of fixed shapes for compiled decoding; duck-types :class:`zoo.model.layers.KVCache`
    (``length``, ``layers``, ``next_positions``, ``append``, ``key_padding``) for the model's own
    forward, so every position scheme and kernel of the zoo runs unchanged inside the graph.

    Buffers: per layer ``k, v (B, h_kv, capacity, hd)``; ``real (B, capacity)`` bool, False for a
    prompt's left padding; ``pos (B|1, capacity)`` the absolute position of each slot (each row
    counts from its first real token); ``slot (1,)`` the slot the next fed token goes to."""

    def __init__(self, model, batch: int, capacity: int, padded: bool, dtype, device):
        self.capacity, self.padded = capacity, padded
        zeros = lambda *shape, **kw: torch.zeros(*shape, device=device, **kw)  # noqa: E731
        self.layers = []
        for block in model.decoder.blocks:
            (hk, dk), (hv, dv) = block.attn.cache_layout  # (h_kv, hd) twice; MLA: its latents
            # zeros, not empty: a masked slot still meets a weight of 0, and 0 * NaN would be NaN
            self.layers.append(_StaticLayer(self, zeros(batch, hk, capacity, dk, dtype=dtype),
                                            zeros(batch, hv, capacity, dv, dtype=dtype)))
        self.slots = torch.arange(capacity, device=device)  # (capacity,)
        self.real = torch.ones(batch, capacity, dtype=torch.bool, device=device)
        self.pos = torch.arange(capacity, device=device).expand(batch if padded else 1, -1).clone()
        self.slot = zeros(1, dtype=torch.long)
        self.length = 0
        self.decoding = False
        for t in self.tensors():
            # the same storage at every call: CUDA graphs may replay over it; a guard on identity
            torch._dynamo.mark_static_address(t)

    def tensors(self) -> list[torch.Tensor]:
        """Every buffer the compiled steps read or write."""
        return [t for layer in self.layers for t in (layer.k, layer.v)] + \
            [self.slots, self.real, self.pos, self.slot]

    def reset(self, padding: torch.Tensor | None, T0: int) -> None:
        """Start a new sequence of ``T0`` prompt tokens (``padding (B, T0)`` True = real, or None);
        runs eagerly, before the prefill.  Old keys stay in the buffers but are masked out."""
        self.real.fill_(True)
        if padding is not None:
            self.real[:, :T0].copy_(padding)
            self.pos.copy_((self.real.long().cumsum(-1) - 1).clamp(min=0))  # (B, capacity)
        self.slot.fill_(T0)

    # ---- the KVCache interface, as zoo.model.models / zoo.model.layers read it
    @property
    def key_padding(self) -> torch.Tensor:
        """``(B, capacity)`` the real tokens already cached (slots before ``slot``)."""
        return self.real & (self.slots < self.slot)

    def next_positions(self, T: int, device) -> torch.Tensor | None:
        if self.padded:
            return None  # positions come from key_padding (zoo.model.models.step_positions)
        if self.decoding:
            return self.slot.view(1, 1)  # (1, 1): a tensor, so every step is the same graph
        return self.pos[:, :T]  # prefill: (1, T)

    def append(self, pos: torch.Tensor, key_padding: torch.Tensor | None):
        if not self.decoding:
            return pos, key_padding  # prefill: the prompt's own positions and padding
        return self.pos, self.real & (self.slots <= self.slot)  # (B|1, cap), (B, cap)


def check_compilable(model, *, use_cache: bool = True, num_beams: int = 1) -> None:
    """Raise a :class:`ZooError` naming what keeps ``model`` / these options from compiled
    decoding (see the module docstring for why each is refused)."""
    fix = "drop compile=True (--compile) for this model or option"
    if model.spec.arch != "decoder":
        raise ZooError(f"compiled decoding supports decoder-only models, not {model.spec.arch}",
                       where="generate.compile", fix=fix)
    if not use_cache:
        raise ZooError("compiled decoding runs on the static KV cache; use_cache=False has none",
                       where="generate.compile", fix="use_cache=True, or " + fix)
    if num_beams != 1:
        raise ZooError(f"compiled decoding does not do beam search (num_beams={num_beams}): the "
                       "beams' cache is reordered between steps", where="generate.compile",
                       fix="num_beams=1, or " + fix)
    stack = model.decoder
    if not stack.plain_causal or len(stack.pattern):
        kinds = sorted({type(m).__name__ for m in stack.masks})
        raise ZooError(f"compiled decoding supports the plain causal mask, not {', '.join(kinds)}"
                       f"{' with a mask_pattern' if len(stack.pattern) else ''}",
                       where="decoder.mask", fix=fix)
    hooked = [name for name, m in model.named_modules()
              if m._forward_hooks or m._forward_pre_hooks]
    if hooked:
        raise ZooError(f"compiled decoding would skip the forward hooks on {hooked[0]!s}"
                       f"{f' (and {len(hooked) - 1} more)' if len(hooked) > 1 else ''}",
                       where="generate.compile", fix="remove the hooks (fwd_hooks), or " + fix)


@dataclasses.dataclass
class CompiledSteps:
    """The compiled prefill and decoding step of one model for one shape, and its cache.

    ``compiles``: graphs compiled so far per function (``{"prefill": 1, "decode": 1}`` after the
    first call; a recompile would raise a count).  ``compile_seconds``: wall time of each
    function's first call (tracing + code generation + the first run)."""
    cache: StaticCache
    prefill: Any
    decode: Any
    ones: torch.Tensor | None
    compiles: dict = dataclasses.field(default_factory=lambda: {"prefill": 0, "decode": 0})
    compile_seconds: dict = dataclasses.field(default_factory=dict)
    calls: dict = dataclasses.field(default_factory=lambda: {"prefill": 0, "decode": 0})

    @property
    def recompiles(self) -> int:
        """Graphs compiled beyond the first of each function (0 when decoding is one graph)."""
        return sum(max(n - 1, 0) for n in self.compiles.values())

    def run(self, name: str, *args) -> torch.Tensor:
        """Call the compiled ``name`` function; its first call is timed, and a model that does not
        compile into one graph becomes a ZooError naming the reason."""
        fn = getattr(self, name)
        first = not self.calls[name]
        self.calls[name] += 1
        if not first:
            return fn(*args)
        t0 = time.perf_counter()
        try:
            out = fn(*args)
        except Exception as exc:  # Dynamo's Unsupported, Inductor's lowering errors, a C++ build
            self.calls[name] = 0
            raise ZooError(f"torch.compile could not compile the model's {name} step into one "
                           f"graph: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                           where="generate.compile",
                           fix="drop compile=True (--compile); a plugin component doing "
                               "data-dependent Python control flow breaks the graph") from exc
        self.compile_seconds[name] = time.perf_counter() - t0
        return out


#: Inductor writes the code that calls a graph's kernels (its "wrapper") in C++ instead of Python
#: for CPU graphs.  A small model's decoding step is ~40 kernel and library calls; run from
#: Python they cost about as much as the arithmetic: on ``gpt_tiny`` (batch 1, 2 threads) one
#: compiled step took 1.11 ms with the Python wrapper and 0.56 ms with the C++ one, and compiled
#: decoding went from ~1.3x to ~1.8x eager (docs/PERFORMANCE.md).  The price is compile time: the
#: wrapper is one more C++ file to build (it lands in Inductor's disk cache like the kernels).
CPU_CPP_WRAPPER = True


def _inductor_options(mode: str | None, device_type: str) -> dict | None:
    """Inductor's settings for a decoding graph: CUDA graphs for ``reduce-overhead``, the C++
    wrapper (:data:`CPU_CPP_WRAPPER`) on a CPU."""
    if mode == "reduce-overhead":
        return {"triton.cudagraphs": True}
    if device_type == "cpu" and CPU_CPP_WRAPPER:
        return {"cpp_wrapper": True}
    return None


def _counting_backend(counts: dict, name: str, options: dict | None):
    """Inductor with ``options``, counting each graph it is handed: every (re)compile of ``name``
    adds one."""
    def backend(gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        counts[name] += 1
        return compile_fx(gm, example_inputs, config_patches=options)
    return backend


def compiled_steps(model, batch: int, capacity: int, padded: bool, explicit: bool,
                   mode: str | None = None) -> CompiledSteps:
    """The :class:`CompiledSteps` of ``model`` for this shape, made on first use and kept on the
    model (``model._zoo_compiled``), so later calls reuse the graphs and the cache.

    ``padded``: the prompt batch is left-padded (positions come from the padding); ``explicit``:
    the model is fed an all-True attention mask with each token (a spec ``pad_id``, or padding).
    ``mode``: ``torch.compile``'s mode; default ``"reduce-overhead"`` (CUDA graphs) on CUDA, the
    plain default elsewhere."""
    p = next(model.parameters())
    dtype = model.tok_emb.weight.dtype
    if mode is None:
        mode = "reduce-overhead" if p.device.type == "cuda" else "default"
    key = (batch, capacity, padded, explicit, dtype, str(p.device), mode)
    store = model.__dict__.setdefault("_zoo_compiled", {})
    if key in store:
        return store[key]
    cache = StaticCache(model, batch, capacity, padded, dtype, p.device)
    ones = torch.ones(batch, 1, dtype=torch.bool, device=p.device) if explicit else None
    head = _head(model)
    counts = {"prefill": 0, "decode": 0}

    def prefill(ids, mask):
        cache.length, cache.decoding = 0, False
        hidden = model(ids, attention_mask=mask, cache=cache, return_hidden=True)
        return head(hidden)  # (B, V)

    def decode(tok):
        # the query counts as the last of `capacity` keys (the causal rule then lets it see all of
        # them); which slots are real is the key-padding mask's job (StaticCache.append)
        cache.length, cache.decoding = capacity - 1, True
        hidden = model(tok, attention_mask=ones, cache=cache, return_hidden=True)  # (B, 1, D)
        cache.slot.add_(1)  # in place: the next step reads the next slot from the same tensor
        return head(hidden)  # (B, V)

    n = next(_serial)
    options = _inductor_options(mode, p.device.type)
    steps = CompiledSteps(
        cache=cache, ones=ones, compiles=counts,
        prefill=torch.compile(_own_code(prefill, n), fullgraph=True,
                              backend=_counting_backend(counts, "prefill", options)),
        decode=torch.compile(_own_code(decode, n), fullgraph=True,
                             backend=_counting_backend(counts, "decode", options)))
    store[key] = steps
    return steps


_serial = itertools.count()


def _own_code(fn, n: int):
    """``fn`` with a code object of its own.  Dynamo keeps compiled graphs, guards and its
    recompile limit per *code object*, and every closure made by one ``def`` shares one: without
    this, a second model's steps would first fail the guards of the first model's graphs (a wasted
    "recompile", which also turns on dynamic shapes) and eight models would exhaust the limit."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{n}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


def _head(model):
    """``hidden (B, T, D) -> logits (B, V)`` of the last position (soft-capped if the spec says)."""
    if model.spec.logit_softcap is None:
        return lambda hidden: model.lm_head(model.head_input(hidden[:, -1]))
    return lambda hidden: model.head_output(model.lm_head(model.head_input(hidden[:, -1])))


def decoder_logits(model, ids: torch.Tensor, padding: torch.Tensor | None, steps: int):
    """The compiled counterpart of :func:`zoo.run.steps.decoder_logits`: a coroutine yielding
    next-token logits ``(B, V)``, sent the chosen ids ``(B,)``; the prefill and every step run
    compiled graphs over a :class:`StaticCache`."""
    B, T0 = ids.shape
    explicit = padding is not None or model.spec.pad_id is not None
    cap = capacity_bucket(T0 + max(steps - 1, 0), model.spec.max_len)
    cs = compiled_steps(model, B, cap, padding is not None, explicit)
    cs.cache.reset(padding, T0)
    full = padding if padding is not None else (
        torch.ones(B, T0, dtype=torch.bool, device=ids.device) if explicit else None)
    model.__dict__["_zoo_compiled_last"] = cs
    logits = cs.run("prefill", ids, full)
    while True:
        sent = yield logits
        nxt = sent[0] if isinstance(sent, tuple) else sent
        logits = cs.run("decode", nxt[:, None])  # (B, V)


def release(model) -> int:
    """Drop ``model``'s compiled steps and their caches (the memory of the KV buffers); returns how
    many shapes were kept.  The next ``compile=True`` call compiles again (Inductor's disk cache
    makes that quicker)."""
    store = model.__dict__.pop("_zoo_compiled", None) or {}
    model.__dict__.pop("_zoo_compiled_last", None)
    return len(store)


def last_steps(model) -> CompiledSteps | None:
    """The :class:`CompiledSteps` ``model`` last decoded with (for reports and tests), or None."""
    return model.__dict__.get("_zoo_compiled_last")

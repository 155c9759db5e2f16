"""Work sized before it starts: a forward, a trace, a generation or a training step (issue 22).

``zoo.build`` refuses a model that does not fit (:mod:`zoo.guard.build_budget`); this module refuses *work* that
does not fit, from shapes only, before any tensor is made.  The old failures: a 65,536-token forward
through the eager kernel (the score matrix alone ``1 x 4 x 65536 x 65536`` floats, 68.7 GB), a
``zoo.trace`` of 8,192 tokens, 10,000 prompts x 250 new tokens (a ~10 GB KV cache) ended in the
allocator's raw ``RuntimeError`` -- or in swap.

The estimates are deliberately simple and say what they count (elements of the model's dtype,
logits in float32):

- **forward**: per layer, the widest transient (``B x T x (4 d + 2 d_ff)``: q, k, v, out and the
  feed-forward's inner activation) plus, when the attention kernel materialises its scores
  (kernels that can return weights: ``eager``, ``naive``), ``2 x B x h x Tq x Tk`` (scores and
  softmax); the logits ``B x T x V``;
- **trace**: a forward on the eager kernel that *keeps* every layer's activations and three
  score-sized tensors (scores, masked scores, weights); on gpt_tiny at 256 tokens this estimates
  18.9 MB where the trace records 17.2 MB;
- **generation**: the KV cache ``2 x L x B x h_kv x (prompt + new) x head_dim`` (what each layer's
  ``cache_layout`` says it keeps: MLA keeps ``r + d_r`` latent numbers per token) plus the prompt's
  forward (beam search: ``B x num_beams`` rows);
- **a training step**: a forward that keeps activations for backward, plus gradients and AdamW's two
  moments (3 x the parameters);
- **an activation cache** (``model.run_with_cache``, ``model.generate(..., return_cache=True)``,
  :func:`check_cache`): the forward plus, for every hook point kept, ``B x T`` times its width --
  ``h x T`` for the score maps (``hook_attn_scores``, ``hook_pattern``), ``h x d`` for
  ``hook_result``, ``d_ff`` for the feed-forward's inner hooks, the vocabulary for
  ``unembed.hook_out``, 1 for a norm's ``hook_scale``, ``d`` (or ``h x head_dim`` when wider) for
  the rest.  The hooks' names come from the caller (``zoo.inside.hooks``), their widths from here.

Cost: the forward check is a few integer multiplications on numbers cached per model (measured in
``docs/TRUST.md``); memory is read only when an estimate passes :data:`FLOOR` (256 MiB), so
ordinary calls never touch the file system.  The budget is the process's, as for ``zoo.build``
(:func:`available_bytes`): the least of the memory available on the model's device now, the
process's ``RLIMIT_AS`` / ``RLIMIT_DATA`` minus what it holds, and its cgroup's memory limit minus
the cgroup's usage; :data:`BUDGET` sets it explicitly (``float("inf")`` turns the checks off).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ZooError
from ..registry import get_registry

#: estimates below this many bytes are accepted without reading the available memory
FLOOR = 256 * 2 ** 20
#: ``None``: the memory available on the model's device now; a number of bytes; ``inf``: no check
BUDGET: float | None = None


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} PB"


def available_bytes(device: Any = None) -> tuple[float, str]:
    """``(bytes, description)``: memory this process may still take on ``device`` -- a GPU's free
    memory; on the CPU the *least* of the machine's available memory (``MemAvailable``) and what
    the process's own limits leave it (:func:`process_limits`: ``RLIMIT_AS`` / ``RLIMIT_DATA``
    minus what it holds, its cgroup's ``memory.max`` minus the cgroup's usage)."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info(dev)
        return float(free), f"free memory on {dev}"
    return min([machine_available(), *process_limits()], key=lambda c: c[0])


def machine_available(proc: str = "/proc") -> tuple[float, str]:
    """``(bytes, description)`` of the memory the machine has available (``MemAvailable``)."""
    try:
        with open(f"{proc}/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024, "available memory on cpu"
    except (OSError, ValueError, IndexError):
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")), "free memory on cpu"
    except (ValueError, OSError, AttributeError):
        return math.inf, "no limit (memory size unknown)"


#: a cgroup v1 limit at or above this means "no limit" (the kernel writes 2**63 - 4096 rounded)
_V1_UNLIMITED = 2 ** 60


def process_limits(proc: str = "/proc") -> list[tuple[float, str]]:
    """``[(bytes left, description), ...]`` for each limit on this process's memory besides the
    machine's: the soft ``RLIMIT_AS`` minus the address space it maps now (``VmSize``), the soft
    ``RLIMIT_DATA`` minus its data segment (``VmData``), and its cgroup's limit minus the cgroup's
    usage -- v2 ``memory.max`` / ``memory.current``, v1 ``memory.limit_in_bytes`` /
    ``memory.usage_in_bytes`` -- at every level from its own cgroup up to the mount's root (a parent's
    limit binds too).  Unreadable files and absent limits are skipped; ``proc`` is for tests."""
    out: list[tuple[float, str]] = []
    status = _status(proc)
    try:
        import resource
    except ImportError:  # not a Unix
        resource = None
    for name, field, what in (("RLIMIT_AS", "VmSize", "address-space"), ("RLIMIT_DATA", "VmData", "data-segment")):
        if resource is None or not hasattr(resource, name):
            continue
        soft, _ = resource.getrlimit(getattr(resource, name))
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        used = status.get(field, 0)
        out.append((max(0.0, float(soft - used)), f"the process's {what} limit {name} of "
                    f"{human_bytes(soft)}, {human_bytes(used)} of it in use"))
    out.extend(cgroup_limits(proc))
    return out


def _status(proc: str) -> dict[str, int]:
    """``/proc/self/status`` sizes in bytes (``VmSize``, ``VmData``, ...)."""
    sizes = {}
    try:
        with open(f"{proc}/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                parts = rest.split()
                if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
                    sizes[key] = int(parts[0]) * 1024
    except OSError:
        pass
    return sizes


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read(64).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (v2: no limit) -> None


def cgroup_limits(proc: str = "/proc") -> list[tuple[float, str]]:
    """The cgroup part of :func:`process_limits` (v2 and v1, from ``/proc/self/cgroup`` and the
    mounts in ``/proc/self/mountinfo``; where the files are is found once per process, the limits
    and usage are read at every call)."""
    if proc not in _CGROUP_FILES:
        _CGROUP_FILES[proc] = _cgroup_files(proc)
    out = []
    for here, version, (limit_file, used_file) in _CGROUP_FILES[proc]:
        limit, used = _read_int(os.path.join(here, limit_file)), _read_int(os.path.join(here, used_file))
        if limit is not None and (version == 2 or limit < _V1_UNLIMITED):
            out.append((max(0.0, float(limit - (used or 0))),
                        f"the cgroup's memory limit ({limit_file}, cgroup v{version}) of "
                        f"{human_bytes(limit)}, {human_bytes(used or 0)} of it in use"))
    return out


_CGROUP_FILES: dict[str, list] = {}


def _cgroup_files(proc: str) -> list[tuple[str, int, tuple[str, str]]]:
    """``[(folder, version, (limit file, usage file)), ...]``: this process's memory cgroup and
    each of its parents up to the mount point."""
    try:
        with open(f"{proc}/self/cgroup", encoding="utf-8", errors="replace") as fh:
            groups = [line.rstrip("\n").split(":", 2) for line in fh]
        with open(f"{proc}/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            mounts = [line.split() for line in fh]
    except OSError:
        return []
    out = []
    for hid, controllers, path in (g for g in groups if len(g) == 3):
        if hid == "0" and controllers == "":
            version, files = 2, ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):
            version, files = 1, ("memory.limit_in_bytes", "memory.usage_in_bytes")
        else:
            continue
        for m in mounts:
            if "-" not in m:
                continue
            dash = m.index("-")
            fstype, opts = m[dash + 1] if dash + 1 < len(m) else "", m[-1].split(",")
            if len(m) < 5 or not ((version == 2 and fstype == "cgroup2")
                                  or (version == 1 and fstype == "cgroup" and "memory" in opts)):
                continue
            root, point = m[3], m[4]
            rel = os.path.relpath(path, root) if (path + "/").startswith(root.rstrip("/") + "/") else "."
            here = os.path.normpath(os.path.join(point, rel))
            while True:
                out.append((here, version, files))
                if os.path.normpath(here) == os.path.normpath(point) or here in ("/", ""):
                    break
                here = os.path.dirname(here)
            break
    return out


@dataclass(frozen=True)
class _Stack:
    layers: int
    d: int
    heads: int
    cache_per_token: int  # numbers one token leaves in one layer's KV cache (Attention.cache_layout)
    d_ff: int
    scores: bool  # the kernel materialises (B, h, Tq, Tk) scores


@dataclass(frozen=True)
class Plan:
    """The numbers of one model the estimates need, read once per model."""
    stacks: dict
    vocab: int
    elem: int  # bytes per element of the model's dtype
    params: int
    device: Any


def plan(model) -> Plan:
    """The model's :class:`Plan`, cached on the model (``model.__dict__``; not a module state)."""
    p = model.__dict__.get("_zoo_workload_plan")
    if p is not None:
        return p
    spec, reg = model.spec, get_registry()
    roles = ("encoder", "decoder") if spec.arch == "encoder_decoder" else (spec.arch,)
    stacks = {}
    for role in roles:
        st = spec.stack(role)
        try:
            caps = reg.get("attention", st.attention.kind).capabilities
            scores = bool(caps.returns_weights)
        except Exception:  # an unknown kernel: assume it materialises its scores
            scores = True
        # what the built layer caches: 2 x h_kv x head_dim for q/k/v attention, MLA's latents
        (hk, dk), (hv, dv) = getattr(model, role).blocks[0].attn.cache_layout
        stacks[role] = _Stack(st.num_layers, st.d_model, st.num_heads, hk * dk + hv * dv, st.d_ff, scores)
    first = next(model.parameters())
    p = Plan(stacks, spec.vocab_size, first.element_size(), sum(t.numel() for t in model.parameters()),
             first.device)
    model.__dict__["_zoo_workload_plan"] = p
    return p


def _layer(s: _Stack, B: int, Tq: int, Tk: int, e: int, keep: bool, scores: bool) -> tuple[int, int]:
    """``(transient, kept per layer)`` bytes of one layer; ``scores`` forces materialised scores."""
    sc = B * s.heads * Tq * Tk * e if (s.scores or scores) else 0
    act = B * Tq * (4 * s.d + 2 * s.d_ff) * e
    # a trace keeps three score-sized tensors per layer (scores, masked scores, weights)
    return act + 2 * sc, (act + (3 if scores else 1) * sc) if keep else 0


def forward_bytes(p: Plan, B: int, T: int, T_src: int | None = None, *, keep: bool = False,
                  scores: bool = False) -> tuple[int, int]:
    """``(total bytes, of which scores)`` of one forward of ``B x T`` tokens (``T_src`` for an
    encoder-decoder's source); ``keep``: activations kept (training, trace); ``scores``: the kernel
    is switched to eager (trace)."""
    total, score_bytes = 0, 0
    for role, s in p.stacks.items():
        Tr = T_src if (role == "encoder" and T_src is not None) else T
        transient, kept = _layer(s, B, Tr, Tr, p.elem, keep, scores)
        total = max(total, transient) + kept * s.layers if keep else max(total, transient)
        if s.scores or scores:
            score_bytes = max(score_bytes, 2 * B * s.heads * Tr * Tr * p.elem)
    return total + B * T * p.vocab * 4, score_bytes


def budget(device: Any = None) -> tuple[float, str]:
    """``(bytes, how it was chosen)``: what work on ``device`` is held against -- :data:`BUDGET`
    when set, else the memory available there now (the UI holds a checkpoint's weights to it too)."""
    if BUDGET is not None:
        return float(BUDGET), "zoo.guard.run_budget.BUDGET"
    return available_bytes(device)


def _budget(p: Plan) -> tuple[float, str]:
    return budget(p.device)


def refuse_if_over(p: Plan, nbytes: int, what: str, where: str, detail: str, fix: str) -> None:
    """A :class:`ZooError` at ``where`` when ``nbytes`` passes the budget (memory read only above
    :data:`FLOOR`)."""
    if nbytes < FLOOR:
        return
    limit, why = _budget(p)
    if nbytes > limit:
        raise ZooError(f"{what} needs about {human_bytes(nbytes)}, more than the budget of "
                       f"{human_bytes(limit)} ({why}): {detail}", where=where,
                       fix=f"{fix}; or set zoo.guard.run_budget.BUDGET (bytes, float('inf') for no check)")


def check_forward(model, args: tuple, kwargs: dict) -> None:
    """Refuse a forward that cannot fit, from the shapes of its first argument(s) only."""
    ids = args[0] if args else kwargs.get("ids", kwargs.get("src"))
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        return  # the model's own checks answer
    B, T = ids.shape
    if B * T < 2048:  # nothing this small can pass the floor: no arithmetic at all
        return
    p = plan(model)
    T_src = None
    if len(p.stacks) == 2:  # encoder-decoder: (src, tgt)
        tgt = args[1] if len(args) > 1 else kwargs.get("tgt")
        T_src, T = T, (tgt.size(-1) if isinstance(tgt, torch.Tensor) else T)
    total, sc = forward_bytes(p, B, T, T_src, keep=torch.is_grad_enabled() and model.training)
    refuse_if_over(p, total, f"a forward of {B} x {T_src or T} tokens", "forward.ids",
                   f"the attention scores alone {human_bytes(sc)}" if sc > total / 2 else
                   f"activations and logits for {B * T} tokens",
                   "give fewer or shorter inputs (a smaller batch, a shorter text), or a kernel "
                   "that does not materialise its scores (attention: {kind: sdpa})")


def check_trace(model, ids: torch.Tensor, tgt: torch.Tensor | None) -> None:
    """Refuse a :func:`zoo.trace` whose recorded activations and weights cannot fit."""
    p = plan(model)
    B, T = ids.shape
    T_src = None
    if len(p.stacks) == 2:
        T_src, T = T, (tgt.size(-1) if tgt is not None else T)
    total, sc = forward_bytes(p, B, T, T_src, keep=True, scores=True)
    refuse_if_over(p, total, f"a trace of {B} x {T_src or T} tokens", "trace.ids",
                   "it keeps every layer's activations and attention weights "
                   f"(the weights of one layer alone {human_bytes(sc // 2)})",
                   "trace a shorter input (a trace is for looking at, a few hundred tokens)")


def check_generate(model, B: int, T0: int, new: int) -> None:
    """Refuse a generation of ``B`` rows (beams included) x (``T0`` + ``new``) tokens that cannot
    fit: its KV cache plus the prompt's forward."""
    if B * (T0 + new) < 2048:
        return
    p = plan(model)
    dec = p.stacks.get("decoder")
    if dec is None:
        return
    cache = dec.layers * B * dec.cache_per_token * (T0 + new) * p.elem
    src = T0 if len(p.stacks) == 2 else None
    prefill = forward_bytes(p, B, T0 if src is None else 1, src)[0]
    refuse_if_over(p, cache + prefill, f"generating {B} rows x ({T0} prompt + {new} new) tokens",
                   "generate.ids" if cache < prefill else "generate.max_new_tokens",
                   f"the KV cache {human_bytes(cache)}, the prompt's forward {human_bytes(prefill)}",
                   "generate in smaller batches (fewer prompts or beams at a time), or ask for fewer "
                   "max_new_tokens")


def check_train_step(model, batch_size: int, seq_len: int, where: str = "train.batch_size") -> None:
    """Refuse a training step of ``batch_size x seq_len`` tokens that cannot fit: kept activations,
    gradients and AdamW's moments."""
    p = plan(model)
    acts = forward_bytes(p, batch_size, seq_len, seq_len if len(p.stacks) == 2 else None,
                         keep=True)[0]
    state = 3 * p.params * 4
    refuse_if_over(p, acts + state, f"a training step of {batch_size} x {seq_len} tokens", where,
                   f"activations kept for backward {human_bytes(acts)}, gradients and optimizer "
                   f"moments {human_bytes(state)}",
                   "lower batch_size or the sequence length (block_size)")


def _hook_width(name: str, p: Plan, s: _Stack, Tk: int) -> int:
    """Numbers one token leaves in the hook point ``name`` (see the module docstring)."""
    leaf = name.rsplit(".", 1)[-1]
    if leaf in ("hook_attn_scores", "hook_pattern"):
        return s.heads * Tk
    if leaf == "hook_result":
        return s.heads * s.d
    if leaf == "hook_scale" or leaf == "hook_tokens":
        return 1
    if name.startswith("unembed.") and leaf == "hook_out":
        return p.vocab
    if ".mlp." in name or ".moe." in name or ".experts" in name:
        return max(s.d, s.d_ff)
    return max(s.d, s.cache_per_token)


def check_cache(model, names: list[str], B: int, T: int, T_src: int | None = None,
                where: str = "run_with_cache.ids") -> None:
    """Refuse an activation cache of the hook points ``names`` over ``B x T`` tokens (``T_src``: an
    encoder-decoder's source) that cannot fit beside its forward -- before the forward runs."""
    if B * max(T, T_src or 0) < 256:  # nothing this small can pass the floor
        return
    p = plan(model)
    s = max(p.stacks.values(), key=lambda x: x.heads * x.d + x.d_ff)  # the wider stack for every name
    Tk = max(T, T_src or 0)
    per = {n: B * Tk * _hook_width(n, p, s, Tk) * 4 for n in names}  # recorded as float32 at most
    kept = sum(per.values())
    total = kept + forward_bytes(p, B, T, T_src)[0]
    if total < FLOOR:
        return
    top = sorted(per, key=per.get, reverse=True)[:2]
    refuse_if_over(p, total, f"caching {len(names)} hook points over {B} x {Tk} tokens", where,
                   f"the cache alone {human_bytes(kept)}, the largest {', '.join(top)} "
                   f"({human_bytes(per[top[0]]) if top else '0 B'} each)",
                   "cache fewer hook points (names_filter='blocks.0.*' or a list of names), or a "
                   "shorter input")

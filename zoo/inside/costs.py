"""What a forward pass costs: parameters per component, FLOPs and memory versus sequence length.

The lecture's compute-cost table (seed ``000``) counts, per layer and sequence of length ``T``::

    attention core  2 · T² · d_model      (q·kᵀ: T·T·d multiply-adds, weights·v: the same again)
    feed-forward    2 · T · d_model · d_ff (d -> d_ff -> d)

so the quadratic attention term overtakes the linear feed-forward term at ``T = d_ff``, whatever
``d_model`` and the number of layers.  Here the table is generalised and made exact:

- the core uses the real head geometry ``h · hd`` (which need not equal ``d_model``);
- the projections are counted too: ``q`` and the output ``D · h · hd`` each, ``k`` and ``v``
  ``D · h_kv · hd`` each, so grouped-query attention (``h_kv < h``) is cheaper;
- the feed-forward cost is read off the FFN module's own weight shapes (built on the meta device), so
  a GLU block (SwiGLU: three ``D x d_ff`` matrices) costs 3/2 of an MLP, and a plugin's FFN is
  counted right without zoo knowing its formula;
- cross-attention (encoder-decoder) uses the source length ``S``; the LM / MLM / classifier head
  is included.

Counts are multiply-accumulates (MACs); FLOPs = 2 · MACs (the convention of PyTorch's
``FlopCounterMode``, which the test suite checks these numbers against).  The crossover
``T* = ffn_per_token / (2 · h · hd)`` reduces to the seed's ``T* = d_ff`` for GPT-2 shapes.
"""
from __future__ import annotations

import functools
import time
from collections import OrderedDict
from typing import Any

import torch

from ..model.assembly import construct
from ..model.layers import Attention, make_parts
from ..registry import get_registry
from ..model.spec import ModelSpec, parse_spec
from .summary import parameter_table as _groups


def _spec(obj):
    if isinstance(obj, ModelSpec):
        return obj
    if hasattr(obj, "spec"):
        return obj.spec
    return parse_spec(obj)


def parameter_table(model) -> list[dict[str, Any]]:
    """Rows ``{"component", "parameters", "share"}`` per component (shared tensors counted once),
    plus a ``total`` row; see :func:`zoo.inside.summary.parameter_table`."""
    groups = _groups(model)
    total = sum(groups.values())
    rows = [{"component": k, "parameters": v, "share": v / max(total, 1)} for k, v in groups.items()]
    rows.append({"component": "total", "parameters": total, "share": 1.0})
    return rows


def ffn_macs_per_token(spec, role: str, layer: int | None = None) -> int:
    """Multiply-adds per token of one FFN block: what the block says it costs
    (:meth:`zoo.components.FeedForward.macs_per_token`: its weight matrices once, or only the active
    share of a mixture of experts), built on the meta device.  ``layer``: that layer's block (a
    ``dense_ffn`` layer differs); default the stack's ``ffn`` (its last layer)."""
    with torch.device("meta"):
        ffn = make_parts(spec, role, get_registry()).ffn(spec.stack(role).num_layers - 1 if layer is None else layer)
    if hasattr(ffn, "macs_per_token"):
        return int(ffn.macs_per_token())
    return sum(p.numel() for p in ffn.parameters() if p.dim() >= 2)  # a plugin not derived from FeedForward


@functools.lru_cache(maxsize=64)
def attention_shape(spec, role: str) -> tuple[int, int, int, int]:
    """One self-attention layer of ``spec``'s ``role`` stack, built on the meta device: ``(projection
    multiply-adds per token, query/key features per head, value features per head, numbers one token
    leaves in the KV cache)``.  q/k/v attention: ``(D·(h + 2 h_kv)·hd + h·hd·D, hd, hd, 2·h_kv·hd)``;
    a layer its kernel brings says its own (MLA: its weight matrices, ``d_n + d_r``, ``d_v``, and
    ``r + d_r`` latent numbers from its ``cache_layout``)."""
    st = spec.stack(role)
    with torch.device("meta"):
        kernel = make_parts(spec, role, get_registry()).kernel()
        layer = (type(kernel).layer or Attention)(st, kernel)
    (hk, dk), (hv, dv) = layer.cache_layout
    proj = sum(p.numel() for p in layer.parameters() if p.dim() == 2)  # every weight matrix once
    return proj, layer.hd, getattr(layer, "dv", layer.hd), hk * dk + hv * dv


def stack_macs(spec, role: str, T: int, S: int | None = None, batch: int = 1) -> dict[str, int]:
    """MACs of one stack's forward over ``T`` tokens (``S`` source tokens for cross-attention)."""
    st = spec.stack(role)
    D, h, kv, hd, L = spec.d_model, st.num_heads, st.num_kv_heads, st.head_dim, st.num_layers
    proj_tok, d_qk, d_v, _ = attention_shape(spec, role)
    proj = T * proj_tok  # q, k, v, out (MLA: its latent projections)
    core = h * T * T * (d_qk + d_v)  # q·kᵀ and weights·v
    dense = min(st.dense_layers or 0, L) if st.dense_ffn is not None else 0  # DeepSeek's first layers
    ffn = dense * ffn_macs_per_token(spec, role, 0) + (L - dense) * ffn_macs_per_token(spec, role)
    out = {"attention_proj": L * batch * proj, "attention_core": L * batch * core, "ffn": batch * T * ffn}
    if st.cross_attention:
        S = T if S is None else S
        cross_proj = T * (D * h * hd + h * hd * D) + S * 2 * D * kv * hd
        out["cross_proj"] = L * batch * cross_proj
        out["cross_core"] = L * batch * 2 * h * hd * T * S
    return out


def forward_cost(model_or_spec, seq_len: int, *, batch: int = 1, src_len: int | None = None,
                 bytes_per_elem: int = 4) -> "OrderedDict[str, Any]":
    """MACs, FLOPs and memory of one forward pass over ``batch`` sequences of ``seq_len`` tokens.

    Keys: ``attention`` (projections + core, self and cross), ``attention_core`` (the quadratic
    part), ``ffn``, ``head``, ``total`` (MACs) and ``*_flops`` (= 2 MACs); memory in bytes:
    ``params``, ``scores`` (every layer's ``B·h·T·T`` score matrix, what an eager kernel
    materialises and training keeps), ``kv_cache`` (keys and values of all layers at length T) and
    ``hidden`` (one ``B·T·D`` residual stream per sub-layer)."""
    spec = _spec(model_or_spec)
    T, B = seq_len, batch
    S = src_len if src_len is not None else T
    parts: dict[str, int] = {}
    for role in spec.roles:
        t = S if (role == "encoder" and spec.arch == "encoder_decoder") else T
        for k, v in stack_macs(spec, role, t, S if role == "decoder" else None, B).items():
            parts[k] = parts.get(k, 0) + v
    D, V = spec.d_model, spec.vocab_size
    if spec.arch == "encoder":
        head = spec.head
        if head.kind == "mlm":
            parts["head"] = B * T * ((D * D if head.transform else 0) + D * V)
        elif head.kind == "classifier":
            parts["head"] = B * D * head.num_labels
        else:
            parts["head"] = 0
    else:
        parts["head"] = B * T * D * V
    out: "OrderedDict[str, Any]" = OrderedDict(seq_len=T, batch=B)
    out["attention_core"] = parts["attention_core"] + parts.get("cross_core", 0)
    out["attention"] = (parts["attention_proj"] + parts["attention_core"]
                        + parts.get("cross_proj", 0) + parts.get("cross_core", 0))
    out["ffn"] = parts["ffn"]
    out["head"] = parts["head"]
    out["total"] = out["attention"] + out["ffn"] + out["head"]
    for k in ("attention_core", "attention", "ffn", "head", "total"):
        out[f"{k}_flops"] = 2 * out[k]
    n_params = _count_params(model_or_spec, spec)
    scores = kv = hidden = 0
    for role in spec.roles:
        st = spec.stack(role)
        t = S if (role == "encoder" and spec.arch == "encoder_decoder") else T
        scores += st.num_layers * B * st.num_heads * t * t
        if st.cross_attention:
            scores += st.num_layers * B * st.num_heads * t * S
        kv += st.num_layers * B * attention_shape(spec, role)[3] * t  # MLA: its latents
        hidden += (3 if st.cross_attention else 2) * st.num_layers * B * t * D
    out["params_bytes"] = n_params * bytes_per_elem
    out["scores_bytes"] = scores * bytes_per_elem
    out["kv_cache_bytes"] = kv * bytes_per_elem
    out["hidden_bytes"] = hidden * bytes_per_elem
    return out


def _count_params(model_or_spec, spec) -> int:
    if isinstance(model_or_spec, torch.nn.Module):
        return sum(v for v in _groups(model_or_spec).values())
    return _spec_params(spec)


@functools.lru_cache(maxsize=64)
def _spec_params(spec) -> int:
    """Parameters of the model a spec describes, built on the meta device (no memory, no init)."""
    with torch.device("meta"):
        model = construct(spec)
    return sum(_groups(model).values())


def cost_table(model_or_spec, seq_lens=(128, 512, 1024, 2048, 4096, 8192), **kw) -> list[dict]:
    """:func:`forward_cost` for several lengths (the seed's table, one row per ``seq_len``)."""
    return [dict(forward_cost(model_or_spec, T, **kw)) for T in seq_lens]


def crossover(model_or_spec, role: str | None = None) -> dict[str, float]:
    """Sequence lengths where attention catches up with the feed-forward block in one layer.

    ``core``: the quadratic core alone equals the FFN (the seed's ``T* = d_ff`` for GPT-2 shapes);
    ``attention``: core + projections equal the FFN (0 when the projections alone already cost
    more, as with a narrow FFN)."""
    spec = _spec(model_or_spec)
    role = role or spec.roles[-1]
    st = spec.stack(role)
    proj, d_qk, d_v, _ = attention_shape(spec, role)
    ffn = ffn_macs_per_token(spec, role)
    per_key = st.num_heads * (d_qk + d_v)  # core MACs per query per key
    return {"core": ffn / per_key, "attention": max(ffn - proj, 0) / per_key}


def machine_flops(n: int = 512, repeats: int = 3, device=None, dtype=torch.float32) -> float:
    """Achieved FLOP/s of an ``n x n`` matmul here (the yardstick for the time estimate)."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        _sync(a)
        t = time.perf_counter()
        a @ b
        _sync(a)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best


def _sync(t):
    if t.is_cuda:
        torch.cuda.synchronize(t.device)


@torch.no_grad()
def measure(model, seq_lens=(32, 64, 128), *, batch: int = 1, repeats: int = 3) -> list[dict]:
    """Measured forward time beside the estimate ``FLOPs / machine_flops()`` for each length.

    The estimate is a lower bound (perfect matmul efficiency, no memory traffic or Python
    overhead); the ratio shows how far a small model is from compute-bound."""
    p = next(model.parameters())
    rate = machine_flops(device=p.device, dtype=p.dtype)
    rows = []
    was = model.training
    model.eval()
    try:
        for T in seq_lens:
            T = min(T, model.spec.max_len)
            ids = torch.randint(0, model.spec.vocab_size, (batch, T), device=p.device)
            args = (ids, ids) if model.spec.arch == "encoder_decoder" else (ids,)
            model(*args)
            best = float("inf")
            for _ in range(repeats):
                _sync(p)
                t = time.perf_counter()
                model(*args)
                _sync(p)
                best = min(best, time.perf_counter() - t)
            cost = forward_cost(model, T, batch=batch)
            rows.append({"seq_len": T, "flops": cost["total_flops"], "measured_s": best,
                         "estimated_s": cost["total_flops"] / rate})
    finally:
        model.train(was)
    return rows


def human(n: float, unit: str = "") -> str:
    """``1234567 -> '1.23M'`` (the seed's helper)."""
    for prefix in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.2f}{prefix}{unit}"
        n /= 1000.0
    return f"{n:.2f}P{unit}"


# ---------------------------------------------------------------------- bytes read per decoded token
def _own_bytes(module: torch.nn.Module, seen: set) -> int:
    """Bytes of the tensors ``module`` itself holds (not its children), each storage counted once.

    An embedding table contributes one row (a lookup reads one row per token; a tied LM head reads
    the whole table through the head module, which is counted there); an int8 linear its packed
    weight (``weight_bytes``)."""
    if hasattr(module, "weight_bytes"):
        return module.weight_bytes
    if isinstance(module, torch.nn.Embedding):
        w = module.weight
        return w.size(1) * w.element_size()
    if getattr(type(module), "acts_on_embeddings", False):  # a position table: one row per token
        tables = [t for t in module.buffers(recurse=False) if t.dim() == 2]
        return sum(t.size(-1) * t.element_size() for t in tables)
    total = 0
    for t in list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)):
        key = t.untyped_storage().data_ptr() if t.device.type != "meta" else id(t)
        if key in seen:
            continue
        seen.add(key)
        total += t.numel() * t.element_size()
    return total


def decode_bytes(model, context_len: int, *, batch: int = 1, src_len: int = 0) -> dict[str, int]:
    """Bytes a decoding step must read from memory, at ``context_len`` cached tokens.

    One step of batch-1 decoding multiplies a single vector by every weight matrix of the decoder
    stack and the LM head: each weight is read once and used for one multiply-add.  So the step
    cannot be faster than ``bytes / memory bandwidth``, the **roofline** of decoding:

    - ``weights``: every tensor the decoder stack and the LM head hold (a tied head is the whole
      embedding table), one embedding row per token; the cross-attention key/value projection is
      not re-read (its output over the encoder memory is cached);
    - ``kv_cache``: ``2 (k and v) x layers x batch x h_kv x hd x context_len`` elements of the
      self-attention cache (MLA: ``r + d_r`` latent numbers per token per layer), plus the cached cross-attention keys/values over ``src_len`` tokens.

    Activations (a few ``D``-vectors) are negligible at batch 1 and are not counted.  Returns
    ``{"weights", "kv_cache", "total"}``."""
    spec = _spec(model)
    st = spec.stack("decoder")
    p = next((t for t in model.parameters() if t.is_floating_point()), None)
    itemsize = p.element_size() if p is not None else 4
    seen: set = set()
    weights = 0
    skip = set()
    for name, m in model.decoder.named_modules():
        if name.endswith("cross.kv"):
            skip.add(m)  # its output over the encoder memory sits in the cache
    for m in list(model.decoder.modules()) + list(model.lm_head.modules()):
        if m not in skip:
            weights += _own_bytes(m, seen)
    weights += batch * spec.d_model * itemsize  # the token's embedding row
    kv = st.num_layers * batch * attention_shape(spec, "decoder")[3] * context_len * itemsize
    if st.cross_attention:
        kv += 2 * st.num_layers * batch * st.num_kv_heads * st.head_dim * src_len * itemsize
    return {"weights": weights, "kv_cache": kv, "total": weights + kv}

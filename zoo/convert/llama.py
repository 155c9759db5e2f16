"""Llama (``LlamaForCausalLM``, ``LlamaModel``): rotary positions, RMSNorm pre-norm, SwiGLU,
grouped-query attention.  :func:`read_decoder` is shared by the Llama-shaped families (Qwen2,
Mistral, Qwen3, Phi-3, Gemma), which add or refuse a few fields each.

Rope scaling: default, linear, llama3, yarn, dynamic (NTK) and longrope convert (``rope`` with its
``scaling``).  Refused: other rope types, activations without an exact equivalent.
"""
from __future__ import annotations

import math

from .core import INV_ACTS, ConvertError, Converter, Source, lm_head, norm_entry, qkv, register


def rope(src: Source, fraction: float = 1.0) -> dict:
    """Rotary settings (transformers 5 ``rope_parameters`` or 4.x ``rope_theta`` + ``rope_scaling``)
    as a zoo ``rope`` entry."""
    scaling, rp = src.mapping("rope_scaling"), src.mapping("rope_parameters")
    p = {**rp, **scaling}  # a legacy rope_scaling, when present, says what the model was trained with
    kind = p.get("rope_type") or p.get("type") or "default"
    where = "rope_scaling" if scaling else "rope_parameters"
    sub = Source(p, {}, src.family)  # the same typed reading for the nested fields
    sub.config.setdefault("rope_theta", src.get("rope_theta", 10000.0))
    try:
        return _rope_entry(src, sub, p, kind, where, fraction)
    except ConvertError as e:  # a nested field: name it inside its mapping
        key = (e.where or "").removeprefix("config.")
        if key in p or key in _NESTED:
            raise ConvertError(e.what, where=f"config.{where}.{key}", options=e.options, fix=e.fix) from None
        raise


#: the fields :func:`rope` reads inside ``rope_parameters`` / ``rope_scaling``
_NESTED = ("factor", "low_freq_factor", "high_freq_factor", "attention_factor", "mscale", "mscale_all_dim",
           "beta_fast", "beta_slow", "truncate")


def _rope_entry(src: Source, sub: Source, p: dict, kind: str, where: str, fraction: float) -> dict:
    out = {"kind": "rope", "base": sub.float("rope_theta", lo=1.0001)}
    if fraction != 1.0:
        out["fraction"] = fraction
    if kind == "linear":
        out.update(scaling="linear", factor=sub.float("factor", positive=True))
    elif kind == "llama3":
        out.update(scaling="llama3", factor=sub.float("factor", positive=True),
                   low_freq_factor=sub.float("low_freq_factor", positive=True),
                   high_freq_factor=sub.float("high_freq_factor", positive=True),
                   original_max_len=sub.int("original_max_position_embeddings",
                                            src.int("max_position_embeddings")))
    elif kind == "yarn":
        factor = sub.float("factor", None, positive=True)
        orig = sub.int("original_max_position_embeddings", src.int("max_position_embeddings"))
        factor = src.int("max_position_embeddings") / orig if factor is None else factor
        att = sub.float("attention_factor", None, positive=True)
        ms, ms_all = sub.float("mscale", None), sub.float("mscale_all_dim", None)
        if att is None and ms and ms_all:  # DeepSeek's ratio of two mscales
            att = yarn_mscale(factor, ms) / yarn_mscale(factor, ms_all)
        out.update(scaling="yarn", factor=factor, original_max_len=orig,
                   beta_fast=sub.float("beta_fast", 32.0, positive=True),
                   beta_slow=sub.float("beta_slow", 1.0, positive=True), attention_factor=att,
                   truncate=sub.flag("truncate", True))
    elif kind == "dynamic":  # dynamic NTK: the base grows once a call runs past max_position_embeddings
        out.update(scaling="dynamic", factor=sub.float("factor", positive=True),
                   original_max_len=src.int("max_position_embeddings"))
    elif kind == "longrope":
        mpe = src.int("max_position_embeddings")
        # Phi-3 keeps the pre-training length at the top level, and transformers gives it priority
        orig = src.int("original_max_position_embeddings", None) or sub.int("original_max_position_embeddings", mpe)
        factor = sub.float("factor", None, positive=True)
        out.update(scaling="longrope", factor=mpe / orig if factor is None else factor, original_max_len=orig,
                   attention_factor=sub.float("attention_factor", None, positive=True),
                   short_factor=_factors(src, where, p, "short_factor", fraction),
                   long_factor=_factors(src, where, p, "long_factor", fraction))
    elif kind != "default":
        src.refuse(where, kind, "zoo's rope implements default, linear, llama3, yarn, dynamic and longrope "
                   "frequencies only", options=list(ROPE_TYPES), fix="convert a model with one of the listed rope types")
    return out


#: the rope types :func:`rope` converts (transformers' ``rope_type``)
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic", "longrope")


def _factors(src: Source, where: str, p: dict, key: str, fraction: float) -> list[float]:
    """LongRoPE's per-pair divisors: one positive number per rotated feature pair."""
    v = p.get(key)
    D, H = src.int("hidden_size"), src.int("num_attention_heads")
    pairs = int(src.int("head_dim", D // H) * fraction) // 2
    if not (isinstance(v, (list, tuple)) and len(v) == pairs and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in v)):
        src.refuse(where, {key: v}, f"longrope needs {key}: one positive number per rotated feature "
                   f"pair ({pairs})", fix=f"give {key} as a list of {pairs} positive numbers")
    return [float(x) for x in v]


def context_len(src: Source, positions: dict) -> int:
    """The spec's ``max_len``: ``max_position_embeddings``, except under dynamic NTK scaling, whose
    point is to run past it: ``factor`` times longer (``original_max_len`` keeps the threshold)."""
    mpe = src.int("max_position_embeddings", 2048)
    return int(mpe * positions["factor"]) if positions.get("scaling") == "dynamic" else mpe


def hf_max_positions(spec) -> int:
    """The reverse: ``max_position_embeddings`` of a zoo decoder spec."""
    pc = spec.stack("decoder").positions
    return pc.config.original_max_len if pc.kind == "rope" and pc.config.scaling == "dynamic" else spec.max_len


def yarn_mscale(factor: float, m: float = 1.0) -> float:
    """YaRN's attention factor for a context stretched ``factor`` times, ``0.1 m ln(factor) + 1``
    (1 when not stretched): transformers' ``get_mscale``."""
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def read_decoder(src: Source, attention: str, name: str, *, qkv_bias=None, out_bias=None,
                 mask="causal", norm="rmsnorm", ffn="swiglu", act_key="hidden_act", mlp=None, fraction=1.0,
                 **extra):
    """Spec and tensors of a Llama-shaped decoder; the keyword arguments are what a family changes.
    ``mlp(src, st, hf_prefix, zoo_prefix, spec)``: maps one layer's feed-forward instead of the dense
    gate/up/down (a mixture of experts: zoo/convert/mixtral.py); ``fraction``: the rotated share of
    each head (Phi-3's ``partial_rotary_factor``)."""
    act = src.act(act_key, default="silu")
    p = src.prefix("model.")
    L, D, H = src.int("num_hidden_layers"), src.int("hidden_size"), src.int("num_attention_heads")
    hd = src.int("head_dim", D // H)
    bias = src.flag("attention_bias", False)
    qkv_bias = bias if qkv_bias is None else qkv_bias
    out_bias = bias if out_bias is None else out_bias
    mlp_bias = src.flag("mlp_bias", False)
    spec = dict(name=name, arch="decoder", vocab_size=src.int("vocab_size"),
                max_len=src.int("max_position_embeddings", 2048), d_model=D, num_layers=L, num_heads=H,
                num_kv_heads=src.int("num_key_value_heads", H), head_dim=hd if hd * H != D else None,
                d_ff=src.int("intermediate_size"), dropout=src.float("attention_dropout", 0.0, lo=0, hi=0.999),
                qkv_bias=qkv_bias, out_bias=out_bias, tie_embeddings=True, scale_embeddings=False,
                attention=attention, mask=mask, positions=rope(src, fraction),
                norm=norm_entry(norm, src.float("rms_norm_eps", 1e-6, positive=True), "pre"),
                ffn={"kind": ffn, "activation": act, "bias": mlp_bias})
    spec["max_len"] = context_len(src, spec["positions"])
    spec.update(extra)
    wte = src.take(f"{p}embed_tokens.weight")
    st = {"tok_emb.weight": wte}
    for i in range(L):
        h, z = f"{p}layers.{i}.", f"decoder.blocks.{i}."
        a = f"{h}self_attn."
        if src.has(f"{a}qkv_proj.weight"):  # Phi-3: already fused q|k|v
            st[f"{z}attn.qkv.weight"] = src.take(f"{a}qkv_proj.weight")
        else:
            qkv(src, st, a, z, bias=qkv_bias)
        st[f"{z}attn.out.weight"] = src.take(f"{a}o_proj.weight")
        if out_bias:
            st[f"{z}attn.out.bias"] = src.take(f"{a}o_proj.bias")
        for hf, zn in (("q_norm", "q_norm"), ("k_norm", "k_norm")):  # Qwen3: per-head q/k RMSNorm
            if src.has(f"{a}{hf}.weight"):
                st[f"{z}attn.{zn}.weight"] = src.take(f"{a}{hf}.weight")
        src.ignore(f"{a}rotary_emb.inv_freq")
        st[f"{z}attn_res.norm.weight"] = src.take(f"{h}input_layernorm.weight")
        st[f"{z}ffn_res.norm.weight"] = src.take(f"{h}post_attention_layernorm.weight")
        m = f"{h}mlp."
        if mlp is not None:
            mlp(src, st, m, z, spec)
            continue
        if src.has(f"{m}gate_up_proj.weight"):  # Phi-3: fused [gate; up]
            d_ff = spec["d_ff"]
            st[f"{z}ffn.gate.weight"], st[f"{z}ffn.up.weight"] = src.split(f"{m}gate_up_proj.weight", [d_ff, d_ff])
            names = (("down_proj", "down"),)
        else:
            names = (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down"))
        for hf, zn in names:
            st[f"{z}ffn.{zn}.weight"] = src.take(f"{m}{hf}.weight")
            if mlp_bias:
                st[f"{z}ffn.{zn}.bias"] = src.take(f"{m}{hf}.bias")
    src.ignore(f"{p}rotary_emb.inv_freq")
    st["decoder.final_norm.weight"] = src.take(f"{p}norm.weight")
    lm_head(src, spec, st, wte)
    return spec, st


def rope_parameters(rc) -> dict:
    out = {"rope_type": "default" if rc.scaling == "none" else rc.scaling, "rope_theta": rc.base}
    if rc.scaling != "none":
        out["factor"] = rc.factor
    if rc.scaling == "llama3":
        out.update(low_freq_factor=rc.low_freq_factor, high_freq_factor=rc.high_freq_factor,
                   original_max_position_embeddings=rc.original_max_len)
    if rc.scaling == "yarn":
        out.update(original_max_position_embeddings=rc.original_max_len, beta_fast=rc.beta_fast,
                   beta_slow=rc.beta_slow, attention_factor=rc.attention_factor, truncate=rc.truncate)
    if rc.scaling == "longrope":
        out.update(original_max_position_embeddings=rc.original_max_len, attention_factor=rc.attention_factor,
                   short_factor=list(rc.short_factor), long_factor=list(rc.long_factor))
    return out


def decoder_config(spec) -> dict:
    """The config fields every Llama-shaped family shares."""
    st = spec.stack("decoder")
    return dict(vocab_size=spec.vocab_size, hidden_size=spec.d_model, intermediate_size=st.d_ff,
                num_hidden_layers=st.num_layers, num_attention_heads=st.num_heads,
                num_key_value_heads=st.num_kv_heads, head_dim=st.head_dim,
                hidden_act=INV_ACTS.get(st.ffn.config.activation, "?"),
                max_position_embeddings=hf_max_positions(spec), rms_norm_eps=st.norm.config.eps,
                attention_dropout=spec.dropout, tie_word_embeddings=spec.tie_embeddings,
                rope_parameters=rope_parameters(st.positions.config))


def read(src: Source, attention: str):
    # partial_rotary_factor is ignored by transformers' Llama (it rotates whole heads), and so here
    return read_decoder(src, attention, "llama")


def write(spec) -> dict:
    st = spec.stack("decoder")
    return dict(decoder_config(spec), attention_bias=st.qkv_bias, mlp_bias=st.ffn.config.bias)


register(Converter("llama", read, write, "LlamaConfig", "LlamaForCausalLM",
                refuses=("hidden_act", "rope_parameters", "rope_scaling")))

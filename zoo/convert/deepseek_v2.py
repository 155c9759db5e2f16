"""DeepSeek-V2 (``DeepseekV2ForCausalLM``) and DeepSeek-V3 (``DeepseekV3ForCausalLM``): Llama-shaped
decoders with multi-head latent attention (zoo's ``mla``, plugins/attention_mla.py) and a DeepSeekMoE
feed-forward (zoo's ``moe``) after ``first_k_dense_replace`` dense SwiGLU layers (the spec's
``dense_ffn`` / ``dense_layers`` / ``dense_d_ff``).

Attention.  ``q_proj`` (or ``q_a_proj`` -> ``q_a_layernorm`` -> ``q_b_proj`` when ``q_lora_rank``
is set), ``kv_a_proj_with_mqa`` (the latent and the shared rope key), ``kv_a_layernorm``,
``kv_b_proj`` and ``o_proj`` map one to one.  The spec's ``head_dim`` is ``qk_rope_head_dim``, as in
transformers' config; the rope turns pairs ``(2i, 2i+1)`` (V2's complex rotation, V3's
``rope_interleave``: ``interleaved: true``); yarn's ``mscale_all_dim`` enters the softmax scale,
``attn_scale = (qk_nope_head_dim + qk_rope_head_dim)^-1/2 · mscale²``.

Routing.  V2: softmax scores, ``topk_method`` greedy or group_limited_greedy (``groups``/
``topk_groups``, a group ranked by its best score), gates not renormalised (transformers' V2 router
ignores ``norm_topk_prob``), times ``routed_scaling_factor``.  V3: sigmoid scores, chosen by
``scores + e_score_correction_bias`` (zoo's ``score_bias`` buffer) inside the ``topk_group`` best of
``n_group`` groups (ranked by their best two), renormalised if ``norm_topk_prob``, times
``routed_scaling_factor``.  Both: ``n_shared_experts`` experts of width ``moe_intermediate_size``
form one ungated shared expert.

Refused (each a ConvertError naming the field): ``num_key_value_heads`` != heads (every head reads
one latent), ``mlp_bias`` (the shared expert has no bias), ``topk_method`` / ``scoring_func`` other
than the ones above, ``n_shared_experts`` < 1, a ``quantization_config`` (V3's FP8 release), an
activation other than SiLU, rope types zoo lacks, and an ``attention`` kernel other than MLA's.
V3's multi-token-prediction layers (``num_nextn_predict_layers``, ``model.layers.61.*``) are dropped
and listed, as transformers skips them.
"""
from __future__ import annotations

import math

from .core import ConvertError, Converter, Source, lm_head, linears, norm_entry, register
from .llama import context_len, hf_max_positions, rope, rope_parameters, yarn_mscale
from .mixtral import experts

TOPK_METHODS = ("greedy", "group_limited_greedy")


def read_v2(src: Source, attention: str):
    m = src.text("topk_method", "greedy")
    if m not in TOPK_METHODS:
        src.refuse("topk_method", m, "transformers' DeepSeek-V2 router has greedy and group_limited_greedy",
                   options=list(TOPK_METHODS), fix="use deepseek_v3 for noaux_tc routing")
    grouped = m == "group_limited_greedy"
    moe = {"scoring": "softmax", "normalize": False, "groups": src.int("n_group") if grouped else 1,
           "topk_groups": src.int("topk_group") if grouped else 1, "group_score": "max", "score_bias": False}
    return _read(src, attention, "deepseek_v2", moe, interleaved=True)


def read_v3(src: Source, attention: str):
    src.expect("topk_method", lambda v: v == "noaux_tc", "transformers' DeepSeek-V3 routes by noaux_tc",
               "use topk_method noaux_tc (the released V3 does)")
    src.expect("scoring_func", lambda v: v == "sigmoid", "transformers' DeepSeek-V3 scores experts by sigmoid",
               "use scoring_func sigmoid (the released V3 does)")
    moe = {"scoring": "sigmoid", "normalize": src.flag("norm_topk_prob", True), "groups": src.int("n_group"),
           "topk_groups": src.int("topk_group"), "group_score": "top2", "score_bias": True}
    return _read(src, attention, "deepseek_v3", moe, interleaved=src.flag("rope_interleave", True))


def _read(src: Source, attention: str, name: str, moe: dict, interleaved: bool):
    if attention not in ("sdpa", "mla"):
        raise ConvertError(f"{name} converts with its own attention, mla, not {attention!r}", where="attention",
                           options=["mla"], fix="leave attention at its default")
    src.act("hidden_act", allowed=("silu", "swish"), default="silu")
    src.expect("quantization_config", lambda v: not v, "zoo converts unquantised weights (DeepSeek-V3 ships FP8 "
               "blocks with weight_scale_inv tensors)", "convert a bfloat16 copy of the checkpoint")
    src.expect("mlp_bias", lambda v: not v, "zoo's shared expert has no biases", "use mlp_bias: false")
    L, D, H = src.int("num_hidden_layers"), src.int("hidden_size"), src.int("num_attention_heads")
    src.expect("num_key_value_heads", lambda v: v == H, "every MLA head reads the one shared latent",
               f"set num_key_value_heads to num_attention_heads ({H})")
    dn, dr = src.int("qk_nope_head_dim"), src.int("qk_rope_head_dim")
    q_rank, bias = src.int("q_lora_rank", 0, lo=0), src.flag("attention_bias", False)
    pos = dict(rope(src), interleaved=interleaved)
    scale = (dn + dr) ** -0.5  # transformers' yarn_apply_mscale: mscale_all_dim squared, on the scores
    rp = {**src.mapping("rope_parameters"), **src.mapping("rope_scaling")}
    if (rp.get("rope_type") or rp.get("type") or "default") != "default" and rp.get("mscale_all_dim"):
        scale *= yarn_mscale(pos["factor"], float(rp["mscale_all_dim"])) ** 2
    E, k = src.int("n_routed_experts"), src.int("first_k_dense_replace", 0, lo=0)
    entry = {"kind": "moe", "experts": E, "top_k": src.int("num_experts_per_tok", hi=E),
             "shared_d_ff": src.int("moe_intermediate_size") * src.int("n_shared_experts"), "shared_gate": False,
             "scale": src.float("routed_scaling_factor", 1.0, positive=True), **moe}
    dense = {"kind": "swiglu", "activation": "silu", "bias": False}
    spec = dict(name=name, arch="decoder", vocab_size=src.int("vocab_size"), d_model=D, num_layers=L,
                num_heads=H, num_kv_heads=H, head_dim=dr, attn_scale=None if math.isclose(scale, dr ** -0.5) else scale,
                d_ff=src.int("moe_intermediate_size") if k < L else src.int("intermediate_size"),
                dropout=src.float("attention_dropout", 0.0, lo=0, hi=0.999), qkv_bias=bias, out_bias=bias,
                tie_embeddings=True, scale_embeddings=False, mask="causal", positions=pos,
                attention={"kind": "mla", "kv_lora_rank": src.int("kv_lora_rank"), "q_lora_rank": q_rank,
                           "nope_dim": dn, "v_dim": src.int("v_head_dim"), "latent_eps": 1e-6},
                norm=norm_entry("rmsnorm", src.float("rms_norm_eps", 1e-6, positive=True), "pre"),
                ffn=entry if k < L else dense)
    spec["max_len"] = context_len(src, pos)
    if 0 < k < L:
        spec.update(dense_ffn=dense, dense_layers=k, dense_d_ff=src.int("intermediate_size"))
    p = src.prefix("model.")
    wte = src.take(f"{p}embed_tokens.weight")
    st = {"tok_emb.weight": wte}
    for i in range(L):
        h, z = f"{p}layers.{i}.", f"decoder.blocks.{i}."
        a, za = f"{h}self_attn.", f"{z}attn."
        if q_rank:
            linears(src, st, a, za, [("q_a_proj", "q_a")], bias=bias)
            linears(src, st, a, za, [("q_a_layernorm", "q_norm"), ("q_b_proj", "q_b")], bias=False)
        else:
            linears(src, st, a, za, [("q_proj", "q")], bias=False)
        linears(src, st, a, za, [("kv_a_proj_with_mqa", "kv_a")], bias=bias)
        linears(src, st, a, za, [("kv_a_layernorm", "kv_norm"), ("kv_b_proj", "kv_b")], bias=False)
        linears(src, st, a, za, [("o_proj", "out")], bias=bias)
        src.ignore(f"{a}rotary_emb.inv_freq")
        st[f"{z}attn_res.norm.weight"] = src.take(f"{h}input_layernorm.weight")
        st[f"{z}ffn_res.norm.weight"] = src.take(f"{h}post_attention_layernorm.weight")
        m = f"{h}mlp."
        if i < k:  # a dense layer
            linears(src, st, m, f"{z}ffn.", [("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")],
                    bias=False)
            continue
        experts(src, st, m, z, {"d_ff": spec["d_ff"]}, dict(entry, shared_d_ff=0))
        linears(src, st, f"{m}shared_experts.", f"{z}ffn.shared.",
                [("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")], bias=False)
        if moe["score_bias"]:
            st[f"{z}ffn.score_bias"] = src.take(f"{m}gate.e_score_correction_bias")
    src.ignore(f"{p}rotary_emb.inv_freq")
    for i in range(L, L + src.int("num_nextn_predict_layers", 0, lo=0)):  # V3's multi-token prediction
        src.drop(f"{p}layers.{i}.")  # layers: training only, not part of transformers' model either
    st["decoder.final_norm.weight"] = src.take(f"{p}norm.weight")
    lm_head(src, spec, st, wte)
    return spec, st


def _write(spec) -> dict:
    """The config fields both versions share (the reverse of :func:`_read`)."""
    st = spec.stack("decoder")
    a, f = st.attention.config, st.ffn.config
    moe = st.ffn.kind == "moe"
    k = (st.dense_layers or 0) if moe else st.num_layers
    dense_d_ff = (st.dense_d_ff or st.d_ff) if moe else st.d_ff
    rp, base = rope_parameters(st.positions.config), (a.nope_dim + st.head_dim) ** -0.5
    if rp["rope_type"] == "yarn" and st.scale != base and rp["factor"] > 1:  # the scale's mscale_all_dim
        rp["mscale_all_dim"] = float(f"{(math.sqrt(st.scale / base) - 1) / (0.1 * math.log(rp['factor'])):.12g}")
    return dict(vocab_size=spec.vocab_size, hidden_size=spec.d_model, num_hidden_layers=st.num_layers,
                num_attention_heads=st.num_heads, num_key_value_heads=st.num_heads, hidden_act="silu",
                max_position_embeddings=hf_max_positions(spec), rms_norm_eps=st.norm.config.eps,
                attention_dropout=spec.dropout, tie_word_embeddings=spec.tie_embeddings,
                rope_parameters=rp, attention_bias=st.qkv_bias,
                q_lora_rank=a.q_lora_rank or None, kv_lora_rank=a.kv_lora_rank, qk_nope_head_dim=a.nope_dim,
                qk_rope_head_dim=st.head_dim, v_head_dim=a.v_dim, head_dim=st.head_dim,
                first_k_dense_replace=k, intermediate_size=dense_d_ff,
                moe_intermediate_size=st.d_ff if moe else dense_d_ff,
                n_routed_experts=f.experts if moe else 1, num_experts_per_tok=f.top_k if moe else 1,
                n_shared_experts=(f.shared_d_ff // st.d_ff) if moe else 1,
                routed_scaling_factor=f.scale if moe else 1.0,
                n_group=f.groups if moe else 1, topk_group=f.topk_groups if moe else 1)


def write_v2(spec) -> dict:
    f = spec.stack("decoder").ffn.config
    grouped = getattr(f, "groups", 1) > 1
    return dict(_write(spec), topk_method="group_limited_greedy" if grouped else "greedy",
                **({} if grouped else {"n_group": None, "topk_group": None}))


def write_v3(spec) -> dict:
    st = spec.stack("decoder")
    return dict(_write(spec), norm_topk_prob=st.ffn.kind == "moe" and st.ffn.config.normalize,
                rope_interleave=st.positions.config.interleaved)


REFUSES = ("quantization_config", "num_key_value_heads", "mlp_bias", "hidden_act", "rope_parameters",
           "rope_scaling", "n_shared_experts")
register(Converter("deepseek_v2", read_v2, write_v2, "DeepseekV2Config", "DeepseekV2ForCausalLM",
                   refuses=REFUSES + ("topk_method",)))
register(Converter("deepseek_v3", read_v3, write_v3, "DeepseekV3Config", "DeepseekV3ForCausalLM",
                   refuses=REFUSES + ("topk_method", "scoring_func")))

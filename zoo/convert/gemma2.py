"""Gemma 2 (``Gemma2ForCausalLM``): Gemma plus attention-score soft-capping (the ``softcap`` kernel,
``attn_logit_softcapping``) and final-logit soft-capping (``logit_softcap``), local sliding-window and
global layers alternating (``layer_types`` -> the spec's ``mask_pattern``), a norm before *and* after
each sub-layer (``sandwich`` placement) and scores scaled by ``query_pre_attn_scalar ** -0.5``
instead of ``head_dim ** -0.5``.

Refused: ``layer_types`` other than sliding / full attention, ``use_bidirectional_attention``, and
what Gemma refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .gemma import GELUS
from .llama import decoder_config, read_decoder

KINDS = ("sliding_attention", "full_attention")


def mask_pattern(src: Source, L: int):
    """``layer_types`` as the shortest repeating cycle of zoo masks: the spec's ``mask_pattern``
    (Gemma 2 and 3, the Qwen families with sliding layers)."""
    types = src.get("layer_types") or ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in KINDS for t in types):
        src.refuse("layer_types", types, f"zoo maps one of {list(KINDS)} per layer ({L} layers)",
                   options=list(KINDS), fix="give one sliding_attention / full_attention entry per layer")
    period = next(p for p in range(1, L + 1) if all(types[i] == types[i % p] for i in range(L)))
    window = src.int("sliding_window", 4096)
    local = ["causal", {"kind": "sliding_window", "window": window}]
    return [local if t == "sliding_attention" else "causal" for t in types[:period]]


def read(src: Source, attention: str):
    src.expect("use_bidirectional_attention", lambda v: not v, "zoo converts Gemma 2 as a causal decoder",
               "set it to false")
    key = "hidden_activation" if src.get("hidden_activation") is not None else "hidden_act"
    src.act(key, allowed=GELUS)
    cap = src.float("attn_logit_softcapping", None, positive=True)
    spec, st = read_decoder(src, attention, "gemma2", norm="rmsnorm_plus1", ffn="geglu", act_key=key,
                            scale_embeddings=True,
                            attn_scale=src.float("query_pre_attn_scalar", positive=True) ** -0.5,
                            logit_softcap=src.float("final_logit_softcapping", None, positive=True),
                            mask_pattern=mask_pattern(src, src.int("num_hidden_layers")))
    spec["norm"]["placement"] = "sandwich"
    if cap is not None:
        spec["attention"] = {"kind": "softcap", "cap": cap}
    sandwich_norms(src, st, spec["num_layers"])
    return spec, st


def sandwich_norms(src: Source, st: dict, num_layers: int) -> None:
    """Gemma 2 / 3's four norms per block into zoo's sandwich placement, in ``st`` (the Llama
    mapping's state, which read ``post_attention_layernorm`` as the FFN's pre-norm): there it is the
    attention's *post* norm, and the FFN has its own pre and post norms."""
    p = src.prefix("model.")
    for i in range(num_layers):
        h, z = f"{p}layers.{i}.", f"decoder.blocks.{i}."
        st[f"{z}attn_res.post_norm.weight"] = st.pop(f"{z}ffn_res.norm.weight")
        st[f"{z}ffn_res.norm.weight"] = src.take(f"{h}pre_feedforward_layernorm.weight")
        st[f"{z}ffn_res.post_norm.weight"] = src.take(f"{h}post_feedforward_layernorm.weight")


def write(spec) -> dict:
    st = spec.stack("decoder")
    window = next((m.config.window for rules in st.mask_pattern or () for m in rules
                   if m.kind == "sliding_window"), None)
    types = ["sliding_attention" if any(m.kind == "sliding_window" for m in st.layer_mask(i))
             else "full_attention" for i in range(st.num_layers)]
    qpas = st.attn_scale ** -2
    act = {"gelu_tanh": "gelu_pytorch_tanh", "gelu": "gelu"}.get(st.ffn.config.activation, "?")
    return dict(decoder_config(spec), hidden_activation=act, hidden_act=act, attention_bias=st.qkv_bias,
                query_pre_attn_scalar=round(qpas) if abs(qpas - round(qpas)) < 1e-6 else qpas,
                sliding_window=window, layer_types=types, final_logit_softcapping=spec.logit_softcap,
                attn_logit_softcapping=st.attention.config.cap if st.attention.kind == "softcap" else None)


register(Converter("gemma2", read, write, "Gemma2Config", "Gemma2ForCausalLM",
                refuses=("layer_types", "use_bidirectional_attention", "hidden_activation", "rope_parameters")))

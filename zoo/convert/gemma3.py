"""Gemma 3, text (``Gemma3ForCausalLM``, ``model_type: gemma3_text``; Gemma-3-1B, and the language
model of the larger ones): Gemma 2's layout (``rmsnorm_plus1`` norms before *and* after each
sub-layer, GeGLU with the tanh GELU, embeddings times sqrt(d_model), scores scaled by
``query_pre_attn_scalar ** -0.5``, local sliding-window layers between global ones -- five local to
one global, ``layer_types`` -> the spec's ``mask_pattern``) plus

- a per-head q/k RMSNorm (``qk_norm: true``; the ``1 + w`` form, like every Gemma norm), in place of
  Gemma 2's attention soft-capping;
- a rope base per layer type: the local layers rotate with ``rope_local_base_freq`` (10 000), the
  global ones with ``rope_theta`` (1 000 000), scaled (linear x8 in the 4B-27B models).  transformers
  5 keeps them in ``rope_parameters["sliding_attention"]`` / ``["full_attention"]``; zoo's ``rope``
  keeps the global settings and a ``pattern_base`` entry for each local group of the mask pattern.

Refused: ``use_bidirectional_attention`` (EmbeddingGemma), ``attn_logit_softcapping`` (transformers'
Gemma 3 does not apply it), a scaled rope on the local layers, ``layer_types`` other than sliding /
full, and what Gemma refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .gemma import GELUS
from .gemma2 import mask_pattern, sandwich_norms
from .llama import decoder_config, read_decoder, rope_parameters

LOCAL, GLOBAL = "sliding_attention", "full_attention"


def _rope_by_layer_type(src: Source) -> float:
    """Point ``rope_parameters`` at the global layers' settings (what :func:`read_decoder` reads) and
    return the local layers' base.  Reads transformers 5's nested form and the 4.x form
    (``rope_theta``, ``rope_scaling``, ``rope_local_base_freq``)."""
    rp = src.mapping("rope_parameters")
    if GLOBAL in rp or LOCAL in rp:
        glob = dict(rp.get(GLOBAL) or {"rope_type": "default"})
        local = dict(rp.get(LOCAL) or {"rope_type": "default"})
    else:
        glob = {**rp, **src.mapping("rope_scaling")}
        local = {"rope_type": "default", "rope_theta": src.get("rope_local_base_freq", 10000.0)}
    glob.setdefault("rope_theta", src.get("rope_theta", 1_000_000.0))
    local.setdefault("rope_theta", src.get("rope_local_base_freq", 10000.0))
    if (local.get("rope_type") or local.get("type") or "default") != "default":
        src.refuse("rope_parameters", {LOCAL: local}, "zoo rotates Gemma 3's local layers with plain RoPE "
                   "(pattern_base)", fix="use rope_type default for sliding_attention")
    src.config["rope_parameters"], src.config["rope_scaling"] = glob, None
    return Source(local, {}, src.family).float("rope_theta", lo=1.0001)


def read(src: Source, attention: str):
    src.expect("use_bidirectional_attention", lambda v: not v, "zoo converts Gemma 3 as a causal decoder",
               "set it to false")
    src.expect("attn_logit_softcapping", lambda v: False, "transformers' Gemma 3 does not apply it, so "
               "its meaning here is ambiguous", "set attn_logit_softcapping to null (as Gemma 3 ships)")
    key = "hidden_activation" if src.get("hidden_activation") is not None else "hidden_act"
    src.act(key, allowed=GELUS)
    local_base = _rope_by_layer_type(src)
    L = src.int("num_hidden_layers")
    if src.get("layer_types") is None:  # 4.x configs: every sliding_window_pattern-th layer is global
        every = src.int("sliding_window_pattern", 6)
        src.config["layer_types"] = [LOCAL if (i + 1) % every else GLOBAL for i in range(L)]
    pattern = mask_pattern(src, L)
    spec, st = read_decoder(src, attention, "gemma3_text", norm="rmsnorm_plus1", ffn="geglu", act_key=key,
                            scale_embeddings=True, qk_norm=True,
                            attn_scale=src.float("query_pre_attn_scalar", positive=True) ** -0.5,
                            logit_softcap=src.float("final_logit_softcapping", None, positive=True),
                            mask_pattern=pattern)
    spec["norm"]["placement"] = "sandwich"
    if any(group != "causal" for group in pattern):  # local groups: their own plain-RoPE base
        spec["positions"]["pattern_base"] = [None if group == "causal" else local_base for group in pattern]
    sandwich_norms(src, st, L)  # as Gemma 2
    return spec, st


def write(spec) -> dict:
    st = spec.stack("decoder")
    rc = st.positions.config
    sliding = [any(m.kind == "sliding_window" for m in st.layer_mask(i)) for i in range(st.num_layers)]
    window = next((m.config.window for i in range(st.num_layers) for m in st.layer_mask(i)
                   if m.kind == "sliding_window"), None)
    local = next((b for b in rc.pattern_base if b is not None), 10000.0)
    qpas = st.attn_scale ** -2
    act = {"gelu_tanh": "gelu_pytorch_tanh", "gelu": "gelu"}.get(st.ffn.config.activation, "?")
    return dict(decoder_config(spec), hidden_activation=act, hidden_act=act, attention_bias=st.qkv_bias,
                query_pre_attn_scalar=round(qpas) if abs(qpas - round(qpas)) < 1e-6 else qpas,
                sliding_window=window, layer_types=[LOCAL if s else GLOBAL for s in sliding],
                final_logit_softcapping=spec.logit_softcap, attn_logit_softcapping=None,
                rope_parameters={GLOBAL: rope_parameters(rc), LOCAL: {"rope_type": "default", "rope_theta": local}})


register(Converter("gemma3_text", read, write, "Gemma3TextConfig", "Gemma3ForCausalLM",
                   refuses=("use_bidirectional_attention", "attn_logit_softcapping", "rope_parameters",
                            "layer_types", "hidden_activation")))

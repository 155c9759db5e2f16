"""Gemma (``GemmaForCausalLM``): Llama with RMSNorm scaled by ``1 + weight`` (``rmsnorm_plus1``),
token embeddings multiplied by sqrt(d_model), GeGLU with the tanh GELU, a head size independent of
d_model (256) and, in the 2B model, multi-query attention (one key/value head); tied embeddings.

Refused: ``use_bidirectional_attention``, activations other than the GELUs, and what Llama refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .llama import decoder_config, read_decoder

GELUS = ("gelu", "gelu_pytorch_tanh", "gelu_new")


def read(src: Source, attention: str):
    src.expect("use_bidirectional_attention", lambda v: not v, "zoo converts Gemma as a causal decoder",
               "set it to false")
    # transformers lets hidden_activation (the tanh GELU in Gemma's config.json) override hidden_act
    key = "hidden_activation" if src.get("hidden_activation") is not None else "hidden_act"
    src.act(key, allowed=GELUS, default="gelu_pytorch_tanh")
    return read_decoder(src, attention, "gemma", norm="rmsnorm_plus1", ffn="geglu", act_key=key,
                        scale_embeddings=True)


def write(spec) -> dict:
    st = spec.stack("decoder")
    act = {"gelu_tanh": "gelu_pytorch_tanh", "gelu": "gelu"}.get(st.ffn.config.activation, "?")
    return dict(decoder_config(spec), hidden_act=act, hidden_activation=act, attention_bias=st.qkv_bias)


register(Converter("gemma", read, write, "GemmaConfig", "GemmaForCausalLM",
                refuses=("use_bidirectional_attention", "hidden_act", "rope_parameters")))

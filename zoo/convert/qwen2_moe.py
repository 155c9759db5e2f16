"""Qwen2-MoE (``Qwen2MoeForCausalLM``, Qwen1.5-MoE-A2.7B): Qwen2 (q/k/v biases) whose feed-forward is a
mixture of ``num_experts`` SwiGLU experts of width ``moe_intermediate_size``, top-k softmax
probabilities *not* renormalised (``norm_topk_prob: false``), plus a shared expert of width
``shared_expert_intermediate_size`` that every token passes through, scaled by
``sigmoid(shared_expert_gate · x)`` (zoo's ``moe`` with ``shared_d_ff``).

Refused: dense layers (``mlp_only_layers``, ``decoder_sparse_step`` != 1), sliding windows
(``use_sliding_window``, ``layer_types``), and what Mixtral refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .mixtral import moe_config, moe_entry, read_moe, sparse_everywhere


def full_attention_only(src: Source, family: str) -> None:
    src.expect("use_sliding_window", lambda v: not v, f"zoo converts {family} with full attention in "
               "every layer", "set use_sliding_window to false (the released models do)")
    src.expect("layer_types", lambda v: all(t == "full_attention" for t in v),
               f"zoo converts {family} with full attention in every layer", "use full_attention layers")


def read(src: Source, attention: str):
    full_attention_only(src, "Qwen2-MoE")
    sparse_everywhere(src)
    entry = moe_entry(src, "num_experts", normalize=src.flag("norm_topk_prob", False),
                      shared=src.int("shared_expert_intermediate_size"))
    qkv_bias = src.flag("qkv_bias", True)
    spec, st = read_moe(src, attention, "qwen2_moe", entry, qkv_bias=qkv_bias, out_bias=False,
                        d_ff=src.int("moe_intermediate_size"))
    return spec, st


def write(spec) -> dict:
    st = spec.stack("decoder")
    c = st.ffn.config
    return dict(moe_config(spec, "num_experts"), moe_intermediate_size=st.d_ff, intermediate_size=st.d_ff,
                shared_expert_intermediate_size=c.shared_d_ff, norm_topk_prob=c.normalize, qkv_bias=st.qkv_bias)


register(Converter("qwen2_moe", read, write, "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                   refuses=("mlp_only_layers", "decoder_sparse_step", "use_sliding_window", "layer_types",
                            "router_jitter_noise", "hidden_act", "rope_parameters")))

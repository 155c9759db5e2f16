"""Qwen3-MoE (``Qwen3MoeForCausalLM``, Qwen3-30B-A3B): Qwen3 (per-head q/k RMSNorm, explicit
``head_dim``) whose feed-forward is a mixture of ``num_experts`` SwiGLU experts of width
``moe_intermediate_size``, the top-k softmax probabilities renormalised when ``norm_topk_prob``
(the released models set it); no shared expert.

Refused: dense layers (``mlp_only_layers``, ``decoder_sparse_step`` != 1), sliding windows, and
what Mixtral refuses.
"""
from __future__ import annotations

from .core import Converter, Source, register
from .mixtral import moe_config, moe_entry, read_moe, sparse_everywhere
from .qwen2_moe import full_attention_only


def read(src: Source, attention: str):
    full_attention_only(src, "Qwen3-MoE")
    sparse_everywhere(src)
    key = "num_experts" if src.get("num_experts") is not None else "num_local_experts"
    entry = moe_entry(src, key, normalize=src.flag("norm_topk_prob", False))
    return read_moe(src, attention, "qwen3_moe", entry, qk_norm=True, d_ff=src.int("moe_intermediate_size"))


def write(spec) -> dict:
    st = spec.stack("decoder")
    return dict(moe_config(spec, "num_experts"), moe_intermediate_size=st.d_ff, intermediate_size=st.d_ff,
                norm_topk_prob=st.ffn.config.normalize, attention_bias=st.qkv_bias)


register(Converter("qwen3_moe", read, write, "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                   refuses=("mlp_only_layers", "decoder_sparse_step", "use_sliding_window", "layer_types",
                            "router_jitter_noise", "hidden_act", "rope_parameters")))

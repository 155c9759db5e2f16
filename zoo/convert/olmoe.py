"""OLMoE (``OlmoeForCausalLM``, allenai/OLMoE-1B-7B): a Llama-shaped decoder whose every feed-forward
is a mixture of ``num_experts`` SwiGLU experts of width ``intermediate_size``, ``num_experts_per_tok``
chosen per token by the softmax of the router logits, *not* renormalised over the chosen ones unless
``norm_topk_prob`` (the released model leaves it false); no shared expert.

Its queries and keys go through an RMSNorm over the *whole* projection (``h · hd`` features for q,
``h_kv · hd`` for k) before they are split into heads -- zoo's ``rmsnorm_qk_full`` norm with
``qk_norm: true`` (Qwen3's q/k norm is per head).  The experts use the Mixtral helpers
(zoo/convert/mixtral.py): ``experts.gate_up_proj (E, 2F, D)`` split into ``w_gate, w_up (E, D, F)``.

Refused: ``clip_qkv`` (zoo does not clamp the projections), and what Mixtral refuses
(``router_jitter_noise``, an activation other than SiLU, rope types zoo does not implement).
"""
from __future__ import annotations

from .core import Converter, Source, register
from .mixtral import moe_config, moe_entry, read_moe


def read(src: Source, attention: str):
    src.expect("clip_qkv", lambda v: False, "zoo does not clamp the q/k/v projections",
               "use clip_qkv: null (the released OLMoE models do)")
    entry = moe_entry(src, "num_experts", normalize=src.flag("norm_topk_prob", False))
    return read_moe(src, attention, "olmoe", entry, qk_norm=True, norm="rmsnorm_qk_full")


def write(spec) -> dict:
    st = spec.stack("decoder")
    cfg = moe_config(spec, "num_experts")
    cfg.pop("head_dim")  # OLMoE's heads are always hidden_size / num_attention_heads
    return dict(cfg, intermediate_size=st.d_ff, norm_topk_prob=st.ffn.config.normalize,
                attention_bias=st.qkv_bias, clip_qkv=None)


register(Converter("olmoe", read, write, "OlmoeConfig", "OlmoeForCausalLM",
                   refuses=("clip_qkv", "router_jitter_noise", "hidden_act", "rope_parameters")))

"""Mixtral (``MixtralForCausalLM``): Mistral whose feed-forward is a sparse mixture of SwiGLU experts
(zoo's ``moe``): a router picks ``num_experts_per_tok`` of ``num_local_experts`` experts per token,
weighted by the softmax of the router logits renormalised over the chosen ones.

The helpers here are shared by the mixture-of-experts families (Qwen2-MoE, Qwen3-MoE): transformers
5 stores all experts of a layer in two tensors, ``experts.gate_up_proj (E, 2F, D)`` (``[gate; up]``
rows of every expert) and ``experts.down_proj (E, D, F)``; zoo's ``moe`` keeps ``w_gate, w_up (E, D,
F)`` and ``w_down (E, F, D)`` (``x @ W`` per expert), so the mapping splits and transposes, and the
reverse joins them back.

Refused: ``router_jitter_noise`` (zoo's router has no jitter), an activation other than SiLU, and
what Mistral refuses.
"""
from __future__ import annotations

import torch

from .core import Converter, Source, register
from .llama import hf_max_positions, read_decoder, rope_parameters
from .mistral import spec_window, window_mask


def _t(t: torch.Tensor) -> torch.Tensor:
    return t.transpose(1, 2)  # (E, a, b) -> (E, b, a)


#: the hub's one-tensor-per-expert names (what ``save_pretrained`` writes): (gate, up, down) per
#: layout -- Mixtral's ``block_sparse_moe.experts.{e}.w1/w3/w2``, the others' ``mlp.experts.{e}.*_proj``
PER_EXPERT = {"block_sparse_moe.": ("w1", "w3", "w2"), "mlp.": ("gate_proj", "up_proj", "down_proj")}


def _per_expert(src: Source, st: dict, m: str, z: str, E: int) -> str:
    """A folder's experts, one ``(F, D)`` / ``(D, F)`` matrix each, stacked into zoo's ``(E, D, F)`` /
    ``(E, F, D)`` (``x @ W``: each transposed).  Returns the layer's prefix on disk."""
    h = m[: -len("mlp.")]  # the layer's prefix
    layout = next((k for k, names in PER_EXPERT.items() if src.has(f"{h}{k}experts.0.{names[0]}.weight")), "mlp.")
    for zn, hn in zip(("w_gate", "w_up", "w_down"), PER_EXPERT[layout]):
        st[f"{z}ffn.{zn}"] = torch.stack([src.take(f"{h}{layout}experts.{e}.{hn}.weight").t() for e in range(E)])
    return h + layout


def experts(src: Source, st: dict, m: str, z: str, spec: dict, entry: dict) -> None:
    """One layer's router, experts and (Qwen2-MoE) shared expert -> zoo's ``moe`` tensors: from
    transformers' fused ``experts.gate_up_proj`` (a model object), or from the per-expert tensors of
    a checkpoint folder."""
    F = spec["d_ff"]
    if not src.has(f"{m}experts.gate_up_proj"):  # a folder (zoo convert, from_pretrained)
        m = _per_expert(src, st, m, z, entry["experts"])
        st[f"{z}ffn.router.weight"] = src.take(f"{m}gate.weight")
        _shared(src, st, m, z, entry)
        return
    halves = lambda t: [_t(t[:, :F]), _t(t[:, F:])]  # noqa: E731 - (E, 2F, D) -> 2 x (E, D, F)
    join = lambda ps: torch.cat([_t(ps[0]), _t(ps[1])], dim=1)  # noqa: E731
    st[f"{z}ffn.w_gate"], st[f"{z}ffn.w_up"] = src.pieces(f"{m}experts.gate_up_proj", halves, join)
    st[f"{z}ffn.w_down"] = src.permute(f"{m}experts.down_proj", _t, _t)
    st[f"{z}ffn.router.weight"] = src.take(f"{m}gate.weight")
    _shared(src, st, m, z, entry)


def _shared(src: Source, st: dict, m: str, z: str, entry: dict) -> None:
    if entry["shared_d_ff"]:
        for n in ("gate", "up", "down"):
            st[f"{z}ffn.shared.{n}.weight"] = src.take(f"{m}shared_expert.{n}_proj.weight")
        st[f"{z}ffn.shared_gate.weight"] = src.take(f"{m}shared_expert_gate.weight")


def moe_entry(src: Source, experts_key: str, *, normalize: bool, shared: int = 0) -> dict:
    src.act("hidden_act", allowed=("silu", "swish"), default="silu")  # zoo's experts are SwiGLU
    src.expect("router_jitter_noise", lambda v: v == 0, "zoo's router adds no jitter noise",
               "set router_jitter_noise to 0 (it only acts in training)")
    E = src.int(experts_key)
    return {"kind": "moe", "experts": E, "top_k": src.int("num_experts_per_tok", hi=E),
            "normalize": normalize, "shared_d_ff": shared,
            "aux_loss_coef": src.float("router_aux_loss_coef", 0.0, lo=0.0)}


def sparse_everywhere(src: Source) -> None:
    """Qwen-MoE configs may keep dense MLPs in some layers: zoo converts all-sparse stacks."""
    src.expect("mlp_only_layers", lambda v: len(v) == 0, "zoo converts stacks whose every layer is a "
               "mixture of experts", "use an empty mlp_only_layers")
    src.expect("decoder_sparse_step", lambda v: v == 1, "zoo converts stacks whose every layer is a "
               "mixture of experts", "set decoder_sparse_step to 1")


def moe_config(spec, experts_key: str) -> dict:
    """The config fields every mixture-of-experts family shares (the reverse of the above)."""
    st = spec.stack("decoder")
    c = st.ffn.config
    return {"vocab_size": spec.vocab_size, "hidden_size": spec.d_model, "num_hidden_layers": st.num_layers,
            "num_attention_heads": st.num_heads, "num_key_value_heads": st.num_kv_heads,
            "head_dim": st.head_dim, "hidden_act": "silu", "max_position_embeddings": hf_max_positions(spec),
            "rms_norm_eps": st.norm.config.eps, "attention_dropout": spec.dropout,
            "tie_word_embeddings": spec.tie_embeddings, "rope_parameters": rope_parameters(st.positions.config),
            experts_key: c.experts, "num_experts_per_tok": c.top_k, "router_aux_loss_coef": c.aux_loss_coef}


def read_moe(src: Source, attention: str, name: str, entry: dict, **kw):
    """A Llama-shaped decoder whose every feed-forward is ``entry`` (a zoo ``moe``)."""
    spec, st = read_decoder(src, attention, name, mlp=lambda *a: experts(*a, entry), **kw)
    spec["ffn"] = entry
    return spec, st


def read(src: Source, attention: str):
    entry = moe_entry(src, "num_local_experts", normalize=True)
    return read_moe(src, attention, "mixtral", entry, mask=window_mask(src))


def write(spec) -> dict:
    return dict(moe_config(spec, "num_local_experts"), intermediate_size=spec.stack("decoder").d_ff,
                sliding_window=spec_window(spec))


register(Converter("mixtral", read, write, "MixtralConfig", "MixtralForCausalLM",
                   refuses=("router_jitter_noise", "hidden_act", "rope_parameters")))

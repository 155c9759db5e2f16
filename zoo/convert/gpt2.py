"""GPT-2 (``GPT2LMHeadModel``, ``GPT2Model``): learned positions, pre-norm LayerNorm, GELU MLP.

Tensors: ``Conv1D`` weights are stored ``(in, out)`` and transposed; ``c_attn`` is already zoo's
fused q|k|v.  Refused: ``scale_attn_by_inverse_layer_idx``, ``add_cross_attention``, activations zoo
has no exact equivalent of.
"""
from __future__ import annotations

from .core import INV_ACTS, Converter, Source, lm_head, norm_entry, register


def read(src: Source, attention: str):
    src.expect("scale_attn_by_inverse_layer_idx", lambda v: not v,
               "zoo scales every layer's scores alike",
               "zoo cannot reproduce this checkpoint exactly; convert one trained without it")
    src.expect("add_cross_attention", lambda v: not v, "decoder-only GPT-2 has no cross-attention",
               "convert a plain GPT-2")
    act = src.act("activation_function", default="gelu_new")
    p = src.prefix("transformer.")
    L, D = src.int("n_layer"), src.int("n_embd")
    spec = dict(name="gpt2", arch="decoder", vocab_size=src.int("vocab_size"), max_len=src.int("n_positions"),
                d_model=D, num_layers=L, num_heads=src.int("n_head"), d_ff=src.int("n_inner", 4 * D),
                dropout=src.float("resid_pdrop", 0.0, lo=0, hi=0.999), tie_embeddings=True,
                scale_embeddings=False, attn_scale=None if src.flag("scale_attn_weights", True) else 1.0,
                attention=attention, mask="causal", positions="learned",
                norm=norm_entry("layernorm", src.float("layer_norm_epsilon", 1e-5, positive=True), "pre"),
                ffn={"kind": "mlp", "activation": act, "bias": True})
    wte = src.take(f"{p}wte.weight")
    st = {"tok_emb.weight": wte, "decoder.positions.table.weight": src.take(f"{p}wpe.weight")}
    for i in range(L):
        h, z = f"{p}h.{i}.", f"decoder.blocks.{i}."
        for hf, zn in (("ln_1", "attn_res.norm"), ("ln_2", "ffn_res.norm")):
            st[f"{z}{zn}.weight"], st[f"{z}{zn}.bias"] = src.take(f"{h}{hf}.weight"), src.take(f"{h}{hf}.bias")
        for hf, zn in (("attn.c_attn", "attn.qkv"), ("attn.c_proj", "attn.out"), ("mlp.c_fc", "ffn.up"),
                       ("mlp.c_proj", "ffn.down")):
            # GPT-2's Conv1D stores its weights as (in, out): transposed
            st[f"{z}{zn}.weight"], st[f"{z}{zn}.bias"] = src.take_t(f"{h}{hf}.weight"), src.take(f"{h}{hf}.bias")
        for buf in ("attn.bias", "attn.masked_bias"):  # causal-mask buffers of older versions
            src.ignore(f"{h}{buf}")
    st["decoder.final_norm.weight"], st["decoder.final_norm.bias"] = src.take(f"{p}ln_f.weight"), src.take(f"{p}ln_f.bias")
    lm_head(src, spec, st, wte)
    return spec, st


def write(spec) -> dict:
    st = spec.stack("decoder")
    d = spec.dropout
    return dict(vocab_size=spec.vocab_size, n_positions=spec.max_len, n_embd=spec.d_model,
                n_layer=st.num_layers, n_head=st.num_heads, n_inner=st.d_ff,
                activation_function=INV_ACTS.get(st.ffn.config.activation, "?"),
                layer_norm_epsilon=st.norm.config.eps, resid_pdrop=d, embd_pdrop=d, attn_pdrop=d,
                scale_attn_weights=spec.attn_scale is None, tie_word_embeddings=spec.tie_embeddings)


register(Converter("gpt2", read, write, "GPT2Config", "GPT2LMHeadModel",
                refuses=("scale_attn_by_inverse_layer_idx", "add_cross_attention", "activation_function")))

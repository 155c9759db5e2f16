"""OPT (``OPTForCausalLM``): learned positions offset by 2 rows (``learned_offset``), ReLU MLP,
biases everywhere, pre-norm LayerNorm (``do_layer_norm_before``; post-norm for OPT-350m), tied
embeddings.  OPT numbers positions from the attention mask, as zoo does.

Refused: ``word_embed_proj_dim`` != ``hidden_size`` (OPT-350m's project_in/out),
``layer_norm_elementwise_affine: false``, ``_remove_final_layer_norm``, activations without an exact
equivalent.
"""
from __future__ import annotations

from .core import INV_ACTS, Converter, Source, lm_head, linears, norm_entry, qkv, register


def read(src: Source, attention: str):
    D = src.int("hidden_size")
    src.expect("word_embed_proj_dim", lambda v: v == D, "zoo has no projection between embeddings and "
               "the stack (project_in / project_out)", "convert an OPT whose word_embed_proj_dim is hidden_size")
    src.expect("layer_norm_elementwise_affine", lambda v: v, "zoo's LayerNorm has a weight and a bias",
               "convert an OPT with affine layer norms")
    src.expect("_remove_final_layer_norm", lambda v: not v, "zoo keeps the final norm of a pre-norm stack",
               "convert an OPT with its final layer norm")
    pre, bias = src.flag("do_layer_norm_before", True), src.flag("enable_bias", True)
    L = src.int("num_hidden_layers")
    spec = dict(name="opt", arch="decoder", vocab_size=src.int("vocab_size"),
                max_len=src.int("max_position_embeddings"), d_model=D, num_layers=L,
                num_heads=src.int("num_attention_heads"), d_ff=src.int("ffn_dim"),
                dropout=src.float("dropout", 0.0, lo=0, hi=0.999), qkv_bias=bias, out_bias=bias,
                tie_embeddings=True, scale_embeddings=False, attention=attention, mask="causal",
                positions={"kind": "learned_offset", "offset": 2},
                norm=norm_entry("layernorm", 1e-5, "pre" if pre else "post"),
                ffn={"kind": "mlp", "activation": src.act("activation_function", default="relu"), "bias": bias})
    p = src.prefix("model.decoder.", "decoder.")
    wte = src.take(f"{p}embed_tokens.weight")
    st = {"tok_emb.weight": wte, "decoder.positions.table.weight": src.take(f"{p}embed_positions.weight")}
    for i in range(L):
        h, z = f"{p}layers.{i}.", f"decoder.blocks.{i}."
        qkv(src, st, f"{h}self_attn.", z, bias=bias)
        linears(src, st, h, z, [("self_attn.out_proj", "attn.out"), ("fc1", "ffn.up"), ("fc2", "ffn.down")], bias)
        linears(src, st, h, z, [("self_attn_layer_norm", "attn_res.norm"), ("final_layer_norm", "ffn_res.norm")])
    if pre:
        linears(src, st, p, "decoder.", [("final_layer_norm", "final_norm")])
    lm_head(src, spec, st, wte)
    return spec, st


def write(spec) -> dict:
    st = spec.stack("decoder")
    return dict(vocab_size=spec.vocab_size, hidden_size=spec.d_model, num_hidden_layers=st.num_layers,
                ffn_dim=st.d_ff, num_attention_heads=st.num_heads, max_position_embeddings=spec.max_len,
                do_layer_norm_before=st.placement.kind == "pre", word_embed_proj_dim=spec.d_model,
                dropout=spec.dropout, activation_function=INV_ACTS.get(st.ffn.config.activation, "?"),
                enable_bias=st.qkv_bias, tie_word_embeddings=spec.tie_embeddings)


register(Converter("opt", read, write, "OPTConfig", "OPTForCausalLM",
                refuses=("word_embed_proj_dim", "layer_norm_elementwise_affine", "_remove_final_layer_norm",
                         "activation_function")))

"""BART (``BartForConditionalGeneration``, ``BartModel``): an encoder-decoder with learned positions
offset by 2 rows (``learned_offset``), a LayerNorm on the embeddings of each stack, post-norm
layers, GELU MLPs, biases everywhere, one embedding matrix shared by both stacks and the LM head,
and a bias on the logits (``final_logits_bias`` -> ``head_bias``).  :func:`read_seq2seq` is shared
with Marian.

Refused: activations without an exact equivalent, ``normalize_before`` / ``add_final_layer_norm``
(mBART's pre-norm layout).
"""
from __future__ import annotations

from .core import INV_ACTS, Converter, Source, linears, lm_head, norm_entry, qkv, register


def read_seq2seq(src: Source, attention: str, name: str, positions, *, embed_norm: bool, act_default: str):
    for key in ("normalize_before", "add_final_layer_norm"):
        src.expect(key, lambda v: not v, f"zoo converts {name} with post-norm layers", "set it to false")
    src.expect("is_decoder", lambda v: not v, f"zoo converts {name} as an encoder-decoder", "set it to false")
    Le, Ld = src.int("encoder_layers"), src.int("decoder_layers")
    spec = dict(name=name, arch="encoder_decoder", vocab_size=src.int("vocab_size"),
                max_len=src.int("max_position_embeddings"), d_model=src.int("d_model"), num_layers=Le,
                num_heads=src.int("encoder_attention_heads"), d_ff=src.int("encoder_ffn_dim"),
                decoder={"num_layers": Ld, "num_heads": src.int("decoder_attention_heads"),
                         "d_ff": src.int("decoder_ffn_dim")},
                dropout=src.float("dropout", 0.0, lo=0, hi=0.999), qkv_bias=True, out_bias=True,
                tie_embeddings=True, scale_embeddings=src.flag("scale_embedding", False), embed_norm=embed_norm,
                head_bias=True, attention=attention, positions=positions,
                norm=norm_entry("layernorm", 1e-5, "post"),
                ffn={"kind": "mlp", "activation": src.act("activation_function", default=act_default), "bias": True})
    p = src.prefix("model.")
    wte = src.take(f"{p}shared.weight")
    st = {"tok_emb.weight": wte}
    for role, L in (("encoder", Le), ("decoder", Ld)):
        r = f"{p}{role}."
        src.ignore(f"{r}embed_tokens.weight")  # the shared matrix again
        if src.has(f"{r}embed_positions.weight") and positions.get("kind") == "learned_offset":
            st[f"{role}.positions.table.weight"] = src.take(f"{r}embed_positions.weight")
        if embed_norm:
            linears(src, st, r, f"{role[:3]}_embed.", [("layernorm_embedding", "norm")])
        for i in range(L):
            h, z = f"{r}layers.{i}.", f"{role}.blocks.{i}."
            qkv(src, st, f"{h}self_attn.", z, bias=True)
            linears(src, st, h, z, [("self_attn.out_proj", "attn.out"), ("self_attn_layer_norm", "attn_res.norm"),
                                    ("fc1", "ffn.up"), ("fc2", "ffn.down"), ("final_layer_norm", "ffn_res.norm")])
            if role == "decoder":
                x = f"{h}encoder_attn."
                linears(src, st, x, f"{z}cross.", [("q_proj", "q"), ("out_proj", "out")])
                qkv(src, st, x, z, names=("k_proj", "v_proj"), bias=True, into="cross.kv")
                linears(src, st, h, z, [("encoder_attn_layer_norm", "cross_res.norm")])
    lm_head(src, spec, st, wte)
    st["lm_head.bias"] = src.permute("final_logits_bias", lambda t: t.reshape(-1), lambda t: t.reshape(1, -1))
    return spec, st


def read(src: Source, attention: str):
    return read_seq2seq(src, attention, "bart", {"kind": "learned_offset", "offset": 2}, embed_norm=True,
                        act_default="gelu")


def seq2seq_config(spec) -> dict:
    enc, dec = spec.stack("encoder"), spec.stack("decoder")
    d = spec.dropout
    return dict(vocab_size=spec.vocab_size, max_position_embeddings=spec.max_len, d_model=spec.d_model,
                encoder_layers=enc.num_layers, decoder_layers=dec.num_layers,
                encoder_attention_heads=enc.num_heads, decoder_attention_heads=dec.num_heads,
                encoder_ffn_dim=enc.d_ff, decoder_ffn_dim=dec.d_ff, dropout=d, attention_dropout=d,
                activation_dropout=d, activation_function=INV_ACTS.get(dec.ffn.config.activation, "?"),
                scale_embedding=spec.scale_embeddings, tie_word_embeddings=spec.tie_embeddings)


register(Converter("bart", read, seq2seq_config, "BartConfig", "BartForConditionalGeneration",
                refuses=("activation_function", "normalize_before", "add_final_layer_norm", "is_decoder")))

"""DistilBERT (``DistilBertModel``, ``DistilBertForMaskedLM``): BERT's shape without token types,
with other tensor names (``q_lin`` ..., ``sa_layer_norm``, ``ffn.lin1``) and an MLM head of
``vocab_transform`` + GELU + ``vocab_layer_norm`` + ``vocab_projector``.  Its LayerNorms use eps 1e-12.
``sinusoidal_pos_embds: true`` stores fixed sinusoids in the position table: the table is copied, so
the function is the same.

Refused: activations without an exact equivalent (and anything but exact GELU under the MLM head).
"""
from __future__ import annotations

from .core import INV_ACTS, Converter, Source, linears, norm_entry, qkv, register


def read(src: Source, attention: str):
    mlm = any(k.startswith("vocab_projector.") for k in src.state)
    act = src.act("activation", default="gelu")
    if mlm and act != "gelu":
        src.refuse("activation", src.get("activation"), "zoo's MLM head transform uses the exact GELU",
                   "convert the DistilBertModel (hidden states) instead")
    L = src.int("n_layers")
    spec = dict(name="distilbert", arch="encoder", vocab_size=src.int("vocab_size"),
                max_len=src.int("max_position_embeddings"), d_model=src.int("dim"), num_layers=L,
                num_heads=src.int("n_heads"), d_ff=src.int("hidden_dim"),
                dropout=src.float("dropout", 0.0, lo=0, hi=0.999), pad_id=src.int("pad_token_id", 0, lo=0),
                scale_embeddings=False, embed_norm=True, tie_embeddings=True, attention=attention,
                mask="bidirectional", positions="learned", norm=norm_entry("layernorm", 1e-12, "post"),
                ffn={"kind": "mlp", "activation": act, "bias": True},
                head={"kind": "mlm", "transform": True} if mlm else {"kind": "none"})
    p = src.prefix("distilbert.")
    e = f"{p}embeddings."
    st = {"tok_emb.weight": src.take(f"{e}word_embeddings.weight"),
          "encoder.positions.table.weight": src.take(f"{e}position_embeddings.weight")}
    linears(src, st, e, "embed.", [("LayerNorm", "norm")])
    src.ignore(f"{e}position_ids")
    for i in range(L):
        h, z = f"{p}transformer.layer.{i}.", f"encoder.blocks.{i}."
        qkv(src, st, f"{h}attention.", z, names=("q_lin", "k_lin", "v_lin"), bias=True)
        linears(src, st, h, z, [("attention.out_lin", "attn.out"), ("sa_layer_norm", "attn_res.norm"),
                                ("ffn.lin1", "ffn.up"), ("ffn.lin2", "ffn.down"),
                                ("output_layer_norm", "ffn_res.norm")])
    if mlm:
        linears(src, st, "", "transform.", [("vocab_transform", "0"), ("vocab_layer_norm", "2")])
        st["lm_head.bias"] = src.take("vocab_projector.bias")
        if not src.tied("vocab_projector.weight", st["tok_emb.weight"]):
            spec["tie_embeddings"], st["lm_head.weight"] = False, src.take("vocab_projector.weight")
    return spec, st


def write(spec) -> dict:
    st = spec.stack("encoder")
    return dict(vocab_size=spec.vocab_size, max_position_embeddings=spec.max_len, n_layers=st.num_layers,
                n_heads=st.num_heads, dim=spec.d_model, hidden_dim=st.d_ff, dropout=spec.dropout,
                attention_dropout=spec.dropout, activation=INV_ACTS.get(st.ffn.config.activation, "?"),
                pad_token_id=spec.pad_id if spec.pad_id is not None else 0,
                tie_word_embeddings=spec.tie_embeddings)


register(Converter("distilbert", read, write, "DistilBertConfig",
                lambda spec: "DistilBertForMaskedLM" if spec.head.kind == "mlm" else "DistilBertModel",
                refuses=("activation",)))

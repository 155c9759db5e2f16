"""BERT (``BertModel``, ``BertForMaskedLM``, ``BertForPreTraining``): learned positions and segment
embeddings with an embedding LayerNorm, post-norm, GELU MLP, MLM head with a dense + GELU + norm
transform.  The pooler and the next-sentence head do not affect the outputs: dropped and listed.

Refused: ``position_embedding_type`` other than absolute, ``is_decoder``, ``add_cross_attention``,
activations without an exact equivalent (and anything but exact GELU under an MLM head).
"""
from __future__ import annotations

from .core import INV_ACTS, Converter, Source, linears, norm_entry, qkv, register

LAYER = (("attention.output.dense", "attn.out"), ("attention.output.LayerNorm", "attn_res.norm"),
         ("intermediate.dense", "ffn.up"), ("output.dense", "ffn.down"), ("output.LayerNorm", "ffn_res.norm"))


def encoder_spec(src: Source, name: str, attention: str, *, mlm: bool, act_key: str = "hidden_act",
                 positions="learned", max_len=None) -> dict:
    """The spec of a BERT-shaped encoder (shared with RoBERTa)."""
    src.expect("position_embedding_type", lambda v: v == "absolute",
               "zoo has no relative_key / relative_key_query positions", "use absolute positions")
    for key in ("is_decoder", "add_cross_attention"):
        src.expect(key, lambda v: not v, f"zoo converts {name} as an encoder", "set it to false")
    act = src.act(act_key, default="gelu")
    if mlm and act != "gelu":
        src.refuse(act_key, src.get(act_key), "zoo's MLM head transform uses the exact GELU",
                   "convert the base model (hidden states) instead")
    return dict(name=name, arch="encoder", vocab_size=src.int("vocab_size"),
                max_len=max_len or src.int("max_position_embeddings"), d_model=src.int("hidden_size"),
                num_layers=src.int("num_hidden_layers"), num_heads=src.int("num_attention_heads"),
                d_ff=src.int("intermediate_size"), dropout=src.float("hidden_dropout_prob", 0.0, lo=0, hi=0.999),
                pad_id=src.int("pad_token_id", 0, lo=0), type_vocab_size=src.int("type_vocab_size", 0, lo=0),
                scale_embeddings=False, embed_norm=True, tie_embeddings=True, attention=attention,
                mask="bidirectional", positions=positions,
                norm=norm_entry("layernorm", src.float("layer_norm_eps", 1e-12, positive=True), "post"),
                ffn={"kind": "mlp", "activation": act, "bias": True},
                head={"kind": "mlm", "transform": True} if mlm else {"kind": "none"})


def encoder_tensors(src: Source, spec: dict, p: str) -> dict:
    """Embeddings and layers of a BERT-shaped encoder under prefix ``p``."""
    e = f"{p}embeddings."
    st = {"tok_emb.weight": src.take(f"{e}word_embeddings.weight"),
          "encoder.positions.table.weight": src.take(f"{e}position_embeddings.weight")}
    linears(src, st, e, "embed.", [("LayerNorm", "norm")])
    if spec["type_vocab_size"]:
        st["embed.types.weight"] = src.take(f"{e}token_type_embeddings.weight")
    for buf in ("position_ids", "token_type_ids"):  # constant buffers
        src.ignore(f"{e}{buf}")
    for i in range(spec["num_layers"]):
        h, z = f"{p}encoder.layer.{i}.", f"encoder.blocks.{i}."
        qkv(src, st, f"{h}attention.self.", z, names=("query", "key", "value"), bias=True)
        linears(src, st, h, z, LAYER)
    src.drop(f"{p}pooler.")  # not part of the MLM logits or the hidden states
    return st


def mlm_head(src: Source, spec: dict, st: dict, dense: str, norm: str, bias: str, decoder: str) -> None:
    linears(src, st, "", "transform.", [(dense, "0"), (norm, "2")])
    st["lm_head.bias"] = src.take(bias)
    src.ignore(f"{decoder}.bias")  # the same vector as ``bias``
    if not src.tied(f"{decoder}.weight", st["tok_emb.weight"]):
        spec["tie_embeddings"], st["lm_head.weight"] = False, src.take(f"{decoder}.weight")


def read(src: Source, attention: str):
    mlm = any(k.startswith("cls.predictions.") for k in src.state)
    spec = encoder_spec(src, "bert", attention, mlm=mlm)
    st = encoder_tensors(src, spec, src.prefix("bert."))
    src.drop("cls.seq_relationship.")  # BertForPreTraining's next-sentence head
    if mlm:
        c = "cls.predictions."
        bias = f"{c}bias" if src.has(f"{c}bias") else f"{c}decoder.bias"
        mlm_head(src, spec, st, f"{c}transform.dense", f"{c}transform.LayerNorm", bias, f"{c}decoder")
    return spec, st


def encoder_config(spec) -> dict:
    st = spec.stack("encoder")
    d = spec.dropout
    return dict(vocab_size=spec.vocab_size, hidden_size=spec.d_model, num_hidden_layers=st.num_layers,
                num_attention_heads=st.num_heads, intermediate_size=st.d_ff,
                hidden_act=INV_ACTS.get(st.ffn.config.activation, "?"),
                max_position_embeddings=spec.max_len, type_vocab_size=spec.type_vocab_size,
                layer_norm_eps=st.norm.config.eps, hidden_dropout_prob=d, attention_probs_dropout_prob=d,
                pad_token_id=spec.pad_id if spec.pad_id is not None else 0,
                tie_word_embeddings=spec.tie_embeddings)


register(Converter("bert", read, encoder_config, "BertConfig",
                lambda spec: "BertForMaskedLM" if spec.head.kind == "mlm" else "BertModel",
                refuses=("position_embedding_type", "is_decoder", "add_cross_attention", "hidden_act")))

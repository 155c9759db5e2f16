"""T5 (``T5ForConditionalGeneration``, ``T5Model``, ``T5EncoderModel``): relative position buckets,
unscaled attention, RMSNorm pre-norm, ReLU or gated-GELU feed-forward, ``d_model ** -0.5`` before a
tied LM head.

Refused: ``feed_forward_proj`` values zoo has no exact equivalent of.
"""
from __future__ import annotations

from .core import ACTS, INV_ACTS, Converter, Source, lm_head, norm_entry, qkv, register


def _ffn(src: Source) -> dict:
    proj = src.text("feed_forward_proj", "relu")
    parts = proj.split("-")
    gated = parts[0] == "gated" and len(parts) == 2
    act = parts[-1]
    if proj == "gated-gelu":
        act = "gelu_new"  # transformers' historical alias: T5 v1.1's gated-gelu is the tanh GELU
    if act not in ACTS or (len(parts) == 2 and not gated) or len(parts) > 2:
        src.refuse("feed_forward_proj", proj, "zoo has no exact equivalent",
                   options=["relu", "gelu", "gated-gelu", "gated-relu", "gated-silu"],
                   fix="convert a model with one of the listed feed-forward types")
    if not gated:
        return {"kind": "mlp", "activation": ACTS[act], "bias": False}
    kind = {"silu": "swiglu", "relu": "reglu"}.get(ACTS[act], "geglu")
    return {"kind": kind, "activation": ACTS[act], "bias": False}


def read(src: Source, attention: str):
    encoder_only = not any(k.startswith("decoder.") for k in src.state)  # T5EncoderModel
    ffn = _ffn(src)
    D = src.int("d_model")
    Le = src.int("num_layers")
    Ld = src.int("num_decoder_layers", Le)
    scale = src.flag("scale_decoder_outputs", src.flag("tie_word_embeddings", True))
    spec = dict(name="t5", arch="encoder_decoder", vocab_size=src.int("vocab_size"),
                max_len=src.int("n_positions", 512), d_model=D, num_layers=Le, num_heads=src.int("num_heads"),
                head_dim=src.int("d_kv"), d_ff=src.int("d_ff"),
                dropout=src.float("dropout_rate", 0.0, lo=0, hi=0.999), attn_scale=1.0,
                qkv_bias=False, out_bias=False, tie_embeddings=True, scale_embeddings=False,
                head_scale=D ** -0.5 if scale else None, attention=attention,
                positions={"kind": "t5_relative", "num_buckets": src.int("relative_attention_num_buckets", 32),
                           "max_distance": src.int("relative_attention_max_distance", 128)},
                norm=norm_entry("rmsnorm", src.float("layer_norm_epsilon", 1e-6, positive=True), "pre"),
                ffn=ffn, decoder={"num_layers": Ld})
    if encoder_only:  # the encoder's hidden states (sentence embeddings, retrieval)
        del spec["decoder"], spec["head_scale"]
        spec.update(arch="encoder", head={"kind": "none"})
    wte = src.take("shared.weight")
    st = {"tok_emb.weight": wte}
    ff = {"mlp": (("wi", "up"), ("wo", "down"))}.get(ffn["kind"], (("wi_0", "gate"), ("wi_1", "up"), ("wo", "down")))
    for role, L in (("encoder", Le),) + ((("decoder", Ld),) if not encoder_only else ()):
        src.ignore(f"{role}.embed_tokens.weight")
        for i in range(L):
            h, z = f"{role}.block.{i}.layer.", f"{role}.blocks.{i}."
            a = f"{h}0.SelfAttention."
            qkv(src, st, a, z, names=("q", "k", "v"))
            st[f"{z}attn.out.weight"] = src.take(f"{a}o.weight")
            st[f"{z}attn_res.norm.weight"] = src.take(f"{h}0.layer_norm.weight")
            if i == 0:
                st[f"{role}.positions.bias.weight"] = src.take(f"{a}relative_attention_bias.weight")
            n = 1
            if role == "decoder":
                x = f"{h}1.EncDecAttention."
                st[f"{z}cross.q.weight"] = src.take(f"{x}q.weight")
                st[f"{z}cross.kv.weight"] = src.cat(f"{x}k.weight", f"{x}v.weight")
                st[f"{z}cross.out.weight"] = src.take(f"{x}o.weight")
                st[f"{z}cross_res.norm.weight"] = src.take(f"{h}1.layer_norm.weight")
                src.ignore(f"{x}relative_attention_bias.weight")  # never used by T5 either
                n = 2
            for hf, zn in ff:
                st[f"{z}ffn.{zn}.weight"] = src.take(f"{h}{n}.DenseReluDense.{hf}.weight")
            st[f"{z}ffn_res.norm.weight"] = src.take(f"{h}{n}.layer_norm.weight")
        st[f"{role}.final_norm.weight"] = src.take(f"{role}.final_layer_norm.weight")
    if not encoder_only:
        lm_head(src, spec, st, wte)
    return spec, st


def write(spec) -> dict:
    st, enc = spec.stack("decoder"), spec.stack("encoder")
    act = INV_ACTS.get(getattr(st.ffn.config, "activation", None), "?")
    gated = {"mlp": "", "geglu": "gated-", "reglu": "gated-", "swiglu": "gated-"}.get(st.ffn.kind, "?-")
    ff = f"{gated}{'gelu' if act == 'gelu_new' and gated else act}"
    return dict(vocab_size=spec.vocab_size, d_model=spec.d_model, d_kv=st.head_dim, d_ff=st.d_ff,
                num_layers=enc.num_layers, num_decoder_layers=st.num_layers, num_heads=st.num_heads,
                relative_attention_num_buckets=st.positions.config.num_buckets,
                relative_attention_max_distance=st.positions.config.max_distance, dropout_rate=spec.dropout,
                layer_norm_epsilon=st.norm.config.eps, feed_forward_proj=ff,
                tie_word_embeddings=spec.head_scale is not None)


register(Converter("t5", read, write, "T5Config", "T5ForConditionalGeneration", refuses=("feed_forward_proj",)))

"""GPT-NeoX / Pythia (``GPTNeoXForCausalLM``): parallel residual (``x + attn(ln1(x)) +
mlp(ln2(x))``, ``use_parallel_residual``), partial rotary (``partial_rotary_factor`` / ``rotary_pct``:
Pythia rotates the first quarter of each head), LayerNorm, GELU MLP, biases everywhere, untied head.

Tensors: ``query_key_value`` holds q, k, v interleaved *per head* (rows ``(h, 3, hd)``); zoo's fused
``qkv`` is ``(3, h, hd)``, so the rows are permuted (and permuted back for the reverse direction).

Refused: activations without an exact equivalent, rope types other than Llama's (zoo/convert/llama.py).
"""
from __future__ import annotations

from .core import INV_ACTS, Converter, Source, lm_head, linears, norm_entry, register
from .llama import context_len, hf_max_positions, rope, rope_parameters


def _per_head_to_blocks(h: int):
    """Row permutations between NeoX's ``(h, 3, hd)`` and zoo's ``(3, h, hd)`` layouts."""
    def fwd(t):
        return t.reshape(h, 3, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)  # (3, h, hd, ...)

    def inv(t):
        return t.reshape(3, h, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)  # (h, 3, hd, ...)
    return fwd, inv


def read(src: Source, attention: str):
    rp = src.mapping("rope_parameters")
    fraction = src.float("rotary_pct", rp.get("partial_rotary_factor", 1.0), lo=0.0, hi=1.0, positive=True)
    if "rotary_emb_base" in src.config:
        src.config.setdefault("rope_theta", src.config["rotary_emb_base"])
    L, H = src.int("num_hidden_layers"), src.int("num_attention_heads")
    bias = src.flag("attention_bias", True)
    spec = dict(name="gpt_neox", arch="decoder", vocab_size=src.int("vocab_size"),
                max_len=context_len(src, rope(src, fraction)), d_model=src.int("hidden_size"), num_layers=L,
                num_heads=H, d_ff=src.int("intermediate_size"),
                dropout=src.float("hidden_dropout", 0.0, lo=0, hi=0.999), qkv_bias=bias, out_bias=bias,
                tie_embeddings=True, scale_embeddings=False, attention=attention, mask="causal",
                positions=rope(src, fraction), parallel_residual=src.flag("use_parallel_residual", True),
                norm=norm_entry("layernorm", src.float("layer_norm_eps", 1e-5, positive=True), "pre"),
                ffn={"kind": "mlp", "activation": src.act("hidden_act", default="gelu"), "bias": True})
    p = src.prefix("gpt_neox.")
    wte = src.take(f"{p}embed_in.weight")
    st = {"tok_emb.weight": wte}
    fwd, inv = _per_head_to_blocks(H)
    for i in range(L):
        h, z = f"{p}layers.{i}.", f"decoder.blocks.{i}."
        for part in (("weight",) + (("bias",) if bias else ())):
            st[f"{z}attn.qkv.{part}"] = src.permute(f"{h}attention.query_key_value.{part}", fwd, inv)
        linears(src, st, h, z, [("attention.dense", "attn.out")], bias)
        linears(src, st, h, z, [("input_layernorm", "attn_res.norm"), ("post_attention_layernorm", "ffn_res.norm"),
                                ("mlp.dense_h_to_4h", "ffn.up"), ("mlp.dense_4h_to_h", "ffn.down")])
        for buf in ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq"):
            src.ignore(f"{h}{buf}")  # constant buffers of older versions
    src.ignore(f"{p}rotary_emb.inv_freq")
    linears(src, st, p, "decoder.", [("final_layer_norm", "final_norm")])
    lm_head(src, spec, st, wte, "lm_head.weight" if src.has("lm_head.weight") else "embed_out.weight")
    return spec, st


def write(spec) -> dict:
    st = spec.stack("decoder")
    rp = rope_parameters(st.positions.config)
    rp["partial_rotary_factor"] = st.positions.config.fraction
    return dict(vocab_size=spec.vocab_size, hidden_size=spec.d_model, num_hidden_layers=st.num_layers,
                num_attention_heads=st.num_heads, intermediate_size=st.d_ff,
                hidden_act=INV_ACTS.get(st.ffn.config.activation, "?"), max_position_embeddings=hf_max_positions(spec),
                layer_norm_eps=st.norm.config.eps, use_parallel_residual=st.parallel_residual,
                attention_bias=st.qkv_bias, hidden_dropout=spec.dropout, rope_parameters=rp,
                tie_word_embeddings=spec.tie_embeddings)


register(Converter("gpt_neox", read, write, "GPTNeoXConfig", "GPTNeoXForCausalLM",
                refuses=("hidden_act", "rope_parameters", "rope_scaling")))

"""RoBERTa (``RobertaModel``, ``RobertaForMaskedLM``): BERT with positions numbered from
``pad_token_id + 1`` (``learned_offset``: the 514-row table of roberta-base serves 512 positions),
one token type, and an MLM head named ``lm_head`` (dense + GELU + LayerNorm + decoder).

Refused: what BERT refuses.
"""
from __future__ import annotations

from .bert import encoder_config, encoder_spec, encoder_tensors, mlm_head
from .core import Converter, Source, register


def read(src: Source, attention: str):
    mlm = any(k.startswith("lm_head.") for k in src.state)
    offset = src.int("pad_token_id", 1, lo=0) + 1
    rows = src.int("max_position_embeddings", lo=offset + 1)
    spec = encoder_spec(src, "roberta", attention, mlm=mlm, max_len=rows - offset,
                        positions={"kind": "learned_offset", "offset": offset})
    st = encoder_tensors(src, spec, src.prefix("roberta."))
    if mlm:
        mlm_head(src, spec, st, "lm_head.dense", "lm_head.layer_norm", "lm_head.bias", "lm_head.decoder")
    return spec, st


def write(spec) -> dict:
    off = spec.stack("encoder").positions.config.offset
    return dict(encoder_config(spec), max_position_embeddings=spec.max_len + off, pad_token_id=off - 1)


register(Converter("roberta", read, write, "RobertaConfig",
                lambda spec: "RobertaForMaskedLM" if spec.head.kind == "mlm" else "RobertaModel",
                refuses=("position_embedding_type", "is_decoder", "add_cross_attention", "hidden_act")))

"""Marian / OPUS-MT (``MarianMTModel``): BART's layout without the embedding LayerNorm, with
sinusoidal positions whose sines fill the first half of the features and cosines the second
(``sinusoidal_split``), embeddings scaled by sqrt(d_model) and, usually, SiLU (``swish``) MLPs.
The stored position tables are constants: checked against the computed ones, not copied.

Refused: ``share_encoder_decoder_embeddings: false`` / a ``decoder_vocab_size`` other than
``vocab_size`` (zoo shares one token table), position tables that are not the sinusoids, and what
BART refuses.
"""
from __future__ import annotations

import torch

from ..components import BuildContext
from ..registry import get_registry
from .bart import read_seq2seq, seq2seq_config
from .core import ConvertError, Converter, Source, register


def read(src: Source, attention: str):
    src.expect("share_encoder_decoder_embeddings", lambda v: v, "zoo shares one token table between "
               "the encoder and the decoder", "convert a Marian model with shared embeddings")
    src.expect("decoder_vocab_size", lambda v: v == src.config.get("vocab_size"),
               "zoo's decoder uses the encoder's vocabulary", "convert a model with one vocabulary")
    spec, st = read_seq2seq(src, attention, "marian", {"kind": "sinusoidal_split"}, embed_norm=False,
                            act_default="swish")
    p = src.prefix("model.")
    for role in ("encoder", "decoder"):
        name = f"{p}{role}.embed_positions.weight"
        if not src.has(name):  # save_pretrained leaves the constant tables out
            continue
        t = src.take(name)
        if isinstance(t, torch.Tensor) and not t.is_meta:
            ref = _computed_table(t.shape[0], t.shape[1]).to(t.dtype)
            if t.shape != ref.shape or (t.float() - ref.float()).abs().max() > 1e-3:
                raise ConvertError(f"tensor '{name}' is not the sinusoidal table", where=f"weights.{name}",
                                   fix="zoo computes Marian's positions; a trained table cannot be converted")
    return spec, st


def _computed_table(max_len: int, d_model: int) -> torch.Tensor:
    """``(max_len, d_model)``: the table the ``sinusoidal_split`` position component computes,
    asked of the registered component itself (the engine never imports a plugin module)."""
    comp = get_registry().get("position", "sinusoidal_split")
    ctx = BuildContext.for_heads(1, d_model, d_model=d_model, max_len=max_len)
    return comp.make(ctx).table


def write(spec) -> dict:
    return dict(seq2seq_config(spec), decoder_vocab_size=spec.vocab_size, share_encoder_decoder_embeddings=True,
                pad_token_id=spec.vocab_size - 1, decoder_start_token_id=spec.vocab_size - 1)


register(Converter("marian", read, write, "MarianConfig", "MarianMTModel",
                refuses=("share_encoder_decoder_embeddings", "decoder_vocab_size", "activation_function",
                         "normalize_before")))

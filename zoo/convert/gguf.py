"""GGUF files (llama.cpp, Ollama) in, directly: ``zoo.convert.from_gguf("model.gguf")``.

A GGUF file is one self-contained binary: a header of typed key/value metadata (the model's shape
under llama.cpp's key names, ``llama.block_count``, ``llama.attention.head_count``...; the tokenizer
under ``tokenizer.ggml.*``; often a chat template under ``tokenizer.chat_template``) followed by
tensors named ``token_embd.weight``, ``blk.N.attn_q.weight``, ... and stored either as floats (F32,
F16, BF16) or in *quantised blocks* (Q8_0: 32 int8 values and one float16 scale per block; Q4_K:
256 4-bit values in 8 sub-blocks with 6-bit scales and mins; ...).

How it is read, in four steps, none of which needs transformers:

1. **Header** (zoo's own bounded reader, :mod:`zoo.convert.gguf_header`, on a file opened through
   :mod:`zoo.guard.files`): metadata and the tensor table, every count held against the bytes the
   file has before anything is allocated; tensors are read with ``preadv`` when dequantised, never
   memory-mapped (a file truncated meanwhile is a ConvertError, not a SIGBUS).  Nothing is
   dequantised yet.
2. **Config**: the metadata becomes the ``config.json`` a Hugging Face folder of the same model
   would have (:data:`ARCHS`: one declarative table per architecture, key by key), typed and
   range-checked; an option zoo would get wrong (rope scaling, a per-layer head count, ...) is a
   :class:`ConvertError` naming the GGUF key.
3. **Tensors**: each GGUF name becomes the Hugging Face name (:data:`LLAMA_TENSORS`,
   :data:`GPT2_TENSORS`), and the layout llama.cpp changed is changed back: llama.cpp *permutes the
   rows of q and k* of the ``llama`` architecture for its rotary kernel (pairs ``(2i, 2i+1)``
   instead of ``(i, i + hd/2)``), stores GPT-2's ``Conv1D`` matrices transposed and Gemma's norm
   weights as ``1 + w`` (:data:`NORM_PLUS_ONE`).  Values the file does not state come from
   transformers' config-class defaults (:data:`MODEL_DEFAULTS`), as its own GGUF loader does.  Then the
   ordinary family converter (``zoo/convert/llama.py``, ``gpt2.py``, ``qwen2.py``...) maps them to
   zoo, so a GGUF model and the safetensors model it was made from convert through the same lines.
   Shapes are checked on the meta device (no memory) *before* any block is dequantised.
4. **Dequantisation** with the library's own ``gguf.quants.dequantize`` (numpy; zoo has no kernels
   of its own), to the dtype asked for (default float32).

The tokenizer comes along: ``tokenizer.ggml.model`` ``llama`` (SentencePiece-style BPE with byte
fallback; merges given or recovered from the scores; Phi-3's and Gemma's variants, :data:`SP_STYLES`),
``gpt2`` (byte-level BPE) or ``t5`` (Unigram) is rebuilt as transformers' GGUF tokenizer builds it,
as a ``tokenizers`` JSON, the ``hf`` tokenizer, stored inside the checkpoint by ``zoo.save``.  A chat
template in the metadata is kept (``model.chat_template``; see zoo/run/chat.py).

Supported: the architectures transformers' own GGUF loader reads *and* zoo converts (llama and,
named "mistral", Mistral; qwen2, qwen3, phi3, gpt2, the mixtures of experts qwen2moe, qwen3moe;
gemma2, gemma3; t5, t5encoder) — see :data:`ARCHS` and docs/GGUF_AND_CHAT.md, which also lists
where zoo follows llama.cpp rather than transformers' loader (T5's gated GELU, Gemma's soft-caps and
Gemma 3's rope scaling read from the file) — in the quantisation types of :data:`QUANT_TYPES`.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from ..guard.build_budget import resolve_budget
from ..model.build import resolve_dtype
from ..io.tokenizers import tokenizer as make_tokenizer
from ..guard.files import open_read, short, user_path
from .core import ConvertError, assemble, check_shapes, convert_state
from .gguf_header import Header

#: The GGML storage types read (all dequantised by ``gguf.quants.dequantize``).
QUANT_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
               "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")

#: GGUF metadata key (after ``{arch}.``) -> Hugging Face config key, shared by the Llama-shaped
#: architectures.  ``rope.dimension_count`` and ``attention.key_length`` are checked, not copied.
DECODER_KEYS = {
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "block_count": "num_hidden_layers",
    "feed_forward_length": "intermediate_size",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "rope.freq_base": "rope_theta",
}
GPT2_KEYS = {
    "context_length": "n_positions",
    "embedding_length": "n_embd",
    "block_count": "n_layer",
    "feed_forward_length": "n_inner",
    "attention.head_count": "n_head",
    "attention.layer_norm_epsilon": "layer_norm_epsilon",
}
#: Gemma 2 / 3: the Llama-shaped keys and the sliding window; Gemma 2's two soft-caps are read from
#: the file too (llama.cpp applies them; transformers' loader ignores them and keeps Gemma2Config's
#: 50 / 30, the values every Gemma 2 ships with).
GEMMA_KEYS = {**DECODER_KEYS, "attention.sliding_window": "sliding_window"}
GEMMA2_KEYS = {**GEMMA_KEYS, "attn_logit_softcapping": "attn_logit_softcapping",
               "final_logit_softcapping": "final_logit_softcapping"}
#: T5 (encoder-decoder): T5Config's names; the decoder has as many blocks as the encoder.
T5_KEYS = {
    "context_length": "n_positions",
    "embedding_length": "d_model",
    "block_count": "num_layers",
    "feed_forward_length": "d_ff",
    "attention.head_count": "num_heads",
    "attention.key_length": "d_kv",
    "attention.layer_norm_epsilon": "layer_norm_epsilon",
    "attention.relative_buckets_count": "relative_attention_num_buckets",
    "decoder_start_token_id": "decoder_start_token_id",
}
#: Float-valued keys (the rest are integers).
FLOAT_KEYS = {"rms_norm_eps", "rope_theta", "layer_norm_epsilon", "attn_logit_softcapping",
              "final_logit_softcapping"}

#: GGUF tensor name -> Hugging Face name for the Llama-shaped decoders (``{i}``: the block).
LLAMA_TENSORS = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
    "blk.{i}.attn_norm": "model.layers.{i}.input_layernorm",
    "blk.{i}.attn_q": "model.layers.{i}.self_attn.q_proj",
    "blk.{i}.attn_k": "model.layers.{i}.self_attn.k_proj",
    "blk.{i}.attn_v": "model.layers.{i}.self_attn.v_proj",
    "blk.{i}.attn_qkv": "model.layers.{i}.self_attn.qkv_proj",  # Phi-3: fused q|k|v
    "blk.{i}.attn_output": "model.layers.{i}.self_attn.o_proj",
    "blk.{i}.attn_q_norm": "model.layers.{i}.self_attn.q_norm",  # Qwen3
    "blk.{i}.attn_k_norm": "model.layers.{i}.self_attn.k_norm",
    "blk.{i}.ffn_norm": "model.layers.{i}.post_attention_layernorm",
    "blk.{i}.ffn_gate": "model.layers.{i}.mlp.gate_proj",
    "blk.{i}.ffn_up": "model.layers.{i}.mlp.up_proj",
    "blk.{i}.ffn_down": "model.layers.{i}.mlp.down_proj",
}
PHI3_TENSORS = {**LLAMA_TENSORS, "blk.{i}.ffn_up": "model.layers.{i}.mlp.gate_up_proj"}  # fused gate|up
#: Mixtures of experts (Qwen2-MoE, Qwen3-MoE): the router, the experts stacked ``(E, F, D)`` and
#: Qwen2-MoE's shared expert.  A name starting with "=" is taken whole (transformers' fused expert
#: tensors have no ``.weight``); gate and up experts are joined into ``gate_up_proj`` (E, 2F, D).
MOE_TENSORS = {**{k: v for k, v in LLAMA_TENSORS.items() if "ffn_" not in k or "ffn_norm" in k},
               "blk.{i}.ffn_gate_inp": "model.layers.{i}.mlp.gate",
               "blk.{i}.ffn_gate_exps": "=model.layers.{i}.mlp.experts.gate_up_proj",
               "blk.{i}.ffn_up_exps": "=model.layers.{i}.mlp.experts.gate_up_proj",
               "blk.{i}.ffn_down_exps": "=model.layers.{i}.mlp.experts.down_proj",
               "blk.{i}.ffn_gate_shexp": "model.layers.{i}.mlp.shared_expert.gate_proj",
               "blk.{i}.ffn_up_shexp": "model.layers.{i}.mlp.shared_expert.up_proj",
               "blk.{i}.ffn_down_shexp": "model.layers.{i}.mlp.shared_expert.down_proj",
               "blk.{i}.ffn_gate_inp_shexp": "model.layers.{i}.mlp.shared_expert_gate"}
MOE_KEYS = {**DECODER_KEYS, "expert_count": "num_experts", "expert_used_count": "num_experts_per_tok",
            "expert_feed_forward_length": "moe_intermediate_size",
            "expert_shared_feed_forward_length": "shared_expert_intermediate_size"}
#: GPT-2; the names marked in GPT2_TRANSPOSED were stored (out, in) by llama.cpp, Conv1D is (in, out).
GPT2_TENSORS = {
    "token_embd": "transformer.wte",
    "position_embd": "transformer.wpe",
    "output_norm": "transformer.ln_f",
    "output": "lm_head",
    "blk.{i}.attn_norm": "transformer.h.{i}.ln_1",
    "blk.{i}.attn_qkv": "transformer.h.{i}.attn.c_attn",
    "blk.{i}.attn_output": "transformer.h.{i}.attn.c_proj",
    "blk.{i}.ffn_norm": "transformer.h.{i}.ln_2",
    "blk.{i}.ffn_up": "transformer.h.{i}.mlp.c_fc",
    "blk.{i}.ffn_down": "transformer.h.{i}.mlp.c_proj",
}
GPT2_TRANSPOSED = ("attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight")
#: Gemma 2 / 3: four norms per block (before and after attention, before and after the FFN) and,
#: in Gemma 3, the q/k norms (in LLAMA_TENSORS, for Qwen3).
GEMMA_TENSORS = {**{k: v for k, v in LLAMA_TENSORS.items() if "qkv" not in k},
                 "blk.{i}.post_attention_norm": "model.layers.{i}.post_attention_layernorm",
                 "blk.{i}.ffn_norm": "model.layers.{i}.pre_feedforward_layernorm",
                 "blk.{i}.post_ffw_norm": "model.layers.{i}.post_feedforward_layernorm"}


def _t5_block(side: str, hf: str, cross: bool) -> dict[str, str]:
    """One T5 stack's block tensors: self-attention (layer 0), cross-attention (layer 1, decoder
    only), the gated FFN (the last layer); the relative-position bias lives in block 0 only."""
    b, h = f"{side}.blk.{{i}}.", f"{hf}.block.{{i}}.layer."
    ffn = 2 if cross else 1
    out = {f"{b}attn_norm": f"{h}0.layer_norm", f"{b}attn_rel_b": f"{h}0.SelfAttention.relative_attention_bias",
           **{f"{b}attn_{x}": f"{h}0.SelfAttention.{x}" for x in "qkvo"},
           f"{b}ffn_norm": f"{h}{ffn}.layer_norm", f"{b}ffn_gate": f"{h}{ffn}.DenseReluDense.wi_0",
           f"{b}ffn_up": f"{h}{ffn}.DenseReluDense.wi_1", f"{b}ffn_down": f"{h}{ffn}.DenseReluDense.wo"}
    if cross:
        out.update({f"{b}cross_attn_norm": f"{h}1.layer_norm",
                    **{f"{b}cross_attn_{x}": f"{h}1.EncDecAttention.{x}" for x in "qkvo"}})
    return out


#: T5: ``enc.``/``dec.`` stacks, llama.cpp's names for T5ForConditionalGeneration's.
T5_TENSORS = {"token_embd": "shared", "output": "lm_head", "enc.output_norm": "encoder.final_layer_norm",
              "dec.output_norm": "decoder.final_layer_norm",
              **_t5_block("enc", "encoder", False), **_t5_block("dec", "decoder", True)}
#: An encoder-only T5 (``t5encoder``: T5EncoderModel, the text encoder of image models).
T5_ENCODER_TENSORS = {k: v for k, v in T5_TENSORS.items() if not k.startswith(("dec.", "output"))}

#: GGUF ``general.architecture`` -> (Hugging Face model_type, config keys, tensor names,
#: llama.cpp permuted q/k rows for its rotary kernel).  The intersection of what transformers'
#: GGUF loader reads and what zoo converts.  Not here: UMT5 (a ``t5`` file named umt5: per-layer
#: position biases zoo's T5 has no place for), Gemma 3n / 4.
ARCHS = {
    "llama": ("llama", DECODER_KEYS, LLAMA_TENSORS, True),
    "qwen2": ("qwen2", DECODER_KEYS, LLAMA_TENSORS, False),
    "qwen3": ("qwen3", DECODER_KEYS, LLAMA_TENSORS, False),
    "phi3": ("phi3", DECODER_KEYS, PHI3_TENSORS, False),
    "gpt2": ("gpt2", GPT2_KEYS, GPT2_TENSORS, False),
    "qwen2moe": ("qwen2_moe", MOE_KEYS, MOE_TENSORS, False),
    "qwen3moe": ("qwen3_moe", MOE_KEYS, MOE_TENSORS, False),
    "gemma2": ("gemma2", GEMMA2_KEYS, GEMMA_TENSORS, False),
    "gemma3": ("gemma3_text", GEMMA_KEYS, GEMMA_TENSORS, False),  # the text model of any Gemma 3
    "t5": ("t5", T5_KEYS, T5_TENSORS, False),
    "t5encoder": ("t5", T5_KEYS, T5_ENCODER_TENSORS, False),  # zoo's T5 without a decoder
}
#: ``(general.architecture, general.name)`` -> the model_type transformers' loader reads it as: a
#: ``llama`` file named exactly "mistral" becomes Mistral (transformers compares the name list with
#: ``in``, so "Mistral-7B-v0.3" stays llama).
NAMED = {("llama", "mistral"): "mistral"}
#: Architectures whose every ``*norm.weight`` llama.cpp stores as ``1 + w`` (Gemma computes
#: ``x * (1 + w)``; llama.cpp's kernel multiplies by the stored value): zoo subtracts the 1 again,
#: as transformers' Gemma2TensorProcessor does.
NORM_PLUS_ONE = {"gemma2", "gemma3"}
#: Values the file does not state, per model_type: transformers' config-class defaults, which its
#: GGUF loader keeps (the reference), and the one value llama.cpp fixes (T5's feed-forward).  A value
#: the file does state wins (``sliding_window``, the soft-caps, ``rope.freq_base``).  A model_type
#: not listed gets ``hidden_act: silu`` (the Llama-shaped ones).
MODEL_DEFAULTS = {
    "gemma2": {"hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256, "sliding_window": 4096,
               "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "rope_theta": 10000.0},
    # layer_types: 5 local then 1 global (sliding_window_pattern); local layers rotate with 10 000
    "gemma3_text": {"hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
                    "sliding_window": 4096, "rope_theta": 1_000_000.0, "rope_local_base_freq": 10000.0,
                    "sliding_window_pattern": 6},
    "mistral": {"hidden_act": "silu", "sliding_window": 4096},
    "gpt2": {},  # GPT2_KEYS say it all
    # llama.cpp computes a gated T5 FFN with GELU (tanh form), as T5 v1.1 / FLAN-T5 are; transformers'
    # loader builds gated *ReLU* (is_gated_act with T5Config's default "relu"): zoo follows llama.cpp
    "t5": {"feed_forward_proj": "gated-gelu", "n_positions": 512, "relative_attention_num_buckets": 32,
           "relative_attention_max_distance": 128, "dropout_rate": 0.0, "decoder_start_token_id": 0},
}
#: The one value llama.cpp derives rather than reads: Gemma 2 / Gemma 3 27B scale queries by
#: ``1/sqrt(d_model / heads)`` (144 and 168), every other size by ``1/sqrt(head_dim)`` (256 =
#: transformers' default).  llama.cpp recognises 27B by its layer count (46 and 62); transformers'
#: loader keeps 256 for every size, so a 27B file would run with the wrong attention scale there.
#: zoo follows llama.cpp (the original configs agree with it).
GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}
#: Rope scaling read per architecture (the rest refuse ``rope.scaling.*``): Gemma 3 4B-27B files
#: carry linear x8 scaling of the *global* layers (the local ones rotate unscaled), as llama.cpp and
#: the original config apply it.  transformers' loader drops it, so there zoo follows llama.cpp.
ROPE_SCALINGS = {"gemma3": ("linear",)}
#: Architectures without rotary attention heads (no head_dim / rope checks).
NOT_ROTARY = {"gpt2", "t5", "t5encoder"}
#: Keys that, when present, must equal another key (zoo builds one size for both).
SAME_AS = {"t5": {"attention.value_length": "attention.key_length",
                  "attention.head_count_kv": "attention.head_count",
                  "attention.layer_norm_rms_epsilon": "attention.layer_norm_epsilon"}}
SAME_AS["t5encoder"] = SAME_AS["t5"]
#: Tensors an architecture needs, with what their absence means.
REQUIRED = {"t5": {"enc.blk.0.ffn_gate.weight": "a gated feed-forward (T5 v1.1 / FLAN-T5); this is an "
                                                "original ReLU T5, which transformers' loader cannot read either"}}
REQUIRED["t5encoder"] = REQUIRED["t5"]
#: ``general.name`` fragments (lower case) refused per architecture, with the reason.
NAME_REFUSED = {"t5": {"umt5": "UMT5 (a relative-position bias in every layer, which zoo's T5 does not have)"}}
NAME_REFUSED["t5encoder"] = NAME_REFUSED["t5"]
#: Config values llama.cpp fixes per architecture rather than writing them in the file.
ARCH_CONFIG = {"qwen2moe": {"norm_topk_prob": False, "qkv_bias": True},  # softmax top-k, not renormalised
               "qwen3moe": {"norm_topk_prob": True}}  # llama.cpp renormalises Qwen3-MoE's top-k
#: Keys read only when present (the rest of an architecture's keys are required).
OPTIONAL = {"n_inner", "rope_theta", "shared_expert_intermediate_size", "intermediate_size", "sliding_window",
            "attn_logit_softcapping", "final_logit_softcapping", "n_positions", "relative_attention_num_buckets",
            "decoder_start_token_id"}
#: Integer keys for which 0 is a valid value.
ZERO_OK = {"decoder_start_token_id"}
#: Metadata keys under ``{arch}.`` zoo understands without copying them.
KNOWN_EXTRA = {"rope.dimension_count", "attention.key_length", "attention.value_length",
               "vocab_size", "rope.scaling.type"}
#: Keys that change the function and that zoo does not reproduce from a GGUF: refused when set.
REFUSED = {"rope.scaling.factor": "rope scaling", "rope.scaling.original_context_length": "rope scaling",
           "attention.sliding_window": "a sliding attention window",
           "attn_logit_softcapping": "attention logit soft-capping",
           "final_logit_softcapping": "final logit soft-capping",
           "attention.clamp_kqv": "clamped q/k/v (clip_qkv)"}
MAX_TOKENS = 4_000_000  # a real vocabulary has up to ~260k entries


def _describe_start(head: bytes) -> str:
    """What a file that is not GGUF starts with, without echoing its bytes (a secret, a terminal
    escape): empty, text, or binary."""
    if not head:
        return "it is empty"
    if all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return "it starts with text"
    return "it starts with other binary data"


def _fix(what: str) -> str:
    return f"convert the original Hugging Face folder instead (zoo convert HF_DIR OUT), {what}"


# ---------------------------------------------------------------------- step 1: the header
class GGUFFile:
    """The parsed header of a GGUF file: ``meta`` (key -> Python value, arrays as lists) and the
    tensor table (``tensors``: name -> the library's ``ReaderTensor``; its data is a memory map,
    nothing is read until dequantised)."""

    def __init__(self, path):
        try:
            import gguf  # noqa: F401
        except ImportError as exc:
            raise ConvertError("reading GGUF files needs the gguf library", where="convert.path",
                               fix="pip install 'zoo-transformers[gguf]' (or: pip install gguf)") from exc
        p = user_path(path, where="convert.path", error=ConvertError)
        self.path = p
        fh = open_read(p, where=p.name, kind="checkpoint", error=ConvertError)
        try:
            head = fh.read(4)
            if head != b"GGUF":  # the bytes themselves are not quoted: they may be anything
                raise ConvertError(f"{short(p.name)} is not a GGUF file (it does not start with the "
                                   f"magic number GGUF; {_describe_start(head)})", where=p.name,
                                   fix="pass a .gguf file written by llama.cpp / the gguf library, or a "
                                       "Hugging Face folder")
            fh.seek(0)
            # zoo's own bounded reader (zoo.convert.gguf_header): counts held against the file's
            # size before anything is allocated, tensors read with preadv, never memory-mapped
            self.header = Header(fh, where=p.name)
        except BaseException:
            fh.close()
            raise
        self.meta: dict[str, Any] = {}
        for key, value in self.header.fields.items():
            if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                       "tokenizer.ggml.merges") and isinstance(value, list) and len(value) > MAX_TOKENS:
                raise ConvertError(f"{key} has {len(value):,} entries", where=f"gguf:{key}",
                                   fix="pass an intact GGUF file")
            self.meta[key] = value
        self.tensors = {t.name: t for t in self.header.tensors}

    def close(self) -> None:
        """Close the file (tensors can no longer be read)."""
        self.header.close()

    def get(self, key: str, kind: type | tuple, default: Any = ..., *, lo=None) -> Any:
        """A metadata value of type ``kind`` (``default`` when absent; required when no default)."""
        if key not in self.meta:
            if default is ...:
                raise ConvertError(f"the GGUF file has no metadata '{key}'", where=f"gguf:{key}",
                                   fix="pass a GGUF written by llama.cpp's convert_hf_to_gguf.py")
            return default
        v = self.meta[key]
        ok = isinstance(v, kind) and not (isinstance(v, bool) and bool not in
                                          (kind if isinstance(kind, tuple) else (kind,)))
        if not ok or (lo is not None and v < lo):
            want = getattr(kind, "__name__", None) or " or ".join(k.__name__ for k in kind)
            raise ConvertError(f"expected {want}{f' >= {lo}' if lo is not None else ''}, got {short(v)}",
                               where=f"gguf:{key}", fix="pass an intact GGUF file")
        return v


# ---------------------------------------------------------------------- step 2: the config
def hf_config(g: GGUFFile) -> tuple[dict, str, bool]:
    """``(config dict, architecture, permuted q/k)``: the metadata as a Hugging Face config."""
    arch = g.get("general.architecture", str)
    if arch not in ARCHS:
        raise ConvertError(f"GGUF architecture {short(arch)} is not supported", where="gguf:general.architecture",
                           options=list(ARCHS),
                           fix=_fix("or a GGUF of one of the listed architectures"))
    model_type, keys, _, permuted = ARCHS[arch]
    name = g.get("general.name", str, "")
    model_type = NAMED.get((arch, name), model_type)
    for part, what in NAME_REFUSED.get(arch, {}).items():
        if part in name.lower():
            raise ConvertError(f"general.name={short(name)}: a {arch} file of {what}", where="gguf:general.name",
                               options=list(ARCHS), fix=_fix("zoo maps the plain architecture only"))
    config: dict[str, Any] = {"model_type": model_type}
    for key, hf in keys.items():
        full = f"{arch}.{key}"
        if hf in FLOAT_KEYS:
            v = g.get(full, (int, float), None if hf in OPTIONAL else ...)
            if v is not None:
                config[hf] = float(v)
        elif hf == "num_key_value_heads" and isinstance(g.meta.get(full), list):
            heads = g.meta[full]
            if not heads or not all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in heads):
                raise ConvertError(f"{full} must be a positive integer or a non-empty list of them, got "
                                   f"{short(heads)}", where=f"gguf:{full}", fix="pass an intact GGUF file")
            if len(set(heads)) != 1:
                raise ConvertError(f"{full} differs between layers ({short(heads)})", where=f"gguf:{full}",
                                   fix=_fix("zoo builds one attention shape for every layer"))
            config[hf] = int(heads[0])
        else:
            v = g.get(full, int, None if hf in OPTIONAL else ..., lo=0 if hf in ZERO_OK else 1)
            if v is not None:
                config[hf] = v
    for key, other in SAME_AS.get(arch, {}).items():
        v, want = g.meta.get(f"{arch}.{key}"), g.meta.get(f"{arch}.{other}")
        if v is not None and v != want:
            raise ConvertError(f"{arch}.{key}={short(v)} differs from {arch}.{other}={short(want)}",
                               where=f"gguf:{arch}.{key}", fix=_fix(f"zoo's {arch} has one value for both"))
    for tensor, what in REQUIRED.get(arch, {}).items():
        if tensor not in g.tensors:
            raise ConvertError(f"the file has no tensor '{tensor}': zoo maps {what}", where=f"gguf:{tensor}",
                               fix=_fix("whose config.json says which variant it is"))
    for key, what in REFUSED.items():
        if key in keys or (key == "rope.scaling.factor" and arch in ROPE_SCALINGS):  # read, not refused
            continue
        v = g.meta.get(f"{arch}.{key}")
        off = (None, 0, 1.0) if key == "rope.scaling.factor" else (None, 0)  # values meaning "not used"
        if v not in off:
            raise ConvertError(f"{arch}.{key}={short(v)}: zoo does not reproduce {what} from a GGUF file",
                               where=f"gguf:{arch}.{key}", fix=_fix("whose config.json zoo reads exactly"))
    scaling, allowed = g.get(f"{arch}.rope.scaling.type", str, "none"), ROPE_SCALINGS.get(arch, ())
    if scaling != "none" and scaling not in allowed:
        raise ConvertError(f"{arch}.rope.scaling.type={short(scaling)} is not supported from a GGUF file",
                           where=f"gguf:{arch}.rope.scaling.type", options=["none", *allowed],
                           fix=_fix("whose rope_scaling zoo maps exactly"))
    factor = g.get(f"{arch}.rope.scaling.factor", (int, float), None) if allowed else None
    if scaling != "none" or factor not in (None, 0, 1.0):  # llama.cpp: a factor alone is linear
        if factor is None or not factor > 0:
            raise ConvertError(f"{arch}.rope.scaling.type={scaling} needs a positive rope.scaling.factor, got "
                               f"{short(factor)}", where=f"gguf:{arch}.rope.scaling.factor",
                               fix="pass an intact GGUF file")
        config["rope_scaling"] = {"rope_type": scaling if scaling != "none" else "linear", "factor": float(factor)}
    if "rope_freqs.weight" in g.tensors or any(n.startswith("rope_factors") for n in g.tensors):
        raise ConvertError("the file carries precomputed rope frequency factors (llama 3.1 / longrope "
                           "scaling)", where="gguf:rope_freqs.weight",
                           fix=_fix("whose rope_scaling zoo maps exactly"))
    emb = g.tensors.get("token_embd.weight")
    if emb is None:
        raise ConvertError("the GGUF file has no tensor 'token_embd.weight'", where="gguf:token_embd.weight",
                           fix="pass an intact GGUF file")
    if len(emb.shape) != 2:
        raise ConvertError(f"token_embd.weight has {len(emb.shape)} dimension(s); a token embedding is a "
                           "(vocab, d_model) matrix", where="gguf:token_embd.weight",
                           fix="pass an intact GGUF file")
    config["vocab_size"] = int(emb.shape[1])  # ggml shapes are innermost-first: (d_model, vocab)
    for k, v in MODEL_DEFAULTS.get(model_type, {"hidden_act": "silu"}).items():
        config.setdefault(k, v)
    if config.get("num_hidden_layers") == GEMMA_27B_LAYERS.get(arch, -1):
        config["query_pre_attn_scalar"] = config["hidden_size"] // config["num_attention_heads"]
    if model_type == "t5":  # transformers' rule: a separate output matrix means an unscaled, untied head
        config["tie_word_embeddings"] = "output.weight" not in g.tensors
    if arch in NOT_ROTARY:
        return config, arch, permuted
    H, D = config["num_attention_heads"], config["hidden_size"]
    hd = g.get(f"{arch}.attention.key_length", int, D // H, lo=1)
    if g.get(f"{arch}.attention.value_length", int, hd, lo=1) != hd:
        raise ConvertError(f"{arch}.attention.value_length differs from key_length", where=f"gguf:{arch}.attention.value_length",
                           fix=_fix("zoo's attention has one head size"))
    rot = g.get(f"{arch}.rope.dimension_count", int, hd, lo=1)
    if rot != hd:
        raise ConvertError(f"{arch}.rope.dimension_count={rot} rotates part of a {hd}-wide head; zoo "
                           f"maps whole-head rotary from a GGUF file only", where=f"gguf:{arch}.rope.dimension_count",
                           fix=_fix("whose partial rotary factor zoo reads exactly"))
    config["head_dim"] = hd
    config.update(ARCH_CONFIG.get(arch, {}))
    if arch == "qwen2moe":  # the shared expert is there or not
        config.setdefault("shared_expert_intermediate_size", 0)
    if "moe_intermediate_size" in config:  # the dense width is unused in an all-expert stack
        config.setdefault("intermediate_size", config["moe_intermediate_size"])
    config["attention_bias"] = "blk.0.attn_output.bias" in g.tensors
    config.setdefault("rope_theta", 10000.0)
    if arch == "llama" and "blk.0.attn_q.bias" in g.tensors and not config["attention_bias"]:
        raise ConvertError("q/k/v carry biases but the output projection does not", where="gguf:blk.0.attn_q.bias",
                           fix=_fix("zoo maps a llama with biases on all four projections or none"))
    return config, arch, permuted


# ---------------------------------------------------------------------- step 3: the tensors
def _name_table(table: dict[str, str], layers: int) -> dict[str, str]:
    out = {}
    for gg, hf in table.items():
        for i in (range(layers) if "{i}" in gg else (None,)):
            if hf.startswith("="):  # a fused tensor named without .weight
                out[gg.format(i=i) + ".weight"] = hf[1:].format(i=i)
                continue
            for suffix in (".weight", ".bias"):
                out[gg.format(i=i) + suffix] = hf.format(i=i) + suffix
    return out


def unpermute(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's rotary permutation of q / k rows: within each head llama.cpp interleaves
    the two halves ``[x_0..x_{hd/2-1} | x_{hd/2}..]`` as pairs ``(x_0, x_{hd/2}), (x_1, ...)``."""
    rows = w.shape[0]
    # (heads, hd/2, 2, ...) -> (heads, 2, hd/2, ...) -> back to (rows, ...)
    return w.reshape(heads, rows // heads // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def tensor_plan(g: GGUFFile, config: dict, arch: str, permuted: bool) -> dict[str, tuple]:
    """HF name -> (GGUF name, torch shape, transform) for every tensor of the file; an unknown
    tensor or storage type is an error naming it."""
    from gguf import GGMLQuantizationType

    key, layers = next((k, config[k]) for k in ("num_hidden_layers", "n_layer", "num_layers") if k in config)
    # the block count is held against the blocks the file has tensors for *before* a name table of
    # that many blocks is made (block_count = 10**6 in a small file was 2.6 GB of names)
    blocks = {int(m.group(1)) for n in g.tensors if (m := re.match(r"(?:enc\.|dec\.)?blk\.(\d+)\.", n))}
    have = max(blocks) + 1 if blocks else 0
    if layers != have:
        gkey = next(k for k, hf in ARCHS[arch][1].items() if hf == key)
        raise ConvertError(f"{arch}.{gkey}={short(layers)}, but the file has tensors for {have} block(s)",
                           where=f"gguf:{arch}.{gkey}", fix="pass an intact GGUF file")
    names = _name_table(ARCHS[arch][2], layers)
    plan = {}
    for name, t in g.tensors.items():
        if name not in names:
            raise ConvertError(f"tensor '{short(name)}' has no place in a {arch} model", where=f"gguf:{name}",
                               options=sorted({re.sub(r"blk\.\d+\.", "blk.N.", n) for n in names})[:40],
                               fix=_fix("this file has parts zoo's GGUF reader does not map"))
        try:
            qname = GGMLQuantizationType(int(t.tensor_type)).name
        except ValueError:
            qname = f"type {int(t.tensor_type)}"
        if qname not in QUANT_TYPES:
            raise ConvertError(f"tensor '{name}' is stored as {qname}, which zoo does not dequantise",
                               where=f"gguf:{name}", options=QUANT_TYPES,
                               fix="re-quantise the model with llama-quantize to one of the listed types, or "
                                   "convert the original float checkpoint")
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # ggml: innermost dimension first
        if name.endswith("ffn_gate_inp_shexp.weight") and len(shape) == 1:
            plan[names[name]] = ((name,), (1, *shape), ("row", None))  # (D,) -> transformers' (1, D)
            continue
        if name.endswith(("ffn_gate_exps.weight", "ffn_up_exps.weight")):
            first = name.endswith("ffn_gate_exps.weight")  # gate rows first, then up: (E, 2F, D)
            other = name.replace("ffn_gate_exps", "ffn_up_exps") if first else \
                name.replace("ffn_up_exps", "ffn_gate_exps")
            if other not in g.tensors:
                raise ConvertError(f"'{name}' has no partner '{other}'", where=f"gguf:{name}",
                                   fix="pass an intact GGUF file")
            pair = (name, other) if first else (other, name)
            plan[names[name]] = (pair, (shape[0], 2 * shape[1], *shape[2:]), ("cat1", None))
            continue
        fn = None
        if permuted and name.endswith(("attn_q.weight", "attn_q.bias")):
            fn = ("unpermute", config["num_attention_heads"])
        elif permuted and name.endswith(("attn_k.weight", "attn_k.bias")):
            fn = ("unpermute", config["num_key_value_heads"])
        elif arch == "gpt2" and name.endswith(GPT2_TRANSPOSED):
            fn, shape = ("t", None), shape[::-1]
        elif arch in NORM_PLUS_ONE and name.endswith("norm.weight"):
            fn = ("minus1", None)
        plan[names[name]] = ((name,), shape, fn)
    return plan


def dequantize(g: GGUFFile, name: str, dtype: torch.dtype) -> torch.Tensor:
    """One tensor as floats (``gguf.quants.dequantize``), in torch order."""
    import numpy as np
    from gguf.quants import dequantize as _dq

    t = g.tensors[name]
    shape = tuple(int(d) for d in reversed(t.shape.tolist()))
    try:
        arr = _dq(t.data, t.tensor_type)
        out = torch.from_numpy(np.array(arr, dtype=np.float32, order="C")).reshape(shape)  # a copy: the map is read-only
    except (ValueError, RuntimeError, TypeError, IndexError) as exc:
        raise ConvertError(f"tensor '{name}' cannot be dequantised ({short(str(exc))}); the file is "
                           f"truncated or damaged", where=f"gguf:{name}",
                           fix="download the file again") from exc
    return out.to(dtype)


def _apply(ts: list[torch.Tensor], fn) -> torch.Tensor:
    """One transformers tensor from its GGUF tensor(s): as stored, transposed (GPT-2's Conv1D),
    un-permuted (llama's q/k), the gate and up experts joined, a vector made a row, or less one
    (Gemma's norms)."""
    t = ts[0]
    if fn is None:
        return t
    if fn[0] == "t":
        return t.t()
    if fn[0] == "cat1":
        return torch.cat(ts, dim=1)  # (E, F, D) + (E, F, D) -> (E, 2F, D)
    if fn[0] == "row":
        return t.unsqueeze(0)
    if fn[0] == "minus1":  # Gemma's norms: llama.cpp stored 1 + w
        return t - 1
    return unpermute(t, fn[1])


# ---------------------------------------------------------------------- the tokenizer
#: ``tokenizer.ggml.model`` values rebuilt: SentencePiece-style BPE, byte-level BPE, T5's Unigram.
TOKENIZER_MODELS = ("llama", "gpt2", "t5")
#: ``general.architecture`` -> how its ``llama`` (SentencePiece-style) tokenizer differs from the
#: plain one, as in transformers' GGUF tokenizer builders: Phi-3 prepends its space in a normalizer;
#: Gemma has no prefix space (spaces become "▁" in a normalizer), spells whitespace-only tokens with
#: real spaces in the file, and its merges follow the token order, not the scores.
SP_STYLES = {"phi3": "prepend", "gemma2": "gemma", "gemma3": "gemma"}
#: T5's sentinels: the file names them ``[PAD32000]``...; the first 100 are ``<extra_id_99>`` ... ``_0``.
T5_SENTINELS = 100


def tokenizer_json(g: GGUFFile, arch: str) -> str | None:
    """The ``tokenizers`` JSON of the file's tokenizer (``tokenizer.ggml.model`` llama, gpt2 or t5),
    or None when the file has none."""
    kind = g.get("tokenizer.ggml.model", str, None)
    if kind is None:
        return None
    if kind not in TOKENIZER_MODELS:
        raise ConvertError(f"tokenizer.ggml.model={short(kind)} is not rebuilt by zoo", where="gguf:tokenizer.ggml.model",
                           options=list(TOKENIZER_MODELS), fix="pass tokenizer=False (zoo convert --no-tokenizer) "
                                                               "to convert the weights alone")
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    tokens = g.get("tokenizer.ggml.tokens", list)
    if not all(isinstance(s, str) for s in tokens):
        raise ConvertError("tokenizer.ggml.tokens must be strings", where="gguf:tokenizer.ggml.tokens",
                           fix="pass an intact GGUF file")
    types = g.get("tokenizer.ggml.token_type", list, [])
    merges = g.get("tokenizer.ggml.merges", list, None)
    control = [t for t, ty in zip(tokens, types) if ty == 3]  # CONTROL: <s>, <|im_end|>, ...
    # the tokens the file names (bos, eos, unk, pad) are special too, as transformers makes them:
    # "<unk>" in a text is the unknown token, not "<", "unk", ">"
    control += [t for t in special_names(g).values() if t not in control]
    user = [t for t, ty in zip(tokens, types) if ty == 4]  # USER_DEFINED: matched whole, not special
    if kind == "gpt2":  # byte-level BPE: every token spelled in GPT-2's printable byte alphabet
        spelling = byte_alphabet()
        alphabet = set(spelling.values())
        vocab = {t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8")): i
                 for i, t in enumerate(tokens)}
        control = [t for t in control if set(t) <= alphabet]  # a mislabelled one would grow the vocab
        tok = Tokenizer(models.BPE(vocab=vocab, merges=_merges(g, merges, tokens, vocab=vocab), dropout=None,
                                   continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
        split = PRE_SPLITS.get(g.get("tokenizer.ggml.pre", str, ""))
        if split is None:
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:  # split the text the way this vocabulary's merges were learned, then map to bytes
            tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                         pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                  use_regex=False)])
        tok.decoder = decoders.ByteLevel()
    elif kind == "t5":  # Unigram over whitespace-split, "▁"-prefixed words (T5Tokenizer's pipeline)
        scores = g.get("tokenizer.ggml.scores", list)
        if len(scores) != len(tokens) or not all(isinstance(x, (int, float)) for x in scores):
            raise ConvertError("a t5 tokenizer needs one numeric score per token", where="gguf:tokenizer.ggml.scores",
                               fix="pass an intact GGUF file")
        tokens = list(tokens)
        blanks = [i for i, t in enumerate(tokens) if re.fullmatch(r"\[PAD\d+\]", t)][:T5_SENTINELS]
        for k, i in enumerate(blanks):
            tokens[i] = f"<extra_id_{T5_SENTINELS - 1 - k}>"
            control.append(tokens[i])
        vocab = {t: i for i, t in enumerate(tokens)}
        unk = g.get("tokenizer.ggml.unknown_token_id", int, 2, lo=0)
        tok = Tokenizer(models.Unigram([(t, float(x)) for t, x in zip(tokens, scores)],
                                       unk_id=unk if unk < len(tokens) else None, byte_fallback=False))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)])
        tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    else:  # SentencePiece-style BPE over "▁"-joined words, unknown characters as <0xNN> bytes
        style = SP_STYLES.get(arch)
        order = None
        if style == "gemma":  # "  " is the token "▁▁"; the file's order is the merge order
            tokens = ["\u2581" * len(t) if " " in t and not t.strip() else t for t in tokens]
            order = [-float(i) for i in range(len(tokens))]
        vocab = {t: i for i, t in enumerate(tokens)}
        tok = Tokenizer(models.BPE(vocab=vocab, merges=_merges(g, merges, tokens, order, vocab), fuse_unk=True,
                                   byte_fallback=True, dropout=None))
        prefix = g.get("tokenizer.ggml.add_space_prefix", bool, style != "gemma")
        if style == "prepend":  # Phi-3 prepends the space in a normalizer ("  hi" -> "▁▁▁hi")
            tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
        elif style == "gemma":  # no prefix space: every space is a "▁", nothing is split off
            tok.normalizer = normalizers.Replace(" ", "\u2581")
            prefix = False
        else:
            tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", split=False,
                                                         prepend_scheme="first" if prefix else "never")
        steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
        tok.decoder = decoders.Sequence(steps + ([decoders.Strip(" ", 1, 0)] if prefix else []))
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in user if t in vocab])
    return tok.to_str()


#: ``tokenizer.ggml.pre`` -> the regex that splits text before byte-level BPE (as llama.cpp's
#: ``llama-vocab.cpp`` and transformers' GGUF tokenizer use).
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_SPLITS = {"llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT, "llama-bpe": _LLAMA3_SPLIT,
              "smaug-bpe": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT, "deepseek-r1-qwen": _QWEN2_SPLIT}


def byte_alphabet() -> dict[int, str]:
    """GPT-2's map from the 256 byte values to printable characters (printable Latin-1 bytes map
    to themselves, the others to U+0100 onwards), which byte-level vocabularies are spelled in."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def _merges(g: GGUFFile, merges, tokens: list[str], order: list[float] | None = None,
            vocab: dict[str, int] | None = None) -> list[tuple[str, str]]:
    """The file's merges, or -- a SentencePiece vocabulary lists none -- the merges its scores
    (or ``order``: Gemma's token order) imply: every split of a token into two tokens, best-scored
    token first (transformers' ``generate_merges``: one entry per distinct token).

    A listed merge must join two tokens of ``vocab`` (the vocabulary as the model spells it) into a
    third: the ``tokenizers`` library fails on anything else with a bare ``Exception`` or a Rust
    panic, so it is a ConvertError naming the merge first."""
    if merges is not None:
        known = vocab if vocab is not None else {t: i for i, t in enumerate(tokens)}
        out = []
        for i, m in enumerate(merges):
            parts = m.split(" ") if isinstance(m, str) else []
            if len(parts) != 2:
                raise ConvertError(f"merge {short(m)} is not two tokens separated by a space",
                                   where=f"gguf:tokenizer.ggml.merges[{i}]", fix="pass an intact GGUF file")
            missing = [p for p in (parts[0], parts[1], parts[0] + parts[1]) if p not in known]
            if missing:
                raise ConvertError(f"merge {short(m)} names {short(missing[0])}, which is not a token of "
                                   "the vocabulary (tokenizer.ggml.tokens)",
                                   where=f"gguf:tokenizer.ggml.merges[{i}]", fix="pass an intact GGUF file")
            out.append((parts[0], parts[1]))
        return out
    scores = order if order is not None else g.get("tokenizer.ggml.scores", list, None)
    if scores is None or len(scores) != len(tokens):
        raise ConvertError("a tokenizer without merges needs one score per token", where="gguf:tokenizer.ggml.scores",
                           fix="pass an intact GGUF file")
    vocab = {t: i for i, t in enumerate(tokens)}
    found = []
    for token, score in dict(zip(tokens, scores)).items():
        local = [(token[:k], token[k:], score) for k in range(1, len(token))
                 if token[:k] in vocab and token[k:] in vocab]
        found.extend(sorted(local, key=lambda x: (vocab[x[0]], vocab[x[1]])))
    found.sort(key=lambda x: (x[2], len(x[0]), len(x[1])), reverse=True)
    return [(a, b) for a, b, _ in found]


def file_type(g: GGUFFile) -> str | None:
    """The file's quantisation as llama.cpp names it (``general.file_type``: ``Q4_K_M``, ``Q4_1``,
    ``F16``...), or None when the file does not say (or says a number this gguf library lacks)."""
    from gguf import LlamaFileType

    n = g.get("general.file_type", int, None, lo=0)
    try:
        return None if n is None else LlamaFileType(n).name.removeprefix("MOSTLY_")
    except ValueError:
        return None


def special_names(g: GGUFFile) -> dict[str, str]:
    """``{"bos_token": "<s>", ...}`` from the ids the file names (for the ``hf`` tokenizer)."""
    tokens = g.meta.get("tokenizer.ggml.tokens") or []
    out = {}
    for name, key in (("bos_token", "bos_token_id"), ("eos_token", "eos_token_id"),
                      ("pad_token", "padding_token_id"), ("unk_token", "unknown_token_id")):
        i = g.get(f"tokenizer.ggml.{key}", int, None)
        if i is not None and 0 <= i < len(tokens):
            out[name] = tokens[i]
    return out


# ---------------------------------------------------------------------- the front door
def from_gguf(path: str | os.PathLike, *, dtype: Any = None, attention: str = "sdpa",
              tokenizer: bool = True, budget: Any = None, allow_nonfinite: bool = False) -> torch.nn.Module:
    """A zoo model from a GGUF file (see the module docstring): dequantised to ``dtype`` (default
    float32), the tokenizer as ``model.tokenizer`` and a chat template, when the file has one, as
    ``model.chat_template``.  ``model.convert_info`` lists the storage types met
    (``quant_types``: name -> tensor count).  Offline; transformers is not needed.

    ``budget`` (bytes; default: the memory available, see :mod:`zoo.guard.build_budget`): converting holds
    the dequantised tensors and the model at once, about twice the model's size in ``dtype``; a
    file that needs more is refused before anything is dequantised.  Tensors holding NaN or
    infinity (a damaged scale decodes to one) are refused unless ``allow_nonfinite``."""
    dt = resolve_dtype(dtype) or torch.float32
    g = GGUFFile(path)
    try:
        return _from_file(g, dt, attention, tokenizer, budget, allow_nonfinite)
    finally:
        g.close()


def _from_file(g: GGUFFile, dt, attention, tokenizer, budget, allow_nonfinite) -> torch.nn.Module:
    config, arch, permuted = hf_config(g)
    plan = tensor_plan(g, config, arch, permuted)
    back = {hf: f"gguf:{arch}.{k}" for k, hf in ARCHS[arch][1].items()}

    def _convert(state):
        try:
            return convert_state(config, state, attention=attention)
        except ConvertError as exc:  # name the GGUF key, not a config.json the user never had
            key = (exc.where or "").removeprefix("config.")
            if key in back or exc.where == "weights":
                raise ConvertError(exc.what, where=back.get(key, "gguf tensors"), options=exc.options,
                                   fix="check that the file is intact; " + (exc.fix or "")) from exc
            raise
    # shapes first, on the meta device: nothing is dequantised before the spec and tensors agree
    meta = {hf: torch.empty(shape, device="meta") for hf, (_, shape, _) in plan.items()}
    spec, st, _ = _convert(meta)
    check_shapes(spec, st)
    limit, why = resolve_budget(budget)
    need = 2 * sum(t.numel() for t in meta.values()) * torch.empty((), dtype=dt).element_size()
    if need > limit:
        raise ConvertError(f"dequantising this file needs about {need / 2**30:.1f} GiB (the tensors in "
                           f"{str(dt).replace('torch.', '')} and the model), more than the budget of "
                           f"{limit / 2**30:.1f} GiB ({why})", where=f"gguf:{Path(g.path).name}",
                           fix="pass dtype='bfloat16' (zoo convert --dtype bfloat16), a larger budget=, "
                               "or convert on a machine with more memory")
    # each tensor transformed in float32 (Gemma's stored 1 + w less 1 loses bits in bfloat16), then cast
    state = {hf: _apply([dequantize(g, n, torch.float32) for n in names], fn).to(dt)
             for hf, (names, _, fn) in plan.items()}
    nonfinite = sorted(plan[hf][0][0] for hf, t in state.items() if not bool(torch.isfinite(t).all()))
    if nonfinite and not allow_nonfinite:
        raise ConvertError(f"{len(nonfinite)} tensor(s) decode to NaN or infinity: {short(nonfinite)}",
                           where=f"gguf:{nonfinite[0]}",
                           fix="download the file again, or pass allow_nonfinite=True (zoo convert "
                               "--allow-nonfinite) to convert it as it is")
    spec, st, dropped = _convert(state)
    model = assemble(spec, st, dt)
    from gguf import GGMLQuantizationType

    counts: dict[str, int] = {}
    for t in g.tensors.values():
        q = GGMLQuantizationType(int(t.tensor_type)).name
        counts[q] = counts.get(q, 0) + 1
    model.convert_info = {"source": Path(g.path).name, "model_type": config["model_type"],
                          "architectures": [f"gguf:{arch}"], "dropped": dropped, "quant_types": counts,
                          "gguf_name": g.get("general.name", str, None), "file_type": file_type(g),
                          **({"nonfinite": nonfinite} if nonfinite else {})}
    if tokenizer:
        text = tokenizer_json(g, arch)
        if text is not None:
            model.tokenizer = make_tokenizer("hf", json=text, **special_names(g))
    template = g.get("tokenizer.chat_template", str, None)
    if template is not None:  # with the special-token strings a template reads (bos_token, ...)
        model.chat_template = {"template": template, "special_tokens": special_names(g)}
    return model

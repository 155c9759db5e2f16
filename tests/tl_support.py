"""The same random model in zoo and in TransformerLens 3.9 (tests of issues 26 and 32 import this).

transformers' model of a family, built from a config object (offline, never downloaded), goes into
zoo through ``zoo.convert.from_transformers`` and into TransformerLens' ``HookedTransformer``
through TL's own weight conversion.

- :func:`gpt2_pair`: the GPT-2 of issue 26 (transformers' default initialisation: LayerNorm weights
  1, biases 0); ``folded=True`` gives TL's processed form (LayerNorm weights folded into the next
  matrices, writing weights centred), which some TL analyses assume.
- :func:`tl_pair`: issue 32's agreement models, GPT-2-, Llama-, Gemma-, Gemma 2- and Mixtral-shaped,
  with *every* parameter random (``convert_cases.randomize``: norm weights ``1 + 0.2 N(0, 1)`` --
  Gemma's ``0.2 N(0, 1)`` around its ``1 + w`` --, biases and matrices ``N(0, σ)``), in float64, so
  a hook point recorded after a norm's weight instead of before it, or a bias left out, cannot hide
  behind a unit weight or a zero bias.  ``flags``: TransformerLens' optional hook points
  (``use_attn_in``, ``use_split_qkv_input``, ``use_hook_mlp_in``, ``use_hook_tokens``,
  ``use_attn_result``).
"""
from __future__ import annotations

import pytest
import torch

L, D, H, V, CTX = 2, 64, 4, 101, 48
#: the families of :func:`tl_pair`
FAMILIES = ("gpt2", "llama", "gemma", "gemma2", "mixtral")


def gpt2_pair(folded: bool = False, seed: int = 0, n_layer: int = L):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("transformer_lens", reason="pip install 'transformer-lens>=3.9,<4' (the test extra)")
    from transformer_lens import HookedTransformer, HookedTransformerConfig
    from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights

    from zoo.convert import from_transformers

    torch.manual_seed(seed)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=n_layer, n_embd=D, n_head=H, vocab_size=V, n_positions=CTX, bos_token_id=0,
        eos_token_id=0)).eval()
    cfg = HookedTransformerConfig(n_layers=n_layer, d_model=D, d_head=D // H, n_heads=H, d_mlp=4 * D,
                                  d_vocab=V, n_ctx=CTX, act_fn="gelu_new", normalization_type="LN",
                                  use_attn_result=True, default_prepend_bos=False)
    ht = HookedTransformer(cfg)
    sd = convert_gpt2_weights(hf, cfg)
    if folded:
        ht.load_and_process_state_dict(sd, fold_ln=True, center_writing_weights=True,
                                       center_unembed=False, fold_value_biases=False)
    else:
        ht.load_state_dict(sd, strict=False)
    return from_transformers(hf).eval(), ht.eval()


def _hf(family: str):
    """transformers' model of ``family``, every parameter random (float64)."""
    import convert_cases as cc

    if family == "gpt2":
        hf = cc.gpt2()  # 32 wide, 4 heads, learned positions
    elif family == "llama":
        hf = cc.llama(hidden_size=D, intermediate_size=96, max_position_embeddings=CTX)  # 4 heads, 2 kv heads
    elif family == "gemma":
        hf = cc.gemma(hidden_size=D, intermediate_size=96, max_position_embeddings=CTX)  # one kv head
    elif family == "gemma2":
        hf = cc.gemma2(hidden_size=D, intermediate_size=96, max_position_embeddings=CTX)
    elif family == "mixtral":
        hf = cc._decoder("MixtralForCausalLM", "MixtralConfig", hidden_size=D, intermediate_size=48,
                         max_position_embeddings=CTX, num_local_experts=4, num_experts_per_tok=2,
                         sliding_window=None)
    else:
        raise ValueError(family)
    return hf.double().eval()


def _tl_config(family: str, hf, **flags):
    from transformer_lens import HookedTransformerConfig

    c = hf.config
    heads, d = c.num_attention_heads if family != "gpt2" else c.n_head, c.hidden_size if family != "gpt2" else c.n_embd
    ctx = c.n_positions if family == "gpt2" else c.max_position_embeddings
    common = dict(n_layers=2, d_model=d, n_heads=heads, d_vocab=V, n_ctx=ctx, dtype=torch.float64,
                  default_prepend_bos=False, **flags)
    if family == "gpt2":
        return HookedTransformerConfig(d_head=d // heads, d_mlp=4 * d, act_fn="gelu_new",
                                       normalization_type="LN", eps=c.layer_norm_epsilon, **common)
    hd = getattr(c, "head_dim", None) or d // heads
    rope = dict(positional_embedding_type="rotary", rotary_dim=hd, rotary_adjacent_pairs=False,
                rotary_base=float(c.rope_parameters["rope_theta"]))
    if family == "llama":
        return HookedTransformerConfig(d_head=hd, d_mlp=c.intermediate_size, act_fn="silu", normalization_type="RMS",
                                       eps=c.rms_norm_eps, n_key_value_heads=c.num_key_value_heads, gated_mlp=True,
                                       final_rms=True, **rope, **common)
    if family == "mixtral":
        return HookedTransformerConfig(d_head=hd, d_mlp=c.intermediate_size, act_fn="silu", normalization_type="RMS",
                                       eps=c.rms_norm_eps, n_key_value_heads=c.num_key_value_heads, gated_mlp=True,
                                       num_experts=c.num_local_experts, experts_per_token=c.num_experts_per_tok,
                                       norm_topk_prob=True, final_rms=True, **rope, **common)
    gemma = dict(d_head=hd, d_mlp=c.intermediate_size, act_fn="gelu_pytorch_tanh", normalization_type="RMS",
                 eps=c.rms_norm_eps, n_key_value_heads=c.num_key_value_heads, gated_mlp=True, final_rms=True,
                 use_attn_scale=True, **rope, **common)
    if family == "gemma":
        return HookedTransformerConfig(**gemma)
    return HookedTransformerConfig(  # gemma2: sandwich norms, soft-caps, local / global layers
        attn_scale=float(c.query_pre_attn_scalar) ** 0.5, window_size=c.sliding_window, use_local_attn=True,
        attn_types=["local", "global"], attn_scores_soft_cap=float(c.attn_logit_softcapping),
        output_logits_soft_cap=float(c.final_logit_softcapping), use_normalization_before_and_after=True, **gemma)


def tl_pair(family: str, **flags):
    """``(zoo model, HookedTransformer)`` of one random ``family`` model (see the module docstring)."""
    pytest.importorskip("transformers")
    pytest.importorskip("transformer_lens", reason="pip install 'transformer-lens>=3.9,<4' (the test extra)")
    from transformer_lens import HookedTransformer
    from transformer_lens.pretrained import weight_conversions as wc

    from zoo.convert import from_transformers

    hf = _hf(family)
    cfg = _tl_config(family, hf, **flags)
    convert = {"gpt2": wc.convert_gpt2_weights, "llama": wc.convert_llama_weights, "gemma": wc.convert_gemma_weights,
               "gemma2": wc.convert_gemma_weights, "mixtral": wc.convert_mixtral_weights}[family]
    ht = HookedTransformer(cfg)
    ht.load_state_dict(convert(hf, cfg), strict=False)
    for t in list(ht.parameters()) + list(ht.buffers()):  # TL's MoE router is built in the default dtype
        if t.is_floating_point():
            t.data = t.data.to(torch.float64)
    z = from_transformers(hf, certify=False).double().eval()
    return z, ht.eval()

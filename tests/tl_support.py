"""One random GPT-2 in zoo and in TransformerLens 3.9 (tests of issue 26 import this).

transformers' ``GPT2LMHeadModel`` from a config (offline, random weights) goes into zoo through
``zoo.convert.from_transformers`` and into TransformerLens' ``HookedTransformer`` through its own
``convert_gpt2_weights``; ``folded=True`` gives TL's processed form (LayerNorm weights folded into
the next matrices, writing weights centred), which some TL analyses assume.
"""
from __future__ import annotations

import pytest
import torch

L, D, H, V, CTX = 2, 64, 4, 101, 48


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

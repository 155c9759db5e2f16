"""Interpretability on a latent-attention (MLA, DeepSeek-V2) model: its values are narrower than its
queries and keys (``v_head_dim`` 8 against 16 = 8 nope + 8 rope here), and its keys and values come
from a normalised latent.  Direct logit attribution and per-head writes read the value width from
``hook_z``; the direct-path patch, which needs q/k/v as one linear map of the normalised input,
refuses with a ZooError that names the alternatives."""
from __future__ import annotations

import pytest
import torch

import zoo
from zoo.inside.hooks import run_with_cache
from zoo.inside.lens import logit_attribution
from zoo.inside.patching import patch_direct_path, patch_heads

from convert_cases import deepseek_v2_small

T = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def pair():
    from zoo.convert import from_transformers

    hf = deepseek_v2_small()
    return hf, from_transformers(hf, certify=False)


def test_attribution_heads_add_up_to_transformers_attention_output(pair):
    hf, model = pair
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    outs = {}
    hooks = [layer.self_attn.register_forward_hook(lambda m, a, o, i=i: outs.__setitem__(i, o[0]))
             for i, layer in enumerate(hf.model.layers)]
    try:
        with torch.no_grad():
            hf(ids)
    finally:
        for h in hooks:
            h.remove()
    _, cache = run_with_cache(model, ids)
    for i in range(2):  # the attention output zoo's hooks see is transformers' o_proj output
        torch.testing.assert_close(cache[f"blocks.{i}.hook_attn_out"], outs[i], atol=1e-5, rtol=0)
        z = cache[f"blocks.{i}.attn.hook_z"]
        assert z.shape[-2:] == (4, 8)  # heads x v_head_dim, not the 16 features of q and k
    att = logit_attribution(model, ids, 5)
    for i in range(2):  # the heads' direct effects add up to the layer's (o_proj has no bias)
        torch.testing.assert_close(att.per_head[i].sum(0), att.per_layer[att.labels.index(f"{i}.attn")],
                                   atol=1e-4, rtol=0)
    assert att.per_head.abs().max() > 1e-2  # not a trivially zero decomposition
    assert patch_heads(model, ids, ids.flip(1), lambda lg: lg[:, -1, 5].sum()).shape == (2, 4)


def test_direct_path_refuses_latent_attention_by_name(pair):
    _, model = pair
    ids = torch.randint(0, 64, (1, 6))
    with pytest.raises(zoo.ZooError) as info:
        patch_direct_path(model, ids, ids.flip(1), lambda lg: lg[:, -1, 0].sum(), 0, 0)
    e = info.value
    assert e.where == "patch_direct_path" and "'mla'" in e.what and "patch_heads" in e.options and e.fix


@torch.no_grad()
def test_latent_attention_hook_points_mean_what_transformers_computes():
    """TransformerLens has no latent attention, so the DeepSeek-V2 model's points are checked against
    transformers itself, every weight random: the pattern equals its eager attention weights, the
    residual stream its hidden states, and ``ln1.hook_normalized`` times the norm's weight its
    ``input_layernorm`` output (the normalised stream *before* the weight, TL's meaning).  A hooked
    call sees the rebuilt heads (``hook_k (B, Tk, h, d_n + d_r)``), never the absorbed latents."""
    hf = deepseek_v2_small()
    hf.set_attn_implementation("eager")
    from zoo.convert import from_transformers

    model = from_transformers(hf, certify=False)
    ids = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    out = hf(ids, output_attentions=True, output_hidden_states=True)
    _, cache = run_with_cache(model, ids)
    for i, layer in enumerate(hf.model.layers):
        torch.testing.assert_close(cache[f"blocks.{i}.attn.hook_pattern"], out.attentions[i], atol=1e-6, rtol=0)
        torch.testing.assert_close(cache[f"blocks.{i}.hook_resid_pre"], out.hidden_states[i], atol=1e-5, rtol=0)
        normed = cache[f"blocks.{i}.ln1.hook_normalized"]
        torch.testing.assert_close(normed * layer.input_layernorm.weight, layer.input_layernorm(out.hidden_states[i]),
                                   atol=1e-5, rtol=0)
        assert (normed - layer.input_layernorm(out.hidden_states[i])).abs().max() > 1e-2  # the weight is not 1
        assert cache[f"blocks.{i}.attn.hook_k"].shape == (2, 9, 4, 16)

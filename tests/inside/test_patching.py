"""Activation, path and attribution patching (issue 26, goal 4), checked against TransformerLens
3.9's ``transformer_lens.patching`` and ``get_act_patch_direct_path`` on the same random GPT-2, and
attribution patching against real patching."""
from __future__ import annotations

import pytest
import torch

from zoo.errors import ZooError
from zoo.inside.patching import (attribution_patch, patch_direct_path, patch_heads, patch_heads_positions,
                          patch_layers_positions, patching_figure)

from tl_support import V, gpt2_pair

tlp = pytest.importorskip("transformer_lens.patching", reason="pip install 'transformer-lens>=3.9,<4'")


@pytest.fixture(scope="module")
def pair():
    return gpt2_pair()


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(5)
    clean = torch.randint(0, V, (2, 7), generator=g)
    corrupted = clean.clone()
    corrupted[:, 2] = (clean[:, 2] + 17) % V
    corrupted[:, 4] = (clean[:, 4] + 31) % V
    return clean, corrupted


def metric(logits):  # a logit difference at the last position, averaged over the batch
    return (logits[:, -1, 3] - logits[:, -1, 7]).mean()


def test_layers_positions_heads_and_by_position_match_transformer_lens(pair, prompts):
    zm, ht = pair
    clean, corrupted = prompts
    with torch.no_grad():
        _, clean_cache = ht.run_with_cache(clean)
        want_resid = tlp.get_act_patch_resid_pre(ht, corrupted, clean_cache, metric)
        want_mlp = tlp.get_act_patch_mlp_out(ht, corrupted, clean_cache, metric)
        want_heads = tlp.get_act_patch_attn_head_out_all_pos(ht, corrupted, clean_cache, metric)
        want_pattern = tlp.get_act_patch_attn_head_pattern_all_pos(ht, corrupted, clean_cache, metric)
        want_by_pos = tlp.get_act_patch_attn_head_out_by_pos(ht, corrupted, clean_cache, metric)
    torch.testing.assert_close(patch_layers_positions(zm, clean, corrupted, metric), want_resid, atol=1e-5, rtol=0)
    torch.testing.assert_close(patch_layers_positions(zm, clean, corrupted, metric, act="mlp_out"), want_mlp,
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(patch_heads(zm, clean, corrupted, metric), want_heads, atol=1e-5, rtol=0)
    torch.testing.assert_close(patch_heads(zm, clean, corrupted, metric, act="pattern"), want_pattern,
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(patch_heads_positions(zm, clean, corrupted, metric), want_by_pos, atol=1e-5, rtol=0)
    # patching everything at the first layer restores the clean metric exactly where nothing differs yet
    resid = patch_layers_positions(zm, clean, corrupted, metric)
    assert resid.abs().max() > 1e-3


@pytest.mark.parametrize("component", ["q", "k", "v"])
def test_direct_path_matches_transformer_lens(component, prompts):
    from transformer_lens.tools.analysis import get_act_patch_direct_path
    zm, ht = gpt2_pair(folded=True, n_layer=3)
    clean, corrupted = prompts
    with torch.no_grad():
        _, cc = ht.run_with_cache(clean)
        _, kc = ht.run_with_cache(corrupted)
        want = get_act_patch_direct_path(ht, corrupted, cc, kc, metric, 0, 1, component=component, verbose=False)
    ours = patch_direct_path(zm, clean, corrupted, metric, 0, 1, component=component)
    torch.testing.assert_close(ours, want.float().cpu(), atol=1e-5, rtol=0)
    assert ours[1:].abs().max() > 0 and (ours[0] == 0).all()


def test_attribution_patching_approximates_real_patching(pair, prompts):
    zm, _ = pair
    clean, corrupted = prompts
    with torch.no_grad():
        base = float(metric(zm(corrupted)))
    real = patch_heads_positions(zm, clean, corrupted, metric) - base  # (L, T, H)
    approx = attribution_patch(zm, clean, corrupted, metric, act="z")  # (L, T, H)
    assert approx.shape == real.shape
    r = torch.corrcoef(torch.stack([real.flatten(), approx.flatten()]))[0, 1]
    assert r > 0.95, r
    real_resid = patch_layers_positions(zm, clean, corrupted, metric) - base
    approx_resid = attribution_patch(zm, clean, corrupted, metric, act="resid_pre")
    r2 = torch.corrcoef(torch.stack([real_resid.flatten(), approx_resid.flatten()]))[0, 1]
    assert r2 > 0.9, r2


def test_figure_and_errors(pair, prompts):
    zm, _ = pair
    clean, corrupted = prompts
    fig = patching_figure(torch.randn(2, 7), title="t")
    assert fig.axes[0].get_title() == "t"
    with pytest.raises(ZooError, match="resid_pre"):
        patch_layers_positions(zm, clean, corrupted, metric, act="resid")
    with pytest.raises(ZooError, match="shape"):
        patch_heads(zm, clean, corrupted[:, :5], metric)

"""Logit lens, direct logit attribution and head scores (issue 26, goal 5), checked against
TransformerLens 3.9's own code on the same random GPT-2 (tests/tl_support.py)."""
from __future__ import annotations

import pytest
import torch

from zoo.errors import ZooError
from zoo.inside.lens import (detection_pattern, head_scores, in_context_loss, induction_score, logit_attribution,
                      logit_lens, repeated_tokens)

from tl_support import V, gpt2_pair

hd = pytest.importorskip("transformer_lens.head_detector",
                         reason="pip install 'transformer-lens>=3.9,<4' (the test extra)")


@pytest.fixture(scope="module")
def pair():
    return gpt2_pair()


@pytest.fixture(scope="module")
def folded():
    return gpt2_pair(folded=True)


@pytest.fixture(scope="module")
def ids():
    g = torch.Generator().manual_seed(3)
    half = torch.randint(0, V, (2, 8), generator=g)
    return torch.cat([half, half[:, :5]], 1)  # repeats: duplicate and induction patterns are non-empty


def test_logit_lens_reads_each_layer_through_the_final_norm(pair, ids):
    zm, ht = pair
    lens = logit_lens(zm, ids, top_k=3)
    with torch.no_grad():
        torch.testing.assert_close(lens.logits[-1], zm(ids), atol=1e-5, rtol=0)
        _, cache = ht.run_with_cache(ids)
        for i in range(2):
            want = ht.unembed(ht.ln_final(cache[f"blocks.{i}.hook_resid_post"]))
            torch.testing.assert_close(lens.logits[i + 1], want, atol=1e-5, rtol=0)
        want0 = ht.unembed(ht.ln_final(cache["blocks.0.hook_resid_pre"]))
    torch.testing.assert_close(lens.logits[0], want0, atol=1e-5, rtol=0)
    assert lens.top_ids.shape == (3, 2, ids.size(1), 3)
    assert (lens.final_rank[-1] == 0).all()
    assert torch.equal(lens.top_ids[..., 0], lens.logits.argmax(-1))


def test_direct_logit_attribution_matches_transformer_lens_and_adds_up(folded, ids):
    zm, ht = folded
    tok = ids[:, 1:].clone()
    tok = torch.cat([tok, tok[:, :1]], 1)  # one target token per position
    att = logit_attribution(zm, ids, tok)
    # the identity: components + biases = the logit
    torch.testing.assert_close(att.per_layer.sum(0) + att.bias, att.logit, atol=1e-4, rtol=0)
    # the head terms add up to the attention layer's term minus its output bias's
    with torch.no_grad():
        _, cache = ht.run_with_cache(ids)
        resid, labels = cache.decompose_resid(apply_ln=True, return_labels=True)  # (C, B, T, D)
        W = ht.W_U[:, tok]  # (D, B, T)
        tl_terms = torch.einsum("cbtd,dbt->cbt", resid, W)
        heads = cache.stack_head_results(layer=-1, apply_ln=True)  # (L*H, B, T, D)
        tl_heads = torch.einsum("kbtd,dbt->kbt", heads, W).view(2, 4, *tok.shape)
    assert labels == ["embed", "pos_embed", "0_attn_out", "0_mlp_out", "1_attn_out", "1_mlp_out"]
    assert att.labels == ["embed", "pos_embed", "0.attn", "0.mlp", "1.attn", "1.mlp"]
    torch.testing.assert_close(att.per_layer, tl_terms, atol=1e-4, rtol=0)
    torch.testing.assert_close(att.per_head, tl_heads, atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind", ["previous_token", "duplicate_token", "induction"])
@pytest.mark.parametrize("exclude", [False, True])
def test_head_scores_are_transformer_lens_detect_head(pair, ids, kind, exclude):
    zm, ht = pair
    ours = head_scores(zm, ids, kind, exclude_bos=exclude, exclude_current_token=exclude)
    with torch.no_grad():
        _, cache = ht.run_with_cache(ids)
    want = torch.zeros(2, 2, 4)
    for b in range(2):
        det = getattr(hd, f"get_{kind}_head_detection_pattern")(ids[b:b + 1])
        torch.testing.assert_close(detection_pattern(kind, ids[b]), det.float())
        for layer in range(2):
            for h in range(4):
                want[b, layer, h] = hd.compute_head_attention_similarity_score(
                    cache["pattern", layer][b, h], det, exclude_bos=exclude,
                    exclude_current_token=exclude, error_measure="mul")
    torch.testing.assert_close(ours, want.mean(0), atol=1e-5, rtol=0)


def test_induction_score_and_in_context_loss_shapes_and_values(pair):
    zm, ht = pair
    ids = repeated_tokens(V, 10, batch=3)
    assert torch.equal(ids[:, :10], ids[:, 10:])
    s = induction_score(zm, length=10, batch=3)
    with torch.no_grad():
        _, cache = ht.run_with_cache(ids)
    want = torch.stack([cache["pattern", i].diagonal(-9, -2, -1).mean((0, -1)) for i in range(2)])
    torch.testing.assert_close(s, want, atol=1e-6, rtol=0)
    loss = in_context_loss(zm, ids)
    assert loss.shape == (19,) and torch.isfinite(loss).all()


def test_bad_kind_is_a_zoo_error(pair, ids):
    with pytest.raises(ZooError, match="previous_token"):
        head_scores(pair[0], ids, "induktion")

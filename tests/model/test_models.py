"""Behaviour of the assembled architectures: causality, prefix LM, padding, permutation symmetry."""
import pytest
import torch

import zoo

from helpers import tiny


def _model(arch="decoder", **over):
    return zoo.build(tiny(arch, **over), seed=0).eval()


@pytest.mark.parametrize("attention", ["sdpa", "eager", "naive"])
def test_decoder_is_causal(attention):
    model = _model(attention=attention)
    ids = torch.randint(1, 61, (2, 10))
    later = ids.clone()
    later[:, 6:] = torch.randint(1, 61, (2, 4))
    a, b = model(ids), model(later)
    assert torch.allclose(a[:, :6], b[:, :6], atol=1e-6)  # the past never sees the future
    assert (a[:, 6:] - b[:, 6:]).abs().max() > 1e-3


def test_prefix_lm_prefix_sees_itself_both_ways():
    model = zoo.build("prefix_lm_tiny", seed=0, num_layers=2).eval()  # prefix length 8
    ids = torch.randint(1, 512, (1, 12))
    changed = ids.clone()
    changed[0, 5] = (ids[0, 5] + 1) % 512  # inside the prefix
    a, b = model(ids), model(changed)
    assert (a[0, 2] - b[0, 2]).abs().max() > 1e-4  # an earlier prefix position sees a later one
    changed2 = ids.clone()
    changed2[0, 10] = (ids[0, 10] + 1) % 512  # after the prefix: still causal
    c = model(changed2)
    assert torch.allclose(a[0, :10], c[0, :10], atol=1e-6)


def test_prefix_lengths_per_sample():
    model = zoo.build("prefix_lm_tiny", seed=0, num_layers=2).eval()
    ids = torch.randint(1, 512, (2, 10))
    changed = ids.clone()
    changed[:, 4] = (ids[:, 4] + 1) % 512
    plen = torch.tensor([6, 2])
    a = model(ids, prefix_lengths=plen)
    b = model(changed, prefix_lengths=plen)
    assert (a[0, 1] - b[0, 1]).abs().max() > 1e-4  # row 0: position 4 is in its prefix of 6
    assert torch.allclose(a[1, :4], b[1, :4], atol=1e-6)  # row 1: prefix 2, position 4 is future


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned"])
def test_padding_invariance(arch, positions):
    """A sequence gives the same outputs alone and right-padded inside a batch."""
    model = _model(arch, positions=positions, pad_id=0)
    seq = torch.randint(1, 61, (1, 6))
    batch = torch.zeros(2, 9, dtype=torch.long)
    batch[0, :6] = seq
    batch[1] = torch.randint(1, 61, (9,))
    alone, padded = model(seq), model(batch)
    assert torch.allclose(alone[0], padded[0, :6], atol=1e-5)


def test_left_padding_with_attention_mask():
    model = _model("decoder", positions="learned")
    seq = torch.randint(1, 61, (1, 5))
    batch = torch.cat([torch.full((1, 3), 7), seq], dim=1)  # left-padded with a real-looking id
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1]])
    assert torch.allclose(model(seq)[0], model(batch, attention_mask=mask)[0, 3:], atol=1e-5)


def test_encoder_decoder_source_padding_invariance():
    model = zoo.build("t5_tiny", seed=0).eval()  # pad_id 0
    src = torch.randint(1, 512, (1, 6))
    tgt = torch.randint(1, 512, (1, 4))
    src_padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    assert torch.allclose(model(src, tgt), model(src_padded, tgt), atol=1e-5)


def test_permutation_equivariance_without_positions():
    model = _model("encoder", positions="none", head="none")
    ids = torch.randint(1, 61, (1, 8))
    perm = torch.randperm(8)
    out, out_perm = model(ids), model(ids[:, perm])
    assert torch.allclose(out[:, perm], out_perm, atol=1e-5)
    with_pos = _model("encoder", positions="sinusoidal", head="none")
    assert not torch.allclose(with_pos(ids)[:, perm], with_pos(ids[:, perm]), atol=1e-3)


def test_no_nan_with_fully_padded_row():
    model = _model("encoder", pad_id=0)
    ids = torch.randint(1, 61, (2, 5))
    ids[1] = 0  # an all-padding row: every query row fully masked
    out = model(ids)
    assert not torch.isnan(out).any()


def test_batchnorm_couples_samples_layernorm_does_not():
    """Seed: BatchNorm's statistics run across the batch, LayerNorm's across one token's features."""
    a = torch.randint(1, 61, (1, 6))
    other1, other2 = torch.randint(1, 61, (1, 6)), torch.randint(1, 61, (1, 6))
    for norm, coupled in (("batchnorm", True), ("layernorm", False)):
        model = zoo.build(tiny(norm={"kind": norm}), seed=0).train()  # training mode: batch stats
        out1 = model(torch.cat([a, other1]))[0]
        out2 = model(torch.cat([a, other2]))[0]
        differs = (out1 - out2).abs().max() > 1e-4
        assert differs == coupled, norm
    bn = zoo.build(tiny(norm={"kind": "batchnorm"}), seed=0)
    bn.train()(torch.cat([a, other1]))
    bn.eval()  # eval mode uses running statistics: the batch no longer matters
    assert torch.allclose(bn(torch.cat([a, other1]))[0], bn(torch.cat([a, other2]))[0], atol=1e-6)


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_pre_and_post_norm_differ_and_final_norm(placement):
    model = _model(norm={"kind": "layernorm", "placement": placement})
    has_final = not isinstance(model.decoder.final_norm, torch.nn.Identity)
    assert has_final == (placement == "pre")
    out = model(torch.randint(1, 61, (1, 5)), return_hidden=True)
    if placement == "post":  # the residual stream leaves the last block normalised
        assert torch.allclose(out.mean(-1), torch.zeros(1, 5), atol=1e-5)


def test_classifier_poolings():
    ids = torch.randint(1, 61, (3, 7))
    ids[2, 4:] = 0
    outs = {}
    for pooling in ("mean", "cls", "max"):
        m = _model("encoder", pad_id=0, head={"kind": "classifier", "num_labels": 3, "pooling": pooling})
        outs[pooling] = m(ids)
        assert outs[pooling].shape == (3, 3)
        # padding invariance of pooled outputs
        assert torch.allclose(m(ids[2:3, :4])[0], outs[pooling][2], atol=1e-5)
    assert not torch.allclose(outs["mean"], outs["max"])


def test_seed_gives_identical_weights_and_leaves_global_rng():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = zoo.build("gpt_tiny", seed=7)
    after = torch.rand(1)
    assert torch.equal(before, after)  # the global RNG was not consumed
    b = zoo.build("gpt_tiny", seed=7)
    c = zoo.build("gpt_tiny", seed=8)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["tok_emb.weight"], sc["tok_emb.weight"])


def test_weight_tying_on_and_off():
    tied = _model(tie_embeddings=True)
    untied = _model(tie_embeddings=False)
    assert tied.lm_head.weight is tied.tok_emb.weight
    assert untied.lm_head.weight is not untied.tok_emb.weight
    assert untied.num_parameters() - tied.num_parameters() == 61 * 16


def test_embedding_scaling():
    on = _model(scale_embeddings=True, positions="none")
    off = zoo.build(tiny(scale_embeddings=False, positions="none"), seed=0).eval()
    ids = torch.randint(1, 61, (1, 3))
    assert torch.allclose(on.embed(ids, None, on.tok_emb, on.decoder.positions),
                          off.embed(ids, None, off.tok_emb, off.decoder.positions) * 4.0)  # sqrt(16)


def test_max_len_exceeded_is_a_clear_error():
    model = _model()
    with pytest.raises(zoo.ZooError, match="max_len"):
        model(torch.randint(1, 61, (1, 40)))


def test_seq2seq_padding_keywords_and_their_old_names():
    """``src_padding`` / ``tgt_padding`` are padding masks (1 = real token); the old names
    ``src_mask`` / ``tgt_mask`` (a trap: nn.Transformer's tgt_mask is the causal mask) still work
    with a DeprecationWarning, and give the same logits."""
    model = zoo.build(tiny("encoder_decoder"), seed=0).eval()
    src, tgt = torch.randint(3, 61, (2, 5)), torch.randint(3, 61, (2, 4))
    sp = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    tp = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    new = model(src, tgt, src_padding=sp, tgt_padding=tp)
    with pytest.warns(DeprecationWarning, match="src_mask= is deprecated, use src_padding="):
        old = model(src, tgt, src_mask=sp, tgt_mask=tp)
    torch.testing.assert_close(old, new, rtol=0, atol=0)
    # padding really is padding: the padded source tokens change nothing
    other = src.clone()
    other[0, 3:] = 7
    torch.testing.assert_close(model(other, tgt, src_padding=sp, tgt_padding=tp)[0], new[0])
    with pytest.raises(TypeError, match="unexpected keyword argument 'memory_mask'"):
        model(src, tgt, memory_mask=sp)


def test_meta_build_keeps_tied_embeddings():
    """A meta-device build (used by zoo.load and the converter's shape check) must tie the LM head to
    the embedding as a real build does; CPU -> meta conversion makes new Parameters and would untie."""
    meta = zoo.build("gpt_tiny", device="meta", init=False)
    real = zoo.build("gpt_tiny", seed=0)
    assert meta.lm_head.weight is meta.tok_emb.weight
    assert sum(p.numel() for p in meta.parameters()) == sum(p.numel() for p in real.parameters())

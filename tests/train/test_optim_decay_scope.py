"""``train.weight_decay_scope``: which parameters AdamW decays (zoo/train/optim.py).

The default (``matrices``) keeps GPT-2 practice: only the weight matrices of linear layers decay.
``all`` decays every trainable parameter, embeddings, norms and biases included, as
``torch.optim.AdamW(model.parameters())`` does in the grokking papers."""
from __future__ import annotations

import pytest
import torch

import zoo
from zoo.errors import ZooError
from zoo.train.config import WEIGHT_DECAY_SCOPES, TrainConfig
from zoo.train.optim import make_optimizer

SPEC = dict(arch="decoder", vocab_size=11, max_len=8, d_model=16, num_layers=1, num_heads=2, d_ff=32,
            positions="learned", tie_embeddings=False)


def _model(**over):
    return zoo.build({**SPEC, **over}, seed=0)


def _groups(model, cfg):
    """``[(weight_decay, {parameter names})]`` of the optimizer's groups, names from the model."""
    names = {id(p): n for n, p in model.named_parameters()}
    return [(g["weight_decay"], {names[id(p)] for p in g["params"]})
            for g in make_optimizer(model, cfg).param_groups]


def test_default_scope_decays_matrices_only():
    model = _model()
    assert TrainConfig().weight_decay_scope == "matrices"
    (wd, decayed), (wd0, plain) = _groups(model, TrainConfig(weight_decay=0.5))
    assert (wd, wd0) == (0.5, 0.0)
    every = {n for n, _ in model.named_parameters()}
    assert decayed | plain == every and not decayed & plain
    params = dict(model.named_parameters())
    # decayed: linear weights (2-d, not an embedding); not decayed: embeddings, norms, biases
    assert decayed == {n for n in every if params[n].ndim == 2 and "emb" not in n and "norm" not in n}
    assert any("emb" in n for n in plain) and any("norm" in n for n in plain)
    assert decayed  # the attention and MLP matrices


def test_all_scope_decays_every_parameter_once():
    model = _model()
    groups = _groups(model, TrainConfig(weight_decay=1.0, weight_decay_scope="all"))
    (wd, decayed), (wd0, plain) = groups
    assert wd == 1.0 and wd0 == 0.0 and plain == set()
    assert decayed == {n for n, _ in model.named_parameters()}
    assert any("emb" in n for n in decayed) and any("norm" in n for n in decayed)


def test_all_scope_tied_and_frozen_parameters():
    model = _model(tie_embeddings=True)
    frozen = next(n for n, p in model.named_parameters() if p.ndim == 2 and "emb" not in n)
    dict(model.named_parameters())[frozen].requires_grad_(False)
    opt = make_optimizer(model, TrainConfig(weight_decay=1.0, weight_decay_scope="all"))
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids))  # a tied matrix appears once
    trainable = {id(p) for p in model.parameters() if p.requires_grad}
    assert set(ids) == trainable  # frozen left out, every other one in


@pytest.mark.parametrize("scope, embedding_shrinks", [("matrices", False), ("all", True)])
def test_embedding_decay_is_applied_by_a_step(scope, embedding_shrinks):
    """With a zero gradient Adam's update is 0, so one step leaves exactly the decoupled decay:
    p <- p * (1 - lr * weight_decay) on decayed parameters, p unchanged on the others."""
    model = _model()
    emb = next(p for n, p in model.named_parameters() if "emb" in n)
    before = emb.detach().clone()
    opt = make_optimizer(model, TrainConfig(lr=0.1, weight_decay=2.0, weight_decay_scope=scope))
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    want = before * (1 - 0.1 * 2.0) if embedding_shrinks else before
    torch.testing.assert_close(emb.detach(), want, rtol=1e-6, atol=1e-7)
    assert not torch.equal(before, before * 0.8)  # the two outcomes differ (non-zero weights)


@pytest.mark.parametrize("bad", ["embeddings", "", None, 1])
def test_bad_scope_is_a_zoo_error_naming_the_field(bad):
    with pytest.raises(ZooError) as e:
        TrainConfig(weight_decay_scope=bad).validate()
    msg = str(e.value)
    assert "train.weight_decay_scope" in msg
    assert all(o in msg for o in WEIGHT_DECAY_SCOPES)

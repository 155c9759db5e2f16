"""The output check is silent on a healthy forward (issue 34): checking a plugin's output while
autograd records (a training step) reads a value of the graph back, and must not warn
``Converting a tensor with requires_grad=True to a scalar`` once per component and shape."""
from __future__ import annotations

import warnings

import torch

import zoo
from zoo.guard import outputs as output_contract


def test_checking_every_component_of_a_training_forward_warns_nothing():
    model = zoo.build("gpt_tiny", num_layers=2, d_model=32, num_heads=4, d_ff=64, vocab_size=64,
                      seed=0).train()
    ids = torch.randint(0, 64, (2, 7))
    with output_contract.checking(model, "all") as wrappers, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loss = model(ids).float().logsumexp(-1).mean()
        loss.backward()
    assert wrappers, "the check wrapped no component"
    assert {w.family for w in wrappers} >= {"attention", "norm", "ffn"}
    assert [str(w.message) for w in seen] == []
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)  # a real backward

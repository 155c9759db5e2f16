"""zoo.model.assembly: the one place a model object comes into being (construct, build on meta, fill,
probe).  Loading (zoo.load) and conversion (zoo.convert) both go through :func:`fill`."""
from __future__ import annotations

import pytest
import torch

import zoo
from zoo.model.assembly import SkipRandomInit, fill, on_meta, probe_attention
from zoo.components import AttentionKernel, BuildContext


class _Halves(AttentionKernel):
    """Breaks the kernel contract: returns half of each head's features."""

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        return q[..., : q.size(-1) // 2], None


def test_probe_skips_a_layer_on_meta_and_still_probes_the_others():
    """trust.probe_attention had ``return`` where ``continue`` was meant: one layer whose weights
    sit on the meta device stopped the probe, so a broken kernel in a later layer went unseen."""
    model = zoo.build("gpt_tiny", num_layers=2, attention="eager")
    blocks = model.decoder.blocks
    for b in blocks:
        b.attn.kernel = _Halves(None, BuildContext.for_heads(4, 32))
    probe_attention(blocks[0].attn.to("meta"))  # nothing to run: no error
    with pytest.raises(zoo.PluginError, match="_Halves returns output of shape"):
        probe_attention(model)  # layer 0 is on meta now; layer 1 is real and broken


def test_on_meta_then_fill_gives_the_saved_model_back(tmp_path):
    src = zoo.build("gpt_tiny", num_layers=1, seed=3).eval()
    model = on_meta(src.spec)
    assert all(p.is_meta for p in model.parameters())
    assert model.lm_head.weight is model.tok_emb.weight  # tied again after the move to meta
    state = {k: v.clone() for k, v in src.state_dict().items() if k != "lm_head.weight"}
    fill(model, state, torch.device("cpu"))
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    assert model.lm_head.weight is model.tok_emb.weight
    ids = torch.randint(0, src.spec.vocab_size, (2, 7))
    torch.testing.assert_close(model.eval()(ids), src(ids), rtol=0, atol=0)


def test_skip_random_init_leaves_initialisers_undone():
    with SkipRandomInit():
        t = torch.zeros(4)
        torch.nn.init.normal_(t)
        t.uniform_()
    assert bool((t == 0).all())

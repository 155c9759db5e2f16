"""Name-for-name agreement with TransformerLens 3.9 (issue 26, goal 2).

One random GPT-2 (transformers' ``GPT2LMHeadModel`` from a config, offline) goes two ways: into zoo
through ``zoo.convert.from_transformers`` and into TransformerLens' ``HookedTransformer`` through its
own ``convert_gpt2_weights``.  Both run the same tokens with every activation cached; every name
TransformerLens caches must exist in zoo's cache under the same name (the table in docs/INTERP.md)
and hold the same tensor within 1e-5 (float32).  Hooks must act alike too: the same edit in both
gives the same logits.
"""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
tl = pytest.importorskip("transformer_lens", reason="pip install 'transformer-lens>=3.9,<4' (the test extra)")

from transformer_lens import HookedTransformer, HookedTransformerConfig  # noqa: E402
from transformer_lens.pretrained.weight_conversions import convert_gpt2_weights  # noqa: E402

from zoo.convert import from_transformers  # noqa: E402

L, D, H, V, CTX = 2, 64, 4, 101, 32
TOL = 1e-5
#: zoo names with no TransformerLens counterpart on GPT-2 (q/k after the rotary step: no rotary)
ZOO_ONLY = {"hook_rot_q", "hook_rot_k"}


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=L, n_embd=D, n_head=H, vocab_size=V, n_positions=CTX, bos_token_id=0,
        eos_token_id=0)).eval()
    cfg = HookedTransformerConfig(n_layers=L, d_model=D, d_head=D // H, n_heads=H, d_mlp=4 * D,
                                  d_vocab=V, n_ctx=CTX, act_fn="gelu_new", normalization_type="LN",
                                  use_attn_result=True, default_prepend_bos=False)
    ht = HookedTransformer(cfg)
    ht.load_state_dict(convert_gpt2_weights(hf, cfg), strict=False)
    ht.eval()
    return from_transformers(hf).eval(), ht


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, V, (3, 11), generator=torch.Generator().manual_seed(1))


def test_every_transformer_lens_name_exists_and_agrees(pair, ids):
    zm, ht = pair
    with torch.no_grad():
        z_logits, z_cache = zm.run_with_cache(ids)
        t_logits, t_cache = ht.run_with_cache(ids)
    torch.testing.assert_close(z_logits, t_logits, atol=TOL, rtol=0)
    missing = [n for n in t_cache.keys() if n not in z_cache]
    assert not missing, f"TransformerLens names zoo lacks: {missing}"
    worst = {}
    for name in t_cache.keys():
        a, b = z_cache[name], t_cache[name]
        assert a.shape == b.shape, (name, a.shape, b.shape)
        torch.testing.assert_close(a, b, atol=TOL, rtol=0, msg=lambda m, n=name: f"{n}: {m}")
        fin = torch.isfinite(b)
        assert torch.equal(fin, torch.isfinite(a)), name  # -inf exactly where TL masks
        worst[name] = float((a[fin] - b[fin]).abs().max())
    extra = {n.rsplit(".", 1)[-1] for n in z_cache if n not in t_cache.keys()}
    assert extra <= ZOO_ONLY, extra
    assert len(worst) == len(list(t_cache.keys())) >= 40


@pytest.mark.parametrize("name,edit", [
    ("blocks.0.attn.hook_z", lambda x: x * torch.tensor([1.0, 0.0, 1.0, 0.5])[:, None]),
    ("blocks.1.hook_resid_mid", lambda x: x + torch.linspace(-1, 1, D)),  # a shift LN keeps
    ("blocks.0.attn.hook_pattern", lambda x: x.flip(-1)),
    ("blocks.1.attn.hook_attn_scores", lambda x: x * 0.5),
    ("blocks.0.mlp.hook_post", lambda x: x.relu()),
    ("blocks.1.attn.hook_result", lambda x: x[:, :, [1, 1, 3, 3]]),
    ("hook_pos_embed", lambda x: x * 2),
    ("blocks.1.ln2.hook_normalized", lambda x: -x),
])
def test_the_same_edit_gives_the_same_logits(pair, ids, name, edit):
    zm, ht = pair
    fn = lambda x, hook: edit(x)  # noqa: E731
    with torch.no_grad():
        plain = zm(ids)
        a = zm.run_with_hooks(ids, fwd_hooks=[(name, fn)])
        b = ht.run_with_hooks(ids, fwd_hooks=[(name, fn)])
    torch.testing.assert_close(a, b, atol=TOL, rtol=0)
    assert (a - plain).abs().max() > 1e-3  # the edit did something

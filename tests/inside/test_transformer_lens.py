"""Name-for-name agreement with TransformerLens 3.9 (issue 26, goal 2; issue 32, goal 2).

The same random model goes into zoo (``zoo.convert.from_transformers``) and into TransformerLens'
``HookedTransformer`` (TL's own weight conversion), see ``tests/tl_support.py``: GPT-2, Llama,
Gemma, Gemma 2 and Mixtral shapes, *every* parameter random (norm weights and biases included),
float64.  Both run the same tokens with every activation cached: every name TL caches must exist in
zoo's cache under the same name, hold the same quantity (-inf exactly where TL's scores have it) and
the same edit in both must give the same logits -- with TL's optional points switched on
(``use_hook_tokens``, ``use_hook_mlp_in``, ``use_attn_result``, and in their own runs, since they
change what ``ln1`` sees, ``use_split_qkv_input`` and ``use_attn_in``).

Tolerances: 1e-12 for GPT-2 (LayerNorm in float64 on both sides); 2e-5 for the RMSNorm families,
whose norm zoo computes in float32 as transformers does, where TL stays in float64.
"""
from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
tl = pytest.importorskip("transformer_lens", reason="pip install 'transformer-lens>=3.9,<4' (the test extra)")

from tl_support import FAMILIES, V, gpt2_pair, tl_pair  # noqa: E402

TOL = {"gpt2": 1e-12, "llama": 2e-5, "gemma": 2e-5, "gemma2": 2e-5, "mixtral": 2e-5}
OPTIONAL = dict(use_hook_tokens=True, use_hook_mlp_in=True, use_attn_result=True)
#: the runs: TL flags, and the zoo names filter that asks for the same points
RUNS = {
    "default": (OPTIONAL, None),
    "split_qkv": ({**OPTIONAL, "use_split_qkv_input": True}, lambda n: not n.endswith("hook_attn_in")),
    "attn_in": ({**OPTIONAL, "use_attn_in": True}, lambda n: not n.endswith(("q_input", "k_input", "v_input"))),
}
#: zoo names TL has no counterpart for: q/k as the kernel sees them, on a model without rotary
ZOO_ONLY = {"gpt2": {"hook_rot_q", "hook_rot_k"}}
#: TL points zoo does not provide: Mixtral's per-expert MLP points (zoo runs the experts as one
#: grouped matmul; it shows the router instead, hook_expert_weights / hook_expert_indices)
TL_ONLY = {"mixtral": ".mlp.experts."}
#: zoo shows the router per position (B, T, ·) where TL flattens it to (B·T, ·)
FLATTENED_IN_TL = ("hook_expert_weights", "hook_expert_indices")

_PAIRS: dict = {}


def pair(family: str, run: str = "default"):
    if (family, run) not in _PAIRS:
        _PAIRS[family, run] = tl_pair(family, **RUNS[run][0])
    return _PAIRS[family, run]


def ids(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (3, 11), generator=torch.Generator().manual_seed(seed))


def both_caches(family: str, run: str):
    zm, ht = pair(family, run)
    with torch.no_grad():
        z_logits, z_cache = zm.run_with_cache(ids(), names_filter=RUNS[run][1])
        t_logits, t_cache = ht.run_with_cache(ids())
    return z_logits, z_cache, t_logits, t_cache


def agreement(family: str, run: str) -> dict[str, float]:
    """``TL name -> max |zoo - TL|``, after checking names, shapes and the -inf pattern."""
    z_logits, z_cache, t_logits, t_cache = both_caches(family, run)
    torch.testing.assert_close(z_logits, t_logits, atol=TOL[family], rtol=0)
    skip = TL_ONLY.get(family)
    missing = [n for n in t_cache.keys() if n not in z_cache and not (skip and skip in n)]
    assert not missing, f"TransformerLens names zoo lacks: {missing}"
    worst = {}
    for name in t_cache.keys():
        if name not in z_cache:
            continue
        a, b = z_cache[name], t_cache[name]
        if name.endswith(FLATTENED_IN_TL):
            assert a.shape[:2] == (3, 11) and a.flatten(0, 1).shape == b.shape, (name, a.shape, b.shape)
            a = a.flatten(0, 1)
        assert a.shape == b.shape, (name, a.shape, b.shape)
        fin = torch.isfinite(b)
        assert torch.equal(fin, torch.isfinite(a)), name  # -inf exactly where TL masks
        torch.testing.assert_close(a.to(b.dtype), b, atol=TOL[family], rtol=0, msg=lambda m, n=name: f"{n}: {m}")
        worst[name] = float((a[fin].double() - b[fin].double()).abs().max()) if fin.any() else 0.0
    extra = {n.rsplit(".", 1)[-1] for n in z_cache if n not in t_cache.keys()}
    assert extra <= ZOO_ONLY.get(family, set()), extra
    return worst


@pytest.mark.parametrize("family", FAMILIES)
def test_every_transformer_lens_name_exists_and_agrees_on_random_parameters(family):
    worst = agreement(family, "default")
    for point in ("hook_tokens", "blocks.0.hook_mlp_in", "blocks.1.ln1.hook_scale", "blocks.1.ln1.hook_normalized",
                  "ln_final.hook_normalized", "blocks.1.attn.hook_result", "blocks.0.attn.hook_pattern"):
        assert point in worst, point
    assert len(worst) >= 40


@pytest.mark.parametrize("family", ["gpt2", "llama", "mixtral"])
def test_per_head_inputs_agree(family):
    """TL's ``use_split_qkv_input`` (one copy of the stream per head for q, and per kv head for k and
    v -- grouped on Llama and Mixtral) and, where every head has its own keys, ``use_attn_in``."""
    worst = agreement(family, "split_qkv")
    assert {"blocks.0.hook_q_input", "blocks.0.hook_k_input", "blocks.0.hook_v_input"} <= set(worst)
    zm, _ = pair(family, "split_qkv")
    assert ("blocks.0.hook_attn_in" in zm.hook_names()) is (family == "gpt2")  # h == h_kv only
    if family == "gpt2":
        assert "blocks.1.hook_attn_in" in agreement(family, "attn_in")


def _scale_heads(x):
    return x * torch.linspace(0.5, 2.0, x.size(2), dtype=x.dtype).view(1, 1, -1, *([1] * (x.dim() - 3)))


def _tilt(x):
    """A shift no norm takes back: a different direction along the last axis (per head, if any)."""
    d = torch.linspace(-1, 1, x.size(-1), dtype=x.dtype)
    if x.dim() == 4:  # (B, T, heads, D): each head's copy its own shift
        return x + torch.arange(1, x.size(2) + 1, dtype=x.dtype)[:, None] * d
    return x + d


EDITS = {
    "blocks.1.ln1.hook_normalized": lambda x: x + 1,  # the issue's edit: before weight and bias
    "blocks.0.ln1.hook_scale": lambda x: x * 2,
    "blocks.0.ln2.hook_normalized": lambda x: x.flip(-1),
    "ln_final.hook_normalized": lambda x: x * 0.5,
    "ln_final.hook_scale": lambda x: x + 0.5,
    "blocks.0.attn.hook_pattern": lambda x: x.flip(-1),
    "blocks.1.attn.hook_attn_scores": lambda x: x * 0.5,
    "blocks.0.attn.hook_z": _scale_heads,
    "blocks.1.attn.hook_result": lambda x: x[:, :, [1, 1, 3, 3]],
    "blocks.0.hook_mlp_in": _tilt,
    "blocks.1.hook_resid_mid": _tilt,
    "blocks.0.attn.hook_v": lambda x: x.flip(-1),
    "hook_embed": lambda x: x * 2,
    "hook_tokens": lambda t: t.flip(-1),
}
PER_FAMILY = {
    "gpt2": {"hook_pos_embed": lambda x: x * 2, "blocks.0.mlp.hook_pre": lambda x: x - 1,
             "blocks.0.mlp.hook_post": lambda x: x.relu()},
    "llama": {"blocks.1.attn.hook_rot_k": lambda x: x * 2, "blocks.0.mlp.hook_pre_linear": lambda x: -x,
              "blocks.1.mlp.hook_post": lambda x: x.relu()},
    "gemma": {"blocks.0.attn.hook_rot_q": lambda x: x.flip(1), "blocks.0.mlp.hook_pre": lambda x: x * 0.5},
    "gemma2": {"blocks.0.ln1_post.hook_normalized": lambda x: x * 3, "blocks.1.ln2_post.hook_scale": lambda x: x * 2,
               "blocks.0.hook_attn_out": lambda x: x * 0.5, "blocks.1.hook_mlp_out": lambda x: -x,
               "blocks.0.mlp.hook_post": lambda x: x.relu()},
    "mixtral": {"blocks.0.mlp.hook_expert_weights": lambda x: x.flip(-1)},
}
CASES = [(f, n, e) for f in FAMILIES for n, e in {**EDITS, **PER_FAMILY.get(f, {})}.items()]


@pytest.mark.parametrize("family,name,edit", CASES, ids=[f"{f}-{n}" for f, n, _ in CASES])
def test_the_same_edit_gives_the_same_logits(family, name, edit):
    zm, ht = pair(family)
    x = ids()
    flat = name.endswith(FLATTENED_IN_TL)

    def z_fn(a, hook):
        return edit(a)

    def t_fn(a, hook):  # TL's router points are (B·T, ·): edited as zoo's (B, T, ·)
        return edit(a.view(3, 11, -1)).flatten(0, 1) if flat else edit(a)

    with torch.no_grad():
        plain = zm(x)
        a = zm.run_with_hooks(x, fwd_hooks=[(name, z_fn)])
        b = ht.run_with_hooks(x, fwd_hooks=[(name, t_fn)])
    torch.testing.assert_close(a, b, atol=TOL[family] * 10, rtol=0)
    assert (a - plain).abs().max() > 1e-3  # the edit did something


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize("run,name", [("split_qkv", "blocks.0.hook_q_input"), ("split_qkv", "blocks.1.hook_k_input"),
                                      ("split_qkv", "blocks.0.hook_v_input"), ("attn_in", "blocks.1.hook_attn_in")])
def test_an_edit_of_one_heads_input_moves_as_in_transformer_lens(family, run, name):
    if run == "attn_in" and family != "gpt2":
        pytest.skip("hook_attn_in exists where every head has its own keys (TL's use_attn_in has no GQA form)")
    zm, ht = pair(family, run)
    x = ids()
    fn = lambda a, hook: _tilt(a)  # noqa: E731 - every head's copy of the stream shifted differently
    with torch.no_grad():
        a = zm.run_with_hooks(x, fwd_hooks=[(name, fn)])
        b = ht.run_with_hooks(x, fwd_hooks=[(name, fn)])
        plain = zm(x)
    torch.testing.assert_close(a, b, atol=TOL[family] * 10, rtol=0)
    assert (a - plain).abs().max() > 1e-3


def test_hook_normalized_is_before_the_weight_and_the_bias():
    """The issue's case: with ln1's weight doubled and its bias moved, hook_normalized is unchanged
    (TL's meaning) while the block's output moves."""
    zm, _ = pair("gpt2")
    x = ids()
    name = "blocks.0.ln1.hook_normalized"
    with torch.no_grad():
        _, before = zm.run_with_cache(x, names_filter=[name, "blocks.0.hook_attn_out"])
        norm = zm.decoder.blocks[0].attn_res.norm
        w, b = norm.weight.clone(), norm.bias.clone()
        try:
            norm.weight.mul_(2)
            norm.bias.add_(0.5)
            _, after = zm.run_with_cache(x, names_filter=[name, "blocks.0.hook_attn_out"])
        finally:
            norm.weight.copy_(w)
            norm.bias.copy_(b)
    torch.testing.assert_close(after[name], before[name], atol=1e-12, rtol=0)
    assert (after["blocks.0.hook_attn_out"] - before["blocks.0.hook_attn_out"]).abs().max() > 1e-2
    normed = before[name]  # (x - mean) / scale: mean 0, mean square 1 - eps / scale² per token
    assert normed.mean(-1).abs().max() < 1e-12 and (normed.pow(2).mean(-1) - 1).abs().max() < 1e-3


def test_issue_26s_default_initialised_gpt2_still_agrees():
    """The GPT-2 of issue 26 (transformers' own initialisation), used by the patching and lens tests."""
    zm, ht = gpt2_pair()
    x = ids()
    with torch.no_grad():
        _, z_cache = zm.run_with_cache(x)
        _, t_cache = ht.run_with_cache(x)
    for name in t_cache.keys():
        torch.testing.assert_close(z_cache[name], t_cache[name], atol=1e-5, rtol=0)

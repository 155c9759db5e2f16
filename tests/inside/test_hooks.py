"""Hook points as taps in the engine's own forward (issue 26, goals 1, 3; issue 32, goals 1, 3-5).

References: the model's own plain forward (a hooked call that edits nothing gives the same logits; a
cached generation equals one forward over the final sequence), a decoding loop written here without
a KV cache (a hook editing one position steers cached generation as it steers full forwards), the
same computation in one thread (sessions in other threads change nothing), and each kernel's own
output (the points it lists are exactly the points that fire, and an edit there moves the output).
"""
from __future__ import annotations

import threading

import pytest
import torch

import zoo
from zoo.components import AttentionKernel, Capabilities, taps_for
from zoo.errors import ZooError
from zoo.inside.hooks import PER_HEAD_INPUTS, ActivationCache, act_name, edit_positions, hook_names, kernel_view

from helpers import shrunk

PRESETS = zoo.list_presets()


def _model(preset, seed=0, **over):
    return zoo.build(shrunk(preset), seed=seed, budget=float("inf"), **over).eval()


def _inputs(model, T=9, B=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, model.spec.vocab_size, (B, T), generator=g)
    return (ids, ids[:, : T - 2]) if model.spec.arch == "encoder_decoder" else (ids,)


def _untouched(model) -> None:
    """Nothing installed on any module, and no session left open in this thread."""
    for name, m in model.named_modules():
        assert "forward" not in m.__dict__, name
        assert not m._forward_hooks and not m._forward_pre_hooks, name
        assert taps_for(m) is None, name


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_calls_exactly_the_points_it_lists(preset):
    """Asking for everything, every listed point is recorded (and the engine refuses a tap it does
    not list: hooks._Taps raises), in two runs since TL's per-head inputs are asked for on their own;
    the logits equal the plain forward's and the model is left as it was."""
    model = _model(preset)
    keys = list(model.state_dict())
    args = _inputs(model)
    names = hook_names(model)
    per_head = {n for n in names if n.endswith(PER_HEAD_INPUTS)}
    with torch.no_grad():
        plain = model(*args)
        out, cache = model.run_with_cache(*args)
        out2, cache2 = model.run_with_cache(*args, names_filter=lambda n: n.endswith(PER_HEAD_INPUTS))
    _untouched(model)
    assert list(model.state_dict()) == keys
    torch.testing.assert_close(out, plain, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(out2, plain, atol=2e-5, rtol=1e-4)
    assert set(cache) == set(names) - per_head, set(names) ^ set(cache)
    assert set(cache2) == per_head
    assert len(names) == len(set(names))
    B, T = args[-1].shape
    stack = "decoder." if model.spec.arch == "encoder_decoder" else ""
    h = model.spec.stack("decoder" if stack else model.spec.roles[0]).num_heads
    assert cache[f"{stack}blocks.1.attn.hook_z"].shape[:3] == (B, T, h)
    assert cache[f"{stack}blocks.0.hook_resid_post"].shape == (B, T, model.spec.d_model)
    if model.spec.stack(model.spec.roles[-1]).placement.kind == "pre" \
            and not model.spec.stack(model.spec.roles[-1]).parallel_residual and not stack:
        torch.testing.assert_close(cache["blocks.1.hook_resid_post"],
                                   cache["blocks.1.hook_resid_mid"] + cache["blocks.1.hook_mlp_out"])


# ---------------------------------------------------------------------- every listed name is real
def _kernels():
    return [c.name for c in zoo.get_registry().list("attention")]


@pytest.mark.parametrize("kind", _kernels())
def test_each_kernel_shows_what_it_lists_and_an_edit_there_takes_effect(kind):
    model = _model("gpt_tiny", attention=kind, num_layers=2)
    ids = _inputs(model, T=7)[0]
    how, shown = kernel_view(model.decoder.blocks[0].attn)
    assert how is not None and "hook_pattern" in shown, (kind, how, shown)  # every built-in kernel shows them
    with torch.no_grad():
        plain = model(ids)
        _, cache = model.run_with_cache(ids, names_filter="*attn.hook_*")
        first = lambda x, h: torch.zeros_like(x).index_fill_(-1, torch.tensor([0]), 1.0)  # noqa: E731 - all on key 0
        edited = model.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_pattern", first)])
    listed = {n for n in hook_names(model) if n.endswith(("hook_attn_scores", "hook_pattern"))}
    assert {n for n in cache if n.endswith(("hook_attn_scores", "hook_pattern"))} == listed
    assert listed == {f"blocks.{i}.attn.{n}" for i in range(2) for n in shown}
    p = cache["blocks.0.attn.hook_pattern"]
    assert p.shape == (1 * 2, 4, 7, 7) and bool((p[..., 0, 1:] == 0).all())  # causal: query 0 sees key 0
    assert (edited - plain).abs().max() > 1e-4, "an edit of the pattern must move the output"
    if "hook_attn_scores" in shown:
        s = cache["blocks.0.attn.hook_attn_scores"]
        assert bool(torch.isneginf(s[..., 0, 1:]).all())  # -inf where the causal mask forbids


class _Linear(AttentionKernel):
    """Not softmax attention: no scores, no weights to show."""

    capabilities = Capabilities(exact=False)

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        k, v = k.repeat_interleave(q.size(1) // k.size(1), 1), v.repeat_interleave(q.size(1) // k.size(1), 1)
        kv = torch.einsum("bhtd,bhte->bhde", k.relu(), v)  # (B, h, hd, hd): no causal form, a test kernel
        return torch.einsum("bhtd,bhde->bhte", q.relu(), kv) / k.size(2), None


def test_a_kernel_that_shows_nothing_lists_nothing_and_a_hook_there_names_the_kernels_that_can():
    model = _model("gpt_tiny", num_layers=2, attention="eager")  # no fused causal path: masks arrive as masks
    for block in model.decoder.blocks:
        block.attn.kernel = _Linear(None, type("C", (), {"scale": 1.0, "dropout": 0.0}))
    ids = _inputs(model)[0]
    assert not [n for n in hook_names(model) if n.endswith(("hook_pattern", "hook_attn_scores"))]
    with pytest.raises(ZooError) as e:
        model.run_with_hooks(ids, fwd_hooks=[("blocks.0.attn.hook_pattern", lambda x, h: x)])
    assert "_Linear" in e.value.what and "eager" in e.value.options and "sdpa" in e.value.options
    assert e.value.where == "fwd_hooks['blocks.0.attn.hook_pattern']" and "hook_z" in e.value.fix
    with pytest.raises(ZooError, match="_Linear"):
        model.run_with_cache(ids, names_filter="*")  # fine: nothing to show, nothing asked of it
        model.run_with_hooks(ids, fwd_hooks=[("*hook_attn_scores", lambda x, h: x)])
    _untouched(model)


class _ShowsOnlyPrompts(AttentionKernel):
    """Shows its pattern for several queries but not for one (a decoding step): caught at run time."""

    capabilities = Capabilities(exact=False)

    def forward(self, q, k, v, mask=None, bias=None, need_weights=False):
        from zoo.model.kernels import bias_and_mask, softmax_values

        k2, v2 = k.repeat_interleave(q.size(1) // k.size(1), 1), v.repeat_interleave(q.size(1) // k.size(1), 1)
        s = bias_and_mask(q @ k2.transpose(-2, -1) * self.scale, bias, mask)
        if q.size(2) > 1:
            return softmax_values(s, v2)[0], None
        return torch.softmax(s, -1) @ v2, None


def test_a_kernel_that_stops_showing_what_it_listed_is_a_zoo_error_not_a_silent_no_op():
    model = _model("gpt_tiny", num_layers=1, attention="eager")
    model.decoder.blocks[0].attn.kernel = _ShowsOnlyPrompts(None, type("C", (), {"scale": 0.125, "dropout": 0.0}))
    assert "blocks.0.attn.hook_pattern" in hook_names(model)
    calls = []
    with torch.no_grad(), pytest.raises(ZooError, match="did not show"):
        model.generate(_inputs(model, T=4, B=1)[0], 3,
                       fwd_hooks=[("blocks.0.attn.hook_pattern", lambda x, h: calls.append(x.shape))])
    assert calls == [(1, 4, 4, 4)]  # the prompt's forward showed it
    _untouched(model)


# ---------------------------------------------------------------------- sessions, not global state
def test_a_plain_forward_in_another_thread_sees_none_of_a_sessions_hooks():
    """While one thread is inside ``run_with_hooks`` (held in its hook until the other finishes),
    another thread's plain forward of the same model gives the plain logits."""
    model = _model("gpt_tiny")
    ids = _inputs(model)[0]
    with torch.no_grad():
        want_plain = model(ids)
        want_hooked = model.run_with_hooks(ids, fwd_hooks=[("blocks.*.hook_resid_post", lambda x, h: x * 0.5)])
    inside, done = threading.Event(), threading.Event()
    got = {}

    def hooked():
        def fn(x, hook):
            inside.set()
            assert done.wait(60)
            return x * 0.5

        with torch.no_grad():
            got["hooked"] = model.run_with_hooks(ids, fwd_hooks=[("blocks.*.hook_resid_post", fn)])

    def plain():
        assert inside.wait(60)
        with torch.no_grad():
            got["plain"] = [model(ids) for _ in range(5)]
        done.set()

    threads = [threading.Thread(target=hooked), threading.Thread(target=plain)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert all(torch.equal(p, want_plain) for p in got["plain"])
    assert torch.equal(got["hooked"], want_hooked)
    _untouched(model)


def test_two_sessions_in_two_threads_keep_their_own_activations():
    """Two ``run_with_cache`` calls on one model, forced to interleave layer by layer (a barrier in
    each session's hook), each get the cache they get alone."""
    model = _model("llama_tiny")
    a, b = _inputs(model, seed=1)[0], _inputs(model, seed=2)[0]
    with torch.no_grad():
        alone = {k: model.run_with_cache(x, names_filter="*hook_resid_*")[1] for k, x in (("a", a), ("b", b))}
    barrier = threading.Barrier(2, timeout=60)
    got = {}

    def work(key, x):
        def meet(t, hook):
            barrier.wait()  # both sessions stand at the same point of their forwards
            return None

        with torch.no_grad():
            got[key] = model.run_with_cache(x, names_filter="*hook_resid_*",
                                            fwd_hooks=[("blocks.*.hook_resid_mid", meet)])[1]

    threads = [threading.Thread(target=work, args=("a", a)), threading.Thread(target=work, args=("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for key in ("a", "b"):
        assert set(got[key]) == set(alone[key])
        for name in alone[key]:
            assert torch.equal(got[key][name], alone[key][name]), (key, name)


def test_sessions_nest_and_the_outer_comes_back():
    model = _model("gpt_tiny")
    ids = _inputs(model)[0]
    seen = []
    with torch.no_grad(), model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, h: seen.append("outer"))]):
        model.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, h: seen.append("inner"))])
        model(ids)
    model(ids)
    assert seen == ["outer", "inner", "outer"]
    _untouched(model)


def test_a_hook_that_raises_leaves_no_hook_behind():
    model = _model("gpt_tiny")

    def boom(x, hook):
        raise RuntimeError("inside the hook")

    with pytest.raises(RuntimeError, match="inside the hook"):
        model.run_with_hooks(*_inputs(model), fwd_hooks=[("blocks.0.attn.hook_pattern", boom)])
    _untouched(model)


def test_a_compiled_graph_without_hooks_does_not_change_and_holds_none():
    """The taps cost a compiled graph nothing: the graph traced while a session is open in this
    thread is the graph traced outside one, no recompile happens when a session opens, and hooks
    never run inside it (the hooked call is the model's own forward)."""
    model = _model("gpt_tiny", num_layers=2)
    ids = _inputs(model)[0]
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm.code)
        return gm.forward

    calls = []
    fn = lambda x, h: calls.append(1) or x * 0  # noqa: E731
    with torch.no_grad():
        compiled = torch.compile(model, backend=backend, fullgraph=True)
        plain = compiled(ids)
        with model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", fn)]):
            assert torch.equal(compiled(ids), plain)
        assert len(graphs) == 1
        torch._dynamo.reset()
        with model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", fn)]):
            torch.compile(model, backend=backend, fullgraph=True)(ids)
        hooked = compiled.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_pre", fn)])
    assert len(graphs) == 2 and graphs[0] == graphs[1] and calls == [1]
    assert (hooked - plain).abs().max() > 1e-4
    torch._dynamo.reset()


# ---------------------------------------------------------------------- a user's hook, held to the contract
@pytest.mark.parametrize("bad,what", [
    (lambda x: x[:, :1], "shape (2, 1, 32), expected (2, 9, 32)"),
    (lambda x: x.double(), "dtype float64, expected float32"),
    (lambda x: x.to("meta"), "device meta, expected cpu"),
    (lambda x: x.tolist(), "returned a list, not a tensor"),
    (lambda x: x * float("nan"), "NaN where the activation was a number"),
])
def test_a_hook_result_that_breaks_the_contract_is_a_zoo_error_at_its_hook_point(bad, what):
    model = _model("gpt_tiny")

    def my_edit(x, hook):
        return bad(x)

    with pytest.raises(ZooError) as e:
        model.run_with_hooks(*_inputs(model), fwd_hooks=[("blocks.0.hook_resid_pre", my_edit)])
    assert e.value.where == "fwd_hooks['blocks.0.hook_resid_pre']"
    assert what in e.value.what and "my_edit" in e.value.what and "(2, 9, 32) float32 on cpu" in e.value.what
    _untouched(model)


@pytest.mark.parametrize("fwd_hooks,what", [
    ({"blocks.0.hook_resid_pre": lambda x, h: x}, "is a dict"),
    (("blocks.0.hook_resid_pre", lambda x, h: x), "one (name, function) pair"),
    ([("blocks.0.hook_resid_pre",)], "got a tuple of length 1"),
    ([("blocks.0.hook_resid_pre", lambda x, h: x, 3)], "got a tuple of length 3"),
    (["blocks.0.hook_resid_pre"], "got a str"),
    ([("blocks.0.hook_resid_pre", "not a function")], "not callable"),
    ([(3, lambda x, h: x)], "a name, a glob pattern or a function"),
    ([("blocks.0.attn.hook_patern", lambda x, h: x)], "did you mean 'blocks.0.attn.hook_pattern'"),
    ("blocks.0.hook_resid_pre", "got str"),
])
def test_malformed_fwd_hooks_are_zoo_errors(fwd_hooks, what):
    model = _model("gpt_tiny")
    with pytest.raises(ZooError) as e:
        model.run_with_hooks(*_inputs(model), fwd_hooks=fwd_hooks)
    assert what in str(e.value)
    assert e.value.fix
    _untouched(model)


def test_negative_positions_count_from_the_end_and_generation_refuses_them():
    model = _model("gpt_tiny")
    ids = _inputs(model)[0]
    push = lambda v: v + torch.linspace(-2, 2, v.size(-1))  # noqa: E731 - a shift the next norm keeps
    with torch.no_grad():
        a = model.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_post", edit_positions(-1, push))])
        b = model.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_post", edit_positions(8, push))])
        c = model.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_post", edit_positions([-9, 8], push))])
        d = model.run_with_hooks(ids, fwd_hooks=[("blocks.0.hook_resid_post", edit_positions([0, 8], push))])
    assert torch.equal(a, b) and torch.equal(c, d) and (a - model(ids)).abs().max() > 1e-3
    with pytest.raises(ZooError, match="from the end"):
        model.generate(ids[:1, :4], 3, fwd_hooks=[("blocks.0.hook_resid_post", edit_positions(-1, push))])
    for bad in (1.5, [True], ["3"]):
        with pytest.raises(ZooError, match="integers"):
            edit_positions(bad, push)


def test_generation_refuses_a_hook_on_the_lm_head_it_never_calls():
    model = _model("gpt_tiny")
    with pytest.raises(ZooError, match="never called while generating"):
        model.generate(_inputs(model, T=4, B=1)[0], 2, fwd_hooks=[("unembed.hook_out", lambda x, h: x)])


def test_a_quantised_model_caches_and_its_head_writes_add_up():
    from zoo.run.precision import quantize_int8

    model = quantize_int8(_model("gpt_tiny"))
    ids = _inputs(model)[0]
    with torch.no_grad():
        plain = model(ids)
        out, cache = model.run_with_cache(ids)
        _, heads = model.run_with_cache(ids, names_filter="*q_input")
    assert torch.equal(out, plain)
    bias = model.decoder.blocks[1].attn.out.bias
    # each head's write goes through the int8 layer on its own (its activations quantised alone)
    torch.testing.assert_close(cache["blocks.1.attn.hook_result"].sum(2) + bias, cache["blocks.1.hook_attn_out"],
                               atol=2e-3, rtol=0)
    assert heads["blocks.0.hook_q_input"].shape == (2, 9, 4, model.spec.d_model)


# ---------------------------------------------------------------------- names, filters, views
def test_patterns_filters_and_short_names():
    model = _model("gpt_tiny")
    seen = []
    with torch.no_grad():
        _, cache = model.run_with_cache(*_inputs(model), names_filter="*hook_pattern",
                                        fwd_hooks=[("blocks.*.attn.hook_z", lambda x, h: seen.append(h.name))])
    assert sorted(cache) == [f"blocks.{i}.attn.hook_pattern" for i in range(2)]
    assert seen == ["blocks.0.attn.hook_z", "blocks.1.attn.hook_z"]
    assert cache["pattern", 1] is cache["blocks.1.attn.hook_pattern"]
    assert act_name("resid_pre", 3) == "blocks.3.hook_resid_pre" and act_name("embed") == "hook_embed"
    assert act_name("tokens") == "hook_tokens" and act_name("mlp_in", 1) == "blocks.1.hook_mlp_in"
    assert isinstance(cache, ActivationCache) and cache.stack("pattern").shape[0] == 2
    torch.testing.assert_close(cache["pattern", 0].sum(-1), torch.ones(2, 4, 9))


def test_tokens_can_be_read_and_replaced():
    model = _model("gpt_tiny")
    ids = _inputs(model)[0]
    other = ids.flip(-1)
    with torch.no_grad():
        _, cache = model.run_with_cache(ids, names_filter="hook_tokens")
        swapped = model.run_with_hooks(ids, fwd_hooks=[("hook_tokens", lambda t, h: other)])
    assert torch.equal(cache["hook_tokens"], ids)
    assert torch.equal(swapped, model(other))


def test_zeroing_a_head_equals_trace_ablation():
    """zoo.trace's head ablation (a view of the same taps) and a hook_z edit agree."""
    model = _model("gpt_tiny")
    ids = _inputs(model)[0]

    def zero_head(x, hook):
        x = x.clone()
        x[:, :, 1] = 0
        return x

    with torch.no_grad():
        a = model.run_with_hooks(ids, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])
    b = zoo.trace(model, ids, ablate=[(1, 1)]).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert (a - model(ids)).abs().max() > 1e-4


# ---------------------------------------------------------------------- during generation
@pytest.mark.parametrize("preset", ["gpt_tiny", "llama_tiny", "t5_tiny", "gemma2_2b", "deepseek_v2_lite"])
def test_cache_from_generate_equals_one_forward_over_the_sequence(preset):
    model = _model(preset)
    prompt = _inputs(model, T=5)[0]
    with torch.no_grad():
        seq, gen_cache = model.generate(prompt, 6, return_cache=True)
        if model.spec.arch == "encoder_decoder":  # the start token is real (it may be pad_id)
            _, one = model.run_with_cache(prompt, seq, tgt_padding=torch.ones_like(seq))
        else:
            _, one = model.run_with_cache(seq)
    _untouched(model)
    names = [n for n in one if not n.startswith("unembed.")]
    assert sorted(gen_cache) == sorted(names)
    for n in names:
        torch.testing.assert_close(gen_cache[n], one[n], atol=1e-5, rtol=1e-4, msg=lambda m, n=n: f"{n}: {m}")


def _greedy_without_cache(model, prompt, steps, hooks):
    seq = prompt
    for _ in range(steps):
        with torch.no_grad():
            logits = model.run_with_hooks(seq, fwd_hooks=hooks)
        seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], 1)
    return seq


@pytest.mark.parametrize("p", [2, 7])  # in the prompt; computed in a decoding step
@pytest.mark.parametrize("name", ["blocks.0.hook_resid_post", "blocks.1.attn.hook_v", "blocks.0.attn.hook_pattern",
                                  "blocks.1.ln1.hook_normalized", "blocks.0.hook_mlp_in"])
def test_an_edit_at_position_p_happens_once_and_steers_like_full_forwards(p, name):
    model = _model("llama_tiny", seed=3)
    prompt = _inputs(model, T=5, B=1, seed=2)[0]
    calls = []

    def push(x):
        calls.append(1)
        if "pattern" in name:  # all attention on the first token (a rule of any row length)
            return torch.zeros_like(x).index_fill_(-1, torch.tensor([0]), 1.0)
        return x * 0.1 + 2.0

    hooks = [(name, edit_positions(p, push))]
    with torch.no_grad():
        seq, cache = model.generate(prompt, 6, fwd_hooks=hooks, return_cache=True)
    assert len(calls) == 1, "the edit must happen exactly once"
    want = _greedy_without_cache(model, prompt, 6, hooks)
    assert torch.equal(seq, want)
    plain = model.generate(prompt, 6)
    _, want_cache = model.run_with_cache(seq, fwd_hooks=hooks)
    torch.testing.assert_close(cache[name], want_cache[name], atol=1e-5, rtol=1e-4)
    assert not torch.equal(seq, plain) or (cache[name] - model.run_with_cache(seq)[1][name]).abs().max() > 1e-3


def test_streaming_and_a_hooks_context():
    model = _model("gpt_tiny")
    prompt = _inputs(model, T=4, B=1)[0]
    seen = []
    with model.hooks(fwd_hooks=[("blocks.0.hook_resid_pre", lambda x, h: seen.append((h.offset, x.size(1))))]):
        toks = list(model.generate(prompt, 3, stream_tokens=True))
    _untouched(model)
    assert len(toks) == 3 and seen == [(0, 4), (4, 1), (5, 1)]

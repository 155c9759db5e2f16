"""Generation: the KV cache changes nothing but speed (every position scheme, mask and preset), padded
batches equal one-by-one runs, sampling is reproducible, stop tokens, streaming, text in/out."""
import pytest
import torch

import zoo

from helpers import shrunk
from zoo.run.arguments import left_pad
from zoo.run.generate import stream
from zoo.run.sampling import pick_next
from zoo.registry import get_registry
from zoo.io.tokenizers import tokenizer

SMALL = dict(vocab_size=96, d_model=32, num_heads=4, d_ff=64, max_len=64)


def spiky(model, std=0.1, seed=0):
    """Random weights large enough that greedy decoding varies from step to step (the default
    0.02 init gives near-uniform logits and a model that repeats one token; models under test are
    also untied, since a tied head mostly echoes the last token)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
    return model.eval()


def small(preset="gpt_tiny", **over):
    kw = dict(SMALL, num_layers=2, tie_embeddings=False)
    if preset == "t5_tiny":
        kw.pop("num_layers")
        kw["decoder"] = {"num_layers": 2, "mask": "causal"}
        kw["encoder"] = {"num_layers": 2, "mask": "bidirectional"}
    kw.update(over)
    return spiky(zoo.build(preset, seed=0, **kw))


POSITIONS = get_registry().names("position")
MASKS = [
    "causal",
    ["causal", {"kind": "sliding_window", "window": 3}],
    {"kind": "prefix", "length": 2},
]


def prompts(B=2, T=6, vocab=96, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (B, T), generator=g)


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("mask", MASKS, ids=["causal", "causal+window3", "prefix2"])
def test_cache_equals_no_cache_decoder(positions, mask):
    model = small(positions=positions, mask=mask)
    ids = prompts()
    with_cache = model.generate(ids, 12)
    without = model.generate(ids, 12, use_cache=False)
    assert torch.equal(with_cache, without)
    assert with_cache.shape == (2, 18)
    assert len(set(with_cache[0, 6:].tolist())) > 1  # the test model does not just repeat a token


@pytest.mark.parametrize("positions", POSITIONS)
def test_cache_equals_no_cache_encoder_decoder(positions):
    try:
        model = small("t5_tiny", positions=positions)
    except zoo.IncompatibleComponentsError:  # a causal-only scheme (xpos): in the decoder stack only
        model = small("t5_tiny", decoder={"num_layers": 2, "mask": "causal", "positions": positions})
        assert model.spec.stack("decoder").positions.kind == positions
    src = prompts(T=7)
    src[1, -2:] = 0  # padding in the source (pad_id 0)
    a = model.generate(src, 10, decoder_start_id=1)
    b = model.generate(src, 10, decoder_start_id=1, use_cache=False)
    assert torch.equal(a, b)
    assert a.shape == (2, 11) and bool((a[:, 0] == 1).all())


@pytest.mark.parametrize("preset", zoo.list_presets())
def test_cache_equals_no_cache_every_preset(preset):
    spec = zoo.spec(shrunk(preset))
    if spec.arch == "encoder":
        with pytest.raises(zoo.ZooError, match="fill_mask"):
            zoo.build(spec).generate(prompts(vocab=spec.vocab_size), 2)
        return
    model = spiky(zoo.build(spec, seed=0, tie_embeddings=False))
    ids = prompts(vocab=spec.vocab_size)
    a = model.generate(ids, 8)
    assert torch.equal(a, model.generate(ids, 8, use_cache=False))


def test_cache_logits_equal_full_forward_step_by_step():
    """Under the cache, every step's logits equal the full forward's last position (not only argmax)."""
    for positions in POSITIONS:
        model = small(positions=positions, mask=MASKS[1])
        ids = prompts(B=1, T=10)
        full = model(ids)  # (1, T, V)
        cache = model.new_cache()
        model(ids[:, :4], cache=cache)
        for t in range(4, 10):
            step = model(ids[:, t:t + 1], cache=cache)
            torch.testing.assert_close(step[:, 0], full[:, t], atol=1e-4, rtol=1e-4)


def test_static_cache_is_written_in_place():
    """With a capacity, each layer's k/v buffers are allocated once, at the prefill, and every step
    writes into them: the same storage from the first step to the last, and the logits still equal
    the full forward's (left padding and a sliding window included)."""
    model = small(positions="rope", mask=MASKS[1])
    ids = prompts(B=2, T=10)
    pad = torch.ones(2, 10, dtype=torch.bool)
    pad[1, :3] = False  # row 1 is left-padded
    full = model(ids, attention_mask=pad)  # (2, T, V)
    cache = model.new_cache(capacity=10)
    model(ids[:, :4], attention_mask=pad[:, :4], cache=cache)
    layer = cache.layers[0]
    ptrs = (layer.k.data_ptr(), layer.v.data_ptr(), cache._pos.data_ptr(), cache._pad.data_ptr())
    assert layer.k.shape == (2, 4, 10, 8)  # (B, h_kv, capacity, hd)
    for t in range(4, 10):
        step = model(ids[:, t:t + 1], attention_mask=pad[:, t:t + 1], cache=cache)
        torch.testing.assert_close(step[:, 0], full[:, t], atol=1e-4, rtol=1e-4)
    assert (layer.k.data_ptr(), layer.v.data_ptr(), cache._pos.data_ptr(),
            cache._pad.data_ptr()) == ptrs  # nothing was reallocated
    assert cache.length == layer.length == 10 and cache.key_pos.shape == (2, 10)
    assert cache.key_pos[1].tolist() == [0, 0, 0, 0, 1, 2, 3, 4, 5, 6]  # counted from the first real


@pytest.mark.parametrize("positions", ["learned", "rope", "alibi"])
def test_cache_positions_stay_right_when_padding_first_appears_mid_decode(positions):
    """While nothing is padding, a cache hands out positions as views of a preallocated arange (no
    work per step); the first padded token switches it to positions written as given.  Both halves
    must agree with one full forward over the same tokens and mask."""
    model = small(positions=positions, mask=MASKS[1])
    ids = prompts(B=2, T=10)
    pad = torch.ones(2, 10, dtype=torch.bool)
    pad[1, 6] = False  # row 1 has a hole at position 6: no padding before it
    full = model(ids, attention_mask=pad)  # (2, T, V)
    cache = model.new_cache(capacity=10)
    model(ids[:, :4], cache=cache)  # plain: no mask at all
    for t in range(4, 10):
        step = model(ids[:, t:t + 1], attention_mask=pad[:, t:t + 1], cache=cache)
        if pad[:, t].all():
            torch.testing.assert_close(step[:, 0], full[:, t], atol=1e-4, rtol=1e-4)
    assert cache.key_pos[0].tolist() == list(range(10))
    assert cache.key_pos[1].tolist() == [0, 1, 2, 3, 4, 5, 5, 6, 7, 8]  # the hole takes no position


def test_generated_and_streamed_tokens_are_ordinary_tensors():
    """generate() runs its loop in one inference_mode and streaming enters it per step; what the
    caller gets back must still be an ordinary tensor (an inference tensor refuses in-place
    updates and autograd outside inference mode)."""
    model = small()
    ids = prompts(B=2, T=4)
    out = model.generate(ids, max_new_tokens=3)
    assert not out.is_inference()
    out[:, -1] = 0  # in place: an inference tensor would raise here
    steps = list(model.generate(ids, max_new_tokens=3, stream_tokens=True))
    assert len(steps) == 3 and not any(s.is_inference() for s in steps)
    steps[0] += 1


def test_penalize_repeats_is_transformers_repetition_penalty():
    """Against Hugging Face's RepetitionPenaltyLogitsProcessor on logits of both signs: a seen
    token's positive logit is divided by the penalty, a negative one multiplied."""
    from transformers import RepetitionPenaltyLogitsProcessor

    from zoo.run.sampling import penalize_repeats

    torch.manual_seed(0)
    logits = torch.randn(3, 50) * 4
    ids = torch.randint(0, 50, (3, 9))
    seen = torch.zeros(3, 50, dtype=torch.bool).scatter_(1, ids, True)
    ref = RepetitionPenaltyLogitsProcessor(1.7)(ids, logits.clone())
    torch.testing.assert_close(penalize_repeats(logits, seen, 1.7), ref)
    assert (ref != logits).any() and ((logits > 0) & seen).any() and ((logits < 0) & seen).any()
    assert penalize_repeats(torch.tensor([[2.0, -2.0, 3.0]]), torch.tensor([[True, True, False]]),
                            2.0).tolist() == [[1.0, -4.0, 3.0]]  # by hand


@pytest.mark.parametrize("bad", [0.5, 0, 11, float("nan"), True, "1.2"])
def test_repetition_penalty_out_of_range_is_a_clear_error(bad):
    model = small()
    with pytest.raises(zoo.ZooError, match="generate.repetition_penalty"):
        model.generate(prompts(B=1, T=3), max_new_tokens=2, repetition_penalty=bad)


def test_cache_without_capacity_grows_and_stays_right():
    """``new_cache()`` without a capacity grows its buffers by doubling; same logits."""
    model = small(positions="alibi")
    ids = prompts(B=1, T=12)
    full = model(ids)
    cache = model.new_cache()
    model(ids[:, :2], cache=cache)
    for t in range(2, 12):
        step = model(ids[:, t:t + 1], cache=cache)
        torch.testing.assert_close(step[:, 0], full[:, t], atol=1e-4, rtol=1e-4)
    assert cache.layers[0].k.size(2) == 16  # 2 -> 4 -> 8 -> 16 slots, not one per step


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("mask", MASKS, ids=["causal", "causal+window3", "prefix2"])
def test_padded_batch_equals_one_by_one(positions, mask):
    model = small(positions=positions, mask=mask)
    rows = [[5, 9, 14], [7, 3, 22, 41, 8, 19], [60, 2]]
    batch = model.generate(rows, 9)  # left-padded inside
    assert batch.shape == (3, 6 + 9)
    for i, r in enumerate(rows):
        alone = model.generate(r, 9)
        assert batch[i, 6 - len(r):].tolist() == alone[0].tolist()
        assert batch[i, 6:].tolist() == alone[0, len(r):].tolist()


def test_padded_batch_encoder_decoder_equals_one_by_one():
    model = small("t5_tiny", positions="t5_relative")
    rows = [[5, 9, 14], [7, 3, 22, 41, 8, 19]]
    batch = model.generate(rows, 7, decoder_start_id=2)
    for i, r in enumerate(rows):
        assert batch[i].tolist() == model.generate(r, 7, decoder_start_id=2)[0].tolist()


def test_sampling_reproducible_and_seed_dependent():
    model = small(positions="rope")
    ids = prompts()
    a = model.generate(ids, 16, do_sample=True, temperature=1.3, top_k=20, top_p=0.95, seed=7)
    b = model.generate(ids, 16, do_sample=True, temperature=1.3, top_k=20, top_p=0.95, seed=7)
    c = model.generate(ids, 16, do_sample=True, temperature=1.3, top_k=20, top_p=0.95, seed=8)
    assert torch.equal(a, b) and not torch.equal(a, c)
    greedy = model.generate(ids, 16)
    assert torch.equal(model.generate(ids, 16, do_sample=True, top_k=1, seed=3), greedy)
    assert torch.equal(model.generate(ids, 16, do_sample=True, top_p=1e-6, seed=3), greedy)


def test_pick_next_filters():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    g = torch.Generator().manual_seed(0)
    seen = {int(pick_next(logits, do_sample=True, top_k=2, generator=g)) for _ in range(200)}
    assert seen == {0, 1}
    # top_p: p(0)=0.64, p(0)+p(1)=0.88 -> top_p=0.8 keeps exactly {0, 1}
    seen = {int(pick_next(logits, do_sample=True, top_p=0.8, generator=g)) for _ in range(300)}
    assert seen == {0, 1}
    # a low temperature is (almost) greedy, a high one reaches the tail
    assert {int(pick_next(logits, do_sample=True, temperature=0.05, generator=g))
            for _ in range(50)} == {0}
    assert 4 in {int(pick_next(logits, do_sample=True, temperature=50.0, generator=g))
                 for _ in range(300)}


def test_stop_tokens_and_padding_after_stop():
    model = small(positions="learned")
    ids = prompts()
    free = model.generate(ids, 12)
    stop = int(free[0, 6 + 3])  # the 4th new token of row 0
    out = model.generate(ids, 12, stop_tokens=[stop], pad_id=0)
    row = out[0, 6:].tolist()
    k = row.index(stop)
    assert k <= 3 and row[:k + 1] == free[0, 6:6 + k + 1].tolist()
    assert all(t == 0 for t in row[k + 1:])
    # when every row has stopped the output is shorter
    both = model.generate(ids[:1], 12, stop_tokens=stop)
    assert both.shape[1] == 6 + k + 1


def test_stream_yields_the_same_tokens():
    model = small(positions="alibi")
    ids = prompts()
    steps = list(stream(model, ids, 10))
    assert len(steps) == 10 and steps[0].shape == (2,)
    assert torch.equal(torch.stack(steps, 1), model.generate(ids, 10)[:, 6:])
    it = model.generate(ids, 10, stream_tokens=True)
    assert torch.equal(next(iter(it)), steps[0])


def test_text_in_text_out_chinese_byte_tokenizer():
    tok = tokenizer("byte")
    model = small(positions="rope", vocab_size=tok.vocab_size)
    model.tokenizer = tok
    text = model.generate("今天天气", 12, stop_tokens=[])
    ids = model.generate(tok.encode("今天天气"), 12)
    assert text == tok.decode(ids[0, len(tok.encode("今天天气")):].tolist(), skip_special=True)
    pieces = list(model.generate("今天天气", 12, stream_tokens=True, stop_tokens=[]))
    assert "".join(pieces) == text
    assert all(p for p in pieces)


def test_text_streaming_holds_back_partial_utf8():
    """A Chinese character arrives as three byte tokens; the stream never shows half of it."""
    tok = tokenizer("byte")
    model = small(positions="rope", vocab_size=tok.vocab_size)
    target = "天气很好".encode("utf-8")
    # make the model emit `target` byte by byte: force the logits with a hook on the LM head
    state = {"i": 0}

    def force(mod, inp, out):
        out = out.clone()
        out[..., :] = -1e4
        out[..., target[min(state["i"], len(target) - 1)]] = 1e4
        state["i"] += 1
        return out

    h = model.lm_head.register_forward_hook(force)
    try:
        pieces = list(zoo.run.generate.stream_text(model, "今天", len(target), tokenizer=tok,
                                               stop_tokens=[]))
    finally:
        h.remove()
    assert "".join(pieces) == "天气很好"
    assert all("\ufffd" not in p for p in pieces) and len(pieces) == 4


def test_char_tokenizer_text_generation_batch():
    tok = tokenizer("char", text="床前明月光疑是地上霜举头望明月低头思故乡")
    model = small(positions="sinusoidal", vocab_size=tok.vocab_size)
    outs = model.generate(["床前", "举头望"], 5, tokenizer=tok, stop_tokens=[])
    assert isinstance(outs, list) and len(outs) == 2 and all(len(o) == 5 for o in outs)
    assert outs[0] == model.generate("床前", 5, tokenizer=tok, stop_tokens=[])


def test_left_pad_and_errors():
    ids, mask = left_pad([[1, 2], [3]], pad_id=0)
    assert ids.tolist() == [[1, 2], [0, 3]] and mask.tolist() == [[True, True], [False, True]]
    model = small()
    with pytest.raises(zoo.ZooError, match="temperature"):
        model.generate([1, 2], 3, do_sample=True, temperature=0.0)
    with pytest.raises(zoo.ZooError, match="top_p"):
        model.generate([1, 2], 3, do_sample=True, top_p=1.5)
    with pytest.raises(zoo.ZooError, match="max_len"):
        model.generate([1, 2], 200)
    with pytest.raises(zoo.ZooError, match="vocab"):
        model.generate([1, 500], 3)
    with pytest.raises(zoo.ZooError, match="left-padded"):
        model.generate(torch.tensor([[1, 2]]), 3, attention_mask=torch.tensor([[1, 0]]))
    with pytest.raises(zoo.TokenizerError, match="tokenizer"):
        model.generate("hello", 3)
    assert model.generate([1, 2], 0).tolist() == [[1, 2]]
    with pytest.raises(zoo.ZooError, match="top_k"):  # raised when called, not at the first next()
        stream(model, [1, 2], 3, do_sample=True, top_k=0)


def test_cli_run_streams_and_fills_masks(tmp_path):
    from click.testing import CliRunner

    from zoo.cli import cli

    tok = tokenizer("byte")
    model = small(positions="rope", vocab_size=tok.vocab_size)
    zoo.save(model, tmp_path / "gpt", tokenizer=tok)
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "gpt"), "--prompt", "你好", "-n", "9"])
    assert res.exit_code == 0, res.output
    expected = zoo.load(tmp_path / "gpt").generate("你好", 9)
    assert res.stdout == "你好" + expected + "\n"  # stdout: the text alone; the speed line is on stderr
    ctok = tokenizer("char", text="北京是中国的首都")
    bert = zoo.build("bert_tiny", num_layers=1, vocab_size=ctok.vocab_size, seed=0)
    zoo.save(bert, tmp_path / "bert", tokenizer=ctok)
    res = CliRunner().invoke(cli, ["run", str(tmp_path / "bert"), "--prompt", "北京是<mask>国",
                                   "--candidates", "3"])
    assert res.exit_code == 0, res.output
    assert "position 3:" in res.output and res.output.count("p=") == 3


@pytest.mark.parametrize("over", [
    {"num_kv_heads": 1, "ffn": "swiglu", "norm": {"kind": "rmsnorm"}, "positions": "rope"},
    {"num_kv_heads": 2, "norm": {"kind": "layernorm", "placement": "post"}, "positions": "alibi"},
])
def test_cache_equals_no_cache_gqa_and_modern_parts(over):
    model = small(**over)
    rows = [[5, 9, 14, 3], [7, 3]]
    a = model.generate(rows, 10)
    assert torch.equal(a, model.generate(rows, 10, use_cache=False))


@pytest.mark.gpu
@pytest.mark.parametrize("positions", POSITIONS)
def test_cache_equals_no_cache_on_gpu(positions):
    model = small(positions=positions, mask=MASKS[1]).to("cuda")
    rows = [[5, 9, 14], [7, 3, 22, 41, 8, 19]]
    a = model.generate(rows, 12)
    assert a.device.type == "cuda"
    assert torch.equal(a, model.generate(rows, 12, use_cache=False))
    assert torch.equal(a.cpu(), small(positions=positions, mask=MASKS[1]).generate(rows, 12))
    bf = model.to(torch.bfloat16)
    assert bf.generate(rows, 12).shape == a.shape  # runs in bf16 (tokens may differ from fp32)


def test_transposed_lm_head_path_gives_the_same_tokens(monkeypatch):
    """Large CPU LM heads are read through a transposed copy while decoding; same tokens, and the
    model's own weights stay as they were."""
    import zoo.run.steps as G

    for preset in ("gpt_tiny", "t5_tiny"):
        model = small(preset, positions="rope")
        src = prompts()
        opts = {"decoder_start_id": 1} if preset == "t5_tiny" else {}
        plain = model.generate(src, 20, **opts)
        weight = model.lm_head.weight.clone()
        monkeypatch.setattr(G, "TRANSPOSED_HEAD_MIN", 0)
        fast = model.generate(src, 20, **opts)
        monkeypatch.setattr(G, "TRANSPOSED_HEAD_MIN", 1 << 22)
        assert torch.equal(plain, fast)
        assert torch.equal(model.lm_head.weight, weight)


def test_generation_with_a_kernel_without_kv_cache_support_is_a_clear_error():
    import types

    from zoo.components import Capabilities
    from zoo.registry import Registry, set_registry

    mod = types.ModuleType("nocache")
    eager = zoo.get_registry().get("attention", "eager").cls

    class NoCache(eager):
        capabilities = Capabilities(returns_weights=True, supports_kv_cache=False)

    @zoo.hookimpl
    def register_attention(register):
        register("nocache", NoCache)

    mod.register_attention = register_attention
    reg = Registry(entry_points=False)
    reg.add_plugin(mod, name="nocache")
    old = set_registry(reg)
    try:
        model = zoo.build("gpt_tiny", attention="nocache", num_layers=1, seed=0)
        ids = torch.randint(1, 512, (1, 4))
        with pytest.raises(zoo.IncompatibleComponentsError, match="supports kv cache.*nocache"):
            model.generate(ids, max_new_tokens=2)
        assert model.generate(ids, max_new_tokens=2, use_cache=False).shape == (1, 6)
    finally:
        set_registry(old)

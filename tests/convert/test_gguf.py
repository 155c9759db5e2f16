"""Issue 24, goal 3: GGUF files in, directly (``zoo.convert.from_gguf``, ``zoo convert FILE.gguf``).

The files are written here with the ``gguf`` library (``GGUFWriter``, ``gguf.quants.quantize``)
from random transformers models, the way llama.cpp's ``convert_hf_to_gguf.py`` writes them: tensor
names from the library's own ``TensorNameMap`` (not zoo's table), llama's q/k rows permuted for its
rotary kernel, GPT-2's Conv1D matrices transposed, 1-D tensors in F32, a llama- or gpt2-style
tokenizer and a chat template in the metadata.  The reference is transformers loading the same file
(``from_pretrained(dir, gguf_file=...)``): logits within 1e-5 in float32, the same token ids.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

from gguf import GGMLQuantizationType as Q  # noqa: E402

import zoo  # noqa: E402
from zoo.convert import ConvertError, from_gguf  # noqa: E402

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


# ---------------------------------------------------------------------- writing GGUF files
def sp_vocab(size: int):
    """A small SentencePiece-style (``tokenizer.ggml.model = llama``) vocabulary: specials, the 256
    byte-fallback tokens, scored pieces (no merges: they are recovered from the scores), padding."""
    toks = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3, 3, 3] + [6] * 256
    pieces = ["▁", "e", "l", "h", "o", "▁h", "he", "ll", "lo", "▁he", "hell", "▁hell", "▁hello", "w",
              "r", "d", "▁w", "▁wo", "or", "rl", "ld", "▁world", "a", "t", "▁t", "th", "▁th", "▁the",
              "s", "er", "▁s", "u", "se", "us", "▁us", "▁user", "ser", "user", "i", "n"]
    scores = [0.0] * len(toks) + [-float(i) for i in range(len(pieces))]
    toks, types = toks + pieces, types + [1] * len(pieces)
    pad = size - len(toks)
    return toks + [f"[PAD{i}]" for i in range(pad)], scores + [-1e9] * pad, types + [5] * pad


def bpe_vocab():
    """A byte-level (``gpt2``) vocabulary: the 256 byte symbols, a few merges, one control token."""
    from zoo.convert.gguf import byte_alphabet

    sym = byte_alphabet()
    toks = [sym[b] for b in range(256)]
    merges = ["Ġ h", "e l", "Ġh el", "l o", "Ġhel lo", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "t h", "Ġ th"]
    toks += ["".join(m.split(" ")) for m in merges] + ["<|endoftext|>"]
    return toks, merges, [1] * (len(toks) - 1) + [3]


#: K-quant block layouts: bytes per 256 values, and (byte offset, scale) of each float16 factor.
#: The gguf library dequantises these types but cannot quantise them, so a K-quant tensor here is
#: random valid blocks with small factors (a real K-quant file differs only in how the bits were chosen).
K_BLOCKS = {Q.Q2_K: (84, [(80, 2e-3), (82, 2e-3)]), Q.Q3_K: (110, [(108, 5e-4)]),
            Q.Q4_K: (144, [(0, 1e-4), (2, 1e-4)]), Q.Q5_K: (176, [(0, 5e-5), (2, 5e-5)]),
            Q.Q6_K: (210, [(208, 2e-5)])}


def random_blocks(shape, qtype, rng) -> np.ndarray:
    """``(*rows, cols / 256 * block bytes)`` uint8: random K-quant blocks of a ``shape`` tensor."""
    size, factors = K_BLOCKS[qtype]
    *rows, cols = shape
    blocks = rng.integers(0, 256, (int(np.prod(rows)) * cols // 256, size), dtype=np.uint8)
    for at, scale in factors:
        f = (rng.uniform(0.2, 1.0, blocks.shape[0]) * scale).astype(np.float16)
        blocks[:, at:at + 2] = f.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(*rows, cols // 256 * size)


def add_decoder_keys(w, c) -> int:
    """The shape keys llama.cpp writes for a Llama-shaped decoder config ``c``; returns head_dim."""
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w.add_key_length(hd)
    w.add_value_length(hd)
    return hd


def write_gguf(path, arch: str, hf, qtype, *, tokenizer="llama", template=TEMPLATE, extra=None, skip=(),
               rope_dims=None):
    """Write ``hf`` (a transformers model) as llama.cpp would; return the path."""
    c = hf.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("zoo test")
    if arch == "gpt2":
        w.add_context_length(c.n_positions)
        w.add_embedding_length(c.n_embd)
        w.add_block_count(c.n_layer)
        w.add_feed_forward_length(4 * c.n_embd)
        w.add_head_count(c.n_head)
        w.add_layer_norm_eps(c.layer_norm_epsilon)
    else:
        hd = add_decoder_keys(w, c)
        w.add_rope_freq_base(c.rope_parameters["rope_theta"])
        w.add_rope_dimension_count(rope_dims or hd)
    vocab = hf.get_input_embeddings().weight.shape[0]
    if tokenizer == "llama":
        toks, scores, types = sp_vocab(vocab)
        w.add_tokenizer_model("llama")
        w.add_token_list(toks)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(4)
        w.add_pad_token_id(0)
    else:
        toks, merges, types = bpe_vocab()
        assert len(toks) == vocab
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2" if arch.startswith("qwen") else "default")
        w.add_token_list(toks)
        w.add_token_merges(merges)
        w.add_token_types(types)
        w.add_bos_token_id(len(toks) - 1)
        w.add_eos_token_id(len(toks) - 1)
        w.add_pad_token_id(len(toks) - 1)
    if template is not None:
        w.add_chat_template(template)
    if arch in ("qwen2moe", "qwen3moe"):
        w.add_expert_count(c.num_experts)
        w.add_expert_used_count(c.num_experts_per_tok)
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
        if arch == "qwen2moe":
            w.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)
    for key, value in (extra or {}).items():
        w.add_key_value(key, value[0], value[1])
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, arch.upper()), hf.config.num_hidden_layers)
    rng = np.random.default_rng(0)
    state = {}
    for k, v in hf.state_dict().items():  # llama.cpp splits the fused experts, keeps the shared gate 1-D
        if k.endswith("experts.gate_up_proj"):
            F = v.shape[1] // 2
            state[k.replace("experts.gate_up_proj", "GATE_EXPS.weight")] = v[:, :F]
            state[k.replace("experts.gate_up_proj", "UP_EXPS.weight")] = v[:, F:]
        elif k.endswith("experts.down_proj"):
            state[k.replace("experts.down_proj", "DOWN_EXPS.weight")] = v
        elif k.endswith("shared_expert_gate.weight"):
            state[k] = v.reshape(-1)
        else:
            state[k] = v
    for k, v in state.items():
        base, suffix = k.rsplit(".", 1)
        if base.endswith(("GATE_EXPS", "UP_EXPS", "DOWN_EXPS")):
            i = base.split(".")[2]
            gname = f"blk.{i}.ffn_{base.rsplit('.', 1)[1].split('_')[0].lower()}_exps.{suffix}"
            names_ok = True
        else:
            names_ok = False
        if base.endswith(("attn.bias", "attn.masked_bias")) or "rotary" in base:
            continue
        if not names_ok:
            gname = names.get_name(base) + "." + suffix
        if gname in skip:
            continue
        a = v.detach().float().numpy()
        if arch == "llama" and gname.endswith(("attn_q.weight", "attn_k.weight")):  # llama.cpp's permute
            nh = c.num_attention_heads if "attn_q" in gname else c.num_key_value_heads
            a = a.reshape(nh, 2, a.shape[0] // nh // 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)
        if arch == "gpt2" and gname.endswith(("attn_qkv.weight", "attn_output.weight", "ffn_up.weight",
                                              "ffn_down.weight")):
            a = a.T.copy()  # Conv1D (in, out) -> llama.cpp's (out, in)
        if a.ndim >= 2 and qtype == Q.F16:
            w.add_tensor(gname, a.astype(np.float16))
        elif a.ndim >= 2 and qtype in K_BLOCKS:
            qa = random_blocks(a.shape, qtype, rng)
            w.add_tensor(gname, qa, raw_shape=qa.shape, raw_dtype=qtype)
        elif a.ndim >= 2 and qtype != Q.F32:
            qa = gguf.quants.quantize(a, qtype)
            w.add_tensor(gname, qa, raw_shape=qa.shape, raw_dtype=qtype)
        else:
            w.add_tensor(gname, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def hf_model(arch: str, seed: int = 0):
    """A small random transformers model of ``arch``; widths are multiples of 256 (K-quant blocks)."""
    torch.manual_seed(seed)
    T = transformers
    common = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, max_position_embeddings=128,
                  rms_norm_eps=1e-5, vocab_size=320)
    if arch == "llama":
        m = T.LlamaForCausalLM(T.LlamaConfig(num_attention_heads=4, num_key_value_heads=2,
                                             tie_word_embeddings=False, **common))
    elif arch == "qwen2":
        m = T.Qwen2ForCausalLM(T.Qwen2Config(num_attention_heads=4, num_key_value_heads=2,
                                             tie_word_embeddings=True, **dict(common, vocab_size=len(bpe_vocab()[0]))))
    elif arch == "qwen3":  # transformers' GGUF loader keeps Qwen3Config's head_dim (128)
        m = T.Qwen3ForCausalLM(T.Qwen3Config(num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                                             tie_word_embeddings=False, **common))
    elif arch == "phi3":
        m = T.Phi3ForCausalLM(T.Phi3Config(num_attention_heads=4, num_key_value_heads=4, pad_token_id=0,
                                           tie_word_embeddings=False, **common))
    elif arch == "qwen2moe":  # transformers' loader keeps moe widths 1408 / 5632 (its config's defaults)
        m = T.Qwen2MoeForCausalLM(T.Qwen2MoeConfig(num_attention_heads=4, num_key_value_heads=2, num_experts=4,
                                                   num_experts_per_tok=2, tie_word_embeddings=False,
                                                   **dict(common, num_hidden_layers=1)))
    elif arch == "qwen3moe":  # ... and 768; head_dim from attention.key_length
        m = T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                                   num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
                                                   tie_word_embeddings=False, **common))
    elif arch == "gpt2":  # transformers' loader keeps n_positions=1024 and n_inner = 4 * n_embd
        m = T.GPT2LMHeadModel(T.GPT2Config(n_embd=256, n_layer=2, n_head=4, n_positions=1024,
                                           vocab_size=len(bpe_vocab()[0])))
    with torch.no_grad():  # norms away from 1, biases away from 0: a mapping slip shows
        for n, p in m.named_parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return m.eval()


TOKENIZER = {"llama": "llama", "qwen2": "gpt2", "qwen3": "llama", "phi3": "llama", "gpt2": "gpt2",
             "qwen2moe": "llama", "qwen3moe": "llama"}


def both(tmp_path, arch, qtype, **kw):
    """(transformers model, zoo model, path) loaded from one GGUF file."""
    path = write_gguf(tmp_path / "m.gguf", arch, hf_model(arch), qtype, tokenizer=TOKENIZER[arch], **kw)
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf",
                                                            dtype=torch.float32).eval()
    return ref, from_gguf(path), path


@torch.no_grad()
def max_diff(ref, model, vocab: int) -> float:
    ids = torch.randint(5, vocab, (2, 12), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 9:] = 0  # a right-padded row
    a = ref(input_ids=ids, attention_mask=mask).logits
    b = model(ids, attention_mask=mask)
    keep = mask.bool()
    return float((a[keep] - b[keep]).abs().max())


QUANTS = [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]
CASES = [("llama", q) for q in QUANTS] + [(a, q) for a in ("qwen2", "qwen3", "phi3", "gpt2", "qwen3moe")
                                          for q in (Q.F16, Q.Q8_0, Q.Q4_0, Q.Q4_K, Q.Q6_K)] + \
    [("qwen2moe", q) for q in (Q.F16, Q.Q8_0, Q.Q4_0)]  # expert width 1408: no 256-blocks (K-quants)


@pytest.mark.parametrize("arch, qtype", CASES, ids=[f"{a}-{q.name}" for a, q in CASES])
def test_logits_match_transformers_loading_the_same_file(tmp_path, arch, qtype):
    ref, model, _ = both(tmp_path, arch, qtype)
    d = max_diff(ref, model, model.spec.vocab_size)
    print(f"GGUF {arch} {qtype.name}: max |Δlogit| {d:.2e}")
    assert d <= 1e-5, d
    assert model.convert_info["quant_types"].get(qtype.name, 0) > 0
    # the weights really were quantised: the zoo model differs from the float source model
    src = hf_model(arch)
    if qtype not in (Q.F32,) and qtype not in K_BLOCKS:
        ids = torch.arange(5, 17)[None]
        with torch.no_grad():
            assert (src(ids).logits - model(ids)).abs().max() > 1e-6


@pytest.mark.parametrize("arch", ["llama", "qwen2", "phi3"])
def test_the_tokenizer_matches_transformers_gguf_tokenizer(tmp_path, arch):
    write_gguf(tmp_path / "m.gguf", arch, hf_model(arch), Q.F16, tokenizer=TOKENIZER[arch])
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    tok = from_gguf(tmp_path / "m.gguf").tokenizer
    texts = ["hello world", "the hello", " hello  world!", "héllo 中文 user", "<|im_start|>user\nhello<|im_end|>",
             "\n\n  tabs\tand spaces  "]
    for t in texts:
        want = ref.encode(t, add_special_tokens=False)
        assert tok.encode(t) == want, t
        assert tok.decode(want) == ref.decode(want), t
    assert tok.eos_id == ref.eos_token_id


def test_convert_cli_then_run_and_the_template_travels(tmp_path):
    from click.testing import CliRunner

    from zoo.cli import cli

    write_gguf(tmp_path / "m.gguf", "llama", hf_model("llama"), Q.Q4_K)
    r = CliRunner().invoke(cli, ["convert", str(tmp_path / "m.gguf"), str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    assert "Q4_K (16 tensors)" in r.output and "tokenizer: the GGUF tokenizer" in r.output
    r = CliRunner().invoke(cli, ["run", str(tmp_path / "out"), "--prompt", "hello world", "-n", "5"])
    assert r.exit_code == 0, r.output
    loaded = zoo.load(tmp_path / "out")
    direct = from_gguf(tmp_path / "m.gguf")
    ids = torch.tensor([[5, 6, 7, 300]])
    with torch.no_grad():
        assert torch.equal(loaded(ids), direct(ids))
    assert loaded.tokenizer.encode("hello world") == direct.tokenizer.encode("hello world")
    from zoo.run.chat import template_of

    assert template_of(direct)["template"] == template_of(loaded)["template"] == TEMPLATE
    assert template_of(loaded)["special_tokens"] == {"bos_token": "<s>", "eos_token": "<|im_end|>",
                                                     "pad_token": "<unk>"}


def test_the_chat_template_is_one_dict_on_every_path(tmp_path):
    """from_gguf, `zoo convert` + zoo.load, and zoo.load of a checkpoint saved again all give
    model.chat_template as the same dict (it was a dict after from_gguf and missing after zoo.load)."""
    from click.testing import CliRunner

    from zoo.cli import cli

    write_gguf(tmp_path / "m.gguf", "llama", hf_model("llama"), Q.Q8_0)
    direct = from_gguf(tmp_path / "m.gguf")
    assert CliRunner().invoke(cli, ["convert", str(tmp_path / "m.gguf"), str(tmp_path / "a")]).exit_code == 0
    loaded = zoo.load(tmp_path / "a")
    zoo.save(loaded, tmp_path / "b")
    again = zoo.load(tmp_path / "b", verify=True)
    want = {"template": TEMPLATE, "special_tokens": {"bos_token": "<s>", "eos_token": "<|im_end|>",
                                                     "pad_token": "<unk>"}}
    for m in (direct, loaded, again):
        assert type(m.chat_template) is dict and m.chat_template == want


def test_a_stored_chat_template_that_is_not_one_is_refused_at_load(tmp_path):
    from safetensors.torch import load_file, save_file

    write_gguf(tmp_path / "m.gguf", "llama", hf_model("llama"), Q.Q8_0)
    file = zoo.save(from_gguf(tmp_path / "m.gguf"), tmp_path / "a.safetensors")
    meta = zoo.read_metadata(file)
    for bad in ('["not", "an", "object"]', '{"template": 5}', "{nope"):
        save_file(load_file(file), tmp_path / "bad.safetensors", metadata={**meta, "zoo.extra.chat_template": bad})
        with pytest.raises(zoo.CheckpointError, match="zoo.extra.chat_template") as e:
            zoo.load(tmp_path / "bad.safetensors")
        assert e.value.fix


@pytest.mark.parametrize("file_type", [None, 7])
def test_the_card_of_a_gguf_conversion_says_where_it_came_from(tmp_path, file_type):
    """Not "converted from transformers": the GGUF file, its architecture and quantisation, and that
    no parity certificate exists (zoo convert, zoo check and the UI's card print this line)."""
    from click.testing import CliRunner

    from zoo.cli import cli
    from zoo.convert import certificate_text

    extra = {"general.file_type": (file_type, gguf.GGUFValueType.UINT32)} if file_type else None
    write_gguf(tmp_path / "m.gguf", "llama", hf_model("llama"), Q.Q8_0, extra=extra)
    r = CliRunner().invoke(cli, ["convert", str(tmp_path / "m.gguf"), str(tmp_path / "out")])
    assert r.exit_code == 0, r.output
    text = certificate_text(zoo.read_metadata(tmp_path / "out"))
    assert text.startswith('Converted from the GGUF file m.gguf ("zoo test"; architecture llama; ')
    assert ("quantised Q8_0: Q8_0 x" if file_type else "stored as Q8_0 x") in text
    assert "without a parity certificate" in text and "transformers folder" in text
    assert "from transformers" not in text and text in r.output
    r = CliRunner().invoke(cli, ["check", str(tmp_path / "out"), "--no-digest"])
    assert r.exit_code == 0 and text in r.output


def test_the_chat_prompt_equals_transformers_gguf_tokenizer_apply_chat_template(tmp_path):
    import zoo.run.chat

    tpl = "{{ bos_token }}" + TEMPLATE + "{{ eos_token if not add_generation_prompt }}"
    write_gguf(tmp_path / "m.gguf", "llama", hf_model("llama"), Q.Q8_0, template=tpl)
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    model = from_gguf(tmp_path / "m.gguf")
    msgs = [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "the hello"},
            {"role": "user", "content": "héllo"}]
    for gen in (True, False):
        want = ref.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
        assert zoo.run.chat.prompt(model, msgs, add_generation_prompt=gen) == want
        assert model.tokenizer.encode(want) == list(ref.apply_chat_template(
            msgs, tokenize=True, add_generation_prompt=gen, return_dict=False))


def test_dtype_is_honoured(tmp_path):
    write_gguf(tmp_path / "m.gguf", "llama", hf_model("llama"), Q.Q8_0)
    m = from_gguf(tmp_path / "m.gguf", dtype="bfloat16")
    assert {p.dtype for p in m.parameters()} == {torch.bfloat16}


# ---------------------------------------------------------------------- bad input
def test_not_a_gguf_file(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_text("hello")
    with pytest.raises(ConvertError, match="not a GGUF file"):
        from_gguf(p)
    with pytest.raises(ConvertError, match="no such file"):
        from_gguf(tmp_path / "missing.gguf")
    os.mkfifo(tmp_path / "fifo.gguf")
    with pytest.raises(ConvertError, match="FIFO"):
        from_gguf(tmp_path / "fifo.gguf")


@pytest.mark.parametrize("cut", [20, 200, 5000, 100_000])
def test_a_truncated_file_is_a_convert_error(tmp_path, cut):
    path = write_gguf(tmp_path / "m.gguf", "llama", hf_model("llama"), Q.Q8_0)
    data = path.read_bytes()
    path.write_bytes(data[:cut] if cut < 10_000 else data[:-cut])
    with pytest.raises(ConvertError) as e:
        from_gguf(path)
    assert e.value.fix


def test_unsupported_architecture_names_the_options(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "mamba")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ConvertError, match="architecture 'mamba'") as e:
        from_gguf(tmp_path / "m.gguf")
    assert e.value.where == "gguf:general.architecture" and "llama" in e.value.options


def test_unsupported_quant_type_names_the_tensor_and_types(tmp_path):
    hf = hf_model("llama")
    path = write_gguf(tmp_path / "m.gguf", "llama", hf, Q.Q8_0, skip={"blk.1.ffn_down.weight"})
    # append the skipped tensor as IQ4_NL blocks (18 bytes per 32 values): a type zoo does not read
    w = gguf.GGUFWriter(str(tmp_path / "n.gguf"), "llama")
    r = gguf.GGUFReader(str(path))
    for key, f in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            w.add_key_value(key, f.contents(), t, sub_type=f.types[-1])
        else:
            w.add_key_value(key, f.contents(), t)
    for t in r.tensors:
        w.add_tensor(t.name, np.array(t.data), raw_shape=t.data.shape, raw_dtype=t.tensor_type)
    w.add_tensor("blk.1.ffn_down.weight", np.zeros((256, 512 // 32 * 18), np.uint8),
                 raw_shape=(256, 512 // 32 * 18), raw_dtype=Q.IQ4_NL)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ConvertError, match="stored as IQ4_NL") as e:
        from_gguf(tmp_path / "n.gguf")
    assert e.value.where == "gguf:blk.1.ffn_down.weight" and "Q4_K" in e.value.options


@pytest.mark.parametrize("key, value, match", [
    ("llama.rope.scaling.type", ("linear", gguf.GGUFValueType.STRING), "rope.scaling.type"),
    ("llama.rope.scaling.factor", (4.0, gguf.GGUFValueType.FLOAT32), "rope.scaling.factor"),
    ("llama.attention.sliding_window", (64, gguf.GGUFValueType.UINT32), "sliding_window"),
])
def test_options_zoo_would_get_wrong_are_refused_by_key(tmp_path, key, value, match):
    write_gguf(tmp_path / "m.gguf", "llama", hf_model("llama"), Q.F16, extra={key: value})
    with pytest.raises(ConvertError, match=match) as e:
        from_gguf(tmp_path / "m.gguf")
    assert e.value.where == f"gguf:{key}"


def test_a_missing_tensor_and_a_bad_value_name_what_is_wrong(tmp_path):
    write_gguf(tmp_path / "a.gguf", "llama", hf_model("llama"), Q.F16, skip={"blk.1.attn_v.weight"})
    with pytest.raises(ConvertError, match="attn.v_proj|v_proj"):
        from_gguf(tmp_path / "a.gguf")
    write_gguf(tmp_path / "b.gguf", "llama", hf_model("llama"), Q.F16, rope_dims=32)
    with pytest.raises(ConvertError, match="rotates part of a 64-wide head") as e:
        from_gguf(tmp_path / "b.gguf")
    assert e.value.where == "gguf:llama.rope.dimension_count"


BLOCK_TYPES = [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K]


@pytest.mark.parametrize("qtype", BLOCK_TYPES, ids=[q.name for q in BLOCK_TYPES])
def test_dequantised_values_match_an_independent_dequantiser(tmp_path, qtype):
    """zoo's tensors (the gguf library's numpy dequantiser, shapes in torch order) against
    transformers' own torch dequantiser (transformers.integrations.gguf.dequant, written apart from
    the gguf library), value for value, on the embedding and a projection of a real file."""
    dq = pytest.importorskip("transformers.integrations.gguf.dequant")
    from zoo.convert.gguf import GGUFFile, dequantize

    path = write_gguf(tmp_path / "m.gguf", "llama", hf_model("llama"), qtype)
    g = GGUFFile(path)
    for name in ("token_embd.weight", "blk.1.ffn_down.weight", "blk.0.attn_k.weight"):
        t = g.tensors[name]
        ours = dequantize(g, name, torch.float32)
        raw = torch.from_numpy(np.array(t.data, dtype=np.uint8)).reshape(-1)
        ref = dq.dequantize(raw, int(t.tensor_type), torch.float32).reshape(ours.shape)
        assert torch.isfinite(ours).all() and ours.std() > 0
        torch.testing.assert_close(ours, ref, rtol=0, atol=0)


def test_a_file_over_the_memory_budget_is_refused_before_dequantising(tmp_path, monkeypatch):
    import zoo.convert.gguf as G

    path = write_gguf(tmp_path / "m.gguf", "llama", hf_model("llama"), Q.Q8_0)
    calls = []
    monkeypatch.setattr(G, "dequantize", lambda *a, **k: calls.append(a) or torch.zeros(1))
    with pytest.raises(ConvertError, match="needs about .* GiB .* more than the budget") as e:
        from_gguf(path, budget=1_000_000)  # the model is ~1.3M parameters: 10.8 MB in float32, twice
    assert "bfloat16" in e.value.fix and calls == []


def test_weights_that_decode_to_nan_are_refused_unless_allowed(tmp_path):
    hf = hf_model("llama")
    with torch.no_grad():
        hf.model.norm.weight[3] = float("nan")  # an F32 tensor in every file
    path = write_gguf(tmp_path / "m.gguf", "llama", hf, Q.Q8_0)
    with pytest.raises(ConvertError, match="NaN or infinity") as e:
        from_gguf(path)
    assert e.value.where == "gguf:output_norm.weight"
    assert from_gguf(path, allow_nonfinite=True).convert_info["nonfinite"] == ["output_norm.weight"]


@pytest.mark.parametrize("arch, qtype", [("llama", Q.Q4_K), ("qwen3moe", Q.Q8_0), ("gpt2", Q.Q6_K)])
def test_greedy_generation_equals_transformers_generate(tmp_path, arch, qtype):
    ref, model, _ = both(tmp_path, arch, qtype)
    ids = torch.randint(5, model.spec.vocab_size, (2, 7), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        want = ref.generate(ids, max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)
    got = model.generate(ids, 10)
    assert torch.equal(got, want)

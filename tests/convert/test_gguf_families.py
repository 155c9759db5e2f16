"""Issue 24, goal 3, continued: GGUF files of Gemma 2, Gemma 3 (text), Mistral and T5.

As in tests/convert/test_gguf.py (whose vocabulary and K-quant block helpers are reused), each file is
written here with the ``gguf`` library from a random transformers model, the way llama.cpp's
``convert_hf_to_gguf.py`` writes that architecture: tensor names from the library's own
``TensorNameMap``; Gemma's norms stored as ``1 + w`` and its tied head left out; a ``llama`` file
named "mistral" for Mistral; T5's ``enc.``/``dec.`` stacks with the relative-position bias of block
0, a Unigram (``t5``) vocabulary with ``[PADn]`` sentinels.  The reference is transformers loading
the same file (``from_pretrained(dir, gguf_file=...)``); for T5 with one correction, the gated
FFN's activation (see ``test_t5_logits``).  Logits within 1e-5 in float32, the same token ids.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

from gguf import GGMLQuantizationType as Q  # noqa: E402
from test_gguf import K_BLOCKS, add_decoder_keys, max_diff, random_blocks, sp_vocab  # noqa: E402

from zoo.convert import ConvertError, from_gguf  # noqa: E402

V = 320  # vocabulary rows (a multiple of nothing in particular: blocks run along d_model)


# ---------------------------------------------------------------------- vocabularies
def gemma_vocab():
    """A Gemma-style SentencePiece vocabulary: Gemma's specials and turn markers, byte fallback,
    pieces whose *scores disagree with their order* (Gemma's merges follow the order), tokens of
    real spaces ("  ", which the tokenizer must spell "▁▁"), CJK pieces, unused padding."""
    toks = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    types = [3, 3, 3, 2, 3, 3, 3]
    toks += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    pieces = ["▁", "l", "e", "h", "o", "w", "r", "d", "t", "u", "s", "中", "文", "lo", "ll", "he", "▁h",
              "llo", "hel", "▁he", "hell", "▁hel", "▁hell", "▁hello", "or", "▁w", "▁wo", "rl", "▁wor",
              "ld", "▁world", "th", "▁t", "▁th", "▁the", "us", "er", "▁us", "▁user", "中文", "▁中",
              "  ", "   ", "\n", "\n\n"]
    toks += pieces
    types += [1] * len(pieces)
    scores = [0.0] * (len(toks) - len(pieces)) + [float(i % 7) - 3 for i in range(len(pieces))]
    pad = V - len(toks)
    return toks + [f"<unused{i}>" for i in range(pad)], scores + [-1e9] * pad, types + [5] * pad


def t5_vocab():
    """A T5-style Unigram vocabulary: <pad> </s> <unk>, scored pieces, CJK, filler, and 100
    ``[PADn]`` sentinel placeholders at the end (``<extra_id_99>`` ... ``<extra_id_0>``)."""
    toks = ["<pad>", "</s>", "<unk>"]
    types = [3, 3, 2]
    pieces = ["▁", "h", "e", "l", "o", "w", "r", "d", "t", "u", "s", "!", "中", "文", "▁hello", "▁world",
              "▁he", "llo", "▁wor", "ld", "▁the", "▁user", "er", "▁中文", "▁tabs", "▁and", "▁spaces",
              "é", "▁h", "ll", "a", "n", "p", "c", "b", "i"]
    toks += pieces
    types += [1] * len(pieces)
    scores = [0.0] * 3 + [-2.0 - 0.37 * (i % 11) - 0.01 * i for i in range(len(pieces))]
    fill = V - 100 - len(toks)
    toks += [f"▁x{i}" for i in range(fill)] + [f"[PAD{32000 + i}]" for i in range(100)]
    scores += [-20.0 - i * 0.01 for i in range(fill)] + [0.0] * 100
    types += [1] * fill + [5] * 100
    return toks, scores, types


# ---------------------------------------------------------------------- models and files
def hf_model(arch: str, seed: int = 0):
    """A small random transformers model; widths are multiples of 256 (K-quant blocks)."""
    torch.manual_seed(seed)
    T = transformers
    common = dict(hidden_size=256, intermediate_size=512, max_position_embeddings=128, rms_norm_eps=1e-5,
                  vocab_size=V, num_attention_heads=4, num_key_value_heads=2)
    if arch == "gemma2":  # a window of 8 on the 12-token test batch: layer 0 is local
        m = T.Gemma2ForCausalLM(T.Gemma2Config(head_dim=64, sliding_window=8, num_hidden_layers=2, **common))
    elif arch == "gemma3":  # 6 layers: five local (rope base 10 000), one global (the file's 1e6)
        m = T.Gemma3ForCausalLM(T.Gemma3TextConfig(head_dim=64, sliding_window=8, num_hidden_layers=6, **common))
    elif arch == "mistral":
        m = T.MistralForCausalLM(T.MistralConfig(num_hidden_layers=2, tie_word_embeddings=False, **common))
    elif arch == "t5":  # FLAN-T5's shape: gated FFN, a separate output matrix
        m = T.T5ForConditionalGeneration(T.T5Config(vocab_size=V, d_model=256, d_kv=64, d_ff=512, num_layers=2,
                                                    num_heads=4, feed_forward_proj="gated-gelu",
                                                    tie_word_embeddings=False))
        with torch.no_grad():  # transformers 5 ties T5's head whatever the config says: untie it
            m.lm_head.weight = torch.nn.Parameter(torch.randn_like(m.lm_head.weight) * 0.05)
    elif arch == "t5encoder":  # T5EncoderModel: the text encoder of image models
        m = T.T5EncoderModel(T.T5Config(vocab_size=V, d_model=256, d_kv=64, d_ff=512, num_layers=2, num_heads=4,
                                        feed_forward_proj="gated-gelu"))
    with torch.no_grad():  # norms away from 1, biases away from 0: a mapping slip shows
        for n, p in m.named_parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
            if "relative_attention_bias" in n:
                p.copy_(torch.randn_like(p))
    return m.eval()


GGUF_ARCH = {"gemma2": "gemma2", "gemma3": "gemma3", "mistral": "llama", "t5": "t5", "t5encoder": "t5encoder"}


def _tensor(w, name: str, a: np.ndarray, qtype, rng):
    """One tensor as llama.cpp stores it: 1-D in F32; a row width that does not fill the type's
    blocks (T5's (buckets, heads) bias) in F16; the rest in ``qtype``."""
    block = 256 if qtype in K_BLOCKS else gguf.GGML_QUANT_SIZES[qtype][0]
    if a.ndim < 2 or qtype == Q.F32:
        w.add_tensor(name, np.ascontiguousarray(a, dtype=np.float32))
    elif qtype == Q.F16 or a.shape[-1] % block:
        w.add_tensor(name, a.astype(np.float16))
    elif qtype in K_BLOCKS:
        qa = random_blocks(a.shape, qtype, rng)
        w.add_tensor(name, qa, raw_shape=qa.shape, raw_dtype=qtype)
    else:
        qa = gguf.quants.quantize(a, qtype)
        w.add_tensor(name, qa, raw_shape=qa.shape, raw_dtype=qtype)


def write_gguf(path, arch: str, hf, qtype, *, name=None, extra=None, skip=()):
    """Write ``hf`` as llama.cpp's converter would; return the path."""
    c = hf.config
    w = gguf.GGUFWriter(str(path), GGUF_ARCH[arch])
    w.add_name(name or ("mistral" if arch == "mistral" else "zoo test"))
    if arch.startswith("t5"):
        w.add_context_length(512)
        w.add_embedding_length(c.d_model)
        w.add_feed_forward_length(c.d_ff)
        w.add_block_count(c.num_layers)
        w.add_head_count(c.num_heads)
        w.add_key_length(c.d_kv)
        w.add_value_length(c.d_kv)
        w.add_layer_norm_eps(c.layer_norm_epsilon)
        w.add_layer_norm_rms_eps(c.layer_norm_epsilon)
        w.add_relative_attn_buckets_count(c.relative_attention_num_buckets)
        w.add_decoder_start_token_id(0)
        toks, scores, types = t5_vocab()
        w.add_tokenizer_model("t5")
        w.add_eos_token_id(1)
        w.add_unk_token_id(2)
        w.add_pad_token_id(0)
    else:
        hd = add_decoder_keys(w, c)
        if arch == "mistral":
            w.add_rope_freq_base(c.rope_parameters["rope_theta"])
            w.add_rope_dimension_count(hd)
            toks, scores, types = sp_vocab(V)
            w.add_bos_token_id(1)
            w.add_eos_token_id(4)
        else:  # Gemma: llama.cpp writes the window (and Gemma 2's caps, Gemma 3's global rope base)
            w.add_sliding_window(c.sliding_window)
            if arch == "gemma2":
                w.add_attn_logit_softcapping(c.attn_logit_softcapping)
                w.add_final_logit_softcapping(c.final_logit_softcapping)
            else:
                w.add_rope_freq_base(c.rope_parameters["full_attention"]["rope_theta"])
            toks, scores, types = gemma_vocab()
            w.add_add_space_prefix(False)
            w.add_bos_token_id(2)
            w.add_eos_token_id(1)
            w.add_unk_token_id(3)
        w.add_tokenizer_model("llama")
        w.add_pad_token_id(0)
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    for key, value in (extra or {}).items():
        w.add_key_value(key, value[0], value[1])
    layers = c.num_layers if arch.startswith("t5") else c.num_hidden_layers
    names = gguf.get_tensor_name_map(getattr(gguf.MODEL_ARCH, GGUF_ARCH[arch].upper()), layers)
    tied = arch.startswith("gemma")  # llama.cpp leaves out Gemma's tied head
    rng = np.random.default_rng(0)
    for k, v in hf.state_dict().items():
        base, suffix = k.rsplit(".", 1)
        if "rotary" in base or base.endswith("embed_tokens") and arch.startswith("t5") or (tied and base == "lm_head"):
            continue
        gname = names.get_name(base) + "." + suffix
        if gname in skip:
            continue
        a = v.detach().float().numpy()
        if arch == "mistral" and gname.endswith(("attn_q.weight", "attn_k.weight")):  # llama.cpp's permute
            nh = c.num_attention_heads if "attn_q" in gname else c.num_key_value_heads
            a = a.reshape(nh, 2, a.shape[0] // nh // 2, *a.shape[1:]).swapaxes(1, 2).reshape(a.shape)
        if arch.startswith("gemma") and gname.endswith("norm.weight"):
            a = a + 1  # llama.cpp stores Gemma's (1 + w)
        _tensor(w, gname, a, qtype, rng)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def load_ref(tmp_path, arch):
    if arch == "t5":  # transformers' loader builds T5's gated FFN with ReLU; llama.cpp (and FLAN-T5)
        # use the tanh GELU, which zoo follows: the reference is transformers' load of the same file
        # with that one config value corrected
        return transformers.AutoModelForSeq2SeqLM.from_pretrained(
            str(tmp_path), gguf_file="m.gguf", dtype=torch.float32, dense_act_fn="gelu_new").eval()
    if arch == "mistral":
        return mistral_ref(tmp_path / "m.gguf")
    return transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf",
                                                            dtype=torch.float32).eval()


def mistral_ref(path):
    """transformers 5.24 reads a ``llama`` file named "mistral" as a MistralConfig, then fails to map
    its tensors (gguf-py has no "mistral" architecture: ``from_pretrained`` raises
    NotImplementedError).  The reference is assembled from transformers' own two halves: that config,
    and the tensors its GGUF reader decodes (un-permuted) for the llama model of the same shape."""
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    cfg = transformers.AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    assert cfg.model_type == "mistral"
    with pytest.raises(NotImplementedError, match="mistral"):
        transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
    with torch.device("meta"):
        shape = transformers.LlamaForCausalLM(transformers.LlamaConfig(**{
            k: v for k, v in cfg.to_dict().items() if k not in ("model_type", "sliding_window")}))
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=shape)["tensors"]
    ref = transformers.MistralForCausalLM(cfg).eval()
    missing, unexpected = ref.load_state_dict(tensors, strict=False)
    assert not missing and not unexpected
    return ref


def both(tmp_path, arch, qtype, **kw):
    path = write_gguf(tmp_path / "m.gguf", arch, hf_model(arch), qtype, **kw)
    return load_ref(tmp_path, arch), from_gguf(path)


@torch.no_grad()
def t5_diff(ref, model) -> float:
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(3, V, (2, 12), generator=g), torch.randint(3, V, (2, 6), generator=g)
    sm, tm = torch.ones_like(src), torch.ones_like(tgt)
    sm[1, 8:] = 0
    tm[1, 4:] = 0
    a = ref(input_ids=src, attention_mask=sm, decoder_input_ids=tgt, decoder_attention_mask=tm).logits
    b = model(src, tgt, src_padding=sm, tgt_padding=tm)
    return float((a - b).abs()[tm.bool()].max())


# ---------------------------------------------------------------------- parity
QUANTS = [Q.F32, Q.F16, Q.Q8_0, Q.Q4_0, Q.Q4_K]
CASES = [(a, q) for a in ("gemma2", "gemma3", "mistral", "t5") for q in QUANTS]


@pytest.mark.parametrize("arch, qtype", CASES, ids=[f"{a}-{q.name}" for a, q in CASES])
def test_logits_match_transformers_loading_the_same_file(tmp_path, arch, qtype):
    ref, model = both(tmp_path, arch, qtype)
    d = t5_diff(ref, model) if arch == "t5" else max_diff(ref, model, V)
    print(f"GGUF {arch} {qtype.name}: max |Δlogit| {d:.2e}")
    assert d <= 1e-5, d
    assert model.convert_info["quant_types"].get(qtype.name, 0) > 0
    assert model.convert_info["model_type"] == {"gemma3": "gemma3_text"}.get(arch, arch)


@pytest.mark.parametrize("qtype", [Q.F16, Q.Q8_0, Q.Q4_K], ids=lambda q: q.name)
def test_t5_encoder_hidden_states_match_transformers(tmp_path, qtype):
    """``t5encoder`` files: transformers' loader builds T5EncoderModel (its gated-ReLU FFN corrected
    as for T5); zoo the encoder-only T5.  The last hidden states on a right-padded batch."""
    write_gguf(tmp_path / "m.gguf", "t5encoder", hf_model("t5encoder"), qtype)
    ref = transformers.T5EncoderModel.from_pretrained(str(tmp_path), gguf_file="m.gguf", dtype=torch.float32,
                                                      dense_act_fn="gelu_new").eval()
    model = from_gguf(tmp_path / "m.gguf")
    ids = torch.randint(3, V, (2, 12), generator=torch.Generator().manual_seed(1))
    am = torch.ones_like(ids)
    am[1, 8:] = 0
    with torch.no_grad():
        a = ref(input_ids=ids, attention_mask=am).last_hidden_state
        b = model(ids, attention_mask=am, return_hidden=True)
    d = float((a - b).abs()[am.bool()].max())
    print(f"GGUF t5encoder {qtype.name}: max |Δhidden| {d:.2e}")
    assert d <= 1e-5 and a.abs().max() > 0.1
    assert model.spec.arch == "encoder" and model.convert_info["quant_types"].get(qtype.name, 0) > 0


def test_config_values_match_what_transformers_reads(tmp_path):
    """The values the files do not state come out as transformers' loader sets them."""
    for arch in ("gemma2", "gemma3", "mistral"):
        ref, model = both(tmp_path, arch, Q.F16)
        st = model.spec.stack("decoder")
        want = getattr(ref.config, "query_pre_attn_scalar", None) or ref.config.head_dim
        assert abs((st.attn_scale or st.head_dim ** -0.5) - want ** -0.5) < 1e-12, arch
        windows = {m.config.window for i in range(st.num_layers) for m in st.layer_mask(i)
                   if m.kind == "sliding_window"}
        assert windows == {ref.config.sliding_window}, arch
        if arch != "mistral":
            local = ["sliding_window" in {m.kind for m in st.layer_mask(i)} for i in range(st.num_layers)]
            assert local == [t == "sliding_attention" for t in ref.config.layer_types], arch


def test_t5_reference_note_holds_and_gemma2_caps_are_read(tmp_path):
    """Why T5's reference is corrected (transformers' loader builds gated ReLU), and that Gemma 2's
    soft-caps come from the file (zoo) where transformers keeps Gemma2Config's defaults."""
    write_gguf(tmp_path / "m.gguf", "t5", hf_model("t5"), Q.F16)
    cfg = transformers.AutoConfig.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    assert cfg.is_gated_act and cfg.dense_act_fn == "relu"
    assert from_gguf(tmp_path / "m.gguf").spec.stack("decoder").ffn.config.activation == "gelu_tanh"
    hf = hf_model("gemma2")
    write_gguf(tmp_path / "g.gguf", "gemma2", hf, Q.F16,
               extra={"gemma2.final_logit_softcapping": (10.0, gguf.GGUFValueType.FLOAT32)})
    assert from_gguf(tmp_path / "g.gguf").spec.logit_softcap == 10.0


GREEDY = [("gemma2", Q.Q8_0), ("gemma3", Q.Q4_K), ("mistral", Q.Q4_0), ("t5", Q.Q8_0)]


@pytest.mark.parametrize("arch, qtype", GREEDY, ids=[a for a, _ in GREEDY])
def test_greedy_generation_equals_transformers_generate(tmp_path, arch, qtype):
    ref, model = both(tmp_path, arch, qtype)
    ids = torch.randint(7, V - 100, (2, 7), generator=torch.Generator().manual_seed(3))
    kw = dict(max_new_tokens=10, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        if arch == "t5":
            want = ref.generate(input_ids=ids, decoder_start_token_id=0, **kw)
            got = model.generate(ids, max_new_tokens=10, decoder_start_id=0)
        else:
            want, got = ref.generate(ids, **kw), model.generate(ids, 10)
    assert torch.equal(got, want)


# ---------------------------------------------------------------------- tokenizers
TEXTS = ["hello world", "the hello", " hello  world!", "héllo 中文 user", "\n\n  tabs\tand spaces  ",
         "hellohello   world", "<unk> and <pad>"]
EXTRA_TEXTS = {"gemma2": ["<start_of_turn>user\nhello<end_of_turn>\n", "<bos>hello"],
               "gemma3": ["中文中文 the user", "  hell  o "], "mistral": ["<|im_start|>user\nhello<|im_end|>"],
               "t5": ["<extra_id_0> hello <extra_id_1> world</s>", "Hello World", "hello\u3000world"]}


@pytest.mark.parametrize("arch", ["gemma2", "gemma3", "mistral", "t5"])
def test_the_tokenizer_matches_transformers_gguf_tokenizer(tmp_path, arch):
    write_gguf(tmp_path / "m.gguf", arch, hf_model(arch), Q.F16)
    ref = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    tok = from_gguf(tmp_path / "m.gguf").tokenizer
    for t in TEXTS + EXTRA_TEXTS[arch]:
        want = ref.encode(t, add_special_tokens=False)
        assert tok.encode(t) == want, (t, ref.convert_ids_to_tokens(want))
        assert tok.decode(want) == ref.decode(want), t
    assert tok.eos_id == ref.eos_token_id


# ---------------------------------------------------------------------- refused
def test_a_ungated_t5_and_umt5_are_refused_by_name(tmp_path):
    hf = hf_model("t5")
    skip = {f"{s}.blk.{i}.ffn_gate.weight" for s in ("enc", "dec") for i in range(2)}
    write_gguf(tmp_path / "a.gguf", "t5", hf, Q.F16, skip=skip)
    with pytest.raises(ConvertError, match="gated feed-forward") as e:
        from_gguf(tmp_path / "a.gguf")
    assert e.value.where == "gguf:enc.blk.0.ffn_gate.weight"
    write_gguf(tmp_path / "b.gguf", "t5", hf, Q.F16, name="umt5-small")
    with pytest.raises(ConvertError, match="UMT5") as e:
        from_gguf(tmp_path / "b.gguf")
    assert e.value.where == "gguf:general.name"


def test_gemma3_linear_rope_scaling_is_applied_to_the_global_layers(tmp_path):
    """Gemma 3 4B-27B files carry linear rope scaling x8 (``rope.scaling.type`` / ``.factor``) of the
    global layers.  transformers' loader drops it; zoo applies it as llama.cpp and the original config
    do.  References: the original transformers model (its config scales ``full_attention``), and
    transformers' load of the file with that config value restored; the plain load differs."""
    rope = {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}
    torch.manual_seed(0)
    src = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(
        hidden_size=256, intermediate_size=512, max_position_embeddings=128, rms_norm_eps=1e-5, vocab_size=V,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=8, num_hidden_layers=6,
        rope_parameters=rope)).eval()
    with torch.no_grad():
        for p in src.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    scaled = {"gemma3.rope.scaling.type": ("linear", gguf.GGUFValueType.STRING),
              "gemma3.rope.scaling.factor": (8.0, gguf.GGUFValueType.FLOAT32)}
    write_gguf(tmp_path / "m.gguf", "gemma3", src, Q.F32, extra=scaled)
    model = from_gguf(tmp_path / "m.gguf")
    assert max_diff(src, model, V) <= 1e-5
    fixed = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf", dtype=torch.float32,
                                                              rope_parameters=rope).eval()
    assert max_diff(fixed, model, V) <= 1e-5
    plain = load_ref(tmp_path, "gemma3")
    assert plain.config.rope_parameters["full_attention"]["rope_type"] == "default"
    assert max_diff(plain, model, V) > 1e-3  # the scaling matters on this batch


def test_other_rope_scalings_and_a_llama_window_stay_refused(tmp_path):
    write_gguf(tmp_path / "a.gguf", "gemma3", hf_model("gemma3"), Q.F16,
               extra={"gemma3.rope.scaling.type": ("yarn", gguf.GGUFValueType.STRING),
                      "gemma3.rope.scaling.factor": (8.0, gguf.GGUFValueType.FLOAT32)})
    with pytest.raises(ConvertError, match="rope.scaling.type='?yarn") as e:
        from_gguf(tmp_path / "a.gguf")
    assert e.value.where == "gguf:gemma3.rope.scaling.type" and "linear" in e.value.options
    write_gguf(tmp_path / "b.gguf", "gemma2", hf_model("gemma2"), Q.F16,
               extra={"gemma2.rope.scaling.factor": (8.0, gguf.GGUFValueType.FLOAT32)})
    with pytest.raises(ConvertError, match="rope scaling") as e:
        from_gguf(tmp_path / "b.gguf")
    assert e.value.where == "gguf:gemma2.rope.scaling.factor"
    write_gguf(tmp_path / "c.gguf", "mistral", hf_model("mistral"), Q.F16,
               extra={"llama.attention.sliding_window": (64, gguf.GGUFValueType.UINT32)})
    with pytest.raises(ConvertError, match="sliding") as e:
        from_gguf(tmp_path / "c.gguf")
    assert e.value.where == "gguf:llama.attention.sliding_window"


def test_a_llama_file_named_otherwise_stays_llama(tmp_path):
    """transformers reads only a file named exactly "mistral" as Mistral; so does zoo."""
    write_gguf(tmp_path / "m.gguf", "mistral", hf_model("mistral"), Q.F16, name="Mistral-7B-v0.3")
    ref = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf",
                                                           dtype=torch.float32).eval()
    model = from_gguf(tmp_path / "m.gguf")
    assert ref.config.model_type == model.convert_info["model_type"] == "llama"
    assert max_diff(ref, model, V) <= 1e-5


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
def test_a_27b_shaped_gemma_gets_llama_cpps_attention_scale(tmp_path, arch):
    """The file does not state ``query_pre_attn_scalar``; llama.cpp derives ``d_model / heads`` for
    the 27B size class, recognised by its layer count (46 / 62).  A narrow model with that many
    layers and ``query_pre_attn_scalar = d_model / heads`` (32, unlike head_dim 16 and the default
    256) is the original; zoo's load equals it, transformers' GGUF load (256) does not."""
    T = transformers
    layers = {"gemma2": 46, "gemma3": 62}[arch]
    cfg = dict(hidden_size=128, intermediate_size=64, max_position_embeddings=128, rms_norm_eps=1e-5,
               vocab_size=V, num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
               num_hidden_layers=layers, query_pre_attn_scalar=32)
    torch.manual_seed(0)
    src = (T.Gemma2ForCausalLM(T.Gemma2Config(**cfg)) if arch == "gemma2"
           else T.Gemma3ForCausalLM(T.Gemma3TextConfig(**cfg))).eval()
    with torch.no_grad():
        for p in src.parameters():
            p.mul_(4.0)  # sharper attention: a wrong scale shows in the logits
    write_gguf(tmp_path / "m.gguf", arch, src, Q.F32)
    model = from_gguf(tmp_path / "m.gguf")
    assert max_diff(src, model, V) <= 1e-5
    # transformers' GGUF config reader keeps 256; a model run with it computes something else
    read = T.AutoConfig.from_pretrained(str(tmp_path), gguf_file="m.gguf")
    assert read.query_pre_attn_scalar == 256
    plain = type(src)(type(src.config)(**{**cfg, "query_pre_attn_scalar": 256})).eval()
    plain.load_state_dict(src.state_dict())
    assert max_diff(plain, model, V) > 1e-4

"""Exact reproduction of GPT-2, BERT, Llama and T5: a 2-layer random-init ``transformers`` model (built
from a config object, never downloaded) -> ``zoo.convert`` -> the same logits / hidden states to
1e-5 in float32 on padded batches, before and after a zoo.save / zoo.load round trip."""
import json

import pytest
import torch

import zoo
from zoo.convert import ConvertError, convert_state, from_pretrained, from_transformers, to_transformers

T = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
# the random-init helpers every conversion test shares (convert_cases draws the same tensors)
from convert_cases import B, L, TOL, V, maxdiff, randomize  # noqa: E402
from convert_cases import OnCuda, padded as batch  # noqa: E402


# ---------------------------------------------------------------------- the four families
def gpt2(**kw):
    cfg = dict(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64)
    return randomize(T.GPT2LMHeadModel(T.GPT2Config(**cfg, **kw, attn_implementation="eager")))


def bert(mlm=True, **kw):
    cfg = T.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=64, max_position_embeddings=64, attn_implementation="eager", **kw)
    return randomize(T.BertForMaskedLM(cfg) if mlm else T.BertModel(cfg))


def llama(**kw):
    cfg = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64,
               rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    cfg.update(kw)
    return randomize(T.LlamaForCausalLM(T.LlamaConfig(**cfg, attn_implementation="eager")))


def t5(**kw):
    cfg = dict(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
               relative_attention_num_buckets=8, relative_attention_max_distance=16)
    cfg.update(kw)
    return randomize(T.T5ForConditionalGeneration(T.T5Config(**cfg, attn_implementation="eager")))


@torch.no_grad()
def untie(hf):
    """A separate output matrix (transformers 5 always ties T5's head; older checkpoints do not)."""
    hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.lm_head.weight) * 0.15)
    return hf


def run(family, hf, z):
    """(hf output, zoo output, mask of positions that must agree) on a padded batch."""
    if family in ("gpt2", "llama"):
        ids, am, pos = batch(left=True)  # left padding: HF needs the positions zoo derives itself
        return hf(ids, attention_mask=am, position_ids=pos).logits, z(ids, attention_mask=am), am
    if family == "t5_encoder":
        ids, am, _ = batch(left=True)  # relative positions: left padding needs nothing special
        return hf(ids, attention_mask=am).last_hidden_state, z(ids, attention_mask=am), am
    if family in ("bert", "bert_model"):
        ids, am, _ = batch()
        tt = (torch.arange(L) >= 4).long().expand(B, L)  # two segments
        out = hf(ids, attention_mask=am, token_type_ids=tt)
        ref = out.logits if family == "bert" else out.last_hidden_state
        return ref, z(ids, attention_mask=am, token_type_ids=tt), am
    src, sm, _ = batch()
    tgt, tm, _ = batch(seed=2)
    tgt, tm = tgt[:, :6], tm[:, :6]
    ref = hf(input_ids=src, attention_mask=sm, decoder_input_ids=tgt, decoder_attention_mask=tm).logits
    return ref, z(src, tgt, src_padding=sm, tgt_padding=tm), tm


CASES = {
    "gpt2": (lambda: gpt2(), "gpt2"),
    "gpt2_relu_untied": (lambda: gpt2(activation_function="relu", tie_word_embeddings=False), "gpt2"),
    "bert_mlm": (lambda: bert(), "bert"),
    "bert_model": (lambda: bert(mlm=False), "bert_model"),
    "llama_gqa_untied": (lambda: llama(), "llama"),
    "llama_bias_headdim_tied": (lambda: llama(attention_bias=True, mlp_bias=True, head_dim=16,
                                              num_key_value_heads=1, tie_word_embeddings=True), "llama"),
    "llama3_rope_scaling_untied": (lambda: llama(max_position_embeddings=64, rope_parameters={
        "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 16}), "llama"),
    "llama_linear_rope_untied": (lambda: llama(rope_parameters={"rope_type": "linear", "rope_theta": 1e4,
                                                                "factor": 4.0}), "llama"),
    "t5_relu_scaled": (lambda: t5(), "t5"),
    "t5_encoder_model": (lambda: randomize(T.T5EncoderModel(T.T5Config(
        vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        feed_forward_proj="gated-gelu", attn_implementation="eager"))), "t5_encoder"),
    "t5_v1_1_gated_untied": (lambda: untie(t5(feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                                              num_decoder_layers=3)), "t5"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_parity(case, tmp_path):
    make, family = CASES[case]
    hf = make()
    with torch.no_grad():
        z = from_transformers(hf)
        ref, out, mask = run(family, hf, z)
        d = maxdiff(ref, out, mask)
        print(f"{case}: max abs diff {d:.2e}")
        assert ref.shape == out.shape and d <= TOL
        assert z.spec.tie_embeddings == ("untied" not in case)
        assert ref.abs().max() > 0.5  # a non-trivial function was compared
        zoo.save(z, tmp_path / "ck")
        z2 = zoo.load(tmp_path / "ck")
        _, out2, _ = run(family, hf, z2)
        assert maxdiff(ref, out2, mask) <= TOL
    assert z2.spec == z.spec


def test_bert_pooler_is_dropped_and_named():
    z = from_transformers(bert(mlm=False))
    assert sorted(z.convert_info["dropped"]) == ["pooler.dense.bias", "pooler.dense.weight"]
    assert z.spec.head.kind == "none" and z.spec.pad_id == 0


@torch.no_grad()
def test_bert_for_pretraining_keeps_mlm_drops_nsp():
    cfg = T.BertConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=64, max_position_embeddings=64, attn_implementation="eager")
    hf = randomize(T.BertForPreTraining(cfg))
    z = from_transformers(hf)
    assert sorted(z.convert_info["dropped"]) == ["bert.pooler.dense.bias", "bert.pooler.dense.weight",
                                                 "cls.seq_relationship.bias", "cls.seq_relationship.weight"]
    ids, am, _ = batch()
    assert maxdiff(hf(ids, attention_mask=am).prediction_logits, z(ids, attention_mask=am), am) <= TOL


def test_specs_say_what_the_models_are():
    s = from_transformers(llama()).spec
    assert (s.positions.kind, s.positions.config.base, s.norm.kind, s.ffn.kind) == ("rope", 500000.0, "rmsnorm", "swiglu")
    assert (s.num_kv_heads, s.tie_embeddings, s.qkv_bias) == (2, False, False)
    s = from_transformers(t5()).spec
    assert s.stack("encoder").attn_scale == 1.0 and s.head_scale == pytest.approx(32 ** -0.5)
    assert s.stack("decoder").positions.kind == "t5_relative" and s.pad_id is None
    s = from_transformers(t5(tie_word_embeddings=False, feed_forward_proj="gated-gelu")).spec
    assert s.head_scale is None and s.ffn.kind == "geglu" and s.ffn.config.activation == "gelu_tanh"
    s = from_transformers(gpt2()).spec
    assert (s.positions.kind, s.ffn.config.activation, s.tie_embeddings) == ("learned", "gelu_tanh", True)


PRESETS = {
    "gpt2": lambda: T.GPT2LMHeadModel(T.GPT2Config()),  # transformers' defaults are these models
    "bert_base": lambda: T.BertForMaskedLM(T.BertConfig()),
    "t5_small": lambda: T.T5ForConditionalGeneration(T.T5Config()),
    "llama_tiny": lambda: T.LlamaForCausalLM(T.LlamaConfig(
        vocab_size=32000, hidden_size=288, intermediate_size=768, num_hidden_layers=6,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5)),
}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_are_what_the_converter_produces(preset):
    """The shipped real-shape presets equal the converted spec of the real configs (built on the
    meta device: no memory, no weights)."""
    with torch.device("meta"):
        hf = PRESETS[preset]()
    spec, _, _ = convert_state(hf.config.to_dict(), hf.state_dict())
    assert zoo.spec(spec, name=preset) == zoo.spec(preset)


@torch.no_grad()
def test_llama_kv_cache_decoding_matches_transformers():
    hf = llama()
    z = from_transformers(hf, attention="eager")
    ids = batch()[0][:1]
    full = hf(ids).logits
    cache = z.new_cache()
    steps = [z(ids[:, :4], cache=cache)] + [z(ids[:, t:t + 1], cache=cache) for t in range(4, L)]
    assert (torch.cat(steps, 1) - full).abs().max() <= TOL


# ---------------------------------------------------------------------- folders and the CLI
def test_save_pretrained_folder_and_cli(tmp_path):
    from click.testing import CliRunner
    from tokenizers import Tokenizer, models, pre_tokenizers

    from zoo.cli import cli

    hf = t5()
    hf.save_pretrained(tmp_path / "hf")
    vocab = {f"w{i}": i for i in range(V - 2)} | {"<pad>": V - 2, "</s>": V - 1}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "hf" / "tokenizer.json"))

    res = CliRunner().invoke(cli, ["convert", str(tmp_path / "hf"), str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "tokenizer" in res.output
    z = zoo.load(tmp_path / "out")
    assert z.tokenizer.encode("w5 w7 w3") == [5, 7, 3]
    assert json.loads(z.checkpoint_metadata["zoo.extra.converted_from"])["model_type"] == "t5"
    with torch.no_grad():
        ref, out, mask = run("t5", hf, z)
    assert maxdiff(ref, out, mask) <= TOL
    direct = from_pretrained(tmp_path / "hf", tokenizer=False)
    assert getattr(direct, "tokenizer", None) is None and direct.spec == z.spec


def test_pickle_only_folder_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"not read")
    with pytest.raises(ConvertError, match="never loads pickle"):
        from_pretrained(tmp_path)
    with pytest.raises(ConvertError, match="config.json"):
        from_pretrained(tmp_path / "nowhere")


# ---------------------------------------------------------------------- unsupported configs
def _cfg_state(hf):
    return hf.config.to_dict(), hf.state_dict()


@pytest.mark.parametrize("make,key,value", [
    (gpt2, "scale_attn_by_inverse_layer_idx", True),
    (gpt2, "activation_function", "gelu_fast"),
    (gpt2, "add_cross_attention", True),
    (bert, "position_embedding_type", "relative_key"),
    (bert, "hidden_act", "relu"),  # the MLM head's transform is exact GELU in zoo
    (llama, "hidden_act", "tanh"),
    (llama, "rope_parameters", {"rope_type": "longrope", "rope_theta": 1e4, "factor": 8.0}),
    (llama, "rope_scaling", {"rope_type": "dynamic"}),  # dynamic NTK without its factor
    (t5, "feed_forward_proj", "gated-tanh"),
    (t5, "feed_forward_proj", "sigmoid"),
])
def test_unsupported_config_fields_are_named(make, key, value):
    cfg, state = _cfg_state(make())
    cfg[key] = value
    with pytest.raises(ConvertError) as err:
        convert_state(cfg, state)
    assert f"config.{key.split('.')[0]}" in str(err.value) and "fix:" in str(err.value)


def test_unknown_family_and_unknown_tensor():
    cfg, state = _cfg_state(gpt2())
    with pytest.raises(ConvertError, match="config.model_type.*valid options: bart, bert, deepseek_v2, deepseek_v3, distilbert, gemma"):
        convert_state({**cfg, "model_type": "mamba"}, state)
    state = dict(state, **{"transformer.h.0.attn.extra_gate.weight": torch.ones(3)})
    with pytest.raises(ConvertError, match="extra_gate"):
        convert_state(cfg, state)
    cfg2, state2 = _cfg_state(gpt2())
    cfg2["n_layer"] = 3  # config and weights disagree
    with pytest.raises(ConvertError, match="h.2"):
        convert_state(cfg2, state2)
    with pytest.raises(ConvertError, match="transformers model"):
        from_transformers(object())


# ---------------------------------------------------------------------- and back
@pytest.mark.parametrize("case", ["gpt2_relu_untied", "bert_mlm", "llama_bias_headdim_tied", "llama3_rope_scaling_untied",
                                  "t5_v1_1_gated_untied"])
@torch.no_grad()
def test_to_transformers_round_trip(case):
    make, family = CASES[case]
    hf = make()
    z = from_transformers(hf)
    hf2 = to_transformers(z)
    assert type(hf2) is type(hf)
    ref, _, mask = run(family, hf, z)
    again, _, _ = run(family, hf2, z)
    assert maxdiff(ref, again, mask) <= TOL


@torch.no_grad()
def test_zoo_model_to_transformers_and_back():
    z = zoo.build("llama_tiny", num_layers=2, d_model=48, vocab_size=V, seed=3)
    for p in z.parameters():
        p.add_(torch.randn_like(p) * 0.1)
    hf = to_transformers(z)
    ids, am, pos = batch(left=True)
    assert maxdiff(hf(ids, attention_mask=am, position_ids=pos).logits, z(ids, attention_mask=am), am) <= TOL


def test_to_transformers_names_what_has_no_equivalent():
    with pytest.raises(ConvertError, match="norm"):
        to_transformers(zoo.build("llama_tiny", num_layers=1, norm={"kind": "rmsnorm", "placement": "sandwich"}))
    with pytest.raises(ConvertError, match="sinusoidal"):
        to_transformers(zoo.build("gpt_tiny", num_layers=1))


@torch.no_grad()
def test_converted_gpt2_runs_on_text_like_transformers(tmp_path):
    """A converted folder with its tokenizer.json: text in, the same greedy continuation as
    transformers' generate."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    hf = gpt2()
    hf.save_pretrained(tmp_path / "hf")
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(V)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "hf" / "tokenizer.json"))
    z = from_pretrained(tmp_path / "hf")
    zoo.save(z, tmp_path / "zoo")
    z = zoo.load(tmp_path / "zoo")
    ids = torch.tensor([[5, 17, 42, 8]])
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                      pad_token_id=0, eos_token_id=None)
    assert torch.equal(z.generate(ids, max_new_tokens=6), ref)
    text = z.generate("w5 w17 w42 w8", max_new_tokens=6)
    assert text.split() == [f"w{int(t)}" for t in ref[0, 4:]]


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["gpt2", "bert_mlm", "llama_gqa_untied", "t5_relu_scaled"])
@torch.no_grad()
def test_converted_models_on_cuda(case):
    """On a GPU: fp32 parity with the CPU reference, and bf16 within bf16's precision."""
    make, family = CASES[case]
    hf = make()
    ref, _, mask = run(family, hf, from_transformers(hf))
    for dtype, tol in ((torch.float32, TOL), (torch.bfloat16, 0.05 * ref.abs().max().item())):
        z = from_transformers(hf, dtype=dtype).to("cuda")
        _, out, _ = run(family, hf, OnCuda(z))
        assert maxdiff(ref, out, mask) <= tol, dtype


GENERATE = {"llama": CASES["llama_gqa_untied"][0],  # (transformers' T5 cache breaks when the two
            "t5": lambda: untie(t5(feed_forward_proj="gated-gelu", tie_word_embeddings=False))}  # depths differ)


@pytest.mark.parametrize("family", list(GENERATE))
@torch.no_grad()
def test_batched_greedy_generation_matches_transformers(family):
    """Left-padded prompts, KV cache on both sides: the same tokens as transformers' generate."""
    hf = GENERATE[family]()
    z = from_transformers(hf)
    src, am, _ = batch(left=True)
    kw = dict(max_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0)
    if family == "t5":
        ref = hf.generate(input_ids=src, attention_mask=am, decoder_start_token_id=0, **kw)
        out = z.generate(src, max_new_tokens=6, attention_mask=am, decoder_start_id=0, stop_tokens=[])
    else:
        ref = hf.generate(input_ids=src, attention_mask=am, **kw)
        out = z.generate(src, max_new_tokens=6, attention_mask=am, stop_tokens=[])  # eos off, as HF's
    assert len(set(ref[:, -6:].flatten().tolist())) > 3  # not a degenerate repetition
    assert torch.equal(out, ref)


@pytest.mark.parametrize("family", list(GENERATE))
@torch.no_grad()
def test_repetition_penalty_matches_transformers(family):
    """Greedy decoding with a repetition penalty (CTRL's, as Hugging Face applies it to the prompt
    and the generated tokens, or to an encoder-decoder's decoder tokens): the same tokens as
    transformers' generate, and not the tokens without the penalty."""
    hf = GENERATE[family]()
    z = from_transformers(hf)
    torch.manual_seed(1)
    src = torch.randint(1, V, (3, 7))
    kw = dict(max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    if family == "t5":
        kw["decoder_start_token_id"] = 0
    mine = dict(max_new_tokens=12, stop_tokens=[],  # eos off on both sides
                **({"decoder_start_id": 0} if family == "t5" else {}))
    ref = hf.generate(input_ids=src, attention_mask=torch.ones_like(src), repetition_penalty=1.8,
                      **kw)
    out = z.generate(src, repetition_penalty=1.8, **mine)
    assert torch.equal(out, ref)
    assert not torch.equal(out, z.generate(src, **mine))  # the penalty changed something


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@torch.no_grad()
def test_base_models_without_head(family):
    """GPT2Model / LlamaModel (no LM head): the same last hidden states; the head is tied."""
    if family == "gpt2":
        hf = randomize(T.GPT2Model(T.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64)))
    else:
        hf = randomize(T.LlamaModel(T.LlamaConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2,
                                                  num_attention_heads=4, num_key_value_heads=2,
                                                  intermediate_size=48)))
    z = from_transformers(hf)
    ids, am, pos = batch(left=True)
    ref = hf(ids, attention_mask=am, position_ids=pos).last_hidden_state
    assert maxdiff(ref, z(ids, attention_mask=am, return_hidden=True), am) <= TOL
    assert z.spec.tie_embeddings


@torch.no_grad()
def test_sharded_save_pretrained_folder(tmp_path):
    hf = llama()
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    z = from_pretrained(tmp_path)
    ref, out, mask = run("llama", hf, z)
    assert maxdiff(ref, out, mask) <= TOL

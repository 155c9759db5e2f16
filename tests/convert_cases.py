"""Random-init 2-layer ``transformers`` models of every convertible family, and how to run them.

Shared by tests/convert/test_convert_families.py and scripts/parity_table.py.  Every model is built from a
config object (offline, never downloaded) and every trainable tensor is randomised, so a swapped
weight, a missed bias or a wrong norm offset shows in the outputs.
"""
from __future__ import annotations

import torch

V, B, L = 101, 3, 9
TOL = 1e-5


@torch.no_grad()
def randomize(model, seed=0):
    """Every trainable tensor random (norm weights near 1, or near 0 for ``1 + weight`` norms)."""
    g = torch.Generator().manual_seed(seed)
    zero_centred = type(model).__name__.startswith("Gemma")
    for name, p in model.named_parameters():
        if not p.requires_grad:  # constants stored as parameters (Marian's sinusoids)
            continue
        r = torch.randn(p.shape, generator=g)
        low = name.lower()
        is_norm = p.dim() == 1 and name.endswith("weight") and any(
            k in low for k in ("norm", "ln_", "layernorm", "layer_norm"))
        if is_norm:
            p.copy_((0.0 if zero_centred else 1.0) + 0.2 * r)
        else:
            p.copy_(0.3 * r if p.dim() == 1 else 0.15 * r)
    for name, b in model.named_buffers():
        if name.endswith("final_logits_bias"):  # BART / Marian: a persistent buffer in the head
            b.copy_(0.3 * torch.randn(b.shape, generator=g))
    return model.eval()


def padded(seed=1, left=False, pad_id=None, length=L):
    """``(ids, attention_mask, positions)`` of a batch of three rows of lengths L, L-3 and 4."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, V, (B, length), generator=g)
    am = torch.ones(B, length, dtype=torch.long)
    for b, n in enumerate([length, length - 3, 4]):
        if left:
            am[b, : length - n] = 0
        else:
            am[b, n:] = 0
    if pad_id is not None:
        ids = ids.masked_fill(am == 0, pad_id)
    pos = (am.cumsum(-1) - 1).clamp(min=0)
    return ids, am, pos


def run(kind, hf, z, pad_id=None):
    """(hf output, zoo output, mask of positions that must agree) on a padded batch."""
    if kind == "decoder":
        ids, am, pos = padded(left=True)  # left padding: HF needs the positions zoo derives itself
        return hf(ids, attention_mask=am, position_ids=pos).logits, z(ids, attention_mask=am), am
    if kind in ("encoder", "encoder_hidden"):
        ids, am, _ = padded(pad_id=pad_id)
        out = hf(ids, attention_mask=am)
        ref = out.logits if kind == "encoder" else out.last_hidden_state
        return ref, z(ids, attention_mask=am, return_hidden=kind == "encoder_hidden"), am
    src, sm, _ = padded(pad_id=pad_id)
    tgt, tm, _ = padded(seed=2, pad_id=pad_id, length=6)
    ref = hf(input_ids=src, attention_mask=sm, decoder_input_ids=tgt, decoder_attention_mask=tm).logits
    return ref, z(src, tgt, src_padding=sm, tgt_padding=tm), tm


def maxdiff(a, b, mask):
    return (a - b).abs()[mask.bool()].max().item()


def greedy(kind, hf, z, start_id=0, new=6):
    """Greedy tokens of transformers' ``generate`` and of zoo's, from the same left-padded prompts
    (decoders) or sources (encoder-decoders), with the generation config's stop and forced tokens
    switched off on both sides (each model's own settings: tests/convert/test_generation_config.py)."""
    kw = dict(max_new_tokens=new, do_sample=False, num_beams=1, eos_token_id=None, pad_token_id=0)
    if kind == "decoder":
        src, am, _ = padded(left=True)
        ref = hf.generate(input_ids=src, attention_mask=am, **kw)
        return ref, z.generate(src, max_new_tokens=new, attention_mask=am, stop_tokens=[])
    src = padded()[0]  # unpadded sources (padding is checked by run(); BART's positions ignore it)
    ref = hf.generate(input_ids=src, decoder_start_token_id=start_id, forced_bos_token_id=None,
                      forced_eos_token_id=None, **kw)
    return ref, z.generate(src, max_new_tokens=new, decoder_start_id=start_id, stop_tokens=[],
                           forced_bos_id=None, forced_eos_id=None)


def same(m):
    return m


@torch.no_grad()
def assert_decoder_parity(hf, z, *, reset=same, check_greedy=True) -> dict:
    """A converted decoder against its transformers model: logits on a left-padded batch within
    ``TOL`` (and not trivially small), the parity certificate saying so, greedy tokens equal to
    ``generate``.  ``reset(hf)`` gives a fresh transformers model where it keeps state between calls
    (dynamic rope).  Returns the certificate."""
    ref, out, mask = run("decoder", reset(hf), z)
    assert ref.abs().max() > 0.5 and maxdiff(ref, out, mask) <= TOL, maxdiff(ref, out, mask)
    cert = z.convert_info["parity"]
    assert cert["max_abs_diff"] <= TOL and cert["top1_agreement"] == 1.0
    if check_greedy:
        r, o = greedy("decoder", reset(hf), z)
        assert torch.equal(r, o)
    return cert


@torch.no_grad()
def assert_back_to_transformers(hf, z, *, reset=same, atol=0.0):
    """zoo -> transformers gives the same tensors, and (on the same kernels) the same logits, equal
    bit for bit when ``atol`` is 0.  Returns the model made."""
    from zoo.convert import to_transformers

    back = to_transformers(z)
    a, b = hf.state_dict(), back.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    back.set_attn_implementation(hf.config._attn_implementation)  # the same kernels
    back.config._experts_implementation = getattr(hf.config, "_experts_implementation", None)
    ids = torch.randint(3, 101, (2, 7))
    got, want = reset(back)(ids).logits, reset(hf)(ids).logits
    assert torch.equal(got, want) if atol == 0 else (got - want).abs().max() <= atol
    return back


@torch.no_grad()
def assert_cached_decode_equals_full(z, prompt: int = 6, total: int = 10, vocab: int = 101):
    """A prompt then one token at a time through ``z``'s KV cache gives the logits of one full
    forward (to 1e-5); returns the cache, for checks of what it holds."""
    ids = torch.randint(3, vocab, (2, total))
    full = z(ids)
    cache = z.new_cache(total)
    steps = [z(ids[:, :prompt], cache=cache)] + [z(ids[:, t:t + 1], cache=cache) for t in range(prompt, total)]
    assert (torch.cat(steps, 1) - full).abs().max() <= 1e-5
    return cache


@torch.no_grad()
def assert_saved_and_folder(hf, z, tmp_path, cert, *, folder=True):
    """``zoo.save`` / ``zoo.load`` keep spec, tensors, outputs (to 1e-6: zoo.load's tensors sit off
    a 64-byte boundary in the safetensors buffer, which changes the CPU matmul's summation) and the
    certificate; the folder route (``save_pretrained`` -> ``from_pretrained``) gives the same model."""
    import zoo
    from zoo.convert import from_pretrained

    ids = torch.randint(3, 101, (2, 7))
    zoo.save(z, tmp_path / "m")
    again = zoo.load(tmp_path / "m")
    sa, sz = again.state_dict(), z.state_dict()
    assert again.spec == z.spec
    assert set(sa) == set(sz) and all(torch.equal(sa[k], sz[k]) for k in sz)
    assert (again(ids) - z(ids)).abs().max() <= 1e-6
    assert zoo.convert.certificate(zoo.read_metadata(tmp_path / "m"))["max_abs_diff"] == cert["max_abs_diff"]
    if folder:
        hf.save_pretrained(tmp_path / "hf")  # config.json + safetensors
        made = from_pretrained(tmp_path / "hf")
        assert made.spec == z.spec and (made(ids) - z(ids)).abs().max() <= 1e-6


def assert_preset_is_the_real_model(preset: str, hf_cls: str, config_cls: str, count: int, **config):
    """The preset ``preset`` has the real model's shape: transformers' ``hf_cls`` built on the meta
    device from ``config_cls(**config)`` converts to exactly the preset's spec, and both count
    ``count`` parameters (transformers' count is the reference).  Returns the converted spec's stack."""
    import zoo
    from zoo.convert import convert_state

    T = _T()
    with torch.device("meta"):
        hf = getattr(T, hf_cls)(getattr(T, config_cls)(**config))
    spec, _, _ = convert_state(hf.config.to_dict(), hf.state_dict())
    assert zoo.spec(spec, name=preset) == zoo.spec(preset)
    assert hf.num_parameters() == count
    with torch.device("meta"):
        z = zoo.build(preset, device="meta", init=False, budget=1 << 50)
    z.tie_weights()
    assert z.num_parameters() == count
    return zoo.spec(preset).stack("decoder")


# ---------------------------------------------------------------------- the families
def _T():
    import transformers
    return transformers


def gpt2(**kw):
    T = _T()
    cfg = dict(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=64, **kw)
    return randomize(T.GPT2LMHeadModel(T.GPT2Config(**cfg, attn_implementation="eager")))


def bert(**kw):
    T = _T()
    return randomize(T.BertForMaskedLM(T.BertConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, attn_implementation="eager", **kw)))


def llama(**kw):
    T = _T()
    cfg = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64,
               rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    cfg.update(kw)
    return randomize(T.LlamaForCausalLM(T.LlamaConfig(**cfg, attn_implementation="eager")))


def t5(**kw):
    T = _T()
    cfg = dict(vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
               relative_attention_num_buckets=8, relative_attention_max_distance=16,
               feed_forward_proj="gated-gelu", tie_word_embeddings=False)
    cfg.update(kw)
    hf = randomize(T.T5ForConditionalGeneration(T.T5Config(**cfg, attn_implementation="eager")))
    with torch.no_grad():  # transformers 5 ties T5's head whatever the config says: untie it
        hf.lm_head.weight = torch.nn.Parameter(torch.randn_like(hf.lm_head.weight) * 0.15)
    return hf


def deepseek_v2_small(max_position_embeddings: int = 64):
    """A DeepSeek-V2 (MLA) of 2 layers, the first dense: 4 heads, a 16-wide latent plus 8 rotated
    key features cached per token (24 numbers), 4 experts (top 2) and 1 shared; every weight drawn
    from normal(0, 0.2), so no zero or unit tensor hides a mis-paired head width.  For tests that
    need a real MLA model beside the conversion cases of tests/convert/test_convert_deepseek.py."""
    T = _T()
    torch.manual_seed(0)
    cfg = T.DeepseekV2Config(vocab_size=64, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                             n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, kv_lora_rank=16,
                             q_lora_rank=None, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                             first_k_dense_replace=1, max_position_embeddings=max_position_embeddings)
    hf = T.DeepseekV2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.2)
    return hf


def _decoder(cls, config, **kw):
    T = _T()
    cfg = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, intermediate_size=48, max_position_embeddings=64)
    cfg.update(kw)
    return randomize(getattr(T, cls)(getattr(T, config)(**cfg, attn_implementation="eager")))


def qwen2(**kw):
    return _decoder("Qwen2ForCausalLM", "Qwen2Config", **kw)


def mistral(**kw):
    return _decoder("MistralForCausalLM", "MistralConfig", **{"sliding_window": 4, "head_dim": 16, **kw})


def phi3(**kw):
    return _decoder("Phi3ForCausalLM", "Phi3Config", pad_token_id=None, **{
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}, **kw})


def qwen3(**kw):
    return _decoder("Qwen3ForCausalLM", "Qwen3Config", **{"head_dim": 16, "attention_bias": True, **kw})


def gpt_neox(**kw):
    T = _T()
    cfg = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=64, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                             "partial_rotary_factor": 0.25}, **kw)
    return randomize(T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**cfg, attn_implementation="eager")))


def gemma(**kw):
    return _decoder("GemmaForCausalLM", "GemmaConfig", **{"num_key_value_heads": 1, "head_dim": 16, **kw})


def gemma2(**kw):
    return _decoder("Gemma2ForCausalLM", "Gemma2Config", **{
        "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 4, "query_pre_attn_scalar": 12,
        "attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0, **kw})


def opt(seed=0, **kw):
    T = _T()
    cfg = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=48,
               max_position_embeddings=64, word_embed_proj_dim=32, **kw)
    return randomize(T.OPTForCausalLM(T.OPTConfig(**cfg, attn_implementation="eager")), seed)


def _encoder(cls, config, **kw):
    T = _T()
    cfg = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=64, max_position_embeddings=66)
    cfg.update(kw)
    return randomize(getattr(T, cls)(getattr(T, config)(**cfg, attn_implementation="eager")))


def roberta(**kw):
    return _encoder("RobertaForMaskedLM", "RobertaConfig", **{"pad_token_id": 1, "type_vocab_size": 1, **kw})


def distilbert(**kw):
    T = _T()
    cfg = dict(vocab_size=V, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64, **kw)
    return randomize(T.DistilBertForMaskedLM(T.DistilBertConfig(**cfg, attn_implementation="eager")))


def _seq2seq(cls, config, seed=0, **kw):
    T = _T()
    cfg = dict(vocab_size=V, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
               decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=64,
               pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    cfg.update(kw)
    return randomize(getattr(T, cls)(getattr(T, config)(**cfg, attn_implementation="eager")), seed)


def bart(**kw):
    return _seq2seq("BartForConditionalGeneration", "BartConfig", **kw)


def marian(**kw):
    return _seq2seq("MarianMTModel", "MarianConfig", **{"scale_embedding": True, "activation_function": "swish",
                                                        "pad_token_id": V - 1, "decoder_start_token_id": V - 1,
                                                        "eos_token_id": 0, "decoder_vocab_size": V, **kw})


#: case -> (builder, kind, extra): kind says how to run it; ``pad_id`` pads encoder inputs with
#: the pad token (RoBERTa derives positions from it), ``start`` is the decoder start token.
CASES = {
    "gpt2": (gpt2, "decoder", {}),
    "bert": (bert, "encoder", {}),
    "llama": (llama, "decoder", {}),
    "t5": (t5, "encoder_decoder", {}),
    "qwen2": (qwen2, "decoder", {}),
    "mistral": (mistral, "decoder", {}),
    "phi3": (phi3, "decoder", {}),
    "qwen3": (qwen3, "decoder", {}),
    "gpt_neox": (gpt_neox, "decoder", {}),
    "gpt_neox_sequential": (lambda: gpt_neox(use_parallel_residual=False), "decoder", {}),
    "gemma": (gemma, "decoder", {}),
    "gemma2": (gemma2, "decoder", {}),
    "opt": (opt, "decoder", {}),
    "opt_post_norm": (lambda: opt(seed=2, do_layer_norm_before=False), "decoder", {}),
    "roberta": (roberta, "encoder", {"pad_id": 1}),
    "distilbert": (distilbert, "encoder", {}),
    "bart": (lambda: bart(seed=1), "encoder_decoder", {"start": 2}),  # seeds whose greedy output varies
    "bart_scaled_relu": (lambda: bart(seed=2, scale_embedding=True, activation_function="relu"), "encoder_decoder",
                         {"start": 2}),
    "marian": (marian, "encoder_decoder", {"start": V - 1}),
}


class OnCuda(torch.nn.Module):
    """Runs a zoo model on the GPU for run(), which passes CPU tensors."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, *a, **kw):
        mv = lambda t: t.cuda() if isinstance(t, torch.Tensor) else t  # noqa: E731
        return self.m(*map(mv, a), **{k: mv(v) for k, v in kw.items()}).float().cpu()

"""One real shape per converted family ships as a preset (checkpoints/*.yaml).  Each preset equals
the converter's spec of the real model's config (built by transformers on the meta device: no
memory, no download), and has the real model's parameter count, pinned to the published number."""
import pytest
import torch

import zoo
from zoo.convert import convert_state

T = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

ROPE = {"rope_type": "default", "rope_theta": 10000.0}
#: preset -> (transformers class, config class, the real config's values, its parameter count)
REAL = {
    "qwen2_0_5b": ("Qwen2ForCausalLM", "Qwen2Config", dict(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), 494_032_768),
    "qwen3_0_6b": ("Qwen3ForCausalLM", "Qwen3Config", dict(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), 596_049_920),
    "mistral_7b": ("MistralForCausalLM", "MistralConfig", dict(
        vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=32768, sliding_window=4096, rms_norm_eps=1e-5,
        rope_parameters=ROPE, tie_word_embeddings=False), 7_241_732_096),
    "phi3_mini": ("Phi3ForCausalLM", "Phi3Config", dict(
        vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=32, max_position_embeddings=4096, original_max_position_embeddings=4096,
        sliding_window=2047, rms_norm_eps=1e-5, pad_token_id=32000, tie_word_embeddings=False), 3_821_079_552),
    "pythia_160m": ("GPTNeoXForCausalLM", "GPTNeoXConfig", dict(
        vocab_size=50304, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=2048, use_parallel_residual=True, tie_word_embeddings=False,
        rope_parameters={**ROPE, "partial_rotary_factor": 0.25}), 162_322_944),
    "opt_125m": ("OPTForCausalLM", "OPTConfig", dict(
        vocab_size=50272, hidden_size=768, num_hidden_layers=12, ffn_dim=3072, num_attention_heads=12,
        max_position_embeddings=2048, word_embed_proj_dim=768), 125_239_296),
    "gemma_2b": ("GemmaForCausalLM", "GemmaConfig", dict(
        vocab_size=256000, hidden_size=2048, intermediate_size=16384, num_hidden_layers=18, num_attention_heads=8,
        num_key_value_heads=1, head_dim=256, max_position_embeddings=8192), 2_506_172_416),
    "gemma2_2b": ("Gemma2ForCausalLM", "Gemma2Config", dict(
        vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
        num_key_value_heads=4, head_dim=256, max_position_embeddings=8192, query_pre_attn_scalar=256,
        sliding_window=4096), 2_614_341_888),
    "roberta_base": ("RobertaForMaskedLM", "RobertaConfig", dict(
        vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        max_position_embeddings=514, type_vocab_size=1, pad_token_id=1, layer_norm_eps=1e-5), 124_697_433),
    "distilbert_base": ("DistilBertForMaskedLM", "DistilBertConfig", dict(), 66_985_530),
    "bart_base": ("BartForConditionalGeneration", "BartConfig", dict(
        vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
        decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_position_embeddings=1024),
        139_420_416),
    "marian_en_de": ("MarianMTModel", "MarianConfig", dict(
        vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
        encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
        max_position_embeddings=512, scale_embedding=True, activation_function="swish", pad_token_id=58100,
        decoder_start_token_id=58100), 74_410_496),
}


@pytest.mark.parametrize("preset", list(REAL))
def test_preset_is_the_real_model(preset):
    cls, cfg, kw, published = REAL[preset]
    with torch.device("meta"):
        hf = getattr(T, cls)(getattr(T, cfg)(**kw))
    spec, _, _ = convert_state(hf.config.to_dict(), hf.state_dict())
    assert zoo.spec(spec, name=preset) == zoo.spec(preset)
    assert hf.num_parameters() == published
    with torch.device("meta"):  # never allocate 7 B parameters, whatever zoo.build does for meta
        z = zoo.build(preset, device="meta", init=False, budget=1 << 50)
    z.tie_weights()
    # transformers keeps BART's / Marian's logit bias as a buffer (zoo: the LM head's bias) and
    # Marian's constant sinusoids as parameters (zoo computes them)
    extra = sum(b.numel() for n, b in hf.named_buffers() if n.endswith("final_logits_bias"))
    const = sum(p.numel() for n, p in hf.named_parameters() if "embed_positions" in n and not p.requires_grad)
    assert z.num_parameters() == published + extra - const

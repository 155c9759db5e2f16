"""The converter reads files other people wrote: every config.json field through one typed accessor,
shard names confined to the model folder, tensor shapes (from the file headers) checked against the
spec before a weight is read, and every unsupported option a ConvertError naming its field."""
import json

import pytest
import torch
from safetensors.torch import save_file

import zoo
from zoo.convert import ConvertError, FAMILIES, certificate, certificate_text, convert_state, from_pretrained

pytest.importorskip("transformers")
import convert_cases as C  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def gpt2_dir(tmp_path, **config):
    hf = C.gpt2()
    hf.save_pretrained(tmp_path)
    if config:
        cfg = json.loads((tmp_path / "config.json").read_text())
        cfg.update(config)
        (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


@pytest.mark.parametrize("text,match", [
    ("{not json", "config.json: config.json is not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
])
def test_config_that_is_not_a_json_object(tmp_path, text, match):
    gpt2_dir(tmp_path)
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConvertError, match=match):
        from_pretrained(tmp_path)


@pytest.mark.parametrize("key,value,match", [
    ("n_layer", None, "config.n_layer: gpt2 config.json has no 'n_layer'"),
    ("n_layer", "2", "config.n_layer: expected an integer, got '2'"),
    ("n_layer", True, "config.n_layer: expected an integer"),
    ("n_layer", 0, r"config.n_layer: expected an integer in \[1, "),
    ("n_embd", 10 ** 40, "config.n_embd: expected an integer"),
    ("layer_norm_epsilon", -1.0, "config.layer_norm_epsilon: expected a number in \\(0"),
    ("layer_norm_epsilon", "tiny", "config.layer_norm_epsilon: expected a finite number"),
    ("scale_attn_weights", "yes", "config.scale_attn_weights: expected true or false"),
])
def test_config_fields_are_typed_and_ranged(tmp_path, key, value, match):
    d = gpt2_dir(tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    if value is None:
        del cfg[key]
    else:
        cfg[key] = value
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConvertError, match=match) as err:
        from_pretrained(d)
    assert "fix:" in str(err.value) and len(str(err.value)) < 400


def test_shard_names_are_confined_to_the_folder(tmp_path):
    hf = C.llama()
    d = tmp_path / "model"
    hf.save_pretrained(d, max_shard_size="20KB")
    index = json.loads((d / "model.safetensors.index.json").read_text())
    (tmp_path / "outside.safetensors").write_bytes((d / sorted(set(index["weight_map"].values()))[0]).read_bytes())
    for bad in ("../outside.safetensors", "/etc/passwd"):
        name = next(iter(index["weight_map"]))
        index["weight_map"][name] = bad
        (d / "model.safetensors.index.json").write_text(json.dumps(index))
        with pytest.raises(ConvertError, match="model.safetensors.index.json.weight_map") as err:
            from_pretrained(d)
        assert "outside the folder" in str(err.value) or "absolute path" in str(err.value)


def test_header_shapes_are_checked_before_any_weight_is_read(tmp_path, monkeypatch):
    """config.json says 48 features, the weights have 32: refused from the headers alone."""
    import zoo.convert.core as core

    d = gpt2_dir(tmp_path, n_embd=48)
    reads = []
    real = core.read_hf_dir
    monkeypatch.setattr(core, "read_hf_dir", lambda p, meta=False: reads.append(meta) or real(p, meta=meta))
    with pytest.raises(ConvertError, match=r"has shape \(32,\), the spec needs \(48,\)"):
        from_pretrained(d)
    assert reads == [True]  # only the headers were read


def test_unknown_model_type_lists_every_family():
    cfg, state = C.gpt2().config.to_dict(), {}
    with pytest.raises(ConvertError) as err:
        convert_state({**cfg, "model_type": "mamba"}, state)
    assert "config.model_type" in str(err.value)
    for fam in FAMILIES:
        assert fam in str(err.value)


UNSUPPORTED = [
    ("qwen2", "rope_parameters", {"rope_type": "dynamic", "rope_theta": 1e4}),  # no factor
    ("qwen2", "layer_types", ["sliding_attention", "full_attention"]),
    ("mistral", "hidden_act", "tanh"),
    ("phi3", "rope_parameters", {"rope_type": "longrope", "rope_theta": 1e4, "short_factor": [1.0],
                                 "long_factor": [1.0]}),
    ("gemma", "use_bidirectional_attention", True),
    ("gemma", "hidden_act", "silu"),
    ("opt", "word_embed_proj_dim", 16),
    ("opt", "layer_norm_elementwise_affine", False),
    ("opt", "_remove_final_layer_norm", True),
    ("opt", "activation_function", "gelu_fast"),
    ("roberta", "position_embedding_type", "relative_key"),
    ("roberta", "hidden_act", "relu"),
    ("distilbert", "activation", "relu"),
    ("qwen3", "layer_types", ["sliding_attention", "full_attention"]),  # without use_sliding_window
    ("gpt_neox", "hidden_act", "gelu_fast"),
    ("gpt_neox", "rope_parameters", {"rope_type": "dynamic", "rope_theta": 1e4, "factor": -2.0}),
    ("gemma2", "layer_types", ["sliding_attention", "chunked_attention"]),
    ("gemma2", "use_bidirectional_attention", True),
    ("bart", "activation_function", "gelu_fast"),
    ("bart", "normalize_before", True),
    ("marian", "share_encoder_decoder_embeddings", False),
    ("marian", "decoder_vocab_size", 7),
]


@pytest.mark.parametrize("case,key,value", UNSUPPORTED)
def test_unsupported_options_name_their_field(case, key, value):
    hf = C.CASES[case][0]()
    cfg = hf.config.to_dict()
    cfg[key] = value
    with pytest.raises(ConvertError) as err:
        convert_state(cfg, hf.state_dict())
    assert f"config.{key}" in str(err.value) and "fix:" in str(err.value)
    assert key in FAMILIES[cfg["model_type"]].refuses  # and the docs' list of refused options has it


@pytest.mark.parametrize("certify", [False, True])
def test_cli_writes_the_certificate_or_says_there_is_none(tmp_path, certify):
    from click.testing import CliRunner

    from zoo.cli import cli

    d = gpt2_dir(tmp_path / "hf")
    flag = "--certify" if certify else "--no-certify"
    res = CliRunner().invoke(cli, ["convert", str(d), str(tmp_path / "out"), flag])
    assert res.exit_code == 0, res.output
    meta = zoo.read_metadata(tmp_path / "out")
    text = certificate_text(meta)
    if certify:
        cert = certificate(meta)
        assert cert["max_abs_diff"] <= C.TOL and cert["top1_agreement"] == 1.0
        assert cert["reference"].startswith("transformers ") and "GPT2LMHeadModel" in cert["reference"]
        assert text.startswith("Parity with transformers") and text in res.output
    else:
        assert certificate(meta) is None and "without a parity certificate" in text
    assert str(tmp_path) not in json.dumps(meta)  # no path of this machine in the artifact
    res = CliRunner().invoke(cli, ["check", str(tmp_path / "out"), "--no-digest"])
    assert res.exit_code == 0 and text in res.output, res.output


def test_certificate_numbers_are_what_they_claim():
    """A deliberately perturbed zoo model: the certificate's numbers are the measured differences."""
    from zoo.convert import certify_parity, from_transformers
    from zoo.convert.core import probe_batch

    hf = C.gpt2()
    z = from_transformers(hf, certify=False)
    with torch.no_grad():
        z.lm_head.weight[5] += 0.5  # tied: changes the embedding of token 5 and its logit
    cert = certify_parity(hf, z)
    ids = probe_batch(C.V)
    with torch.no_grad():
        d = (hf(ids).logits - z(ids)).abs()
    assert cert["max_abs_diff"] == pytest.approx(d.max().item()) and cert["max_abs_diff"] > 0.1
    assert cert["mean_abs_diff"] == pytest.approx(d.mean().item())
    assert 0.0 < cert["top1_agreement"] <= 1.0


def test_a_corrupt_safetensors_file_is_a_convert_error(tmp_path):
    d = gpt2_dir(tmp_path)
    (d / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{broken json.....")
    with pytest.raises(ConvertError, match="model.safetensors: unreadable safetensors file"):
        from_pretrained(d)


def test_an_extra_tensor_in_the_file_is_refused(tmp_path):
    d = gpt2_dir(tmp_path)
    from safetensors.torch import load_file

    state = load_file(str(d / "model.safetensors"))
    state["transformer.h.0.attn.extra_gate.weight"] = torch.ones(3)
    save_file(state, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ConvertError, match="extra_gate"):
        from_pretrained(d)


def test_a_trained_marian_position_table_is_refused():
    hf = C.marian()
    state = dict(hf.state_dict())
    name = "model.encoder.embed_positions.weight"
    state[name] = state[name] + 0.01
    with pytest.raises(ConvertError, match="is not the sinusoidal table"):
        convert_state(hf.config.to_dict(), state)


@torch.no_grad()
def test_gemma_folder_whose_config_has_both_activation_keys(tmp_path):
    """Gemma's config.json says hidden_act: gelu and hidden_activation: gelu_pytorch_tanh; transformers
    runs the second, so must zoo."""
    hf = C.gemma()
    hf.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(hidden_act="gelu", hidden_activation="gelu_pytorch_tanh")
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    z = from_pretrained(tmp_path)
    assert z.spec.ffn.config.activation == "gelu_tanh"
    ref, out, mask = C.run("decoder", hf, z)
    assert C.maxdiff(ref, out, mask) <= C.TOL

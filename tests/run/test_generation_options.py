"""GenerationOptions: one declaration of every generation option, read by the API, ``zoo run`` and
the Run tab (issue 20, goal 3)."""
from __future__ import annotations

import dataclasses
import math

import pytest
from click.testing import CliRunner

import zoo
from zoo.commands.run import command as run_command
from zoo.run.generate import generate
from zoo.run.options import GenerationOptions, Option


FIELDS = dataclasses.fields(GenerationOptions)


def test_every_field_is_declared_with_help_kind_and_range():
    for f in FIELDS:
        opt = f.metadata["option"]
        assert isinstance(opt, Option) and opt.help, f.name
        assert opt.kind in {"int", "float", "bool", "token", "tokens", "token_lists"}, f.name
        if opt.kind in {"int", "float"}:
            assert opt.low is not None and opt.high is not None, f.name
        GenerationOptions(**{f.name: f.default})  # every default is valid


def test_the_options_are_generates_keywords():
    """generate()/stream() take exactly these options: a misspelt one is a ZooError naming them."""
    with pytest.raises(zoo.ZooError, match="valid options: max_new_tokens, do_sample") as exc:
        GenerationOptions.from_kwargs(temprature=0.5)
    assert exc.value.where == "generate.temprature"
    model = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=2, d_ff=64).eval()
    with pytest.raises(zoo.ZooError, match="unknown generation option"):
        generate(model, [1, 2], 2, topk=3)


@pytest.mark.parametrize("name,value", [
    ("max_new_tokens", -1), ("max_new_tokens", 1.5), ("temperature", 0), ("temperature", math.nan),
    ("top_k", 0), ("top_p", 1.5), ("top_p", 0.0), ("repetition_penalty", 0.5), ("seed", 2**64),
    ("do_sample", 1), ("use_cache", "yes"), ("vocab_limit", 0), ("prefix_length", -1),
    ("pad_id", 1.0), ("stop_tokens", ["a"])])
def test_out_of_range_is_a_zoo_error_naming_the_option(name, value):
    with pytest.raises(zoo.ZooError) as exc:
        GenerationOptions(**{name: value})
    assert exc.value.where.startswith(f"generate.{name}")


def test_in_range_edges_are_accepted():
    f = {f.name: f.metadata["option"] for f in FIELDS}
    GenerationOptions(top_p=f["top_p"].low, repetition_penalty=f["repetition_penalty"].high,
                      seed=-2**63, top_k=1, max_new_tokens=0)
    with pytest.raises(zoo.ZooError, match="below"):  # the cross-field rule: sampling temperature
        GenerationOptions(do_sample=True, temperature=1e-6)
    GenerationOptions(do_sample=False, temperature=1e-6)


def test_token_ids_are_checked_against_the_vocabulary():
    GenerationOptions(stop_tokens=[1, 2], pad_id=0).check_vocab(3)
    with pytest.raises(zoo.ZooError, match="outside the vocabulary") as exc:
        GenerationOptions(stop_tokens=[1, 3]).check_vocab(3)
    assert exc.value.where == "generate.stop_tokens[1]"


def test_zoo_run_has_one_flag_per_cli_field_and_passes_them_through(monkeypatch):
    declared = {f.name for f in FIELDS if f.metadata["option"].cli}
    params = {p.name for p in run_command.params}
    assert declared <= params
    assert declared == {"max_new_tokens", "do_sample", "temperature", "top_k", "top_p",
                        "repetition_penalty", "seed", "use_cache", "compile", "num_beams", "length_penalty",
                        "early_stopping", "no_repeat_ngram_size"}
    seen = {}
    real = zoo.run.generate.generate

    def spy(model, ids, max_new_tokens=32, **options):
        seen.update(options, max_new_tokens=max_new_tokens)
        return real(model, ids, max_new_tokens, **options)

    monkeypatch.setattr("zoo.run.generate.generate", spy)  # what model.generate calls (zoo.model.doors)
    result = CliRunner().invoke(run_command, ["gpt_tiny", "-p", "hi", "-n", "3", "--sample",
                                              "--temperature", "0.7", "--top-k", "5", "--no-cache",
                                              "--seed", "4"])
    assert result.exit_code == 0, result.output
    assert seen["do_sample"] is True and seen["temperature"] == 0.7 and seen["top_k"] == 5
    assert seen["use_cache"] is False and seen["seed"] == 4 and seen["max_new_tokens"] == 3


def test_zoo_run_leaves_the_checkpoints_generation_settings_in_force_unless_a_flag_is_given(monkeypatch):
    """A flag whose option a converted model's generation config sets (Option.hf) is not passed when
    it is not on the command line, so the checkpoint's setting applies; given, it overrides it."""
    sourced = {f.name for f in FIELDS if f.metadata["option"].cli and f.metadata["option"].hf}
    assert {"no_repeat_ngram_size", "length_penalty", "early_stopping", "repetition_penalty"} <= sourced
    seen = []
    real = zoo.run.generate.generate

    def spy(model, ids, max_new_tokens=32, **options):
        seen.append(options)
        return real(model, ids, max_new_tokens, **options)

    monkeypatch.setattr("zoo.run.generate.generate", spy)
    for args in ([], ["--no-repeat-ngram-size", "2", "--no-early-stopping", "--length-penalty", "0.5"]):
        result = CliRunner().invoke(run_command, ["gpt_tiny", "-p", "hi", "-n", "3", *args])
        assert result.exit_code == 0, result.output
    assert not sourced & set(seen[0])
    assert seen[1]["no_repeat_ngram_size"] == 2 and seen[1]["early_stopping"] is False
    assert seen[1]["length_penalty"] == 0.5 and "repetition_penalty" not in seen[1]

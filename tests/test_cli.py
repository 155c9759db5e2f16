"""The `zoo` console script, run as a user would (a real subprocess)."""
import subprocess
import sys

import pytest


def zoo_cli(*args):
    return subprocess.run([sys.executable, "-m", "zoo.cli", *args], capture_output=True, text=True,
                          timeout=120)


def test_components_lists_registry():
    r = zoo_cli("components")
    assert r.returncode == 0, r.stderr
    for word in ("attention", "sdpa", "zoo.attention_sdpa", "sliding_window", "window=64"):
        assert word in r.stdout


def test_build_prints_summary_and_saves(tmp_path):
    r = zoo_cli("build", "gpt_tiny", "--set", "num_layers=2", "--save", str(tmp_path / "g"))
    assert r.returncode == 0, r.stderr
    assert "decoder.attention" in r.stdout and "total" in r.stdout
    assert "output (2, 16, 512)" in r.stdout
    assert (tmp_path / "g" / "model.safetensors").is_file()


@pytest.mark.parametrize("args,words", [
    (("build", "gpt_tny"), "did you mean 'gpt_tiny'"),
    (("build", "gpt_tiny", "--set", "attention=sdpx"), "attention.kind"),
    (("build", "gpt_tiny", "--set", "num_layers"), "expected FIELD=VALUE"),
])
def test_errors_are_one_clear_line(args, words):
    r = zoo_cli(*args)
    assert r.returncode == 2
    assert words in r.stderr
    assert "Traceback" not in r.stderr


def test_run_defaults_fit_the_model_max_len():
    """numerals_t5 has max_len 32: the default of 64 new tokens is capped by what max_len leaves,
    and an explicit -n above it is capped with a note (was: exit 2)."""
    r = zoo_cli("run", "numerals_t5", "--prompt", "10086")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "一万零八十六"  # what cn2an's an2cn(10086) gives (pinned)
    r = zoo_cli("run", "numerals_t5", "--prompt", "10086", "-n", "100")
    assert r.returncode == 0 and "room for 32 new tokens" in r.stderr


def test_components_prints_plain_whole_sentences():
    r = zoo_cli("components", "ffn")
    assert r.returncode == 0, r.stderr
    assert "``" not in r.stdout  # no reStructuredText markup
    text = " ".join(r.stdout.split())
    assert '"GLU Variants Improve Transformer"; after Dauphin et al.\'s gated linear units, 2017).' in text

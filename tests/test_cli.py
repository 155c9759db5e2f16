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

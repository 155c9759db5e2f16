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


def test_user_errors_from_hostile_input_are_one_line_with_exit_2(tmp_path):
    levels = ["&l0 [1, 2, 3, 4, 5, 6, 7, 8, 9]"]
    levels += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 9)]
    bomb = "[" + ", ".join(levels) + "]"  # 9 levels in one flow sequence: 9**9 leaves expanded
    for args in (("build", "gpt_tiny", "--set", f"name={bomb}"),
                 ("build", "gpt_tiny", "--set", "vocab_size=1000000000"),
                 ("build", "gpt_tiny", "--set", "d_ff=0"),
                 ("build", "gpt_tiny", "--budget", "lots"),
                 ("check", str(tmp_path / "nothing.safetensors"))):
        r = zoo_cli(*args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), r.stderr
        assert "fix:" in lines[0] and "Traceback" not in r.stderr


BUG = ("import sys, zoo.cli, zoo.commands.build as b\n"
       "b.command.callback = lambda **kw: {}['missing']\n"  # a bug: a KeyError, not a user error
       "zoo.cli.main(sys.argv[1:])")


def test_unexpected_errors_are_one_line_naming_debug_and_debug_shows_the_traceback():
    r = subprocess.run([sys.executable, "-c", BUG, "build", "gpt_tiny"], capture_output=True,
                       text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert "unexpected KeyError" in lines[0] and "--debug" in lines[0]
    r = subprocess.run([sys.executable, "-c", BUG, "--debug", "build", "gpt_tiny"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Traceback" in r.stderr and "KeyError: 'missing'" in r.stderr


def test_check_reports_each_step_and_refuses_a_damaged_file(tmp_path):
    r = zoo_cli("build", "gpt_tiny", "--set", "num_layers=1", "--save", str(tmp_path / "g"))
    assert r.returncode == 0, r.stderr
    r = zoo_cli("check", str(tmp_path / "g"))
    assert r.returncode == 0, r.stderr
    steps = [line.split()[1] for line in r.stdout.splitlines() if line.startswith("ok ")]
    assert steps == ["commit", "header", "metadata", "spec", "dtypes", "tensors", "digest", "integrity",
                     "fingerprint"]
    assert "matches the tensor bytes" in r.stdout
    file = tmp_path / "g" / "model.safetensors"
    raw = bytearray(file.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    file.write_bytes(bytes(raw))
    r = zoo_cli("check", str(file))
    # the folder's commit (zoo-manifest.json, issue 35) names each file's sha256: the first step
    # that reads the bytes refuses them, in one line
    assert r.returncode == 2 and "sha256 differs" in r.stderr and "changed or damaged" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

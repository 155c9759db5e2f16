"""One loader, "the checkpoint if it is one, else a spec" (``zoo.load_or_build``), behind ``zoo run``,
``zoo bench``, ``zoo inspect`` and ``zoo train``."""
import subprocess
import sys

import pytest
import torch

import zoo
from zoo.model.build import checkpoint_or_spec

SMALL = dict(num_layers=1, d_model=32, num_heads=2, d_ff=64, vocab_size=97, max_len=64)


def test_load_or_build_takes_specs_and_checkpoints(tmp_path):  # (moved from test_bench.py)
    m = zoo.build("gpt_tiny", seed=0, **SMALL)
    zoo.save(m, tmp_path / "ck")
    loaded = zoo.load_or_build(str(tmp_path / "ck"))
    assert torch.equal(loaded.tok_emb.weight, m.tok_emb.weight)
    built = zoo.load_or_build("gpt_tiny", num_layers=1)
    assert built.spec.num_layers == 1
    with pytest.raises(zoo.ZooError, match="--set"):
        zoo.load_or_build(str(tmp_path / "ck"), num_layers=2)


def test_what_a_source_names(tmp_path):
    zoo.save(zoo.build("gpt_tiny", seed=0, **SMALL), tmp_path / "ck")
    assert checkpoint_or_spec(tmp_path / "ck") == tmp_path / "ck" / "model.safetensors"
    assert checkpoint_or_spec("gpt_tiny") == zoo.spec("gpt_tiny")  # a preset: a spec
    (tmp_path / "s.yaml").write_text(zoo.spec("gpt_tiny", num_layers=1).to_yaml())
    assert checkpoint_or_spec(str(tmp_path / "s.yaml")).num_layers == 1
    # a spec file with a mistake is reported as a spec error, not as "no checkpoint"
    (tmp_path / "bad.yaml").write_text(zoo.spec("gpt_tiny").to_yaml().replace("sdpa", "sdpx"))
    with pytest.raises(zoo.SpecError, match="did you mean 'sdpa'"):
        checkpoint_or_spec(str(tmp_path / "bad.yaml"))
    # neither: the checkpoint error, listing what there is
    with pytest.raises(zoo.CheckpointError, match="neither a checkpoint nor a spec") as err:
        checkpoint_or_spec("nothing_here")
    assert "poet_gpt" in err.value.options and "gpt_tiny" in err.value.options
    with pytest.raises(zoo.CheckpointError, match="did you mean 'gpt_tiny'"):
        checkpoint_or_spec("gpt_tny")


def test_cli_run_says_when_it_built_a_spec():
    r = subprocess.run([sys.executable, "-m", "zoo.cli", "run", "gpt_tiny", "--prompt", "ab", "-n", "2",
                        "--tokenizer", "byte"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "is a spec, not a checkpoint: random weights (seed 0)" in r.stderr

"""Issue 22, goal 4 (numeric health) in conversion: a Hugging Face folder whose tensors hold NaN or
infinity is refused by default with the tensors named (it used to convert without a word and fail
much later, inside ``torch.multinomial``); ``allow_nonfinite=True`` / ``--allow-nonfinite`` converts
it anyway and records which tensors were not finite."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

import zoo
from zoo.convert import from_pretrained

import hostile_corpus as hc


@pytest.fixture
def ctx(tmp_path):
    return hc.Ctx(tmp_path)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_tensor_is_refused_by_default(ctx, bad):
    w = torch.randn(16, 8) * 0.1
    w[3, 2] = bad
    folder = hc.hf_gpt2(ctx, tensors={"wte.weight": w})
    with pytest.raises(zoo.ZooError, match="wte.weight") as info:
        from_pretrained(folder)
    assert "NaN or infinity" in str(info.value) and "allow_nonfinite" in info.value.fix


def test_allow_nonfinite_converts_and_records_the_tensors(ctx):
    w = torch.randn(8) * 0.1
    w[0] = math.nan
    folder = hc.hf_gpt2(ctx, tensors={"ln_f.bias": w})
    model = from_pretrained(folder, allow_nonfinite=True)
    assert model.convert_info["nonfinite"] == ["ln_f.bias"]
    assert not torch.isfinite(model.state_dict()["decoder.final_norm.bias"]).all()
    with pytest.raises(zoo.ZooError, match="allow_nonfinite"):
        from_pretrained(folder, allow_nonfinite="yes")


def test_a_finite_folder_converts_as_before(ctx):
    model = from_pretrained(hc.hf_gpt2(ctx))
    assert "nonfinite" not in model.convert_info


def test_zoo_convert_refuses_then_accepts_with_the_flag(ctx, tmp_path):
    w = torch.randn(16, 8) * 0.1
    w[0, 0] = math.inf
    folder = hc.hf_gpt2(ctx, tensors={"wpe.weight": w})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "zoo.cli", "convert", str(folder), str(tmp_path / "out"), "--no-certify"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert r.returncode == 2 and "wpe.weight" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    r = subprocess.run([*cmd, "--allow-nonfinite"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "out" / "model.safetensors").is_file()

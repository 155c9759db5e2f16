"""Issue 22: the engine's entry points check their ``model`` and ``ids`` arguments once
(:mod:`zoo.run.arguments`), and a write target must name a file or folder of its own."""
from __future__ import annotations

import os

import pytest
import torch

import zoo
from zoo.errors import ZooError
from zoo.guard.files import write_target


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    gpt = zoo.build("gpt_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=300, max_len=16,
                    seed=0)
    gpt.tokenizer = zoo.tokenizer("byte")
    bert = zoo.build("bert_tiny", num_layers=1, d_model=16, num_heads=2, vocab_size=300,
                     max_len=16, seed=0)
    return gpt, bert


ENTRY = {
    "generate": lambda m, ids: zoo.run.generate.generate(m, ids, 2),
    "stream": lambda m, ids: list(zoo.run.generate.stream(m, ids, 2)),
    "trace": lambda m, ids: zoo.trace(m, ids),
    "fill_mask": lambda m, ids: zoo.fill_mask(m, ids, mask_id=3),
    "classify": lambda m, ids: zoo.classify(m, ids),
}


@pytest.mark.parametrize("name", sorted(ENTRY))
@pytest.mark.parametrize("not_a_model", [-1, None, "gpt_tiny", torch.nn.Linear(2, 2), [1, 2]])
def test_an_entry_point_names_its_model_argument(name, not_a_model):
    with pytest.raises(ZooError) as info:
        ENTRY[name](not_a_model, [1, 2, 3])
    assert info.value.where.endswith("model") and "expected a zoo model" in str(info.value)
    assert "zoo.build" in info.value.fix


@pytest.mark.parametrize("ids, match", [
    ([[1], [2, 3]], "different lengths"), ([1, 2 ** 70], r"lie in \[0, 300\)"), ([-1], "lie in"),
    ([1.5, 2], "integers"), ([True], "integers"), ("", "cannot read|non-empty"), ([], "non-empty"),
    (torch.ones(2, 2), "integers"), (torch.full((1, 2), 300), "lie in"),
    (torch.zeros(1, 1, 2, dtype=torch.long), r"\(B, T\)"), ({"a": 1}, "cannot read"),
])
def test_trace_reads_ids_by_type_and_range(models, ids, match):
    gpt, _ = models
    if ids == "":
        ids = None
        with pytest.raises(ZooError, match="nothing to trace"):
            zoo.trace(gpt, ids)
        return
    with pytest.raises(ZooError, match=match) as info:
        zoo.trace(gpt, ids)
    assert info.value.where == "trace.ids"


@pytest.mark.parametrize("ids, match", [
    ([1, 2 ** 70], r"lie in \[0, 300\)"), ([-1], "lie in"), ([1.5, 2], "integers"), ([True], "integers"),
    ([[1, 2], 3], "integers"), ([], "non-empty"), (torch.ones(2, 2), "integers"),
    (torch.tensor([True, False]), "integers"), (torch.full((1, 2), 300), "lie in"),
    (torch.zeros(1, 1, 2, dtype=torch.long), r"\(B, T\)"), ({"a": 1}, "cannot generate"),
])
def test_generate_reads_ids_by_the_rules_trace_reads_them_by(models, ids, match):
    """One reading of ids (zoo.run.arguments): generation refuses what trace refuses, by the same
    words, instead of rounding a 1.5 or reading True as token 1; only a ragged batch differs (it is
    left-padded for generation)."""
    gpt, _ = models
    for name in ("generate", "stream"):
        with pytest.raises(ZooError, match=match) as info:
            ENTRY[name](gpt, ids)
        assert info.value.where == "generate.ids"
    assert zoo.run.generate.generate(gpt, [[1], [2, 3]], 2).shape == (2, 4)


def test_good_ids_still_work_everywhere(models):
    gpt, bert = models
    assert zoo.trace(gpt, [1, 2, 3]).logits.shape == (1, 3, 300)
    assert zoo.trace(gpt, torch.tensor([[1, 2], [3, 4]], dtype=torch.int32)).logits.shape == (2, 2, 300)
    assert zoo.fill_mask(bert, [5, 3, 6], mask_id=3)[0][0]["position"] == 1
    assert zoo.run.generate.generate(gpt, [1, 2], 2).shape == (1, 4)


@pytest.mark.parametrize("target", [".", "./", "..", "/", "sub/..", "sub/./.."])
@pytest.mark.parametrize("folder", [True, False])
def test_a_write_target_must_name_something_of_its_own(tmp_path, monkeypatch, target, folder):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(ZooError, match="names no file or folder of its own") as info:
        write_target(target, where="save.path", folder=folder)
    assert info.value.where == "save.path" and "my_model" in info.value.fix


@pytest.mark.parametrize("target", ["", ".", "./", ".."])
def test_save_into_the_current_folder_by_accident_writes_nothing(tmp_path, monkeypatch, models,
                                                                 target):
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(ZooError):
        zoo.save(models[0], target)
    assert sorted(os.listdir(work)) == [] and sorted(os.listdir(tmp_path)) == ["cwd"]
    # naming the file (or a folder) in the current folder is still fine
    assert zoo.save(models[0], "./model.safetensors").name == "model.safetensors"
    assert zoo.save(models[0], "run1").parent.name == "run1"

"""The trained checkpoints shipped in checkpoints/: they load, generate, and do what their cards say."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from zoo.data import numeral_pairs
from zoo.train import MLMTask, TrainConfig, evaluate, prepare

ROOT = Path(__file__).resolve().parents[1]
POEMS = ROOT / "data" / "poems.txt"
SHIPPED = ["poet_gpt", "poet_bert", "numerals_t5"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def models():
    return {}


def _load(models, name):
    if name not in models:
        models[name] = zoo.load(name)
    return models[name]


@pytest.mark.parametrize("name", SHIPPED)
def test_checkpoint_is_small_self_describing_and_has_a_card(models, name):
    folder = ROOT / "checkpoints" / name
    assert (folder / "model.safetensors").stat().st_size <= 10 * 1024 * 1024
    assert name in zoo.list_checkpoints()
    model = _load(models, name)
    assert model.tokenizer is not None and model.tokenizer.vocab_size <= model.spec.vocab_size
    assert zoo.spec(folder / "spec.yaml") == model.spec
    card = (folder / "README.md").read_text(encoding="utf-8")
    for needed in ("## Training", "objective:", "steps:", "wall time:", "## Final metrics",
                   "## Sample outputs", "## Spec", "scripts/train_shipped.py"):
        assert needed in card, needed
    assert (folder / "loss.png").stat().st_size > 1000


def _windows_setup(model, objective, block):
    cfg = TrainConfig(objective=objective, holdout=0.1, block_size=block, batch_size=16,
                      eval_batches=16, seed=0)
    return prepare(POEMS, cfg, model.spec, model.tokenizer)


def test_poet_gpt_beats_the_unigram_baseline_on_heldout_poems(models):
    model = _load(models, "poet_gpt")
    task, _, _, info = _windows_setup(model, "clm", 96)
    res = evaluate(model, task, "cpu")
    # the same held-out poems as in training (whole poems, split with seed 0)
    assert res["eval_loss"] < info["unigram_baseline_loss"] - 0.3, (res, info["unigram_baseline_loss"])


def test_poet_gpt_continues_a_line_in_chinese(models):
    model = _load(models, "poet_gpt")
    text = model.generate("床前明月光", max_new_tokens=24, do_sample=True, temperature=0.8, top_k=20,
                          seed=0)
    assert len(text) >= 5
    han = [c for c in text if "\u4e00" <= c <= "\u9fff"]
    assert len(han) >= len(text) // 2, text
    greedy = model.generate("床前明月光", max_new_tokens=12)
    assert greedy and any(p in greedy for p in "，。？！\n"), greedy


def test_poet_bert_fills_masked_characters_of_heldout_poems(models):
    model = _load(models, "poet_bert")
    task, tok, _, _ = _windows_setup(model, "mlm", 64)
    assert isinstance(task, MLMTask)
    res = evaluate(model, task, "cpu")
    # baseline: always guess the most frequent training character
    counts = torch.bincount(task.train_ids, minlength=tok.vocab_size)
    counts[task.specials] = 0
    batches = task.eval_set()
    labels = torch.cat([b["labels"][b["labels"] != -100] for b in batches])
    baseline = float((labels == counts.argmax()).float().mean())
    assert res["eval_masked_acc"] > baseline + 0.05, (res, baseline)
    top = zoo.fill_mask(model, "床前明月光，疑是地上<mask>。", top_k=5)[0]
    assert len(top) == 5 and all("text" in c for c in top)


def test_numerals_t5_exact_match_on_fresh_heldout_numbers(models):
    model = _load(models, "numerals_t5")
    pairs = numeral_pairs(1000, seed=2026, heldout=True)  # never seen in training, all magnitudes
    assert {len(s) for s, _ in pairs} == set(range(1, 9))
    preds = model.generate([s for s, _ in pairs], max_new_tokens=24)
    wrong = [(s, t, p) for (s, t), p in zip(pairs, preds) if p != t]
    assert len(wrong) <= 20, wrong[:10]  # >= 98% exact match


def test_shipped_checkpoint_fine_tunes_from_its_name(tmp_path):
    """`zoo train poet_gpt ...` continues from the shipped weights with the shipped tokenizer."""
    from zoo.train import train

    r = train("poet_gpt", POEMS, out=tmp_path / "ft", objective="clm", steps=2, batch_size=2,
              block_size=16, progress=False, eval_every=2, eval_batches=1, holdout=0.1)
    assert r.tokenizer.to_json() == zoo.load("poet_gpt").tokenizer.to_json()
    assert r.final["eval_loss"] < r.history[0]["unigram_baseline_loss"]

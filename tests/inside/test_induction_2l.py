"""The shipped induction-head model (issue 26, goal 6): it is attention-only, an induction head and a
previous-token head formed, it learns in context, patching finds the circuit, and its card says
what is measured here."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import zoo
from zoo.inside.lens import head_scores, in_context_loss, induction_score, repeated_tokens

FOLDER = Path(__file__).resolve().parents[2] / "checkpoints" / "induction_2l"
pytestmark = pytest.mark.skipif(not (FOLDER / "model.safetensors").exists(),
                                reason="checkpoints/induction_2l not trained (scripts/train_induction.py)")


@pytest.fixture(scope="module")
def model():
    return zoo.load(FOLDER).eval()


def test_attention_only(model):
    ids = repeated_tokens(64, 10, batch=2, seed=4)
    _, cache = model.run_with_cache(ids, names_filter="*hook_mlp_out")
    assert all(torch.count_nonzero(cache[f"blocks.{i}.hook_mlp_out"]) == 0 for i in range(2))


def test_an_induction_head_fed_by_a_previous_token_head(model):
    ind = induction_score(model, length=20, batch=16, seed=7)  # fresh sequences, not the card's
    assert ind[1].max() > 0.6 and ind[0].max() < 0.1, ind
    prev = head_scores(model, repeated_tokens(64, 20, batch=8, seed=7), "previous_token")
    assert prev[0].max() > 0.6 and prev[1].max() < 0.2, prev


def test_in_context_learning(model):
    loss = in_context_loss(model, repeated_tokens(64, 20, batch=16, seed=8))
    first, second = loss[:19].mean(), loss[20:].mean()
    assert first > 3.5 and second < 1.0, (first, second)  # ln 64 = 4.16: the first copy is noise


def test_patching_locates_the_circuit_in_layer_1(model):
    from zoo.inside.patching import patch_heads
    g = torch.Generator().manual_seed(9)
    half = torch.randint(0, 64, (8, 12), generator=g)
    clean = torch.cat([half, half[:, :-1]], 1)
    corrupted = clean.clone()
    corrupted[:, 11] = (clean[:, 11] + 1 + torch.randint(0, 63, (8,), generator=g)) % 64
    answer = half[:, -1]
    metric = lambda lg: lg[:, -1].log_softmax(-1).gather(-1, answer[:, None]).mean()  # noqa: E731
    with torch.no_grad():
        lo, hi = float(metric(model(corrupted))), float(metric(model(clean)))
    frac = (patch_heads(model, clean, corrupted, metric) - lo) / (hi - lo)  # (L, H)
    assert hi - lo > 3
    assert frac[1].sum() > 0.7 and frac[0].abs().max() < 0.05, frac


def test_the_card_reports_the_measured_scores(model):
    card = (FOLDER / "README.md").read_text(encoding="utf-8")
    ind = induction_score(model, length=20, batch=16, seed=1)  # the card's inputs
    for l in range(2):
        for h in range(4):
            assert re.search(rf"\| {l}\.{h} \| {ind[l, h]:.3f} \|", card), (l, h)
    assert "## 中文" in card and "scripts/train_induction.py" in card
    assert not re.search(r"(?<![\w.])/(home|root|tmp|work|usr|Users|mnt|opt)/", card)

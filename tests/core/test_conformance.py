"""zoo's conformance kit (``zoo.testing``) over every built-in component.

Parametrised over the live registry at collection time, so a component another change adds to
``plugins/`` is checked without touching this file: one test per (component, check, architecture).
The naive per-query attention loop and the bfloat16 runs are the slow part and are marked ``slow``.
"""
from __future__ import annotations

import pytest

import zoo
from zoo.testing import CHECKS, Kit


def _hf_json() -> str:
    """A tiny word-level tokenizer.json, built offline, for the ``hf`` tokenizer's checks."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "attention", "is", "all", "you", "need"]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok.to_str()


def _params() -> dict:
    try:
        return {"tokenizer:hf": {"json": _hf_json()}}
    except ImportError:  # `tokenizers` is a test dependency; without it hf is skipped by the kit
        return {}


KIT = Kit(zoo.get_registry(), _params())
CASES = KIT.cases()


def _marks(case):
    slow = case.check == "bfloat16" or (case.subject == "attention:naive" and case.arch)
    return [pytest.mark.slow] if slow else []


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=_marks(c)) for c in CASES])
def test_builtin_component_conforms(case):
    res = KIT.run(case)
    if res.status == "skip":
        pytest.skip(res.note)
    assert res.status == "pass", f"{case.id}: {res.note} (measured {res.error}, tolerance {res.tol})"


def test_every_builtin_component_and_check_is_covered():
    reg = zoo.get_registry()
    covered = {c.subject for c in CASES}
    assert covered == {c.key for c in reg.list()}
    per_check = {ch: sum(c.check == ch for c in CASES) for ch in CHECKS}
    assert per_check["reference"] == len(reg.list("attention"))
    assert per_check["mask_offset"] == len(reg.list("mask"))
    assert per_check["kv_cache"] == 2 * (len(reg.list()) - len(reg.list("tokenizer")))


def test_builtin_attention_kernels_that_claim_exactness_are_checked():
    """Guard against the kit silently skipping: every exact built-in kernel is compared, and sdpa's
    result is a real measurement below the tolerance."""
    res = KIT.run(next(c for c in CASES if c.subject == "attention:sdpa" and c.check == "reference"))
    assert res.status == "pass" and res.error is not None and 0 <= res.error < 1e-5
    assert "no mask" in res.note and "bool mask" in res.note and "score bias" in res.note


@pytest.mark.gpu
def test_kit_on_cuda():
    """The model and kernel checks on the GPU (decoder models; every built-in component)."""
    from zoo.testing import verify

    results = verify(checks=["forward_backward", "bfloat16", "causal", "padding", "kv_cache",
                             "save_load", "reference", "masked_rows", "weights"],
                     archs=["decoder"], device="cuda", params=_params())
    failed = [f"{r.subject} {r.check}: {r.note}" for r in results if r.status == "fail"]
    assert not failed, "\n".join(failed)
    assert sum(r.status == "pass" for r in results) > 50

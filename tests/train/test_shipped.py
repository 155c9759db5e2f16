"""The trained checkpoints shipped in checkpoints/: they load, generate, and do what their cards say."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import torch

import zoo
from zoo.train.data import numeral_pairs, read_documents
from zoo.train import MLMTask, TrainConfig, evaluate, prepare

ROOT = Path(__file__).resolve().parents[2]
POEMS = ROOT / "data" / "poems.txt"
SHIPPED = ["poet_gpt", "poet_bert", "numerals_t5"]

# Issue 13's measures the shipped Tang checkpoints do not meet yet (None: met), with the value
# measured by scripts/train_shipped.py for the card: the reason of a strict xfail.
GPT_NATS_UNMET = None
GPT_FORM_UNMET = None
GPT_RUN_UNMET = None
BERT_TOP1_UNMET = None


@pytest.fixture(scope="module")
def shipped():
    """scripts/train_shipped.py: the cards' measures and baselines, computed by the same code."""
    spec = importlib.util.spec_from_file_location("train_shipped", ROOT / "scripts" / "train_shipped.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def models():
    return {}


def _on_tang(name: str) -> bool:
    """Whether the shipped checkpoint was trained on the Tang corpus (data/tang_train.txt.xz)."""
    card = (ROOT / "checkpoints" / name / "README.md").read_text(encoding="utf-8")
    return "- data: `data/tang_train.txt.xz`" in card


# Issue 13's measures for models trained on the Tang corpus.  A checkpoint still trained on the
# small data/poems.txt fails them: expected (strict, so the mark must go once it is retrained).
# A measure the shipped Tang checkpoint does not meet yet is held the same way, with the measured
# value as the reason (``unmet``): a later, longer run that meets it turns the test into an XPASS,
# which fails the suite until the mark is removed.
def tang_measure(name, unmet: str | None = None):
    if not _on_tang(name):
        return pytest.mark.xfail(True, strict=True,
                                 reason=f"{name} is not yet retrained on the Tang corpus "
                                        f"(python scripts/train_shipped.py {name})")
    return pytest.mark.xfail(unmet is not None, strict=True, reason=unmet or "")


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
    for needed in ("## Training", "objective:", "steps:", "wall time:", "## Sample outputs",
                   "## 中文", "## Spec", "scripts/train_shipped.py"):
        assert needed in card, needed
    assert "## Results" in card or "## Final metrics" in card
    plain = re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", card, flags=re.S))
    assert "<mask>" not in plain  # outside code, Markdown/HTML would swallow it
    assert (folder / "loss.png").stat().st_size > 1000
    machine_path = re.compile(r"(?<![\w.])/(home|root|tmp|work|usr|Users|mnt|opt)/")
    assert not machine_path.search(card)  # no paths of the machine that trained it
    assert not any(machine_path.search(v) for v in zoo.io.checkpoint.read_metadata(folder).values())


@pytest.mark.parametrize("name", SHIPPED)
def test_the_cards_spec_block_is_the_checkpoints_spec_without_its_defaults(name):
    """The card's *Spec* block parses back to the checkpoint's own spec.yaml, and names no component
    parameter at its default (the card listed every RoPE default: ``scaling: none, factor: 1.0,
    low_freq_factor: 1.0 ...``)."""
    import yaml

    folder = ROOT / "checkpoints" / name
    block = re.search(r"## Spec\n\n```yaml\n(.*?)\n```", (folder / "README.md").read_text(encoding="utf-8"),
                      flags=re.S).group(1)
    spec = zoo.spec(folder / "spec.yaml")
    assert zoo.model.spec.parse_spec(yaml.safe_load(block)) == spec
    assert block.strip() == spec.to_yaml(brief=True).strip()
    for default in ("low_freq_factor", "original_max_len", "interleaved", "eps: 1.0e-05"):
        assert default not in block, default


def _windows_setup(model, objective, block):
    """The objective's windows over the held-out Tang poems (never trained on), in the model's own
    vocabulary."""
    cfg = TrainConfig(objective=objective, holdout=0.1, block_size=block, batch_size=16,
                      eval_batches=16, seed=0)
    return prepare(ROOT / "data" / "tang_heldout.txt", cfg, model.spec, model.tokenizer)


@tang_measure("poet_gpt", unmet=GPT_NATS_UNMET)
def test_poet_gpt_beats_the_bigram_baseline_on_heldout_poems(models, shipped):
    """Held-out nats per character below a smoothed character bigram fitted on the training poems."""
    model = _load(models, "poet_gpt")
    tok = model.tokenizer
    ids = shipped.heldout_ids(tok)
    base = shipped.ngram_baselines(shipped.train_ids(tok), ids, tok.vocab_size)
    assert base["bigram"] < base["unigram"] - 1.0  # the baseline is a real one
    nats = shipped.lm_nats(model, ids)
    assert nats < base["bigram"], (nats, base)


@pytest.fixture(scope="module")
def gpt_form(models, shipped):
    """poet_gpt's next lines for the first lines of held-out 5- and 7-character poems: sampled at
    the UI's defaults (seeded; the card used seed 0, this is a fresh draw) and greedy."""
    model = _load(models, "poet_gpt")
    pairs = shipped.first_lines(read_documents(shipped.TANG_HELDOUT))
    assert len(pairs) > 400 and {len(p) for p, _ in pairs} == {6, 8}
    assert shipped.UI_SAMPLING == dict(do_sample=True, temperature=0.8, top_k=20, top_p=0.95)
    return shipped.gpt_line_form(model, pairs, seed=1)


@tang_measure("poet_gpt", unmet=GPT_FORM_UNMET)
def test_poet_gpt_next_line_keeps_the_form(gpt_form):
    """The sampled next line has the first line's length and the original's closing mark at least
    90% of the time."""
    assert gpt_form["next_line_form"] >= 0.90, gpt_form


@tang_measure("poet_gpt", unmet=GPT_RUN_UNMET)
def test_poet_gpt_greedy_never_repeats_a_character_three_times(gpt_form, shipped):
    """Greedy decoding with the Run tab's repetition penalty at the card's value never writes one
    character three times in a row on those prompts; without it the model does loop (which is why
    the penalty is a user-visible option, and the card says so)."""
    assert shipped.GREEDY_PENALTY == 1.3
    assert gpt_form["greedy_longest_run"] < 3, gpt_form
    assert gpt_form["plain_greedy_loops"] > 0 and gpt_form["plain_greedy_longest_run"] >= 3


def test_line_form_and_run_measures_by_hand(shipped):
    assert shipped.first_lines(["《登鹳雀楼》王之涣\n白日依山尽，黄河入海流。\n欲穷千里目，更上一层楼。"]) == [
        ("白日依山尽，", "黄河入海流。")]
    assert shipped.first_lines(["《t》a\n白日依山尽，黄河入海。"]) == []  # 5 then 4: not a couplet
    assert shipped.same_form("黄河入海流。", "青山独自行。\n") and not shipped.same_form(
        "黄河入海流。", "青山独自。") and not shipped.same_form("黄河入海流。", "青山独自行？")
    assert shipped.longest_run("一一一二") == 3 and shipped.longest_run("萧萧下") == 2


def test_poet_gpt_continues_a_line_in_chinese(models):
    model = _load(models, "poet_gpt")
    text = model.generate("床前明月光，", max_new_tokens=24, do_sample=True, temperature=0.8, top_k=20,
                          top_p=0.95, seed=0)
    han = [c for c in text if "\u4e00" <= c <= "\u9fff"]
    assert len(han) >= 5 and len(han) >= len(text) // 2, text
    greedy = model.generate("床前明月光，", max_new_tokens=12)
    assert greedy and any(p in greedy for p in "，。？！"), greedy


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


@tang_measure("poet_bert", unmet=BERT_TOP1_UNMET)
def test_poet_bert_beats_the_baselines_on_heldout_poems(models, shipped):
    """Top-1 on hidden characters of held-out poems above the most-frequent-character and the
    two-neighbour bigram baselines."""
    model = _load(models, "poet_bert")
    res = shipped.bert_masked_accuracy(model, model.tokenizer, seed=1)
    assert res["masked_chars"] > 2000
    assert res["masked_top1"] > res["bigram_baseline"] > res["most_frequent_baseline"], res


def test_poet_bert_puts_the_moon_in_its_top_3(models):
    """月 among the top 3 for 床前明<mask>光，疑是地上霜。 (The Tang corpus has Li Bai's poem as
    床前看月光, so this is the line as learners know it, not a training line.)"""
    top = [c["text"] for c in zoo.fill_mask(_load(models, "poet_bert"), "床前明<mask>光，疑是地上霜。",
                                            top_k=3)[0]]
    assert "月" in top, top


def test_numerals_t5_exact_match_on_fresh_heldout_numbers(models):
    model = _load(models, "numerals_t5")
    cn2an = pytest.importorskip("cn2an")
    pairs = numeral_pairs(1000, seed=2026, heldout=True)  # never seen in training, all magnitudes
    assert {len(s) for s, _ in pairs} == set(range(1, 9))
    pairs = [(s, cn2an.an2cn(int(s), "low")) for s, _ in pairs]  # the reference, not our function
    preds = model.generate([s for s, _ in pairs], max_new_tokens=24)
    wrong = [(s, t, p) for (s, t), p in zip(pairs, preds) if p != t]
    assert len(wrong) <= 5, wrong[:10]  # >= 99.5% exact match


def test_shipped_checkpoint_fine_tunes_from_its_name(tmp_path):
    """`zoo train poet_gpt ...` continues from the shipped weights with the shipped tokenizer."""
    from zoo.train import train

    tok = zoo.load("poet_gpt").tokenizer
    docs = read_documents(POEMS) + read_documents(ROOT / "data" / "tang_heldout.txt")
    shipped_text = [d for d in docs if tok.unk_id not in tok.encode(d)][:40]  # all characters known
    data = tmp_path / "poems.txt"
    data.write_text("\n\n".join(shipped_text) + "\n", encoding="utf-8")
    r = train("poet_gpt", data, out=tmp_path / "ft", objective="clm", steps=2, batch_size=2,
              block_size=16, progress=False, eval_every=2, eval_batches=1, holdout=0.1)
    assert r.tokenizer.to_json() == zoo.load("poet_gpt").tokenizer.to_json()
    assert r.final["eval_loss"] < r.history[0]["unigram_baseline_loss"]

"""The trainer, the data readers and the Chinese-numerals task."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import zoo
from zoo.train.data import (is_heldout_number, numeral_pairs, read_documents, read_pairs, sample_numbers,
                      split_holdout, to_chinese_numeral, write_pairs)
from zoo.train import (CLMObjective, TrainConfig, exact_match_rate, greedy_seq2seq, lr_at,
                       read_metrics, train)

ROOT = Path(__file__).resolve().parents[2]
POEMS = ROOT / "data" / "poems.txt"


pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------------- Chinese numerals, by hand
@pytest.mark.parametrize("n, text", [
    # digits and 零
    (0, "零"), (1, "一"), (2, "二"), (9, "九"),
    # units; 二 never 两
    (20, "二十"), (200, "二百"), (2000, "二千"), (22222, "二万二千二百二十二"), (2345, "二千三百四十五"),
    # a leading 一十 is written 十 ...
    (10, "十"), (15, "十五"), (19, "十九"), (100000, "十万"), (150000, "十五万"), (110000, "十一万"),
    # ... but stays 一十 inside a number
    (110, "一百一十"), (1010, "一千零一十"), (100010, "十万零一十"), (10100000, "一千零一十万"),
    (2110, "二千一百一十"),
    # one 零 per run of zeros between non-zero digits
    (101, "一百零一"), (1001, "一千零一"), (10086, "一万零八十六"), (100100, "十万零一百"),
    (30005, "三万零五"), (1020304, "一百零二万零三百零四"),
    # ... across the 万 boundary only when the low group starts with a zero (cn2an agrees;
    # 20003000 was "二千万零三千" here before issue 13 fixed the rule)
    (1000001, "一百万零一"), (10010000, "一千零一万"), (10000001, "一千万零一"), (20003000, "二千万三千"),
    (500600, "五十万零六百"),
    # trailing zeros are dropped (of the number and of the 万 group)
    (10000, "一万"), (1200, "一千二百"), (120000, "十二万"), (20000000, "二千万"),
    (12340000, "一千二百三十四万"),
    # the whole range
    (12345678, "一千二百三十四万五千六百七十八"), (99999999, "九千九百九十九万九千九百九十九"),
])
def test_chinese_numerals_hand_checked(n, text):
    assert to_chinese_numeral(n) == text


@pytest.mark.parametrize("bad", [-1, 100_000_000, 3.0, "12", True, None])
def test_chinese_numerals_reject_bad_input(bad):
    with pytest.raises(zoo.DataError, match="to_chinese_numeral"):
        to_chinese_numeral(bad)


def test_numeral_only_uses_the_allowed_characters():
    allowed = set("零一二三四五六七八九十百千万")
    for n in sample_numbers(3000, seed=3):
        text = to_chinese_numeral(n)
        assert set(text) <= allowed and "两" not in text and "零零" not in text
        assert not text.endswith("零") or n == 0


def test_heldout_numbers_never_reach_training_and_cover_all_magnitudes():
    train_nums = sample_numbers(20000, seed=0)
    held = sample_numbers(1000, seed=7, heldout=True)
    assert len(set(held)) == 1000
    assert not any(is_heldout_number(n) for n in train_nums)
    assert all(is_heldout_number(n) for n in held if n >= 10)
    assert {len(str(n)) for n in held} == set(range(1, 9))
    assert not (set(held) - set(range(10))) & set(train_nums)
    assert numeral_pairs(3, seed=1) == numeral_pairs(3, seed=1)  # deterministic


# ---------------------------------------------------------------------- data files and their errors
def test_poems_corpus_is_clean():
    docs = read_documents(POEMS)
    assert len(docs) > 380
    text = POEMS.read_text(encoding="utf-8")
    assert "\x1b" not in text and "\n%\n" not in text and "作者" not in text
    assert any(d.startswith("《夜思》李白\n床前明月光，疑是地上霜。") for d in docs)


def test_split_holdout_is_deterministic_and_disjoint():
    a, b = split_holdout(list(range(100)), 0.1, seed=3)
    assert (a, b) == split_holdout(list(range(100)), 0.1, seed=3)
    assert len(b) == 10 and not set(a) & set(b) and sorted(a + b) == list(range(100))


def _spec(arch="decoder", **over):
    s = dict(name=f"tiny_{arch}", arch=arch, vocab_size=64, max_len=32, d_model=32, num_layers=2,
             num_heads=2, d_ff=64, dropout=0.0)
    if arch == "encoder":
        s.update(mask="bidirectional", pad_id=0, head={"kind": "mlm"})
    if arch == "encoder_decoder":
        s.update(pad_id=0, encoder={"mask": "bidirectional"}, decoder={"mask": "causal"})
    s.update(over)
    return s


def _text(tmp_path, content, name="d.txt", raw=False):
    p = tmp_path / name
    p.write_bytes(content if raw else content.encode("utf-8"))
    return p


Q = dict(progress=False, eval_every=5, log_every=1, save_every=100, holdout=0.2)


@pytest.mark.parametrize("content, match", [
    ("", "empty"),
    ("  \n\n \n", "empty"),
])
def test_empty_data_is_a_clear_error(tmp_path, content, match):
    with pytest.raises(zoo.DataError, match=match):
        train(_spec(), _text(tmp_path, content), out=tmp_path / "o", steps=2, **Q)


def test_undecodable_bytes_are_a_clear_error(tmp_path):
    data = _text(tmp_path, "春眠不觉晓\n".encode("utf-8") + "处处闻啼鸟".encode("gbk"), raw=True)
    with pytest.raises(zoo.DataError, match=r"not UTF-8 .*line 2.*fix: convert the file to UTF-8"):
        train(_spec(), data, out=tmp_path / "o", steps=2, **Q)


def test_missing_data_file(tmp_path):
    with pytest.raises(zoo.DataError, match="no such data file"):
        train(_spec(), tmp_path / "nope.txt", out=tmp_path / "o", steps=2, **Q)


def test_sequence_longer_than_max_len_is_a_clear_error(tmp_path):
    pairs = _text(tmp_path, "1\t一\n" + "9" * 40 + "\t九\n", "p.tsv")
    with pytest.raises(zoo.DataError, match=r"example 2 is too long.*max_len"):
        train(_spec("encoder_decoder"), pairs, out=tmp_path / "o", objective="seq2seq", steps=2,
              **{**Q, "holdout": 0.0})
    docs = _text(tmp_path, "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n")
    with pytest.raises(zoo.DataError, match=r"block_size 64 is above the spec's max_len 32"):
        train(_spec(), docs, out=tmp_path / "o2", steps=2, block_size=64, **Q)


def test_pairs_file_needs_tabs(tmp_path):
    with pytest.raises(zoo.DataError, match="line 2 has no tab"):
        read_pairs(_text(tmp_path, "1\t一\n2 二\n"))


def test_vocabulary_mismatch_is_a_clear_error(tmp_path):
    docs = _text(tmp_path, "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 3)
    # a fresh spec whose embedding table is too small for the data's characters
    with pytest.raises(zoo.DataError, match=r"vocabulary mismatch.*--set vocab_size=2\d"):
        train(_spec(vocab_size=8), docs, out=tmp_path / "o", steps=2, **Q)
    # a trained checkpoint meeting characters its tokenizer never saw
    r = train(_spec(), docs, out=tmp_path / "o", steps=2, **Q)
    other = _text(tmp_path, "床前明月光，疑是地上霜。\n\n举头望明月，低头思故乡。\n", "other.txt")
    with pytest.raises(zoo.DataError, match="not in the tokenizer's vocabulary"):
        train(r.out, other, out=tmp_path / "o3", steps=2, **Q)


def test_objective_must_fit_the_architecture(tmp_path):
    docs = _text(tmp_path, "春眠不觉晓\n\n处处闻啼鸟\n")
    with pytest.raises(zoo.ZooError,
                       match=r"objective 'mlm' needs an encoder model.*valid options: clm, prefix_lm"):
        train(_spec(), docs, out=tmp_path / "o", objective="mlm", steps=2, **Q)
    with pytest.raises(zoo.ZooError, match="unknown objective"):
        TrainConfig(objective="gan").validate()


# ---------------------------------------------------------------------- schedule and loop
def test_lr_schedule_warmup_then_cosine():
    cfg = TrainConfig(lr=1.0, warmup=10, steps=110, min_lr_ratio=0.1)
    lrs = [lr_at(s, cfg) for s in range(110)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a <= b for a, b in zip(lrs[:10], lrs[1:10]))
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lrs[60] == pytest.approx(0.55, abs=0.01) and lrs[-1] == pytest.approx(0.1, abs=1e-3)


def test_clm_window_is_split_into_input_and_next_token_labels():
    w = torch.tensor([[11, 12, 13, 14, 15], [21, 22, 23, 24, 25]])  # two windows of block + 1
    b = CLMObjective.shift(w)
    assert b["ids"].tolist() == [[11, 12, 13, 14], [21, 22, 23, 24]]
    assert b["labels"].tolist() == [[12, 13, 14, 15], [22, 23, 24, 25]]


def test_clm_loss_scores_each_position_against_the_next_character(tmp_path):
    """The first logged loss of a run is the initial model's loss on the first batch.  With one
    possible window, that batch is known; the loss is recomputed here with F.cross_entropy on targets
    written out by hand (the next character of each position), and differs from the unshifted one."""
    text = "春眠不觉晓"  # 5 characters + <eos> = one window of block_size 5 + 1
    r = train(_spec(), _text(tmp_path, text), out=tmp_path / "o", objective="clm", steps=1,
              batch_size=2, block_size=5, device="cpu", **{**Q, "holdout": 0.0})  # float32
    first = next(h["loss"] for h in r.history if h.get("step") == 1 and "loss" in h)
    tok = r.tokenizer
    ids = torch.tensor([tok.encode("春眠不觉晓")])  # (1, 5)
    next_chars = torch.tensor(tok.encode("眠不觉晓") + [tok.eos_id])  # what follows each position
    with torch.no_grad():
        logits = zoo.build(_spec(), seed=0)(ids)[0]  # (5, V) the model train() starts from
    shifted = float(F.cross_entropy(logits, next_chars))
    unshifted = float(F.cross_entropy(logits, ids[0]))
    assert first == pytest.approx(shifted, rel=1e-5)
    assert abs(shifted - unshifted) > 1e-2, (shifted, unshifted)  # the check can tell them apart


def test_seq2seq_exact_match_decodes_like_a_naive_greedy_loop(tmp_path):
    """Exact match decodes with model.generate (KV cache, left padding, batches); reference: greedy
    argmax of the full forward pass, one source at a time, no cache, no padding."""
    pairs = [("12", "十二"), ("305", "三百零五"), ("7", "七"), ("10086", "一万零八十六")]
    r = train(_spec("encoder_decoder"), write_pairs(tmp_path / "p.tsv", pairs), out=tmp_path / "o",
              objective="seq2seq", steps=40, batch_size=4, lr=1e-2, warmup=5, device="cpu",
              **{**Q, "holdout": 0.0, "eval_every": 1000})
    model, tok = r.model, r.tokenizer
    sources = [tok.encode(s) + [tok.eos_id] for s, _ in pairs]

    def naive(src):
        out = [tok.bos_id]
        with torch.no_grad():
            for _ in range(model.spec.max_len - 1):
                nxt = int(model(torch.tensor([src]), torch.tensor([out]))[0, -1].argmax())
                if nxt == tok.eos_id:
                    break
                out.append(nxt)
        return out[1:]

    want = [naive(s) for s in sources]
    assert len(set(map(tuple, want))) > 1, want  # a model that says something
    assert greedy_seq2seq(model, tok, sources, batch_size=3) == want
    targets = want[:2] + [want[2] + [tok.bos_id], [tok.bos_id]]  # two right, two wrong
    assert exact_match_rate(model, tok, sources, targets) == 0.5


@pytest.mark.parametrize("arch, objective", [("decoder", "clm"), ("encoder_decoder", "seq2seq")])
def test_overfits_a_tiny_batch(tmp_path, arch, objective):
    if objective == "clm":
        data = _text(tmp_path, "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。")  # 24 chars + eos:
        kw = dict(block_size=24, batch_size=4)  # one possible window, so a fixed batch
    else:
        data = write_pairs(tmp_path / "p.tsv", [("12", "十二"), ("305", "三百零五"), ("7", "七"),
                                                ("10086", "一万零八十六")])
        kw = dict(batch_size=4)
    r = train(_spec(arch), data, out=tmp_path / "o", objective=objective, steps=100, lr=1e-2,
              warmup=10, weight_decay=0.0, **{**Q, "holdout": 0.0, "eval_every": 1000}, **kw)
    losses = [h["loss"] for h in r.history if "loss" in h]
    assert losses[-1] < 0.1 * losses[0], (losses[0], losses[-1])
    assert (r.out / "loss.png").stat().st_size > 1000
    assert zoo.load(r.out).tokenizer.vocab_size == r.tokenizer.vocab_size


def _losses(out):
    return {r["step"]: r["loss"] for r in read_metrics(out) if "loss" in r}


def test_resume_continues_exactly(tmp_path):
    """Stop at step 6 (SIGTERM: the loop saves first), resume, and get the uninterrupted losses."""
    data = POEMS
    kw = dict(objective="clm", steps=10, batch_size=4, block_size=16, save_every=100, progress=False,
              log_every=1, eval_every=5, holdout=0.1, lr=2e-3, warmup=2)
    spec = _spec(dropout=0.1, vocab_size=3000)
    full = train(spec, data, out=tmp_path / "full", **kw)

    def stop_at_6(rec):
        if rec.get("step") == 6 and "loss" in rec:
            os.kill(os.getpid(), signal.SIGTERM)

    part = train(spec, data, out=tmp_path / "part", callback=stop_at_6, **kw)
    assert part.interrupted and part.step == 6
    state = json.loads((tmp_path / "part" / "trainer_state.json").read_text())
    assert state["step"] == 6 and state["config"]["steps"] == 10
    with pytest.raises(zoo.ZooError, match="already holds a training run"):
        train(spec, data, out=tmp_path / "part", **kw)
    resumed = train(None, None, out=tmp_path / "part", resume=True, progress=False)
    assert resumed.step == 10 and not resumed.interrupted
    # the time said of a resumed run is this part's, with the whole run's beside it (issue 34: a
    # resumed run's own 62 s read "after 144 s")
    assert part.resumed_time == 0 and resumed.resumed_time == pytest.approx(state["elapsed_s"])
    assert 0 < resumed.resumed_time < resumed.wall_time
    from zoo.commands.train import outcome

    said = outcome(resumed)
    assert f"in {resumed.wall_time - resumed.resumed_time:.0f} s ({resumed.wall_time:.0f} s in all" in said, said
    assert "in all" not in outcome(part)
    a, b = _losses(tmp_path / "full"), _losses(tmp_path / "part")
    assert sorted(a) == sorted(b) == list(range(1, 11))
    for s in range(1, 11):
        assert b[s] == pytest.approx(a[s], abs=1e-6), s
    for k, v in full.model.state_dict().items():
        torch.testing.assert_close(resumed.model.state_dict()[k], v, atol=1e-6, rtol=1e-5)


def test_logged_loss_is_the_mean_of_the_steps_in_its_window_even_after_a_resume(tmp_path):
    """log_every=4, stopped at step 2 and resumed: the step-4 record averages steps 3 and 4 (the
    only ones this process took), by the per-step losses of an uninterrupted run."""
    data = _text(tmp_path, "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 4)
    kw = dict(objective="clm", steps=4, batch_size=4, block_size=8, progress=False, holdout=0.2,
              save_every=100, lr=2e-3, warmup=1, device="cpu")
    spec = _spec()
    per_step = _losses(train(spec, data, out=tmp_path / "each", log_every=1, eval_every=100,
                             **kw).out)

    def stop_at_2(rec):
        if rec.get("step") == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    part = train(spec, data, out=tmp_path / "part", log_every=4, eval_every=2, callback=stop_at_2,
                 **kw)
    assert part.interrupted and part.step == 2
    train(None, None, out=tmp_path / "part", resume=True, progress=False)
    assert _losses(tmp_path / "part") == {4: pytest.approx((per_step[3] + per_step[4]) / 2, abs=1e-6)}


def test_grad_accumulation_matches_one_big_batch(tmp_path):
    kw = dict(objective="seq2seq", steps=4, batch_size=8, progress=False, log_every=1,
              eval_every=100, holdout=0.0, lr=3e-3, warmup=1)
    data = write_pairs(tmp_path / "p.tsv", numeral_pairs(64, seed=2))
    a = train(_spec("encoder_decoder"), data, out=tmp_path / "a", **kw)
    b = train(_spec("encoder_decoder"), data, out=tmp_path / "b", grad_accum=4, **kw)
    la, lb = _losses(a.out), _losses(b.out)
    for s in la:
        assert lb[s] == pytest.approx(la[s], rel=1e-4)


@pytest.mark.parametrize("pairs", [False, True])
def test_prefix_lm_trains(tmp_path, pairs):
    if pairs:
        data = write_pairs(tmp_path / "p.tsv", numeral_pairs(200, seed=1))
    else:
        data = POEMS
    spec = _spec(mask={"kind": "prefix", "length": 0}, vocab_size=3000, max_len=40)
    r = train(spec, data, out=tmp_path / "o", objective="prefix_lm", steps=30, batch_size=8,
              block_size=24, lr=3e-3, warmup=3, **{**Q, "eval_every": 30})
    losses = [h["loss"] for h in r.history if "loss" in h]
    assert losses[-1] < losses[0] - 0.5 and r.final["eval_loss"] < losses[0]


def test_mlm_reports_masked_accuracy(tmp_path):
    r = train(_spec("encoder", vocab_size=3000, max_len=32), POEMS, out=tmp_path / "o",
              objective="mlm", steps=3, batch_size=4, block_size=32, **Q)
    assert 0.0 <= r.final["eval_masked_acc"] <= 1.0 and r.final["eval_loss"] > 0


@pytest.mark.parametrize("frac, shares", [(0.8, (0.8, 0.1, 0.1)), (1.0, (1.0, 0.0, 0.0)),
                                          (0.0, (0.0, 0.5, 0.5))])
def test_mlm_corrupts_the_picked_tokens_as_mask_token_frac_says(frac, shares):
    """Of the picked tokens, ``mask_token_frac`` become <mask> and the rest split evenly between a
    random token and the token itself (BERT's 80/10/10 at 0.8); counted on ~12,000 picks, so the
    shares are within 0.02 of the rule."""
    from zoo.train.prepare import prepare

    cfg = TrainConfig(objective="mlm", mask_prob=0.3, mask_token_frac=frac, block_size=32,
                      holdout=0.1).validate()
    obj, tok, spec, _ = prepare(POEMS, cfg, zoo.spec(_spec("encoder", vocab_size=8)),
                                fit_vocab=True)
    b = obj.train_batch(torch.Generator().manual_seed(0), 1280)
    picked = b["labels"] != -100
    assert 0.28 < picked.float().mean() < 0.32  # mask_prob of the (non-special) tokens
    x, gold = b["ids"][picked], b["labels"][picked]
    masked = x == tok.mask_id
    kept = x == gold
    # a random draw can hit the original token (1 in ~1,800 here): count those as random
    rand = ~masked & ~kept
    got = (float(masked.float().mean()), float(rand.float().mean()), float(kept.float().mean()))
    for g, want in zip(got, shares):
        assert abs(g - want) < 0.02, (got, shares)


@pytest.mark.parametrize("rule", ["line", "document"])
def test_training_windows_begin_where_window_starts_says(tmp_path, rule):
    """``window_starts: line``: every window's first token starts a line (it is the stream's first
    token or follows a newline or <eos>); ``document``: it follows <eos>.  ``any`` windows do not
    (checked too, so the test knows a mid-line start when it sees one)."""
    from zoo.train.prepare import prepare

    text = "《春晓》孟浩然\n春眠不觉晓，处处闻啼鸟。\n夜来风雨声，花落知多少。\n\n" \
           "《登鹳雀楼》王之涣\n白日依山尽，黄河入海流。\n欲穷千里目，更上一层楼。\n\n"
    data = _text(tmp_path, text * 20)
    spec = zoo.spec(_spec(vocab_size=8))

    def firsts(rule):
        cfg = TrainConfig(objective="clm", block_size=8, window_starts=rule, holdout=0.05).validate()
        obj, tok, _, _ = prepare(data, cfg, spec, fit_vocab=True)
        w = obj.windows(torch.Generator().manual_seed(0), 400)  # (400, 9)
        stream = obj.train_ids.tolist()
        found = []
        for row in w.tolist():  # where in the stream each window was cut
            at = next(i for i in range(len(stream)) if stream[i:i + len(row)] == row)
            found.append(stream[at - 1] if at else None)
        return found, tok

    before, tok = firsts(rule)
    allowed = {None, tok.eos_id} | ({tok.encode("\n")[0]} if rule == "line" else set())
    assert set(before) <= allowed
    if rule == "line":
        assert tok.encode("\n")[0] in before  # line starts inside a poem are used too
    anywhere, _ = firsts("any")
    assert not set(anywhere) <= allowed


def test_window_starts_is_checked():
    with pytest.raises(zoo.ZooError, match="train.window_starts"):
        TrainConfig(window_starts="sentence").validate()


def test_mlm_head_on_selected_positions_equals_the_full_head():
    """``model(ids, select=...)`` (what MLM training calls) projects only the picked positions: the
    same logits as the full (B, T, V) output at those positions, in row-major order."""
    torch.manual_seed(0)
    model = zoo.build(_spec("encoder", head={"kind": "mlm", "transform": True})).eval()
    ids = torch.randint(5, 64, (3, 16))
    sel = torch.rand(3, 16) < 0.3
    full = model(ids)  # (3, 16, V)
    part = model(ids, select=sel)  # (N, V)
    assert part.shape == (int(sel.sum()), 64)
    torch.testing.assert_close(part, full[sel], atol=1e-5, rtol=1e-5)


def test_metrics_file_and_trainer_state_are_safe_formats(tmp_path):
    data = _text(tmp_path, "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 4)
    r = train(_spec(), data, out=tmp_path / "o", steps=5, batch_size=2, block_size=8, **Q)
    recs = read_metrics(r.out)
    assert recs[0]["event"] == "start" and recs[-1]["event"] == "end"
    assert any("eval_loss" in x for x in recs) and all("step" in x for x in recs)
    from safetensors import safe_open

    with safe_open(str(r.out / "trainer_state.safetensors"), "pt") as f:
        keys = list(f.keys())
    assert any(k.startswith("optim.") and k.endswith("exp_avg") for k in keys)
    assert any(k.startswith("model.") for k in keys)
    assert not list(r.out.glob("*.pt")) and not list(r.out.glob("*.bin"))


def test_keep_best_saves_the_lowest_heldout_loss(tmp_path):
    r = train(_spec(vocab_size=3000), POEMS, out=tmp_path / "o", steps=6, batch_size=4,
              block_size=16, lr=3e-3, warmup=1, keep_best=True, **{**Q, "eval_every": 2})
    evals = {h["step"]: h["eval_loss"] for h in r.history if "eval_loss" in h and "event" not in h}
    best_step = min(evals, key=evals.get)
    assert r.final["best_step"] == best_step and r.final["best_eval_loss"] == evals[best_step]
    best = zoo.load(tmp_path / "o" / "best")
    assert json.loads(best.checkpoint_metadata["zoo.extra.train"])["step"] == best_step


# ---------------------------------------------------------------------- command line
def test_cli_train_and_bad_data(tmp_path):
    from click.testing import CliRunner

    from zoo.cli import cli, main

    data = _text(tmp_path, "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 4)
    spec = tmp_path / "s.yaml"
    spec.write_text(zoo.spec(_spec()).to_yaml(), encoding="utf-8")
    res = CliRunner().invoke(cli, ["train", str(spec), "--data", str(data), "--steps", "3",
                                   "--out", str(tmp_path / "o"), "--batch-size", "2",
                                   "--block-size", "8", "--no-progress", "--eval-every", "3"])
    assert res.exit_code == 0, res.output
    assert "finished step 3" in res.output and (tmp_path / "o" / "model.safetensors").is_file()
    empty = _text(tmp_path, "", "empty.txt")
    with pytest.raises(SystemExit) as exc:
        main(["train", str(spec), "--data", str(empty), "--out", str(tmp_path / "e")])
    assert exc.value.code == 2


# ---------------------------------------------------------------------- killed run, distributed
def _zoo(*args, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ZOO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.Popen([sys.executable, "-m", "zoo.cli", *args], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


@pytest.mark.slow
def test_killed_run_resumes_losing_only_unsaved_steps(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(zoo.spec(_spec(vocab_size=3000)).to_yaml(), encoding="utf-8")
    out = tmp_path / "run"
    p = _zoo("train", str(spec), "--data", str(POEMS), "--steps", "400", "--out", str(out),
             "--batch-size", "4", "--block-size", "16", "--save-every", "5", "--eval-every", "1000",
             "--log-every", "1", "--no-progress")
    deadline = time.time() + 300
    while time.time() < deadline:
        done = [r["step"] for r in read_metrics(out) if "loss" in r] if out.exists() else []
        if done and max(done) >= 13:
            break
        assert p.poll() is None, p.communicate()[0]  # it must still be running
        time.sleep(0.2)
    p.kill()  # SIGKILL: no chance to save
    p.wait()
    # the step the resume will start from: the state file's own header (trainer_state.json is a
    # readable copy written just after it, so a kill between the two writes leaves it one save behind)
    from zoo.train.state import read_state

    saved = read_state(out)[0]["step"]
    assert saved % 5 == 0 and saved >= 10
    r = _zoo("train", "--resume", "--out", str(out), "--steps", str(saved + 3), "--no-progress")
    log, _ = r.communicate(timeout=300)
    assert r.returncode == 0, log
    steps = [x["step"] for x in read_metrics(out) if "loss" in x]
    assert steps == list(range(1, saved + 4))  # the unsaved steps' records were dropped, not doubled
    assert json.loads((out / "trainer_state.json").read_text())["step"] == saved + 3
    zoo.load(out)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_process_gloo_matches_one_process(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(zoo.spec(_spec(vocab_size=3000)).to_yaml(), encoding="utf-8")
    common = ["--data", str(POEMS), "--steps", "6", "--batch-size", "8", "--block-size", "16",
              "--eval-every", "3", "--log-every", "1", "--no-progress", "--lr", "3e-3", "--warmup", "2"]
    one = _zoo("train", str(spec), "--out", str(tmp_path / "one"), *common)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ZOO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    two = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                            f"--master_port={_free_port()}", "-m", "zoo.cli",
                            "train", str(spec), "--out", str(tmp_path / "two"), *common],
                           env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    log1, _ = one.communicate(timeout=300)
    log2, _ = two.communicate(timeout=300)
    assert one.returncode == 0, log1
    assert two.returncode == 0, log2
    recs = read_metrics(tmp_path / "two")
    assert recs[0]["world_size"] == 2
    a, b = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for s in a:
        assert b[s] == pytest.approx(a[s], rel=1e-4, abs=1e-5), s
    ea = [r["eval_loss"] for r in read_metrics(tmp_path / "one") if "eval_loss" in r]
    eb = [r["eval_loss"] for r in recs if "eval_loss" in r]
    assert eb == pytest.approx(ea, rel=1e-4)
    m1, m2 = zoo.load(tmp_path / "one"), zoo.load(tmp_path / "two")
    for k, v in m1.state_dict().items():
        torch.testing.assert_close(m2.state_dict()[k], v, atol=1e-5, rtol=1e-4)


@pytest.mark.gpu
def test_trains_on_cuda_with_bf16_autocast_and_resumes(tmp_path):
    data = write_pairs(tmp_path / "p.tsv", numeral_pairs(500, seed=1))
    kw = dict(objective="seq2seq", batch_size=32, lr=3e-3, warmup=5, device="cuda", progress=False,
              log_every=10, eval_every=30, save_every=30, holdout=0.1)
    r = train(_spec("encoder_decoder"), data, out=tmp_path / "g", steps=60, **kw)
    assert next(r.model.parameters()).is_cuda
    losses = [h["loss"] for h in r.history if "loss" in h]
    assert losses[-1] < 0.7 * losses[0] and r.final["eval_loss"] < losses[0]
    cpu = zoo.load(r.out)  # a GPU-trained checkpoint loads anywhere
    assert not next(cpu.parameters()).is_cuda
    r2 = train(None, None, out=tmp_path / "g", resume=True, steps=90, device="cuda", progress=False)
    assert r2.step == 90 and not r2.interrupted


def test_the_estimate_before_the_first_step_changes_nothing_of_the_run(tmp_path, monkeypatch):
    """A run long enough gets an estimate before its first step (one timed forward and backward of
    the coming batch, issue 23); the run is the same, loss for loss and weight for weight, as one
    without it (the probe draws its batch from the step-seeded generator and discards its
    gradients; dropout is on, so a probe that consumed the random stream would show)."""
    import zoo.train.loop as loop

    kw = dict(objective="clm", steps=24, batch_size=4, block_size=16, save_every=100, progress=False,
              log_every=1, eval_every=100, holdout=0.1, lr=2e-3, warmup=2, grad_accum=2)
    spec = _spec(dropout=0.1, vocab_size=3000)
    with_probe = train(spec, POEMS, out=tmp_path / "a", **kw)
    est = [r for r in read_metrics(tmp_path / "a") if r.get("event") == "estimate"]
    assert [r["basis"] for r in est] == ["probe", "steps"]
    assert est[0]["step"] == 0 and est[0]["steps_left"] == 24 and est[0]["s_per_step"] > 0
    records = read_metrics(tmp_path / "a")
    first_step = next(i for i, r in enumerate(records) if "loss" in r)
    assert records.index(est[0]) < first_step  # printed before any step was taken
    monkeypatch.setattr(loop, "PROBE_MIN_STEPS", 10 ** 9)  # no probe
    without = train(spec, POEMS, out=tmp_path / "b", **kw)
    assert [r["basis"] for r in read_metrics(tmp_path / "b") if r.get("event") == "estimate"] == ["steps"]
    assert _losses(tmp_path / "a") == _losses(tmp_path / "b")
    for k, v in without.model.state_dict().items():
        assert torch.equal(with_probe.model.state_dict()[k], v), k

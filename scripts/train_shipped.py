"""Reproduce the trained checkpoints shipped in ``checkpoints/`` on the CPU (the reference path;
``--device cuda`` trains the same fp32 recipe on a GPU).

    python scripts/train_shipped.py poet_gpt        # or poet_bert, numerals_t5, all
    python scripts/train_shipped.py numerals_t5 --steps 200 --no-export   # a quick try
    python scripts/train_shipped.py poet_gpt --time-steps 20   # how long would it take here?

The poem models learn from the Tang corpus in ``data/`` (see ``data/SOURCE.md``) and are measured on
its held-out poems against a unigram and a smoothed character-bigram baseline computed here, on the
same text; the numerals model is measured on 1,000 fresh held-out numbers.

``poet_bert`` starts from the weights of ``checkpoints/poet_gpt`` (its preset's ``init_from``; an
encoder block is a decoder block with another mask), so it reproduces the shipped poet_bert from the
shipped poet_gpt; ``all`` trains and exports poet_gpt first, and poet_bert then starts from that.

Each preset trains with :func:`zoo.train.train` into ``runs/<name>/`` (checkpoint, trainer state,
``metrics.jsonl``, ``loss.png``; ``--resume`` continues a killed run), then evaluates it, and unless
``--no-export`` copies the weights into ``checkpoints/<name>/`` with a model card (``README.md``)
that records the spec, data, objective, steps, wall time, final metrics and sample outputs.
"""
from __future__ import annotations

import argparse
import json
import platform
import random
import re
import shutil
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import zoo  # noqa: E402
from zoo.train.data import (bigram_fill, encode_documents, ngram_baselines, numeral_pairs,  # noqa: E402
                      read_documents, write_pairs)
from zoo.train import TrainResult, read_metrics, train  # noqa: E402

TANG_TRAIN = ROOT / "data" / "tang_train.txt.xz"   # scripts/prepare_poems.py, data/SOURCE.md
TANG_HELDOUT = ROOT / "data" / "tang_heldout.txt"  # never trained on: the cards' and tests' poems

COMMON = dict(attention="sdpa", ffn={"kind": "mlp", "activation": "gelu"})

PRESETS = {
    "poet_gpt": dict(
        spec=dict(name="poet_gpt", arch="decoder", vocab_size=8, max_len=128, d_model=160,
                  num_layers=4, num_heads=5, d_ff=640, dropout=0.0, tie_embeddings=True,
                  # rotary positions: a line's length is a *relative* fact (characters since the
                  # last ，), which RoPE hands to attention directly; learned absolute positions
                  # reached only 30% right line lengths in the same CPU budget
                  mask="causal", positions="rope", norm={"kind": "layernorm", "placement": "pre"},
                  **COMMON),
        objective="clm", data=TANG_TRAIN,
        # 1,300 steps (5.3 M characters read, 1.6 epochs, dropout off: a short run underfits):
        # about 30 minutes on one thread of this 2-core CPU (1.3 s a step), which leaves the
        # other core free; the higher learning rate makes the most of a short run.  Windows begin
        # at line starts (window_starts: line): a prompt is a poem's first line, and a model that
        # saw windows begin mid-line cannot tell a 5-character line from the tail of a 7
        # (trained with windows anywhere, the same recipe kept the form 71% of the time)
        train=dict(steps=1300, batch_size=32, block_size=128, lr=3e-3, warmup=80, window_starts="line",
                   weight_decay=0.1, holdout=0.01, eval_every=250, eval_batches=16, save_every=250,
                   keep_best=True),
        blurb="A small GPT (decoder-only, causal, pre-norm, rotary positions) trained character "
              "by character on 48 k poems of the *Complete Tang Poems* (simplified script), on "
              "windows that begin at a line start. Give it the first line of a poem and it writes "
              "the next ones, in lines of the same length closed by ， and 。; give it "
              "`《title》author` and it starts a poem. Greedy decoding of a model this small falls "
              "into loops (风吹吹吹吹): sample, or set the Run tab's repetition penalty to 1.3.",
    ),
    "poet_bert": dict(
        spec=dict(name="poet_bert", arch="encoder", vocab_size=8, max_len=128, d_model=160,
                  num_layers=4, num_heads=5, d_ff=640, dropout=0.0, pad_id=0,
                  # the GPT's embedding pipeline (scaled by sqrt(d), no embedding norm), so its
                  # trained weights fit: see init_from
                  scale_embeddings=True, embed_norm=False, mask="bidirectional",
                  # RoPE and pre-norm: with BERT's learned positions and post-norm a short run sits
                  # on the unigram plateau (loss 6.5 still at step 230), since a hidden character
                  # is guessed from its neighbours only once attention finds them by position
                  positions="rope", norm={"kind": "layernorm", "placement": "pre"},
                  head={"kind": "mlm", "transform": True}, **COMMON),
        objective="mlm", data=TANG_TRAIN,
        # Start from poet_gpt's weights: an encoder and a decoder block are the same module, only
        # the mask differs (bidirectional here), so the GPT's character embeddings and layers carry
        # over and only the MLM head's transform starts from scratch.  From scratch, an MLM learns
        # from its hidden characters only (~1,600 a step against a GPT's 4,096 predictions) and
        # reached 6.1% top-1 on hidden characters in 1,800 steps (34 min), under the bigram's 13.1%.
        init_from="poet_gpt",
        # 40% of the characters are picked, and every picked one becomes <mask>
        # (mask_token_frac 1.0, not BERT's 80/10/10).  Why: an MLM learns only from its picks, and
        # at 15% it meets ~600 of them a step against a GPT's 4,096, so within a CPU budget it
        # never left the unigram level (1% top-1 on hidden characters after 400 steps, at 15% and
        # at 25%, with RoPE or ALiBi); the vocabulary projection runs only at the picked positions
        train=dict(steps=1800, batch_size=32, block_size=128, lr=2e-3, warmup=60, mask_prob=0.4,
                   mask_token_frac=1.0, weight_decay=0.01, holdout=0.01, eval_every=250,
                   eval_batches=16, save_every=250, keep_best=True),
        blurb="A small BERT (encoder-only, bidirectional, pre-norm, rotary positions, MLM head "
              "with BERT's transform) trained with masked-language modelling on the same Tang poems "
              "(40% of the characters hidden, every one as `<mask>`), starting from poet_gpt's "
              "weights: an encoder block is a decoder block with a bidirectional mask, so the "
              "GPT's character embeddings and layers carry over. Hide a character with "
              "`<mask>` and it proposes what fits, using the context on both sides (the parallel "
              "lines of a couplet help).",
    ),
    "numerals_t5": dict(
        spec=dict(name="numerals_t5", arch="encoder_decoder", vocab_size=8, max_len=32,
                  d_model=128, num_layers=2, num_heads=4, d_ff=256, dropout=0.0, pad_id=0,
                  positions="learned", norm={"kind": "layernorm", "placement": "pre"},
                  encoder={"num_layers": 3, "mask": "bidirectional"},
                  decoder={"num_layers": 2, "mask": "causal"}, **COMMON),
        objective="seq2seq", data=None,
        train=dict(steps=3000, batch_size=64, lr=1.5e-3, warmup=200, weight_decay=0.01,
                   holdout=0.01, eval_every=250, eval_batches=8, exact_match_samples=256,
                   save_every=250),
        blurb="A small encoder-decoder (T5-style: bidirectional encoder, causal decoder with "
              "cross-attention, shared embeddings) that writes Arabic numerals in Chinese: "
              "`10086` → `一万零八十六`, for every integer from 0 to 99,999,999.",
    ),
}

# What each model was trained on, declared in its checkpoint's metadata (``zoo.run.input_contract``) and
# shown on its card: model.generate / zoo.fill_mask / zoo run / the UI refuse text outside it.
# numerals_t5: ' 42 ' and full-width digits are *normalised* (NFKC, then surrounding spaces
# stripped) and admitted with a note (an InputWarning); everything else outside 0..99,999,999
# written plainly (a sign, a decimal point, leading zeros, separators, letters) is refused.
POEM_CHARS = r"[\s\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef“”‘’·…—]*"
CONTRACTS = {
    "poet_gpt": {"description": "Chinese text (characters and Chinese punctuation): the first line "
                                "of a poem, or 《title》author and a line break",
                 "pattern": POEM_CHARS, "example": "床前明月光，"},
    "poet_bert": {"description": "Chinese text (characters and Chinese punctuation) with `<mask>` "
                                 "where a character is hidden",
                  "pattern": POEM_CHARS, "example": "春眠不觉晓，处处闻<mask>鸟。"},
    "numerals_t5": {"description": "an integer from 0 to 99,999,999 in Arabic digits, without sign, "
                                   "decimal point, separators or leading zeros",
                    "normalize": ["nfkc", "strip"],
                    "validator": {"name": "integer", "min": 0, "max": 99_999_999},
                    "example": "10086"},
}

GPT_PROMPTS = ["床前明月光，", "春眠不觉晓，", "白日依山尽，", "《春晓》孟浩然\n", "大漠孤烟直，"]
UI_SAMPLING = dict(do_sample=True, temperature=0.8, top_k=20, top_p=0.95)  # ui/run_tab.py defaults
# greedy decoding of a small character model loops (风吹吹吹吹); the Run tab's repetition penalty
# (a slider a user sees, 1 = off) at this value stops it, and the card says so
GREEDY_PENALTY = 1.3
BERT_PROBE = "床前明<mask>光，疑是地上霜。"
NUMERAL_EXAMPLES = [0, 7, 10, 15, 20, 110, 1010, 10086, 100000, 100010, 101000, 150000, 901867,
                    1000001, 10010000, 20240601, 99999999]
NUMERAL_TRAIN_SIZE = 200_000
HAN = re.compile(r"[\u4e00-\u9fff]")


def warm_start(preset: dict, source, seed: int = 0):
    """The preset's model with the weights of the checkpoint ``source`` (a decoder) wherever the
    names and shapes agree: ``decoder.*`` becomes ``encoder.*``, the token table (and so the tied
    output weight) is shared, and what the decoder lacks (the MLM head's transform and bias) keeps
    its fresh initialisation.  The tokenizer comes with the weights."""
    src = zoo.load(source)
    model = zoo.build(zoo.spec({**preset["spec"], "vocab_size": src.spec.vocab_size}), seed=seed)
    theirs = {re.sub(r"^decoder\.", "encoder.", k): v for k, v in src.state_dict().items()}
    mine = model.state_dict()
    taken = {k: v for k, v in theirs.items() if k in mine and mine[k].shape == v.shape}
    model.load_state_dict(taken, strict=False)
    fresh = sorted(set(mine) - set(taken))
    if any(k.startswith("encoder.blocks.") for k in fresh):
        raise SystemExit(f"init_from {source}: its layers do not fit {preset['spec']['name']}: {fresh}")
    model.tokenizer = src.tokenizer
    print(f"initialised from {source}: {len(taken)} tensors; fresh: {', '.join(fresh)}")
    return model


def numerals_file(run: Path) -> Path:
    """The generated training pairs (numbers reserved for evaluation are never in it)."""
    path = run / "numerals_train.tsv"
    # written every time (a few seconds), so a file left by an older rule is never reused;
    # repeats allowed: every magnitude keeps its 1/8 share (the ten one-digit numbers included)
    write_pairs(path, numeral_pairs(NUMERAL_TRAIN_SIZE, seed=0, distinct=False))
    return path


# ---------------------------------------------------------------------- measures (cards and tests)
def numerals_heldout_eval(model, n: int = 1000, seed: int = 12345) -> tuple[float, list]:
    """Exact match on ``n`` fresh held-out numbers over all magnitudes (greedy, KV cache)."""
    pairs = numeral_pairs(n, seed=seed, heldout=True)
    preds = model.generate([s for s, _ in pairs], max_new_tokens=24)
    wrong = [(s, t, p) for (s, t), p in zip(pairs, preds) if p != t]
    return 1 - len(wrong) / len(pairs), wrong


def heldout_ids(tok) -> torch.Tensor:
    """The held-out poems as one stream ``EOS poem1 EOS poem2 EOS ...`` (the leading EOS gives the
    first character the same "a poem starts here" context it has in training)."""
    stream = encode_documents(tok, read_documents(TANG_HELDOUT))
    return torch.cat([torch.tensor([tok.eos_id]), stream])


def train_ids(tok) -> torch.Tensor:
    return encode_documents(tok, read_documents(TANG_TRAIN))


@torch.no_grad()
def lm_nats(model, ids: torch.Tensor, window: int = 128, stride: int = 64, batch: int = 32) -> float:
    """Mean nats per token of ``ids[1:]`` under a causal LM, scored in sliding windows: window ``k``
    starts at ``k * stride`` and scores only its targets not scored before, so each token is scored
    once, with at least ``window - stride`` tokens of context after the first window."""
    n = ids.numel()
    starts = list(range(0, max(1, n - window), stride))
    if starts[-1] + window < n - 1:
        starts.append(n - 1 - window if n - 1 > window else 0)
    total, count = 0.0, 0
    for i in range(0, len(starts), batch):
        part = starts[i:i + batch]
        rows = torch.stack([ids[s:s + window + 1] for s in part]) if n > window else ids[None]
        logp = model(rows[:, :-1]).float().log_softmax(-1)  # (B, T, V)
        lp = logp.gather(-1, rows[:, 1:, None])[..., 0]  # (B, T): log p of each target
        for b, s in enumerate(part):
            prev_end = starts[i + b - 1] + window if i + b else 0  # targets up to here are scored
            first = max(0, prev_end - s)
            total -= float(lp[b, first:].sum())
            count += lp.size(1) - first
    return total / count


def first_lines(docs: list[str]) -> list[tuple[str, str]]:
    """``(first line with its comma, the next line)`` of every poem whose first couplet is two 5- or
    two 7-character lines: ``("白日依山尽，", "黄河入海流。")``."""
    out = []
    for d in docs:
        lines = d.split("\n")
        m = re.fullmatch(r"([\u4e00-\u9fff]{5}|[\u4e00-\u9fff]{7})，([\u4e00-\u9fff]+[。？！；])",
                         lines[1]) if len(lines) > 1 else None
        if m and len(m.group(2)) == len(m.group(1)) + 1:
            out.append((m.group(1) + "，", m.group(2)))
    return out


def same_form(expected: str, got: str) -> bool:
    """``got`` starts with a line of as many Chinese characters as ``expected``'s, closed by the same
    punctuation mark."""
    n = len(expected) - 1
    return (len(got) > n and all(HAN.fullmatch(c) for c in got[:n]) and got[n] == expected[-1])


def longest_run(text: str) -> int:
    """The longest run of one repeated character (``一一一`` -> 3)."""
    best = run = 0
    for i, c in enumerate(text):
        run = run + 1 if i and c == text[i - 1] else 1
        best = max(best, run)
    return best


def gpt_line_form(model, pairs, seed: int = 0, batch: int = 128) -> dict:
    """Next-line form at the UI's sampling defaults, and the longest character run under greedy
    decoding with the repetition penalty ``GREEDY_PENALTY`` (and, for the card's lesson, how many
    prompts loop without it)."""
    prompts = [p for p, _ in pairs]
    sampled, greedy, plain = [], [], []
    for i in range(0, len(prompts), batch):
        part = prompts[i:i + batch]
        sampled += model.generate(part, max_new_tokens=9, seed=seed + i, **UI_SAMPLING)
        greedy += model.generate(part, max_new_tokens=24, repetition_penalty=GREEDY_PENALTY)
        plain += model.generate(part, max_new_tokens=24)
    ok = [same_form(e, g) for (_, e), g in zip(pairs, sampled)]
    runs = [longest_run(p + g) for p, g in zip(prompts, greedy)]
    plain_runs = [longest_run(p + g) for p, g in zip(prompts, plain)]
    worst = max(range(len(runs)), key=runs.__getitem__)
    loop = max(range(len(plain_runs)), key=plain_runs.__getitem__)
    return {"next_line_form": sum(ok) / len(ok), "prompts": len(ok),
            "greedy_longest_run": runs[worst], "greedy_worst": prompts[worst] + greedy[worst],
            "plain_greedy_loops": sum(r >= 3 for r in plain_runs),
            "plain_greedy_longest_run": plain_runs[loop], "plain_greedy_worst": prompts[loop] + plain[loop]}


def mask_positions(docs: list[str], tok, max_len: int, seed: int = 0, rate: float = 0.15):
    """Padded ``(B, T)`` ids of the held-out poems (``《title》author`` line included, as in
    training) and the positions to hide: about ``rate`` of the Chinese characters of each poem's
    body, never two side by side (so a bigram baseline sees the same two neighbours as the model)."""
    gen = random.Random(seed)
    rows, picks = [], []
    for d in docs:
        head, body = d.split("\n", 1)
        ids = tok.encode(d)[: max_len - 1] + [tok.eos_id]
        start = len(head) + 1
        chosen: list[int] = []
        for j in range(start, len(ids) - 1):
            hideable = HAN.fullmatch(d[j]) and ids[j] != tok.unk_id
            if hideable and gen.random() < rate and (not chosen or chosen[-1] < j - 1):
                chosen.append(j)
        rows.append(ids)
        picks.append(chosen)
    return rows, picks


@torch.no_grad()
def bert_masked_accuracy(model, tok, seed: int = 0) -> dict:
    """Top-1 accuracy on hidden characters of the held-out poems, beside two baselines given the
    same characters: the most frequent training character, and the smoothed bigram's guess from
    both neighbours (:func:`zoo.train.data.bigram_fill`)."""
    docs = read_documents(TANG_HELDOUT)
    rows, picks = mask_positions(docs, tok, model.spec.max_len, seed)
    tr = train_ids(tok)
    han_ids = torch.tensor([i for c, i in tok.stoi.items() if HAN.fullmatch(c)])
    counts = torch.bincount(tr, minlength=tok.vocab_size)
    most = int(han_ids[counts[han_ids].argmax()])
    hit = total = hit_most = 0
    lefts, rights, golds = [], [], []
    for i in range(0, len(rows), 64):
        part_rows, part_picks = rows[i:i + 64], picks[i:i + 64]
        T = max(len(r) for r in part_rows)
        ids = torch.full((len(part_rows), T), tok.pad_id, dtype=torch.long)
        for b, r in enumerate(part_rows):
            ids[b, :len(r)] = torch.tensor(r)
        gold = ids.clone()
        for b, ps in enumerate(part_picks):
            ids[b, ps] = tok.mask_id
        pred = model(ids).argmax(-1)  # (B, T)
        for b, ps in enumerate(part_picks):
            for j in ps:
                g = int(gold[b, j])
                hit += int(pred[b, j]) == g
                hit_most += most == g
                total += 1
                lefts.append(int(gold[b, j - 1]))
                rights.append(int(gold[b, j + 1]))
                golds.append(g)
    guess = bigram_fill(tr, tok.vocab_size, torch.tensor(lefts), torch.tensor(rights), han_ids)
    bigram = float((guess == torch.tensor(golds)).float().mean())
    return {"masked_top1": hit / total, "most_frequent_baseline": hit_most / total,
            "bigram_baseline": bigram, "masked_chars": total, "most_frequent_char": tok.decode([most])}


#: Famous poems (most of them in the training corpus: these measure what the model *recalls*, the
#: held-out table what it has learnt).  :func:`famous_fill` hides every character whose two
#: neighbours are Chinese characters, one at a time.
FAMOUS = ["床前明月光，疑是地上霜。举头望明月，低头思故乡。",
          "春眠不觉晓，处处闻啼鸟。夜来风雨声，花落知多少。",
          "白日依山尽，黄河入海流。欲穷千里目，更上一层楼。",
          "红豆生南国，春来发几枝。愿君多采撷，此物最相思。",
          "千山鸟飞绝，万径人踪灭。孤舟蓑笠翁，独钓寒江雪。",
          "空山不见人，但闻人语响。返景入深林，复照青苔上。",
          "国破山河在，城春草木深。感时花溅泪，恨别鸟惊心。",
          "两个黄鹂鸣翠柳，一行白鹭上青天。窗含西岭千秋雪，门泊东吴万里船。",
          "朝辞白帝彩云间，千里江陵一日还。两岸猿声啼不住，轻舟已过万重山。",
          "故人西辞黄鹤楼，烟花三月下扬州。孤帆远影碧空尽，唯见长江天际流。",
          "离离原上草，一岁一枯荣。野火烧不尽，春风吹又生。",
          "海内存知己，天涯若比邻。",
          "会当凌绝顶，一览众山小。",
          "大漠孤烟直，长河落日圆。",
          "独在异乡为异客，每逢佳节倍思亲。",
          "春风又绿江南岸，明月何时照我还。",
          "锄禾日当午，汗滴禾下土。谁知盘中餐，粒粒皆辛苦。",
          "日照香炉生紫烟，遥看瀑布挂前川。飞流直下三千尺，疑是银河落九天。"]


@torch.no_grad()
def famous_fill(model, tok, train=None) -> dict:
    """poet_bert against the smoothed both-neighbour bigram on :data:`FAMOUS`: each character whose
    neighbours are both Chinese characters hidden in turn; top-1 hits of each, the model's top-3
    hits, and the prompts the model answers right (the README's examples come from them)."""
    train = train_ids(tok) if train is None else train
    han = torch.tensor([i for c, i in tok.stoi.items() if HAN.fullmatch(c)])
    lefts, rights, golds, firsts, top3, prompts = [], [], [], [], [], []
    for text in FAMOUS:
        for j in range(1, len(text) - 1):
            if not all(HAN.fullmatch(c) for c in text[j - 1:j + 2]):
                continue
            prompt = text[:j] + "<mask>" + text[j + 1:]
            cands = [c["text"] for c in zoo.fill_mask(model, prompt, top_k=3)[0]]
            lefts.append(tok.stoi[text[j - 1]])
            rights.append(tok.stoi[text[j + 1]])
            golds.append(text[j])
            firsts.append(cands[0])
            top3.append(cands)
            prompts.append(prompt)
    guess = bigram_fill(train, tok.vocab_size, torch.tensor(lefts), torch.tensor(rights), han)
    bigram = [tok.decode([int(i)]) for i in guess]
    return {"hidden": len(golds), "model_top1": sum(a == g for a, g in zip(firsts, golds)),
            "bigram_top1": sum(b == g for b, g in zip(bigram, golds)),
            "model_top3": sum(g in t for t, g in zip(top3, golds)),
            "right": {p: g for p, a, g in zip(prompts, firsts, golds) if a == g},
            "right_bigram_wrong": {p: g for p, a, b, g in zip(prompts, firsts, bigram, golds)
                                   if a == g != b}}


def poem_metrics(name: str, model) -> dict:
    """The measures each poem card reports beside its baselines (also checked in tests)."""
    tok = model.tokenizer
    if name == "poet_gpt":
        ids = heldout_ids(tok)
        base = ngram_baselines(train_ids(tok), ids, tok.vocab_size)
        form = gpt_line_form(model, first_lines(read_documents(TANG_HELDOUT)))
        return {"heldout_nats_per_char": lm_nats(model, ids), "unigram_baseline": base["unigram"],
                "bigram_baseline": base["bigram"], "heldout_tokens": base["tokens"], **form}
    res = bert_masked_accuracy(model, tok)
    res["famous"] = {k: v for k, v in famous_fill(model, tok).items() if not k.startswith("right")}
    top = zoo.fill_mask(model, BERT_PROBE, top_k=3)[0]
    res["probe_top3"] = " ".join(f"{c['text']}({c['p']:.2f})" for c in top)
    return res


def samples(name: str, model, seed: int = 0) -> list[tuple[str, str]]:
    """(input, output) pairs for the model card."""
    if name == "poet_gpt":
        out = []
        for p in GPT_PROMPTS:
            text = model.generate(p, max_new_tokens=64, seed=seed, **UI_SAMPLING)
            out.append((p, p + text.split("\n\n")[0]))
        greedy = model.generate(GPT_PROMPTS[0], max_new_tokens=48, repetition_penalty=GREEDY_PENALTY)
        out.append((f"{GPT_PROMPTS[0]} (greedy, repetition penalty {GREEDY_PENALTY})",
                    GPT_PROMPTS[0] + greedy.split("\n\n")[0]))
        return out
    if name == "poet_bert":
        out = []
        for doc in read_documents(TANG_HELDOUT)[:400:80]:  # five held-out poems, one char hidden
            lines = doc.split("\n")
            line = lines[1]
            masked_line = line[:2] + "<mask>" + line[3:]
            text = "\n".join([lines[0], masked_line] + lines[2:4])
            cands = zoo.fill_mask(model, text, top_k=5)[0]
            shown = " ".join(f"{c['text']}({c['p']:.2f})" for c in cands)
            out.append((f"{lines[0]} / `{masked_line}`", f"{shown}; original: {line[2]}"))
        top = zoo.fill_mask(model, BERT_PROBE, top_k=5)[0]
        out.append((f"`{BERT_PROBE}`", " ".join(f"{c['text']}({c['p']:.2f})" for c in top)))
        return out
    preds = model.generate([str(n) for n in NUMERAL_EXAMPLES], max_new_tokens=24)
    return [(str(n), p) for n, p in zip(NUMERAL_EXAMPLES, preds)]


# ---------------------------------------------------------------------- model card
DATA_TEXT = {
    "poet_gpt": ("`data/tang_train.txt.xz`: {train} training poems of the *Complete Tang Poems* "
                 "(chinese-poetry 2.0.1, MIT; simplified script, cleaned, see `data/SOURCE.md`), "
                 "{ev} of them held out by the trainer for choosing the step; measures below on the "
                 "{held} poems of `data/tang_heldout.txt`, never trained on"),
    "numerals_t5": ("{n:,} generated pairs (`zoo.train.data.numeral_pairs`, seed 0, repeats allowed; the "
                    "numbers reserved for evaluation never appear)"),
}
DATA_TEXT["poet_bert"] = DATA_TEXT["poet_gpt"]

ZH = {
    "poet_gpt": ("小型 GPT（仅解码器，因果掩码，前置归一化，旋转位置编码 RoPE），按字训练于《全唐诗》的四万多首诗"
                 "（简体），训练窗口都从一行的开头开始。给出一首诗的第一句，它续写字数相同、以「，」「。」断句的后续诗句；"
                 "给出「《题目》作者」，它开始写一首诗。这么小的模型用贪心解码容易打转（风吹吹吹吹）："
                 "请用采样，或把界面的「重复惩罚」设为 1.3。"),
    "poet_bert": ("小型 BERT（仅编码器，双向注意力，前置归一化，旋转位置编码 RoPE），以掩码语言模型在同一批唐诗上训练"
                  "（每次遮住 40% 的字，全部换成 `<mask>`），从 poet_gpt 的权重开始：编码器层就是换成双向掩码的解码器层，"
                  "GPT 学到的字向量和各层都能沿用。用 `<mask>` 遮住一个字，它根据前后文给出候选字。"),
    "numerals_t5": ("小型编码器-解码器（T5 式），把阿拉伯数字写成中文数字（0 到 99,999,999），"
                    "遵循标准读法：万位组与个位组之间，只有个位组不足四位（以零开头）时才读「零」。"),
}


def model_card(name, preset, result, spec_yaml, extra, sample_rows, info, knobs) -> str:
    f = result.final
    cfg = {k: v for k, v in knobs.items() if k != "progress"}
    m = extra.get("metrics", {})
    params = sum(p.numel() for p in result.model.parameters())
    data = (DATA_TEXT[name].format(train=info.get("train_examples"), ev=info.get("eval_examples"),
                                   held=extra.get("heldout_poems"), n=NUMERAL_TRAIN_SIZE))
    lines = [f"# {name}", "", preset["blurb"], "",
             "Trained by `python scripts/train_shipped.py " + name + "` "
             "(see the repository README, *Training*).", "",
             "## Use", "", "```python", "import zoo", f'model = zoo.load("{name}")          '
             "# the tokenizer comes with it: model.tokenizer"]
    if name == "poet_gpt":
        lines += ['model.generate("床前明月光，", max_new_tokens=40, do_sample=True, temperature=0.8, '
                  'top_k=20, top_p=0.95, seed=0)']
    elif name == "poet_bert":
        lines += [f'zoo.fill_mask(model, "{BERT_PROBE}")']
    else:
        lines += ['model.generate("10086")             # -> "一万零八十六"']
    lines += ["```", "", "## Input", "", input_line(name), "", "## Training", "",
              f"- objective: `{preset['objective']}`",
              f"- data: {data}; tokenizer `{info.get('tokenizer')}` with {info.get('vocab_size')} tokens",
              f"- steps: {result.step}, settings: `{json.dumps(cfg)}`",
              *([f"- shipped weights: step {f['best_step']}, the lowest loss on the trainer's "
                 f"held-out poems ({f['best_eval_loss']:.4f}; `keep_best`)"] if f.get("best_step") else []),
              f"- wall time: {result.wall_time / 60:.1f} min on {extra['hardware']}",
              *([f"- {extra['cpu_note']}"] if extra.get("cpu_note") else []),
              f"- parameters: {params:,} (float32, {params * 4 / 2**20:.1f} MiB)", ""]
    lines += measures(name, f, m)
    lines += ["", "![loss curve](loss.png)", "", "## Sample outputs", ""]
    if name == "poet_gpt":
        lines += ["Sampled at the UI's defaults (temperature 0.8, top-k 20, top-p 0.95, seed 0), and "
                  "one greedy continuation:", ""]
    lines += ["| input | output |", "|---|---|"]
    for a, b in sample_rows:
        cell = lambda s: s.replace("|", "\\|").replace("\n", " / ")  # noqa: E731
        lines.append(f"| {cell(a)} | {cell(b)} |")
    if extra.get("wrong"):
        lines += ["", "Some held-out mistakes (number, expected, got):", ""]
        lines += [f"- {s}: {t} / {p}" for s, t, p in extra["wrong"][:10]]
    lines += ["", "## 中文", "", ZH[name], "",
              f"- 训练命令：`python scripts/train_shipped.py {name}`；{result.step} 步，"
              f"用时 {result.wall_time / 60:.1f} 分钟（{extra['hardware']}），参数 {params:,} 个。"]
    lines += zh_measures(name, m)
    lines += ["", "## Spec", "", "```yaml", spec_yaml.rstrip(), "```", ""]
    return "\n".join(lines)


def input_line(name: str) -> str:
    """The card's *Input* paragraph: the contract stored in the checkpoint, and what happens
    outside it."""
    from zoo.run.input_contract import InputContract

    c = InputContract.from_json(CONTRACTS[name])
    return (f"Input contract (stored in the checkpoint's metadata, `zoo.extra.input_contract`): "
            f"{c.summary()}. `model.generate`, `zoo.fill_mask`, `zoo run` and the UI refuse other "
            f"input with a `zoo.InputError` naming the contract; characters the tokenizer does not "
            f"know are reported (a note), and a prompt made mostly of them is refused."
            + (" ` 42 ` and full-width digits are normalised to `42` with a note." if name == "numerals_t5" else ""))


def measures(name: str, f: dict, m: dict) -> list[str]:
    out = ["## Results", ""]
    if name == "poet_gpt":
        out += ["On the held-out poems (`data/tang_heldout.txt`), against baselines computed by the same "
                "script on the same text:", "",
                "| measure | poet_gpt | baseline |", "|---|---|---|",
                f"| nats per character ({m['heldout_tokens']:,} characters) | "
                f"**{m['heldout_nats_per_char']:.3f}** | unigram {m['unigram_baseline']:.3f}, "
                f"smoothed bigram {m['bigram_baseline']:.3f} |",
                f"| next line has the first line's length and the original's closing mark "
                f"({m['prompts']} held-out 5- and 7-character poems, UI sampling defaults) | "
                f"**{m['next_line_form']:.1%}** | |",
                f"| longest run of one character, greedy with repetition penalty {GREEDY_PENALTY} "
                f"(the Run tab's slider), same prompts | **{m['greedy_longest_run']}** | |", "",
                f"Without the penalty, greedy decoding writes one character three or more times in a "
                f"row on {m['plain_greedy_loops']} of the {m['prompts']} prompts (worst: "
                f"`{m['plain_greedy_worst'].replace(chr(10), ' / ')}`): a small model's argmax falls "
                f"into loops, which sampling or the penalty avoids."]
    elif name == "poet_bert":
        out += ["On the held-out poems (`data/tang_heldout.txt`): about 15% of the Chinese characters "
                "of each poem hidden (never two side by side), against baselines given the same "
                "characters:", "",
                "| measure | poet_bert | most frequent character | smoothed bigram (both neighbours) |",
                "|---|---|---|---|",
                f"| top-1 accuracy on {m['masked_chars']:,} hidden characters | "
                f"**{m['masked_top1']:.1%}** | {m['most_frequent_baseline']:.1%} "
                f"(always {m['most_frequent_char']}) | {m['bigram_baseline']:.1%} |", "",
                f"`{BERT_PROBE}` top 3: {m['probe_top3']}", "", famous_line(m)]
    else:
        out += [f"- exact match on 1,000 fresh held-out numbers over all magnitudes (greedy): "
                f"**{m['heldout_exact_match_1000']:.1%}**",
                f"- exact match on the trainer's held-out pairs: {f.get('eval_exact_match', 0):.1%} "
                f"(of {f.get('eval_exact_match_n')})"]
    # the trainer's own numbers, on its 1% split (for poet_bert: 40% of the characters hidden,
    # punctuation included, so its masked accuracy is not the table's measure and is left out)
    out += ["", "Trainer's log (its own held-out split, for choosing the step): " + ", ".join(
        f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in f.items()
        if k not in ("wall_time_s", "steps", "unigram_baseline_loss", "eval_masked_acc"))]
    return out


def famous_line(m: dict) -> str:
    """The card's plain statement of how poet_bert compares with the bigram on famous lines."""
    f = m["famous"]
    ahead = 100 * (m["masked_top1"] - m["bigram_baseline"])
    return (f"**It does not clearly beat the bigram.** On the held-out poems above it is {ahead:.1f} "
            f"points ahead; on every character of {len(FAMOUS)} famous poems (`FAMOUS` in "
            f"`scripts/train_shipped.py`) whose two neighbours are Chinese characters, hidden one at "
            f"a time, it is right {f['model_top1']} times of {f['hidden']}, the bigram "
            f"{f['bigram_top1']} (its top 3 holds the answer {f['model_top3']} times). A longer run "
            f"did not fit this project's CPU budget (2 shared cores: 3.7 s a step under load).")


def zh_measures(name: str, m: dict) -> list[str]:
    if name == "poet_gpt":
        return [f"- 留出诗（从未训练）上的每字交叉熵：{m['heldout_nats_per_char']:.3f} nats；"
                f"一元基线 {m['unigram_baseline']:.3f}，平滑二元基线 {m['bigram_baseline']:.3f}。",
                f"- 给出 {m['prompts']} 首五言、七言留出诗的首句，按界面默认采样（温度 0.8，top-k 20，"
                f"top-p 0.95）续写：下一句字数与标点正确的比例 {m['next_line_form']:.1%}。",
                f"- 贪心解码（重复惩罚 {GREEDY_PENALTY}，即界面「重复惩罚」滑块）时同一个字最多连续出现 "
                f"{m['greedy_longest_run']} 次；不加惩罚时，{m['prompts']} 个首句中有 "
                f"{m['plain_greedy_loops']} 个会让同一个字连写三次以上（小模型的贪心解码容易打转）。"]
    if name == "poet_bert":
        return [f"- 留出诗中遮住的 {m['masked_chars']:,} 个字，首选正确率 {m['masked_top1']:.1%}；"
                f"基线：总猜最常见字 {m['most_frequent_baseline']:.1%}，平滑二元模型（看左右两个字）"
                f"{m['bigram_baseline']:.1%}。",
                f"- `{BERT_PROBE}` 的前三候选：{m['probe_top3']}。",
                f"- 它并没有明显胜过二元模型：把 {len(FAMOUS)} 首名诗中左右都是汉字的字逐个遮住，"
                f"{m['famous']['hidden']} 个字中猜对 {m['famous']['model_top1']} 个，二元模型 "
                f"{m['famous']['bigram_top1']} 个（前三候选含正确答案 {m['famous']['model_top3']} 个）。"]
    return [f"- 1,000 个从未训练过的数字（各种位数）上完全正确率 {m['heldout_exact_match_1000']:.1%}；"
            "训练数据与 `cn2an` 在 100,000 个数字上零差异（tests/train/test_numerals.py）。"]


def finished_run(run_dir: Path) -> TrainResult:
    """The result of a completed run, read back from its folder (for ``--card-only``)."""
    recs = read_metrics(run_dir)
    end = next((r for r in reversed(recs) if r.get("event") == "end"), None)
    if end is None:
        raise SystemExit(f"{run_dir.name}: no finished run (no 'end' record in metrics.jsonl)")
    model = zoo.load(run_dir)
    final = {k: v for k, v in end.items() if k not in ("event", "step")}
    return TrainResult(model=model, tokenizer=model.tokenizer, final=final, history=recs,
                       out=run_dir, step=end["step"], wall_time=end.get("wall_time_s", 0.0))


def finish_metadata(name: str, folder: Path) -> None:
    """Re-save the checkpoint in ``folder`` through :func:`zoo.save` (so its digest and integrity
    entries cover the new metadata) with the preset's input contract (:data:`CONTRACTS`), and the
    training data named by a repository-relative path (or a bare file name), never by a path of
    the machine that trained it.  The tensors are unchanged, byte for byte (checked)."""
    import tempfile

    from zoo.run.input_contract import InputContract

    meta = zoo.read_metadata(folder)
    extras = {k[len("zoo.extra."):]: v for k, v in meta.items() if k.startswith("zoo.extra.")}
    extra = json.loads(extras.get("train", "{}"))
    if "data" in extra:
        data = Path(extra["data"])
        extra["data"] = data.relative_to(ROOT).as_posix() if data.is_relative_to(ROOT) else data.name
        extras["train"] = json.dumps(extra, ensure_ascii=False)
    extras["input_contract"] = InputContract.from_json(CONTRACTS[name]).to_json()  # checked
    model = zoo.load(folder)
    with tempfile.TemporaryDirectory() as tmp:
        zoo.save(model, tmp, metadata=extras)
        new = zoo.read_metadata(tmp)
        if new.get("zoo.digest") != meta.get("zoo.digest", new.get("zoo.digest")):
            raise SystemExit(f"{name}: re-saving changed the tensors' digest")
        shutil.copy2(Path(tmp) / "model.safetensors", folder / "model.safetensors")


def hardware(device: str, threads: int) -> str:
    """Which machine produced the weights, without names of this machine's paths."""
    if device.startswith("cuda"):
        return f"1 GPU ({torch.cuda.get_device_name(0)})"
    cpu = platform.processor() or platform.machine()
    return f"CPU, {threads} thread{'s' if threads > 1 else ''} ({cpu})"


def time_steps(name: str, args) -> dict:
    """Train ``args.time_steps`` steps of the preset (no evaluation, no export) and estimate the
    whole run's wall time on this machine from the steps after the first few (warm-up)."""
    import tempfile

    preset = PRESETS[name]
    data = preset["data"] or numerals_file(Path(tempfile.mkdtemp()))
    knobs = {**preset["train"], "keep_best": False, "progress": False}
    n = args.time_steps
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        result = train(zoo.spec(preset["spec"]), data, out=Path(tmp) / name,
                       objective=preset["objective"], fit_vocab=True, overwrite=True,
                       seed=args.seed, device=args.device, bf16=False,
                       **{**knobs, "steps": n, "eval_every": n, "save_every": n, "log_every": 5})
    logs = [r for r in result.history if "elapsed_s" in r and "loss" in r]
    a, b = logs[0], logs[-1]  # step 5 and step n
    per_step = (b["elapsed_s"] - a["elapsed_s"]) / (b["step"] - a["step"])
    setup = time.time() - t0 - result.wall_time
    steps = preset["train"]["steps"]
    est = setup + per_step * steps * 1.03  # + periodic evaluation, about 3%
    out = {"name": name, "device": args.device, "threads": args.threads, "per_step_s": per_step,
           "preset_steps": steps, "setup_s": setup, "estimated_total_min": est / 60}
    print(json.dumps(out))
    return out


def run(name: str, args) -> dict:
    preset = PRESETS[name]
    run_dir = Path(args.runs) / name
    run_dir.mkdir(parents=True, exist_ok=True)
    data = preset["data"] or numerals_file(run_dir)
    knobs = dict(preset["train"])
    if args.steps:
        knobs["steps"] = args.steps
        knobs["warmup"] = min(knobs["warmup"], max(1, args.steps // 10))
    knobs["progress"] = not args.no_progress
    t0 = time.time()
    if args.card_only:  # re-evaluate a finished run and rewrite its card, without training
        result = finished_run(run_dir)
        stored = json.loads((run_dir / "trainer_state.json").read_text(encoding="utf-8"))["config"]
        knobs = {k: stored[k] for k in preset["train"]}
    elif args.resume:
        result = train(None, data, out=run_dir, resume=True, steps=knobs["steps"],
                       progress=knobs["progress"], device=args.device)
    else:
        # fp32 on every device (no bf16 autocast on a GPU), so the CPU path trains the same recipe
        init = args.init_from or preset.get("init_from")
        model = warm_start(preset, init, args.seed) if init else zoo.spec(preset["spec"])
        result = train(model, data, out=run_dir, objective=preset["objective"],
                       fit_vocab=not init, overwrite=True, seed=args.seed, device=args.device,
                       bf16=False, **knobs)
    if result.interrupted:
        print("interrupted; resume with --resume")
        return {}
    # with keep_best the checkpoint with the lowest held-out loss is shipped
    src_dir = run_dir / "best" if knobs.get("keep_best") and (run_dir / "best").is_dir() else run_dir
    model = zoo.load(src_dir)
    info = next((r for r in result.history if r.get("event") == "start"), {})
    device = str(info.get("device", "cpu"))
    extra = {"hardware": args.hardware or hardware(device, args.threads), "metrics": {},
             "cpu_note": args.cpu_note}
    if name == "numerals_t5":
        acc, wrong = numerals_heldout_eval(model)
        extra["metrics"]["heldout_exact_match_1000"] = acc
        extra["wrong"] = wrong
    else:
        extra["metrics"].update(poem_metrics(name, model))
        extra["heldout_poems"] = len(read_documents(TANG_HELDOUT))
    rows = samples(name, model)
    for a, b in rows:
        print(f"  {a!r} -> {b!r}")
    summary = {"name": name, **result.final, **extra["metrics"], "wall_time_s": result.wall_time,
               "total_s": time.time() - t0}
    print(json.dumps(summary, ensure_ascii=False, indent=1))
    if not args.no_export:
        dest = Path(args.export_to) / name
        dest.mkdir(parents=True, exist_ok=True)
        for f in ("model.safetensors", "spec.yaml"):
            shutil.copy2(src_dir / f, dest / f)
        finish_metadata(name, dest)
        shutil.copy2(run_dir / "loss.png", dest / "loss.png")
        # the card's Spec block shows what differs from the defaults (spec.yaml beside it keeps all)
        spec_yaml = zoo.spec(run_dir / "spec.yaml").to_yaml(brief=True)
        (dest / "README.md").write_text(model_card(name, preset, result, spec_yaml, extra, rows, info, knobs),
                                        encoding="utf-8")
        print(f"exported to checkpoints/{name}")
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=[*PRESETS, "all"])
    ap.add_argument("--steps", type=int, help="override the preset's step count (quick tries)")
    ap.add_argument("--runs", default=str(ROOT / "runs"), help="where runs are written [runs/]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu (the reference path) or cuda [cpu]")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads [2]; use 1 on a "
                    "busy machine (OpenMP threads spin-wait when the cores are oversubscribed)")
    ap.add_argument("--init-from", help="start from this checkpoint's weights (default: the "
                    "preset's init_from, e.g. poet_bert from the shipped poet_gpt)")
    ap.add_argument("--resume", action="store_true", help="continue a killed run")
    ap.add_argument("--card-only", action="store_true",
                    help="do not train: evaluate the finished run in runs/ and (re)export it")
    ap.add_argument("--hardware", help="with --card-only: the machine that trained the run, for the card")
    ap.add_argument("--cpu-note", help="a line for the card about the CPU path (e.g. its measured time)")
    ap.add_argument("--stamp", action="store_true", help="do not train: re-save the shipped "
                    "checkpoint with its input contract (tensors unchanged)")
    ap.add_argument("--no-export", action="store_true", help="do not copy into checkpoints/")
    ap.add_argument("--export-to", default=str(ROOT / "checkpoints"), help="[checkpoints/]")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--time-steps", type=int, metavar="N",
                    help="only time N steps and estimate the whole run's wall time here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    for name in (PRESETS if args.name == "all" else [args.name]):
        if args.stamp:
            finish_metadata(name, Path(args.export_to) / name)
            print(f"stamped {name}: {CONTRACTS[name]['description']}")
            continue
        time_steps(name, args) if args.time_steps else run(name, args)


if __name__ == "__main__":
    main()

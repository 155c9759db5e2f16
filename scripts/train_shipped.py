"""Reproduce the trained checkpoints shipped in ``checkpoints/`` (each about 10-20 minutes on 2 CPU
cores; faster on a GPU).

    python scripts/train_shipped.py poet_gpt        # or poet_bert, numerals_t5, all
    python scripts/train_shipped.py numerals_t5 --steps 200 --no-export   # a quick try

Each preset trains with :func:`zoo.train.train` into ``runs/<name>/`` (checkpoint, trainer state,
``metrics.jsonl``, ``loss.png``; ``--resume`` continues a killed run), then evaluates it, and unless
``--no-export`` copies the weights into ``checkpoints/<name>/`` with a model card (``README.md``)
that records the spec, data, objective, steps, wall time, final metrics and sample outputs.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import zoo  # noqa: E402
from zoo.data import numeral_pairs, read_documents, split_holdout, write_pairs  # noqa: E402
from zoo.train import TrainResult, read_metrics, train  # noqa: E402

POEMS = ROOT / "data" / "poems.txt"

COMMON = dict(attention="sdpa", ffn={"kind": "mlp", "activation": "gelu"})

PRESETS = {
    "poet_gpt": dict(
        spec=dict(name="poet_gpt", arch="decoder", vocab_size=8, max_len=128, d_model=160,
                  num_layers=4, num_heads=5, d_ff=480, dropout=0.2, tie_embeddings=True,
                  mask="causal", positions="learned", norm={"kind": "layernorm", "placement": "pre"},
                  **COMMON),
        objective="clm", data=POEMS,
        train=dict(steps=600, batch_size=16, block_size=96, lr=1e-3, warmup=60,
                   weight_decay=0.1, holdout=0.1, eval_every=50, eval_batches=16, save_every=50,
                   keep_best=True),
        blurb="A small GPT (decoder-only, causal, pre-norm, learned positions) trained character "
              "by character on 300 Tang and 100 Song poems. Give it the start of a line and it "
              "continues in the style of the corpus: its vocabulary, short lines closed by ， and "
              "。, a title line and an author. It is 1.5 M parameters trained on 36 k characters: "
              "expect doubled characters (叠字 are common in the corpus, and the model overuses "
              "them) and little sense; it is a demonstration of what a small decoder learns.",
    ),
    "poet_bert": dict(
        spec=dict(name="poet_bert", arch="encoder", vocab_size=8, max_len=128, d_model=160,
                  num_layers=4, num_heads=5, d_ff=480, dropout=0.1, pad_id=0, scale_embeddings=False,
                  embed_norm=True, mask="bidirectional", positions="learned",
                  norm={"kind": "layernorm", "placement": "post"},
                  head={"kind": "mlm", "transform": True}, **COMMON),
        objective="mlm", data=POEMS,
        train=dict(steps=2000, batch_size=32, block_size=64, lr=1e-3, warmup=150,
                   weight_decay=0.01, holdout=0.1, eval_every=100, eval_batches=16, save_every=100,
                   keep_best=True),
        blurb="A small BERT (encoder-only, bidirectional, post-norm as in the paper, learned "
              "positions, MLM head with BERT's transform) trained with masked-language modelling on "
              "the same poems. Hide a character with <mask> and it proposes what fits, using the "
              "context on both sides (parallel couplets help).",
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

GPT_PROMPTS = ["床前明月光", "春眠不觉晓", "白日依山尽", "《春晓》孟浩然\n", "大漠孤烟直"]
NUMERAL_EXAMPLES = [0, 7, 10, 15, 20, 110, 1010, 10086, 100000, 100010, 150000, 1000001, 10010000,
                    20240601, 99999999]
NUMERAL_TRAIN_SIZE = 200_000


def numerals_file(run: Path) -> Path:
    """The generated training pairs (numbers reserved for evaluation are never in it)."""
    path = run / "numerals_train.tsv"
    if not path.is_file():
        # repeats allowed: every magnitude keeps its 1/8 share (the ten one-digit numbers included)
        write_pairs(path, numeral_pairs(NUMERAL_TRAIN_SIZE, seed=0, distinct=False))
    return path


def numerals_heldout_eval(model, n: int = 1000, seed: int = 12345) -> tuple[float, list]:
    """Exact match on ``n`` fresh held-out numbers over all magnitudes (greedy, KV cache)."""
    pairs = numeral_pairs(n, seed=seed, heldout=True)
    preds = model.generate([s for s, _ in pairs], max_new_tokens=24)
    wrong = [(s, t, p) for (s, t), p in zip(pairs, preds) if p != t]
    return 1 - len(wrong) / len(pairs), wrong


def samples(name: str, model, seed: int = 0) -> list[tuple[str, str]]:
    """(input, output) pairs for the model card."""
    if name == "poet_gpt":
        out = []
        for p in GPT_PROMPTS:
            text = model.generate(p, max_new_tokens=60, do_sample=True, temperature=0.8, top_k=20,
                                  seed=seed)
            out.append((p, p + text.split("\n\n")[0]))
        greedy = model.generate(GPT_PROMPTS[0], max_new_tokens=40)
        out.append((GPT_PROMPTS[0] + " (greedy)", GPT_PROMPTS[0] + greedy))
        return out
    if name == "poet_bert":
        from zoo.tasks import fill_mask

        docs = read_documents(POEMS)
        _, held = split_holdout(docs, PRESETS[name]["train"]["holdout"], 0)
        out = []
        for doc in held[:8]:  # the whole held-out poem as context (as in training), one char hidden
            lines = doc.split("\n")
            if len(lines) < 3:
                continue
            line = lines[2]
            k = 2 if len(line) > 3 else 0
            masked_line = line[:k] + "<mask>" + line[k + 1:]
            text = "\n".join(lines[:2] + [masked_line] + lines[3:5])[:100]  # ~ a training window
            cands = fill_mask(model, text, top_k=5)[0]
            shown = " ".join(f"{c.get('text', c['id'])!r}({c['p']:.2f})".replace("'", "")
                             for c in cands)
            out.append((f"…{lines[1]} / {masked_line}", f"{shown}  — original: {line[k]}"))
        return out
    preds = model.generate([str(n) for n in NUMERAL_EXAMPLES], max_new_tokens=24)
    return [(str(n), p) for n, p in zip(NUMERAL_EXAMPLES, preds)]


def model_card(name, preset, result, spec_yaml, extra, sample_rows, info, knobs) -> str:
    f = result.final
    cfg = {k: v for k, v in knobs.items() if k != "progress"}
    lines = [f"# {name}", "", preset["blurb"], "",
             "Trained by `python scripts/train_shipped.py " + name + "` "
             "(see the repository README, *Training*).", "",
             "## Use", "", "```python", "import zoo", f'model = zoo.load("{name}")          '
             "# the tokenizer comes with it: model.tokenizer"]
    if name == "poet_gpt":
        lines += ['model.generate("床前明月光", max_new_tokens=40, do_sample=True, temperature=0.8, top_k=20)']
    elif name == "poet_bert":
        lines += ['zoo.fill_mask(model, "床前明<mask>光")']
    else:
        lines += ['model.generate("10086")             # -> "一万零八十六"']
    lines += ["```", "", "## Training", "",
              f"- objective: `{preset['objective']}`",
              f"- data: {info.get('data')}: {info.get('examples'):,} examples "
              f"({info.get('train_examples')} train / {info.get('eval_examples')} held out), "
              f"tokenizer `{info.get('tokenizer')}` with {info.get('vocab_size')} tokens",
              f"- steps: {result.step}, settings: `{json.dumps(cfg)}`",
              *([f"- shipped weights: step {f['best_step']}, the lowest held-out loss "
                 f"({f['best_eval_loss']:.4f}; `keep_best`)"] if f.get("best_step") else []),
              f"- wall time: {result.wall_time / 60:.1f} min on {extra['hardware']}",
              f"- parameters: {sum(p.numel() for p in result.model.parameters()):,}", "",
              "## Final metrics (held-out data)", ""]
    for k, v in {**f, **extra.get("metrics", {})}.items():
        if k in ("wall_time_s", "steps"):
            continue
        lines.append(f"- {k}: {v:.4f}" if isinstance(v, float) else f"- {k}: {v}")
    lines += ["", "![loss curve](loss.png)", "", "## Sample outputs", "", "| input | output |",
              "|---|---|"]
    for a, b in sample_rows:
        cell = lambda s: s.replace("|", "\\|").replace("\n", " / ")  # noqa: E731
        lines.append(f"| {cell(a)} | {cell(b)} |")
    if extra.get("wrong"):
        lines += ["", "Some held-out mistakes (number, expected, got):", ""]
        lines += [f"- {s}: {t} / {p}" for s, t, p in extra["wrong"][:10]]
    lines += ["", "## Spec", "", "```yaml", spec_yaml.rstrip(), "```", ""]
    return "\n".join(lines)


def finished_run(run_dir: Path) -> TrainResult:
    """The result of a completed run, read back from its folder (for ``--card-only``)."""
    recs = read_metrics(run_dir)
    end = next((r for r in reversed(recs) if r.get("event") == "end"), None)
    if end is None:
        raise SystemExit(f"{run_dir} has no finished run (no 'end' record in metrics.jsonl)")
    model = zoo.load(run_dir)
    final = {k: v for k, v in end.items() if k not in ("event", "step")}
    return TrainResult(model=model, tokenizer=model.tokenizer, final=final, history=recs,
                       out=run_dir, step=end["step"], wall_time=end.get("wall_time_s", 0.0))


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
                       progress=knobs["progress"])
    else:
        result = train(zoo.spec(preset["spec"]), data, out=run_dir, objective=preset["objective"],
                       fit_vocab=True, overwrite=True, seed=args.seed, **knobs)
    if result.interrupted:
        print("interrupted; resume with --resume")
        return {}
    # small data overfits: with keep_best the checkpoint with the lowest held-out loss is shipped
    src_dir = run_dir / "best" if knobs.get("keep_best") and (run_dir / "best").is_dir() else run_dir
    model = zoo.load(src_dir)
    threads = torch.get_num_threads()
    cpu = platform.processor() or platform.machine()
    extra = {"hardware": f"{threads} CPU thread{'s' if threads > 1 else ''} ({cpu})"
             if not torch.cuda.is_available() else torch.cuda.get_device_name(0), "metrics": {}}
    if name == "numerals_t5":
        acc, wrong = numerals_heldout_eval(model)
        extra["metrics"]["heldout_exact_match_1000"] = acc
        extra["wrong"] = wrong
    rows = samples(name, model)
    for a, b in rows:
        print(f"  {a!r} -> {b!r}")
    info = next((r for r in result.history if r.get("event") == "start"), {})
    info["data"] = "data/poems.txt" if preset["data"] else (
        f"{NUMERAL_TRAIN_SIZE:,} generated pairs (zoo.data.numeral_pairs, seed 0, repeats allowed)")
    summary = {"name": name, **result.final, **extra["metrics"], "wall_time_s": result.wall_time,
               "total_s": time.time() - t0}
    print(json.dumps(summary, ensure_ascii=False, indent=1))
    if not args.no_export:
        dest = Path(args.export_to) / name
        dest.mkdir(parents=True, exist_ok=True)
        for f in ("model.safetensors", "spec.yaml"):
            shutil.copy2(src_dir / f, dest / f)
        shutil.copy2(run_dir / "loss.png", dest / "loss.png")
        spec_yaml = (run_dir / "spec.yaml").read_text(encoding="utf-8")
        (dest / "README.md").write_text(model_card(name, preset, result, spec_yaml, extra, rows, info, knobs),
                                        encoding="utf-8")
        print(f"exported to {dest}")
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=[*PRESETS, "all"])
    ap.add_argument("--steps", type=int, help="override the preset's step count (quick tries)")
    ap.add_argument("--runs", default=str(ROOT / "runs"), help="where runs are written [runs/]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads [2]; use 1 on a "
                    "busy machine (OpenMP threads spin-wait when the cores are oversubscribed)")
    ap.add_argument("--resume", action="store_true", help="continue a killed run")
    ap.add_argument("--card-only", action="store_true",
                    help="do not train: evaluate the finished run in runs/ and (re)export it")
    ap.add_argument("--no-export", action="store_true", help="do not copy into checkpoints/")
    ap.add_argument("--export-to", default=str(ROOT / "checkpoints"), help="[checkpoints/]")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    for name in (PRESETS if args.name == "all" else [args.name]):
        run(name, args)


if __name__ == "__main__":
    main()

"""Train, measure and ship ``checkpoints/induction_2l``: a 2-layer attention-only model in which an
induction head forms (Olsson et al., 2022, "In-context Learning and Induction Heads").

    OMP_NUM_THREADS=1 python scripts/train_induction.py            # train (a few minutes), measure, export
    python scripts/train_induction.py --measure-only                # re-measure the shipped weights
    OMP_NUM_THREADS=1 python scripts/train_induction.py --extra-classes 1   # the plateau (measure, no export)

Data: every training sequence is made of random chunks, each followed by an exact copy
(``A A B B ...``, chunk lengths 4-24, 64 tokens, vocabulary 64).  The first copy of a chunk is
unpredictable; the second is predictable only by looking back: find the earlier occurrence of the
current token and copy the token that followed it -- the induction mechanism, which needs two
attention layers (a previous-token head in layer 0, whose output lets a layer-1 head match "the
token before me was X" against "I am X").

Attention-only: the spec keeps zoo's MLP sub-layer at its smallest (``d_ff: 1``, no biases) with its
output projection fixed at zero and never trained, so every MLP adds exactly 0 to the residual
stream and the model computes what an attention-only Transformer computes.

The vocabulary is exactly the 64 symbols, and that is part of the recipe: ``--extra-classes K`` trains
the same model, loop and batches with ``K`` more output classes that are never a target (what the
char tokenizer's reserved tokens were in the ``induction_heads`` experiment) and only measures.  At
``K = 1`` the model stays on the plateau (in-context loss about ln 64, no induction head) where
``K = 0`` forms the circuit (``checkpoints/experiments/induction_heads/REPRODUCTION.md``).

Measured (written into the model card, ``README.md``): the induction score of every head
(:func:`zoo.inside.lens.induction_score`), the previous-token score, the in-context-learning score (loss
on the second copy minus loss on the first), and activation patching that locates the circuit
(``patching.png``, ``patching_heads.png``: which positions and heads, patched from a clean run into a
corrupted one, restore the copy).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import zoo  # noqa: E402
from zoo.inside.lens import head_scores, in_context_loss, induction_score, repeated_tokens  # noqa: E402
from zoo.inside.patching import patch_heads, patch_layers_positions, patching_figure  # noqa: E402

OUT = ROOT / "checkpoints" / "induction_2l"
V, T = 64, 64
CORRUPT = 11  # the position whose token the patching prompts corrupt
SPEC = dict(name="induction_2l", arch="decoder", vocab_size=V, max_len=T, d_model=64, num_layers=2,
            num_heads=4, d_ff=1, dropout=0.0, tie_embeddings=False, attention="sdpa", mask="causal",
            positions="learned", norm={"kind": "layernorm", "placement": "pre"},
            ffn={"kind": "mlp", "activation": "relu", "bias": False})


def batch(n: int, g: torch.Generator) -> torch.Tensor:
    """``(n, T)`` sequences of random chunks, each chunk followed by its copy."""
    rows = []
    for _ in range(n):
        row: list[int] = []
        while len(row) < T:
            k = int(torch.randint(4, 25, (1,), generator=g))
            chunk = torch.randint(0, V, (k,), generator=g).tolist()
            row += chunk + chunk
        rows.append(row[:T])
    return torch.tensor(rows)


def attention_only(model) -> None:
    """Every MLP's output projection at zero and frozen: the MLPs add exactly nothing."""
    for block in model.decoder.blocks:
        with torch.no_grad():
            block.ffn.down.weight.zero_()
        block.ffn.down.weight.requires_grad_(False)
        block.ffn.up.weight.requires_grad_(False)


def train(steps: int, seed: int, extra: int = 0) -> tuple[torch.nn.Module, list[float], float]:
    """``extra``: output classes beyond the ``V`` symbols, never a target (0: the shipped recipe)."""
    torch.manual_seed(seed)
    model = zoo.build(dict(SPEC, vocab_size=V + extra), seed=seed)
    attention_only(model)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps, pct_start=0.1)
    g = torch.Generator().manual_seed(seed)
    losses, t0 = [], time.time()
    model.train()
    for step in range(steps):
        ids = batch(32, g)
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V + extra), ids[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
        if step % 200 == 0 or step == steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - t0:6.1f}s", flush=True)
    return model.eval(), losses, time.time() - t0


def measure(model) -> dict:
    """The numbers of the card (random inputs from fixed seeds, never trained on)."""
    ind = induction_score(model, length=20, batch=16, seed=1)  # (L, H)
    rep = repeated_tokens(V, 20, batch=16, seed=1)
    prev = head_scores(model, rep, "previous_token")
    loss = in_context_loss(model, rep)  # (39,): predicting tokens 1..39
    first, second = float(loss[:19].mean()), float(loss[20:].mean())
    # patching: clean = a repeated sequence; corrupted = the same with the first copy of the last
    # token's successor changed, so only a look-back can tell the right answer
    g = torch.Generator().manual_seed(2)
    half = torch.randint(0, V, (8, 12), generator=g)
    clean = torch.cat([half, half[:, :-1]], 1)  # (8, 23): the answer is half[:, -1]
    corrupted = clean.clone()
    corrupted[:, CORRUPT] = (clean[:, CORRUPT] + 1 + torch.randint(0, V - 1, (8,), generator=g)) % V
    answer = half[:, -1]

    def metric(logits):  # log-prob of the right next token at the last position
        return logits[:, -1].log_softmax(-1).gather(-1, answer[:, None]).mean()

    with torch.no_grad():
        m_clean, m_corr = float(metric(model(clean))), float(metric(model(corrupted)))
    heads = patch_heads(model, clean, corrupted, metric)  # (L, H)
    resid = patch_layers_positions(model, clean, corrupted, metric)  # (L, T)
    norm = lambda x: (x - m_corr) / (m_clean - m_corr)  # noqa: E731  (1 = fully restored)
    return {"induction_score": ind, "previous_token_score": prev, "loss_first_copy": first,
            "loss_second_copy": second, "icl_score": second - first, "metric_clean": m_clean,
            "metric_corrupted": m_corr, "patch_heads": norm(heads), "patch_resid": norm(resid)}


def card(m: dict, steps: int, wall: float | None, final_loss: float | None) -> str:
    ind, prev, ph, pr = m["induction_score"], m["previous_token_score"], m["patch_heads"], m["patch_resid"]
    L, H = ind.shape
    best = divmod(int(ind.argmax()), H)
    n_ind = int((ind[1] > 0.5).sum())
    ptok = divmod(int(prev[0].argmax()), H)
    rows = "\n".join(f"| {l}.{h} | {ind[l, h]:.3f} | {prev[l, h]:.3f} | {ph[l, h]:+.3f} |"
                     for l in range(L) for h in range(H))
    trained = (f"{steps} steps of batch 32 (AdamW, one-cycle lr 2e-3), {wall:.0f} s on one CPU "
               f"thread, final training loss {final_loss:.3f}") if wall is not None else f"{steps} steps"
    return f"""# induction_2l: a 2-layer attention-only model with an induction head

Reproduce: `OMP_NUM_THREADS=1 python scripts/train_induction.py` (trains, measures, writes this card
and `patching.png`); `--measure-only` re-measures the shipped weights.

**Architecture.** Decoder, 2 layers, 4 heads of 16, d_model 64, learned positions, pre-LayerNorm,
vocabulary 64 (token ids are the symbols), 64 positions.  Attention-only: each block's MLP is
zoo's `mlp` at `d_ff: 1` with its output projection fixed at zero and never trained, so it adds
exactly 0 (the hook points `blocks.*.hook_mlp_out` read zeros).

## Training

**Data.** Random chunks of 4-24 tokens, each followed by its copy (`A A B B ...`), 64 tokens per
row, fresh every step (nothing to memorise).
Trained: {trained}.

**What the heads do** (measured on 16 random 20-token sequences repeated twice; patching on 8
clean/corrupted pairs, the answer's earlier occurrence corrupted):

| head | induction score | previous-token score | patching (1 = restores the answer) |
|---|---|---|---|
{rows}

- Layer 1 holds the induction heads: {n_ind} of its {H} heads score above 0.5 (best: head
  **{best[0]}.{best[1]}**, {ind[best]:.2f}); from each token of the second copy they attend to the
  token after that token's first occurrence (a head attending uniformly would score about 1/30).
- Head **{ptok[0]}.{ptok[1]}** in layer 0 is the previous-token head that feeds it (score
  {prev[0][ptok[1]]:.2f}).
- Patching locates the circuit (the answer's log-probability: {m['metric_corrupted']:.2f} corrupted,
  {m['metric_clean']:.2f} clean; 1 = the whole gap restored).  Heads (`patching_heads.png`): the
  layer-1 heads restore {ph[1].min():.0%}-{ph[1].max():.0%} each and together carry the copy; the
  layer-0 heads restore {ph[0].abs().max():.1%} at most, because corrupting the copied token changes
  what the induction heads *read* (the value at its position), not where the previous-token head
  points.  Residual stream (`patching.png`): the clean stream restores the answer only at the
  corrupted position {CORRUPT} ({pr[0, CORRUPT]:.0%} entering layer 0, {pr[1, CORRUPT]:.0%} entering
  layer 1); at the last position, entering layer 1, it restores {pr[1, -1]:.0%}: the answer is not
  there yet, layer 1 fetches it.

**In-context learning score** (Olsson et al.): mean loss on the second copy minus the first:
{m['loss_second_copy']:.3f} - {m['loss_first_copy']:.3f} = **{m['icl_score']:.3f}** nats (the first
copy cannot be predicted: ln 64 = 4.159).

## 中文

两层、只有注意力（MLP 输出恒为 0）的模型，在"随机片段 + 它的复制"的序列上训练。第 1 层的注意力头成为
**归纳头**（induction head）：在第二份复制里，每个词元都去关注它第一次出现处的*下一个*词元（最强的头
{best[0]}.{best[1]}，归纳分数 {ind[best]:.2f}；第 1 层有 {n_ind} 个头超过 0.5）；第 0 层的头 {ptok[0]}.{ptok[1]} 是"前一个词元"头（分数
{prev[0][ptok[1]]:.2f}），为归纳头提供"我前面是哪个词元"的信息。上下文学习分数（第二份复制的损失减去第一份）：
**{m['icl_score']:.2f}** nats。激活修补（`patching.png`、`patching_heads.png`）显示：答案由第 1 层的头从
被破坏的位置取回。

## Spec

`spec.yaml` beside this card; training details in `training.json`.

Check it yourself:

```python
import zoo
from zoo.inside.lens import induction_score
model = zoo.load("induction_2l")      # a shipped checkpoint, by name
print(induction_score(model))          # (layers, heads)
```
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--measure-only", action="store_true")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--extra-classes", type=int, default=0, metavar="K",
                    help="K output classes that are never a target (0..64); trains and measures, exports nothing")
    a = ap.parse_args(argv)
    if not 0 <= a.extra_classes <= 64:
        ap.error(f"--extra-classes must be in [0, 64], got {a.extra_classes}")
    if a.extra_classes and a.measure_only:
        ap.error("--extra-classes trains a new model; it cannot be combined with --measure-only")
    out = Path(a.out)
    torch.set_num_threads(1)
    if a.measure_only:
        model = zoo.load(out).eval()
        info = json.loads((out / "training.json").read_text()) if (out / "training.json").exists() else {}
        wall, final, a.steps = info.get("wall_s"), info.get("final_loss"), info.get("steps", a.steps)
    elif a.extra_classes:
        model, losses, wall = train(a.steps, a.seed, a.extra_classes)
        m = measure(model)
        print(json.dumps({"extra_classes": a.extra_classes, "steps": a.steps, "seed": a.seed,
                          "final_loss": round(sum(losses[-50:]) / 50, 4), "wall_s": round(wall, 1),
                          "best_induction_score": round(float(m["induction_score"].max()), 4),
                          "loss_first_copy": round(m["loss_first_copy"], 4),
                          "loss_second_copy": round(m["loss_second_copy"], 4)}, indent=1))
        return 0
    else:
        model, losses, wall = train(a.steps, a.seed)
        final = sum(losses[-50:]) / 50
        out.mkdir(parents=True, exist_ok=True)
        zoo.save(model, out)
        (out / "training.json").write_text(json.dumps({"steps": a.steps, "seed": a.seed, "batch": 32,
                                                       "wall_s": round(wall, 1), "final_loss": round(final, 4)}))
    m = measure(model)
    fig = patching_figure(m["patch_heads"], x_title="head", y_title="layer",
                          title="induction_2l: patching each head's output (1 = answer restored)")
    fig.savefig(out / "patching_heads.png", dpi=110)
    fig = patching_figure(m["patch_resid"], x_title="position (11: the corrupted token; 22: the answer is next)",
                          y_title="resid_pre of layer",
                          title="induction_2l: patching the residual stream (1 = answer restored)")
    fig.savefig(out / "patching.png", dpi=110)
    (out / "README.md").write_text(card(m, a.steps, wall, final), encoding="utf-8")
    print(json.dumps({k: (v.tolist() if isinstance(v, torch.Tensor) else v) for k, v in m.items()
                      if k != "patch_resid"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

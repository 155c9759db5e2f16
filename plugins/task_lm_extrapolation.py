"""``lm_extrapolation``: a language model trained at one length, scored at longer ones.
Press, Smith and Lewis (2022, "Train short, test long: attention with linear biases enables input
length extrapolation", Figure 1) train language models on sequences of ``L`` tokens and evaluate
their perplexity on *longer* inputs: with sinusoidal positions perplexity explodes a few tokens past
``L``, with ALiBi it stays flat (and improves a little, from the longer context).  This task is that
measurement on Chinese text: training windows of ``block_size`` tokens (``L``, the trainer's option)
from the *Complete Tang Poems* (``data/tang_train.txt.xz``, 2.65 M characters), evaluation on the
separate held-out poems (``data/tang_heldout.txt``, never trained on) cut into non-overlapping
windows of ``L``, ``2L`` and ``4L`` tokens (Press et al.'s non-overlapping evaluation).  The same
held-out tokens are scored at every length (the first multiple of ``4L`` of the stream, at most
``eval_tokens``), so the three numbers differ only by how long the input is: any rise from
``loss_1x`` to ``loss_4x`` is the model failing at positions (or distances) it never saw.

Tokens are UTF-8 bytes by default (``tokenizer: byte``: 261 ids, so the output layer is small enough
for a CPU run; a Chinese character is 3 bytes, a 64-byte window about 21 characters) or characters
(``tokenizer: char``: about 6,000 ids, read from both files -- held-out poems use characters the
training poems never show; a vocabulary, as in WikiText's, is fixed over every split, and no sequence
of the held-out text is ever trained on).  Metrics (nats per token, lower is better; perplexity is
``exp``): ``loss_1x``, ``loss_2x``, ``loss_4x`` and ``ppl_1x``, ``ppl_2x``, ``ppl_4x`` (teacher-
forced: the whole window given, exact for a causal model), and ``causal_loss`` (past-only: each
position of the first windows of ``L`` predicted from its own prefix; the primary metric, which a
decoder without its look-ahead mask cannot cheat).  The model's ``max_len`` must hold ``4L``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

import zoo
from zoo.components import Task
from zoo.errors import DataError, ZooError

_DATA = Path(__file__).resolve().parents[1] / "data"
FACTORS = (1, 2, 4)


@dataclass(frozen=True)
class LMExtrapolationConfig:
    path: str = ""            # training corpus; "" = the repository's data/tang_train.txt.xz
    heldout_path: str = ""    # evaluation poems; "" = data/tang_heldout.txt (never trained on)
    eval_tokens: int = 16384  # at most this many held-out tokens scored (the same at every length)
    tokenizer: str = "byte"   # "byte" (UTF-8 bytes, 261 ids) or "char" (one id per character, ~6,000)

    def __post_init__(self):
        if not 1024 <= self.eval_tokens <= 1_000_000:
            raise ValueError("eval_tokens must be in [1024, 1000000]")
        if self.tokenizer not in ("byte", "char"):
            raise ValueError("tokenizer must be 'byte' or 'char'")


#: held-out windows the past-only ``causal_loss`` scores (``L`` forwards of ``(R, <= L)`` tokens)
CAUSAL_ROWS = 8


class LMExtrapolation(Task):
    arch = "decoder"
    metrics = {"loss_4x": "min", "loss_2x": "min", "loss_1x": "min",
               "ppl_4x": "min", "ppl_2x": "min", "ppl_1x": "min", "causal_loss": "min"}
    #: teacher-forced scores (the whole window given): equal to past-only ones for a causal model
    teacher_forced = ("loss_4x", "loss_2x", "loss_1x", "ppl_4x", "ppl_2x", "ppl_1x")
    #: ``causal_loss``: the first :data:`CAUSAL_ROWS` windows of ``L`` tokens, each position
    #: predicted from its own past alone (one forward per prefix), which a model that reads the
    #: next input token cannot cheat; the metric an experiment about decoders is judged on
    primary = "causal_loss"
    past_only = ("causal_loss",)

    def __init__(self, config: LMExtrapolationConfig):
        super().__init__(config)
        from zoo.train.data import read_documents

        self.path = Path(config.path) if config.path else _DATA / "tang_train.txt.xz"
        self.heldout_path = Path(config.heldout_path) if config.heldout_path else _DATA / "tang_heldout.txt"
        for p, field in ((self.path, "path"), (self.heldout_path, "heldout_path")):
            if not p.is_file():
                raise DataError("the corpus is not here", where=f"task.params.{field}",
                                fix="pass a documents file (poems separated by blank lines); the "
                                    "repository ships data/tang_train.txt.xz and data/tang_heldout.txt")
        self.train_docs = read_documents(self.path)
        self.eval_docs = read_documents(self.heldout_path)
        if config.tokenizer == "char":
            self.tok = zoo.tokenizer("char", text="\n".join(self.train_docs + self.eval_docs))
        else:
            self.tok = zoo.tokenizer("byte")
        self.block = None
        self.objective = None

    def tokenizer(self):
        return self.tok

    def __fspath__(self):
        return "task:lm_extrapolation"

    def prepare_objective(self, cfg, spec, tok=None, *, fit_vocab=False):
        from zoo.train.data import encode_documents
        from zoo.train.objectives import CLMObjective
        from zoo.train.prepare import unigram_loss

        if fit_vocab and spec.vocab_size != self.tok.vocab_size:
            spec = spec.replace(vocab_size=self.tok.vocab_size)
        if self.tok.vocab_size > spec.vocab_size:
            raise ZooError(f"the corpus has {self.tok.vocab_size} token ids, the spec's vocab_size "
                           f"is {spec.vocab_size}", where="vocab_size", fix="fit the vocabulary")
        self.block = cfg.block_size or min(spec.max_len, 128)
        need = FACTORS[-1] * self.block
        if spec.max_len < need:
            raise ZooError(f"scoring at {FACTORS[-1]}x the training length needs inputs of {need} "
                           f"tokens; max_len is {spec.max_len}", where="max_len",
                           fix=f"set max_len: {need} in the base spec (or a smaller train.block_size)")
        tr, ev = encode_documents(self.tok, self.train_docs), encode_documents(self.tok, self.eval_docs)
        self.eval_ids = ev
        self.objective = CLMObjective(self.tok, cfg, spec, tr, ev, "task:lm_extrapolation")
        info = {"data": "task:lm_extrapolation", "task": "lm_extrapolation",
                "tokenizer": self.config.tokenizer,
                "vocab_size": self.tok.vocab_size, "train_tokens": int(tr.numel()),
                "eval_tokens": int(ev.numel()), "block_size": self.block,
                "unigram_baseline_loss": unigram_loss(tr, ev, self.tok.vocab_size)}
        return self.objective, self.tok, spec, info

    @torch.no_grad()
    def losses(self, model, block: int, batch: int = 16) -> dict:
        """Mean next-token loss on the held-out stream cut into non-overlapping windows of
        ``f * block`` tokens, for each ``f`` of :data:`FACTORS`; the scored tokens are the
        same for every ``f`` (positions ``1 .. M`` of the stream, ``M`` a multiple of ``4 block``)."""
        longest = FACTORS[-1] * block
        m = min(self.config.eval_tokens, self.eval_ids.numel() - 1) // longest * longest
        if m == 0:
            raise DataError(f"the held-out text is shorter than one window of {longest} tokens",
                            where="task.params.heldout_path", fix="give more held-out text")
        ids, labels = self.eval_ids[:m], self.eval_ids[1:m + 1]
        was = model.training
        model.eval()
        out = {}
        try:
            for f in FACTORS:
                n = f * block
                x, y = ids.view(-1, n), labels.view(-1, n)  # (m / n, n) windows: inputs and next tokens
                tot = 0.0
                for i in range(0, x.size(0), batch):
                    logits = model(x[i:i + batch])  # (b, n, V)
                    tot += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)),
                                                 y[i:i + batch].reshape(-1), reduction="sum"))
                loss = tot / m
                out[f"loss_{f}x"] = loss
                out[f"ppl_{f}x"] = math.exp(loss)
            x, y = ids.view(-1, block)[:CAUSAL_ROWS], labels.view(-1, block)[:CAUSAL_ROWS]  # (R, L)
            last = torch.stack([model(x[:, :t + 1])[:, -1] for t in range(block)], 1)  # (R, L, V)
            out["causal_loss"] = float(F.cross_entropy(last.reshape(-1, last.size(-1)), y.reshape(-1)))
        finally:
            model.train(was)
        return out

    def evaluate(self, model):
        if self.block is None:
            raise ZooError("the task was not prepared for training", where="task",
                           fix="train with zoo.train (it calls prepare_objective) before evaluate")
        return self.losses(model, self.block)

    def probe(self):
        return self.tok.encode("床前明月光，疑是地上霜。举头望明月，低头思故乡。")


@zoo.hookimpl
def register_tasks(register):
    register("lm_extrapolation", LMExtrapolation, config=LMExtrapolationConfig)

"""``numerals``: Arabic numbers to Chinese numerals (``10086 -> 一万零八十六``), sequence to sequence.
An encoder-decoder reads the digits and writes the reading form.  The rules (units 十 百 千 万,
one 零 per run of zeros *between* digits, none at the end of a group, 十 not 一十 at the start) make
it a small, strict algorithmic translation: every character counts, so exact match means the rules
were learned, not guessed.  The evaluation numbers are a fixed tenth of all numbers reserved by
:func:`zoo.train.data.is_heldout_number`, never generated for training.  It probes cross-attention
alignment and rule learning in an encoder-decoder.  Metrics: ``exact`` (greedy generation with
the model's own KV-cache ``generate``) and ``eval_loss``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import zoo
from zoo.train import data as D
from zoo.components import Task
from zoo.errors import ZooError
from zoo.experiment.tasks import fingerprint


@dataclass(frozen=True)
class NumeralsConfig:
    train_examples: int = 20000
    eval_examples: int = 200

    def __post_init__(self):
        if self.train_examples < 10 or self.eval_examples < 1:
            raise ValueError("train_examples must be >= 10 and eval_examples >= 1")


class Numerals(Task):
    arch = "encoder_decoder"
    metrics = {"exact": "max", "eval_loss": "min"}

    def __init__(self, config: NumeralsConfig):
        super().__init__(config)
        self.tok = zoo.tokenizer("char", text=D.DIGITS + "0123456789十百千万")
        self.train_pairs = D.numeral_pairs(config.train_examples, seed=0, distinct=False)
        self.eval_pairs = D.numeral_pairs(config.eval_examples, seed=1, heldout=True)

    def tokenizer(self):
        return self.tok

    def __fspath__(self):
        return "task:numerals"

    def prepare_objective(self, cfg, spec, tok=None, *, fit_vocab=False):
        from zoo.train.objectives import Seq2SeqObjective

        if fit_vocab and spec.vocab_size != self.tok.vocab_size:
            spec = spec.replace(vocab_size=self.tok.vocab_size)
        if spec.pad_id is not None and spec.pad_id != self.tok.pad_id:
            spec = spec.replace(pad_id=self.tok.pad_id)
        if spec.max_len < 10:
            raise ZooError("numerals need max_len >= 10", where="max_len", fix="set max_len: 24")
        room = spec.max_len - 1
        tr = D.encode_pairs(self.tok, self.train_pairs, room, room, "task:numerals")
        ev = D.encode_pairs(self.tok, self.eval_pairs, room, room, "task:numerals")
        self.objective = Seq2SeqObjective(self.tok, cfg, spec, tr, ev)
        info = {"data": "task:numerals", "task": "numerals",
                "data_sha256": fingerprint("numerals", dataclasses.asdict(self.config)), "tokenizer": "char",
                "vocab_size": self.tok.vocab_size, "train_examples": len(self.train_pairs),
                "eval_examples": len(self.eval_pairs)}
        return self.objective, self.tok, spec, info

    def evaluate(self, model):
        from zoo.train.evaluate import exact_match_rate, evaluate

        srcs = [self.tok.encode(s) + [self.tok.eos_id] for s, _ in self.eval_pairs]
        tgts = [self.tok.encode(t) for _, t in self.eval_pairs]
        out = {"exact": exact_match_rate(model, self.tok, srcs, tgts)}
        if getattr(self, "objective", None) is not None:
            out["eval_loss"] = evaluate(model, self.objective, next(model.parameters()).device)["eval_loss"]
        return out

    def probe(self):
        return self.tok.encode(self.eval_pairs[0][0]) + [self.tok.eos_id]


@zoo.hookimpl
def register_tasks(register):
    register("numerals", Numerals, config=NumeralsConfig)

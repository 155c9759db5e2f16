"""``poems``: next-character prediction on Tang poems (the shipped corpus ``data/poems.txt``).

A causal language model on real Chinese text: no generator, a fixed corpus whose held-out poems
(whole poems, split off by the trainer's fixed hold-out, never pieces of a training poem) are scored
by cross-entropy in nats per character.  The unigram baseline (context-free character
frequencies) is reported alongside: a model must beat it to have learned anything about context.
It probes language modelling proper -- what the synthetic tasks isolate, mixed together -- at the
scale of a laptop.  Metric: ``eval_loss`` (lower is better).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import zoo
from zoo.components import Task
from zoo.errors import DataError

_DEFAULT = Path(__file__).resolve().parents[1] / "data" / "poems.txt"


@dataclass(frozen=True)
class PoemsConfig:
    path: str = ""            # the corpus; "" = the repository's data/poems.txt
    holdout: float = 0.05     # fraction of whole poems held out (fixed split, seed 0)


class Poems(Task):
    arch = "decoder"
    metrics = {"eval_loss": "min"}

    def __init__(self, config: PoemsConfig):
        super().__init__(config)
        self.path = Path(config.path) if config.path else _DEFAULT
        if not self.path.is_file():
            raise DataError("the poems corpus is not here", where="task.params.path",
                            fix="pass path: to a documents file (poems separated by blank lines); "
                                "the repository ships data/poems.txt")
        text = self.path.read_text(encoding="utf-8")
        self.tok = zoo.tokenizer("char", text=text)
        self.objective = None

    def tokenizer(self):
        return self.tok

    def __fspath__(self):
        return "task:poems"

    def prepare_objective(self, cfg, spec, tok=None, *, fit_vocab=False):
        from zoo.train.prepare import prepare

        fixed = dataclasses.replace(cfg, seed=0, holdout=self.config.holdout)  # one split for all seeds
        obj, tok, spec, info = prepare(self.path, fixed, spec, self.tok, fit_vocab=fit_vocab)
        info["data"] = "task:poems"
        self.objective = obj
        return obj, tok, spec, info

    def evaluate(self, model):
        from zoo.train.evaluate import evaluate

        return {"eval_loss": evaluate(model, self.objective, next(model.parameters()).device)["eval_loss"]}

    def probe(self):
        return self.tok.encode("床前明月光，疑是地上霜。")


@zoo.hookimpl
def register_tasks(register):
    register("poems", Poems, config=PoemsConfig)

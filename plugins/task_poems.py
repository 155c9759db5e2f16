"""``poems``: next-character prediction on Tang poems (the shipped corpus ``data/poems.txt``).
A causal language model on real Chinese text: no generator, a fixed corpus whose held-out poems
(whole poems, split off by the trainer's fixed hold-out, never pieces of a training poem) are scored
by cross-entropy in nats per character.  The unigram baseline (context-free character
frequencies) is reported alongside: a model must beat it to have learned anything about context.
It probes language modelling proper -- what the synthetic tasks isolate, mixed together -- at the
scale of a laptop.  Metrics: ``eval_loss`` (teacher-forced, lower is better) and ``causal_loss``: the
same held-out text scored with each position given *only its past* (the sequence cut right after
it), which is what a model sees when it generates; for a causal decoder the two are equal, for one
that learned to read the future they are not.
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
    metrics = {"causal_loss": "min", "eval_loss": "min"}
    #: past-only: every position scored from its own prefix (a forward of ids[:, :t + 1]); the
    #: teacher-forced eval_loss is what a model without its look-ahead mask can cheat
    primary = "causal_loss"
    past_only = ("causal_loss",)

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

    def evaluate(self, model, rows: int = 16):
        import torch
        import torch.nn.functional as F

        from zoo.train.evaluate import evaluate

        out = {"eval_loss": evaluate(model, self.objective, next(model.parameters()).device)["eval_loss"]}
        b = self.objective.eval_set()[0]
        ids, labels = b["ids"][:rows], b["labels"][:rows]  # (R, T) inputs and next tokens
        was = model.training
        model.eval()
        with torch.no_grad():
            last = [model(ids[:, :t + 1])[:, -1] for t in range(ids.size(1))]  # T x (R, V): past only
        model.train(was)
        logits = torch.stack(last, 1)  # (R, T, V)
        out["causal_loss"] = float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1)))
        return out

    def probe(self):
        return self.tok.encode("床前明月光，疑是地上霜。")


@zoo.hookimpl
def register_tasks(register):
    register("poems", Poems, config=PoemsConfig)

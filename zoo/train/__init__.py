"""Training: one loop for the four objectives, on one CPU or many GPUs.

    from zoo.train import train
    result = train("gpt_tiny", "data/poems.txt", objective="clm", steps=2000, out="runs/poet",
                   fit_vocab=True)
    result.final["eval_loss"], result.model                 # the trained model, with .tokenizer

The same from the shell: ``zoo train gpt_tiny --data data/poems.txt --objective clm --steps 2000
--out runs/poet --fit-vocab``; under ``torchrun --nproc_per_node=N`` it trains data-parallel.

The package, read in this order:

``config``      :class:`TrainConfig` (every knob) and :class:`TrainResult`.
``objectives``  what is learned -- ``clm``, ``mlm``, ``prefix_lm``, ``seq2seq`` -- as batches and losses.
``prepare``     data file -> tokenizer, held-out split, checks against the spec, the objective.
``optim``       AdamW (no weight decay on biases, norms and embeddings) and the LR schedule
                (linear warm-up, cosine decay to ``min_lr_ratio * lr``).
``dist``        data parallel under ``torchrun`` (gloo on CPU, nccl on GPU); only rank 0 writes.
``loop``        :func:`train`: set up, then step / log / evaluate / save until done or stopped;
                gradient clipping and accumulation; bf16 autocast on CUDA.
``evaluate``    held-out loss, perplexity, masked accuracy, exact match (via ``model.generate``).
``state``       checkpoints every ``save_every`` steps: ``model.safetensors`` + ``spec.yaml`` (a
                normal zoo checkpoint) and ``trainer_state.safetensors`` (weights, AdamW moments) with
                ``trainer_state.json``; no pickle.  A killed run resumes with ``resume=True`` losing at
                most the steps since the last save; SIGTERM / Ctrl-C save first.  ``keep_best`` also
                saves the lowest held-out loss to ``out/best/``.
``metrics``     a tqdm bar, ``metrics.jsonl`` (one JSON object per log/eval line), ``loss.png``.
"""
from __future__ import annotations

from .config import ARCH_FOR, DEFAULT_OBJECTIVE, OBJECTIVES, TrainConfig, TrainResult
from .dist import Dist, setup_dist
from .evaluate import evaluate, exact_match_rate, greedy_seq2seq
from .loop import train
from .metrics import METRICS, plot_history, read_metrics
from .objectives import (IGNORE, CLMObjective, MLMObjective, Objective, PrefixDocObjective,
                         PrefixPairsObjective, Seq2SeqObjective)
from .optim import lr_at, make_optimizer
from .prepare import data_fingerprint, prepare, unigram_loss
from .state import (STATE_FILE, STATE_JSON, load_optimizer_tensors, optimizer_tensors, read_state,
                    save_state)

# The objectives were called tasks; ``zoo.run.pipelines`` (fill-mask, classify) is unrelated, so the training
# side was renamed.  The old names stay importable.
Task, CLMTask, MLMTask, PrefixDocTask = Objective, CLMObjective, MLMObjective, PrefixDocObjective
Seq2SeqTask, PrefixPairsTask = Seq2SeqObjective, PrefixPairsObjective

__all__ = [
    "train", "TrainConfig", "TrainResult", "OBJECTIVES", "ARCH_FOR", "DEFAULT_OBJECTIVE", "Objective", "CLMObjective",
    "MLMObjective", "PrefixDocObjective", "Seq2SeqObjective", "PrefixPairsObjective", "IGNORE",
    "prepare", "data_fingerprint", "unigram_loss", "lr_at", "make_optimizer", "Dist", "setup_dist",
    "evaluate", "greedy_seq2seq", "exact_match_rate", "save_state", "read_state", "optimizer_tensors",
    "load_optimizer_tensors", "STATE_FILE", "STATE_JSON", "METRICS", "read_metrics", "plot_history",
    "Task", "CLMTask", "MLMTask", "PrefixDocTask", "Seq2SeqTask", "PrefixPairsTask",
]

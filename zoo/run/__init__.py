"""Running a model: generation, beam search, chat, compiled decoding, precision, input checks.

``generate`` (the decoding loop, streaming, text in and out), ``options`` (every generation
option, declared and checked once), ``sampling`` (choosing the next token: greedy, temperature,
top-k / top-p, the repetition penalty), ``steps`` (the logits coroutines: prefill, KV-cached steps,
finished rows dropped), ``seq2seq`` (encoder-decoder decoding), ``beam`` (beam search), ``chat``
(rendering a chat template and replying), ``compiled`` (the static-cache compiled step),
``precision`` (int8 / int4 / GGUF-block weights), ``qkernels`` (the block products of GGUF's
Q4_1 / Q8_0), ``qstep`` (a q4 Llama's whole decoding step in one C++ call), ``arguments`` (the checks on a call's model, ids and masks),
``input_contract`` (which text a trained checkpoint accepts) and ``pipelines``
(:func:`zoo.fill_mask`, :func:`zoo.classify`).

May import: the front door, ``zoo.registry``, ``zoo.guard``, ``zoo.model`` and ``zoo.io``.
"""
from __future__ import annotations

import importlib

#: The modules of this wing, reachable as ``zoo.run.NAME`` after ``import zoo`` (imported on
#: first use, so ``import zoo`` stays light).
MODULES = ('generate', 'options', 'sampling', 'steps', 'seq2seq', 'beam', 'chat', 'compiled', 'precision', 'qkernels', 'qstep', 'arguments', 'input_contract', 'pipelines')


def __getattr__(name: str):
    if name in MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(MODULES))

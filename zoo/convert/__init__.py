"""Exact conversion of Hugging Face ``transformers`` checkpoints into zoo models, and back.

    import zoo.convert
    model = zoo.convert.from_transformers(hf_model)           # a GPT2LMHeadModel, BertForMaskedLM, ...
    model = zoo.convert.from_pretrained("path/to/hf_dir")     # config.json + *.safetensors, offline
    zoo.save(model, "runs/gpt2")                              # or: zoo convert HF_DIR OUT_DIR
    hf_again = zoo.convert.to_transformers(model)             # and back (needs transformers)

Supported families (``config.model_type``): see :data:`CONVERTERS` and docs/CONVERT.md.  The zoo model
computes the same function as the source: the test suite checks logits / hidden states to 1e-5 in
float32 on padded batches, greedy generation against transformers' ``generate``, and the round trip.

How it works: one module per family (``gpt2.py``, ``llama.py``, ...) maps its config to a zoo spec
(every config value that changes the function is either mapped or refused with a
:class:`ConvertError` naming the field) and its tensors to zoo's names (separate q/k/v matrices are
concatenated into zoo's fused ``qkv``; GPT-2's ``Conv1D`` weights are transposed).  A tensor the
converter does not recognise is an error, never silently ignored; tensors that do not affect the
outputs (BERT's pooler, the NSP head) are dropped and listed in ``model.convert_info["dropped"]``.
Config values are read through typed accessors (:class:`~zoo.convert.core.Source`) that check type
and range.  The reverse mapping is not a second table: it replays the forward mapping on names and
shapes (:func:`to_transformers`).

Differences worth knowing:

- zoo derives positions from the attention mask (each row's first real token sits at 0), which is
  what Hugging Face computes only when you pass ``position_ids``; with right padding or none they agree.
- a converted BERT keeps ``pad_id`` (padding is masked even without an ``attention_mask``); GPT-2,
  Llama and T5 do not (T5's decoder *starts* with the pad token).
- a base model without an LM head (GPT2Model, LlamaModel, T5Model) gets one tied to its embeddings.
- pickle checkpoints (``pytorch_model.bin``) are never loaded; re-save with ``safe_serialization``.

``transformers`` is not needed to convert a directory; :func:`from_transformers` touches a
transformers model without importing the library; only :func:`to_transformers` imports it.

**Parity certificate.**  :func:`from_transformers` (and ``zoo convert --certify``) run a fixed probe
batch through both models and keep ``max_abs_diff``, ``mean_abs_diff``, ``top1_agreement``, the
dtype, both libraries' versions and the date in ``model.convert_info["parity"]``; ``zoo.save`` writes
it to the checkpoint metadata (``zoo.extra.parity``); :func:`certificate_text` turns
``zoo.read_metadata(path)`` into the line a model card shows.
"""
from __future__ import annotations

from . import bart, bert, distilbert, gemma, gemma2, gpt2, gpt_neox, llama, marian, mistral, opt, phi3, qwen2, qwen3, roberta, t5  # noqa: F401 - each registers its family
from . import mixtral, qwen2_moe, qwen3_moe  # noqa: F401 - mixtures of experts (issue 24)
from . import gemma3, olmoe  # noqa: F401 - Gemma 3 (text), OLMoE (issue 24)
from . import deepseek_v2  # noqa: F401 - DeepSeek-V2 and V3: latent attention, DeepSeekMoE (issue 24)
from .core import (CONVERTERS, ConvertError, Converter, Source, certificate, certificate_text, certify_parity,
                   conversion_metadata, convert_state, from_pretrained, from_transformers, read_hf_dir,
                   to_transformers)
from .gguf import from_gguf  # noqa: E402 - GGUF files (llama.cpp); the gguf library is imported on use

__all__ = ["ConvertError", "from_transformers", "from_pretrained", "from_gguf", "to_transformers", "convert_state",
           "CONVERTERS", "Converter", "Source", "read_hf_dir", "certify_parity", "certificate",
           "certificate_text", "conversion_metadata"]

from ..deprecation import moved  # noqa: E402

#: renamed: "family" and FAMILIES mean the component families of zoo.components
__getattr__ = moved(__name__)  # the old names it had: zoo.deprecation.NAMES

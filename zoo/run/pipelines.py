"""Encoder tasks: fill-mask for masked-LM heads, class probabilities for classifier heads.

BERT is trained to recover words hidden behind ``[MASK]``; asking it "what goes here?" is the most
direct way to see what it learned.  ``fill_mask`` returns, for every mask position, the ``top_k``
candidates with their probabilities::

    zoo.fill_mask(model, "北京是中国的<mask>都")     # text, with the tokenizer's mask token
    zoo.fill_mask(model, ids, mask_id=4)              # or ids
    zoo.classify(model, "这部电影很好看")              # {"probs": [...], "label": 1}
"""
from __future__ import annotations

from typing import Any

import torch

from .arguments import token_ids, zoo_model
from ..errors import ZooError
from .input_contract import admit
from ..io.tokenizers import check_fits, get_tokenizer


def _encoder(model, head: str, where: str):
    zoo_model(model, f"{where}.model")
    if model.spec.arch != "encoder" or model.spec.head.kind != head:
        have = model.spec.arch if model.spec.arch != "encoder" else f"encoder with head '{model.spec.head.kind}'"
        fix = {"mlm": "use an encoder spec with `head: mlm`",
               "classifier": "use an encoder spec with `head: {kind: classifier, num_labels: N}`"}[head]
        if model.spec.arch != "encoder":
            fix = "use model.generate(...) for decoder and encoder-decoder models"
        raise ZooError(f"{where} needs an encoder with a '{head}' head, got a {have}",
                       where="model.spec.head", fix=fix)


def _ids(model, inputs, tokenizer):
    tok = None
    if isinstance(inputs, str):
        tok = get_tokenizer(model, tokenizer)
        check_fits(tok, model.spec.vocab_size)
        inputs = tok.encode(admit(model, tok, inputs, where="inputs"))  # its contract
    return token_ids(model, inputs, "inputs"), tok


@torch.no_grad()
def fill_mask(model, inputs: Any, *, top_k: int = 5, mask_id: int | None = None, tokenizer=None
              ) -> list[list[dict[str, Any]]]:
    """For each mask position (row 0 when given a batch), the ``top_k`` candidates
    ``[{"position", "id", "p", "text"?}, ...]`` best first.  ``inputs``: text (with the tokenizer's
    mask token, e.g. ``<mask>``) or ids; ``mask_id`` defaults to the tokenizer's."""
    _encoder(model, "mlm", "fill_mask")
    ids, tok = _ids(model, inputs, tokenizer)
    if tok is None:
        tok = tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)
    if mask_id is None:
        mask_id = getattr(tok, "mask_id", None)
    if mask_id is None:
        raise ZooError("no mask token id", where="fill_mask.mask_id",
                       fix="pass mask_id=..., or use a tokenizer with a mask token")
    positions = (ids[0] == mask_id).nonzero().flatten().tolist()
    if not positions:
        raise ZooError(f"no mask token (id {mask_id}) in the input", where="fill_mask.inputs",
                       fix="put the mask token (e.g. <mask>) where a word should be predicted")
    was = model.training
    model.eval()
    try:
        logits = model(ids[:1])  # (1, T, V)
    finally:
        model.train(was)
    out = []
    limit = tok.vocab_size if tok is not None else logits.size(-1)  # ids the tokenizer can spell
    for pos in positions:
        probs = logits[0, pos, :limit].float().softmax(-1)
        p, i = probs.topk(min(top_k, probs.numel()))
        cands = []
        for idx, prob in zip(i.tolist(), p.tolist()):
            c = {"position": pos, "id": idx, "p": prob}
            if tok is not None:
                c["text"] = tok.decode([idx])
            cands.append(c)
        out.append(cands)
    return out


@torch.no_grad()
def classify(model, inputs: Any, *, tokenizer=None, labels: list[str] | None = None
             ) -> dict[str, Any] | list[dict[str, Any]]:
    """Class probabilities from a classifier head: ``{"probs": [...], "label": i, "name"?}`` per row
    (a single dict for a single text or id list)."""
    _encoder(model, "classifier", "classify")
    single = isinstance(inputs, str) or (not isinstance(inputs, torch.Tensor)
                                         and inputs and not isinstance(inputs[0], (list, tuple)))
    if isinstance(inputs, (list, tuple)) and inputs and isinstance(inputs[0], str):
        return [classify(model, t, tokenizer=tokenizer, labels=labels) for t in inputs]
    ids, _ = _ids(model, inputs, tokenizer)
    was = model.training
    model.eval()
    try:
        probs = model(ids).float().softmax(-1)  # (B, num_labels)
    finally:
        model.train(was)
    rows = []
    for pr in probs:
        k = int(pr.argmax())
        row = {"probs": pr.tolist(), "label": k}
        if labels is not None:
            row["name"] = labels[k]
        rows.append(row)
    return rows[0] if single else rows

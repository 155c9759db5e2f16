"""Lenses and head scores: the logit lens, direct logit attribution, and previous-token /
duplicate-token / induction scores as TransformerLens defines them (issue 26, goal 5).

All of them read a cache from :func:`zoo.inside.hooks.run_with_cache`, so they work on any decoder-only
(or encoder-only) model zoo builds or converts.

- **Logit lens** (nostalgebraist, 2020): read the residual stream after every layer as if it were
  the last -- final norm, then the unembedding -- and watch the prediction form layer by layer.
- **Direct logit attribution** (Elhage et al., 2021): the final logit of a token is a sum over
  everything written into the residual stream (embeddings, each attention layer -- each head -- and
  each MLP), once the final LayerNorm is frozen at its measured scale.  Each term, dotted with the
  token's unembedding direction, is that component's *direct* effect.  The terms add up to the
  logit exactly (minus the norm's and the head's biases): :func:`logit_attribution` checks it.
- **Head scores** (TransformerLens ``head_detector``): how much of each head's attention goes where
  a previous-token head (``i -> i - 1``), a duplicate-token head (``i -> earlier j`` with the same
  token) or an induction head (``i -> j + 1`` after an earlier copy ``j`` of token ``i``) would put
  it: ``sum(pattern * detection) / sum(pattern)``, the ``"mul"`` measure.
- **Induction score** (Olsson et al., 2022): on a random sequence repeated twice, the mean attention
  from each token of the second copy to the token after its first occurrence.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..run.arguments import entry
from ..errors import ZooError
from .hooks import ActivationCache, run_with_cache

HEAD_KINDS = ("previous_token", "duplicate_token", "induction")


def _single_stack(model, where: str) -> str:
    if model.spec.arch == "encoder_decoder":
        raise ZooError("lenses read one residual stream: an encoder-decoder has two",
                       where=where, fix="use a decoder-only or encoder-only model")
    return model.spec.roles[0]


def _final_norm(model, x: torch.Tensor) -> torch.Tensor:
    return getattr(model, model.spec.roles[0]).final_norm(x)


def _unembed(model, x: torch.Tensor) -> torch.Tensor:
    if getattr(model, "lm_head", None) is None:
        raise ZooError("this model has no LM head to read the residual stream with", where="lens",
                       fix="use a model with an LM head (decoder, or encoder with head: mlm)")
    return model.head_output(model.lm_head(model.head_input(x)))


@dataclass
class LogitLens:
    """``logits (L + 1, B, T, V)``: the prediction read after the embeddings (row 0) and after each
    block; ``top_ids / top_probs (L + 1, B, T, k)``; ``final_rank (L + 1, B, T)``: the rank, at each
    layer, of the token the model finally predicts (0 = already on top)."""

    logits: torch.Tensor
    top_ids: torch.Tensor
    top_probs: torch.Tensor
    final_rank: torch.Tensor
    labels: list[str]

    def table(self, tokenizer=None, batch: int = 0) -> list[list[str]]:
        """``[layer][position]`` -> the top token (text when a tokenizer is given)."""
        ids = self.top_ids[:, batch, :, 0].tolist()
        dec = (lambda i: tokenizer.decode([i])) if tokenizer is not None else str
        return [[dec(i) for i in row] for row in ids]


@entry
@torch.no_grad()
def logit_lens(model, ids: torch.Tensor, top_k: int = 5) -> LogitLens:
    """The logit lens of ``ids (B, T)``: every block's residual output through the final norm and
    the LM head (the last row equals the model's own logits)."""
    _single_stack(model, "logit_lens")
    ids = torch.as_tensor(ids)
    ids = ids[None] if ids.dim() == 1 else ids
    L = model.spec.num_layers
    names = ["blocks.0.hook_resid_pre"] + [f"blocks.{i}.hook_resid_post" for i in range(L)]
    _, cache = run_with_cache(model, ids, names_filter=names)
    resid = torch.stack([cache[n] for n in names])  # (L + 1, B, T, D)
    logits = _unembed(model, _final_norm(model, resid))  # (L + 1, B, T, V)
    probs = logits.float().softmax(-1)
    p, i = probs.topk(min(top_k, probs.size(-1)), dim=-1)
    final = logits[-1].argmax(-1)  # (B, T)
    final_logit = logits.gather(-1, final[None, ..., None].expand(L + 1, *final.shape, 1))
    rank = (logits > final_logit).sum(-1)  # (L + 1, B, T)
    return LogitLens(logits, i, p, rank, ["embed"] + [f"layer {i}" for i in range(L)])


def _ln_final_frozen(model, cache: ActivationCache, stack: torch.Tensor) -> torch.Tensor:
    """TL's ``apply_ln_to_stack``: each component ``(…, B, T, D)`` through the final norm frozen at
    its measured scale -- centred (LayerNorm) and divided by ``ln_final.hook_scale``, times the
    norm's weight -- so the pieces add up to the normed stream minus the norm's bias."""
    norm = getattr(model, model.spec.roles[0]).final_norm
    if "ln_final.hook_scale" not in cache:
        raise ZooError("direct logit attribution needs a final LayerNorm or RMSNorm",
                       where="logit_attribution", fix="use a pre-norm model (GPT-2, Llama, ...)")
    if type(norm).__name__ == "LayerNorm":
        stack = stack - stack.mean(-1, keepdim=True)
    out = stack / cache["ln_final.hook_scale"]
    w = getattr(norm, "weight", None)
    return out * w if w is not None else out


def _direction(model, tokens, wrong=None) -> torch.Tensor:
    """``(…, D)`` unembedding direction(s): of ``tokens``, minus that of ``wrong`` (a logit
    difference) when given; times ``spec.head_scale`` as the model's head applies it."""
    W = model.lm_head.weight  # (V, D)
    d = W[_token_index(model, tokens, "logit_attribution.tokens")]
    if wrong is not None:
        d = d - W[_token_index(model, wrong, "logit_attribution.wrong")]
    return model.head_input(d)


@dataclass
class Attribution:
    """``per_layer (C, B, T)`` over components ``labels`` (embed, pos_embed, then each layer's
    attn and mlp); ``per_head (L, H, B, T)``; ``bias (B, T)`` the part no component writes (the
    norm's and head's biases); ``logit (B, T)`` the model's own logit (difference) they add up to."""

    per_layer: torch.Tensor
    labels: list[str]
    per_head: torch.Tensor
    bias: torch.Tensor
    logit: torch.Tensor


@entry
@torch.no_grad()
def logit_attribution(model, ids: torch.Tensor, tokens, wrong=None) -> Attribution:
    """Direct logit attribution of ``tokens`` (``(B, T)`` ids, one per position, or one id for all)
    -- or of the logit difference ``tokens - wrong`` -- to every component and every head."""
    _single_stack(model, "logit_attribution")
    ids = torch.as_tensor(ids)
    ids = ids[None] if ids.dim() == 1 else ids
    st = getattr(model, model.spec.roles[0])
    if any(b.ffn_res.__class__.__name__ != "PreNorm" or b.attn_res.__class__.__name__ != "PreNorm"
           for b in st.blocks):
        raise ZooError("direct logit attribution needs pre-norm blocks (the residual stream is a "
                       "plain sum there)", where="logit_attribution", fix="use a pre-norm model")
    logits, cache = run_with_cache(model, ids)
    B, T = ids.shape
    tok = _per_position(_token_index(model, tokens, "logit_attribution.tokens"), B, T, "tokens")
    bad = None if wrong is None else _per_position(_token_index(model, wrong, "logit_attribution.wrong"),
                                                   B, T, "wrong")
    dirs = _direction(model, tok, bad)  # (B, T, D)
    labels, parts = ["embed"], [cache["hook_embed"]]
    for extra in ("hook_pos_embed", "hook_token_type_embed"):
        if extra in cache:
            labels.append(extra[5:])
            parts.append(cache[extra].expand_as(cache["hook_embed"]))
    L = model.spec.num_layers
    for i in range(L):
        labels += [f"{i}.attn", f"{i}.mlp"]
        parts += [cache[f"blocks.{i}.hook_attn_out"], cache[f"blocks.{i}.hook_mlp_out"]]
    comp = _ln_final_frozen(model, cache, torch.stack(parts))  # (C, B, T, D)
    per_layer = (comp * dirs).sum(-1)  # (C, B, T)
    heads = []
    for i in range(L):
        attn = st.blocks[i].attn
        z = cache[f"blocks.{i}.attn.hook_z"]  # (B, T, h, hd_v)
        w = attn.out.weight.view(-1, attn.h, z.size(-1))  # (D, h, hd_v): MLA's values are narrower than its q/k
        result = torch.einsum("bthe,dhe->hbtd", z, w)  # (h, B, T, D) each head's write
        heads.append((_ln_final_frozen(model, cache, result) * dirs).sum(-1))  # (h, B, T)
    per_head = torch.stack(heads)  # (L, h, B, T)
    logit = logits.gather(-1, tok[..., None])[..., 0]
    if bad is not None:
        logit = logit - logits.gather(-1, bad[..., None])[..., 0]
    return Attribution(per_layer, labels, per_head, logit - per_layer.sum(0), logit)


# ---------------------------------------------------------------------- head scores
@entry
def detection_pattern(kind: str, tokens: torch.Tensor) -> torch.Tensor:
    """TransformerLens' detection pattern ``(T, T)`` of one sequence ``tokens (T,)``."""
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1 or tokens.dtype.is_floating_point \
            or tokens.dtype.is_complex or tokens.dtype == torch.bool or tokens.numel() == 0:
        raise ZooError(f"expected one sequence of token ids, a non-empty 1-D integer tensor, got {_what(tokens)}",
                       where="detection_pattern.tokens", fix="pass ids[0] of a (B, T) batch")
    T = tokens.size(-1)
    if kind == "previous_token":
        return torch.diag(torch.ones(T - 1), -1)
    same = (tokens[:, None] == tokens[None, :]).float()
    same.fill_diagonal_(0)
    dup = torch.tril(same)
    if kind == "duplicate_token":
        return dup
    if kind == "induction":  # attend to the token after an earlier copy of the current one
        shifted = torch.zeros_like(dup)
        shifted[:, 1:] = dup[:, :-1]
        return torch.tril(shifted)
    raise ZooError(f"unknown head kind '{kind}'", where="head_scores.kind", options=list(HEAD_KINDS))


@entry
@torch.no_grad()
def head_scores(model, ids: torch.Tensor, kind: str, *, exclude_bos: bool = False,
                exclude_current_token: bool = False) -> torch.Tensor:
    """``(L, H)``: each head's share of attention on the ``kind`` pattern (TL's ``detect_head``
    with ``error_measure="mul"``), averaged over the rows of ``ids (B, T)`` as TL averages a list
    of sequences."""
    _single_stack(model, "head_scores")
    if kind not in HEAD_KINDS:
        raise ZooError(f"unknown head kind '{kind}'", where="head_scores.kind", options=list(HEAD_KINDS))
    ids = torch.as_tensor(ids)
    ids = ids[None] if ids.dim() == 1 else ids
    L = model.spec.num_layers
    _, cache = run_with_cache(model, ids, names_filter="*hook_pattern")
    pats = torch.stack([cache[f"blocks.{i}.attn.hook_pattern"] for i in range(L)])  # (L, B, H, T, T)
    scores = []
    for b in range(ids.size(0)):
        det = detection_pattern(kind, ids[b].cpu()).to(pats.device)
        p = pats[:, b].clone()  # (L, H, T, T)
        if exclude_bos:
            p[..., 0] = 0
        if exclude_current_token:
            p.diagonal(dim1=-2, dim2=-1).zero_()
        scores.append((p * det).sum((-1, -2)) / p.sum((-1, -2)))
    return torch.stack(scores).mean(0)


@entry
def repeated_tokens(vocab_size: int, length: int, batch: int = 1, seed: int = 0, low: int = 0) -> torch.Tensor:
    """``(batch, 2 * length)``: a random sequence followed by itself (the induction test input)."""
    if not low < vocab_size:
        raise ZooError(f"low = {low} is not below vocab_size = {vocab_size}", where="repeated_tokens.low",
                       fix="draw from [low, vocab_size): give low < vocab_size")
    if batch * 2 * length > 1 << 24:
        raise ZooError(f"batch x 2 x length = {batch * 2 * length:,} tokens is above 16,777,216",
                       where="repeated_tokens", fix="use a smaller batch or length")
    g = torch.Generator().manual_seed(seed)
    half = torch.randint(low, vocab_size, (batch, length), generator=g)
    return torch.cat([half, half], dim=1)


@entry
@torch.no_grad()
def induction_score(model, length: int = 20, batch: int = 8, seed: int = 0, low: int = 0) -> torch.Tensor:
    """``(L, H)``: on random tokens repeated twice, the mean attention from each token of the second
    copy to the token after its first occurrence (the ``-(length - 1)`` diagonal, as in
    TransformerLens' induction tutorial)."""
    _single_stack(model, "induction_score")
    if 2 * length > model.spec.max_len:
        raise ZooError(f"2 x length = {2 * length} tokens is above the model's max_len {model.spec.max_len}",
                       where="induction_score.length", fix=f"give length <= {model.spec.max_len // 2}")
    ids = repeated_tokens(model.spec.vocab_size, length, batch, seed, low)
    L = model.spec.num_layers
    _, cache = run_with_cache(model, ids, names_filter="*hook_pattern")
    out = []
    for i in range(L):
        p = cache[f"blocks.{i}.attn.hook_pattern"]  # (B, H, 2n, 2n)
        out.append(p.diagonal(offset=-(length - 1), dim1=-2, dim2=-1).mean((0, -1)))  # (H,)
    return torch.stack(out)


@entry
@torch.no_grad()
def in_context_loss(model, ids: torch.Tensor) -> torch.Tensor:
    """``(T - 1,)``: the mean next-token loss at each position of ``ids (B, T)``; Olsson et al.'s
    in-context-learning score is a later position's loss minus an earlier one's."""
    ids = torch.as_tensor(ids)
    logits = model(ids)
    logp = logits[:, :-1].float().log_softmax(-1)
    return -logp.gather(-1, ids[:, 1:, None])[..., 0].mean(0)


def _what(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return type(x).__name__


def _per_position(t: torch.Tensor, B: int, T: int, name: str) -> torch.Tensor:
    """One id, one per position of a row ``(T,)``, or ``(B, T)``: as ``(B, T)``; else a ZooError."""
    if t.dim() == 0 or t.numel() == 1:
        return t.reshape(()).expand(B, T)
    if tuple(t.shape) == (B, T) or (t.dim() == 1 and t.numel() == T):
        return t.expand(B, T)
    raise ZooError(f"{name} of shape {tuple(t.shape)} does not match the ids' ({B}, {T})",
                   where=f"logit_attribution.{name}", fix="give one id, or one per position: (B, T)")


def _token_index(model, x, where: str) -> torch.Tensor:
    """Token ids of any shape (an int, a list, a tensor) as a long tensor inside the vocabulary."""
    V = model.spec.vocab_size
    fix = f"give token ids: integers in [0, {V})"
    if isinstance(x, bool) or (isinstance(x, torch.Tensor) and x.dtype == torch.bool):
        raise ZooError(f"expected token ids, got {_what(x)}", where=where, fix=fix)
    try:
        t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        raise ZooError(f"cannot read token ids from {_what(x)}", where=where, fix=fix) from None
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ZooError(f"expected token ids, got {_what(t)}", where=where, fix=fix)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= V):
        raise ZooError(f"token ids must lie in [0, {V}), got {int(t.min())}..{int(t.max())}", where=where, fix=fix)
    return t.long()

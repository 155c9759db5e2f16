"""The three architectures of the lecture scripts, as thin classes over one block stack.

- :class:`EncoderModel` (BERT-like): bidirectional stack + masked-LM or classifier head;
- :class:`DecoderModel` (GPT-like): causal (or prefix-LM) stack + LM head;
- :class:`EncoderDecoderModel` (T5 / the original Transformer): encoder stack, decoder stack with
  cross-attention to the encoder's output, shared embeddings, LM head.

Every model is a plain ``nn.Module`` with a ``.spec``; ``forward`` returns logits.
"""
from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from .doors import door
from ..guard.run_budget import check_forward
from ..errors import ZooError
from ..components import taps_for
from .layers import KVCache, Stack, make_parts, make_stack, real_padding
from ..registry import blame
from .spec import ModelSpec


def positions_from_padding(attention_mask: torch.Tensor | None, T: int, device, offset=None):
    """Absolute positions ``(B|1, T)``.  With padding, each row's first real token sits at 0 (so
    left-padded and unpadded rows see the same positions); under a cache, counting continues."""
    if attention_mask is None:
        start = 0 if offset is None else offset
        if isinstance(start, torch.Tensor):
            return start + torch.arange(T, device=device)[None, :]
        return torch.arange(start, start + T, device=device)[None, :]  # (1, T)
    pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # (B, T)
    if offset is not None:
        pos = pos + offset
    return pos


def step_positions(pad: torch.Tensor | None, T: int, device, cache: KVCache | None) -> torch.Tensor:
    """Positions ``(B|1, T)`` of ``T`` tokens fed to a model, after the cached ones if any, counted
    as :func:`positions_from_padding` counts a whole sequence: a real token's position is the number
    of real tokens before it.  While a cache has seen no padding they are simply its next slots (a
    view it keeps ready, no work per decoding step)."""
    if cache is not None and pad is None:
        pos = cache.next_positions(T, device)
        if pos is not None:
            return pos
    if cache is None or not cache.length:
        return positions_from_padding(pad, T, device)
    kp = cache.key_padding  # (B, n) or None: every cached token real
    seen = cache.length if kp is None else kp.sum(-1, keepdim=True)  # real tokens so far, per row
    if pad is None:
        return seen + torch.arange(T, device=device)[None, :]
    return (seen + pad.long().cumsum(-1) - 1).clamp(min=0)  # a padded token repeats the last one


class Embeddings(nn.Module):
    """Token (+ segment) embeddings, scaled by sqrt(d_model) as in "Attention Is All You Need" when
    ``scale_embeddings``, plus embedding-level positions, an optional norm (BERT) and dropout."""

    def __init__(self, spec: ModelSpec, stack: Stack, norm_factory=None):
        super().__init__()
        self.types = nn.Embedding(spec.type_vocab_size, spec.d_model) if spec.type_vocab_size else None
        self.scale = math.sqrt(spec.d_model) if spec.scale_embeddings else 1.0
        self.norm = norm_factory() if (spec.embed_norm and norm_factory) else nn.Identity()
        self.drop = nn.Dropout(spec.dropout)
        self.has_norm, self.has_dropout = spec.embed_norm and norm_factory is not None, spec.dropout > 0
        self.embeds_positions = type(stack.positions).acts_on_embeddings

    def forward(self, ids, pos, tokens: nn.Embedding, positions: nn.Module, token_type_ids=None):
        """The token table is passed in (not owned) so one table can serve both stacks and the
        tied output head without appearing twice in the state dict."""
        tap = taps_for(self)  # hook points, in a hooked call only
        x = tokens(ids)  # (B, T, D)
        if self.scale != 1.0:
            x = x * self.scale
        if tap is not None:
            x = tap("hook_embed", x)
        if self.types is not None:
            tt = token_type_ids if token_type_ids is not None else torch.zeros_like(ids)
            x = x + (self.types(tt) if tap is None else tap("hook_token_type_embed", self.types(tt)))
        if self.embeds_positions:
            xp = positions.embed(x, pos)
            if tap is not None:  # what the positions add, (B|1, T, D)
                pe = xp - x
                shown = tap("hook_pos_embed", pe)
                xp = xp if shown is pe else x + shown
            x = xp
        if self.has_norm:
            x = self.norm(x)
        return self.drop(x) if self.has_dropout and self.training else x

    def hook_points(self) -> tuple[str, ...]:
        """The names this forward taps, in order."""
        return ("hook_embed",) + (("hook_token_type_embed",) if self.types is not None else ()) + \
            (("hook_pos_embed",) if self.embeds_positions else ())


class ZooModel(nn.Module):
    """Shared plumbing: weight tying, padding masks, ``num_parameters``."""

    spec: ModelSpec

    def __call__(self, *args, **kwargs):
        check_forward(self, args, kwargs)  # shapes only: a forward that cannot fit is refused (issue 22)
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:  # free unless raised: a note names the plugin whose code failed
            blame(exc)
            raise

    def _key_padding(self, ids: torch.Tensor, attention_mask: torch.Tensor | None):
        """``(B, T)`` bool, True for real tokens, from ``attention_mask`` or the spec's ``pad_id``;
        None when there is no padding (checked once here, not again by every stack)."""
        if attention_mask is not None:
            return real_padding(attention_mask.bool())
        if self.spec.pad_id is not None:
            return real_padding(ids != self.spec.pad_id)
        return None

    def _check_length(self, T: int, cache: KVCache | None = None, where: str = "input") -> None:
        total = T + (cache.length if cache is not None else 0)
        if total > self.spec.max_len:
            raise ZooError(f"sequence of {total} tokens is longer than max_len {self.spec.max_len}",
                           where=where, fix="truncate the input, or build the model with a larger "
                                            "max_len")

    def tie_weights(self) -> None:
        """Point the output projection at the token embedding (when ``tie_embeddings``)."""
        if self.spec.tie_embeddings and getattr(self, "lm_head", None) is not None:
            self.lm_head.weight = self.tok_emb.weight

    def head_input(self, x: torch.Tensor) -> torch.Tensor:
        """The LM head's input (public: generation and benchmarks apply the head themselves, as
        ``head_output(lm_head(head_input(hidden)))``): the final hidden states, times ``spec.head_scale`` if set (T5 scales
        by ``d_model ** -0.5`` before its tied output projection)."""
        return x if self.spec.head_scale is None else x * self.spec.head_scale

    def unembed(self, x: torch.Tensor, tap=None) -> torch.Tensor:
        """The LM head on the final hidden states, before any soft-cap: ``lm_head(head_input(x))``,
        with TransformerLens' ``unembed.hook_in`` / ``unembed.hook_out`` in a hooked call."""
        d = self.spec.d_model
        if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point or x.dim() == 0 or x.size(-1) != d:
            what = f"shape {tuple(x.shape)}, {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
            raise ZooError(f"expected final hidden states (..., {d}) of a float dtype, got {what}",
                           where="model.unembed.x", fix="pass the last block's output, e.g. cache['ln_final.hook_normalized']")
        if x.numel() // d * self.spec.vocab_size > 1 << 28:
            raise ZooError(f"{x.numel() // d:,} positions x {self.spec.vocab_size:,} logits is above 2**28 values",
                           where="model.unembed.x", fix="unembed fewer positions at a time")
        if tap is not None and not callable(tap):
            raise ZooError(f"tap must be callable, got {type(tap).__name__}", where="model.unembed.tap",
                           fix="leave it out (hooked calls pass their own)")
        x = self.head_input(x)
        if tap is None:
            return self.lm_head(x)
        return tap("unembed.hook_out", self.lm_head(tap("unembed.hook_in", x)))

    def head_output(self, logits: torch.Tensor) -> torch.Tensor:
        """Soft-capped logits ``cap * tanh(logits / cap)`` when ``spec.logit_softcap`` is set (Gemma
        2): smooth, order-preserving, and never beyond ``±cap``."""
        cap = self.spec.logit_softcap
        return logits if cap is None else cap * torch.tanh(logits / cap)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def auxiliary_loss(self) -> torch.Tensor | None:
        """The auxiliary losses the components left in their last forward, summed (a mixture of
        experts' load-balancing loss, ``aux_loss``), or None when no component has one.  The
        trainer adds it to the objective's loss."""
        found = [m.aux_loss for m in self.modules()
                 if m is not self and isinstance(getattr(m, "aux_loss", None), torch.Tensor)]
        return torch.stack(found).sum() if found else None

    def generate(self, ids, max_new_tokens: int | None = None, *, fwd_hooks=None,
                 return_cache: bool = False, names_filter=None, **options):
        """Generate with a KV cache (greedy, sampling, stop tokens, streaming, text in/out); see
        :func:`zoo.run.generate.generate` for the options (``max_new_tokens`` None: what the
        model's generation config's ``max_length`` leaves, else 32).  ``fwd_hooks`` apply at every
        decoding step and ``return_cache=True`` returns ``(ids, cache)`` (see
        :func:`zoo.inside.hooks.generate`)."""
        n = () if max_new_tokens is None else (max_new_tokens,)  # None: the door's own default
        if fwd_hooks or return_cache:
            return door("hooks.generate")(self, ids, *n, fwd_hooks=fwd_hooks or (),
                                            return_cache=return_cache, names_filter=names_filter, **options)
        return door("generate")(self, ids, *n, **options)

    def chat(self, messages, max_new_tokens: int = 256, **options):
        """The reply to a conversation, in the model's chat template (:func:`zoo.run.chat.chat`;
        ``stream=True`` yields it piece by piece)."""
        return door("chat")(self, messages, max_new_tokens, **options)

    def run_with_hooks(self, *args, fwd_hooks=(), **kwargs):
        """One forward with TransformerLens-style hooks in place (:func:`zoo.inside.hooks.run_with_hooks`)."""
        return door("hooks.run_with_hooks")(self, *args, fwd_hooks=fwd_hooks, **kwargs)

    def run_with_cache(self, *args, names_filter=None, fwd_hooks=(), **kwargs):
        """``(output, cache)`` of one forward, every named activation cached
        (:func:`zoo.inside.hooks.run_with_cache`)."""
        return door("hooks.run_with_cache")(self, *args, names_filter=names_filter, fwd_hooks=fwd_hooks, **kwargs)

    def hooks(self, fwd_hooks=(), names_filter=None):
        """A context in which every call runs with ``fwd_hooks`` (:func:`zoo.inside.hooks.hooks`)."""
        return door("hooks.hooks")(self, fwd_hooks, names_filter)

    def hook_names(self) -> list[str]:
        """Every hook point's name, in forward order (:func:`zoo.inside.hooks.hook_names`)."""
        return door("hooks.hook_names")(self)

    def reset_buffers(self) -> None:
        """Recompute derived, non-persistent buffers (after building on the meta device)."""
        for m in self.modules():
            if m is not self and hasattr(m, "reset_buffers"):
                m.reset_buffers()

    def _norm_factory(self, role: str, registry):
        """A factory of the ``role`` stack's norm type (for the embedding norm, the MLM transform)."""
        return make_parts(self.spec, role, registry).norm


class DecoderModel(ZooModel):
    """Decoder-only language model (GPT; a prefix LM with the ``prefix`` mask)."""

    def __init__(self, spec: ModelSpec, registry):
        super().__init__()
        self.spec = spec
        self.tok_emb = nn.Embedding(spec.vocab_size, spec.d_model)
        self.decoder = make_stack(spec, "decoder", registry)
        self.embed = Embeddings(spec, self.decoder, self._norm_factory("decoder", registry))
        self.lm_head = nn.Linear(spec.d_model, spec.vocab_size, bias=spec.head_bias)
        self.tie_weights()

    def new_cache(self, capacity: int | None = None) -> KVCache:
        """An empty KV cache; ``capacity`` (prompt + new tokens) preallocates it in one go."""
        return KVCache(self.decoder.num_layers, capacity)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                cache: KVCache | None = None, prefix_lengths=None, token_type_ids=None,
                return_hidden: bool = False) -> torch.Tensor:
        """``ids (B, T)`` -> logits ``(B, T, V)``.  ``attention_mask (B, T)``: 1 for real tokens.
        With a ``cache`` (from :meth:`new_cache`), ``ids`` are the tokens after the cached ones."""
        B, T = ids.shape
        self._check_length(T, cache, "ids")
        tap = taps_for(self)  # hook points, in a hooked call only
        if tap is not None:
            ids = tap.begin("decoder", cache, prefix_lengths=prefix_lengths)("hook_tokens", ids)
        pad = self._key_padding(ids, attention_mask)
        pos = step_positions(pad, T, ids.device, cache)
        x = self.embed(ids, pos, self.tok_emb, self.decoder.positions, token_type_ids)  # (B, T, D)
        x = self.decoder(x, pos, key_padding=pad, cache=cache, prefix_lengths=prefix_lengths)
        if return_hidden:
            return x
        return self.head_output(self.lm_head(self.head_input(x)) if tap is None else self.unembed(x, tap))  # (B, T, V)


class EncoderModel(ZooModel):
    """Encoder-only model (BERT): masked-LM head, sequence classifier, or bare hidden states."""

    def __init__(self, spec: ModelSpec, registry):
        super().__init__()
        self.spec = spec
        self.tok_emb = nn.Embedding(spec.vocab_size, spec.d_model)
        self.encoder = make_stack(spec, "encoder", registry)
        norm = self._norm_factory("encoder", registry)
        self.embed = Embeddings(spec, self.encoder, norm)
        head = spec.head
        self.lm_head = self.classifier = None
        self.transform = None
        if head.kind == "mlm":
            if head.transform:
                self.transform = nn.Sequential(nn.Linear(spec.d_model, spec.d_model), nn.GELU(),
                                               norm())
            self.lm_head = nn.Linear(spec.d_model, spec.vocab_size, bias=True)
            self.tie_weights()
        elif head.kind == "classifier":
            self.classifier = nn.Linear(spec.d_model, head.num_labels)

    def encode(self, ids, attention_mask=None, token_type_ids=None):
        """Hidden states ``(B, T, D)`` and the padding mask ``(B, T)`` (or None)."""
        B, T = ids.shape
        self._check_length(T, None, "ids")
        tap = taps_for(self)  # hook points, in a hooked call only
        if tap is not None:
            ids = tap.begin("encoder", None)("hook_tokens", ids)
        pad = self._key_padding(ids, attention_mask)
        pos = positions_from_padding(pad, T, ids.device)
        x = self.embed(ids, pos, self.tok_emb, self.encoder.positions, token_type_ids)
        return self.encoder(x, pos, key_padding=pad), pad

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, return_hidden: bool = False,
                select: torch.Tensor | None = None):
        """``ids (B, T)`` -> MLM logits ``(B, T, V)``, classifier logits ``(B, num_labels)``, or
        hidden states ``(B, T, D)`` for ``head: none`` / ``return_hidden``.

        ``select (B, T)`` (bool, MLM head only): logits ``(N, V)`` of the ``N`` selected positions
        only, in row-major order.  Masked-LM training predicts ~15% of the positions, and the
        vocabulary projection is the largest matmul of a small model, so this skips most of it."""
        x, pad = self.encode(ids, attention_mask, token_type_ids)
        if return_hidden:
            return x
        if self.lm_head is not None:
            if select is not None:
                x = x[select]  # (N, D)
            if self.transform is not None:
                x = self.transform(x)
            tap = taps_for(self)
            return self.lm_head(x) if tap is None else tap("unembed.hook_out", self.lm_head(tap("unembed.hook_in", x)))
        if self.classifier is not None:
            return self.classifier(pool(x, pad, self.spec.head.pooling))
        return x


def pool(x: torch.Tensor, pad: torch.Tensor | None, how: str) -> torch.Tensor:
    """``(B, T, D) -> (B, D)`` over real tokens: ``cls`` (first token), ``mean`` or ``max``."""
    if how == "cls":
        return x[:, 0]
    if pad is None:
        return x.mean(1) if how == "mean" else x.amax(1)
    m = pad[..., None].to(x.dtype)  # (B, T, 1)
    if how == "mean":
        return (x * m).sum(1) / m.sum(1).clamp(min=1.0)
    return x.masked_fill(~pad[..., None], torch.finfo(x.dtype).min).amax(1)


class EncoderDecoderModel(ZooModel):
    """Encoder-decoder (the original Transformer, T5): the decoder cross-attends to the encoder."""

    def __init__(self, spec: ModelSpec, registry):
        super().__init__()
        self.spec = spec
        self.tok_emb = nn.Embedding(spec.vocab_size, spec.d_model)  # shared by both stacks
        self.encoder = make_stack(spec, "encoder", registry)
        self.decoder = make_stack(spec, "decoder", registry)
        self.enc_embed = Embeddings(spec, self.encoder, self._norm_factory("encoder", registry))
        self.dec_embed = Embeddings(spec, self.decoder, self._norm_factory("decoder", registry))
        self.lm_head = nn.Linear(spec.d_model, spec.vocab_size, bias=spec.head_bias)
        self.tie_weights()

    def new_cache(self, capacity: int | None = None) -> KVCache:
        """An empty KV cache; ``capacity`` (prompt + new tokens) preallocates it in one go."""
        return KVCache(self.decoder.num_layers, capacity)

    def encode(self, src_ids, src_padding=None, **renamed):
        """Encoder output ``(B, S, D)`` and its padding ``(B, S)`` (or None).  ``src_padding (B, S)``:
        1 / True for real tokens (default: from the spec's ``pad_id``)."""
        src_padding = _renamed(renamed, src_padding=src_padding)["src_padding"]
        B, S = src_ids.shape
        self._check_length(S, None, "src_ids")
        tap = taps_for(self)  # hook points, in a hooked call only
        if tap is not None:
            src_ids = tap.begin("encoder", None)("hook_tokens", src_ids)
        pad = self._key_padding(src_ids, src_padding)
        pos = positions_from_padding(pad, S, src_ids.device)
        x = self.enc_embed(src_ids, pos, self.tok_emb, self.encoder.positions)
        return self.encoder(x, pos, key_padding=pad), pad

    def decode(self, tgt_ids, memory, memory_padding=None, tgt_padding=None, cache=None,
               return_hidden=False, **renamed):
        """Decoder logits ``(B, T, V)`` for ``tgt_ids (B, T)`` given the encoder ``memory``;
        ``tgt_padding (B, T)``: 1 / True for real tokens (the decoder is causal by construction)."""
        tgt_padding = _renamed(renamed, tgt_padding=tgt_padding)["tgt_padding"]
        B, T = tgt_ids.shape
        self._check_length(T, cache, "tgt_ids")
        tap = taps_for(self)  # hook points, in a hooked call only
        if tap is not None:
            tgt_ids = tap.begin("decoder", cache, memory=memory, memory_padding=memory_padding)(
                "hook_tokens", tgt_ids)
        pad = self._key_padding(tgt_ids, tgt_padding)
        pos = step_positions(pad, T, tgt_ids.device, cache)
        x = self.dec_embed(tgt_ids, pos, self.tok_emb, self.decoder.positions)
        x = self.decoder(x, pos, key_padding=pad, cache=cache, memory=memory,
                         memory_padding=memory_padding)
        if return_hidden:
            return x
        return self.head_output(self.lm_head(self.head_input(x)) if tap is None else self.unembed(x, tap))

    def forward(self, src_ids: torch.Tensor, tgt_ids: torch.Tensor, src_padding=None, tgt_padding=None,
                return_hidden: bool = False, **renamed) -> torch.Tensor:
        """``src_ids (B, S)``, ``tgt_ids (B, T)`` -> logits ``(B, T, V)``.  ``src_padding (B, S)`` /
        ``tgt_padding (B, T)``: 1 / True for real tokens, 0 for padding (default: from ``pad_id``).
        They are *padding* masks; the decoder's causal rule comes from the spec."""
        new = _renamed(renamed, src_padding=src_padding, tgt_padding=tgt_padding)
        memory, mem_pad = self.encode(src_ids, new["src_padding"])
        return self.decode(tgt_ids, memory, mem_pad, new["tgt_padding"], return_hidden=return_hidden)


#: old keyword -> new: ``src_mask`` / ``tgt_mask`` meant padding (1 = real token), while in
#: ``nn.Transformer`` ``tgt_mask`` is the causal attention mask, a trap in a project teaching masks
_RENAMED = {"src_mask": "src_padding", "tgt_mask": "tgt_padding"}


def _renamed(old: dict, **new):
    """``new`` with the values passed under the old keyword names (a DeprecationWarning each)."""
    for key, value in old.items():
        if key not in _RENAMED or _RENAMED[key] not in new:
            raise TypeError(f"unexpected keyword argument '{key}'")
        warnings.warn(f"{key}= is deprecated, use {_RENAMED[key]}= (1 = real token; it was never "
                      f"nn.Transformer's {key}, an attention mask)", DeprecationWarning, stacklevel=3)
        if new[_RENAMED[key]] is None:
            new[_RENAMED[key]] = value
    return new


ARCH_CLASSES = {"encoder": EncoderModel, "decoder": DecoderModel,
                "encoder_decoder": EncoderDecoderModel}


@torch.no_grad()
def init_weights(model: nn.Module, std: float = 0.02) -> None:
    """GPT-2 style initialisation: N(0, 0.02) for linear and embedding weights, zero biases; norms
    and components with their own ``reset_parameters`` keep theirs."""
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif m is not model and hasattr(m, "reset_parameters") and not isinstance(
                m, (nn.Linear, nn.Embedding)):
            m.reset_parameters()

"""What a browser may ask of a stored checkpoint: bounded by memory and work, never by its shape.

A released model (SmolLM2-135M-Instruct: 30 layers, ``max_len`` 8192) is not something a user can
make smaller, so the UI does not hold a *stored* checkpoint's shape against limits (issue 36).  It
holds what a request costs against the budget the engine's own work checks use
(:func:`zoo.guard.run_budget.budget`: the memory this process may still use now, or
``zoo.guard.run_budget.BUDGET`` when set):

- **weights**: a checkpoint opens when its stored tensors fit the budget -- the figure is read from the
  file's header, before any tensor is read; otherwise the tab says how much it needs and the budget
  (:func:`check_fits`).  The model cache gives back what it holds before that refusal.
- **tokens per request**: a long ``max_len`` is capped per request (prompt + new tokens) at
  ``LIMITS["request_tokens"]`` and at what ``LIMITS["request_flops"]`` of work allows (a forward costs
  about 2 x parameters FLOPs per token), and the tab says so (:func:`room`, :func:`room_line`).  The KV
  cache at that length is shown; the engine's checks (:mod:`zoo.guard.run_budget`) refuse a
  generation, trace or forward whose cache or activations do not fit, with their figures.
- **what only the UI allocates**: the Inspect tab's private copy of the model and the Interpret tab's
  logit lens are held against the same budget here (:func:`refuse_if_over`).

A spec typed into the browser (Build tab, Compare overrides) keeps its shape limits
(``ui.common.LIMITS``, ``check_spec_limits``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
import zoo
from zoo.errors import CheckpointError, ZooError
from zoo.guard import run_budget
from zoo.guard.run_budget import human_bytes

from .limits import LIMITS
from .i18n import budget_why, t, ui_error


def budget() -> tuple[float, str]:
    """``(bytes, how it was chosen)``: the budget a request is held against (the engine's)."""
    return run_budget.budget("cpu")


def stored(path: Path) -> tuple[int, int]:
    """``(bytes, numbers)`` of the tensors stored in checkpoint file ``path``, from its header
    (tied aliases are not stored, so each shared tensor counts once)."""
    from zoo.io.checkpoint import read_header

    entries, _, _ = read_header(path)
    nbytes = sum(e - b for _, _, (b, e) in entries.values())
    numbers = sum(math.prod(shape) for _, shape, _ in entries.values())
    return nbytes, numbers


def fits(nbytes: float) -> tuple[bool, float, str]:
    """``(fits, budget, how it was chosen)`` for ``nbytes``."""
    limit, why = budget()
    return nbytes <= limit, limit, why


def check_fits(name: str, path: Path, free=None, others=None) -> int:
    """Refuse checkpoint ``name`` (file ``path``) with a :class:`CheckpointError` naming its weights'
    size and the budget when they do not fit; returns the size.  ``free()``, when given, is called
    once before refusing (the model cache lets go of the models it holds) and the budget read again;
    ``others()`` (name -> weights file: ``ui.common.checkpoint_table``) gives the checkpoints the
    refusal offers instead, those that fit.
    A file that is no checkpoint is refused as ``zoo.load_spec`` refuses it, first."""
    zoo.load_spec(path)
    nbytes, _ = stored(path)
    ok, limit, why = fits(nbytes)
    if not ok and free is not None and free():
        ok, limit, why = fits(nbytes)
    if not ok:
        options = []
        for other, f in (others() if others is not None else {}).items():
            try:
                if other != name and stored(f)[0] <= limit:
                    options.append(other)
            except ZooError:
                continue
        raise ui_error(CheckpointError, "budget.weights", fix="budget.weights_fix", where="checkpoint",
                       options=options, name=name, need=human_bytes(nbytes), limit=human_bytes(limit), why=why)
    return nbytes


def refuse_if_over(nbytes: float, key: str, where: str, fix: str, **params) -> None:
    """The UI's error ``key`` (a :data:`~ui.i18n.STRINGS` key with ``{need}``, ``{limit}`` and
    ``{why}``; ``fix`` another key) at ``where`` when ``nbytes`` -- what the UI itself is about to
    allocate -- passes the budget."""
    ok, limit, why = fits(nbytes)
    if not ok:
        raise ui_error(ZooError, key, fix=fix, where=where, need=human_bytes(nbytes), limit=human_bytes(limit),
                       why=why, **params)


# ---------------------------------------------------------------------- tokens per request
@dataclass(frozen=True)
class Room:
    """How many tokens one request may hold for a model, and why that many."""
    tokens: int  # prompt + new tokens of one request (source + target for an encoder-decoder)
    max_len: int  # the model's own
    by: str  # "max_len" (the model's), "tokens" (LIMITS["request_tokens"]) or "work" (LIMITS["request_flops"])
    kv_bytes: int  # the KV cache of one row at ``tokens`` (0: no decoder)

    @property
    def capped(self) -> bool:
        return self.by != "max_len"


def _cap(max_len: int, params: int) -> tuple[int, str]:
    by_work = int(LIMITS["request_flops"] // max(2 * params, 1))
    cap, by = max_len, "max_len"
    if LIMITS["request_tokens"] < cap:
        cap, by = int(LIMITS["request_tokens"]), "tokens"
    if by_work < cap:
        cap, by = max(by_work, 1), "work"
    return cap, by


def kv_bytes_per_token(model) -> int:
    """Bytes one token leaves in the KV cache of one row (every decoder layer, as each layer's
    ``cache_layout`` says it keeps them), in the model's dtype; 0 without a decoder."""
    p = run_budget.plan(model)
    dec = p.stacks.get("decoder")
    return 0 if dec is None else dec.layers * dec.cache_per_token * p.elem


def room(model) -> Room:
    """The :class:`Room` of a loaded model."""
    cap, by = _cap(model.spec.max_len, parameters(model))
    return Room(cap, model.spec.max_len, by, cap * kv_bytes_per_token(model))


def room_of(path: Path) -> tuple[Room, int]:
    """``(Room, weights bytes)`` of a checkpoint file, without reading its tensors (its stored
    numbers and a build on the meta device for the cache layout); remembered per file version (its
    path, size and modification time), since the model card asks again on every language switch."""
    st = Path(path).stat()
    nbytes, numbers, max_len, per_token = _stored_layout(str(path), st.st_size, st.st_mtime_ns)
    cap, by = _cap(max_len, numbers)  # the limits are read each time (tests and settings change them)
    return Room(cap, max_len, by, cap * per_token), nbytes


@functools.lru_cache(maxsize=64)
def _stored_layout(path: str, size: int, mtime_ns: int) -> tuple[int, int, int, int]:
    """``(weights bytes, stored numbers, max_len, KV bytes per token)`` of one file version."""
    import torch

    nbytes, numbers = stored(Path(path))
    spec = zoo.load_spec(Path(path))
    with torch.device("meta"):  # shapes only: the layers' cache layout
        meta = zoo.build(spec, init=False, budget=float("inf"))
    elem = nbytes // max(numbers, 1) or 1  # the stored dtype's size
    return nbytes, numbers, spec.max_len, kv_bytes_per_token(meta) // run_budget.plan(meta).elem * elem


def cap_text(r: Room, lang: str = "en") -> str:
    """Why a request holds at most ``r.tokens`` tokens, in words (empty when only max_len caps it)."""
    if not r.capped:
        return ""
    key = "budget.cap_tokens" if r.by == "tokens" else "budget.cap_work"
    return t(key, lang, n=r.tokens, max_len=r.max_len, flops=f"{LIMITS['request_flops']:.0e}")


def room_line(path: Path, lang: str = "en") -> str:
    """The model card's line on size: weights against the budget, tokens per request (and why),
    the KV cache of a request at that length."""
    r, nbytes = room_of(path)
    limit, why = budget()
    shown_limit = "∞" if math.isinf(limit) else human_bytes(limit)
    line = t("budget.card", lang, weights=human_bytes(nbytes), limit=shown_limit, why=budget_why(why, lang), n=r.tokens,
             max_len=r.max_len, kv=human_bytes(r.kv_bytes))
    return line + (" " + cap_text(r, lang) if r.capped else "")


def check_request(r: Room, tokens: int, where: str = "text") -> None:
    """Refuse a prompt of ``tokens`` tokens beyond :class:`Room` ``r`` (the message names the cap
    and the model's max_len)."""
    if tokens > r.tokens:
        raise ui_error(ZooError, "budget.prompt_too_long", fix="budget.too_many_fix", where=where, n=tokens,
                       cap=r.tokens, max_len=r.max_len)


def new_token_room(model, n: int) -> int:
    """New tokens a prompt of ``n`` tokens leaves: the model's ``max_len`` room
    (``zoo.commands.run.new_token_room``), within this UI's tokens per request (:func:`room`: prompt
    + new; a decoder's last new token is never fed back).  A prompt longer than one request holds is
    refused, naming the cap."""
    from zoo.commands.run import new_token_room as max_len_room

    r = room(model)
    check_request(r, n)
    if not r.capped:
        return max_len_room(model, n)
    inside = r.tokens - n + 1 if model.spec.arch == "decoder" else r.tokens - n
    return max(min(max_len_room(model, n), inside), 0)


def work(params: int, forwards: int, tokens: int) -> float:
    """FLOPs of ``forwards`` forwards of ``tokens`` tokens each (2 x parameters per token)."""
    return 2.0 * params * forwards * tokens


def parameters(model) -> int:
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def model_bytes(model) -> int:
    """Bytes of a loaded model's parameters and buffers (shared tensors once): what a copy costs."""
    seen = {id(x): x for x in [*model.parameters(), *model.buffers()]}
    return sum(x.numel() * x.element_size() for x in seen.values())

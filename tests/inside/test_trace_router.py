"""Router statistics in ``zoo.trace`` (issue 24): for a mixture-of-experts model the trace records
which experts each token went to (``decoder.blocks.i.ffn.experts``) and how many real tokens each
expert received (``...ffn.expert_counts``; ``Trace.expert_counts()`` stacks the layers).  The
reference is transformers' own router on the same weights: the top-k of its ``router_logits``
(``output_router_logits=True``), counted over the same real tokens of a left-padded batch."""
import pytest
import torch

import zoo
from zoo.convert import from_transformers

T = pytest.importorskip("transformers")
from convert_cases import _decoder, llama, padded  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def olmoe():
    return _decoder("OlmoeForCausalLM", "OlmoeConfig", num_experts=8, num_experts_per_tok=3, intermediate_size=16,
                    eos_token_id=None, pad_token_id=None)


def qwen3_moe():
    return _decoder("Qwen3MoeForCausalLM", "Qwen3MoeConfig", num_experts=6, num_experts_per_tok=2,
                    moe_intermediate_size=16, head_dim=16, norm_topk_prob=True)


@pytest.mark.parametrize("make", [olmoe, qwen3_moe])
@torch.no_grad()
def test_tokens_per_expert_equal_transformers_router(make):
    hf = make()
    z = from_transformers(hf, certify=False)
    ids, am, pos = padded(left=True)  # rows of 9, 6 and 4 real tokens
    out = hf(ids, attention_mask=am, position_ids=pos, output_router_logits=True)
    tr = zoo.trace(z, ids, attention_mask=am)
    assert (tr.logits - out.logits).abs()[am.bool()].max() <= 1e-5
    E, k = z.spec.stack("decoder").ffn.config.experts, z.spec.stack("decoder").ffn.config.top_k
    real = am.bool().reshape(-1)  # (B*T,)
    counts = tr.expert_counts()  # (L, E)
    assert counts.shape == (2, E)
    for layer, logits in enumerate(out.router_logits):  # (B*T, E) per layer
        want_experts = logits.float().softmax(-1).topk(k, dim=-1).indices  # (B*T, k)
        got_experts = tr[f"decoder.blocks.{layer}.ffn.experts"].reshape(-1, k)
        # at real tokens (padded positions differ between the libraries and are not compared)
        assert torch.equal(got_experts[real].sort(-1).values, want_experts[real].sort(-1).values)
        want = torch.bincount(want_experts[real].reshape(-1), minlength=E)
        assert torch.equal(counts[layer], want), (counts[layer], want)
    assert counts.sum(-1).tolist() == [int(am.sum()) * k] * 2  # padding excluded: 19 real tokens
    assert (counts > 0).sum() >= 4
    summary = tr.summary()
    assert summary["expert_counts"]["decoder.blocks.0.ffn.expert_counts"] == counts[0].tolist()


@torch.no_grad()
def test_without_a_mask_every_position_counts():
    z = from_transformers(olmoe(), certify=False)
    ids = torch.randint(3, 101, (2, 5))
    tr = zoo.trace(z, ids)
    assert tr.expert_counts().sum(-1).tolist() == [2 * 5 * 3] * 2
    assert torch.equal(tr.expert_counts()[1], z.decoder.blocks[1].ffn.expert_counts)  # the module's own count


def test_a_dense_model_has_no_router_statistics():
    z = from_transformers(llama(), certify=False)
    tr = zoo.trace(z, torch.randint(3, 101, (1, 4)))
    assert not tr.names("*.expert_counts") and "expert_counts" not in tr.summary()
    with pytest.raises(zoo.ZooError) as e:
        tr.expert_counts()
    assert e.value.where == "trace.expert_counts"

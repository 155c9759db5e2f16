"""Encoder tasks: fill-mask candidates and classifier probabilities."""
import pytest
import torch

import zoo


def test_fill_mask_text_and_ids():
    tok = zoo.tokenizer("char", text="北京是中国的首都上海")
    model = zoo.build("bert_tiny", num_layers=2, vocab_size=tok.vocab_size, seed=0).eval()
    model.tokenizer = tok
    out = zoo.fill_mask(model, "北京是<mask>国的<mask>都", top_k=3)
    assert len(out) == 2 and all(len(c) == 3 for c in out)
    ids = torch.tensor([tok.encode("北京是<mask>国的<mask>都")])
    with torch.no_grad():
        logits = model(ids)
    for cands in out:
        pos = cands[0]["position"]
        probs = logits[0, pos].softmax(-1)
        assert cands[0]["id"] == int(probs.argmax())
        assert abs(cands[0]["p"] - float(probs.max())) < 1e-5
        assert cands[0]["p"] >= cands[1]["p"] >= cands[2]["p"]
        assert cands[0]["text"] == tok.decode([cands[0]["id"]])
    assert [c[0]["position"] for c in out] == [3, 6]
    same = zoo.fill_mask(model, ids[0].tolist(), top_k=3, mask_id=tok.mask_id)
    assert [c["id"] for c in same[0]] == [c["id"] for c in out[0]]
    with pytest.raises(zoo.ZooError, match="no mask token"):
        zoo.fill_mask(model, "北京")


def test_classify_and_wrong_heads():
    model = zoo.build("bert_tiny", num_layers=1, head={"kind": "classifier", "num_labels": 3},
                      seed=0).eval()
    ids = torch.randint(1, 500, (2, 6))
    rows = zoo.classify(model, ids, labels=["neg", "neu", "pos"])
    probs = model(ids).softmax(-1)
    assert len(rows) == 2
    for row, p in zip(rows, probs):
        torch.testing.assert_close(torch.tensor(row["probs"]), p)
        assert row["label"] == int(p.argmax()) and row["name"] == ["neg", "neu", "pos"][row["label"]]
    assert isinstance(zoo.classify(model, ids[0].tolist()), dict)
    with pytest.raises(zoo.ZooError, match="classifier"):
        zoo.classify(zoo.build("bert_tiny", num_layers=1), ids)
    with pytest.raises(zoo.ZooError, match="generate"):
        zoo.fill_mask(zoo.build("gpt_tiny", num_layers=1), ids)

"""Tokenizers: char / byte / hf, Chinese round trips, specials, and travelling inside a checkpoint."""
import json

import pytest
import torch

import zoo
from zoo.io.tokenizers import from_json, split_specials, to_json, tokenizer

ZH = "床前明月光，疑是地上霜。举头望明月，低头思故乡。"
MIXED = "Attention is all you need —— 注意力就是你所需要的一切！😀"


def test_char_roundtrip_chinese_and_specials():
    tok = tokenizer("char", text=ZH + "abc")
    ids = tok.encode(ZH)
    assert len(ids) == len(ZH) and tok.unk_id not in ids
    assert tok.decode(ids) == ZH
    assert tok.vocab_size == 5 + len(set(ZH + "abc"))
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id, tok.mask_id) == (0, 1, 2, 3, 4)
    ids = tok.encode("明月<mask>光")
    assert ids[2] == tok.mask_id and len(ids) == 4
    assert tok.encode("明X") == [tok.encode("明")[0], tok.unk_id]  # unknown character -> <unk>
    assert tok.decode(tok.encode("<bos>明月"), skip_special=True) == "明月"


def test_byte_roundtrip_everything():
    tok = tokenizer("byte")
    for text in (ZH, MIXED, "", "a<eos>b<pad>"):
        assert tok.decode(tok.encode(text)) == text
    assert tok.encode("中") == list("中".encode("utf-8")) and len(tok.encode(ZH)) == 3 * len(ZH)
    assert tok.vocab_size == 261 and tok.eos_id == 259 and tok.mask_id == 260
    assert tok.decode(tok.encode("中") + [tok.eos_id], skip_special=True) == "中"
    assert tok.decode(tok.encode("中")[:2]) == "\ufffd"  # a cut-off character is visible as such


@pytest.fixture(scope="module")
def hf_file(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE(unk_token=None))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<pad>", "<s>", "</s>", "<mask>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator([ZH, MIXED, "the cat sat on the mat"] * 20, trainer)
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    hf.save(str(path))
    return path


def test_hf_local_file_roundtrip(hf_file):
    tok = tokenizer("hf", path=str(hf_file))
    for text in (ZH, MIXED, "the cat"):
        assert tok.decode(tok.encode(text)) == text
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.mask_id) == (0, 1, 2, 3)
    assert len(tok.encode("床前明月光")) < len("床前明月光".encode())  # merges learned
    again = from_json(to_json(tok))
    assert again.encode(MIXED) == tok.encode(MIXED) and again.vocab_size == tok.vocab_size
    with pytest.raises(zoo.SpecError, match="exactly one"):
        tokenizer("hf")
    with pytest.raises(zoo.TokenizerError, match="no_such"):
        tokenizer("hf", path="/no_such/tokenizer.json")


@pytest.mark.parametrize("kind", ["char", "byte", "hf"])
def test_saved_with_checkpoint(kind, tmp_path, hf_file):
    params = {"char": {"text": ZH}, "byte": {}, "hf": {"path": str(hf_file)}}[kind]
    tok = tokenizer(kind, **params)
    model = zoo.build("gpt_tiny", num_layers=1, vocab_size=512, seed=0)
    path = zoo.save(model, tmp_path / "ck", tokenizer=tok)
    meta = zoo.read_metadata(path)
    stored = json.loads(meta["zoo.tokenizer"])
    assert stored["kind"] == kind
    loaded = zoo.load(tmp_path / "ck")
    assert loaded.tokenizer.encode(ZH) == tok.encode(ZH)
    assert loaded.tokenizer.decode(loaded.tokenizer.encode(ZH)) == ZH  # exact, Chinese included
    # saving the loaded model keeps its tokenizer without passing it again
    zoo.save(loaded, tmp_path / "again.safetensors")
    assert zoo.load(tmp_path / "again.safetensors").tokenizer.decode(tok.encode(ZH)) == ZH


def test_checkpoint_without_tokenizer_and_too_small_vocab(tmp_path):
    model = zoo.build("gpt_tiny", num_layers=1, vocab_size=100, seed=0)
    zoo.save(model, tmp_path / "plain.safetensors")
    assert getattr(zoo.load(tmp_path / "plain.safetensors"), "tokenizer", None) is None
    with pytest.raises(zoo.TokenizerError, match="vocab_size"):
        zoo.save(model, tmp_path / "bad.safetensors", tokenizer=tokenizer("byte"))
    assert not (tmp_path / "bad.safetensors").exists()


def test_registry_and_errors():
    assert {"char", "byte", "hf"} <= set(zoo.get_registry().names("tokenizer"))
    with pytest.raises(zoo.UnknownComponentError, match="did you mean 'byte'"):
        tokenizer("bytes")
    with pytest.raises(zoo.SpecError, match="unknown parameter"):
        tokenizer("char", corpus="x")
    with pytest.raises(zoo.TokenizerError):
        from_json('{"no": "kind"}')
    stored = json.loads(to_json(tokenizer("byte")))
    assert stored["plugin"] == "zoo.tok_byte"
    with pytest.raises(zoo.TokenizerError, match="plugin zoo_sentencepiece 1.2"):
        from_json({"kind": "sentencepiece", "plugin": "zoo_sentencepiece", "version": "1.2", "data": {}})
    assert split_specials("a<mask>b<m", ["<mask>", "<m"]) == ["a", "<mask>", "b", "<m"]


def test_tokenizer_feeds_model():
    tok = tokenizer("char", text=ZH)
    model = zoo.build("gpt_tiny", num_layers=1, vocab_size=tok.vocab_size, seed=0)
    ids = torch.tensor([tok.encode(ZH)])
    assert model(ids).shape == (1, len(ZH), tok.vocab_size)

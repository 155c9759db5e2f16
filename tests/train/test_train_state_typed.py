"""Issue 22, goal 2: the trainer state and the training options are read by type.

A trainer state edited by hand or by another program (``zoo.trainer`` missing, not JSON, a list;
``config`` missing or a list; the optimizer's groups emptied; moments of the wrong shape) and resume
options of the wrong type or range (``beta1=nan``, ``beta2=2.0``, ``seed=2**70``, ``lr="1e-3"``)
are each a ``ZooError`` naming where and how to fix it, raised before any work: the run's files are
byte-identical afterwards."""
from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

import zoo
from zoo.train import STATE_FILE, TrainConfig, train

TEXT = "春眠不觉晓，处处闻啼鸟。\n\n夜来风雨声，花落知多少。\n" * 4
SPEC = dict(name="t", arch="decoder", vocab_size=64, max_len=32, d_model=32, num_layers=1,
            num_heads=2, d_ff=64, dropout=0.0)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("typed")
    (root / "d.txt").write_text(TEXT, encoding="utf-8")
    train(SPEC, root / "d.txt", out=root / "o", steps=2, batch_size=4, block_size=8,
          progress=False, holdout=0.2, eval_every=100, save_every=100)
    return root / "o"


def _digests(out: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())}


def _edited(run: Path, tmp_path: Path, change) -> Path:
    """A copy of the run whose trainer state has ``change(meta, tensors)`` applied."""
    out = tmp_path / "copy"
    out.mkdir()
    for p in run.iterdir():
        if p.is_file():
            (out / p.name).write_bytes(p.read_bytes())
    with safe_open(str(run / STATE_FILE), framework="pt") as f:
        meta = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    change(meta, tensors)
    save_file(tensors, str(out / STATE_FILE), metadata=meta)
    return out


def _trainer(edit):
    def change(meta, tensors):
        t = json.loads(meta["zoo.trainer"])
        edit(t)
        meta["zoo.trainer"] = json.dumps(t)
    return change


def _optimizer(edit):
    def change(meta, tensors):
        o = json.loads(meta["zoo.optimizer"])
        edit(o)
        meta["zoo.optimizer"] = json.dumps(o)
    return change


def _shrink_moment(meta, tensors):
    name = next(k for k in sorted(tensors) if k.endswith(".exp_avg"))
    tensors[name] = tensors[name].flatten()[:3].clone()


STATES = {
    "zoo.trainer missing": lambda m, t: m.pop("zoo.trainer"),
    "zoo.trainer not JSON": lambda m, t: m.update({"zoo.trainer": "{nope"}),
    "zoo.trainer a list": lambda m, t: m.update({"zoo.trainer": "[1, 2]"}),
    "zoo.trainer deep JSON": lambda m, t: m.update({"zoo.trainer": "[" * 100000 + "]" * 100000}),
    "config missing": _trainer(lambda t: t.pop("config")),
    "config a list": _trainer(lambda t: t.update(config=[1, 2])),
    "config lr a string": _trainer(lambda t: t["config"].update(lr="1e-3")),
    "config warmup nan": _trainer(lambda t: t["config"].update(warmup=math.nan)),
    "step a string": _trainer(lambda t: t.update(step="2")),
    "step negative": _trainer(lambda t: t.update(step=-1)),
    "spec a number": _trainer(lambda t: t.update(spec=5)),
    "spec invalid": _trainer(lambda t: t.update(spec="arch: [")),
    "data missing": _trainer(lambda t: t.pop("data")),
    "data path a list": _trainer(lambda t: t["data"].update(data=[1])),
    "tokenizer a list": _trainer(lambda t: t.update(tokenizer=[1])),
    "tokenizer garbage": _trainer(lambda t: t.update(tokenizer="{nope")),
    "tokens_seen a float": _trainer(lambda t: t.update(tokens_seen=1.5)),
    "best a list": _trainer(lambda t: t.update(best=[1])),
    "elapsed_s negative": _trainer(lambda t: t.update(elapsed_s=-5)),
    "optimizer missing": lambda m, t: m.pop("zoo.optimizer"),
    "optimizer not JSON": lambda m, t: m.update({"zoo.optimizer": "nope"}),
    "optimizer groups emptied": _optimizer(lambda o: o.update(param_groups=[])),
    "optimizer group params emptied": _optimizer(lambda o: o["param_groups"][0].update(params=[])),
    "optimizer groups a dict": _optimizer(lambda o: o.update(param_groups={})),
    "optimizer param id a string": _optimizer(
        lambda o: o["param_groups"][0]["params"].__setitem__(0, "x")),
    "optimizer moment of the wrong shape": _shrink_moment,
    "optimizer tensor name odd": lambda m, t: t.update({"optim.x": torch.zeros(1)}),
    "model tensor of the wrong shape": lambda m, t: t.update(
        {"model.tok_emb.weight": torch.zeros(3, 3)}),
    "tied a list": lambda m, t: m.update({"zoo.tied": "[1]"}),
}


@pytest.mark.parametrize("label", sorted(STATES))
def test_a_damaged_trainer_state_is_a_zoo_error_before_any_work(run, tmp_path, label):
    out = _edited(run, tmp_path, STATES[label])
    before = _digests(out)
    with pytest.raises(zoo.ZooError) as info:
        train(None, None, out=out, resume=True, steps=4, progress=False)
    assert info.value.where and info.value.fix, str(info.value)
    assert len(str(info.value)) < 1500
    assert _digests(out) == before


OPTIONS = [("beta1", math.nan), ("beta2", 2.0), ("beta2", 1.0), ("seed", 2 ** 70), ("seed", -1),
           ("lr", "1e-3"), ("lr", math.inf), ("lr", -1e-3), ("lr", 0), ("lr", 1e30), ("steps", True),
           ("steps", 2.5), ("steps", 2 ** 40), ("grad_clip", -1.0), ("grad_clip", math.nan),
           ("holdout", 1.0), ("mask_prob", math.nan), ("tokenizer", 5), ("batch_size", 0),
           ("warmup", -1), ("warmup", 1.5), ("progress", "yes"), ("block_size", 1),
           ("objective", 5), ("window_starts", 5), ("weight_decay", math.inf),
           ("min_lr_ratio", 2), ("eval_batches", None), ("bf16", 1), ("exact_match_samples", -1),
           ("mask_token_frac", -0.1), ("keep_best", "no")]


@pytest.mark.parametrize("name, value", OPTIONS, ids=[f"{n}={v!r}" for n, v in OPTIONS])
def test_a_bad_resume_option_is_a_zoo_error_naming_it_before_any_work(run, name, value):
    before = _digests(run)
    with pytest.raises(zoo.ZooError) as info:
        train(None, None, out=run, resume=True, **{"progress": False, name: value})
    assert info.value.where == f"train.{name}", str(info.value)
    assert info.value.fix
    assert _digests(run) == before


@pytest.mark.parametrize("kw", [dict(out=None), dict(out="a\x00b"), dict(resume="yes"),
                                dict(overwrite=1), dict(fit_vocab=None), dict(config={"lr": 1}),
                                dict(callback=5), dict(data=5), dict(data="x\x00y")])
def test_train_s_own_arguments_are_checked(tmp_path, kw):
    args = dict(out=tmp_path / "o", steps=2, progress=False)
    args.update(kw)
    data = args.pop("data", tmp_path / "none.txt")
    with pytest.raises(zoo.ZooError, match="train\\."):
        train(SPEC, data, **args)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("make", ["fifo", "folder", "device"])
def test_data_that_is_not_a_regular_file_is_refused_at_once(tmp_path, make):
    import os

    p = {"fifo": tmp_path / "fifo", "folder": tmp_path, "device": Path("/dev/zero")}[make]
    if make == "fifo":
        os.mkfifo(p)
    with pytest.raises(zoo.DataError, match="not a regular file"):
        train(SPEC, p, out=tmp_path / "o", steps=2, progress=False)


def test_the_defaults_and_edges_are_valid():
    TrainConfig().validate()
    TrainConfig(beta1=0.0, beta2=0.0, grad_clip=0.0, holdout=0.0, warmup=0, seed=2 ** 32 - 1,
                lr=10.0, min_lr_ratio=1, mask_token_frac=1.0, weight_decay=0).validate()

"""State and resume: everything a killed run needs to continue exactly, in safetensors (no pickle).

``out/`` holds a normal zoo checkpoint (``model.safetensors`` + ``spec.yaml``, with the tokenizer)
and the trainer state: ``trainer_state.safetensors`` (weights as ``model.*``, AdamW moments as
``optim.{param}.{key}``; step, config, schedule, tokenizer and data fingerprint in its header) with a
readable copy of the header in ``trainer_state.json``.  Each file is written atomically, and the state
file alone is enough to resume, so a kill at any moment loses at most the steps since the last save.
(The JSON copy is written after the state file: a kill between the two leaves it one save behind.)
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .. import __version__
from ..build import build
from ..errors import CheckpointError
from ..io import atomic_write, dedupe, save
from ..tokenizers import to_json as tok_json
from .optim import lr_at

STATE_FILE = "trainer_state.safetensors"
STATE_JSON = "trainer_state.json"


def optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Split ``opt.state_dict()`` into flat tensors (``optim.{param}.{key}``) and a JSON part."""
    sd = opt.state_dict()
    tensors = {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            t = v if isinstance(v, torch.Tensor) else torch.tensor(v)
            tensors[f"optim.{pid}.{k}"] = t.detach().cpu().contiguous()
    return tensors, {"param_groups": sd["param_groups"]}


def load_optimizer_tensors(opt: torch.optim.Optimizer, tensors: dict, meta: dict) -> None:
    """The inverse of :func:`optimizer_tensors`."""
    state: dict[int, dict] = {}
    for name, t in tensors.items():
        if not name.startswith("optim."):
            continue
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = t
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def save_state(out: Path, model, opt, tok, cfg, spec, info, step, elapsed, tokens_seen, last,
               best=None) -> None:
    """Write the zoo checkpoint and the resumable trainer state (each file atomically; the state
    file alone is enough to resume, so a kill between the two writes loses nothing)."""
    meta = {"step": step, "config": cfg.to_dict(), "spec": spec.to_yaml(), "tokenizer": tok_json(tok),
            "data": info, "elapsed_s": elapsed, "tokens_seen": tokens_seen,
            "lr": lr_at(max(0, step - 1), cfg), "zoo_version": __version__, "last_metrics": last,
            "best": best}
    save(model, out, tokenizer=tok, metadata={"train": {"step": step, "objective": cfg.objective,
                                                        "data": info.get("data"), "metrics": last}})
    weights, tied = dedupe(model.state_dict())
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in weights.items()}
    otensors, ojson = optimizer_tensors(opt)
    tensors.update(otensors)
    header = {"zoo.trainer": json.dumps(meta, ensure_ascii=False), "zoo.tied": json.dumps(tied),
              "zoo.optimizer": json.dumps(ojson)}
    atomic_write(out / STATE_FILE, lambda tmp: save_file(tensors, tmp, metadata=header))
    text = json.dumps({k: v for k, v in meta.items() if k != "tokenizer"}, ensure_ascii=False, indent=1)
    atomic_write(out / STATE_JSON, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def read_state(out: str | os.PathLike) -> tuple[dict, dict, dict]:
    """``(trainer metadata, tensors, optimizer json)`` from ``out/trainer_state.safetensors``."""
    file = Path(out) / STATE_FILE
    if not file.is_file():
        raise CheckpointError("no trainer state to resume from", where=str(file),
                              fix="start the run without resume, or point out= at a run's folder")
    try:
        with safe_open(str(file), framework="pt") as f:
            meta = dict(f.metadata() or {})
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"corrupt trainer state: {exc}", where=str(file),
                              fix="resume from an earlier copy or start over") from exc
    return json.loads(meta["zoo.trainer"]), tensors, {**json.loads(meta["zoo.optimizer"]),
                                                      "tied": json.loads(meta.get("zoo.tied", "{}"))}


def saved_run_step(out: Path):
    """The step of the run saved in ``out``, ``"?"`` if its JSON is missing, None if there is no run."""
    if not (out / STATE_FILE).is_file():
        return None
    meta = json.loads((out / STATE_JSON).read_text()) if (out / STATE_JSON).is_file() else {}
    return meta.get("step", "?")


def model_from_state(spec, tensors: dict, ojson: dict, where: str):
    """Rebuild the model from the trainer state's ``model.*`` tensors (built on the meta device,
    so no random init is wasted), re-tying shared weights."""
    net = build(spec, device="meta").to_empty(device="cpu")
    sd = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    net.load_state_dict(sd, strict=False)
    missing = set(net.state_dict()) - set(sd) - set(ojson["tied"])
    if missing:
        raise CheckpointError(f"trainer state lacks tensors {sorted(missing)[:5]}", where=where)
    net.tie_weights()
    net.reset_buffers()
    return net

"""Exact conversion of Hugging Face ``transformers`` checkpoints into zoo models.

    import zoo.convert
    model = zoo.convert.from_transformers(hf_model)           # a GPT2LMHeadModel, BertForMaskedLM, ...
    model = zoo.convert.from_pretrained("path/to/hf_dir")     # config.json + *.safetensors, offline
    zoo.save(model, "runs/gpt2")                              # or: zoo convert HF_DIR OUT_DIR
    hf_again = zoo.convert.to_transformers(model)             # and back (needs transformers)

Supported families (``config.model_type``): ``gpt2`` (GPT2LMHeadModel, GPT2Model), ``bert``
(BertModel, BertForMaskedLM, BertForPreTraining), ``llama`` (LlamaForCausalLM, LlamaModel) and ``t5``
(T5ForConditionalGeneration, T5Model, T5EncoderModel).  The zoo model computes the same function as
the source: the test suite checks logits / hidden states to 1e-4 in float32 on padded batches.

How it works: each family maps its config to a zoo spec (every config value that changes the
function is either mapped or refused with a :class:`ConvertError` naming the field) and its tensors
to zoo's names (separate q/k/v matrices are concatenated into zoo's fused ``qkv``; GPT-2's ``Conv1D``
weights are transposed).  A tensor the converter does not recognise is an error, never silently
ignored; tensors that do not affect the outputs (BERT's pooler, the NSP head) are dropped and listed
in ``model.convert_info["dropped"]``.

Differences worth knowing:

- zoo derives positions from the attention mask (each row's first real token sits at 0), which is
  what Hugging Face computes only when you pass ``position_ids``; with right padding or none they agree.
- a converted BERT keeps ``pad_id`` (padding is masked even without an ``attention_mask``); GPT-2,
  Llama and T5 do not (T5's decoder *starts* with the pad token).
- a base model without an LM head (GPT2Model, LlamaModel, T5Model) gets one tied to its embeddings.
- pickle checkpoints (``pytorch_model.bin``) are never loaded; re-save with ``safe_serialization``.

``transformers`` is not needed to convert a directory; :func:`from_transformers` touches a
transformers model without importing the library; only :func:`to_transformers` imports it.  The
reverse mapping is not a second table: it replays the forward mapping on names and shapes.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from .errors import ZooError

__all__ = ["ConvertError", "from_transformers", "from_pretrained", "to_transformers", "convert_state",
           "FAMILIES"]

_ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
         "relu": "relu", "silu": "silu", "swish": "silu"}


class ConvertError(ZooError):
    """A source checkpoint cannot be converted exactly (an unsupported config value or tensor)."""


class _Source:
    """A Hugging Face checkpoint as plain data: its config dict and its tensors by name.

    ``take(name)`` hands a tensor out once and remembers it, so whatever is left over at the end is
    either dropped on purpose or reported."""

    def __init__(self, config: Mapping[str, Any], state: Mapping[str, torch.Tensor], family: str):
        self.config, self.state, self.family = dict(config), dict(state), family
        self.used: set[str] = set()
        self.dropped: list[str] = []

    def get(self, key: str, default: Any = None) -> Any:
        v = self.config.get(key, default)
        return default if v is None else v

    def has(self, name: str) -> bool:
        return name in self.state

    def take(self, name: str) -> torch.Tensor:
        if name not in self.state:
            raise ConvertError(f"the {self.family} checkpoint has no tensor '{name}'", where="weights",
                               fix="check that the weights belong to this config.json")
        self.used.add(name)
        return self.state[name]

    def take_t(self, name: str) -> torch.Tensor:
        return self.take(name).t()

    def cat(self, *names: str) -> torch.Tensor:
        return torch.cat([self.take(n) for n in names], dim=0)  # stacked output rows: fused q|k|v

    def drop(self, prefix: str) -> None:
        for n in self.state:
            if n.startswith(prefix) and n not in self.used:
                self.used.add(n)
                self.dropped.append(n)

    def ignore(self, name: str) -> None:
        """A tensor that carries nothing of its own (a tied alias, a constant buffer)."""
        if name in self.state:
            self.used.add(name)

    def refuse(self, key: str, value: Any, why: str, fix: str, options=None) -> None:
        raise ConvertError(f"{self.family} config {key}={value!r} is not supported: {why}",
                           where=f"config.{key}", options=options, fix=fix)

    def act(self, key: str, allowed=tuple(_ACTS)) -> str:
        v = self.get(key)
        if v not in allowed:
            self.refuse(key, v, "zoo has no exact equivalent of this activation", options=allowed,
                        fix="convert a model using one of the listed activations")
        return _ACTS[v]

    def expect(self, key: str, ok: Callable[[Any], bool], why: str, fix: str) -> None:
        v = self.config.get(key)
        if v is not None and not ok(v):
            self.refuse(key, v, why, fix)

    def prefix(self, *candidates: str) -> str:
        """The name prefix of the base model inside a head model (``transformer.``, ``bert.``...)."""
        for p in candidates:
            if any(k.startswith(p) for k in self.state):
                return p
        return ""

    def tied(self, head: str, embedding: torch.Tensor) -> bool:
        """Whether the output projection ``head`` is (absent or) equal to the embedding matrix."""
        if head not in self.state:
            return True
        w = self.state[head]
        if w.is_meta or embedding.is_meta:  # a model without values (device="meta"): trust the config
            same = self.config.get("tie_word_embeddings", True) is not False
        else:
            same = w is embedding or (w.shape == embedding.shape and bool(torch.equal(w, embedding)))
        if same:
            self.ignore(head)
        return same


# ---------------------------------------------------------------------- families
def _gpt2(src: _Source, attention: str):
    c = src.get
    src.expect("scale_attn_by_inverse_layer_idx", lambda v: not v,
               "zoo scales every layer's scores alike",
               "zoo cannot reproduce this checkpoint exactly; convert one trained without it")
    src.expect("add_cross_attention", lambda v: not v, "decoder-only GPT-2 has no cross-attention",
               "convert a plain GPT-2")
    act = src.act("activation_function")
    p = src.prefix("transformer.")
    L, D = c("n_layer"), c("n_embd")
    spec = dict(name="gpt2", arch="decoder", vocab_size=c("vocab_size"), max_len=c("n_positions"),
                d_model=D, num_layers=L, num_heads=c("n_head"), d_ff=c("n_inner") or 4 * D,
                dropout=float(c("resid_pdrop", 0.0)), tie_embeddings=True, scale_embeddings=False,
                attn_scale=None if c("scale_attn_weights", True) else 1.0,
                attention=attention, mask="causal", positions="learned",
                norm={"kind": "layernorm", "eps": c("layer_norm_epsilon", 1e-5), "placement": "pre"},
                ffn={"kind": "mlp", "activation": act, "bias": True})
    wte = src.take(f"{p}wte.weight")
    st = {"tok_emb.weight": wte, "decoder.positions.table.weight": src.take(f"{p}wpe.weight")}
    for i in range(L):
        h, z = f"{p}h.{i}.", f"decoder.blocks.{i}."
        for hf, zn in (("ln_1", "attn_res.norm"), ("ln_2", "ffn_res.norm")):
            st[f"{z}{zn}.weight"], st[f"{z}{zn}.bias"] = src.take(f"{h}{hf}.weight"), src.take(f"{h}{hf}.bias")
        for hf, zn in (("attn.c_attn", "attn.qkv"), ("attn.c_proj", "attn.out"), ("mlp.c_fc", "ffn.up"),
                       ("mlp.c_proj", "ffn.down")):
            # GPT-2's Conv1D stores its weights as (in, out): transposed
            st[f"{z}{zn}.weight"], st[f"{z}{zn}.bias"] = src.take_t(f"{h}{hf}.weight"), src.take(f"{h}{hf}.bias")
        for buf in ("attn.bias", "attn.masked_bias"):  # causal-mask buffers of older versions
            src.ignore(f"{h}{buf}")
    st["decoder.final_norm.weight"], st["decoder.final_norm.bias"] = src.take(f"{p}ln_f.weight"), src.take(f"{p}ln_f.bias")
    if not src.tied("lm_head.weight", wte):
        spec["tie_embeddings"], st["lm_head.weight"] = False, src.take("lm_head.weight")
    return spec, st


def _bert(src: _Source, attention: str):
    c = src.get
    src.expect("position_embedding_type", lambda v: v == "absolute",
               "zoo has no relative_key / relative_key_query positions", "use absolute positions")
    for key in ("is_decoder", "add_cross_attention"):
        src.expect(key, lambda v: not v, "zoo converts BERT as an encoder", "set it to false")
    act = src.act("hidden_act")
    p = src.prefix("bert.")
    L, D = c("num_hidden_layers"), c("hidden_size")
    mlm = any(k.startswith("cls.predictions.") for k in src.state)
    if mlm and c("hidden_act") != "gelu":
        src.refuse("hidden_act", c("hidden_act"), "zoo's MLM head transform uses the exact GELU",
                   "convert the BertModel (hidden states) instead")
    spec = dict(name="bert", arch="encoder", vocab_size=c("vocab_size"),
                max_len=c("max_position_embeddings"), d_model=D, num_layers=L,
                num_heads=c("num_attention_heads"), d_ff=c("intermediate_size"),
                dropout=float(c("hidden_dropout_prob", 0.0)), pad_id=c("pad_token_id"),
                type_vocab_size=c("type_vocab_size", 0), scale_embeddings=False, embed_norm=True,
                tie_embeddings=True, attention=attention, mask="bidirectional", positions="learned",
                norm={"kind": "layernorm", "eps": c("layer_norm_eps", 1e-12), "placement": "post"},
                ffn={"kind": "mlp", "activation": act, "bias": True},
                head={"kind": "mlm", "transform": True} if mlm else {"kind": "none"})
    e = f"{p}embeddings."
    wte = src.take(f"{e}word_embeddings.weight")
    st = {"tok_emb.weight": wte, "encoder.positions.table.weight": src.take(f"{e}position_embeddings.weight"),
          "embed.norm.weight": src.take(f"{e}LayerNorm.weight"), "embed.norm.bias": src.take(f"{e}LayerNorm.bias")}
    if spec["type_vocab_size"]:
        st["embed.types.weight"] = src.take(f"{e}token_type_embeddings.weight")
    for buf in ("position_ids", "token_type_ids"):  # constant buffers
        src.ignore(f"{e}{buf}")
    pairs = (("attention.output.dense", "attn.out"), ("attention.output.LayerNorm", "attn_res.norm"),
             ("intermediate.dense", "ffn.up"), ("output.dense", "ffn.down"),
             ("output.LayerNorm", "ffn_res.norm"))
    for i in range(L):
        h, z = f"{p}encoder.layer.{i}.", f"encoder.blocks.{i}."
        a = f"{h}attention.self."
        st[f"{z}attn.qkv.weight"] = src.cat(f"{a}query.weight", f"{a}key.weight", f"{a}value.weight")
        st[f"{z}attn.qkv.bias"] = src.cat(f"{a}query.bias", f"{a}key.bias", f"{a}value.bias")
        for hf, zn in pairs:
            st[f"{z}{zn}.weight"], st[f"{z}{zn}.bias"] = src.take(f"{h}{hf}.weight"), src.take(f"{h}{hf}.bias")
    src.drop(f"{p}pooler.")  # not part of the MLM logits or the hidden states
    src.drop("cls.seq_relationship.")  # BertForPreTraining's next-sentence head
    if mlm:
        t = "cls.predictions.transform."
        st.update({"transform.0.weight": src.take(f"{t}dense.weight"), "transform.0.bias": src.take(f"{t}dense.bias"),
                   "transform.2.weight": src.take(f"{t}LayerNorm.weight"),
                   "transform.2.bias": src.take(f"{t}LayerNorm.bias")})
        bias = "cls.predictions.bias" if src.has("cls.predictions.bias") else "cls.predictions.decoder.bias"
        st["lm_head.bias"] = src.take(bias)
        src.ignore("cls.predictions.decoder.bias")
        if not src.tied("cls.predictions.decoder.weight", wte):
            spec["tie_embeddings"], st["lm_head.weight"] = False, src.take("cls.predictions.decoder.weight")
    return spec, st


def _rope(src: _Source) -> dict:
    """Llama's rotary settings (transformers 5 ``rope_parameters`` or 4.x ``rope_theta`` +
    ``rope_scaling``) as a zoo ``rope`` entry."""
    scaling, rp = src.get("rope_scaling") or {}, src.get("rope_parameters") or {}
    p = {**rp, **scaling}  # a legacy rope_scaling, when present, says what the model was trained with
    kind = p.get("rope_type") or p.get("type") or "default"
    where = "rope_scaling" if scaling else "rope_parameters.rope_type"
    out = {"kind": "rope", "base": float(p.get("rope_theta") or src.get("rope_theta", 10000.0))}
    if kind == "linear":
        out.update(scaling="linear", factor=float(p["factor"]))
    elif kind == "llama3":
        out.update(scaling="llama3", factor=float(p["factor"]), low_freq_factor=float(p["low_freq_factor"]),
                   high_freq_factor=float(p["high_freq_factor"]),
                   original_max_len=int(p.get("original_max_position_embeddings")
                                        or src.get("max_position_embeddings")))
    elif kind != "default":
        src.refuse(where, kind, "zoo's rope implements default, linear and llama3 frequencies only "
                   "(not yarn, dynamic, longrope)", options=["default", "linear", "llama3"],
                   fix="convert a model with one of the listed rope types")
    return out


def _llama(src: _Source, attention: str):
    c = src.get
    act = src.act("hidden_act")
    # partial_rotary_factor is ignored by transformers' Llama (it rotates whole heads), and so here
    p = src.prefix("model.")
    L, D, H = c("num_hidden_layers"), c("hidden_size"), c("num_attention_heads")
    hd = c("head_dim") or D // H
    bias, mlp_bias = bool(c("attention_bias", False)), bool(c("mlp_bias", False))
    spec = dict(name="llama", arch="decoder", vocab_size=c("vocab_size"),
                max_len=c("max_position_embeddings", 2048), d_model=D, num_layers=L, num_heads=H,
                num_kv_heads=c("num_key_value_heads") or H, head_dim=hd if hd * H != D else None,
                d_ff=c("intermediate_size"),
                dropout=float(c("attention_dropout", 0.0)), qkv_bias=bias, out_bias=bias,
                tie_embeddings=True, scale_embeddings=False, attention=attention, mask="causal",
                positions=_rope(src),
                norm={"kind": "rmsnorm", "eps": c("rms_norm_eps", 1e-6), "placement": "pre"},
                ffn={"kind": "swiglu", "activation": act, "bias": mlp_bias})
    wte = src.take(f"{p}embed_tokens.weight")
    st = {"tok_emb.weight": wte}
    for i in range(L):
        h, z = f"{p}layers.{i}.", f"decoder.blocks.{i}."
        a = f"{h}self_attn."
        st[f"{z}attn.qkv.weight"] = src.cat(f"{a}q_proj.weight", f"{a}k_proj.weight", f"{a}v_proj.weight")
        st[f"{z}attn.out.weight"] = src.take(f"{a}o_proj.weight")
        if bias:
            st[f"{z}attn.qkv.bias"] = src.cat(f"{a}q_proj.bias", f"{a}k_proj.bias", f"{a}v_proj.bias")
            st[f"{z}attn.out.bias"] = src.take(f"{a}o_proj.bias")
        src.ignore(f"{a}rotary_emb.inv_freq")
        st[f"{z}attn_res.norm.weight"] = src.take(f"{h}input_layernorm.weight")
        st[f"{z}ffn_res.norm.weight"] = src.take(f"{h}post_attention_layernorm.weight")
        for hf, zn in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
            st[f"{z}ffn.{zn}.weight"] = src.take(f"{h}mlp.{hf}.weight")
            if mlp_bias:
                st[f"{z}ffn.{zn}.bias"] = src.take(f"{h}mlp.{hf}.bias")
    src.ignore(f"{p}rotary_emb.inv_freq")
    st["decoder.final_norm.weight"] = src.take(f"{p}norm.weight")
    if not src.tied("lm_head.weight", wte):
        spec["tie_embeddings"], st["lm_head.weight"] = False, src.take("lm_head.weight")
    return spec, st


def _t5_ffn(src: _Source) -> dict:
    proj = src.get("feed_forward_proj", "relu")
    parts = proj.split("-")
    gated = parts[0] == "gated" and len(parts) == 2
    act = parts[-1]
    if proj == "gated-gelu":
        act = "gelu_new"  # transformers' historical alias: T5 v1.1's gated-gelu is the tanh GELU
    if act not in _ACTS or (len(parts) == 2 and not gated) or len(parts) > 2:
        src.refuse("feed_forward_proj", proj, "zoo has no exact equivalent",
                   options=["relu", "gelu", "gated-gelu", "gated-relu", "gated-silu"],
                   fix="convert a model with one of the listed feed-forward types")
    if not gated:
        return {"kind": "mlp", "activation": _ACTS[act], "bias": False}
    kind = {"silu": "swiglu", "relu": "reglu"}.get(_ACTS[act], "geglu")
    return {"kind": kind, "activation": _ACTS[act], "bias": False}


def _t5(src: _Source, attention: str):
    c = src.get
    encoder_only = not any(k.startswith("decoder.") for k in src.state)  # T5EncoderModel
    ffn = _t5_ffn(src)
    D, H, hd = c("d_model"), c("num_heads"), c("d_kv")
    Le, Ld = c("num_layers"), c("num_decoder_layers") or c("num_layers")
    scale = c("scale_decoder_outputs", c("tie_word_embeddings", True) is not False)
    spec = dict(name="t5", arch="encoder_decoder", vocab_size=c("vocab_size"),
                max_len=c("n_positions", 512), d_model=D, num_layers=Le, num_heads=H, head_dim=hd,
                d_ff=c("d_ff"), dropout=float(c("dropout_rate", 0.0)), attn_scale=1.0,
                qkv_bias=False, out_bias=False, tie_embeddings=True, scale_embeddings=False,
                head_scale=D ** -0.5 if scale else None, attention=attention,
                positions={"kind": "t5_relative", "num_buckets": c("relative_attention_num_buckets", 32),
                           "max_distance": c("relative_attention_max_distance", 128)},
                norm={"kind": "rmsnorm", "eps": c("layer_norm_epsilon", 1e-6), "placement": "pre"},
                ffn=ffn, decoder={"num_layers": Ld})
    if encoder_only:  # the encoder's hidden states (sentence embeddings, retrieval)
        del spec["decoder"], spec["head_scale"]
        spec.update(arch="encoder", head={"kind": "none"})
    wte = src.take("shared.weight")
    st = {"tok_emb.weight": wte}
    ff = {"mlp": (("wi", "up"), ("wo", "down"))}.get(ffn["kind"], (("wi_0", "gate"), ("wi_1", "up"), ("wo", "down")))
    for role, L in (("encoder", Le),) + ((("decoder", Ld),) if not encoder_only else ()):
        src.ignore(f"{role}.embed_tokens.weight")
        for i in range(L):
            h, z = f"{role}.block.{i}.layer.", f"{role}.blocks.{i}."
            a = f"{h}0.SelfAttention."
            st[f"{z}attn.qkv.weight"] = src.cat(f"{a}q.weight", f"{a}k.weight", f"{a}v.weight")
            st[f"{z}attn.out.weight"] = src.take(f"{a}o.weight")
            st[f"{z}attn_res.norm.weight"] = src.take(f"{h}0.layer_norm.weight")
            if i == 0:
                st[f"{role}.positions.bias.weight"] = src.take(f"{a}relative_attention_bias.weight")
            n = 1
            if role == "decoder":
                x = f"{h}1.EncDecAttention."
                st[f"{z}cross.q.weight"] = src.take(f"{x}q.weight")
                st[f"{z}cross.kv.weight"] = src.cat(f"{x}k.weight", f"{x}v.weight")
                st[f"{z}cross.out.weight"] = src.take(f"{x}o.weight")
                st[f"{z}cross_res.norm.weight"] = src.take(f"{h}1.layer_norm.weight")
                src.ignore(f"{x}relative_attention_bias.weight")  # never used by T5 either
                n = 2
            for hf, zn in ff:
                st[f"{z}ffn.{zn}.weight"] = src.take(f"{h}{n}.DenseReluDense.{hf}.weight")
            st[f"{z}ffn_res.norm.weight"] = src.take(f"{h}{n}.layer_norm.weight")
        st[f"{role}.final_norm.weight"] = src.take(f"{role}.final_layer_norm.weight")
    if not encoder_only and not src.tied("lm_head.weight", wte):
        spec["tie_embeddings"], st["lm_head.weight"] = False, src.take("lm_head.weight")
    return spec, st


#: ``config.model_type`` -> converter
FAMILIES: dict[str, Callable] = {"gpt2": _gpt2, "bert": _bert, "llama": _llama, "t5": _t5}


# ---------------------------------------------------------------------- front doors
def convert_state(config: Mapping[str, Any], state: Mapping[str, torch.Tensor], *,
                  attention: str = "sdpa") -> tuple[dict, dict, list[str]]:
    """``(spec dict, zoo state dict, dropped tensor names)`` from a Hugging Face config dict and its
    tensors.  Raises :class:`ConvertError` for an unsupported family, config value or tensor."""
    family = config.get("model_type")
    if family not in FAMILIES:
        raise ConvertError(f"model_type {family!r} cannot be converted", where="config.model_type",
                           options=list(FAMILIES), fix="convert one of the supported families")
    src = _Source(config, state, family)
    spec, st = FAMILIES[family](src, attention)
    left = sorted(set(src.state) - src.used)
    if left:
        raise ConvertError(f"tensors zoo does not know how to map: {left[:8]}{' ...' if len(left) > 8 else ''}",
                           where="weights", fix=f"this {family} variant has parts zoo lacks; "
                                                "it cannot be converted exactly")
    return spec, st, src.dropped


def _assemble(spec_dict: dict, state: dict, dtype=None) -> torch.nn.Module:
    """Build the zoo model on the meta device, then load ``state`` strictly (no random init)."""
    from .build import build
    from .io import _dedupe
    from .spec import parse_spec

    spec = parse_spec(spec_dict)
    model = build(spec, device="meta", init=False).to_empty(device="cpu")
    model.tie_weights()
    expected = model.state_dict()
    _, tied = _dedupe(expected)
    need = set(expected) - set(tied)
    missing, extra = sorted(need - set(state)), sorted(set(state) - need)
    if missing or extra:
        raise ConvertError(f"converted tensors do not match the spec: missing {missing[:6]}, "
                           f"unexpected {extra[:6]}", where="weights",
                           fix="report this: the converter and the engine disagree")
    dt = dtype or state["tok_emb.weight"].dtype
    for name in sorted(need):
        if tuple(state[name].shape) != tuple(expected[name].shape):
            raise ConvertError(f"tensor '{name}' has shape {tuple(state[name].shape)}, the spec needs "
                               f"{tuple(expected[name].shape)}", where="weights",
                               fix="check that config.json belongs to these weights")
    # contiguous copies: a transposed view (GPT-2's Conv1D weights) would make every matmul slower
    model.load_state_dict({k: state[k].detach().to(dt).clone(memory_format=torch.contiguous_format)
                           for k in need}, strict=False, assign=True)
    model.tie_weights()
    model.reset_buffers()
    return model.to(device=state["tok_emb.weight"].device, dtype=dt).eval()  # buffers follow the weights


def from_transformers(hf_model: Any, *, attention: str = "sdpa", dtype: Any = None) -> torch.nn.Module:
    """An equivalent zoo model (spec + weights) of a ``transformers`` model object.

    ``attention`` picks the zoo kernel (``sdpa``, ``eager``, ...); ``dtype`` converts the weights
    (default: keep the source's).  The model comes back in eval mode with ``model.convert_info``.
    """
    from .build import resolve_dtype

    config = getattr(hf_model, "config", None)
    if config is None or not hasattr(hf_model, "state_dict"):
        raise ConvertError(f"expected a transformers model, got {type(hf_model).__name__}",
                           where="hf_model", fix="pass e.g. a GPT2LMHeadModel, or use from_pretrained(dir)")
    cfg = config.to_dict()
    spec, st, dropped = convert_state(cfg, hf_model.state_dict(), attention=attention)
    model = _assemble(spec, st, resolve_dtype(dtype))
    model.convert_info = {"source": type(hf_model).__name__, "model_type": cfg["model_type"],
                          "dropped": dropped}
    return model


def read_hf_dir(path: str | os.PathLike) -> tuple[dict, dict[str, torch.Tensor]]:
    """``(config dict, tensors)`` of a ``save_pretrained`` folder (safetensors, single or sharded)."""
    from safetensors.torch import load_file

    d = Path(path)
    if not (d / "config.json").is_file():
        raise ConvertError(f"no config.json in '{d}'", where=str(d),
                           fix="pass a folder written by save_pretrained")
    config = json.loads((d / "config.json").read_text(encoding="utf-8"))
    index = d / "model.safetensors.index.json"
    if (d / "model.safetensors").is_file():
        files = [d / "model.safetensors"]
    elif index.is_file():
        files = sorted({d / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        pickled = [p.name for p in d.glob("*.bin")]
        raise ConvertError(f"no safetensors weights in '{d}'" + (f" (found {pickled})" if pickled else ""),
                           where=str(d), fix="zoo never loads pickle: re-save the model with "
                                             "save_pretrained(..., safe_serialization=True)")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    return config, state


def from_pretrained(path: str | os.PathLike, *, attention: str = "sdpa", dtype: Any = None,
                    tokenizer: bool = True) -> torch.nn.Module:
    """Convert a local ``save_pretrained`` folder (config.json + safetensors) without transformers.

    A ``tokenizer.json`` in the folder becomes ``model.tokenizer`` (the ``hf`` tokenizer), so
    ``zoo.save`` stores it inside the checkpoint."""
    from .build import resolve_dtype

    config, state = read_hf_dir(path)
    spec, st, dropped = convert_state(config, state, attention=attention)
    model = _assemble(spec, st, resolve_dtype(dtype))
    model.convert_info = {"source": str(path), "model_type": config.get("model_type"),
                          "architectures": config.get("architectures"), "dropped": dropped}
    tj = Path(path) / "tokenizer.json"
    if tokenizer and tj.is_file():
        from .tokenizers import tokenizer as make_tokenizer

        model.tokenizer = make_tokenizer("hf", path=str(tj))
    return model


# ---------------------------------------------------------------------- the reverse direction
class _Ref:
    """Where one zoo tensor lives in a Hugging Face checkpoint: one or more (row-stacked) tensors,
    possibly transposed."""

    def __init__(self, names: list[str], transpose: bool = False):
        self.names, self.transpose = names, transpose


class _Recorder(_Source):
    """Runs a family's forward mapping on names and shapes only, recording where each zoo tensor
    comes from, so the reverse mapping is derived from the same code (never a second table)."""

    def __init__(self, config, state, family, tie: bool):
        super().__init__(config, state, family)
        self.tie = tie

    def take(self, name):
        super().take(name)
        return _Ref([name])

    def take_t(self, name):
        super().take(name)
        return _Ref([name], transpose=True)

    def cat(self, *names):
        for n in names:
            super().take(n)
        return _Ref(list(names))

    def tied(self, head, embedding):
        if head not in self.state:
            return True
        if self.tie:
            self.ignore(head)
        return self.tie


_INV_ACTS = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}


def _hf_config(spec, family: str) -> tuple[str, str, dict]:
    """``(config class, model class, config kwargs)`` of the transformers model that ``spec`` is."""
    st = spec.stack(spec.roles[-1])
    drop, eps = spec.dropout, st.norm.config.eps
    act = _INV_ACTS.get(getattr(st.ffn.config, "activation", None), "?")
    if family == "gpt2":
        return "GPT2Config", "GPT2LMHeadModel", dict(
            vocab_size=spec.vocab_size, n_positions=spec.max_len, n_embd=spec.d_model,
            n_layer=st.num_layers, n_head=st.num_heads, n_inner=st.d_ff, activation_function=act,
            layer_norm_epsilon=eps, resid_pdrop=drop, embd_pdrop=drop, attn_pdrop=drop,
            scale_attn_weights=spec.attn_scale is None, tie_word_embeddings=spec.tie_embeddings)
    if family == "bert":
        model = "BertForMaskedLM" if spec.head.kind == "mlm" else "BertModel"
        return "BertConfig", model, dict(
            vocab_size=spec.vocab_size, hidden_size=spec.d_model, num_hidden_layers=st.num_layers,
            num_attention_heads=st.num_heads, intermediate_size=st.d_ff, hidden_act=act,
            max_position_embeddings=spec.max_len, type_vocab_size=spec.type_vocab_size,
            layer_norm_eps=eps, hidden_dropout_prob=drop, attention_probs_dropout_prob=drop,
            pad_token_id=spec.pad_id if spec.pad_id is not None else 0,
            tie_word_embeddings=spec.tie_embeddings)
    if family == "llama":
        return "LlamaConfig", "LlamaForCausalLM", dict(
            vocab_size=spec.vocab_size, hidden_size=spec.d_model, intermediate_size=st.d_ff,
            num_hidden_layers=st.num_layers, num_attention_heads=st.num_heads,
            num_key_value_heads=st.num_kv_heads, head_dim=st.head_dim, hidden_act=act,
            max_position_embeddings=spec.max_len, rms_norm_eps=eps, attention_bias=st.qkv_bias,
            mlp_bias=st.ffn.config.bias, attention_dropout=drop, tie_word_embeddings=spec.tie_embeddings,
            rope_parameters=_hf_rope(st.positions.config))
    enc = spec.stack("encoder")
    gated = {"mlp": "", "geglu": "gated-", "reglu": "gated-", "swiglu": "gated-"}.get(st.ffn.kind, "?-")
    ff = f"{gated}{'gelu' if act == 'gelu_new' and gated else act}"
    return "T5Config", "T5ForConditionalGeneration", dict(
        vocab_size=spec.vocab_size, d_model=spec.d_model, d_kv=st.head_dim, d_ff=st.d_ff,
        num_layers=enc.num_layers, num_decoder_layers=st.num_layers, num_heads=st.num_heads,
        relative_attention_num_buckets=st.positions.config.num_buckets,
        relative_attention_max_distance=st.positions.config.max_distance, dropout_rate=drop,
        layer_norm_epsilon=eps, feed_forward_proj=ff, tie_word_embeddings=spec.head_scale is not None)


def _hf_rope(rc) -> dict:
    out = {"rope_type": "default" if rc.scaling == "none" else rc.scaling, "rope_theta": rc.base}
    if rc.scaling != "none":
        out["factor"] = rc.factor
    if rc.scaling == "llama3":
        out.update(low_freq_factor=rc.low_freq_factor, high_freq_factor=rc.high_freq_factor,
                   original_max_position_embeddings=rc.original_max_len)
    return out


def _guess_family(spec) -> str:
    kind = spec.stack(spec.roles[-1]).positions.kind
    fam = {("decoder", "learned"): "gpt2", ("encoder", "learned"): "bert", ("decoder", "rope"): "llama",
           ("encoder_decoder", "t5_relative"): "t5"}.get((spec.arch, kind))
    if fam is None:
        raise ConvertError(f"a {spec.arch} model with '{kind}' positions is none of the families "
                           f"transformers can run", where="spec", options=list(FAMILIES),
                           fix="convert a GPT-2, BERT, Llama or T5 shaped model, or pass family=")
    return fam


def _comparable(spec) -> dict:
    d = spec.to_dict()
    for k in ("name", "attention", "pad_id", "dropout", "encoder", "decoder"):
        d.pop(k, None)
    for role in spec.roles:  # resolved per-stack values, not how they were written
        st = spec.stack(role)
        d[role] = (st.num_layers, st.num_heads, st.num_kv_heads, st.head_dim, st.d_ff, st.attn_scale,
                   str(st.positions), str(st.norm), str(st.placement), str(st.ffn), tuple(map(str, st.mask)))
    return d


def to_transformers(model: torch.nn.Module, *, family: str | None = None) -> Any:
    """The equivalent ``transformers`` model of a zoo model shaped like GPT-2, BERT, Llama or T5
    (needs the ``transformers`` library).  ``family`` is guessed from the spec when omitted.

    The reverse mapping is derived from the forward converter, and the result is checked by
    converting its config back: any spec field transformers cannot express is a
    :class:`ConvertError` naming it."""
    import transformers

    spec = model.spec
    family = family or _guess_family(spec)
    if family not in FAMILIES:
        raise ConvertError(f"unknown family {family!r}", where="family", options=list(FAMILIES))
    cfg_name, model_name, kwargs = _hf_config(spec, family)
    from .spec import parse_spec

    try:
        hf = getattr(transformers, model_name)(getattr(transformers, cfg_name)(**kwargs))
    except (ValueError, KeyError, TypeError) as exc:
        raise ConvertError(f"transformers cannot build {model_name} from this spec: {exc}",
                           where="spec", fix=f"convert a spec shaped like {family}") from exc
    rec = _Recorder(hf.config.to_dict(), hf.state_dict(), family, tie=spec.tie_embeddings)
    try:
        spec2, refs = FAMILIES[family](rec, "sdpa")
        spec2 = parse_spec(spec2)
    except ZooError as exc:
        raise ConvertError(f"the zoo model cannot be expressed as {model_name}: {exc.what}",
                           where=exc.where, fix="only models shaped like the family convert") from exc
    a, b = _comparable(spec), _comparable(spec2)
    diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if diff:
        raise ConvertError(f"spec field(s) {diff} have no equivalent in {model_name} "
                           f"(zoo: {[a.get(k) for k in diff]}, {family}: {[b.get(k) for k in diff]})",
                           where="spec", fix=f"convert a spec shaped like {family}")
    zs = model.state_dict()
    shapes = {n: t.shape for n, t in rec.state.items()}
    out = {}
    for zname, ref in refs.items():
        t = zs[zname].detach().cpu()
        if len(ref.names) == 1:
            out[ref.names[0]] = t.t().contiguous() if ref.transpose else t.clone()
        else:
            for n, part in zip(ref.names, t.split([shapes[n][0] for n in ref.names], dim=0)):
                out[n] = part.clone()
    if family == "t5" and not spec.tie_embeddings and hf.lm_head.weight is hf.shared.weight:
        hf.lm_head.weight = torch.nn.Parameter(out["lm_head.weight"])  # transformers 5 ties it always
    with torch.no_grad():
        hf.load_state_dict(out, strict=False)
    not_set = sorted(set(hf.state_dict()) - set(out) - rec.used)
    if not_set:
        raise ConvertError(f"transformers tensors left unset: {not_set[:6]}", where="weights",
                           fix="report this: the reverse mapping is incomplete")
    return hf.to(zs["tok_emb.weight"].dtype).eval()

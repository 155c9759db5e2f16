"""The Verify tab: the reference checks, as a pass / fail table with the measured errors.

Each registered attention kernel is built through the registry exactly as a model would build it and
run on the same random q, k, v under a set of masks; its output (and weights, where both sides return
them) is compared with the ``naive`` per-query loop and with
``torch.nn.functional.scaled_dot_product_attention`` (which takes the opposite boolean convention
only in ``nn.MultiheadAttention``; SDPA's boolean mask, like zoo's, is True = may attend).  Fully
masked query rows must give zeros (SDPA itself gives NaN there, so those rows are compared with zero
instead).  Then the mask rules are compared with their closed forms, and every position scheme with a
KV cache against the same model without one (the cache offset must not shift positions).

The full plugin conformance kit (``zoo.testing``: build, forward/backward, bf16, causality, padding,
KV cache, save/load per architecture) runs on demand for the selected components, its table
streaming in as each check finishes (it takes minutes for the whole registry on a CPU).
"""
from __future__ import annotations

import math
from typing import Any, Iterator

import torch
import torch.nn.functional as F

import zoo
from zoo.components import BuildContext, MaskContext
from zoo.layers import attend

from .common import handler
from .i18n import t

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


def _ctx(h=4, h_kv=4, hd=8, causal=False) -> BuildContext:
    return BuildContext.for_heads(h, hd, num_kv_heads=h_kv, causal=causal)


def _kernel(name: str, ctx: BuildContext):
    return zoo.get_registry().get("attention", name).make(ctx)


def _cases(B=2, T=7, gen=None):
    """(case name, mask (B|1, 1|h, Tq, Tk) bool or None, is_causal, h_kv)."""
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    pad = torch.ones(B, T, dtype=torch.bool)
    pad[0, -2:] = False  # row 0: last two keys are padding
    prefix = causal | (torch.arange(T)[None, :] < 3)
    i = torch.arange(T)
    window = (i[:, None] - i[None, :]).abs() < 3
    empty = causal.clone()[None, None].repeat(B, 1, 1, 1)
    empty[1, 0, 2] = False  # one fully masked query row
    return [
        ("no mask", None, False, 4),
        ("causal (fused flag)", None, True, 4),
        ("causal (boolean)", causal[None, None], False, 4),
        ("padding", pad[:, None, None, :], False, 4),
        ("causal & padding", causal[None, None] & pad[:, None, None, :], False, 4),
        ("prefix (3)", prefix[None, None], False, 4),
        ("sliding window (3)", window[None, None], False, 4),
        ("causal & sliding window", (causal & window)[None, None], False, 4),
        ("fully masked row", empty, False, 4),
        ("grouped-query (4 q / 2 kv heads), causal", causal[None, None], False, 2),
    ]


def _applicable(caps, case_name: str, mask, is_causal: bool) -> str | None:
    """Why a case does not apply to a kernel (None when it does)."""
    plain_causal = is_causal or case_name.startswith("causal (")
    if caps.causal_only and not plain_causal:
        return "causal-only kernel"
    if not caps.supports_mask and mask is not None and not case_name.startswith("causal (bool"):
        return "kernel takes no arbitrary masks"
    return None


def attention_checks(dtype=torch.float64, seed: int = 0) -> list[dict]:
    """Every attention kernel vs the naive loop and vs ``F.scaled_dot_product_attention``."""
    gen = torch.Generator().manual_seed(seed)
    B, T, h, hd = 2, 7, 4, 8
    rows = []
    reg = zoo.get_registry()
    for case, mask, is_causal, h_kv in _cases(B, T):
        q = torch.randn(B, h, T, hd, generator=gen, dtype=dtype)
        k = torch.randn(B, h_kv, T, hd, generator=gen, dtype=dtype)
        v = torch.randn(B, h_kv, T, hd, generator=gen, dtype=dtype)
        ctx = _ctx(h, h_kv, hd)
        with torch.no_grad():
            ref_out, ref_w = attend(_kernel("naive", ctx), q, k, v, mask=mask, is_causal=is_causal,
                                    need_weights=True)
            # SDPA reference: expand kv heads, True = may attend; empty rows compared with zero
            kk, vv = k.repeat_interleave(h // h_kv, 1), v.repeat_interleave(h // h_kv, 1)
            sdpa = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, is_causal=is_causal,
                                                  scale=ctx.scale)
            if mask is not None:
                empty = ~mask.any(-1, keepdim=True)  # (B|1, 1, T, 1)
                sdpa = torch.where(empty, torch.zeros_like(sdpa), sdpa)
        for comp in reg.list("attention"):
            caps = comp.capabilities
            why = _applicable(caps, case, mask, is_causal)
            base = {"check": "attention kernel", "subject": comp.name, "case": case}
            if why or not caps.exact:
                rows.append({**base, "reference": "naive loop / SDPA", "error": None, "tol": None,
                             "status": "skip", "note": why or "not exact by design"})
                continue
            try:
                with torch.no_grad():
                    out, w = attend(_kernel(comp.name, ctx), q, k, v, mask=mask, is_causal=is_causal,
                                    need_weights=caps.returns_weights)
            except Exception as exc:  # noqa: BLE001 - a failing kernel is a failed check, not a crash
                rows.append({**base, "reference": "naive loop", "error": None, "tol": TOL[dtype],
                             "status": "fail", "note": f"{type(exc).__name__}: {exc}"})
                continue
            tol = TOL.get(dtype, 1e-3)
            for ref_name, ref in (("naive loop", ref_out), ("F.scaled_dot_product_attention", sdpa)):
                err = _maxerr(out, ref)
                rows.append({**base, "reference": ref_name + " (output)", "error": err, "tol": tol,
                             "status": "pass" if err <= tol else "fail", "note": ""})
            if w is not None:
                err = _maxerr(w, ref_w)
                rows.append({**base, "reference": "naive loop (weights)", "error": err, "tol": tol,
                             "status": "pass" if err <= tol else "fail", "note": ""})
    return rows


def _maxerr(a: torch.Tensor, b: torch.Tensor) -> float:
    if a.shape != b.shape:
        return float("inf")
    if not torch.isfinite(a).all():
        return float("nan")
    return float((a.double() - b.double()).abs().max())


def mask_checks() -> list[dict]:
    """The built-in mask rules against their closed forms, at a query offset (KV cache) too."""
    reg = zoo.get_registry()
    ctx = _ctx(causal=True)
    rows = []
    T = 6
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    forms = {
        ("causal", None): j <= i,
        ("prefix", 2): (j <= i) | (j < 2),
        ("sliding_window", 3): (i - j).abs() < 3,
    }
    for (name, param), expected in forms.items():
        if name not in reg.names("mask"):
            continue
        comp = reg.get("mask", name)
        config = None
        if comp.config is not None:
            config = comp.config(**({"length": param} if name == "prefix" else
                                    {"window": param} if name == "sliding_window" else {}))
        rule = comp.cls(config, ctx)
        for offset in (0, 2):
            mctx = MaskContext(q_len=T - offset, k_len=T, device=torch.device("cpu"), q_offset=offset)
            got = rule(mctx)
            want = expected[offset:]
            bad = int((got.expand_as(want) != want).sum()) if got is not None else int((~want).sum())
            rows.append({"check": "mask rule", "subject": name + (f"({param})" if param else ""),
                         "case": f"query offset {offset}", "reference": "closed form",
                         "error": float(bad), "tol": 0.0, "status": "pass" if bad == 0 else "fail",
                         "note": "wrong entries"})
    return rows


def position_checks() -> list[dict]:
    """Each position scheme: a decoder's logits for the last token computed with a KV cache (one token
    at a time) equal those of one full forward; the cache offset must not shift positions."""
    reg = zoo.get_registry()
    rows = []
    ids = torch.randint(1, 64, (1, 9), generator=torch.Generator().manual_seed(1))
    for comp in reg.list("position"):
        try:
            model = zoo.build({"arch": "decoder", "vocab_size": 64, "max_len": 32, "d_model": 32,
                               "num_layers": 2, "num_heads": 4, "attention": "eager",
                               "positions": comp.name}, seed=0).double().eval()
            with torch.no_grad():
                full = model(ids)[:, -1]
                cache = model.new_cache()
                model(ids[:, :5], cache=cache)
                for step in range(5, ids.size(1)):
                    last = model(ids[:, step:step + 1], cache=cache)[:, -1]
            err = _maxerr(last, full)
            rows.append({"check": "positions under KV cache", "subject": comp.name,
                         "case": "5 cached + 4 single steps", "reference": "full forward",
                         "error": err, "tol": 1e-9, "status": "pass" if err <= 1e-9 else "fail",
                         "note": ""})
        except zoo.ZooError as exc:  # e.g. a scheme that needs another kernel: not applicable
            rows.append({"check": "positions under KV cache", "subject": comp.name, "case": "",
                         "reference": "full forward", "error": None, "tol": None, "status": "skip",
                         "note": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a crashing component is a failed check
            rows.append({"check": "positions under KV cache", "subject": comp.name, "case": "",
                         "reference": "full forward", "error": None, "tol": 1e-9, "status": "fail",
                         "note": f"{type(exc).__name__}: {exc}"})
    if "sinusoidal" in reg.names("position"):
        model = zoo.build({"arch": "decoder", "vocab_size": 16, "max_len": 20, "d_model": 8,
                           "num_layers": 1, "num_heads": 2, "positions": "sinusoidal"}, seed=0)
        pos = torch.arange(20)[None]
        got = model.decoder.positions.embed(torch.zeros(1, 20, 8), pos)[0].double()
        p = torch.arange(20, dtype=torch.float64)[:, None]
        i2 = torch.arange(0, 8, 2, dtype=torch.float64)
        want = torch.zeros(20, 8, dtype=torch.float64)
        want[:, 0::2] = torch.sin(p / 10000 ** (i2 / 8))
        want[:, 1::2] = torch.cos(p / 10000 ** (i2 / 8))
        err = _maxerr(got, want)
        rows.append({"check": "positional encoding", "subject": "sinusoidal",
                     "case": "PE(p, 2i) = sin(p / 10000^(2i/d))", "reference": "formula",
                     "error": err, "tol": 1e-6, "status": "pass" if err <= 1e-6 else "fail", "note": ""})
    return rows


def _kit_row(r: Any) -> dict:
    d = r.to_dict() if hasattr(r, "to_dict") else (r if isinstance(r, dict) else vars(r))
    return {"check": d.get("check", "conformance"), "subject": d.get("subject", ""),
            "case": d.get("case", ""), "reference": d.get("reference") or "zoo.testing",
            "error": d.get("error"), "tol": d.get("tol"), "status": str(d.get("status", "fail")),
            "note": d.get("note", "")}


def kit_available() -> bool:
    try:
        from zoo.testing import Kit  # noqa: F401
    except ImportError:
        return False
    return True


def kit_choices() -> list[str]:
    """``family:name`` of every registered component, for the conformance-kit selection."""
    return [f"{c.family}:{c.name}" for c in zoo.list_components()]


def run_all() -> list[dict]:
    """The fast reference checks (a few seconds)."""
    return attention_checks() + mask_checks() + position_checks()


def _fmt(x: Any) -> str:
    if x is None:
        return "—"
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return str(x)
    return f"{x:.2e}" if x else "0"


def table_rows(rows: list[dict], lang: str = "en") -> tuple[list[list], str]:
    label = {"pass": f"✓ {t('verify.pass', lang)}", "fail": f"✗ {t('verify.fail', lang)}",
             "skip": f"– {t('verify.skip', lang)}"}
    # the verdict first: it must be visible without scrolling a wide table
    table = [[label.get(r["status"], r["status"]), r["check"], r["subject"], r["case"], r["reference"],
              _fmt(r["error"]), _fmt(r["tol"]), r["note"] if r["status"] != "pass" else ""] for r in rows]
    counted = [r for r in rows if r["status"] != "skip"]
    passed = sum(r["status"] == "pass" for r in counted)
    summary = t("verify.summary", lang, passed=passed, total=len(counted))
    skipped = len(rows) - len(counted)
    if skipped:
        summary += " " + t("verify.skipped", lang, n=skipped)
    return table, summary


@handler
def verify(lang: str = "en") -> tuple[list[list], str]:
    """Run the reference checks; returns (table rows, summary markdown)."""
    return table_rows(run_all(), lang)


@handler
def verify_kit(names: list[str] | None = None, lang: str = "en") -> Iterator[tuple[list[list], str]]:
    """Run the conformance kit (``zoo.testing``) on the selected components, streaming the table as
    each check finishes."""
    from zoo.testing import Kit

    kit = Kit()
    cases = kit.cases(list(names) if names else None)
    rows: list[dict] = []
    for i, case in enumerate(cases):
        rows.append(_kit_row(kit.run(case)))
        if i % 4 == 3 or i == len(cases) - 1:
            table, summary = table_rows(rows, lang)
            yield table, f"{summary} {t('verify.progress', lang, done=i + 1, total=len(cases))}"
    if not cases:
        yield table_rows([], lang)


HEADERS = ("col.result", "col.check", "col.subject", "col.case", "col.reference", "col.error",
           "col.tolerance", "col.note")


def build(tr, lang_state) -> dict:
    import gradio as gr
    import pandas as pd

    tr.add(gr.Markdown(tr("verify.intro")), value="verify.intro")
    go = tr.add(gr.Button(tr("verify.go"), variant="primary", elem_id="verify-go"), value="verify.go")
    with gr.Row(visible=kit_available()):
        names = tr.add(gr.Dropdown(kit_choices(), value=["attention:eager", "attention:sdpa"],
                                   multiselect=True, label=tr("verify.kit_names"), elem_id="verify-kit-names",
                                   scale=3), label="verify.kit_names")
        kit_go = tr.add(gr.Button(tr("verify.kit_go"), elem_id="verify-kit-go", scale=1), value="verify.kit_go")
    summary = gr.Markdown(elem_id="verify-summary")
    table = gr.Dataframe(headers=[tr(h) for h in HEADERS], label=tr("verify.table"), interactive=False,
                         wrap=True, elem_id="verify-table")
    tr.add(table, label="verify.table")  # its handlers return frames with translated headers

    def frame(rows, lang):
        return pd.DataFrame(rows, columns=[t(h, lang) for h in HEADERS])

    @handler
    def run(lang):
        rows, msg = verify(lang=lang)
        return frame(rows, lang), msg

    @handler
    def run_kit(selected, lang):
        for rows, msg in verify_kit(selected, lang=lang):
            yield frame(rows, lang), msg

    go.click(run, inputs=[lang_state], outputs=[table, summary], concurrency_limit=1,
             concurrency_id="verify", api_name="verify")
    kit_go.click(run_kit, inputs=[names, lang_state], outputs=[table, summary], concurrency_limit=1,
                 concurrency_id="verify", api_name="verify_kit")
    return {"go": go, "table": table, "summary": summary, "kit_go": kit_go}

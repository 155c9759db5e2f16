"""The Inspect tab: attention inside a checkpoint, and the step-by-step attention calculator.

The calculator is the lecture's three-token example (seed ``000``): Q, K, V are small editable tables;
every intermediate (scores, scaled, masked, softmax weights, output) is shown, row 0 is worked out by
hand in words, and the result is checked against the registered ``eager`` kernel — the same code the
models run.  With the lecture's numbers, weights row 0 is [0.4011, 0.1978, 0.4011] and output row 0 is
[6.0165, 3.9835].

The checkpoint part runs ``zoo``'s inspection once on a text.  The attention view is drawn in the
browser (:data:`ATTN_JS`): hover a cell to read its query token, key token, layer, head and weight;
click a query token to see what it attends to in every layer and head (the view people use bertviz
for).  The layer x head grid, the mask and the positional view are ``zoo.inside.plots`` figures, the same
ones ``zoo inspect`` writes as image files.
"""
from __future__ import annotations

import functools

import math
from typing import Any

import torch

import zoo
from zoo.errors import ZooError

from . import budget
from .common import (LIMITS, check_text, checkpoint_names, default_checkpoint, error_box, error_outputs, handler,
                     inline_errors, load_checkpoint, raw, safe_markdown, show_result_js)
from .i18n import t, ui_error

from zoo.run.input_contract import admit, route_notes

#: the lecture's example (seed 000): three tokens, d_k = 2
SEED_Q = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
SEED_K = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
SEED_V = [[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]]


def _matrix(value: Any, name: str, lang: str, rows: int | None = None, cols: int | None = None
            ) -> torch.Tensor:
    """A table from the UI (list of lists, numpy array or DataFrame) -> float64 tensor, checked."""
    if hasattr(value, "to_numpy"):
        value = value.to_numpy().tolist()
    elif hasattr(value, "tolist"):
        value = value.tolist()
    shape = f"{rows or 'n'} × {cols or 'd'}"
    try:
        data = [[float(x) for x in row] for row in value]
    except (TypeError, ValueError):
        raise ui_error(ZooError, "err.matrix", fix="calc.fix_numbers", where=name, name=name, shape=shape) from None
    if (not data or not data[0] or any(len(r) != len(data[0]) for r in data)
            or (rows is not None and len(data) != rows) or (cols is not None and len(data[0]) != cols)):
        raise ui_error(ZooError, "err.matrix", fix="calc.fix_shape", where=name, name=name, shape=shape)
    if len(data) > LIMITS["calc_tokens"] or len(data[0]) > max(LIMITS["calc_dim"], LIMITS["calc_tokens"]):
        raise ui_error(ZooError, "err.limit", fix="err.limit_fix", where=name, field=name,
                       value=f"{len(data)} × {len(data[0])}",
                       limit=f"{LIMITS['calc_tokens']} × {LIMITS['calc_dim']}")
    tensor = torch.tensor(data, dtype=torch.float64)
    if not torch.isfinite(tensor).all():
        raise ui_error(ZooError, "err.matrix", fix="calc.fix_finite", where=name, name=name, shape=shape)
    return tensor


def mask_table(kind: str, n: int, m: int | None = None) -> list[list[int]]:
    """A 0/1 mask (1 = may attend) of ``n`` queries by ``m`` keys: ``none`` or ``causal``."""
    m = n if m is None else m
    if kind == "causal":
        return [[1 if j <= i + (m - n) else 0 for j in range(m)] for i in range(n)]
    return [[1] * m for _ in range(n)]


def _r(x: torch.Tensor, digits: int = 4) -> list[list]:
    return [[("-inf" if v == float("-inf") else round(float(v), digits)) for v in row] for row in x]


def _fmt(v: float) -> str:
    return "−inf" if v == float("-inf") else f"{v:.4f}"


@handler
def calculate(q: Any, k: Any, v: Any, mask: Any, lang: str = "en") -> dict[str, Any]:
    """Attention step by step.  Returns every intermediate table (rounded to 4 places), the worked
    explanation of row 0, and the check against the registered eager kernel."""
    Q = _matrix(q, "Q", lang)
    K = _matrix(k, "K", lang, cols=Q.size(1))
    V = _matrix(v, "V", lang, rows=K.size(0))
    M = _matrix(mask, "mask", lang, rows=Q.size(0), cols=K.size(0)) != 0  # True = may attend
    d_k = Q.size(1)
    scale = 1.0 / math.sqrt(d_k)
    scores = Q @ K.T  # (n, m)
    scaled = scores * scale
    masked = scaled.masked_fill(~M, float("-inf"))
    empty = ~M.any(-1, keepdim=True)  # fully masked rows: attend to nothing
    weights = torch.softmax(masked.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    out = weights @ V  # (n, dv)

    # the same numbers from the kernel models use
    comp = zoo.get_registry().get("attention", "eager")
    from zoo.components import BuildContext
    from zoo.model.layers import attend

    kernel = comp.make(BuildContext.for_heads(1, d_k, max_len=Q.size(0), scale=scale))
    with torch.no_grad():
        k_out, k_w = attend(kernel, Q[None, None], K[None, None], V[None, None], mask=M[None, None],
                            need_weights=True)
    err = float((k_out[0, 0] - out).abs().max())

    row = 0
    hand = weights[row].round(decimals=4) @ V  # the lecture's hand computation uses 4-digit weights
    e = [math.exp(float(x)) if bool(M[row, j]) else 0.0 for j, x in enumerate(scaled[row])]
    total = sum(e)
    explain = [
        f"**{t('calc.row0', lang)}**",
        "- " + t("calc.dk", lang, dk=d_k, sq=f"{math.sqrt(d_k):.4f}"),
        "- " + t("calc.scores_line", lang, vals="[" + ", ".join(_fmt(float(x)) for x in scores[row]) + "]"),
        "- " + t("calc.scaled_line", lang, sq=f"{math.sqrt(d_k):.4f}",
                 vals="[" + ", ".join(_fmt(float(x)) for x in masked[row]) + "]"),
        "- " + t("calc.exp_line", lang, vals="[" + ", ".join(
            f"{x:.4f}" if bool(M[row, j]) else t("calc.masked_out", lang) for j, x in enumerate(e)) + "]",
            total=f"{total:.4f}"),
        "- " + t("calc.weights_line", lang, vals="[" + ", ".join(_fmt(float(x)) for x in weights[row]) + "]"),
        "- " + t("calc.out_line", lang, vals="[" + ", ".join(_fmt(float(x)) for x in out[row]) + "]"),
        "- " + t("calc.hand_line", lang, terms=" ; ".join(
            " + ".join(f"{float(w):.4f}·{float(V[j, c]):g}" for j, w in enumerate(weights[row]))
            for c in range(V.size(1))), vals="[" + ", ".join(_fmt(float(x)) for x in hand) + "]"),
        "",
        t("calc.kernel_check", lang, err=f"{err:.1e}"),
    ]
    return {"scores": _r(scores), "scaled": _r(scaled), "masked": _r(masked), "weights": _r(weights),
            "output": _r(out), "hand_output_row0": [round(float(x), 4) for x in hand], "explain": "\n".join(explain), "kernel_error": err,
            "kernel_weights": _r(k_w[0, 0])}


# ---------------------------------------------------------------------- checkpoint inspection
def _label(tok, i: int) -> str:
    """A token's label: its text, or ``<id>`` for a byte that is only part of a character."""
    text = tok.decode([i])
    return f"<{i}>" if (not text or "\ufffd" in text) else text


def stacks_of(spec) -> list[str]:
    """Which attention maps a model has: ``encoder``, ``decoder``, and ``cross`` for an
    encoder-decoder's cross-attention."""
    out = list(spec.roles)
    if spec.arch == "encoder_decoder":
        out.append("cross")
    return out


def _weights_name(stack: str, layer: int) -> str:
    if stack == "cross":
        return f"decoder.blocks.{layer}.cross.weights"
    return f"{stack}.blocks.{layer}.attn.weights"


def positions_figure(spec, seq_len: int, role: str, model=None):
    """The view that fits the stack's position scheme: sinusoid waves, RoPE rotation, the score bias
    of ALiBi / T5, the similarity of learned position vectors (given the ``model``), or None."""
    from zoo.inside import plots

    st = spec.stack(role)
    kind = st.positions.kind
    reg = zoo.get_registry()
    cls = reg.get("position", kind).cls
    if cls.acts_on_scores:
        return plots.position_bias(spec, seq_len=max(seq_len, 2), role=role,
                                   heads=tuple(range(min(4, st.num_heads))))
    if kind == "sinusoidal":
        base = getattr(st.positions.config, "base", 10000.0)
        return plots.sinusoid_waves(d_model=spec.d_model, max_len=min(spec.max_len, 128), base=base)
    if cls.acts_on_qk and hasattr(plots, "rope_rotation"):
        base = getattr(st.positions.config, "base", 10000.0)
        return plots.rope_rotation(head_dim=st.head_dim, positions=max(seq_len, 8), base=base)
    if model is not None:
        stack = model.decoder if role == "decoder" else model.encoder
        table = getattr(getattr(stack, "positions", None), "table", None)
        if isinstance(table, torch.nn.Embedding):
            return learned_positions_figure(table.weight, max(seq_len, 16))
    return None


def learned_positions_figure(weight: torch.Tensor, n: int = 32):
    """Learned position vectors: cosine similarity between positions 0..n-1.  A trained model shows
    a bright band along the diagonal (nearby positions look alike); a random one shows noise."""
    from matplotlib.figure import Figure

    from zoo.inside import plots

    w = weight[: min(n, weight.size(0))].detach().float()
    w = w / w.norm(dim=-1, keepdim=True).clamp(min=1e-12)
    sim = (w @ w.T).numpy()  # (n, n)
    font = plots.cjk_font()
    fig = Figure(figsize=(5.2, 4.4), layout="constrained")
    ax = fig.add_subplot()
    im = ax.imshow(sim, cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set_xlabel("position 位置", fontfamily=[font or "DejaVu Sans", "DejaVu Sans"])
    ax.set_ylabel("position 位置", fontfamily=[font or "DejaVu Sans", "DejaVu Sans"])
    ax.set_title("learned positions: cosine similarity\n学到的位置向量的余弦相似度",
                 fontfamily=[font or "DejaVu Sans", "DejaVu Sans"], fontsize=10)
    fig.colorbar(im, ax=ax, shrink=0.8)
    return fig


@handler
def inspect(name: str, text: str, stack: str | None = None, layer: int = 0, head: int = 0,
            lang: str = "en") -> dict[str, Any]:
    """Trace checkpoint ``name`` on ``text`` once.  Returns the attention data the browser draws
    (:func:`attention_view`: every layer and head, the selected one first), the figures (all layers
    x heads of the stack, the mask, the positional view), the tokens, the selected head's weights and
    the model's top next-token predictions."""
    import copy

    from zoo.inside import plots

    # tracing swaps kernels for one run: work on a private copy (held to the budget: it costs the
    # model's size again), the cached model is shared
    shared = load_checkpoint(name, lang)
    budget.refuse_if_over(budget.model_bytes(shared), "budget.inspect_copy", "checkpoint", "budget.inspect_copy_fix")
    model = copy.deepcopy(shared)
    text = check_text(text, lang)
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        raise ui_error(zoo.TokenizerError, "run.no_tokenizer", fix="run.no_tokenizer_fix", where="checkpoint")
    notes: list[str] = []
    with route_notes(notes.append):  # mostly unknown characters: an error; some: a note
        ids = tok.encode(admit(model, tok, text, where="text", contract=False))
    if len(ids) > LIMITS["inspect_tokens"]:
        raise ui_error(ZooError, "err.limit", fix="err.limit_fix", where="text", field="tokens",
                       value=len(ids), limit=LIMITS["inspect_tokens"])
    stacks = stacks_of(model.spec)
    if stack not in (None, "", "encoder", "decoder", "cross"):  # typed into the dropdown
        raise ui_error(ZooError, "inspect.no_stack", fix="inspect.no_stack_fix", where="stack",
                       options=stacks, value=str(stack)[:40])
    stack = stack if stack in stacks else stacks[-1]  # another model's stack: this one's last
    role = "decoder" if stack == "cross" else stack
    st = model.spec.stack(role)
    layer, head = int(layer or 0), int(head or 0)
    if not 0 <= layer < st.num_layers:
        raise ui_error(ZooError, "inspect.no_layer", where="layer",
                       options=[str(i) for i in range(st.num_layers)], n=layer)
    if not 0 <= head < st.num_heads:
        raise ui_error(ZooError, "inspect.no_head", where="head",
                       options=[str(i) for i in range(st.num_heads)], n=head)
    src_tokens = [_label(tok, i) for i in ids]
    with torch.no_grad():
        if model.spec.arch == "encoder_decoder":
            # the decoder reads what the model itself writes: its greedy output for this source
            if tok.eos_id is not None:
                ids = ids + [tok.eos_id]
                src_tokens = src_tokens + [_label(tok, tok.eos_id)]
            src = torch.tensor([ids])
            tgt = model.generate(src, max_new_tokens=min(LIMITS["inspect_tokens"], model.spec.max_len) - 1,
                                 **({"stop_tokens": [tok.eos_id]} if tok.eos_id is not None else {}))
            tgt = tgt[:, :LIMITS["inspect_tokens"]]
            trace = zoo.trace(model, src, tgt_ids=tgt)
            tgt_tokens = [_label(tok, int(i)) for i in tgt[0]]
        else:
            trace = zoo.trace(model, torch.tensor([ids]))
            tgt_tokens = src_tokens
    q_tokens = src_tokens if stack == "encoder" else tgt_tokens
    k_tokens = tgt_tokens if stack == "decoder" else src_tokens
    w = trace[_weights_name(stack, layer)][0]  # (h, Tq, Tk)
    kind = "cross" if stack == "cross" else "attn"
    names = [_weights_name(stack, i) for i in range(st.num_layers)]
    every = torch.stack([trace[n][0] for n in names])  # (L, h, Tq, Tk)
    attention = attention_view(every, q_tokens, k_tokens, stack, layer, head, lang)
    grid = legible_grid(plots.attention_grid(every, q_tokens if kind == "attn" else None,
                                             title=f"{stack}: {st.num_layers} layers × {st.num_heads} heads"))
    mask = plots.mask_pattern(model.spec, seq_len=min(len(q_tokens), 32), role=role) if kind == "attn" else None
    pos = positions_figure(model.spec, min(len(q_tokens), 32), role, model)
    # the next-token prediction only means something for a language model
    if model.spec.arch == "encoder_decoder":  # what the decoder wrote (the rows of its maps)
        pred, pred_label = repr(tok.decode(tgt[0].tolist(), skip_special=True)), "inspect.output"
    else:  # the next-token prediction only means something for a language model
        nxt = trace.summary(top_k=5).get("next_token") or [] if model.spec.arch == "decoder" else []
        pred = ", ".join(f"{r.get('text', r['id'])!r} ({r['p']:.3f})" for r in nxt)  # shown escaped
        pred_label = "inspect.next"
    pred = "".join(f"⚠ {n}  \n" for n in notes) + pred if notes else pred
    counts = experts = None
    if trace.names(f"{role}.blocks.*.ffn.expert_counts"):  # a mixture of experts: its router's load
        counts = trace.expert_counts(role)  # (L, E) over the traced tokens
        experts = plots.expert_load(counts, title=f"{role}: {len(q_tokens) if role == stack else len(tgt_tokens)} "
                                    f"tokens × top-k, {counts.shape[1]} experts 专家")
    return {"attention": attention, "grid": grid, "mask": mask, "positions": pos, "tokens": q_tokens,
            "experts": experts, "expert_counts": None if counts is None else counts.tolist(),
            "key_tokens": k_tokens,
            "weights": [[round(float(x), 4) for x in row] for row in w[head]], "stack": stack,
            "layers": st.num_layers, "heads": st.num_heads, "next": pred,
            "next_label": pred_label}


def attention_view(weights: torch.Tensor, q_tokens: list[str], k_tokens: list[str], stack: str,
                   layer: int, head: int, lang: str = "en") -> dict[str, Any]:
    """The data the browser draws (:data:`ATTN_JS`): every layer and head's weights ``(L, h, Tq, Tk)``
    rounded to 4 places, the tokens, the selected layer / head and the localised labels.  Tokens are
    data, never markup: the browser sets them as text."""
    L, H = weights.shape[:2]
    return {"q": list(q_tokens), "k": list(k_tokens), "stack": stack, "layer": int(layer), "head": int(head),
            "layers": int(L), "heads": int(H),
            "w": [[[[round(float(x), 4) for x in row] for row in wh] for wh in wl] for wl in weights],
            "text": attention_words(lang)}


def attention_words(lang: str = "en") -> dict[str, str]:
    """The heatmap's own words (readout, hints, titles) in ``lang``."""
    return {key: t(f"attn.{key}", lang) for key in
            ("query", "key", "layer", "head", "weight", "hover", "click", "across", "title")}


#: Draws :func:`attention_view`'s data: the heatmap of the selected layer / head (hover a cell: query,
#: key, layer, head, weight) and, for the clicked query token, its weights in every layer and head.
ATTN_JS = r"""
const viridis = [[68,1,84],[59,82,139],[33,145,140],[94,201,98],[253,231,37]];
function colour(x) {
  x = Math.max(0, Math.min(1, x)) * (viridis.length - 1);
  const i = Math.min(Math.floor(x), viridis.length - 2), f = x - i, a = viridis[i], b = viridis[i + 1];
  return `rgb(${a.map((v, j) => Math.round(v + f * (b[j] - v))).join(",")})`;
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function show(tok) { return tok.trim() === "" ? JSON.stringify(tok).slice(1, -1) || "␣" : tok; }
// a key's column label: one character stands as it is (a full-width ，/。 keeps its horizontal
// shape: set vertically it took its vertical form at the top-right and read as "’", issue 34);
// longer tokens run down the column, upright
function keyLabel(k) {
  const s = show(k), th = el("th", "key");
  th.appendChild(el("span", [...s].length > 1 ? "v" : "one", s));
  return th;
}
function table(d, rows, rowLabel, weights, onRow, selected, cellInfo) {
  const tb = el("table", "zoo-attn-table"), head = el("tr");
  head.appendChild(el("th", "corner", ""));
  d.k.forEach(k => head.appendChild(keyLabel(k)));
  tb.appendChild(head);
  const all = rows.map((r, i) => weights(r, i));
  const top = Math.max(...all.flat(), 1e-9);  // one colour scale for the whole table
  rows.forEach((r, i) => {
    const tr = el("tr", i === selected ? "selected" : "");
    const th = el("th", "query", rowLabel(r, i));
    if (onRow) { th.classList.add("clickable"); th.onclick = () => onRow(i); }
    tr.appendChild(th);
    const row = all[i];
    row.forEach((w, j) => {
      const td = el("td", "cell");
      td.style.background = colour(w / top);
      td.dataset.q = String(i); td.dataset.k = String(j); td.dataset.w = w.toFixed(4);
      td.title = cellInfo(r, i, j, w);
      td.onmouseenter = () => { element.querySelector(".zoo-readout").textContent = td.title; };
      tr.appendChild(td);
    });
    tb.appendChild(tr);
  });
  return tb;
}
function draw() {
  const root = element.querySelector(".zoo-attn");
  const d = props.value;
  root.replaceChildren();
  if (!d || !d.w) return;
  const T = d.text, L = d.layer, H = d.head, W = d.w;
  const info = (l, h, i, j, w) => `${T.query} ${i} '${show(d.q[i])}' → ${T.key} ${j} '${show(d.k[j])}' · ` +
                                 `${T.layer} ${l} · ${T.head} ${h} · ${T.weight} ${w.toFixed(4)}`;
  root.appendChild(el("div", "zoo-attn-title", `${T.title}: ${d.stack} · ${T.layer} ${L} · ${T.head} ${H}`));
  root.appendChild(el("div", "zoo-readout", T.hover));
  root.appendChild(table(d, d.q, (q) => show(q), (q, i) => W[L][H][i], pick, -1,
                         (q, i, j, w) => info(L, H, i, j, w)));
  const across = el("div", "zoo-across");
  root.appendChild(el("div", "zoo-attn-hint", T.click));
  root.appendChild(across);
  function pick(i) {
    const rows = [];
    for (let l = 0; l < d.layers; l++) for (let h = 0; h < d.heads; h++) rows.push([l, h]);
    across.replaceChildren(el("div", "zoo-attn-title", `${T.across}: ${T.query} ${i} '${show(d.q[i])}'`),
      table(d, rows, ([l, h]) => `${T.layer} ${l} · ${T.head} ${h}`, ([l, h]) => W[l][h][i], null,
            rows.findIndex(([l, h]) => l === L && h === H), ([l, h], r, j, w) => info(l, h, i, j, w)));
    element.querySelectorAll(".zoo-attn > .zoo-attn-table th.query").forEach((th, r) =>
      th.classList.toggle("picked", r === i));
  }
  pick(d.q.length - 1);
}
draw();
watch("value", draw);
"""

ATTN_CSS = """
.zoo-attn { overflow-x: auto; font-size: 12px; }
.zoo-attn-title { font-weight: bold; margin: 6px 0 2px; }
.zoo-readout { min-height: 1.5em; padding: 2px 6px; margin: 4px 0; border-radius: 4px;
               background: var(--background-fill-secondary); font-family: ui-monospace, monospace; }
.zoo-attn-hint { margin-top: 8px; opacity: 0.8; }
.zoo-attn-table { border-collapse: collapse; margin: 2px 0; }
.zoo-attn-table td.cell { width: 22px; min-width: 22px; height: 20px; padding: 0; border: 1px solid transparent; }
.zoo-attn-table td.cell:hover { border-color: #f43f5e; }
.zoo-attn-table th { font-weight: normal; padding: 0 4px; white-space: nowrap; }
/* keys: a token of several characters runs down its column, upright; one character stands as it
   is (keyLabel).  The vertical writing mode sits on an inner span: Chromium does not lay a table
   cell out vertically, it only gave the cell's glyphs their vertical forms ("，" -> "’") */
.zoo-attn-table th.key { vertical-align: bottom; text-align: center; padding: 2px 0; }
.zoo-attn-table th.key > span.v { display: inline-block; writing-mode: vertical-rl; text-orientation: upright;
                                  max-height: 6em; overflow: hidden; }
/* query tokens: larger, and clickable without an underline -- a dotted underline beside a
   full-width ，/。 read as a truncated label ("，…", issue 34) */
.zoo-attn-table th.query { text-align: right; }
.zoo-attn > .zoo-attn-table th.query { text-align: center; font-size: 14px; min-width: 1.6em; }
.zoo-attn-table th.clickable { cursor: pointer; border-radius: 3px; }
.zoo-attn-table th.clickable:hover { background: var(--background-fill-secondary); color: #e11d48; }
.zoo-attn-table th.picked, .zoo-attn-table tr.selected th { color: #e11d48; font-weight: bold; }
"""


def choices_for(name: str, lang: str = "en") -> dict[str, Any]:
    """Stacks, layer and head counts of checkpoint ``name`` (for the selectors)."""
    from .common import checkpoint_path

    spec = zoo.load_spec(checkpoint_path(name, lang))
    stacks = stacks_of(spec)
    return {"stacks": stacks, "layers": {s: spec.stack("decoder" if s == "cross" else s).num_layers
                                         for s in stacks},
            "heads": {s: spec.stack("decoder" if s == "cross" else s).num_heads for s in stacks}}


def build(tr, lang_state) -> dict:
    """Create the tab (inside an open ``gr.Tab``): the traced run of a checkpoint, then the
    step-by-step attention calculator."""
    ui = _attention_layout(tr)
    _wire_attention(ui, lang_state)
    tr.keep([ui["heat"], ui["next"]], redraw, [ui["kept"]])
    calc = _calculator_layout(tr)
    _wire_calculator(calc, lang_state)
    # the calculator's steps are worked out from its tables, which stay on the page
    tr.keep([calc["explain"]], calc_again, [calc[k] for k in ("q", "k", "v", "mask")])
    out = {k: ui[k] for k in ("checkpoint", "text", "stack", "layer", "head", "go_inspect", "grid", "experts",
                              "error")}
    out["heatmap"] = ui["heat"]
    out.update({k: calc[k] for k in ("q", "k", "v", "mask", "steps", "explain", "go")})
    return out


# ---------------------------------------------------------------------- a checkpoint's attention
def _attention_layout(tr) -> dict:
    """Checkpoint, text, stack / layer / head selectors; the heatmap, the grid of every layer and
    head, the mask and position figures."""
    import gradio as gr

    ui: dict = {}
    names = checkpoint_names()
    tr.add(gr.Markdown(tr("inspect.intro")), value="inspect.intro")
    with gr.Row():
        ui["checkpoint"] = tr.add(gr.Dropdown(names, value=default_checkpoint(names), label=tr("run.checkpoint"),
                                              elem_id="inspect-checkpoint", allow_custom_value=True),
                                  label="run.checkpoint")
        ui["refresh"] = tr.add(gr.Button(tr("run.refresh"), size="sm", elem_id="inspect-refresh"),
                               value="run.refresh")
    ui["text"] = tr.add(gr.Textbox("床前明月光，疑是地上霜。", label=tr("inspect.text"), elem_id="inspect-text",
                                   max_length=LIMITS["text_chars"]), label="inspect.text")
    with gr.Row():
        # allow_custom_value: a click right after a checkpoint change can send the old stack
        # ("decoder") before the new choices (["encoder"]) arrive; Gradio would reject it before the
        # handler runs, and inspect() already falls back to the model's last stack
        ui["stack"] = tr.add(gr.Dropdown(["encoder", "decoder", "cross"], value="decoder", label=tr("inspect.stack"),
                                         elem_id="inspect-stack", allow_custom_value=True), label="inspect.stack")
        ui["layer"] = tr.add(index_slider()(0, LIMITS["num_layers"] - 1, value=0, step=1,
                                            label=tr("inspect.layer"), elem_id="inspect-layer"),
                             label="inspect.layer")
        ui["head"] = tr.add(index_slider()(0, LIMITS["num_heads"] - 1, value=0, step=1,
                                           label=tr("inspect.head"), elem_id="inspect-head"),
                            label="inspect.head")
        ui["go_inspect"] = tr.add(gr.Button(tr("inspect.go"), variant="primary", elem_id="inspect-go"),
                                  value="inspect.go")
    ui["error"] = error_box("inspect-error", tr)  # its message follows a language switch
    ui["next"] = gr.Markdown(elem_id="inspect-next")
    ui["kept"] = gr.State(None)  # the last run's heatmap data and next-token line (see redraw)
    tr.add(gr.Markdown(f"**{tr('inspect.heatmap')}**"), value="**{inspect.heatmap}**")
    ui["heat"] = gr.HTML(None, html_template="<div class='zoo-attn'></div>", js_on_load=ATTN_JS,
                         css_template=ATTN_CSS, elem_id="inspect-attn")
    # the layers x heads grid takes the page's full width (beside the heatmap, at 1280 its labels
    # were drawn 5 px high), and its labels are sized for that width: legible_grid
    ui["grid"] = tr.add(gr.Plot(label=tr("inspect.grid"), elem_id="inspect-grid",
                                elem_classes=["zoo-plot"]), label="inspect.grid")
    with gr.Row():
        ui["maskfig"] = tr.add(gr.Plot(label=tr("inspect.mask"), elem_id="inspect-mask",
                                       elem_classes=["zoo-plot"]), label="inspect.mask")
        ui["posfig"] = tr.add(gr.Plot(label=tr("inspect.positions"), elem_id="inspect-positions",
                                      elem_classes=["zoo-plot"]), label="inspect.positions")
    # shown only for a mixture-of-experts checkpoint: tokens per expert and layer (zoo.trace)
    ui["experts"] = tr.add(gr.Plot(label=tr("inspect.experts"), elem_id="inspect-experts", visible=False,
                                   elem_classes=["zoo-plot"]), label="inspect.experts")
    return ui


#: The grid's width on the page at a 1280-pixel window (full width, less the page's margins), and the
#: smallest text height wanted there.
GRID_SHOWN_PX, GRID_TEXT_PX = 1180, 11


def legible_grid(fig, shown_px: float = GRID_SHOWN_PX, text_px: float = GRID_TEXT_PX):
    """Raise every text of ``fig`` to at least ``text_px`` pixels high once the figure is scaled to
    ``shown_px`` wide: a point is ``shown_px / (72 * width in inches)`` pixels there."""
    least = text_px * 72 * fig.get_figwidth() / shown_px  # in points
    for text in fig.findobj(lambda o: hasattr(o, "get_fontsize") and hasattr(o, "set_fontsize")):
        if text.get_text() if hasattr(text, "get_text") else True:
            text.set_fontsize(max(text.get_fontsize(), least))
    return fig


@functools.cache
def index_slider():
    """A ``gr.Slider`` class for a layer or head number that leaves the range check to
    :func:`inspect` (whose ZooError lands in the tab's error box, with the valid numbers): Gradio's
    own check of a number typed past the slider's end raised a pop-up over the language switch."""
    import gradio as gr

    class IndexSlider(gr.Slider):
        def get_block_name(self) -> str:
            return "slider"  # drawn by the frontend as a plain slider

        def preprocess(self, payload):
            return payload if payload is None else _round_index(payload)

    return IndexSlider


def _round_index(payload) -> float:  # Gradio's rounding, without its bounds check
    import gradio as gr

    return gr.Number.round_to_precision(payload, 0)


@inline_errors(3, kept=True)  # a bad name typed into the box: the tab's error box
def on_checkpoint(name, stack_now, lang):
    """A checkpoint chosen: its stacks, and the layer / head sliders sized for the shown stack."""
    import gradio as gr

    if not name:
        return gr.skip(), gr.skip(), gr.skip()
    c = choices_for(name, lang)
    s = stack_now if stack_now in c["stacks"] else c["stacks"][-1]
    n_layers, n_heads = c["layers"][s], c["heads"][s]
    return (gr.update(choices=c["stacks"], value=s),  # a slider needs min < max: one layer -> fixed
            gr.update(maximum=max(n_layers - 1, 1), value=0, interactive=n_layers > 1),
            gr.update(maximum=max(n_heads - 1, 1), value=0, interactive=n_heads > 1))


@inline_errors(7, kept=True)
def on_inspect(name, txt, s, l, h, lang):
    """One traced run: heatmap data, grid, mask and position figures, the router's load (only for a
    mixture of experts), the next-token line, and what a language switch needs to word the heatmap
    and the line again (:func:`redraw`).  (The figures carry both languages.)"""
    import gradio as gr

    r = raw(inspect)(name, txt, s, l, h, lang=lang)
    kept = {"attention": r["attention"], "next": r["next"], "next_label": r["next_label"]}
    experts = gr.update(value=r["experts"], visible=r["experts"] is not None)
    return (r["grid"], r["mask"], r["positions"], experts, *redraw(lang, kept), kept)


def redraw(lang: str, kept: dict | None):
    """The heatmap data (its words in ``lang``) and the next-token line of the last run."""
    if not kept:
        return None
    attention = {**kept["attention"], "text": attention_words(lang)}
    line = f"**{t(kept['next_label'], lang)}:** {safe_markdown(kept['next'])}" if kept["next"] else ""
    return attention, line


@handler
def on_refresh(current, lang=None):
    """The checkpoint list again (``lang``: the page's language, for an error)."""
    import gradio as gr

    names = checkpoint_names()
    return gr.update(choices=names, value=current if current in names else (names[0] if names else None))


def _wire_attention(ui: dict, lang_state) -> None:
    """Checkpoint -> selectors (also when the page opens); Inspect, or releasing a slider -> a run."""
    import gradio as gr

    selectors = dict(inputs=[ui["checkpoint"], ui["stack"], lang_state],
                     outputs=[ui["stack"], ui["layer"], ui["head"], *error_outputs(ui["error"])],
                     api_visibility="private")
    ui["checkpoint"].change(on_checkpoint, **selectors)
    ui["refresh"].click(on_refresh, inputs=[ui["checkpoint"], lang_state], outputs=[ui["checkpoint"]], api_visibility="private")
    run = dict(inputs=[ui[k] for k in ("checkpoint", "text", "stack", "layer", "head")] + [lang_state],
               outputs=[ui[k] for k in ("grid", "maskfig", "posfig", "experts", "heat", "next", "kept")]
               + error_outputs(ui["error"]),
               concurrency_limit=2, concurrency_id="inspect", api_visibility="private")
    # the result (the next-token line, then the heatmap) sits below the selectors, under the fold of
    # a 1280x800 window: a click brings it (or the error box) into view when it lands.  A slider's
    # release does not: the hand is on the slider, and the page stays where it was
    ui["go_inspect"].click(on_inspect, **run).then(None, js=SHOW_RESULT_JS)
    for w in (ui["layer"], ui["head"]):
        w.release(on_inspect, trigger_mode="always_last", **run)

    def inspect_api(name: str, text: str, stack: str = "decoder", layer: int = 0, head: int = 0,
                    lang: str = "en") -> dict:
        """The HTTP API: the attention data (tokens, every layer and head's weights) and the
        next-token line; figures stay in the page."""
        r = inspect(name, text, stack, layer, head, lang=lang)
        return {"attention": r["attention"], "tokens": r["tokens"], "key_tokens": r["key_tokens"],
                "weights": r["weights"], "next": r["next"], "stack": r["stack"],
                "expert_counts": r["expert_counts"]}

    gr.api(inspect_api, api_name="inspect", concurrency_limit=2, concurrency_id="inspect")
    root = getattr(gr.context.Context, "root_block", None)  # size the selectors when the page opens
    if root is not None:
        root.load(on_checkpoint, **selectors)


#: Scrolls the tab's error box (when it holds a message) or its result to the top of the window.
SHOW_RESULT_JS = show_result_js("#inspect-next", error="#inspect-error")


# ---------------------------------------------------------------------- the calculator
CALC_STEPS = (("scores", "scaled", "masked"), ("weights", "output"))  # one row of tables each


def _calculator_layout(tr) -> dict:
    """Q, K, V and mask tables (editable), the intermediate tables and the explanation."""
    import gradio as gr

    c: dict = {}
    tr.add(gr.Markdown(f"### {tr('inspect.calc_heading')}"), value="### {inspect.calc_heading}")
    tr.add(gr.Markdown(tr("inspect.calc_intro")), value="inspect.calc_intro")
    with gr.Row():
        for name, seed in (("q", SEED_Q), ("k", SEED_K), ("v", SEED_V)):
            c[name] = gr.Dataframe(seed, label=name.upper(), type="array", interactive=True, datatype="number",
                                   elem_id=f"calc-{name}")
        with gr.Column():
            c["mask_kind"] = tr.add(gr.Radio([("none", "none"), ("causal", "causal")], value="none",
                                             label=tr("inspect.calc_mask"), elem_id="calc-mask-kind"),
                                    label="inspect.calc_mask")
            c["mask"] = tr.add(gr.Dataframe(mask_table("none", 3), label=tr("calc.mask_table"), type="array",
                                            interactive=True, datatype="number", elem_id="calc-mask"),
                               label="calc.mask_table")
    with gr.Row():
        c["go"] = tr.add(gr.Button(tr("inspect.calc_go"), variant="primary", elem_id="calc-go"),
                         value="inspect.calc_go")
        c["reset"] = tr.add(gr.Button(tr("inspect.calc_reset"), elem_id="calc-reset"), value="inspect.calc_reset")
    first = calculate(SEED_Q, SEED_K, SEED_V, mask_table("none", 3))
    c["steps"] = {}
    for row in CALC_STEPS:
        with gr.Row():
            for key in row:
                c["steps"][key] = tr.add(gr.Dataframe(first[key], label=tr(f"calc.{key}"), interactive=False,
                                                      elem_id=f"calc-{key}"), label=f"calc.{key}")
    c["explain"] = gr.Markdown(first["explain"], elem_id="calc-explain")
    return c


def _step_values(r: dict) -> list:
    return [r[k] for row in CALC_STEPS for k in row] + [r["explain"]]


@handler
def on_calc(qv, kv, vv, mv, lang):
    return _step_values(calculate(qv, kv, vv, mv, lang=lang))


def calc_again(lang: str, qv, kv, vv, mv):
    """The calculator's worked explanation in ``lang`` from its tables (None while they are
    unreadable: the explanation says why already)."""
    try:
        return raw(calculate)(qv, kv, vv, mv, lang=lang)["explain"]
    except ZooError:
        return None


@handler
def on_mask_kind(kind, qv, kv, lang=None):
    """A mask kind chosen: a mask table of the size of the Q and K tables (3 x 3 when unreadable);
    ``lang``: the page's language, in which a refusal reads."""
    try:
        n, m = len(_matrix(qv, "Q", lang)), len(_matrix(kv, "K", lang))
    except ZooError:
        n = m = 3
    return mask_table(kind, n, m)


@handler
def on_reset(lang):
    r = calculate(SEED_Q, SEED_K, SEED_V, mask_table("none", 3), lang=lang)
    return [SEED_Q, SEED_K, SEED_V, mask_table("none", 3), "none"] + _step_values(r)


def _wire_calculator(c: dict, lang_state) -> None:
    """Calculate, or an edited table -> every step again; a mask kind -> its table, then the steps."""
    tables = [c["q"], c["k"], c["v"], c["mask"]]
    outputs = [c["steps"][k] for row in CALC_STEPS for k in row] + [c["explain"]]
    c["go"].click(on_calc, inputs=tables + [lang_state], outputs=outputs, api_name="calculate")
    for table in tables:
        table.input(on_calc, inputs=tables + [lang_state], outputs=outputs, show_progress="hidden",
                    trigger_mode="always_last", api_visibility="private")
    c["mask_kind"].input(on_mask_kind, inputs=[c["mask_kind"], c["q"], c["k"], lang_state], outputs=[c["mask"]],
                         api_visibility="private").then(
        on_calc, inputs=tables + [lang_state], outputs=outputs, api_visibility="private")
    c["reset"].click(on_reset, inputs=[lang_state], outputs=tables + [c["mask_kind"]] + outputs,
                     api_visibility="private")

"""What a browser may ask of the server: the UI's upper bounds, one table (``ui.common`` and
``ui.budget`` read it; a test changes a bound with ``monkeypatch.setitem(LIMITS, ...)``)."""
from __future__ import annotations

#: Upper bounds on what a browser may ask for.  Generous for the tiny and small models this UI is for,
#: small enough that no single request can exhaust a laptop.  The shape limits (layers, widths,
#: max_len, parameters) hold for a spec typed into the browser; a stored checkpoint is held to its
#: weights' size against the budget and to the per-request limits (``request_*``; ``ui/budget.py``).
LIMITS: dict[str, float] = {
    "num_layers": 24,
    "d_model": 1024,
    "num_heads": 32,
    "num_kv_heads": 32,
    "dropout": 0.99,
    "d_ff": 8192,
    "vocab_size": 65536,
    "max_len": 4096,
    "parameters": 150_000_000,  # a GPT-2 small fits; building happens on the meta device first
    "input_tokens": 512,  # text given to run / compare
    "inspect_tokens": 64,  # a heatmap of more tokens is unreadable anyway
    "max_new_tokens": 256,
    "calc_tokens": 12,  # rows of the attention calculator
    "calc_dim": 8,
    "compare_seq_len": 1024,
    "text_chars": 4000,
    "request_tokens": 2048,  # prompt + new tokens of one request: a longer max_len is capped to this
    "request_flops": 1e12,  # work of one request (2 x parameters per token through the model)
    "interp_tokens": 256,  # Interpret's heatmaps: layers x tokens cells (the old cap: a tiny model's max_len)
    "runs": 50,  # models saved from the browser (overwriting one of them is always allowed)
}

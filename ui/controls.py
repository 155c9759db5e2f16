"""The Run tab's generation controls: which options a person sets by hand, what they start at, and
how the page's values become the keywords of :func:`zoo.run.generate.generate`.

Both modes of the tab read them: the text mode (``ui/run_tab.py``) and the chat mode
(``ui/chat_panel.py``), so a control added to :class:`~zoo.run.options.GenerationOptions` reaches both.
"""
from __future__ import annotations

import dataclasses
from typing import Any

#: What the Run tab starts its controls at where it differs from :class:`~zoo.run.options.GenerationOptions`'
#: default: sampling on, with the usual top-k / top-p, and a fixed seed (so a run can be repeated).
UI_DEFAULTS = {"temperature": 0.8, "top_k": 20, "top_p": 0.95, "seed": 0}


def ui_options() -> list[tuple[str, Any]]:
    """``(name, Option)`` of every generation option a person sets by hand: the fields of
    :class:`~zoo.run.options.GenerationOptions` whose option declares a ``step``, in declaration order.
    Each becomes a control (a slider when the option gives a range, else a number box), labelled
    ``run.<name>`` (with ``run.<name>_info`` below it when that key exists), and its value reaches
    generation under its own name.  A new option declared with a ``step`` appears here."""
    from zoo.run.options import GenerationOptions

    return [(f.name, f.metadata["option"]) for f in dataclasses.fields(GenerationOptions)
            if f.metadata["option"].step is not None]


def sampling_options(temperature, top_k, top_p, seed, repetition_penalty, more: dict) -> dict:
    """The generation keywords of the tab's controls (max new tokens aside): ``temperature`` 0 is
    greedy decoding (top-k / top-p then unused), ``top_k`` 0 and ``top_p`` 1 are off, ``more`` the
    other options as the page gives them."""
    temperature = float(temperature or 0.0)
    sampling = temperature > 0
    options = dict(do_sample=sampling, seed=int(seed or 0),
                   repetition_penalty=float(repetition_penalty if repetition_penalty is not None else 1.0),
                   **_typed(more))
    if sampling:
        options.update(temperature=temperature, top_k=int(top_k) if top_k else None,
                       top_p=float(top_p) if top_p is not None and float(top_p) < 1.0 else None)
    return options


def control_values(values) -> tuple[int, dict]:
    """``(max new tokens, generation keywords)`` from the controls' values in :func:`ui_options` order."""
    given = dict(zip([n for n, _ in ui_options()], values))
    max_new = int(given.pop("max_new_tokens", None) or 0)
    picked = {k: given.pop(k, None) for k in ("temperature", "top_k", "top_p", "seed", "repetition_penalty")}
    return max_new, sampling_options(**picked, more=given)


def _typed(values: dict) -> dict:
    """Control values as their options' types (a number box gives floats); empty ones left out."""
    from zoo.run.options import GenerationOptions

    fields = GenerationOptions.__dataclass_fields__
    cast = {"int": int, "float": float, "bool": bool}
    return {k: cast.get(fields[k].metadata["option"].kind, lambda x: x)(v) if k in fields else v
            for k, v in values.items() if v is not None and v != ""}

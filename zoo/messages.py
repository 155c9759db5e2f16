"""The message catalogue: every error zoo words for a front end to translate, keyed by an id.

An error raised with an id (``SpecError.of("spec.unknown_field", where=key, field=key)``, see
:meth:`zoo.errors.ZooError.of`) carries ``exc.message_id`` and ``exc.params``; its English ``what``
and ``fix`` are made from the templates here, with those params.  A front end renders the same error
in another language from the id and the params with its own catalogue of the same shape
(:func:`render`): the UI's Chinese is ``zoo.ui.i18n.ERRORS_ZH``.  Rewording an English template
never loses a translation, and no front end reads the English text back.

An entry holds the ``what`` template, the ``fix`` template, or both.  A fix-only entry
(``hint.did_you_mean``) is a sentence errors share: ``fix=`` names the ids whose fix templates make
an error's fix, joined by ``"; "`` (all formatted with the error's one params mapping).  Templates
are :meth:`str.format` strings with named fields only.

A plugin may raise with a built-in id (``param.at_least`` for a component parameter out of range)
or :func:`add` its own; an id a front end has no translation for is shown in English.
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

#: Longest ``what`` / ``where`` / ``fix`` a message keeps (a safety net: values quoted in messages
#: go through :func:`zoo.guard.files.short` already, so no message grows with a hostile input).
MAX_PART = 600


def cap(text: Any) -> str | None:
    """``text`` cut to :data:`MAX_PART` characters (None stays None)."""
    if text is None:
        return None
    text = str(text)
    return text if len(text) <= MAX_PART else text[:MAX_PART - 3] + "..."


@dataclass(frozen=True)
class Message:
    """The templates of one id: the problem (``what``) and what to do (``fix``), either may be None.

    ``words``: the parameters whose value is itself a word a front end translates, each with its
    kind (``{"family": FAMILY}``: a component family's name; ``{"why": BUDGET_ORIGIN}``: where a memory
    budget came from).  The declaration belongs to the id, not to the parameter's name: a ``why`` of
    another message is not worded as a budget's origin.  A front end translates the kinds it knows
    (:func:`render`'s ``words``) and shows any other value as given."""

    what: str | None = None
    fix: str | None = None
    words: tuple[tuple[str, str], ...] = ()


#: Kinds of translatable parameter values (:attr:`Message.words`).
FAMILY, YAML_PROBLEM, BUDGET_ORIGIN = "family", "yaml_problem", "budget_origin"
_FAMILY_WORD, _YAML_WORD, _BUDGET_WORD = (("family", FAMILY),), (("problem", YAML_PROBLEM),), (("why", BUDGET_ORIGIN),)


_BUDGET = "building this model needs more than the budget of {limit} ({why}): "

#: id -> English templates.  Ids are ``area.name``; ``hint.*`` entries are fix sentences shared by
#: many errors.  Every id has a Chinese entry in ``zoo.ui.i18n.ERRORS_ZH`` (tests/ui/test_ui_messages.py).
MESSAGES: dict[str, Message] = {
    # ---------------------------------------------------------------- shared fix sentences
    "hint.did_you_mean": Message(fix="did you mean '{suggestion}'?"),
    "hint.remove_it": Message(fix="remove it"),
    "hint.example": Message(fix="e.g. {example}"),
    "hint.pass_integer_in": Message(fix="pass an integer in [{lo}, {hi}]"),
    "hint.pass_number_in": Message(fix="pass a number in {span}"),
    "hint.pass_positive_int": Message(fix="pass a positive integer (at most {hi})"),
    # ---------------------------------------------------------------- the registry
    "registry.unknown_family": Message("unknown component family '{family}'", words=_FAMILY_WORD),
    "registry.unknown_component": Message(
        "no {family} named '{name}'", "install the plugin that provides it, or pick a registered name",
        words=_FAMILY_WORD),
    "registry.broken_plugins": Message(fix="plugins that failed to load: {plugins}, see `zoo plugins`"),
    # ---------------------------------------------------------------- values in a spec
    "value.expected": Message("expected {expected}, got {value}"),
    "value.expected_list": Message("expected a list, got {value}"),
    "value.expected_bool": Message("expected true or false, got {value}"),
    "value.expected_int": Message("expected an integer, got {value}"),
    "value.expected_number": Message("expected a number, got {value}"),
    "value.expected_finite": Message("expected a finite number, got {value}"),
    "value.expected_string": Message("expected a string, got {value}"),
    "value.invalid": Message("invalid value {value}"),
    "value.positive_int": Message("must be a positive integer, got {value}"),
    "param.at_least": Message("{name} must be >= {minimum}, got {value}"),
    "value.must_be_finite": Message("must be a finite number, got {value}"),
    "value.must_be_finite_at_least": Message("must be a finite number >= {minimum}, got {value}"),
    "value.must_be_finite_positive": Message("must be a finite positive number, got {value}"),
    "value.must_be_bool": Message("must be true or false, got {value}"),
    "value.must_be_positive_int": Message("must be a positive integer, got {value}"),
    "value.must_be_int": Message("must be an integer, got {value} ({type})"),
    "value.must_be_int_in": Message("must be an integer in [{lo}, {hi}], got {value}"),
    "value.must_be_number": Message("must be a number, got {value} ({type})"),
    "value.must_be_in": Message("must be in {span}, got {value}"),
    "value.not_a_number": Message("not a number: {value}"),
    "option.fix_temperature": Message(fix="use do_sample=False for greedy decoding instead of temperature 0"),
    "option.fix_top_p": Message(fix="a smaller top_p keeps only the most likely token: use do_sample=False"),
    "option.fix_repetition_penalty": Message(fix="1 is off; 1.1 to 1.3 discourage repeats gently"),
    "option.integer_at_least": Message("{name} must be an integer >= {low}, got {value}"),
    "option.integer_in": Message("{name} must be an integer in {span}, got {value}"),
    "option.number_above": Message("{name} must be a finite number > {low}, got {value}"),
    "option.number_in": Message("{name} must be a finite number in {span}, got {value}"),
    # ---------------------------------------------------------------- the spec
    "spec.no_source": Message("no spec file or preset named '{name}'",
                              "pass a path to a YAML file or one of the preset names"),
    "spec.unknown_override": Message("unknown override '{field}'", "override a spec field"),
    "spec.unknown_field": Message("unknown field '{field}'"),
    "spec.missing_field": Message("missing required field '{field}'", "add `{field}: ...` to the spec"),
    "spec.unknown_arch": Message("unknown architecture '{arch}'"),
    "spec.unknown_parameter": Message("unknown parameter '{param}' for '{kind}'"),
    "spec.component_refused": Message("{text}"),
    "spec.component_docs": Message(fix="see the component's docs (`zoo components`)"),
    "spec.dropout": Message("dropout must be in [0, 1), got {value}"),
    "spec.derived_default": Message(fix="omit it (or write null) for the default {default}"),
    "spec.dense_d_ff_default": Message(fix="omit it (or write null) for d_ff"),
    "spec.unknown_head_param": Message("unknown head parameter '{param}'"),
    "spec.unknown_head": Message("unknown head '{head}'"),
    "spec.unknown_init": Message("unknown initialisation scheme '{scheme}'"),
    "spec.unknown_init_param": Message("init has no parameter '{param}'"),
    "spec.unknown_pooling": Message("unknown pooling '{pooling}'"),
    "spec.not_per_stack": Message("'{field}' cannot be overridden per stack", "move it to the top level"),
    "spec.heads_divide": Message("d_model {d_model} is not divisible by num_heads {num_heads}",
                                 "choose num_heads dividing d_model, or set head_dim explicitly"),
    "spec.kv_heads_divide": Message(
        "num_heads {num_heads} is not a multiple of num_kv_heads {num_kv_heads}",
        "use a divisor of num_heads (1 = multi-query, num_heads = multi-head)"),
    "yaml.invalid_at": Message("invalid YAML (line {line}, column {column}): {problem}", words=_YAML_WORD),
    "yaml.invalid": Message("invalid YAML: {problem}", words=_YAML_WORD),
    "yaml.fix": Message(fix="fix the YAML syntax"),
    "yaml.too_large": Message("the YAML is larger than {kib} KiB", "a spec is a few KB"),
    "yaml.not_text": Message("expected YAML text, got {type}"),
    "yaml.too_deep": Message("YAML nested deeper than {depth} levels{at}", "a spec is nested 2-3 levels; flatten it"),
    "yaml.bad_value": Message("YAML value cannot be read: {detail}", "quote the value or correct it"),
    "yaml.recursive_alias": Message("YAML alias refers to the node that contains it (line {line})",
                                    "remove the recursive alias"),
    "yaml.expands": Message("YAML expands to more than {limit} values (aliases, line {line})",
                            "remove the nested anchors/aliases ('&a', '*a')"),
    "yaml.duplicate_key": Message("duplicate key {key} (line {line})", "keep one of the two entries"),
    "spec.not_mapping": Message("a spec must be a mapping of fields, got {type}",
                                "start the file with e.g. `arch: decoder`"),
    # ---------------------------------------------------------------- guards
    "compat.undeclared": Message(
        "{purpose} needs {capability}, which {family} '{name}' (plugin {plugin}) does not declare",
        "switch {field} to one of the options, e.g. {example}", words=_FAMILY_WORD),
    "budget.tensor": Message(_BUDGET + "{field} = {value} makes a tensor of shape {shape}, {size}", words=_BUDGET_WORD),
    "budget.tensor_layers": Message(
        _BUDGET + "{field} = {value} makes a tensor of shape {shape}, {size} over all layers", words=_BUDGET_WORD),
    "budget.repeats": Message(
        _BUDGET + "the model needs {total}; {field} = {value} repeats '{name}' {shape} and the rest of "
                  "each layer", words=_BUDGET_WORD),
    "budget.allocated": Message(
        _BUDGET + "{allocated} allocated before this {size} tensor; {field} = {value} repeats every layer's "
                  "tensors", words=_BUDGET_WORD),
    "budget.makes": Message(_BUDGET + "the model needs {total}; {field} = {value} makes '{name}' {shape}, "
                                      "{size}", words=_BUDGET_WORD),
    "budget.fix": Message(fix="lower {field}, or pass a larger budget to build it anyway "
                              "(zoo.build / zoo.load(..., budget=BYTES), zoo build --budget SIZE)"),
    # ---------------------------------------------------------------- running
    "tokenizer.missing": Message("text given, but the model has no tokenizer",
                                 "pass tokenizer=zoo.tokenizer('byte') (or 'char', 'hf'), or save the "
                                 "checkpoint with zoo.save(model, path, tokenizer=tok)"),
    "generate.encoder_only": Message(
        "an encoder-only model does not generate text",
        "use zoo.run.pipelines.fill_mask(model, text) or zoo.run.pipelines.classify(...)"),
    "generate.too_long": Message("prompt ({prompt}) + max_new_tokens ({new}) exceeds max_len {max_len}",
                                 "ask for at most {room} new tokens"),
    "generate.too_many": Message("max_new_tokens {new} exceeds max_len {max_len}"),
    "generate.nothing_to_choose": Message(
        "at new token {step} every token is banned for {row} by the rules {rules}: nothing is left to "
        "choose", "relax a rule (a larger vocab_limit, a smaller no_repeat_ngram_size, fewer "
        "suppress_tokens / bad_words), or ask for fewer new tokens (max_new_tokens below {step})"),
    "chat.sandbox": Message("the template tried something the sandbox forbids: {detail}",
                            "use the model's published template"),
    "chat.refused": Message("the template refused the conversation: {detail}",
                            "follow the model's conversation rules (e.g. alternate user/assistant)"),
    "chat.failed": Message("the template failed on this conversation: {error}: {detail}",
                           "check the messages' fields against what the template reads"),
    # ---------------------------------------------------------------- experiments
    "experiment.unknown_field": Message("unknown field {field}"),
    "experiment.missing_field": Message("missing required field '{field}'", "add `{field}: ...`"),
    "checkpoint.resave": Message(fix="re-save it; zoo only reads valid safetensors files"),
    "checkpoint.too_short": Message("the file is too short to be a safetensors file"),
    "checkpoint.header_length": Message("header length {n} is larger than the file or than {mib} MiB"),
    "checkpoint.header_json": Message("the header is not valid JSON: {detail}"),
    "checkpoint.header_object": Message("the header is not a JSON object"),
    "checkpoint.metadata_strings": Message("__metadata__ must map strings to strings"),
    "checkpoint.entry_fields": Message("expected {{dtype, shape, data_offsets}}"),
    "checkpoint.unknown_dtype": Message("unknown dtype {dtype}"),
    "checkpoint.bad_shape": Message("invalid shape {shape}"),
    "checkpoint.offsets": Message("data_offsets {offsets} outside the data ({size} bytes)",
                                  "the file is truncated or damaged; re-save it"),
    "checkpoint.size_mismatch": Message("{n} bytes for shape {shape} of {dtype}"),
    "checkpoint.corrupt": Message("corrupt or truncated checkpoint: {cause}"),
    "transaction.busy": Message("'{root}' is being written by {who} (it holds {lock})",
                                fix="wait until it is done (zoo.save(..., wait=True) waits), or write to another folder"),
    "input.outside_contract": Message("{text} is outside {name}'s input contract: {description} ({reason})",
                                      fix="give input like {example}"),
    "spec.init_value": Message("must be a finite number in (0, 100], got {value}", fix="e.g. std: 0.02 (GPT-2), gain: 1.0"),
    "manifest.malformed": Message("{manifest} is malformed: {value}"),
    "manifest.fix": Message(fix="re-save the folder with zoo, or delete {manifest} to read its files as they are"),
    "experiment.not_mapping": Message("an experiment must be a mapping of fields, got {type}",
                                      "start the file with `name: ...`"),
    "experiment.bad_name": Message("invalid name {name}", "lower-case letters, digits and '_'"),
    "experiment.quick_nested": Message("a quick block cannot nest another"),
    "experiment.no_variant": Message("no variant named {name}"),
    "experiment.baseline_key": Message("{key} is not a key the variants set"),
    "experiment.budget_kind": Message(
        "must be exactly one of {{steps: N}}, {{tokens: N}}, {{flops: N}} (and optionally params: N)",
        "e.g. budget: {{flops: 2e12}} for an equal-compute comparison, or {{steps: 400, params: 2e5}} for "
        "equal parameter counts"),
    "experiment.grid_lists": Message("must map each key to a non-empty list of values"),
    "experiment.metric_names": Message("must be a list of metric names"),
    "experiment.unknown_metric": Message("unknown metric {metric} for task '{task}'"),
    "experiment.no_task_metric": Message("the task '{task}' has no metric {metric}",
                                         "name one of the task's metrics, or eval_loss"),
    "experiment.success_mapping": Message(
        "must be a mapping {{metric: threshold a seed must reach to count as a success}}"),
    "experiment.min_effect_mapping": Message("must be a mapping {{metric: smallest difference worth a verdict}}"),
    "experiment.tune_mapping": Message("must map override keys to lists of values to sweep"),
    "experiment.tune_two_values": Message(
        "a tune axis needs at least two distinct values, got {values}",
        "sweep e.g. {key}: [1.0e-3, 3.0e-3, 1.0e-2], search a range {key}: {{low: 1.0e-4, high: 1.0e-2, "
        "log: true}}, or set one value in train: / base:"),
    "experiment.range_field": Message("unknown range field {field}"),
    "experiment.range_missing": Message("a range needs both low and high; {field} is missing"),
    "experiment.range_order": Message("a range needs low < high, got low {low}, high {high}",
                                      "swap them, or list the one value in train: / base: instead of tuning it"),
    "experiment.range_log": Message("a log range needs low > 0, got {low}", "raise low above 0, or set log: false"),
    "experiment.train_mapping": Message("must be a mapping of trainer options"),
    "experiment.set_by_experiment": Message("'{key}' is set by the experiment (budget, seeds, task)"),
    "experiment.overrides_mapping": Message('must be a mapping of overrides', None),
    "experiment.baseline_kind": Message('must be a variant name or a mapping {{key: value}}', None),
    "experiment.probe_texts": Message('must be a text or a list of texts (1-200 characters each)', None),
    "experiment.plugin_names": Message('must be a list of plugin entry-point names', None),
    "experiment.must_be_text": Message('must be text', None),
    "experiment.executor_mapping": Message('must be a mapping of submitit parameters', None),
    "experiment.values_distinct": Message('the values must be distinct', None),
    "experiment.tune_no_key": Message('names no key to sweep', None),
    "experiment.base_kind": Message('must be a preset name or a spec mapping, got {type}', None),
    "experiment.override_key": Message('invalid override key {key}',
                                       'a field name or a dotted path (norm.placement, train.lr)'),
    "experiment.variants_or_grid": Message('give exactly one of `variants:` (a list) or `grid:` (a mapping of lists)',
                                           None),
    "experiment.variants_list": Message('must be a non-empty list of {{name, set}}', None),
    "experiment.variant_mapping": Message('each variant is a mapping with a `name` (and `set:` overrides)', None),
    "experiment.variant_field": Message('unknown variant field', None),
    "experiment.variant_name": Message('invalid variant name {name}', 'letters, digits, _ . = , + -'),
    "experiment.grid_size": Message('the grid makes {size} variants; at most {limit} are planned',
                                    'use fewer values per key, or split the experiment'),
    "experiment.variants_count": Message('{size} variants; at most {limit} are planned', None),
    "experiment.variant_twice": Message('two variants are named {name}', 'give every variant its own name'),
    "experiment.seeds_kind": Message('must be a count or a list of integers', None),
    "experiment.seed_count": Message('a seed count must be in [1, 100], got {value}', None),
    "experiment.seeds_distinct": Message('seeds must be distinct', None),
    "experiment.seeds_values": Message('must be a count or a list of distinct non-negative integers, got {value}',
                                       None),
    "experiment.task_kind": Message('must be a task name or {{kind: NAME, ...params}}', None),
    "experiment.tolerance_alone": Message('goes with params: N', 'add params: N, or remove it'),
    "experiment.max_steps": Message('at most {limit} steps, got {value}', None),
    "experiment.must_be_integer": Message('must be an integer', None),
    "experiment.tune_overlap": Message('a key cannot be both swept by tune and set by a variant',
                                       'remove it from the variants (or from tune)'),
    # the plugin's package ships in the zoo clone's plugins/ (not on PyPI): the path is the fix
    "experiment.plugin_missing": Message('this experiment needs the plugin {plugin}, which is not installed',
                                         'from the root of the zoo clone: pip install ./plugins/{package} '
                                         '(it ships there, not on PyPI); a running zoo ui lists it after a restart'),
    # a third party's plugin: its own package
    "experiment.plugin_missing_package": Message(
        'this experiment needs the plugin {plugin}, which is not installed',
        'pip install the package that provides it (zoo-style name: {package}); a running zoo ui lists it after '
        'a restart'),
    "experiment.select_metric": Message("cannot select on {metric}: not a metric of task '{task}' with a direction"),
    "experiment.no_validation": Message(
        "the task '{task}' has no validation split to select on",
        "tune on a synthetic task (copy, mqar, lag, modadd, ...), or compare at one setting"),
    "experiment.unknown_train_option": Message("unknown trainer option {option}"),
    "threshold.not_mapping": Message("a threshold is a mapping with metric and value, got {value}"),
    "threshold.unknown_field": Message("unknown threshold field {field}", "use metric, value and stop"),
    "threshold.metric_name": Message("must be a metric name, got {value}"),
    "threshold.list": Message("must be a list of thresholds, got {value}"),
    "threshold.stop": Message(fix="stop: true ends the run there"),
    "threshold.same_metric": Message("two thresholds make the same metric {metric}", "remove one"),
    "input.unknown_characters": Message(
        "{count} of the {counted} characters of {text} are unknown to {name}'s tokenizer ({shown}): the "
        "model would read them as <unk>"),
    "input.alphabet": Message(fix="give text in the model's alphabet"),
    "input.like": Message(fix="give text like {example}"),
    # ---------------------------------------------------------------- running an experiment
    "experiment.task_arch": Message("task '{task}' trains {task_arch} models; this spec is {arch}",
                                    "use a {task_arch} base spec"),
    "experiment.no_step": Message("the budget gives variant {variant} no training step ({flops} FLOPs per step)",
                                  "raise the budget"),
    "experiment.tune_range_run": Message(
        "tune.{key} is a range, which `zoo experiment run` cannot sweep",
        "search it with `zoo experiment tune FILE --trials N`, or list the values to sweep, e.g. "
        "{key}: [1.0e-3, 3.0e-3, 1.0e-2]"),
    "experiment.code_changed": Message("the code changed since the experiment was planned: {changes}",
                                       "rerun the same command: it plans the trials again with this code"),
    "experiment.mismatched": Message(
        "{n} finished trial(s) do not match this run: {shown}{more}",
        "pass --rerun-mismatched (rerun_mismatched=True) to train them again, or another --out"),
    "experiment.trials_failed": Message(
        "{n} trial(s) failed; first: {trial}: {cause}",
        "see {trial}/worker.log in the results folder; rerun the same command to retry them (finished "
        "trials are kept)"),
    "experiment.out_symlink": Message("the results folder '{folder}' is a symlink; zoo does not write through links",
                                      "pass a real folder"),
    "experiment.out_not_folder": Message("'{folder}' exists and is not a folder (a file, a FIFO or a device)",
                                         "pass --out NEW_FOLDER"),
    "experiment.record_bad": Message("the folder's {record} is {reason}", "pass another --out, or delete the folder"),
    "experiment.other_experiment": Message(
        "the folder holds the results of another experiment ({name}, or this one with other settings)",
        "pass another --out, or delete the folder"),
    "experiment.trial_symlink": Message("{folder} is a symlink; zoo does not write or delete through links",
                                        "remove the link"),
    # -- a second run of the same folder, and what the plan refuses up front (issue 34)
    "experiment.reused": Message(
        "{n} of {total} trials were taken from the earlier run in '{folder}' (a finished trial is not "
        "trained again)"),
    "experiment.reused_fix": Message(
        fix="to start fresh, pass --fresh (the earlier folder is moved aside, nothing is deleted) or another --out"),
    "experiment.set_aside": Message("the earlier results were moved to '{folder}' (kept, not deleted)"),
    "experiment.aside_full": Message("'{folder}' already has {limit} earlier runs set aside beside it",
                                     "remove or move some of the '{folder}.earlier-N' folders, or pass another --out"),
    "experiment.fix_variant_max_len": Message(fix="set max_len: {need} (or more) in variant {variant}'s set:"),
    "results.none": Message("no experiment results in this folder", "pass the --out folder of `zoo experiment run`"),
    "results.record_bad": Message("the folder's {record} is {reason}", "run the experiment again into a new --out"),
    "results.trials_bad": Message("the folder's {record} is damaged ({kind}: its trials are not trial records)",
                                  "run the experiment again into a new --out"),
    # ---------------------------------------------------------------- training
    "train.loss_nonfinite": Message(
        "the loss became {loss} at step {step}; the run stopped without saving; {kept}",
        "lower the learning rate (--lr) or keep gradient clipping on (--grad-clip), then resume from the "
        "kept checkpoint"),
    "train.weight_nonfinite": Message(
        "step {step}: the weight {name} became non-finite ({kind}); the run stopped without saving it",
        "lower the learning rate (--lr) or keep gradient clipping on (--grad-clip), then resume from the "
        "kept checkpoint"),
    "train.weight_nonfinite_kept": Message(
        "step {step}: the weight {name} became non-finite ({kind}); the run stopped without saving it; {kept}",
        "lower the learning rate (--lr) or keep gradient clipping on (--grad-clip), then resume from the "
        "kept checkpoint"),
    "task.symbols": Message("a task needs {n} symbols; at most {limit} exist", "use a vocabulary of at most {room}"),
    "task.heldout_draw": Message("could not draw enough examples on one side of the held-out split",
                                 "use a held-out fraction between 0.05 and 0.5"),
    "task.vocab": Message("the task has {n} tokens, the spec's vocab_size is {vocab_size}", "fit the vocabulary"),
    "task.max_len": Message("the task needs sequences of {need} tokens, max_len is {max_len}",
                            "set max_len: {need} (or more) in the base spec"),
    "train.tensorboard_missing": Message(
        "tensorboard=True needs the tensorboard package",
        "pip install 'zoo-transformers[track]' (or pip install tensorboard), or train without tensorboard"),
    "train.tensorboard_symlink": Message("{folder} is a symlink", "remove it: zoo writes only inside the run folder"),
    "train.kept_step": Message("'{out}' keeps the checkpoint of step {saved}"),
    "train.kept_nothing": Message("nothing was saved"),
    "train.kept_last": Message("'{out}' keeps its last good save"),
}


def cause(exc: Any, name: str = "cause") -> dict[str, Any]:
    """The params of an error that words another (``"corrupt or truncated checkpoint: {cause}"``):
    ``cause``, the inner error's English, and ``cause_id`` / ``cause_params``, from which a front end
    words the inner error in its own language (``zoo.ui.i18n.error_text``).  ``exc``: a ``ZooError``,
    a foreign exception (torch's, safetensors', the OS's: its own text, ``cause_id`` None, which a
    front end shows quoted), or a mapping with ``what`` / ``message_id`` / ``params`` (a record of
    one, e.g. a worker's).  ``name``: the parameter (``cause``)."""
    get = exc.get if isinstance(exc, Mapping) else (lambda key, default=None: getattr(exc, key, default))
    return {name: get("what", None) or str(exc), f"{name}_id": get("message_id", None),
            f"{name}_params": dict(get("params", None) or {})}


def part(name: str, message_id: str, **params: Any) -> dict[str, Any]:
    """The params of a sentence inside another, worded from its own id: ``{name}`` the English
    ``what`` of ``message_id`` with ``params``, ``{name}_id`` and ``{name}_params`` for a front end to
    word it again (``part("kept", "train.kept_step", out=..., saved=3)``: the ``{kept}`` of
    ``train.loss_nonfinite``).  As :func:`cause`, but for one of the catalogue's own sentences."""
    what, _ = render(message_id, params, ())
    return {name: what, f"{name}_id": message_id, f"{name}_params": dict(params)}


def add(message_id: str, what: str | None = None, fix: str | None = None,
        words: Mapping[str, str] | None = None) -> None:
    """Add an entry of your own (a plugin's, a front end's): ``add("myplugin.rank", what="rank {r} is
    too large", fix="use a rank below {limit}")``.  ``words``: parameters whose value a front end
    translates, with their kind (``{"family": messages.FAMILY}``, :attr:`Message.words`).  Adding the
    same entry again is harmless; an id that already means something else is a ``ValueError``."""
    entry = Message(what, fix, tuple(sorted((words or {}).items())))
    if not message_id or (what is None and fix is None):
        raise ValueError(f"a message needs an id and a template, got {message_id!r}")
    if MESSAGES.get(message_id, entry) != entry:
        raise ValueError(f"message id {message_id!r} is taken: {MESSAGES[message_id]}")
    MESSAGES[message_id] = entry


def fields(template: str | None) -> set[str]:
    """The parameter names of a template (``"no {family} named '{name}'"`` -> ``{family, name}``)."""
    return {f for _, f, _, _ in string.Formatter().parse(template or "") if f is not None}


def fix_ids(message_id: str, fix: Any = None) -> tuple[str, ...]:
    """The ids whose fix templates make an error's fix: ``fix`` as given (one id, or several; None
    items skipped), or, when ``fix`` is None, the entry's own fix if it has one."""
    if fix is None:
        return (message_id,) if MESSAGES[message_id].fix is not None else ()
    ids = (fix,) if isinstance(fix, str) else tuple(f for f in fix if f)
    for i in ids:
        if MESSAGES[i].fix is None:  # a KeyError for an unknown id: a programming error
            raise ValueError(f"message {i!r} has no fix template")
    return ids


def render(message_id: str, params: Mapping[str, Any], fixes: Iterable[str] = (),
           catalogue: Mapping[str, Any] = MESSAGES, words: Mapping[str, Callable[[Any], Any]] | None = None,
           join: Callable[[list[str]], str] = "; ".join) -> tuple[str, str | None] | None:
    """``(what, fix)`` of an error in the language of ``catalogue`` (id -> an object with ``what``
    and ``fix`` templates: a :class:`Message`, or a ``(what, fix)`` pair), or None when it lacks the
    id or one of the ``fixes`` (the caller then shows the English).  ``words`` translate a value by
    its kind (``{FAMILY: ...}``), for the parameters the ids declare of that kind
    (:attr:`Message.words`, read from :data:`MESSAGES`); ``join`` joins the fix sentences."""
    def entry(i):
        e = catalogue.get(i)
        return Message(*e) if isinstance(e, tuple) else e

    parts_ids = tuple(fixes)
    main, parts = entry(message_id), [entry(i) for i in parts_ids]
    if main is None or main.what is None or any(p is None or p.fix is None for p in parts):
        return None
    kinds = {p: kind for i in (message_id, *parts_ids) for p, kind in getattr(MESSAGES.get(i), "words", ())}
    values = {k: (words[kinds[k]](v) if words and kinds.get(k) in words else v) for k, v in params.items()}
    fix = join([p.fix.format(**values) for p in parts]) if parts else None
    return cap(main.what.format(**values)), cap(fix)

"""The experiment tasks (family ``task``): deterministic from a seed, held-out data that never
overlaps training, labels that follow each task's definition, and exact metrics on hand-worked
cases.  (``tests/run/test_pipelines.py`` is about ``zoo.run.pipelines``: fill-mask and classify.)"""
import dataclasses

import pytest
import torch
from torch import nn

import zoo
from zoo.experiment.tasks import IGNORE, example_hash, generation_exact, get_task
from zoo.train.config import TrainConfig

SYNTHETIC = {"copy": {"length": 6, "vocab": 8}, "reverse": {"length": 5, "vocab": 8},
             "modadd": {"p": 11}, "lag": {"length": 12, "lag": 2, "vocab": 6},
             "mqar": {"vocab_size": 16, "seq_len": 24, "num_kv_pairs": 4},
             "copy_var": {"length": 6, "min_length": 2, "vocab": 4}}


def make(name):
    kind = name.split("_")[0]
    return get_task(kind, SYNTHETIC[name])


def objective(task, batch=16):
    spec = zoo.spec("gpt_tiny", max_len=64)
    obj, tok, spec, info = task.prepare_objective(TrainConfig(batch_size=batch), spec, fit_vocab=True)
    return obj, spec


def test_every_task_is_registered_and_listed():
    names = zoo.get_registry().names("task")
    assert {"mqar", "copy", "reverse", "modadd", "lag", "numerals", "poems"} <= set(names)
    for comp in zoo.list_components("task"):
        assert len(comp.doc) > 150, f"{comp.name} needs a paragraph on what it probes"


def test_components_command_lists_tasks():
    from click.testing import CliRunner

    from zoo.commands.components import command

    out = CliRunner().invoke(command, ["task"]).output
    for name in ("mqar", "copy", "lag", "modadd", "numerals", "poems"):
        assert f"  {name} " in out


@pytest.mark.parametrize("name", list(SYNTHETIC))
def test_deterministic_from_the_seed(name):
    task = make(name)
    obj, _ = objective(task)
    a = obj.train_batch(torch.Generator().manual_seed(5), 16)
    b = obj.train_batch(torch.Generator().manual_seed(5), 16)
    c = obj.train_batch(torch.Generator().manual_seed(6), 16)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["ids"], c["ids"])
    ev1, ev2 = obj.eval_set(), make(name).prepare_objective(
        TrainConfig(batch_size=16), zoo.spec("gpt_tiny", max_len=64), fit_vocab=True)[0].eval_set()
    assert all(torch.equal(x[k], y[k]) for x, y in zip(ev1, ev2) for k in x)


def _rows(batches):
    out = set()
    for b in batches:
        for i in range(b["ids"].size(0)):
            ids = b["ids"][i]
            if "mask" in b:
                ids = ids[b["mask"][i]]
            out.add(tuple(ids.tolist()))
    return out


@pytest.mark.parametrize("name", list(SYNTHETIC))
def test_heldout_never_overlaps_training(name):
    task = make(name)
    obj, _ = objective(task, batch=64)
    held = _rows(obj.eval_set())
    train = _rows(obj.train_batch(torch.Generator().manual_seed(s), 64) for s in range(60))
    assert held and train
    assert not (held & train)
    # the split is what keeps them apart: unfiltered draws do hit held-out examples (small spaces)
    if name in ("modadd", "copy_var"):
        raw = task.draw(torch.Generator().manual_seed(0), 4000)
        assert bool(task.is_heldout(raw).any()) and not bool(task.is_heldout(raw).all())


def test_heldout_fraction_of_modadd_table():
    task = get_task("modadd", {"p": 23, "heldout": 0.5})
    ev = task.eval_examples()
    n = ev["ids"].size(0)
    assert 0.4 * 23 * 23 < n < 0.6 * 23 * 23  # about half of the table, every pair at most once
    assert len({(int(a), int(b)) for a, _, b, _ in ev["ids"].tolist()}) == n


def test_labels_follow_each_definition():
    g = torch.Generator().manual_seed(1)
    # copy: x | x, labels are the next tokens of the second copy
    ex = make("copy").draw(g, 8)
    for ids, lab, s in zip(ex["ids"], ex["labels"], ex["start"]):
        n = int(s) - 1
        assert ids[n] == 8 and torch.equal(ids[n + 1:], ids[:n - 1])
        assert torch.equal(lab[n:], ids[:n]) and (lab[:n] == -1).all()
    # reverse: the answer is the prompt backwards
    ex = make("reverse").draw(g, 8)
    for ids, lab, s in zip(ex["ids"], ex["labels"], ex["start"]):
        n = int(s) - 1
        assert torch.equal(lab[n:], ids[:n].flip(0))
    # modadd: a + b = (a + b) mod p
    ex = make("modadd").draw(g, 50)
    assert torch.equal(ex["labels"][:, 3], (ex["ids"][:, 0] + ex["ids"][:, 2]) % 11)
    assert (ex["ids"][:, 1] == 11).all() and (ex["ids"][:, 3] == 12).all()
    # lag: position t answers x[t - lag]
    ex = make("lag").draw(g, 4)
    assert torch.equal(ex["labels"][:, 2:], ex["ids"][:, :-2]) and (ex["labels"][:, :2] == -1).all()
    long = make("lag").draw(g, 4, length=24)
    assert long["ids"].shape == (4, 24)


def test_mqar_is_zoologys_definition():
    c = SYNTHETIC["mqar"]
    ex = make("mqar").draw(torch.Generator().manual_seed(3), 32)
    N, half = c["num_kv_pairs"], c["vocab_size"] // 2
    for ids, lab in zip(ex["ids"], ex["labels"]):
        keys, values = ids[0:2 * N:2], ids[1:2 * N:2]
        assert (keys < half).all() and (values >= half).all()
        assert len(set(keys.tolist())) == N and len(set(values.tolist())) == N  # without replacement
        pos = (lab >= 0).nonzero().squeeze(1)
        assert len(pos) == N  # every key queried once, after the context
        assert (pos >= 2 * N).all()
        kv = dict(zip(keys.tolist(), values.tolist()))
        for p in pos.tolist():
            assert kv[int(ids[p])] == int(lab[p])  # the query key is followed by its value
            if p + 1 < len(ids):
                assert int(ids[p + 1]) == int(lab[p])  # ... which is the next input token


def test_mqar_without_filler_puts_the_queries_right_after_the_pairs():
    """Zoology's generator without ``random_non_queries``: ``k1 v1 .. kN vN`` then every key once, in
    a random order, each followed by its value; nothing else (``seq_len = 4N``).  Pinned on a seed."""
    task = get_task("mqar", {"vocab_size": 16, "seq_len": 16, "num_kv_pairs": 4, "filler": False})
    ex = task.draw(torch.Generator().manual_seed(0), 64)
    assert ex["ids"].shape == (64, 16)
    assert ex["ids"][0].tolist() == [2, 12, 3, 9, 4, 8, 6, 15, 4, 8, 2, 12, 3, 9, 6, 15]
    orders = set()
    for ids, lab in zip(ex["ids"], ex["labels"]):
        keys, values = ids[0:8:2].tolist(), ids[1:8:2].tolist()
        kv = dict(zip(keys, values))
        q = ids[8::2].tolist()  # the query keys: the pairs' keys, each once
        assert sorted(q) == sorted(keys)
        orders.add(tuple(keys.index(k) for k in q))
        assert (lab >= 0).nonzero().squeeze(1).tolist() == [8, 10, 12, 14]  # every query answered
        assert [int(lab[p]) for p in (8, 10, 12, 14)] == [kv[k] for k in q]
        assert ids[9::2].tolist() == [kv[k] for k in q]  # each answer is the next input
    assert len(orders) > 10  # the query order is random, not the context's
    longer = get_task("mqar", {"vocab_size": 16, "seq_len": 24, "num_kv_pairs": 4, "filler": False})
    lab = longer.draw(torch.Generator().manual_seed(1), 8)["labels"]
    assert ((lab >= 0).nonzero()[:, 1].unique().tolist()) == [8, 10, 12, 14]  # the tail is unscored
    with pytest.raises(zoo.ZooError) as e:
        get_task("mqar", {"filler": "no"})
    assert "filler" in str(e.value)


class Rule(nn.Module):
    """A "model" from a rule: logits one-hot at ``rule(prefix)`` for every position (teacher
    forced, it sees only ``ids[:t + 1]`` unless ``peek``: then it reads ``ids[t + 1]``)."""

    def __init__(self, rule, vocab, peek=False):
        super().__init__()
        self.rule, self.vocab, self.peek = rule, vocab, peek
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, ids, attention_mask=None):
        B, T = ids.shape
        out = torch.zeros(B, T, self.vocab)
        for b in range(B):
            for t in range(T):
                if self.peek:
                    nxt = int(ids[b, t + 1]) if t + 1 < T else 0
                else:
                    nxt = self.rule(ids[b, :t + 1].tolist())
                out[b, t, nxt] = 1.0
        return out


def test_metrics_on_a_hand_worked_copy_example():
    task = get_task("copy", {"length": 2, "vocab": 2})
    a, b, sep = (int(task.sym2id[i]) for i in range(3))
    # examples "ab|ab" and "bb|bb": inputs a b | a and b b | b, answers "ab" and "bb"
    ex = {"ids": torch.tensor([[0, 1, 2, 0], [1, 1, 2, 1]]), "labels": torch.tensor([[-1, -1, 0, 1], [-1, -1, 1, 1]]),
          "start": torch.tensor([3, 3])}
    always_b = Rule(lambda prefix: b, task.tok.vocab_size)
    m = task.score(always_b, ex, "")
    # predictions at the 4 answer positions: b b | b b; right: (a->no, b->yes), (b->yes, b->yes)
    assert m["acc"] == pytest.approx(3 / 4) and m["exact"] == pytest.approx(1 / 2)
    assert m["gen_exact"] == pytest.approx(1 / 2)  # generates "bb" twice: right for the second only

    def copy_rule(prefix):
        if sep not in prefix:
            return a  # before the separator nothing is scored
        n = prefix.index(sep)
        return prefix[len(prefix) - n - 1]  # the token n + 1 places back

    perfect = task.score(Rule(copy_rule, task.tok.vocab_size), ex, "")
    assert perfect == {"acc": 1.0, "exact": 1.0, "gen_exact": 1.0, "past_acc": 1.0, "past_exact": 1.0}
    assert m["past_acc"] == pytest.approx(3 / 4) and m["past_exact"] == pytest.approx(1 / 2)


def test_generation_exposes_a_model_that_reads_the_future():
    """Teacher-forced accuracy of a model that reads token t+1 is perfect except the very last
    answer token; generated from the prompt, it never has the next token, so it fails."""
    task = get_task("copy", {"length": 5, "vocab": 8})
    ex = task.eval_examples()
    b = task.to_batch(ex)
    cheat = Rule(None, task.tok.vocab_size, peek=True)
    m = task.score(cheat, ex, "")
    last_right = (b["labels"][:, -1] == 0).float().mean()  # the cheat says id 0 at the end
    assert m["acc"] == pytest.approx((4 + float(last_right)) / 5)
    assert m["gen_exact"] == 0.0
    assert generation_exact(cheat, b, ex["start"], None) == 0.0


def test_lag_metrics_at_train_and_twice_the_length():
    task = get_task("lag", {"length": 8, "lag": 2, "vocab": 4})
    oracle = Rule(lambda prefix: prefix[-3] if len(prefix) >= 3 else 0, task.tok.vocab_size)
    m = task.evaluate(oracle)  # position t (0-based) answers x[t - 2] = prefix[-3]
    assert m["acc"] == 1.0 and m["acc_2x"] == 1.0 and m["exact"] == 1.0
    wrong = Rule(lambda prefix: prefix[-2] if len(prefix) >= 2 else 0, task.tok.vocab_size)
    w = task.evaluate(wrong)  # lag 1 instead of 2: right only where x[t-1] == x[t-2] (1/4 by chance)
    assert 0.1 < w["acc"] < 0.4 and w["exact"] < 0.05


def test_example_hash_ignores_padding():
    ids = torch.tensor([[1, 2, 3, 0, 0], [1, 2, 3, 5, 5]])
    h = example_hash(ids, torch.tensor([3, 3]))
    assert h[0] == h[1]
    assert example_hash(ids[:, :3])[0] != example_hash(ids[:, :4])[0]


def test_numerals_and_poems_hold_out_whole_examples():
    num = get_task("numerals", {"train_examples": 3000, "eval_examples": 100})
    train_numbers = {s for s, _ in num.train_pairs}
    held = [s for s, _ in num.eval_pairs if len(s) > 1]
    assert held and not (set(held) & train_numbers)
    assert num.arch == "encoder_decoder"
    poems = get_task("poems")
    obj, tok, spec, info = poems.prepare_objective(TrainConfig(seed=7), zoo.spec("gpt_tiny"), fit_vocab=True)
    assert info["eval_examples"] > 0 and info["train_examples"] > 0
    obj2 = poems.prepare_objective(TrainConfig(seed=8), zoo.spec("gpt_tiny"), fit_vocab=True)[0]
    assert torch.equal(obj.eval_ids, obj2.eval_ids)  # one split for every seed: paired comparisons


def test_task_errors_name_the_field():
    with pytest.raises(zoo.ZooError) as e:
        get_task("mqar", {"num_kv_pairs": 40, "vocab_size": 16})
    assert "task" in e.value.where
    with pytest.raises(zoo.ZooError) as e:
        get_task("mqra")
    assert "mqar" in str(e.value)
    with pytest.raises(zoo.ZooError) as e:
        get_task("copy", {"lenght": 3})
    assert e.value.where.endswith("lenght")

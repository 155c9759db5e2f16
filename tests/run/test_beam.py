"""Beam search (zoo.run.beam, GenerationOptions.num_beams...): the same tokens as transformers' beam
search on converted GPT-2, Llama, T5, BART and Marian models (random weights, built from config
objects, offline), with and without a stop token, length penalties, early stopping, no-repeat
n-grams and several returned sequences; cache = no-cache; the n-gram ban against a plain loop."""
from pathlib import Path

import pytest
import torch

import zoo
from zoo.run.sampling import banned_ngram_tokens

pytest.importorskip("transformers")
from convert_cases import CASES, marian, padded  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FAMILIES = ["gpt2", "llama", "t5", "bart", "marian"]
#: (num_beams, length_penalty, early_stopping, no_repeat_ngram_size, num_return_sequences)
SETTINGS = [(3, 1.0, False, 0, 1), (4, 2.0, True, 0, 2), (3, -1.0, False, 2, 3), (2, 0.0, False, 0, 1)]
NEW = 7


def _models(case):
    from zoo.convert import from_transformers

    make, kind, extra = CASES[case]
    hf = marian(seed=4) if case == "marian" else make()  # a seed whose beams differ from greedy
    return hf, from_transformers(hf), kind, extra.get("start", 0)


def _trim(seq: torch.Tensor, L0: int, stop):
    """Each row's new tokens up to and including its stop token (the fill after it differs: HF
    fills with ``pad_token_id or eos``)."""
    rows = []
    for r in seq.tolist():
        new = r[L0:]
        if stop is not None and stop in new:
            new = new[:new.index(stop) + 1]
        rows.append(new)
    return rows


def _stop_token(z, src, am, kind, start):
    """A token the model actually produces in its third step (greedy, row 0), so that beams stop
    in the middle of the search and the finished-hypothesis logic is exercised."""
    kw = dict(max_new_tokens=3) | ({"attention_mask": am} if kind == "decoder" else {"decoder_start_id": start})
    return int(z.generate(src, **kw)[0, -1])


@pytest.mark.parametrize("case", FAMILIES)
@torch.no_grad()
def test_beam_search_equals_transformers(case):
    hf, z, kind, start = _models(case)
    if kind == "decoder":
        src, am, _ = padded(left=True)
        L0 = src.size(1)
    else:
        src, am = padded()[0], None  # unpadded sources: BART's positions ignore padding in HF
        L0 = 1
    stop = _stop_token(z, src, am, kind, start)
    compared = 0
    for K, lp, early, ngram, R in SETTINGS:
        for eos in (stop, None):
            kw = dict(max_new_tokens=NEW, num_beams=K, length_penalty=lp, early_stopping=early,
                      no_repeat_ngram_size=ngram, num_return_sequences=R, do_sample=False,
                      eos_token_id=eos, pad_token_id=0)
            if kind == "decoder":
                ref = hf.generate(input_ids=src, attention_mask=am, **kw)
                out = z.generate(src, attention_mask=am, max_new_tokens=NEW, num_beams=K,
                                 length_penalty=lp, early_stopping=early, no_repeat_ngram_size=ngram,
                                 num_return_sequences=R, stop_tokens=eos, pad_id=0)
            else:
                ref = hf.generate(input_ids=src, decoder_start_token_id=start, forced_bos_token_id=None,
                                  forced_eos_token_id=None, **kw)
                out = z.generate(src, max_new_tokens=NEW, num_beams=K, length_penalty=lp,
                                 early_stopping=early, no_repeat_ngram_size=ngram,
                                 num_return_sequences=R, stop_tokens=eos, decoder_start_id=start,
                                 forced_bos_id=None, forced_eos_id=None)  # off, as on HF's side
            assert out.shape[0] == src.size(0) * R
            assert out.shape[1] == ref.shape[1], (K, lp, early, ngram, R, eos)
            assert torch.equal(out[:, :L0], ref[:, :L0])
            assert _trim(out, L0, eos) == _trim(ref, L0, eos), (K, lp, early, ngram, R, eos)
            compared += 1
    assert compared == 2 * len(SETTINGS)
    # beam search is not greedy decoding here (else the comparison would prove little)
    greedy = z.generate(src, max_new_tokens=NEW, **({"attention_mask": am} if kind == "decoder"
                                                     else {"decoder_start_id": start}))
    beams = z.generate(src, max_new_tokens=NEW, num_beams=4, **(
        {"attention_mask": am} if kind == "decoder" else {"decoder_start_id": start}))
    assert not torch.equal(greedy, beams)


@pytest.mark.parametrize("case", ["llama", "t5"])
def test_beam_search_with_and_without_the_cache(case):
    _, z, kind, start = _models(case)
    src, am, _ = padded(left=kind == "decoder")
    kw = dict(max_new_tokens=NEW, num_beams=3, num_return_sequences=2, stop_tokens=5,
              no_repeat_ngram_size=2, repetition_penalty=1.3)
    kw.update({"attention_mask": am} if kind == "decoder" else {"decoder_start_id": start})
    assert torch.equal(z.generate(src, **kw), z.generate(src, use_cache=False, **kw))


def test_beams_stream_and_text():
    """stream() yields the best sequence's tokens once the search is over; the text helpers and
    num_return_sequences give a list per prompt."""
    model = zoo.build("gpt_tiny", num_layers=1)
    tok = zoo.tokenizer("byte")
    ids = [[5, 6, 7], [8, 9]]
    full = model.generate(ids, max_new_tokens=5, num_beams=3)
    steps = torch.stack(list(zoo.run.generate.stream(model, ids, 5, num_beams=3)), dim=1)
    assert torch.equal(steps, full[:, -5:])
    texts = model.generate(["ab", "c"], 4, tokenizer=tok, num_beams=3, num_return_sequences=2)
    assert len(texts) == 2 and all(isinstance(t, list) and len(t) == 2 for t in texts)


def test_bad_beam_options_are_zoo_errors():
    model = zoo.build("gpt_tiny", num_layers=1)
    for bad, where in [(dict(num_beams=0), "num_beams"), (dict(num_beams=2, num_return_sequences=3),
                       "num_return_sequences"), (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size"),
                       (dict(length_penalty=float("nan")), "length_penalty"),
                       (dict(early_stopping="never"), "early_stopping")]:
        with pytest.raises(zoo.ZooError) as e:
            model.generate([1, 2], max_new_tokens=2, **bad)
        assert e.value.where == f"generate.{where}"


def test_no_repeat_ngram_ban_against_a_loop():
    """The vectorised ban equals the rule written out per row: every earlier n-gram whose first
    n - 1 tokens equal the last n - 1 tokens bans its last token; windows over padding do not."""
    g = torch.Generator().manual_seed(0)
    seq = torch.randint(0, 4, (6, 12), generator=g)
    real = torch.ones_like(seq, dtype=torch.bool)
    real[1, :3] = False
    real[4, :7] = False
    for n in (1, 2, 3):
        got = banned_ngram_tokens(seq, real, n, 5)
        want = torch.zeros_like(got)
        for r in range(seq.size(0)):
            toks = seq[r].tolist()
            first = int((~real[r]).sum())
            tail = tuple(toks[len(toks) - n + 1:]) if n > 1 else ()
            for i in range(first, len(toks) - n + 1):
                if tuple(toks[i:i + n - 1]) == tail:
                    want[r, toks[i + n - 1]] = True
        assert torch.equal(got, want), n
        assert got.any()


def test_zoo_run_beams_and_the_run_tab():
    """``zoo run --beams`` and the Run tab's beam controls reach the beam search: their text equals
    the API's beam-search text (and differs from greedy on this checkpoint)."""
    from click.testing import CliRunner

    from zoo.commands.run import command as run_command
    from zoo.ui import run_tab

    path = str(Path(__file__).resolve().parents[2] / "checkpoints" / "poet_gpt")
    model = zoo.load(path)
    prompt = "床前明月光，"
    want = model.generate(prompt, 12, num_beams=4, no_repeat_ngram_size=2)
    assert want != model.generate(prompt, 12, no_repeat_ngram_size=2)
    result = CliRunner().invoke(run_command, [path, "-p", prompt, "-n", "12",
                                              "--beams", "4", "--no-repeat-ngram-size", "2"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == prompt + want  # the speed line goes to stderr
    names = [name for name, _ in run_tab.ui_options()]
    assert {"num_beams", "length_penalty", "no_repeat_ngram_size"} <= set(names)
    shown = list(run_tab.run("poet_gpt", prompt, temperature=0, max_new_tokens=12, num_beams=4,
                             no_repeat_ngram_size=2))
    assert shown[-1][0] == want


def test_beam_sampling_is_seeded():
    """Beam sampling (do_sample with num_beams > 1): reproducible with a seed, and a different seed
    can pick different beams, while greedy beam search ignores the seed."""
    model = zoo.build("gpt_tiny", num_layers=1)
    ids = [[5, 6, 7], [8, 9]]
    kw = dict(max_new_tokens=6, num_beams=3, do_sample=True, temperature=2.0)
    a, b = model.generate(ids, seed=1, **kw), model.generate(ids, seed=1, **kw)
    assert torch.equal(a, b)
    assert any(not torch.equal(a, model.generate(ids, seed=s, **kw)) for s in range(2, 6))
    assert torch.equal(model.generate(ids, max_new_tokens=6, num_beams=3, seed=1),
                       model.generate(ids, max_new_tokens=6, num_beams=3, seed=2))

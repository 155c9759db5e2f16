"""Issue 35: generation options that leave nothing to choose, or more stop tokens than candidates.

- every token banned (``suppress_tokens``, ``bad_words``, ``vocab_limit`` + ``no_repeat_ngram_size``)
  is a ZooError (``generate.nothing_to_choose``) naming the step, in greedy decoding, sampling, beam
  search and beam sampling -- never a banned id returned (greedy's ``argmax`` of ``-inf`` is 0), never
  torch's "probability tensor contains inf", never a beam result cut short without a word;
- a row that already stopped may have nothing left: it is padding, not an error;
- beam search with every token a stop token ends every beam at its first token (it was "selected
  index k out of range"): the best ``R`` one-token hypotheses, pinned against the model's own
  log-probabilities;
- beam sampling with fewer allowed tokens than candidates draws what is allowed.
"""
from __future__ import annotations

import pytest
import torch

import zoo
from zoo.run.generate import generate

V = 300


@pytest.fixture(scope="module")
def model():
    m = zoo.build("gpt_tiny", num_layers=1, d_model=32, num_heads=2, vocab_size=V, max_len=64, seed=0)
    return m.eval()


P = torch.tensor([[1, 2, 3]])
EVERY = {"suppress_tokens": list(range(V)), "bad_words": [[i] for i in range(V)]}
MODES = {"greedy": {}, "sampling": {"do_sample": True, "seed": 0}, "beams": {"num_beams": 3},
         "beam sampling": {"num_beams": 3, "do_sample": True, "seed": 0}}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rule", ["suppress_tokens", "bad_words", "vocab_limit+ngram"])
def test_every_token_banned_is_a_zoo_error_naming_the_step(model, mode, rule):
    options = ({"vocab_limit": 5, "no_repeat_ngram_size": 1} if rule == "vocab_limit+ngram"
               else {rule: EVERY[rule]})
    with pytest.raises(zoo.ZooError) as e:
        generate(model, P, max_new_tokens=8, **options, **MODES[mode])
    assert e.value.message_id == "generate.nothing_to_choose"
    # prompt 1 2 3 under vocab_limit 5 with no repeated token leaves 0 and 4: the third token has none
    step = 3 if rule == "vocab_limit+ngram" else 1
    assert f"at new token {step} " in str(e.value), str(e.value)
    assert ("vocab_limit=5" if rule == "vocab_limit+ngram" else rule) in str(e.value)


def test_what_the_rules_allow_is_still_generated_to_the_last_token(model):
    out = generate(model, P, max_new_tokens=2, vocab_limit=5, no_repeat_ngram_size=1)
    assert sorted(out[0, 3:].tolist()) == [0, 4]  # the only two ids left, both used
    out = generate(model, P, max_new_tokens=2, vocab_limit=5, no_repeat_ngram_size=1, num_beams=3)
    assert sorted(out[0, 3:].tolist()) == [0, 4]


def test_a_row_that_stopped_may_have_nothing_left(model):
    """Row 0 may only choose 0 (a stop token) and then has nothing left; it is padding from then
    on, while row 1 (0 is in its prompt) chooses 1 and 2."""
    ids = torch.tensor([[1, 2], [0, 6]])
    out = generate(model, ids, max_new_tokens=2, vocab_limit=3, no_repeat_ngram_size=1,
                   stop_tokens=[0], pad_id=7)
    assert out[0].tolist() == [1, 2, 0, 7]
    assert sorted(out[1, 2:].tolist()) == [1, 2]


@torch.no_grad()
@pytest.mark.parametrize("R", [1, 3])
def test_beam_search_with_every_token_a_stop_token_ends_at_the_first(model, R):
    out = generate(model, P, max_new_tokens=5, num_beams=3, num_return_sequences=R,
                   stop_tokens=list(range(V)))
    lp = torch.log_softmax(model(P)[0, -1].float(), -1)
    assert out.shape == (R, 4)
    assert out[:, 3].tolist() == lp.topk(R).indices.tolist()  # the R most likely one-token endings
    assert out[0].tolist() == generate(model, P, max_new_tokens=1)[0].tolist()


def test_beam_sampling_with_fewer_allowed_tokens_than_candidates(model):
    """3 beams draw 6 candidates; vocab_limit=2 allows two: both are drawn, the rest never kept."""
    for seed in range(5):
        out = generate(model, P, max_new_tokens=1, num_beams=3, vocab_limit=2, do_sample=True, seed=seed,
                       num_return_sequences=2)
        assert sorted(out[:, 3].tolist()) == [0, 1]

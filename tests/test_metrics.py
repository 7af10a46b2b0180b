"""Draft quality metrics: perplexity over generated tokens only, best-of-k, Self-BLEU, n-gram uniqueness."""

import math

import pytest
import torch

from multidraft.eval.metrics import (best_of_k, draft_perplexities, self_bleu, sentence_bleu,
                                     unique_ngram_ratios)
from tests.tiny_models import make_tiny_lm


@pytest.fixture(scope="module")
def scorer():
    return make_tiny_lm("llama", seed=7)


def test_perplexity_matches_a_manual_token_loop(scorer):
    prefix, draft = [5, 9, 12, 3], [7, 7, 30]
    cache, fwd = scorer.prefill(prefix)
    log_probs = []
    for token in draft:
        log_probs.append(float(torch.log_softmax(fwd.logits[-1], -1)[token]))
        fwd = scorer.forward(cache, [token])
    expected = math.exp(-sum(log_probs) / len(draft))
    assert draft_perplexities(scorer, prefix, [draft])[0] == pytest.approx(expected, rel=1e-4)


def test_perplexity_batched_with_padding_equals_one_by_one(scorer):
    prefix, drafts = [4, 8, 15], [[16, 23, 42], [1], [10, 11, 12, 13, 14]]
    batched = draft_perplexities(scorer, prefix, drafts)
    single = [draft_perplexities(scorer, prefix, [d])[0] for d in drafts]
    assert batched == pytest.approx(single, rel=1e-4)


def test_prefix_tokens_are_never_scored(scorer):
    """Only generated positions count: a draft scored by itself (one-token prefix) uses the same positions."""
    prefix, draft = [3, 4, 5], [6, 7]
    ppl = draft_perplexities(scorer, prefix, [draft])[0]
    # the full-sequence perplexity would include the prefix positions and differ
    full = draft_perplexities(scorer, prefix[:1], [prefix[1:] + draft])[0]
    assert ppl != pytest.approx(full)
    assert math.isnan(draft_perplexities(scorer, prefix, [[]])[0])  # nothing generated, nothing to score
    with pytest.raises(ValueError):
        draft_perplexities(scorer, [], [draft])


def test_best_of_k():
    assert best_of_k([4.0, 2.5, 9.0]) == 2.5
    assert best_of_k([float("nan"), 3.0]) == 3.0


def test_self_bleu_identical_drafts_is_one():
    assert self_bleu([[1, 2, 3, 4, 5]] * 3) == pytest.approx(1.0)
    assert self_bleu([["a", "b"], ["a", "b"]]) == pytest.approx(1.0)


def test_self_bleu_orders_diversity():
    same = self_bleu([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 7]])
    different = self_bleu([[1, 2, 3, 4, 5, 6], [9, 8, 7, 6, 5, 4]])
    assert 0 < different < same < 1
    with pytest.raises(ValueError):
        self_bleu([[1, 2, 3]])


def test_sentence_bleu_known_value():
    # unigram precision 3/4, bigram 1/3 (one match), order 2; hyp 4 = ref 4 tokens: no brevity penalty
    score = sentence_bleu([1, 2, 3, 9], [[1, 2, 4, 3]], max_order=2)
    assert score == pytest.approx(math.sqrt(3 / 4 * 1 / 3))
    # method1 smoothing: no bigram match -> 0.1 / 3 instead of 0; shorter hypothesis -> brevity penalty
    score = sentence_bleu([1, 3, 9], [[1, 2, 4, 3]], max_order=2)
    assert score == pytest.approx(math.exp(1 - 4 / 3) * math.sqrt(2 / 3 * 0.1 / 2))


def test_unique_ngram_ratios():
    assert unique_ngram_ratios([1, 2, 3, 4, 5]) == (1.0, 1.0, 1.0)
    assert unique_ngram_ratios([7, 7, 7, 7]) == pytest.approx((1 / 4, 1 / 3, 1 / 2))
    assert math.isnan(unique_ngram_ratios([1, 2])[2])

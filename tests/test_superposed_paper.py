"""Helpers of the Superposed Decoding paper evaluation
(benchmarks/results/2026-11-23-paper-superposed/superposed_paper.py): splits, equal-length truncation, the n-gram-only baseline, the linearity probe (Eq. 8), repetition curves."""

import math

import numpy as np
import pytest
import torch

from multidraft.eval.metrics import self_bleu, unique_ngram_ratios
from multidraft.ngram import NGramModel, build
from multidraft.superposed.decoder import SuperposedConfig, superposed_decode
from multidraft.superposed.paper_eval import (cosine, linearity_probe, ngram_greedy, repetition_curve,
                                              split_prefixes, truncate_to_common_length)
from tests.tiny_models import make_tiny_lm


# ------------------------------------------------------------------ splits

def test_validation_and_test_splits_share_no_prefix():
    prefixes = [[1, 2, 3], [4, 5, 6], [1, 2, 3], [7, 8], [4, 5, 6], [9], [10, 11]]
    validation, test = split_prefixes(prefixes, 2)
    assert validation == [[1, 2, 3], [4, 5, 6]]
    assert test == [[7, 8], [9], [10, 11]]
    assert not {tuple(p) for p in validation} & {tuple(p) for p in test}


def test_split_of_the_benchmark_prefixes_is_disjoint():
    """The script's own split: real held-out prefixes (tokenized by a tiny tokenizer) never cross over."""
    rng = np.random.default_rng(0)
    prefixes = [list(rng.integers(0, 5, size=3)) for _ in range(200)]  # many accidental duplicates
    validation, test = split_prefixes(prefixes, 20)
    assert len(validation) == 20
    assert not {tuple(p) for p in validation} & {tuple(p) for p in test}
    assert len({tuple(p) for p in validation + test}) == len(validation) + len(test)


def test_split_refuses_a_validation_split_larger_than_the_prefixes():
    with pytest.raises(ValueError):
        split_prefixes([[1], [1]], 2)


# ------------------------------------------------------------------ equal lengths

def test_truncate_to_common_length():
    m, cut = truncate_to_common_length([[1, 2, 3, 4], [5, 6], [], [7, 8, 9]])
    assert m == 2
    assert cut == [[1, 2], [5, 6], [], [7, 8]]
    assert truncate_to_common_length([[], []]) == (0, [[], []])


# ------------------------------------------------------------------ metrics (hand-checkable)

def test_repetition_curve_by_hand():
    drafts = [[1, 2, 3, 1, 2, 3], [1, 2, 3, 4, 5, 6]]
    rows = repetition_curve(drafts, [3, 6])
    # first 3 tokens: both all-distinct; identical drafts -> Self-BLEU 1
    assert rows[0]["unique_ngram_ratio"] == [1.0, 1.0, 1.0]
    assert rows[0]["self_bleu"] == pytest.approx(1.0)
    # 6 tokens: draft 1 has 3/6 distinct unigrams, 3/5 bigrams, 3/4 trigrams; draft 2 all distinct
    assert rows[1]["unique_ngram_ratio"] == pytest.approx([(0.5 + 1) / 2, (0.6 + 1) / 2, (0.75 + 1) / 2])
    assert rows[1]["self_bleu"] == pytest.approx(self_bleu([drafts[0], drafts[1]]))
    assert rows[1]["self_bleu"] < 1.0
    assert unique_ngram_ratios([4, 5, 6]) == (1.0, 1.0, 1.0)


def test_cosine_by_hand():
    assert cosine(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])) == pytest.approx(0.0)
    assert cosine(torch.tensor([1.0, 1.0]), torch.tensor([2.0, 2.0])) == pytest.approx(1.0)
    assert cosine(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0])) == pytest.approx(1 / math.sqrt(2))
    assert cosine(torch.tensor([1.0, 0.0]), torch.tensor([-3.0, 0.0])) == pytest.approx(-1.0)
    assert cosine(torch.zeros(3), torch.zeros(3)) == 1.0


# ------------------------------------------------------------------ n-gram-only baseline

def test_ngram_greedy_follows_the_most_likely_continuation(tmp_path):
    # corpus: "1 2 3 4" three times, "1 2 5" once -> after "1 2" the mixture prefers 3, then 4
    path = tmp_path / "toy.ngram"
    build([np.array([1, 2, 3, 4])] * 3 + [np.array([1, 2, 5])], 8, path, max_order=3)
    ngram = NGramModel.load(path)
    assert ngram_greedy(ngram, [1, 2], 2, [0.5, 0.5]) == [3, 4]
    # "4" is never followed by anything: the fallback is the most frequent token (1, 2 each 4x: lowest id 1)
    assert ngram_greedy(ngram, [1, 2], 3, [0.5, 0.5]) == [3, 4, 1]
    assert ngram_greedy(ngram, [1, 2], 3, [0.5, 0.5], fallback_unigram=False) == [3, 4]
    assert ngram_greedy(ngram, [1, 2], 5, [0.5, 0.5], eos_ids={3}) == [3]


# ------------------------------------------------------------------ linearity probe (Eq. 8)

@pytest.fixture(scope="module")
def tiny():
    return make_tiny_lm("llama", seed=3)


def test_linearity_probe_is_exact_at_the_embedding_layer_and_for_one_draft(tiny):
    prompt = tiny.encode("the cat sat")
    tokens = [[5, 9, 11], [7, 7, 3], [2, 4, 6]]
    weights = [[0.5, 0.3, 0.2], [0.6, 0.2, 0.2], [0.1, 0.1, 0.8]]
    cos = linearity_probe(tiny, prompt, tokens, weights)
    num_layers = tiny.model.config.num_hidden_layers
    assert cos.shape == (3, num_layers + 2)
    assert np.allclose(cos[:, 0], 1.0, atol=1e-6)       # layer 0: the embedding mix is linear by definition
    assert np.all(cos <= 1.0 + 1e-9) and np.all(cos >= -1.0 - 1e-9)
    assert not np.allclose(cos[:, -1], 1.0, atol=1e-4)  # a random transformer is not linear in its input
    one = linearity_probe(tiny, prompt, [[5], [7]], [[1.0], [1.0]])  # one draft: both sides are the same forward
    assert np.allclose(one, 1.0, atol=1e-6)


def test_linearity_probe_history_matches_spd_embeddings(tiny):
    """The probe's history is SPD's: fed the trace of a real SPD run, the superposed inputs are SPD's own."""
    prompt = tiny.encode("the cat sat")
    result = superposed_decode(tiny, prompt, 4, SuperposedConfig(num_drafts=3, alpha=0.0), trace=True)
    steps = [t for t in result.trace if t["gamma"] is not None]
    tokens = [t["tokens"].tolist() for t in steps]
    weights = [t["gamma"][: len(t["tokens"])].tolist() for t in steps]
    embed = tiny.model.get_input_embeddings()
    for t, toks, g in zip(steps, tokens, weights):
        mixed = torch.tensor(g) @ embed(torch.tensor(toks)).float()
        assert torch.allclose(mixed, t["embedding"].float(), atol=1e-6)
    cos = linearity_probe(tiny, prompt, tokens, weights)
    assert cos.shape[0] == len(steps) and np.isfinite(cos).all()


def test_token_log_probs_are_batch_independent_and_causal(tiny):
    """Per-token scores (eval.metrics.token_log_probs, which draft_perplexities averages; test_metrics checks those
    against a hand computation): right-padding a batch changes no draft's scores, and the first m scores do not
    depend on what follows them."""
    from multidraft.eval.metrics import token_log_probs

    prefix = tiny.encode("the cat sat")
    drafts = [[5, 9, 11, 4], [7, 3], [2, 4, 6]]
    lps = token_log_probs(tiny, prefix, drafts)
    assert [len(x) for x in lps] == [4, 2, 3]
    for draft, batched in zip(drafts, lps):
        assert np.allclose(token_log_probs(tiny, prefix, [draft])[0], batched, atol=1e-5)
    # the first m tokens' scores do not depend on what follows them (causal scorer)
    short = token_log_probs(tiny, prefix, [[5, 9]])[0]
    assert np.allclose(short, lps[0][:2], atol=1e-5)

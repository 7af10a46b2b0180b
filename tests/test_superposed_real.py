"""Superposed Decoding on SmolLM2-135M with a small n-gram file counted in the test from real text."""

import pytest

import multidraft
from multidraft.ngram import build
from multidraft.ngram.corpus import tokenize_documents, tokenizer_fingerprint

pytestmark = pytest.mark.real_model

TEXTS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun all day long.",
    "Python is a programming language that lets you work quickly and integrate systems more effectively.",
    "The capital of France is Paris. Paris is known for the Eiffel Tower and its museums.",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n",
] * 5


@pytest.fixture(scope="module")
def ngram_file(smollm, tmp_path_factory):
    path = tmp_path_factory.mktemp("spd_real") / "smollm.ngram"
    build(tokenize_documents(TEXTS, smollm.tokenizer), len(smollm.tokenizer), path, max_order=6,
          tokenizer_name="smollm2-135m", tokenizer_fingerprint=tokenizer_fingerprint(smollm.tokenizer))
    return str(path)


def test_real_model_drafts(smollm, ngram_file):
    G, k = 6, 3
    gen = multidraft.generate(smollm, "The capital of France is", method="superposed", max_new_tokens=G,
                              num_drafts=k, ngram=ngram_file)
    assert gen.stats.target_calls == G and not gen.stats.lossless
    assert len(gen.drafts) == k and len({tuple(d.token_ids) for d in gen.drafts}) == k
    assert [d.score for d in gen.drafts] == sorted((d.score for d in gen.drafts), reverse=True)
    assert gen.text == gen.drafts[0].text


def test_real_model_k1_alpha0_is_greedy(smollm):
    prompt = "def fibonacci(n):"
    spd = multidraft.generate(smollm, prompt, method="superposed", max_new_tokens=8, num_drafts=1, alpha=0.0)
    assert spd.token_ids == multidraft.generate(smollm, prompt, method="greedy", max_new_tokens=8).token_ids

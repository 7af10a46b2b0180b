"""Every row of multidraft.methods, run with its artifacts built on tiny models (draft model, n-gram file, heads):
exact max_new_tokens for every method, greedy equality for every lossless one. A new row is covered here without
editing this file; a row needing an artifact that ARTIFACT_OPTIONS cannot build fails until a builder is added."""

import pytest

import multidraft
from multidraft.decoders.builtin_methods import NoDrafter
from multidraft.methods import ARTIFACTS, METHODS
from tests.tiny_models import make_tiny_lm, make_tiny_lm_with, perturbed_copy, random_heads

# How each artifact kind of methods.ARTIFACTS becomes options, from the tiny artifacts below.
ARTIFACT_OPTIONS = {
    "draft_model": lambda artifacts: {"draft_model": artifacts["draft"]},
    "ngram": lambda artifacts: {"ngram": artifacts["ngram"]},
    "heads": lambda artifacts: {"heads": artifacts["heads"]},
}
# Methods defined by sampling: temperature 0 is refused (checked below), so they run sampled with a seed.
SAMPLED_ONLY = {"sample"}
PROMPTS = ["the cat sat on the mat and the cat sat on the", "def x ( y ) : return x + 1 def x ( y ) : return"]
LOSSLESS = sorted(name for name, method in METHODS.items() if method.lossless)


def method_options(name, artifacts):
    options = {}
    for kind in METHODS[name].artifacts:
        options.update(ARTIFACT_OPTIONS[kind](artifacts))
    if name in SAMPLED_ONLY:
        options.update(temperature=1.0, seed=0)
    return options


def tiny_artifacts(lm, tiny_ngram):
    return {"draft": perturbed_copy(lm, 0.2, seed=1), "ngram": tiny_ngram, "heads": random_heads(lm, 4, scale=0.05)}


@pytest.fixture(scope="module")
def no_eos(tiny_ngram):
    """A tiny target that has no end-of-sequence token, so every method must stop at exactly max_new_tokens."""
    lm = make_tiny_lm("llama", seed=2)
    lm.eos_token_ids = set()
    return lm, tiny_artifacts(lm, tiny_ngram)


@pytest.fixture(scope="module", params=["llama-eager", "qwen2-eager", "llama-static"])
def target(request, tiny_ngram):
    """Greedy equality on HF's cache, and on the static runner's (buckets, padding, in-buffer path keeping)."""
    arch, runner = request.param.split("-")
    lm = make_tiny_lm_with(runner, arch, seed=7)
    return lm, tiny_artifacts(lm, tiny_ngram)


def test_every_artifact_kind_has_a_tiny_builder():
    assert set(ARTIFACT_OPTIONS) == set(ARTIFACTS)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_max_new_tokens_is_exact_for_every_method(no_eos, name):
    lm, artifacts = no_eos
    for n in (1, 2, 7):
        result = multidraft.generate(lm, PROMPTS[0], method=name, max_new_tokens=n, **method_options(name, artifacts))
        assert len(result.token_ids) == n, (name, n, result.stats.stop_reason)
        assert result.stats.generated_tokens == n and result.stats.stop_reason == "max_new_tokens"


@pytest.mark.parametrize("name", LOSSLESS)
def test_every_lossless_method_equals_greedy(target, name):
    lm, artifacts = target
    if name in SAMPLED_ONLY:
        with pytest.raises(multidraft.InvalidOptionError, match="temperature"):
            multidraft.generate(lm, PROMPTS[0], method=name, temperature=0, max_new_tokens=4)
        return
    options = method_options(name, artifacts)
    proposed = 0
    for prompt in PROMPTS:
        want = multidraft.generate(lm, prompt, method="greedy", max_new_tokens=24).token_ids
        got = multidraft.generate(lm, prompt, method=name, max_new_tokens=24, **options)
        assert got.token_ids == want, (name, prompt)
        assert got.stats.lossless
        proposed += got.stats.draft_tokens_proposed
    if METHODS[name].drafter is not NoDrafter:      # a drafter that silently proposes nothing passes equality alone
        assert proposed > 0, name

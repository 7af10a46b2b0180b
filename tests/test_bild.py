"""BiLD (lossy): the rollback rule, its edge cases end to end, invariants, bad input."""

import math

import pytest

import multidraft
from multidraft.errors import InvalidOptionError
from multidraft.methods import get_method
from multidraft.verify.bild import rollback_length

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPT = "the cat sat on the mat and the cat sat on the"


def test_rollback_length_stops_at_the_first_unlikely_token():
    assert rollback_length([0.1, 2.5, 0.1], 2.0) == 1           # the later likely token does not count
    assert rollback_length([0.1, 0.2], 2.0) == 2
    assert rollback_length([math.inf], 100.0) == 0
    assert rollback_length([], 1.0) == 0


@pytest.mark.parametrize("options", [{"rollback_threshold": 0.0}, {"fallback_threshold": 1.0}])
def test_reject_all_or_never_draft_is_plain_sampling_token_for_token(target, draft, options):
    for seed in range(2):
        plain = multidraft.generate(target, PROMPT, method="sample", max_new_tokens=16, temperature=1.0, top_k=8,
                                    seed=seed)
        bild = multidraft.generate(target, PROMPT, method="bild", max_new_tokens=16, temperature=1.0, top_k=8,
                                   seed=seed, draft_model=draft, **options)
        assert bild.token_ids == plain.token_ids
        assert bild.stats.draft_tokens_accepted == 0
        if "fallback_threshold" in options:
            assert bild.stats.draft_tokens_proposed == 0


def test_accepted_tokens_pass_the_rollback_threshold_and_method_is_lossy(target, draft):
    threshold = 3.0
    out = multidraft.generate(target, PROMPT, method="bild", max_new_tokens=24, temperature=1.0, seed=4,
                              draft_model=draft, fallback_threshold=0.0, max_draft_tokens=5,
                              rollback_threshold=threshold)
    stats = out.stats
    assert stats.draft_tokens_accepted > 0 and stats.lossless is False
    assert set(stats.acceptance_histogram) <= set(range(1, 7))
    assert get_method("bild").lossless is False and "LOSSY" in get_method("bild").description
    # with an infinite rollback threshold and no fallback every drafted token is kept
    keep_all = multidraft.generate(target, PROMPT, method="bild", max_new_tokens=12, temperature=1.0, seed=4,
                                   draft_model=draft, fallback_threshold=0.0, max_draft_tokens=5,
                                   rollback_threshold=1e9)
    assert keep_all.stats.draft_tokens_accepted == keep_all.stats.draft_tokens_proposed > 0


def test_greedy_bild_uses_the_unwarped_target_law(target, draft):
    greedy = multidraft.generate(target, PROMPT, max_new_tokens=20).token_ids
    assert multidraft.generate(target, PROMPT, method="bild", max_new_tokens=20, draft_model=draft,
                               rollback_threshold=0.0).token_ids == greedy
    loose = multidraft.generate(target, PROMPT, method="bild", max_new_tokens=20, draft_model=draft,
                                fallback_threshold=0.0, rollback_threshold=50.0)
    assert loose.stats.draft_tokens_accepted == loose.stats.draft_tokens_proposed > 0


def test_bad_bild_options(target, draft):
    for options, message in [
        ({"rollback_threshold": -1}, "rollback_threshold must be a number >= 0"),
        ({"fallback_threshold": 1.5}, r"fallback_threshold must be a probability in \[0, 1\]"),
        ({"max_draft_tokens": 0}, "max_draft_tokens must be an integer >= 1"),
    ]:
        with pytest.raises(InvalidOptionError, match=message):
            multidraft.generate(target, PROMPT, method="bild", max_new_tokens=4, draft_model=draft, **options)

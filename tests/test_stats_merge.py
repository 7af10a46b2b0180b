"""DecodeStats.merge: the one way to pool the stats of several decodes (bench turns, server choices)."""

import multidraft
from multidraft.types import DecodeStats


def test_merge_sums_counts_and_recomputes_rates(tiny_llama):
    first = multidraft.generate(tiny_llama, "the cat sat on the mat and the cat", method="pld", max_new_tokens=9).stats
    second = multidraft.generate(tiny_llama, "def x ( y ) : return x def x", method="pld", max_new_tokens=5).stats
    merged = DecodeStats.merge([first, second])
    assert merged.method == "pld" and merged.lossless
    for name in ("prompt_tokens", "generated_tokens", "target_calls", "verification_calls",
                 "draft_tokens_proposed", "draft_tokens_accepted"):
        assert getattr(merged, name) == getattr(first, name) + getattr(second, name), name
    assert merged.total_time == first.total_time + second.total_time
    width = max(len(first.proposed_per_position), len(second.proposed_per_position))
    assert len(merged.proposed_per_position) == width
    assert sum(merged.accepted_per_position) == sum(first.accepted_per_position) + sum(second.accepted_per_position)
    assert sum(merged.acceptance_histogram.values()) == merged.verification_calls
    assert merged.mean_acceptance_length == merged.generated_tokens / merged.verification_calls
    assert merged.stop_reason == "max_new_tokens"


def test_merge_of_one_is_the_same_stats(tiny_llama):
    stats = multidraft.generate(tiny_llama, "the cat sat on the mat and the cat", method="pld", max_new_tokens=6).stats
    assert DecodeStats.merge([stats]).to_dict() == stats.to_dict()
    assert DecodeStats.merge([]).generated_tokens == 0


def test_merge_lists_distinct_stop_reasons():
    parts = [DecodeStats(stop_reason="eos"), DecodeStats(stop_reason="max_new_tokens"), DecodeStats(stop_reason="eos")]
    assert DecodeStats.merge(parts).stop_reason == "eos,max_new_tokens"


def test_summary_gives_the_prompts_forward_and_the_decodings_rate_apart():
    stats = DecodeStats(method="pld", generated_tokens=128, verification_calls=40, target_calls=41,
                        prefill_time=12.0, total_time=16.0)
    assert "128 tokens in 16.00s (8.00 tok/s; the prompt's forward 12.00s, then 32.00 tok/s)" in stats.summary()
    stats.prefill_time = 0.0                        # a decode with no prefill of its own (a cached prompt): no split
    assert "(8.00 tok/s), mean acceptance length 3.20" in stats.summary()

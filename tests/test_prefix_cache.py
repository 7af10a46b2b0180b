"""PrefixCache: reused keys/values give the very bits of a full prefill (quantized-q8 runner), for every lossless
method of the loop and greedy; refused where reuse could change a token."""

import pytest
import torch

import multidraft
from multidraft.errors import InvalidOptionError
from multidraft.models.kv_cache import KVCache
from tests.test_quantized_runner import _tiny

METHODS = ["greedy", "pld", "pld_plus", "suffix"]


@pytest.fixture(scope="module")
def q8_lm():
    lm, _ = _tiny("qwen2", "Q4_K")
    assert lm.use_runner("quantized-q8") == "quantized-q8"
    return lm


def _prompts():
    first = [(7 * i + 3) % 60 + 1 for i in range(70)]
    return first, first + [5, 9, 11, 5, 9, 11, 5, 9]


def test_restored_prefix_gives_the_bits_of_a_whole_prefill(q8_lm):
    first, second = _prompts()
    cache = multidraft.PrefixCache()
    whole_first = KVCache()
    q8_lm.forward(whole_first, first)
    cache.remember(first, whole_first)
    restored = KVCache()
    reused = cache.restore(restored, second, len(second) - 1)
    assert reused.length == len(first) and restored.length == len(first)
    resumed = q8_lm.forward(restored, second[len(first):]).logits
    fresh = q8_lm.forward(KVCache(), second).logits[len(first):]
    assert torch.equal(resumed, fresh)
    # Negative control: keys/values that are not the prompt's (another prompt's) change the logits.
    other = KVCache()
    q8_lm.forward(other, [t % 50 + 2 for t in first])
    poisoned = multidraft.PrefixCache()
    poisoned.remember(first, other)
    wrong = KVCache()
    poisoned.restore(wrong, second, len(second) - 1)
    assert not torch.equal(q8_lm.forward(wrong, second[len(first):]).logits, fresh)


@pytest.mark.parametrize("method", METHODS)
def test_generation_with_a_reused_prefix_equals_one_without(q8_lm, method):
    first, _ = _prompts()
    cache = multidraft.PrefixCache()
    one = multidraft.generate(q8_lm, first, method=method, max_new_tokens=24, prefix_cache=cache,
                              draft_length="adaptive")
    assert one.stats.prefix_reused_tokens == 0 and cache.num_tokens > len(first)
    # The next step's prompt holds the first prompt and answer (an agent loop), then a new instruction.
    second = first + list(one.token_ids) + [4, 8, 15, 16, 23, 42]
    with_cache = multidraft.generate(q8_lm, second, method=method, max_new_tokens=24, prefix_cache=cache,
                                     draft_length="adaptive")
    without = multidraft.generate(q8_lm, second, method=method, max_new_tokens=24, draft_length="adaptive")
    greedy = multidraft.generate(q8_lm, second, method="greedy", max_new_tokens=24)
    assert with_cache.stats.prefix_reused_tokens >= len(first)
    assert with_cache.token_ids == without.token_ids == greedy.token_ids
    # The same prompt again: all of it but the last token comes from the cache.
    again = multidraft.generate(q8_lm, second, method=method, max_new_tokens=24, prefix_cache=cache)
    assert again.stats.prefix_reused_tokens == len(second) - 1 and again.token_ids == greedy.token_ids


def test_pld_plus_entries_keep_hidden_states_and_other_layers_prefill(q8_lm):
    first, second = _prompts()
    cache = multidraft.PrefixCache()
    multidraft.generate(q8_lm, first, method="greedy", max_new_tokens=8, prefix_cache=cache)
    # An entry without hidden states cannot serve PLD+ (it ranks by them): a full prefill, same tokens.
    plus = multidraft.generate(q8_lm, second, method="pld_plus", max_new_tokens=16, prefix_cache=cache)
    assert plus.stats.prefix_reused_tokens == 0
    again = multidraft.generate(q8_lm, second + [3], method="pld_plus", max_new_tokens=16, prefix_cache=cache)
    assert again.stats.prefix_reused_tokens == len(second)
    assert again.token_ids == multidraft.generate(q8_lm, second + [3], method="greedy", max_new_tokens=16).token_ids


def test_bounded_and_extending_entries_replace_their_prefix(q8_lm):
    first, second = _prompts()
    cache = multidraft.PrefixCache()
    for prompt in (first[:30], first, second):
        kv = KVCache()
        q8_lm.forward(kv, prompt)
        cache.remember(prompt, kv)
    assert cache.num_tokens == len(second)          # each extended the one before: one entry left
    per_token = cache.nbytes / len(second)
    small = multidraft.PrefixCache(max_mb=per_token * 100 / 2 ** 20)
    for offset in range(4):
        prompt = [t + offset for t in first[:60]]
        kv = KVCache()
        q8_lm.forward(kv, prompt)
        small.remember(prompt, kv)
    assert small.num_tokens == 60 and small.nbytes <= small.max_bytes    # the least recently used went
    restored = KVCache()
    assert small.restore(restored, [t + 3 for t in first[:60]], 59).length == 59


def test_refused_where_reuse_could_change_a_token(q8_lm):
    first, _ = _prompts()
    fp32_lm, _ = _tiny("qwen2", "Q4_K")                     # runner "quantized": dense prefill GEMM
    with pytest.raises(InvalidOptionError, match="quantized-q8"):
        multidraft.generate(fp32_lm, first, max_new_tokens=4, prefix_cache=multidraft.PrefixCache())
    cache = multidraft.PrefixCache()
    multidraft.generate(q8_lm, first, max_new_tokens=4, prefix_cache=cache)
    fp32_lm.use_runner("quantized-q8")
    with pytest.raises(InvalidOptionError, match="another model"):
        multidraft.generate(fp32_lm, first, max_new_tokens=4, prefix_cache=cache)
    with pytest.raises(InvalidOptionError, match="own decoder"):
        multidraft.generate(q8_lm, first, method="beam", max_new_tokens=4, prefix_cache=cache)
    with pytest.raises(InvalidOptionError, match="PrefixCache"):
        multidraft.generate(q8_lm, first, max_new_tokens=4, prefix_cache={})
    with pytest.raises(InvalidOptionError, match="max_mb"):
        multidraft.PrefixCache(max_mb=0)


@pytest.mark.parametrize("method", METHODS)
def test_engine_reuses_prefixes_of_earlier_requests_with_the_same_tokens(q8_lm, method):
    first, second = _prompts()
    cache = multidraft.PrefixCache()
    engine = multidraft.Engine(q8_lm, max_num_seqs=4, kv_slots=2048, prefill_chunk=16, prefix_cache=cache)
    one = engine.submit(multidraft.Request.build(first, method, max_new_tokens=20))
    engine.run()
    out_one = engine.take(one)
    # Later prompts extend the first request's sequence (shorter, exact, longer), in one batch.
    follow = [first + list(out_one.token_ids)[:k] + extra for k, extra in ((20, [3, 7]), (5, []), (0, [9] * 40))]
    ids = [engine.submit(multidraft.Request.build(p, method, max_new_tokens=20, draft_length="adaptive"))
           for p in follow + [second]]
    engine.run()
    results = [engine.take(i) for i in ids]
    for prompt, result in zip(follow + [second], results):
        assert result.stats.prefix_reused_tokens >= min(len(first), len(prompt) - 1)
        assert result.token_ids == multidraft.generate(q8_lm, prompt, method="greedy", max_new_tokens=20).token_ids
    assert out_one.token_ids == multidraft.generate(q8_lm, first, method="greedy", max_new_tokens=20).token_ids
    # An entry written by generate() serves the engine too (the same bits).
    alone = multidraft.PrefixCache()
    multidraft.generate(q8_lm, first, method=method, max_new_tokens=20, prefix_cache=alone)
    again = multidraft.generate_batch(q8_lm, [follow[0]], method=method, max_new_tokens=20, prefix_cache=alone)[0]
    assert again.stats.prefix_reused_tokens == len(follow[0]) - 1 or again.stats.prefix_reused_tokens >= len(first)
    assert again.token_ids == results[0].token_ids


@pytest.mark.parametrize("max_num_seqs", [1, 3])
def test_server_prefix_cache_reuses_an_agent_loops_prompts_and_reports_it(q8_lm, max_num_seqs):
    import httpx

    from multidraft.server import ServerConfig, ServerThread, create_app
    from tests.test_server_api import metric

    app = create_app(q8_lm, ServerConfig(prefix_cache_mb=64, max_num_seqs=max_num_seqs, max_tokens=64))
    first = "the cat sat on the mat and the cat sat on the mat and the dog ran"
    with ServerThread(app) as server, httpx.Client(base_url=server.url, timeout=60) as client:
        assert metric(client, "multidraft:prefix_cache_tokens") == 0
        prompt = first
        for step, method in enumerate(["suffix", "greedy", "pld_plus", "pld"]):
            body = {"prompt": prompt, "max_tokens": 12, "method": method, "temperature": 0}
            answer = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
            assert answer == multidraft.generate(q8_lm, prompt, max_new_tokens=12, temperature=0).text
            if step:
                assert metric(client, "multidraft:prefix_cache_hit_tokens") > 0
            prompt = prompt + answer + " then the cat ran"
        assert metric(client, "multidraft:prefix_cache_bytes") > 0


def test_server_refuses_a_prefix_cache_it_cannot_use_exactly(q8_lm):
    from multidraft.server import ServerConfig, create_app

    fp32_lm, _ = _tiny("qwen2", "Q4_K")
    with pytest.raises(InvalidOptionError, match="quantized-q8"):
        create_app(fp32_lm, ServerConfig(prefix_cache_mb=64))
    with pytest.raises(InvalidOptionError, match="suffix-isolation"):
        ServerConfig(prefix_cache_mb=64, suffix_isolation=True, api_key=("a" * 16, "b" * 16)).validate()
    with pytest.raises(InvalidOptionError, match="prefix_cache_mb"):
        ServerConfig(prefix_cache_mb=-1).validate()

"""The static runner (models/static_runner.py, models/kv_cache.py) on CPU: its logits against HF's dynamic cache
for chains, trees, padding, chunking and in-buffer compaction; the fallbacks (capacity, architecture, a check that
fails); the arena shared by one generation at a time. CUDA graph capture is tested in tests/test_cuda.py.

Tolerance: fp32, the same math over a longer masked key range (the buffer's slots) and padded rows; tiny models'
logits are O(10), observed differences ~5e-7: atol 1e-5, rtol 1e-4 as in test_runner.py."""

import random
import warnings

import pytest
import torch

import multidraft
from multidraft.errors import PromptError
from multidraft.models import kv_cache, static_runner
from multidraft.models.kv_cache import StaticKVCache, ancestor_matrix, static_mask
from multidraft.models.runner import LM
from tests.tiny_models import make_tiny_hf_model, make_tiny_lm, make_tokenizer, use_static

ATOL, RTOL = 1e-5, 1e-4


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def pair(request):
    """The same tiny model twice: HF's dynamic cache, and the static runner."""
    return make_tiny_lm(request.param, seed=4), use_static(make_tiny_lm(request.param, seed=4))


def random_tree(rng, size):
    return [-1] + [rng.randrange(-1, i) for i in range(1, size)]


def test_bucket_for():
    assert [static_runner.bucket_for(n) for n in (1, 2, 3, 5, 9, 33, 64)] == [1, 2, 4, 8, 16, 64, 64]


def test_ancestor_matrix_matches_parent_walk():
    rng = random.Random(0)
    for size in (1, 2, 7, 40, 70):
        parents = random_tree(rng, size)
        got = ancestor_matrix(torch.tensor(parents))
        for node in range(size):
            walk, chain = node, set()
            while walk >= 0:
                chain.add(walk)
                walk = parents[walk]
            assert {j for j in range(size) if got[node, j]} == chain


def test_static_mask_rows():
    ancestors = ancestor_matrix(torch.tensor([-1, 0, -1]))
    mask = static_mask(past=2, first_row=0, bucket=4, num_rows=3, kv_limit=8, dtype=torch.float32, device="cpu",
                       ancestors=ancestors)[0, 0] == 0
    assert mask.tolist() == [[True, True, True, False, False, False, False, False],
                             [True, True, True, True, False, False, False, False],
                             [True, True, False, False, True, False, False, False],
                             [True, True, False, False, False, True, False, False]]   # padding row: its own slot
    chain = static_mask(past=1, first_row=2, bucket=2, num_rows=3, kv_limit=6, dtype=torch.float32,
                        device="cpu")[0, 0] == 0
    assert chain.tolist() == [[True, True, True, True, False, False], [True, True, True, True, True, False]]


@pytest.mark.parametrize("lengths", [[1], [3, 1, 2], [5, 64], [70, 1], [150]])
def test_chains_padding_and_chunking_match_eager(pair, lengths):
    eager, static = pair
    caches = eager.new_cache(), static.new_cache()
    assert isinstance(caches[1], StaticKVCache)
    token = 3
    for length in lengths:                      # 3, 5, 70: padded buckets; 70, 150: beyond 64, chunked
        ids = [(token + i * 7) % 60 + 3 for i in range(length)]
        token += length
        want, got = (lm.forward(cache, ids).logits for lm, cache in zip(pair, caches))
        torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
        assert caches[1].length == caches[0].length


def test_trees_keep_and_crop_match_eager(pair):
    """Random trees (some beyond the largest bucket), random accepted paths, crops: logits stay eager's."""
    eager, static = pair
    rng = random.Random(1)
    caches = eager.new_cache(), static.new_cache()
    for lm, cache in zip(pair, caches):
        lm.forward(cache, [5, 9, 11, 4, 7, 3])
    for step in range(8):
        size = rng.choice([1, 3, 8, 20, 70])
        parents, tokens = random_tree(rng, size), [rng.randrange(3, 60) for _ in range(size)]
        past = caches[0].length
        outs = [lm.forward(cache, tokens, parents=parents).logits for lm, cache in zip(pair, caches)]
        torch.testing.assert_close(outs[1], outs[0], atol=ATOL, rtol=RTOL)
        node, path = rng.randrange(size), []
        while node >= 0:
            path.append(node)
            node = parents[node]
        kept = [past + n for n in reversed(path)]
        for cache in caches:
            if step % 3 == 2:
                cache.crop(past - 2)
            else:
                cache.keep(past, kept)
        assert caches[1].length == caches[0].length
        outs = [lm.forward(cache, [step + 3]).logits for lm, cache in zip(pair, caches)]
        torch.testing.assert_close(outs[1], outs[0], atol=ATOL, rtol=RTOL)


def test_logits_rows_and_embeds(pair):
    eager, static = pair
    ids = [(i * 5) % 60 + 3 for i in range(80)]
    for rows in (slice(-1, None), slice(10, 75), slice(0, 1)):
        want = eager.forward(eager.new_cache(), ids, logits_rows=rows).logits
        got = static.forward(static.new_cache(), ids, logits_rows=rows).logits
        torch.testing.assert_close(got, want, atol=ATOL, rtol=RTOL)
    embeds = static.embed(ids[:5])
    torch.testing.assert_close(static.forward(static.new_cache(), inputs_embeds=embeds).logits,
                               eager.forward(eager.new_cache(), ids[:5]).logits, atol=ATOL, rtol=RTOL)


@pytest.mark.parametrize("method", ["pld", "pld_plus"])
def test_one_token_and_verify_rows_agree_so_drafting_equals_greedy(pair, method):
    eager, static = pair
    for prompt in ("the cat sat on the mat and the cat sat on the", "def x ( y ) : return x + 1 def x ( y ) :"):
        want = multidraft.generate(static, prompt, method="greedy", max_new_tokens=30).token_ids
        assert want == multidraft.generate(eager, prompt, method="greedy", max_new_tokens=30).token_ids
        got = multidraft.generate(static, prompt, method=method, max_new_tokens=30)
        assert got.token_ids == want and got.stats.draft_tokens_proposed > 0


def test_beyond_capacity_goes_on_eagerly_with_one_warning():
    eager = make_tiny_lm("llama", seed=5)
    static = make_tiny_lm("llama", seed=5)
    static.static_capacity = 40
    use_static(static)
    caches = eager.new_cache(), static.new_cache()
    with pytest.warns(RuntimeWarning, match="beyond the static runner's 40") as caught:
        for length in (30, 8, 5, 5):
            ids = [(length + i) % 60 + 3 for i in range(length)]
            outs = [lm.forward(cache, ids).logits for lm, cache in zip((eager, static), caches)]
            torch.testing.assert_close(outs[1], outs[0], atol=ATOL, rtol=RTOL)
        caches[0].keep(40, [41, 43])
        caches[1].keep(40, [41, 43])
        outs = [lm.forward(cache, [7]).logits for lm, cache in zip((eager, static), caches)]
        torch.testing.assert_close(outs[1], outs[0], atol=ATOL, rtol=RTOL)
    assert len([w for w in caught if "static runner" in str(w.message)]) == 1
    assert caches[1].dynamic is not None and caches[1].length == 43
    with pytest.raises(PromptError, match="context"):          # the model's own context is still a clear error
        static.forward(static.new_cache(), [5] * 300)


def test_sliding_window_model_is_refused_in_one_warning():
    model = make_tiny_hf_model("qwen2", seed=1, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    lm = LM(model, make_tokenizer(), name="tiny-sliding")
    with pytest.warns(RuntimeWarning, match="static runner cannot serve tiny-sliding.*sliding"):
        assert lm.use_runner("static", progress=False) == "eager"
    assert lm.runner == "eager" and not isinstance(lm.new_cache(), StaticKVCache)


def test_a_cache_that_ignores_writes_fails_the_setup_check(monkeypatch):
    """An architecture whose layers do not use the cache as expected: the check against eager catches it."""
    real_update = kv_cache.StaticArena.update

    def forgetful(self, key_states, value_states, layer_idx, *args, **kwargs):
        keys, values = real_update(self, key_states, value_states, layer_idx)
        keys.zero_()
        return keys, values
    monkeypatch.setattr(kv_cache.StaticArena, "update", forgetful)
    lm = make_tiny_lm("llama", seed=6)
    with pytest.warns(RuntimeWarning, match="static-cache logits differ from eager"):
        assert lm.use_runner("static", progress=False) == "eager"
    want = multidraft.generate(make_tiny_lm("llama", seed=6), "the cat sat", max_new_tokens=8).token_ids
    assert multidraft.generate(lm, "the cat sat", max_new_tokens=8).token_ids == want


def test_two_live_caches_share_nothing(pair):
    """The arena serves one generation at a time; a second live cache is HF's dynamic one, and both stay right."""
    eager, static = pair
    first, second = static.new_cache(), static.new_cache()
    assert isinstance(first, StaticKVCache) and not isinstance(second, StaticKVCache)
    ids = [5, 9, 11, 4, 7]
    torch.testing.assert_close(static.forward(first, ids).logits, static.forward(second, ids).logits,
                               atol=ATOL, rtol=RTOL)
    del first
    assert isinstance(static.new_cache(), StaticKVCache)     # freed with its generation


def test_beam_search_and_draft_models_keep_hf_cache(pair):
    eager, static = pair
    prompt = "the cat sat on the mat and"
    assert multidraft.generate(static, prompt, method="beam", num_beams=1, max_new_tokens=10).token_ids == \
        multidraft.generate(eager, prompt, max_new_tokens=10).token_ids


def test_unknown_runner_lists_static():
    with pytest.raises(multidraft.InvalidOptionError, match="static"):
        make_tiny_lm("llama").use_runner("compiled")


@pytest.mark.real_model
def test_smollm_lossless_methods_equal_greedy_on_the_static_runner(smollm):
    static = use_static(LM(smollm.model, smollm.tokenizer, name="smollm2-135m-static"))
    try:
        for prompt in ("The capital of France is Paris. The capital of Italy is Rome. The capital of France is",
                       "def fibonacci(n):"):
            greedy = multidraft.generate(smollm, prompt, max_new_tokens=32).token_ids
            assert multidraft.generate(static, prompt, max_new_tokens=32).token_ids == greedy
            for method in ("pld", "pld_plus"):
                assert multidraft.generate(static, prompt, method=method, max_new_tokens=32).token_ids == greedy
    finally:
        static.use_runner("eager")              # the shared HF model goes back as the fixture had it

"""The engine (multidraft.engine): a request's tokens are the same alone and inside batches of mixed requests.

Alone = `generate_request` (the single-request loop). On the eager runner a batch changes matrix shapes, so these
tests show greedy / seeded-sampling equality in practice on the tiny models; on the quantized runner the packed
forward is batch-invariant and the logits themselves are compared bit for bit.
"""

import collections

import pytest
import torch

import multidraft
from multidraft import Engine, Request, generate_batch
from multidraft.decoders.draft_length import DraftLength, ForwardCosts, batch_depths, nodes_by_depth
from multidraft.errors import InvalidOptionError, PromptError
from multidraft.models.kv_cache import KVCache
from multidraft.models.packed import KVArena, Segment, packed_forward
from tests.installed import require_quantized_kernels
from tests.tiny_models import make_tiny_lm, random_heads

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = ["the cat sat on the mat and the cat sat on", "def x ( y ) : return x ( y ) + 1 if x",
           "a dog ran on the mat . a dog ran", "a", "then the cat ran and the dog sat on the mat . then"]


@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("qwen2", seed=1)


def _mixed_requests(sampled: bool):
    """Methods, lengths, stop strings and (if sampled) seeded temperatures, mixed."""
    methods = ["greedy", "pld", "suffix", "pld_plus", "pld"]
    requests = []
    for i, prompt in enumerate(PROMPTS * 2):
        method = methods[i % len(methods)]
        kwargs = dict(temperature=0.9, seed=100 + i, top_p=0.95) if sampled and i % 2 == 0 else {}
        if method == "greedy" and kwargs:
            method = "sample"
        stop = ["mat ."] if i % 3 == 1 else None
        requests.append(Request.build(prompt, method, max_new_tokens=8 + 5 * i, stop=stop, **kwargs))
    return requests


@pytest.mark.parametrize("sampled,prefill_alone", [(False, True), (True, True), (False, False), (True, False)])
def test_tokens_alone_equal_tokens_in_batches(lm, sampled, prefill_alone):
    requests = _mixed_requests(sampled)
    alone = [multidraft.generate_request(lm, r) for r in requests]
    assert len({tuple(g.token_ids) for g in alone}) > 5           # varied outputs: the comparison means something
    assert {g.stats.stop_reason for g in alone} >= {"max_new_tokens"}
    for max_num_seqs, chunk in ((2, 3), (5, 16), (8, 256)):
        batch = generate_batch(lm, requests, max_num_seqs=max_num_seqs, prefill_chunk=chunk,
                               prefill_alone=prefill_alone)
        for request, one, together in zip(requests, alone, batch):
            assert together.token_ids == one.token_ids, (request.method, request.prompt, max_num_seqs)
            assert together.text == one.text
            assert together.stats.stop_reason == one.stats.stop_reason


def test_draft_model_methods_batch(target, draft):
    lm = target                                   # conftest's pair: a draft that agrees often
    artifacts = multidraft.Artifacts()
    requests = [Request.build(PROMPTS[0], "speculative", max_new_tokens=24, draft_length="fixed",
                              options=dict(draft_model=draft)),
                Request.build(PROMPTS[1], "multi_draft", max_new_tokens=20, options=dict(draft_model=draft)),
                Request.build(PROMPTS[2], "mtad", max_new_tokens=18, options=dict(draft_model=draft)),
                Request.build(PROMPTS[4], "bild", max_new_tokens=22, options=dict(draft_model=draft)),
                Request.build(PROMPTS[0], "speculative", max_new_tokens=24, temperature=0.8, seed=5,
                              options=dict(draft_model=draft)),
                Request.build(PROMPTS[1], "multi_draft", max_new_tokens=20, temperature=1.0, seed=9,
                              options=dict(draft_model=draft, num_drafts=3)),
                Request.build(PROMPTS[3], "pld", max_new_tokens=10)]
    alone = [multidraft.generate_request(lm, r, artifacts=artifacts) for r in requests]
    greedy = multidraft.generate(lm, PROMPTS[0], max_new_tokens=24).token_ids
    assert alone[0].token_ids == greedy and alone[0].stats.draft_tokens_accepted > 0
    batch = generate_batch(lm, requests, artifacts=artifacts, max_num_seqs=4, prefill_chunk=5)
    for request, one, together in zip(requests, alone, batch):
        assert together.token_ids == one.token_ids, request.method


def test_blockwise_batches(lm):
    heads = random_heads(lm, num_heads=4, seed=0, scale=0.0)
    requests = [Request.build(p, "blockwise", max_new_tokens=16, options=dict(heads=heads, rescoring="none"))
                for p in PROMPTS[:3]] + [Request.build(PROMPTS[3], "greedy", max_new_tokens=12)]
    alone = [multidraft.generate_request(lm, r) for r in requests]
    batch = generate_batch(lm, requests, max_num_seqs=4)
    assert [g.token_ids for g in batch] == [g.token_ids for g in alone]
    assert sum(g.stats.draft_tokens_proposed for g in batch[:3]) > 0


def test_own_decoder_methods_run_alone_between_steps(lm):
    engine = Engine(lm, max_num_seqs=4)
    beam = Request.build(PROMPTS[0], "beam", max_new_tokens=8, options=dict(num_beams=2))
    ids = [engine.submit(Request.build(PROMPTS[1], "pld", max_new_tokens=20)), engine.submit(beam)]
    engine.run()
    assert engine.take(ids[1]).token_ids == multidraft.generate_request(lm, beam).token_ids
    assert engine.metrics.num_requests_alone == 1
    assert engine.take(ids[0]).token_ids == multidraft.generate(lm, PROMPTS[1], "pld", max_new_tokens=20).token_ids


def test_cancel_mid_batch_leaves_the_others_unchanged(lm):
    requests = [Request.build(p, "pld", max_new_tokens=30) for p in PROMPTS[:4]]
    alone = [multidraft.generate_request(lm, r).token_ids for r in requests]
    engine = Engine(lm, max_num_seqs=4, prefill_chunk=4)
    ids = [engine.submit(r) for r in requests]
    for _ in range(4):
        engine.step()
    assert engine.cancel(ids[1]) and engine.cancel(ids[3])
    engine.run()
    cancelled = engine.take(ids[1])
    assert cancelled.stats.stop_reason == "cancelled"
    assert cancelled.token_ids == alone[1][:len(cancelled.token_ids)]
    assert engine.take(ids[0]).token_ids == alone[0] and engine.take(ids[2]).token_ids == alone[2]
    assert not engine.cancel(ids[0])                          # finished (and taken): nothing to cancel
    assert engine.arena.free_slots == engine.arena.slots      # every region returned


def test_a_long_prompt_does_not_stall_short_requests(lm):
    """Fairness: a long prompt is read `prefill_chunk` rows per step while the short request already decodes."""
    long_prompt = " ".join(["the cat sat on the mat and then the dog ran"] * 6)
    engine = Engine(lm, max_num_seqs=4, prefill_chunk=4)
    steps = collections.defaultdict(list)
    step = [0]
    long_id = engine.submit(Request.build(long_prompt, "greedy", max_new_tokens=4),
                            on_token=lambda t: steps["long"].append(step[0]))
    short_id = engine.submit(Request.build("a dog", "greedy", max_new_tokens=6),
                             on_token=lambda t: steps["short"].append(step[0]))
    while engine.has_work():
        step[0] += 1
        engine.step()
    assert len(lm.encode(long_prompt)) > 40
    assert steps["short"][-1] < steps["long"][0], steps       # the short one finished before the long one began
    assert engine.take(long_id).token_ids == multidraft.generate(lm, long_prompt, max_new_tokens=4).token_ids
    assert engine.take(short_id).token_ids == multidraft.generate(lm, "a dog", max_new_tokens=6).token_ids


def test_kv_memory_is_bounded(lm):
    """Requests are admitted only while a region fits in the arena; one that never fits is refused at submit."""
    engine = Engine(lm, max_num_seqs=8, kv_slots=160, draft_room=16)
    request = Request.build(PROMPTS[0], "pld", max_new_tokens=40)      # ~12 + 40 + 16 slots: two fit in 160
    ids = [engine.submit(request) for _ in range(4)]
    most = 0
    while engine.has_work():
        engine.step()
        most = max(most, engine.metrics.num_requests_running)
        assert engine.arena.slots - engine.arena.free_slots <= 160
    assert most == 2
    expected = multidraft.generate_request(lm, request).token_ids
    assert all(engine.take(i).token_ids == expected for i in ids)
    with pytest.raises(PromptError, match="KV slots"):
        engine.submit(Request.build(PROMPTS[0], "pld", max_new_tokens=200))


def test_engine_refuses_bad_settings(lm):
    with pytest.raises(InvalidOptionError, match="max_num_seqs"):
        Engine(lm, max_num_seqs=0)
    with pytest.raises(InvalidOptionError, match="Request"):
        Engine(lm).submit("the cat")
    chunked = make_tiny_lm("qwen2", seed=1, layer_types=["full_attention", "chunked_attention"])
    with pytest.raises(InvalidOptionError, match="chunked_attention.*multidraft.generate"):
        Engine(chunked)


def test_sliding_window_requests_batch_with_their_own_window():
    """Sliding-window layers (Qwen2's here, on HF's eager modules): each request's rows are windowed by position in
    its region, so past the 8-key window a request's greedy tokens are the ones it gets alone."""
    windowed = make_tiny_lm("qwen2", seed=1, use_sliding_window=True, sliding_window=8, max_window_layers=0)
    requests = [Request.build(p, m, max_new_tokens=16) for p in PROMPTS[:3] for m in ("greedy", "pld")]
    alone = [multidraft.generate_request(windowed, r).token_ids for r in requests]
    batch = generate_batch(windowed, requests, max_num_seqs=4, prefill_chunk=5)
    assert [g.token_ids for g in batch] == alone


def test_metrics_count_drafts_and_batches(lm):
    engine = Engine(lm, max_num_seqs=3)
    ids = [engine.submit(Request.build(p, "pld", max_new_tokens=24)) for p in PROMPTS[:3]]
    engine.run()
    results = [engine.take(i) for i in ids]
    m = engine.metrics
    assert m.spec_decode_num_draft_tokens == sum(g.stats.draft_tokens_proposed for g in results)
    assert m.spec_decode_num_accepted_tokens == sum(g.stats.draft_tokens_accepted for g in results)
    assert m.spec_decode_num_accepted_tokens_per_pos[0] <= m.spec_decode_num_drafts
    assert max(m.batch_size_histogram) == 3 and m.generation_tokens_total == sum(len(g.token_ids) for g in results)
    assert m.num_requests_running == 0 and m.num_requests_waiting == 0


def test_packed_forward_equals_separate_forwards(lm):
    arena = KVArena(512)
    first, second = arena.allocate(100), arena.allocate(100)
    a, b = [5, 6, 7, 8, 9, 10, 11], [3, 4, 20, 21]
    out = packed_forward(lm, arena, [Segment(first, a), Segment(second, b, all_logits=False)])
    cache_a, cache_b = KVCache(), KVCache()
    torch.testing.assert_close(out[0].logits, lm.forward(cache_a, a).logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(out[1].logits, lm.forward(cache_b, b).logits[-1:], rtol=0, atol=1e-5)
    tree, parents = [12, 13, 14, 15], [-1, 0, 0, 1]
    out = packed_forward(lm, arena, [Segment(second, [30, 31]), Segment(first, tree, parents)])
    torch.testing.assert_close(out[1].logits, lm.forward(cache_a, tree, parents=parents).logits, rtol=0, atol=1e-5)
    first.keep(len(a) + 1, [len(a) + 3])                      # keep the root and node 2: bookkeeping only
    cache_a.keep(len(a) + 1, [len(a) + 3])
    out = packed_forward(lm, arena, [Segment(first, [40])])
    torch.testing.assert_close(out[0].logits, lm.forward(cache_a, [40]).logits, rtol=0, atol=1e-5)
    assert first.length == cache_a.length


# ----------------------------------------------------------------------------- the global draft budget


def _policy(costs, rate):
    policy = DraftLength(costs)
    for _ in range(30):
        policy.observe(8, round(8 * rate))
    return policy


def test_budget_keeps_drafts_when_rows_are_free_and_drops_them_when_they_are_not():
    free, steep = ForwardCosts(), ForwardCosts()
    for rows in range(1, 40):
        free.record(rows, 1.0)
        steep.record(rows, float(rows))
    good = [(_policy(free, 0.9), list(range(9))) for _ in range(4)]
    assert batch_depths(free, 4, 4.0, good) == [8, 8, 8, 8]
    assert batch_depths(steep, 4, 4.0, [(_policy(steep, 0.9), list(range(9))) for _ in range(4)]) == [0, 0, 0, 0]


def test_budget_at_batch_size_one_is_the_request_s_own_choice():
    costs = ForwardCosts()
    for rows, seconds in ((1, 1.0), (2, 1.05), (3, 1.1), (4, 1.2), (5, 1.6), (6, 2.0), (7, 2.5), (8, 3.0), (9, 3.5)):
        costs.record(rows, seconds)
    for rate in (0.2, 0.5, 0.8, 0.95):
        policy = _policy(costs, rate)
        assert batch_depths(costs, 1, 1.0, [(policy, list(range(9)))]) == [policy.best_depth(8)], rate


def test_budget_gives_rows_to_the_request_that_accepts_more():
    costs = ForwardCosts()
    for rows in range(1, 40):
        costs.record(rows, 1.0 + 0.15 * max(0, rows - 4))
    depths = batch_depths(costs, 2, 2.0, [(_policy(costs, 0.95), list(range(9))), (_policy(costs, 0.1), list(range(9)))])
    assert depths[0] > depths[1]


def test_budget_needs_no_one_row_measurement():
    """A busy engine never runs a 1-row forward: the budget compares measured sizes, not ratios to cost(1)."""
    costs = ForwardCosts()
    for rows in range(4, 40):
        costs.record(rows, float(rows))                   # every row costs as much as the others: drafts do not pay
    assert batch_depths(costs, 4, 4.0, [(_policy(costs, 0.5), list(range(9))) for _ in range(4)]) == [0, 0, 0, 0]


def test_budget_does_not_take_unseen_row_counts_for_free():
    """Rows flat up to 8, then 0.175 of a forward each (a CPU's curve), and drafts that are either wrong at their
    first token or right to the end, half and half (+0.5 token a drafted row): not worth 0.175 of a forward when a
    row of the batch gives a token for 0.2. Taking an unseen size at the price of the dearest smaller one made 9 to
    15 rows cost what 8 do and 88 what 16 do, so all 80 drafted rows looked worth it; priced on the line through
    the measured sizes, drafting stops. Drafts that are always accepted still pay."""
    costs = ForwardCosts()
    for rows, seconds in ((1, 1.0), (8, 1.6), (16, 3.0)):
        costs.record(rows, seconds)

    def policy(all_right_every):
        drafts = DraftLength(costs)
        for step in range(40):
            drafts.observe(10, 10 if step % all_right_every == 0 else 0)
        return drafts

    assert batch_depths(costs, 8, 8.0, [(policy(2), list(range(11))) for _ in range(8)]) == [0] * 8
    assert costs.cost(12) == pytest.approx(1.6 + 4 * 1.4 / 8) and costs.cost(40) == pytest.approx(3.0 + 24 * 1.4 / 8)
    assert sum(batch_depths(costs, 8, 8.0, [(policy(1), list(range(11))) for _ in range(8)])) > 0


def test_nodes_by_depth():
    assert nodes_by_depth([1, 2, 2, 3]) == [0, 1, 3, 4]
    assert nodes_by_depth([]) == [0]


def test_adaptive_requests_keep_their_tokens_under_the_global_budget(lm):
    requests = [Request.build(p, m, max_new_tokens=30, draft_length="adaptive") for p in PROMPTS[:4]
                for m in ("pld", "suffix")]
    alone = [multidraft.generate_request(lm, r).token_ids for r in requests]
    assert [g.token_ids for g in generate_batch(lm, requests, max_num_seqs=8)] == alone


# ----------------------------------------------------------------------------- exact law, batched


@pytest.mark.slow
def test_batched_speculative_sampling_keeps_the_target_law():
    """Seeded runs of speculative sampling, 8 at a time in one engine: chi-square against the exact law of the
    first 3 tokens (as tests/test_draft_model_sampling.py does for the single loop)."""
    from multidraft.models.runner import LM
    from tests.test_sampling import chi_square_p_value, exact_sequence_law
    from tests.tiny_models import make_tiny_hf_model, make_tokenizer

    target = LM(make_tiny_hf_model("llama", seed=11, vocab_size=12), make_tokenizer(), name="tiny-12")
    draft = LM(make_tiny_hf_model("qwen2", seed=13, vocab_size=12), make_tokenizer(), name="tiny-12-draft")
    prompt = [3, 4, 5, 3, 4, 5, 3, 4]
    law = exact_sequence_law(target, prompt, 3, 1.0)
    runs = 800
    requests = [Request.build(prompt, "speculative", max_new_tokens=3, temperature=1.0, seed=seed,
                              options=dict(draft_model=draft, num_draft_tokens=2)) for seed in range(runs)]
    results = generate_batch(target, requests, max_num_seqs=8)
    counts = collections.Counter(tuple(g.token_ids) for g in results)
    assert sum(g.stats.draft_tokens_accepted for g in results) > runs // 4
    assert chi_square_p_value(law, counts, runs) > 1e-3
    # and each seed's tokens are the single loop's (whose law tests/test_draft_model_sampling.py checks)
    assert all(multidraft.generate_request(target, r).token_ids == g.token_ids
               for r, g in zip(requests[:100], results[:100]))


# ----------------------------------------------------------------------------- quantized: bit-exact


@pytest.fixture(scope="module")
def quantized_lm():
    require_quantized_kernels()
    from tests.test_quantized_runner import _tiny
    return _tiny("qwen2", "Q4_K")[0]


def test_quantized_packed_logits_are_the_same_bits_alone_and_in_a_batch(quantized_lm):
    lm = quantized_lm
    prompt = [1, 5, 9, 3, 7, 22] * 10                          # 60 rows: below the dense-GEMM prefill
    alone = KVCache()
    lm.forward(alone, prompt)
    steps = [4, 17, 30, 8, 12, 44]
    single = [lm.forward(alone, [token]).logits[0] for token in steps]
    arena = KVArena(1024)
    mine, other, third = arena.allocate(200), arena.allocate(200), arena.allocate(200)
    packed_forward(lm, arena, [Segment(other, [3, 4, 5, 6, 7], None, False), Segment(mine, prompt[:25], None, False)])
    packed_forward(lm, arena, [Segment(mine, prompt[25:], None, False), Segment(third, list(range(1, 40)), None, False)])
    for token, expected in zip(steps, single):
        out = packed_forward(lm, arena, [Segment(third, [9, 10, 11], [-1, 0, 0]), Segment(mine, [token]),
                                         Segment(other, [8, 9])])
        assert torch.equal(out[1].logits[0], expected)


def test_quantized_long_prompt_uses_the_same_dense_prefill_as_generate(quantized_lm):
    """A prompt of more than PREFILL_GEMM_ROWS tokens read in one chunk of its own: the same dense prefill as
    lm.forward, so the engine's tokens are generate's even there, alone and beside other requests."""
    from multidraft.models.quantized import PREFILL_GEMM_ROWS

    ids = [1, 5, 9, 3, 7, 22, 4, 8] * 12
    reference = quantized_lm.forward(KVCache(), ids, logits_rows=slice(-1, None)).logits
    for dense in (True, False):
        arena = KVArena(512)
        out = packed_forward(quantized_lm, arena, [Segment(arena.allocate(200), ids, None, False)], dense=dense)
        assert torch.equal(out[0].logits, reference) == dense      # the kernel path rounds differently (~1e-3)
    long_prompt = " ".join(["the cat sat on the mat and then the dog ran"] * 10)
    assert len(quantized_lm.encode(long_prompt)) > PREFILL_GEMM_ROWS + 1
    requests = [Request.build(long_prompt, "pld", max_new_tokens=16), Request.build(PROMPTS[1], "greedy",
                                                                                    max_new_tokens=20)]
    alone = [multidraft.generate_request(quantized_lm, r).token_ids for r in requests]
    batch = generate_batch(quantized_lm, requests, max_num_seqs=2, prefill_chunk=256)
    assert [g.token_ids for g in batch] == alone


def test_quantized_tokens_alone_equal_tokens_in_batches(quantized_lm):
    requests = [Request.build(p, m, max_new_tokens=24, **kw) for p in PROMPTS[:3]
                for m, kw in (("greedy", {}), ("pld", {}), ("sample", dict(temperature=0.9, seed=4)),
                              ("pld", dict(temperature=0.9, seed=4)), ("suffix", {}))]
    alone = [multidraft.generate_request(quantized_lm, r).token_ids for r in requests]
    for max_num_seqs in (2, 8):
        batch = generate_batch(quantized_lm, requests, max_num_seqs=max_num_seqs, prefill_chunk=7)
        assert [g.token_ids for g in batch] == alone


# ----------------------------------------------------------------------------- a real model


def test_smollm_tokens_alone_equal_tokens_in_a_batch(smollm):
    prompts = ["def fibonacci(n):\n    if n < 2:", "The capital of France is", "x = [1, 2, 3]\ny = [v * 2 for v in x]\n"]
    requests = [Request.build(p, m, max_new_tokens=12, **kw) for p, (m, kw) in
                zip(prompts * 2, [("greedy", {}), ("pld", {}), ("suffix", {}), ("sample", dict(temperature=0.8, seed=1)),
                                  ("pld", dict(temperature=0.8, seed=2)), ("pld_plus", {})])]
    alone = [multidraft.generate_request(smollm, r).token_ids for r in requests]
    batch = generate_batch(smollm, requests, max_num_seqs=6, prefill_chunk=8)
    assert [g.token_ids for g in batch] == alone


def test_q8_runner_tokens_alone_equal_tokens_in_batches(quantized_lm):
    """8-bit activations: each row quantized on its own, prefills without the dense GEMM: batch-invariant too."""
    from tests.test_quantized_runner import _tiny

    lm = _tiny("qwen2", "Q4_K")[0]
    assert lm.use_runner("quantized-q8") == "quantized-q8"
    long_prompt = " ".join(["the cat sat on the mat and then the dog ran"] * 10)
    requests = [Request.build(long_prompt, "pld", max_new_tokens=16)] + [
        Request.build(p, m, max_new_tokens=20, **kw) for p in PROMPTS[:3]
        for m, kw in (("greedy", {}), ("suffix", {}), ("sample", dict(temperature=0.9, seed=3)))]
    alone = [multidraft.generate_request(lm, r).token_ids for r in requests]
    for prefill_alone in (True, False):
        batch = generate_batch(lm, requests, max_num_seqs=6, prefill_chunk=16, prefill_alone=prefill_alone)
        assert [g.token_ids for g in batch] == alone


def test_gemma3_tokens_alone_equal_tokens_in_batches():
    """Gemma3's sliding-window layers in the engine's arena (packed.py windows each request's rows in its region):
    every request, past its 8-key window, gets the tokens it gets alone, on the native forward."""
    require_quantized_kernels()
    from tests.tiny_gguf import tiny_gguf_lm

    lm = tiny_gguf_lm("gemma3", "Q4_K", seed=2, runner="native")
    assert lm.runner == "native" and lm.model.config.sliding_window == 8
    requests = [Request.build(p, m, max_new_tokens=20, **kw) for p in PROMPTS[:3]
                for m, kw in (("greedy", {}), ("pld", {}), ("suffix", {}), ("sample", dict(temperature=0.9, seed=3)))]
    alone = [multidraft.generate_request(lm, r).token_ids for r in requests]
    batch = generate_batch(lm, requests, max_num_seqs=6, prefill_chunk=5)
    assert [g.token_ids for g in batch] == alone


def test_engine_steps_are_priced_on_their_longest_contexts_table(monkeypatch):
    """A batch's steps are recorded in the cost table of the longest context among its decoding requests (buckets
    shrunk to 32 keys for a tiny model): a long prompt's batch leaves the short table as it was while it decodes."""
    from multidraft.decoders import draft_length

    monkeypatch.setattr(draft_length, "CONTEXT_BUCKET", 32)
    lm = make_tiny_lm("qwen2", seed=1)
    repeating = [5, 6, 7, 8, 9] * 9
    short = [Request.build(repeating[i:i + 10], "pld", max_new_tokens=8) for i in range(3)]
    generate_batch(lm, short, max_num_seqs=3)
    short_table = draft_length.forward_costs(lm, past=0)
    steps_before = {n: list(recent) for n, recent in short_table._recent.items()}
    assert steps_before and draft_length.forward_costs(lm, past=40)._recent == {}
    # The long request outlives the short one (at most 3 tokens a step for 40 tokens; the short one's 8 tokens take at
    # most 8 steps): a step after it ends would rightly be the short one's alone, priced in the short table.
    long = Request.build(repeating[:40], "pld", max_new_tokens=40, options={"num_draft_tokens": 2})
    results = generate_batch(lm, [long] + short[:1], max_num_seqs=2)
    assert len(results[0].token_ids) == 40
    assert draft_length.forward_costs(lm, past=40)._recent
    assert {n: list(recent) for n, recent in short_table._recent.items()} == steps_before

"""The engine batches the draft models' forwards too (multidraft.batched_drafts): every request's proposal asks for
its draft forwards one at a time, and those of one depth level of all requests with one draft model run as ONE
packed forward over the draft model's KV arena.

Checked here: a request's tokens alone (`generate_request`, its draft session on its own cache) == inside batches
of 2-8 mixed requests, greedy and seeded sampling, for speculative / multi_draft / mtad / bild, on fp32 eager tiny
models and on the quantized runners (there the draft logits themselves are the same bits); the number of draft-model
forwards per step is the number of depth levels, not requests x levels; a draft model the packed forward cannot
serve keeps its per-request path.
"""

import pytest
import torch

import multidraft
from multidraft import Engine, Request, generate_batch
from multidraft.api import prepare_request
from multidraft.batched_drafts import DraftBatch
from multidraft.drafters.base import run_alone
from multidraft.drafters.draft_session import DraftSession
from multidraft.types import DecodeStats
from tests.installed import require_quantized_kernels
from tests.tiny_models import make_tiny_lm, perturbed_copy

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = ["the cat sat on the mat and the cat sat on", "def x ( y ) : return x ( y ) + 1 if x",
           "a dog ran on the mat . a dog ran", "a", "then the cat ran and the dog sat on the mat . then"]
LONG_PROMPT = " ".join(["the cat sat on the mat and then the dog ran"] * 10)      # > 64 tokens: a dense prefill


def _draft_requests(draft, sampled: bool, long_prompt: bool = False):
    """The four draft-model methods (two shapes of multi_draft), each greedy and (if sampled) seeded, beside
    requests that draft without a model."""
    rows = [("speculative", {}), ("multi_draft", {}), ("mtad", {}), ("bild", {}),
            ("multi_draft", dict(num_drafts=3, num_draft_tokens=3, stop_below=0.2)),
            ("speculative", dict(num_draft_tokens=3, adaptive=True))]
    requests = []
    for i, (method, options) in enumerate(rows):
        prompt = LONG_PROMPT if long_prompt and i == 0 else PROMPTS[i % len(PROMPTS)]
        kwargs = dict(temperature=0.8 + 0.1 * (i % 3), seed=40 + i) if sampled and i % 2 == 0 else {}
        # draft_length="fixed": every drafted token verified, so the accepted counts alone and batched can be
        # compared (adaptive's depths follow measured forward costs, which differ between the two)
        requests.append(Request.build(prompt, method, max_new_tokens=14 + 3 * i, draft_length="fixed",
                                      options=dict(draft_model=draft, **options), **kwargs))
    requests += [Request.build(PROMPTS[2], "pld", max_new_tokens=12, draft_length="fixed"),
                 Request.build(PROMPTS[4], "greedy", max_new_tokens=9)]
    return requests


def _check_alone_equals_batched(target, requests, batches=((2, 3), (5, 16), (8, 256)), modes=(True, False)):
    artifacts = multidraft.Artifacts()
    alone = [multidraft.generate_request(target, r, artifacts=artifacts) for r in requests]
    assert sum(g.stats.draft_tokens_accepted for g in alone) > 0
    for max_num_seqs, chunk in batches:
        for prefill_alone in modes:
            batch = generate_batch(target, requests, artifacts=artifacts, max_num_seqs=max_num_seqs,
                                   prefill_chunk=chunk, prefill_alone=prefill_alone)
            for request, one, together in zip(requests, alone, batch):
                assert together.token_ids == one.token_ids, (request.method, request.params, max_num_seqs, chunk)
                assert together.stats.draft_tokens_accepted == one.stats.draft_tokens_accepted
    return alone


# ----------------------------------------------------------------------------- fp32 eager, tiny models


@pytest.mark.parametrize("sampled", [False, True])
def test_draft_model_tokens_alone_equal_tokens_in_batches(target, draft, sampled):
    alone = _check_alone_equals_batched(target, _draft_requests(draft, sampled))
    assert len({tuple(g.token_ids) for g in alone}) > 5


def _count_calls(lm) -> list[int]:
    """A counter of the model's forwards, whichever path calls it (LM.forward or a packed forward)."""
    calls = [0]
    lm.model.register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def test_draft_forwards_are_one_per_depth_level_not_per_request(target):
    draft = perturbed_copy(target, 0.3, seed=2)           # its own copy: the hook counts this test's calls only
    calls = _count_calls(draft)
    length = 4
    requests = [Request.build(PROMPTS[i % 5] + " on", "speculative", max_new_tokens=30, draft_length="fixed",
                              options=dict(draft_model=draft, num_draft_tokens=length)) for i in range(6)]
    engine = Engine(target, max_num_seqs=6, prefill_alone=False)     # draft prefills share the level's forward too
    ids = [engine.submit(r) for r in requests]
    batched_steps = 0
    while engine.has_work():
        before_calls, before_metric = calls[0], engine.metrics.num_draft_forwards
        before = {i: engine.scheduler.entries[i].prepared.stats.draft_calls for i in ids if i in engine.scheduler.entries}
        engine.step()
        per_request = [engine.scheduler.entries[i].prepared.stats.draft_calls - n for i, n in before.items()
                       if i in engine.scheduler.entries]
        step_calls = calls[0] - before_calls
        assert step_calls == engine.metrics.num_draft_forwards - before_metric
        assert step_calls == max(per_request, default=0) <= length       # one forward per depth level
        if sum(per_request) > step_calls:
            batched_steps += 1
    results = [engine.take(i) for i in ids]
    assert batched_steps >= 3
    per_request_total = sum(g.stats.draft_calls for g in results)
    assert calls[0] == engine.metrics.num_draft_forwards and calls[0] * 3 <= per_request_total
    alone = [multidraft.generate_request(target, r) for r in requests]
    assert [g.token_ids for g in results] == [g.token_ids for g in alone]
    assert sum(g.stats.draft_calls for g in alone) == per_request_total


def test_a_draft_model_the_packed_forward_cannot_serve_drafts_per_request(target, monkeypatch):
    """A draft model the packed forward cannot serve (said so here, for a sliding-window one): its sessions keep
    their own caches, one forward per request and level."""
    import multidraft.batched_drafts as batched_drafts

    windowed = make_tiny_lm("qwen2", seed=6, use_sliding_window=True, sliding_window=8, max_window_layers=0)
    assert DraftBatch(64, True).wants_region(_drafter(target, windowed)) is True      # it can, in fact
    monkeypatch.setattr(batched_drafts, "unsupported_reason", lambda lm: "not in the arena" if lm is windowed else None)
    assert DraftBatch(64, True).wants_region(_drafter(target, windowed)) is False
    requests = [Request.build(p, "speculative", max_new_tokens=10, options=dict(draft_model=windowed))
                for p in PROMPTS[:3]]
    engine = Engine(target, max_num_seqs=3)
    ids = [engine.submit(r) for r in requests]
    engine.run()
    results = [engine.take(i) for i in ids]
    assert engine.metrics.num_draft_forwards == sum(g.stats.draft_calls for g in results)
    assert [g.token_ids for g in results] == [multidraft.generate_request(target, r).token_ids for r in requests]


def _drafter(target, draft_lm):
    request = Request.build(PROMPTS[0], "speculative", max_new_tokens=4, options=dict(draft_model=draft_lm))
    return prepare_request(target, request).loop_pair(target, request)[0]


def test_draft_regions_are_returned(target, draft):
    engine = Engine(target, max_num_seqs=3, kv_slots=1024)
    ids = [engine.submit(Request.build(p, "multi_draft", max_new_tokens=12, options=dict(draft_model=draft)))
           for p in PROMPTS[:4]]
    engine.step()
    engine.step()
    engine.cancel(ids[0])
    engine.run()
    assert engine.take(ids[0]).stats.stop_reason == "cancelled"
    for i in ids[1:]:
        engine.take(i)
    arenas = [arena for _, arena in engine.drafts._arenas.values()]
    assert len(arenas) == 1 and arenas[0].free_slots == 1024 and engine.arena.free_slots == 1024


# ----------------------------------------------------------------------------- quantized: bit-exact


def _quantized_pair(runner: str):
    require_quantized_kernels()
    from tests.test_quantized_runner import _tiny

    target, draft = _tiny("qwen2", "Q4_K")[0], _tiny("qwen2", "Q6_K")[0]      # the same weights: a close draft
    for lm in (target, draft):
        lm.use_runner(runner)
    return target, draft


@pytest.fixture(scope="module", params=["quantized", "quantized-q8"])
def quantized_pair(request):
    return _quantized_pair(request.param)


def _session_steps(session, prompt):
    """A draft session's forwards of two steps: the prompt, a 2-level tree on it, a tree grown on cached tree
    nodes, the kept path, the next start. Returns every level's logits."""
    rows = [(yield from session.start(prompt))]
    level1, nodes1 = yield from session.extend([5, 6], [-1, -1])
    level2, nodes2 = yield from session.extend([7, 8, 9], [nodes1[0], nodes1[1], nodes1[1]])
    level3, _ = yield from session.extend([10], [nodes2[1]])
    session.keep_path([nodes1[1], nodes2[1]])
    rows += [level1, level2, level3, (yield from session.start(list(prompt) + [6, 8, 11]))]
    chain, _ = yield from session.extend([12], [-1])
    return rows + [chain, (yield from session.extend([13], [0]))[0]]


def test_quantized_draft_logits_are_the_same_bits_alone_and_packed(quantized_pair):
    target, draft = quantized_pair
    prompts = [draft.encode(LONG_PROMPT), [1, 5, 9, 3, 7, 22] * 4, [4, 8]]
    alone = [run_alone(_session_steps(DraftSession(draft, target.vocab_size, target.device, DecodeStats()), p))
             for p in prompts]
    for prefill_alone in (True, False):
        batch = DraftBatch(1024, prefill_alone)
        steps = {}
        for i, prompt in enumerate(prompts):
            drafter = _drafter(target, draft)
            assert batch.allocate(drafter, 200) is not None
            session = DraftSession(draft, target.vocab_size, target.device, DecodeStats(), cache=drafter.draft_cache)
            steps[i] = _session_steps(session, prompt)
        outcomes = batch.propose(steps)
        assert batch.forwards == 7 + (2 if prefill_alone else 0)          # one per level (+ prefills alone)
        for i in range(len(prompts)):
            same = all(torch.equal(a, b) for a, b in zip(alone[i], outcomes[i]))
            # the long prompt's draft prefill: LM.forward's dense GEMM alone, the kernel when packed (fp32 only)
            expected = prefill_alone or i != 0 or target.runner == "quantized-q8"
            assert same == expected, (i, prefill_alone)


def test_quantized_draft_model_tokens_alone_equal_tokens_in_batches(quantized_pair):
    """Draft and target on the quantized runner: the same tokens alone and batched, a long prompt (dense prefills of
    both models alone and in the engine: its target prompt read in one chunk) included."""
    target, draft = quantized_pair
    for sampled in (False, True):
        _check_alone_equals_batched(target, _draft_requests(draft, sampled, long_prompt=True),
                                    batches=((2, 256), (5, 256), (8, 256)), modes=(True,))

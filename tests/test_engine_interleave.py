"""Requests with their own decoder (beam) take turns with the batch (engine/solo.py): one of their forwards per engine
step, the batched requests emitting tokens in between; outputs equal their alone outputs; a cancel stops them within
one step. Counted in steps and forwards, never timed."""

import threading

import pytest

import multidraft
from multidraft import Engine, Request
from multidraft.models import gguf_kernels
from tests.tiny_gguf import tiny_gguf_lm
from tests.tiny_models import make_tiny_lm

pytestmark = pytest.mark.usefixtures("one_thread")

BEAM_PROMPT = "the cat sat on the mat and the cat sat on"
OTHER_PROMPT = "def x ( y ) : return x ( y ) + 1 if x"


@pytest.fixture(scope="module", params=["hf-modules", "native"])
def lm(request):
    """HF's modules (forward pre-hooks carry the turns) and the native forward (its own layer loop calls the LM's
    watch points: forward_watch.py)."""
    if request.param == "native":
        if not gguf_kernels.load(progress=False):
            pytest.skip(f"quantized kernels unavailable: {gguf_kernels.unavailable_reason()}")
        lm = tiny_gguf_lm("qwen2", "Q4_K", seed=1, runner="native")
        assert lm.runner == "native"
    else:
        lm = make_tiny_lm("qwen2", seed=1)
    lm.eos_token_ids = set()            # fixed lengths: the requests overlap for many steps
    return lm


def _beam():
    return Request.build(BEAM_PROMPT, "beam", max_new_tokens=10, options=dict(num_beams=3))


def _other(method):
    return Request.build(OTHER_PROMPT, method, max_new_tokens=24)


def _trace(engine, ids, tokens):
    """Per step: (beam forwards so far, tokens the other request has emitted so far)."""
    trace = []
    while not engine.done(ids[0]) or not engine.done(ids[1]):
        engine.step()
        trace.append((engine.metrics.num_alone_forwards, len(tokens)))
    return trace


@pytest.mark.parametrize("method", ["greedy", "pld"])
def test_beam_takes_turns_with_the_batch_and_both_equal_alone(lm, method):
    engine = Engine(lm, max_num_seqs=4)
    tokens = []
    ids = [engine.submit(_beam()), engine.submit(_other(method), on_token=tokens.append)]
    trace = _trace(engine, ids, tokens)
    beam, other = engine.take(ids[0]), engine.take(ids[1])
    assert beam.token_ids == multidraft.generate_request(lm, _beam()).token_ids
    assert other.token_ids == multidraft.generate_request(lm, _other(method)).token_ids
    forwards = [f for f, _ in trace]
    assert forwards[-1] == beam.stats.target_calls >= 5
    # At most one beam forward per step, and the other request emitted tokens between two beam forwards.
    assert all(b - a <= 1 for a, b in zip([0] + forwards, forwards))
    emitted_between = [t for (f0, t0), (f1, t) in zip(trace, trace[1:]) if f0 >= 1 and f1 < forwards[-1] and t > t0]
    assert len(emitted_between) >= 3
    assert engine.metrics.num_requests_alone == 1


def test_cancelling_a_beam_mid_way_stops_it_within_one_step(lm):
    engine = Engine(lm, max_num_seqs=4)
    tokens = []
    ids = [engine.submit(_beam()), engine.submit(_other("pld"), on_token=tokens.append)]
    for _ in range(3):
        engine.step()
    assert not engine.done(ids[0])
    forwards = engine.metrics.num_alone_forwards
    assert engine.cancel(ids[0])
    engine.step()
    assert engine.done(ids[0])                                  # stopped and freed within one step
    assert engine.metrics.num_alone_forwards == forwards        # before running another forward
    assert engine.take(ids[0]).stats.stop_reason == "cancelled"
    assert not engine.scheduler.solo
    engine.run()
    assert engine.take(ids[1]).token_ids == multidraft.generate_request(lm, _other("pld")).token_ids


def test_pld_plus_with_attention_rows_takes_turns_and_equals_alone(lm):
    """Its capture hooks stay on the layers while it waits for its turn: the batch's forwards must not feed them."""
    heads = [[0, 0], [1, 1]]
    ranked = Request.build(BEAM_PROMPT, "pld_plus", max_new_tokens=16, draft_length="fixed",
                           options=dict(rank_by="attention", induction_heads=heads))
    engine = Engine(lm, max_num_seqs=4)
    tokens = []
    ids = [engine.submit(ranked), engine.submit(_other("pld"), on_token=tokens.append)]
    trace = _trace(engine, ids, tokens)
    alone = multidraft.generate_request(lm, ranked)
    assert engine.take(ids[0]).token_ids == alone.token_ids and alone.stats.draft_tokens_accepted > 0
    assert engine.take(ids[1]).token_ids == multidraft.generate_request(lm, _other("pld")).token_ids
    forwards = [f for f, _ in trace]
    assert forwards[-1] >= 5 and all(b - a <= 1 for a, b in zip([0] + forwards, forwards))
    emitted_between = [t for (f0, t0), (f1, t) in zip(trace, trace[1:]) if f0 >= 1 and f1 < forwards[-1] and t > t0]
    assert len(emitted_between) >= 3                 # it did not run whole: the other request stepped in between


def test_capture_hooks_ignore_forwards_of_other_threads():
    """What lets pld_plus with attention rows wait for its turn with its hooks installed: a forward on another thread
    (the engine's batch) feeds none of them; the owner's own forward still does."""
    lm = make_tiny_lm("qwen2", seed=1)
    captured = {"hidden": [], "attn": []}
    hooks = lm._install_hooks(1, [(0, 0), (1, 1)], captured)
    other = threading.Thread(target=lambda: lm.forward(lm.new_cache(), [3, 4, 5, 6]))
    other.start()
    other.join()
    assert captured["hidden"] == []
    for hook in hooks:
        hook.remove()
    assert captured["attn"] == []                    # no layer's queries were kept
    output = lm.forward(lm.new_cache(), [3, 4, 5, 6], hidden_layer=1, attention_heads=[(0, 0), (1, 1)])
    assert output.hidden is not None and len(output.attention.queries) == 2


def test_close_stops_a_request_taking_turns_and_its_thread(lm):
    with Engine(lm, max_num_seqs=4) as engine:
        ids = [engine.submit(_beam()), engine.submit(_other("pld"))]
        engine.step()
        engine.step()
        assert engine.metrics.num_requests_running == 2        # the beam taking turns counts as running
        thread = engine.scheduler.solo[0].solo._thread
        assert thread.is_alive()
    thread.join(timeout=10)
    assert not thread.is_alive() and not engine.has_work()
    assert engine.metrics.num_requests_running == 0
    assert [engine.take(i).stats.stop_reason for i in ids] == ["cancelled", "cancelled"]

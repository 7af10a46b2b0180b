"""The batching server (serve --max-num-seqs 4) keeps the one-at-a-time server's promises for every method (issue 46):
a timeout, a hang-up while queued, inside the prefill or while streaming frees the model at once (within one layer
or one step), so the next request is answered within about a second of being sent; and a seeded sampling request
gives the same text alone and beside other traffic.

The regression of issue 46 item 1: a method that runs alone in the engine (beam, superposed, pld_plus with
attention rows) kept the model until its whole decode ended, past its 504: every later request timed out too.
Tiny models with a slowed forward (a pre-hook sleeps) make each generation long; the real-model version is
`test_a_long_beam_past_its_deadline_frees_the_model_real`."""

import socket
import threading
import time

import httpx
import pytest

from multidraft.server import ServerConfig, ServerThread, create_app
from tests.installed import load_smollm
from tests.test_fault_server import raw_request
from tests.test_server_api import metric
from tests.tiny_models import make_tiny_lm, perturbed_copy, random_heads

pytestmark = pytest.mark.usefixtures("one_thread")     # on a loaded machine, torch's thread pool stalls forwards

PROMPT = "the cat sat on the mat and the cat sat on the"
LONG_PROMPT = " ".join([PROMPT] * 8)
FOLLOW_UP = {"prompt": "a dog ran", "max_tokens": 2}
SOON = 2.0                      # seconds the follow-up may take, from being sent to its answer (a loaded machine)
FREE = 2.0                      # seconds for /health to show a stopped request gone
TIMEOUT = 3.0                   # the server's request timeout
STEP_SECONDS = 0.02             # every target forward sleeps this long (long generations)
PREFILL_SECONDS = 0.6           # a forward of a long prompt sleeps this long (time to hang up inside it)
METHODS = {
    "greedy": {},
    "sample": {"temperature": 0.9, "seed": 5},
    "pld": {},
    "pld_plus-hidden": {"method": "pld_plus", "rank_by": "hidden", "layer": 1},
    "pld_plus-attention": {"method": "pld_plus", "rank_by": "attention", "induction_head_set": "all"},
    "suffix": {},
    "speculative": {"temperature": 0.8, "seed": 3},
    "multi_draft": {"temperature": 0.8, "seed": 3},
    "mtad": {},
    "bild": {},
    "blockwise": {"heads": "tiny", "rescoring": "none"},
    "beam": {"num_beams": 16},
    "superposed": {"n": 4, "alpha": 0.0},
}


class Slow:
    """Pre-hook on the target: every forward sleeps STEP_SECONDS; one of more than 40 rows (a long prompt's
    prefill) sets `in_prefill` and sleeps PREFILL_SECONDS."""

    def __init__(self, lm):
        self.in_prefill = threading.Event()
        lm.model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, _module, args, kwargs):
        ids = args[0] if args else kwargs.get("input_ids")
        rows = ids.shape[-1] if ids is not None else 1
        if rows > 40:
            self.in_prefill.set()
            time.sleep(PREFILL_SECONDS)
        else:
            time.sleep(STEP_SECONDS)


@pytest.fixture(scope="module")
def server():
    lm = make_tiny_lm("llama", seed=3, max_position_embeddings=2048)
    draft = perturbed_copy(lm, 0.3, seed=2)
    lm.eos_token_ids = draft.eos_token_ids = set()      # every generation runs to its max_tokens
    slow = Slow(lm)
    config = ServerConfig(max_queue=8, request_timeout=TIMEOUT, max_tokens=1000, max_num_seqs=4, max_n=8,
                          artifacts={"heads": {"tiny": random_heads(lm)}})
    app = create_app(lm, config, draft_lm=draft)
    with ServerThread(app) as running:
        running.slow = slow
        yield running


def body_of(name, **extra):
    options = dict(METHODS[name])
    method = options.pop("method", name)
    return {"prompt": PROMPT, "max_tokens": 1000, "method": method, **options, **extra}


def wait_for(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def assert_served_soon(client):
    """The model is free: /health says so within a second, and a small request is answered within SOON."""
    wait_for(lambda: client.get("/health").json()["running"] == 0, FREE, "the model to be free")
    sent = time.monotonic()
    reply = client.post("/v1/completions", json=FOLLOW_UP)
    took = time.monotonic() - sent
    assert reply.status_code == 200, reply.text
    assert took < SOON, f"the next request took {took:.1f} s"


@pytest.mark.parametrize("name", sorted(METHODS))
def test_timeout_frees_the_model(server, name):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        sent = time.monotonic()
        reply = client.post("/v1/completions", json=body_of(name))
        took = time.monotonic() - sent
        assert reply.status_code == 504, reply.text
        assert reply.json()["error"]["code"] == "timeout"
        assert took < TIMEOUT + 1.5, f"the 504 took {took:.1f} s"
        assert_served_soon(client)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_hang_up_while_queued(server, name):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        cancelled = metric(client, "multidraft:requests_cancelled_total")
        holders = [raw_request(server.url, {"prompt": PROMPT, "max_tokens": 1000}) for _ in range(4)]
        try:
            wait_for(lambda: client.get("/health").json()["running"] == 4, 1.0, "4 running requests")
            queued = raw_request(server.url, body_of(name))
            wait_for(lambda: client.get("/health").json()["waiting"] == 1, 1.0, "the request to queue")
            queued.close()
            wait_for(lambda: client.get("/health").json()["waiting"] == 0, 0.5, "the queue slot to be freed")
            wait_for(lambda: metric(client, "multidraft:requests_cancelled_total") > cancelled, 0.5, "the cancels")
        finally:
            for sock in holders:
                sock.close()
        assert_served_soon(client)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_hang_up_inside_the_prefill(server, name):
    with httpx.Client(base_url=server.url, timeout=30) as client:
        server.slow.in_prefill.clear()
        sock = raw_request(server.url, body_of(name, prompt=LONG_PROMPT))
        try:
            assert server.slow.in_prefill.wait(2.0)
        finally:
            sock.close()
        assert_served_soon(client)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_hang_up_while_streaming(server, name):
    """Hang up once the first streamed bytes came; beam and superposed stream their choices only at the end (a
    beam's text is known then), so for them: once the request has run for a while."""
    with httpx.Client(base_url=server.url, timeout=30) as client:
        sock = raw_request(server.url, body_of(name, stream=True))
        sock.settimeout(0.5)
        try:
            assert sock.recv(1 << 16).startswith(b"HTTP/1.1 200")
        except socket.timeout:
            assert name in ("beam", "superposed")
            assert client.get("/health").json()["running"] == 1
        finally:
            sock.close()
        assert_served_soon(client)


def test_engine_cancel_stops_a_request_running_alone_within_a_layer():
    """The library side: Engine.cancel from another thread ends a beam search (which runs alone, inside a step)
    at its next decoder layer; its result says "cancelled", the request beside it still finishes, and the watch
    hooks are gone afterwards."""
    import multidraft
    lm = make_tiny_lm("llama", seed=3, max_position_embeddings=2048)
    lm.eos_token_ids = set()
    lm.model.register_forward_pre_hook(lambda _module, _args: time.sleep(STEP_SECONDS))
    hooks = len(lm._decoder_layers[0]._forward_pre_hooks)
    engine = multidraft.Engine(lm, max_num_seqs=4)
    beam = engine.submit(multidraft.Request.build(PROMPT, "beam", max_new_tokens=1000, options={"num_beams": 16}))
    other = engine.submit(multidraft.Request.build(PROMPT, max_new_tokens=3))
    threading.Timer(0.5, engine.cancel, [beam]).start()
    started = time.monotonic()
    engine.run()
    assert time.monotonic() - started < 2.0
    assert engine.take(beam).stats.stop_reason == "cancelled"
    assert len(engine.take(other).token_ids) == 3
    assert len(lm._decoder_layers[0]._forward_pre_hooks) == hooks


@pytest.fixture(scope="module")
def default_smollm():
    """SmolLM2-135M as `multidraft serve --model smollm2-135m` loads it (the default runner)."""
    return load_smollm()


@pytest.mark.real_model
def test_a_long_beam_past_its_deadline_frees_the_model_real(default_smollm):
    """Issue 46 item 1 as found: serve smollm2-135m --threads 1 --max-num-seqs 4 --timeout 4, a 16-beam request of
    512 tokens gets its 504, and a tiny request right after is answered at once (it used to wait behind the
    beam search and time out too)."""
    config = ServerConfig(max_queue=8, request_timeout=4.0, max_tokens=512, max_num_seqs=4)
    with ServerThread(create_app(default_smollm, config)) as running, \
            httpx.Client(base_url=running.url, timeout=60) as client:
        tiny = {"prompt": "hi", "max_tokens": 2}
        # the engine's first forward, a warm-up: on a loaded 2-core machine (a full suite's slow spell) it once took
        # past the 4 s deadline, so it may be retried; what the test checks is the answer after the beam below
        warm = [client.post("/v1/completions", json=tiny).status_code for _ in range(3)]
        assert 200 in warm, warm
        reply = client.post("/v1/completions", json={"prompt": "Write a very long story about a dragon.",
                                                     "max_tokens": 512, "method": "beam", "num_beams": 16})
        assert reply.status_code == 504, reply.text
        sent = time.monotonic()
        reply = client.post("/v1/completions", json=tiny)
        assert reply.status_code == 200, reply.text
        assert time.monotonic() - sent < SOON


# ----------------------------------------------------------------------------- seeded sampling, alone vs batched

SAMPLED = {
    "sample": {},
    "pld": {},
    "pld_plus": {"rank_by": "hidden", "layer": 1},
    "suffix": {},
    "speculative": {},
    "multi_draft": {"num_drafts": 3},
    "mtad": {},
    "bild": {},
}


@pytest.fixture(scope="module")
def one_and_four():
    """The same tiny target and draft served one at a time and batching 4, with `serve`'s default draft length
    (adaptive: chosen from measured timings, which differ between the two servers and under load)."""
    lm = make_tiny_lm("llama", seed=5)
    draft = perturbed_copy(lm, 0.3, seed=2)
    servers = [ServerThread(create_app(lm, ServerConfig(max_num_seqs=seqs, draft_length="adaptive", max_queue=32),
                                       draft_lm=draft)) for seqs in (1, 4)]
    for running in servers:
        running.start()
    yield servers
    for running in servers:
        running.stop()


def texts_of(url, body):
    reply = httpx.post(url + "/v1/completions", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    return [choice["text"] for choice in reply.json()["choices"]]


@pytest.mark.parametrize("method", sorted(SAMPLED))
def test_seeded_sampling_is_the_same_alone_and_batched(one_and_four, method):
    one, four = one_and_four
    body = {"prompt": PROMPT, "max_tokens": 24, "method": method, "temperature": 0.9, "top_p": 0.95, "seed": 1001,
            "n": 2, **SAMPLED[method]}
    expected = texts_of(one.url, body)
    assert texts_of(four.url, body) == expected
    others = [{"prompt": f"{PROMPT} {i}", "max_tokens": 12 + i, "method": m, "temperature": 0.7, "seed": i}
              for i, m in enumerate(("speculative", "multi_draft", "pld", "sample", "bild", "mtad"))]
    loaded, answers = threading.Event(), []

    def traffic():
        while not loaded.is_set():
            for other in others:
                answers.append(httpx.post(four.url + "/v1/completions", json=other, timeout=120).status_code)
    threads = [threading.Thread(target=traffic) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        during = [texts_of(four.url, body) for _ in range(3)]
    finally:
        loaded.set()
        for thread in threads:
            thread.join(120)
    assert during == [expected] * 3
    assert answers and set(answers) == {200}


@pytest.mark.real_model
@pytest.mark.slow
def test_seeded_draft_methods_keep_their_text_batching_real(default_smollm):
    """Issue 46 item 2 as found: serve --model smollm2-135m --draft smollm2-135m, a seeded multi_draft /
    speculative request sent 4 times gave up to 4 texts batching, none equal to the one-at-a-time text."""
    from multidraft.models.loader import load_model
    draft = load_model("smollm2-135m")
    body = {"prompt": "The quick brown fox jumps over the lazy dog. The quick brown fox", "max_tokens": 24,
            "temperature": 0.9, "seed": 1001, "top_p": 0.95}
    texts = {}
    for seqs in (1, 4):
        config = ServerConfig(max_num_seqs=seqs, draft_length="adaptive", request_timeout=600)
        with ServerThread(create_app(default_smollm, config, draft_lm=draft)) as running:
            for method in ("multi_draft", "speculative"):
                texts[seqs, method] = [texts_of(running.url, {**body, "method": method}) for _ in range(4)]
    for method in ("multi_draft", "speculative"):
        assert texts[4, method] == texts[1, method] == [texts[1, method][0]] * 4, method

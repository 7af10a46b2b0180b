"""The server with continuous batching (serve --max-num-seqs N): concurrent requests share each forward, and every
answer is what the request gets alone; the queue (429), timeouts (504) and disconnects behave as without batching."""

import threading
import time

import httpx
import pytest

import multidraft
from multidraft import validation
from multidraft.server import ServerConfig, ServerThread, create_app
from multidraft.server.engine_worker import EngineWorker
from tests.test_server_api import metric, sse_events
from tests.tiny_models import make_tiny_lm

PROMPTS = ["the cat sat on the mat and the cat sat on the", "def x ( y ) : return x ( y ) + 1 if x",
           "a dog ran on the mat . a dog ran", "then the cat ran and the dog sat"]


@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("llama", seed=3)


@pytest.fixture(scope="module")
def server(lm):
    app = create_app(lm, ServerConfig(max_queue=16, max_n=4, max_tokens=64, max_num_seqs=6, prefill_chunk=8))
    with ServerThread(app) as running:
        running.app = app
        yield running


def _bodies():
    bodies = []
    for i, prompt in enumerate(PROMPTS * 2):
        body = {"prompt": prompt, "max_tokens": 10 + 4 * i, "method": ["greedy", "pld", "suffix", "pld_plus"][i % 4]}
        if i % 3 == 1:
            body.update(temperature=0.9, seed=40 + i)
        if i == 5:
            body["stop"] = ["mat"]
        bodies.append(body)
    return bodies


def _alone(lm, body):
    options = {k: v for k, v in body.items() if k not in ("prompt", "max_tokens", "stop", "seed", "temperature", "n",
                                                          "stream")}
    return multidraft.generate(lm, body["prompt"], max_new_tokens=body["max_tokens"], stop=body.get("stop"),
                               temperature=body.get("temperature"), seed=body.get("seed"), **options).text


def test_concurrent_requests_are_batched_and_each_equals_its_lone_run(server, lm):
    assert isinstance(server.app.state.service.worker, EngineWorker)
    bodies = _bodies()
    answers = [None] * len(bodies)

    def ask(i):
        with httpx.Client(base_url=server.url, timeout=60) as client:
            if i % 2:
                events = sse_events(client, {**bodies[i], "stream": True})
                answers[i] = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
            else:
                answers[i] = client.post("/v1/completions", json=bodies[i]).json()["choices"][0]["text"]

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(bodies))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert answers == [_alone(lm, body) for body in bodies]
    engine = server.app.state.service.worker.engine
    assert max(engine.metrics.batch_size_histogram) > 1           # requests did share forwards
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert metric(client, "multidraft:batch_size") >= 1
        assert metric(client, "vllm:num_requests_running") == 0
        assert metric(client, "multidraft:kv_slots_used") == 0


def test_n_sampled_choices_equal_their_seeded_runs(server, lm):
    body = {"prompt": PROMPTS[1], "max_tokens": 12, "n": 3, "method": "pld", "temperature": 1.0, "seed": 7}
    with httpx.Client(base_url=server.url, timeout=60) as client:
        choices = client.post("/v1/completions", json=body).json()["choices"]
    expected = [multidraft.generate(lm, PROMPTS[1], "pld", max_new_tokens=12, temperature=1.0,
                                    seed=validation.nth_seed(7, i)).text for i in range(3)]
    assert [c["text"] for c in sorted(choices, key=lambda c: c["index"])] == expected


def test_own_decoder_methods_run_alone_in_the_batching_server(server, lm):
    body = {"prompt": PROMPTS[0], "max_tokens": 6, "method": "beam", "num_beams": 2}
    with httpx.Client(base_url=server.url, timeout=60) as client:
        text = client.post("/v1/completions", json=body).json()["choices"][0]["text"]
    assert text == multidraft.generate(lm, PROMPTS[0], "beam", max_new_tokens=6, num_beams=2).text


def test_bad_request_inside_the_engine_is_a_400(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        response = client.post("/v1/completions", json={"prompt": [999], "max_tokens": 4})
    assert response.status_code == 400


@pytest.fixture(scope="module")
def slow_server():
    """Every forward sleeps (a pre-hook on the model): timeouts, the queue and hang-ups are seen between steps."""
    lm = make_tiny_lm("llama", seed=3)
    lm.model.register_forward_pre_hook(lambda module, args: time.sleep(0.03))
    app = create_app(lm, ServerConfig(max_queue=1, request_timeout=1.0, max_tokens=500, max_num_seqs=2))
    with ServerThread(app) as running:
        running.app = app
        yield running


def test_queue_timeout_and_disconnect_with_batching(slow_server):
    url = slow_server.url
    statuses = []

    def ask():
        statuses.append(httpx.post(url + "/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 200},
                                   timeout=30).status_code)

    threads = [threading.Thread(target=ask) for _ in range(5)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)
    for thread in threads:
        thread.join(30)
    # 2 run together, 1 waits, the others are refused; the admitted ones pass the 1 s limit.
    assert sorted(statuses) == [429, 429, 504, 504, 504]
    with httpx.Client(base_url=url, timeout=30) as client:
        assert metric(client, "multidraft:requests_timed_out_total") == 3
        cancelled = metric(client, "multidraft:requests_cancelled_total")
        with client.stream("POST", "/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 200, "stream": True,
                                                            "stop": ["zzz"]}) as response:
            lines = response.iter_lines()
            next(lines), next(lines)
        deadline = time.monotonic() + 5
        while metric(client, "multidraft:requests_cancelled_total") < cancelled + 1:
            assert time.monotonic() < deadline, "the server did not notice the disconnect"
            time.sleep(0.05)
        while metric(client, "vllm:num_requests_running") > 0:
            assert time.monotonic() < deadline, "the cancelled generation kept running"
            time.sleep(0.05)
        assert client.post("/v1/completions", json={"prompt": PROMPTS[0], "max_tokens": 2}).status_code == 200


def test_batching_flags_reach_the_config():
    from multidraft.cli import build_parser
    from multidraft.errors import InvalidOptionError
    from multidraft.server.cli import build_config

    args = build_parser().parse_args(["serve", "--model", "m", "--max-num-seqs", "8", "--max-batched-tokens", "4096",
                                      "--prefill-chunk", "64"])
    config = build_config(args)
    assert (config.max_num_seqs, config.max_batched_tokens, config.prefill_chunk) == (8, 4096, 64)
    assert ServerConfig().max_num_seqs == 8                    # batching unless asked for one at a time
    with pytest.raises(InvalidOptionError, match="max_num_seqs"):
        ServerConfig(max_num_seqs=0).validate()


def test_a_model_the_engine_cannot_batch_is_served_one_at_a_time(lm, monkeypatch, caplog):
    from multidraft.server import service
    from multidraft.server.worker import ModelWorker

    monkeypatch.setattr(service.EngineWorker, "__init__", lambda *a, **k: (_ for _ in ()).throw(
        multidraft.InvalidOptionError("the engine cannot batch it: sliding windows")))
    app = create_app(lm, ServerConfig(max_num_seqs=4))
    try:
        assert isinstance(app.state.service.worker, ModelWorker)
        assert "one request at a time" in caplog.text
    finally:
        app.state.service.close()

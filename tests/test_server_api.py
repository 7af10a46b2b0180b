"""The HTTP server on tiny random models over loopback: API shapes, bad input, 429, timeouts, cancellation,
metrics. (The official openai client on SmolLM2 is in test_server_openai.py.)"""

import json
import threading
import time

import httpx
import pytest

import multidraft
from multidraft.server import ServerConfig, ServerThread, create_app
from multidraft.server.worker import Job
from tests.tiny_models import make_tiny_lm

PROMPT = "the cat sat on the mat and the cat sat on the"


@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("llama", seed=3)


@pytest.fixture(scope="module")
def server(lm):
    # One request at a time (ModelWorker): hold_worker occupies the model thread with a raw Job of its own.
    app = create_app(lm, ServerConfig(max_queue=4, max_n=4, max_tokens=64, max_prompt_tokens=100, max_num_seqs=1))
    with ServerThread(app) as running:
        running.app = app
        yield running


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as http:
        yield http


def metric(client, name, **labels):
    """A sample's value from /metrics (0 when absent)."""
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + "{") and all(w in line for w in wanted):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class SlowLM:
    """Wraps an LM so every forward sleeps: lets timeouts and cancellation be seen between tokens."""

    def __init__(self, lm, seconds):
        self._lm, self._seconds = lm, seconds

    def __getattr__(self, name):
        return getattr(self._lm, name)

    def forward(self, *args, **kwargs):
        time.sleep(self._seconds)
        return self._lm.forward(*args, **kwargs)


def hold_worker(app):
    """Occupy the model worker with a job that waits for the returned event."""
    release = threading.Event()
    started = threading.Event()
    import asyncio
    loop = asyncio.new_event_loop()

    def block(job):
        started.set()
        release.wait(30)

    app.state.worker.submit(Job(block, time.monotonic() + 60, loop))
    assert started.wait(10)
    return release


def test_health_models_page(client, lm):
    assert client.get("/health").json()["status"] == "ok"
    models = client.get("/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == lm.name
    page = client.get("/")
    assert page.status_code == 200 and 'id="editor"' in page.text
    assert "AbortController" in client.get("/static/app.js").text
    config = client.get("/config").json()
    assert config["suggest"]["method"] == "superposed" and config["suggest"]["n"] == 3


def test_superposed_choices_come_from_one_pass(client, lm):
    body = {"prompt": PROMPT, "max_tokens": 5, "n": 3, "method": "superposed", "alpha": 0.0}
    reply = client.post("/v1/completions", json=body).json()
    direct = multidraft.generate(lm, PROMPT, method="superposed", max_new_tokens=5, num_drafts=3, alpha=0.0)
    assert [c["text"] for c in reply["choices"]] == [d.text for d in direct.drafts]
    assert reply["stats"]["generate_calls"] == 1 and reply["stats"]["target_calls"] == direct.stats.target_calls
    events = sse_events(client, {**body, "stream": True})
    streamed = {e["choices"][0]["index"]: e["choices"][0]["text"] for e in events[:-1] if e["choices"][0]["text"]}
    assert streamed == {i: d.text for i, d in enumerate(direct.drafts)}
    response = client.post("/v1/completions", json={**body, "num_drafts": 2})
    assert response.status_code == 400 and "with 'n'" in response.json()["error"]["message"]
    response = client.post("/v1/completions", json={**body, "temperature": 0.7})
    assert response.status_code == 400 and "tau" in response.json()["error"]["message"]


def test_greedy_matches_library_and_reports_stats(client, lm):
    reply = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8}).json()
    direct = multidraft.generate(lm, PROMPT, method="greedy", max_new_tokens=8)
    assert reply["object"] == "text_completion" and reply["method"] == "greedy"
    assert reply["choices"][0]["text"] == direct.text
    assert reply["choices"][0]["finish_reason"] in ("length", "stop")
    assert reply["usage"]["completion_tokens"] == len(direct.token_ids)
    assert reply["stats"]["generated_tokens"] == len(direct.token_ids)
    assert reply["stats"]["mean_acceptance_length"] == pytest.approx(1.0)


def test_n_choices_are_seeded_runs(client, lm):
    body = {"prompt": PROMPT, "max_tokens": 6, "n": 3, "method": "sample", "temperature": 1.0, "seed": 11}
    reply = client.post("/v1/completions", json=body).json()
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    for i, choice in enumerate(reply["choices"]):
        direct = multidraft.generate(lm, PROMPT, method="sample", temperature=1.0, seed=11 + i, max_new_tokens=6)
        assert choice["text"] == direct.text
    assert reply["stats"]["generate_calls"] == 3
    again = client.post("/v1/completions", json=body).json()
    assert [c["text"] for c in again["choices"]] == [c["text"] for c in reply["choices"]]


def test_several_prompts_and_token_ids(client, lm):
    ids = lm.encode(PROMPT)
    reply = client.post("/v1/completions", json={"prompt": [PROMPT, "a dog ran"], "max_tokens": 4, "n": 2}).json()
    texts = [c["text"] for c in reply["choices"]]
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2, 3]
    assert texts[0] == texts[1] and texts[2] == texts[3]     # greedy: n copies per prompt, prompt-major order
    assert texts[2] == multidraft.generate(lm, "a dog ran", max_new_tokens=4).text
    for prompt in (ids, [ids]):                                # token ids, alone or in a batch of one
        reply = client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 4}).json()
        assert reply["choices"][0]["text"] == texts[0]


def test_method_options_and_spec_decode_metrics(client, lm):
    before = {name: metric(client, f"vllm:spec_decode_num_{name}_total")
              for name in ("drafts", "draft_tokens", "accepted_tokens")}
    reply = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 16, "method": "pld",
                                                 "max_ngram": 2, "num_draft_tokens": 3}).json()
    stats = reply["stats"]
    assert reply["choices"][0]["text"] == multidraft.generate(lm, PROMPT, max_new_tokens=16).text   # lossless
    assert stats["draft_tokens_proposed"] > 0
    after = {name: metric(client, f"vllm:spec_decode_num_{name}_total")
             for name in ("drafts", "draft_tokens", "accepted_tokens")}
    assert after["draft_tokens"] - before["draft_tokens"] == stats["draft_tokens_proposed"]
    assert after["accepted_tokens"] - before["accepted_tokens"] == stats["draft_tokens_accepted"]
    assert after["drafts"] - before["drafts"] == stats["proposed_per_position"][0]
    text = client.get("/metrics").text
    assert "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter" in text
    assert 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny-llama",position="0"}' in text


def sse_events(client, body, path="/v1/completions"):
    events = []
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line:
                assert line.startswith("data: ")
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_streaming_equals_non_streaming(client):
    body = {"prompt": PROMPT, "max_tokens": 10, "n": 2, "method": "sample", "temperature": 1.0, "seed": 5}
    full = client.post("/v1/completions", json=body).json()
    assert all(event["choices"] for event in sse_events(client, {**body, "stream": True}))  # no usage unasked
    events = sse_events(client, {**body, "stream": True, "stream_options": {"include_usage": True}})
    texts, reasons = {0: "", 1: ""}, {}
    for event in events[:-1]:
        (choice,) = event["choices"]
        texts[choice["index"]] += choice["text"]
        if choice["finish_reason"]:
            reasons[choice["index"]] = choice["finish_reason"]
    assert texts == {c["index"]: c["text"] for c in full["choices"]}
    assert reasons == {c["index"]: c["finish_reason"] for c in full["choices"]}
    assert events[-1]["choices"] == [] and events[-1]["usage"] == full["usage"]
    assert events[-1]["stats"]["generated_tokens"] == full["stats"]["generated_tokens"]


def test_streamed_stop_string_is_never_sent(client, lm):
    plain = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 12}).json()["choices"][0]["text"]
    words = plain.split()
    stop = " ".join(words[2:4])                                  # a two-word stop string inside the output
    full = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 12, "stop": stop}).json()
    assert full["choices"][0]["text"] == plain[:plain.index(stop)]
    events = sse_events(client, {"prompt": PROMPT, "max_tokens": 12, "stop": [stop], "stream": True})
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == full["choices"][0]["text"]


BAD_REQUESTS = [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    (json.dumps({"max_tokens": 4}), "'prompt': this field is required"),
    (json.dumps({"prompt": PROMPT, "max_tokens": "10"}), "'max_tokens'"),
    (json.dumps({"prompt": PROMPT, "n": 1.5}), "'n'"),
    (json.dumps({"prompt": PROMPT, "stream": "yes"}), "'stream'"),
    (json.dumps({"prompt": 12}), "'prompt"),
    (json.dumps({"prompt": PROMPT, "temperature": "hot"}), "'temperature'"),
    (json.dumps({"prompt": PROMPT, "method": "nope"}), "unknown method 'nope'"),
    (json.dumps({"prompt": PROMPT, "method": "pld", "max_ngrams": 3}), "has no option 'max_ngrams'"),
    (json.dumps({"prompt": PROMPT, "method": "pld", "max_ngram": -1}), "max_ngram"),
    (json.dumps({"prompt": PROMPT, "n": 5}), "'n' must be between 1 and 4"),
    (json.dumps({"prompt": PROMPT, "n": 0}), "'n' must be between 1 and 4"),
    (json.dumps({"prompt": PROMPT, "max_tokens": 65}), "in 1..64 (this server's limit: serve --max-tokens)"),
    (json.dumps({"prompt": PROMPT, "max_tokens": 0}), "max_new_tokens must be an integer in 1..64"),
    (json.dumps({"prompt": "the " * 101}), "at most 100"),
    (json.dumps({"prompt": ""}), "empty"),
    (json.dumps({"prompt": [99999]}), "outside the vocabulary"),
    (json.dumps({"prompt": PROMPT, "top_p": 0}), "top_p must be"),
    (json.dumps({"prompt": PROMPT, "temperature": -1}), "temperature must be"),
    (json.dumps({"prompt": PROMPT, "stop": ["a", "b", "c", "d", "e"]}), "at most 4"),
    (json.dumps({"prompt": PROMPT, "method": "sample", "temperature": 0}), "temperature > 0"),
    (json.dumps({"prompt": PROMPT, "logprobs": 3}), "'logprobs' is not supported"),
]


@pytest.mark.parametrize("body,message", BAD_REQUESTS, ids=[m for _, m in BAD_REQUESTS])
def test_bad_input_is_a_clear_400(client, body, message):
    response = client.post("/v1/completions", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"
    assert client.get("/health").status_code == 200


def test_other_errors_keep_the_openai_shape(client):
    response = client.post("/v1/completions", json={"prompt": PROMPT, "model": "gpt-4"})
    assert response.status_code == 404 and "not served here" in response.json()["error"]["message"]
    response = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 400 and "chat template" in response.json()["error"]["message"]
    response = client.post("/v1/chat/completions", json={"messages": "hi"})
    assert response.status_code == 400 and "'messages'" in response.json()["error"]["message"]
    assert client.get("/v1/nothing").json()["error"]["type"] == "not_found_error"
    assert client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}).status_code == 200


def test_full_queue_answers_429_then_recovers(server, client):
    app = server.app
    release = hold_worker(app)
    try:
        for _ in range(app.state.config.max_queue):               # fill the queue behind the held worker
            app.state.worker.submit(Job(lambda job: None, time.monotonic() + 60, __import__("asyncio").new_event_loop()))
        rejected = metric(client, "multidraft:requests_rejected_total")
        response = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2})
        assert response.status_code == 429 and response.headers["retry-after"] == "1"
        assert response.json()["error"]["code"] == "queue_full"
        assert metric(client, "multidraft:requests_rejected_total") == rejected + 1
        assert metric(client, "vllm:num_requests_waiting") == app.state.config.max_queue
        assert metric(client, "vllm:num_requests_running") == 1
    finally:
        release.set()
    deadline = time.monotonic() + 30     # the worker drains the dummy jobs before the queue has room again
    while metric(client, "vllm:num_requests_waiting") > 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}).status_code == 200


@pytest.fixture(scope="module")
def slow_server():
    slow = SlowLM(make_tiny_lm("llama", seed=3), 0.03)
    # One request at a time (ModelWorker, whose layer hooks stop a forward): SlowLM slows `forward` only, and
    # hold_worker's raw Job has no plan to batch. The batching server's timeouts: test_server_batching.py.
    app = create_app(slow, ServerConfig(max_queue=2, request_timeout=1.0, max_tokens=500, max_num_seqs=1))
    with ServerThread(app) as running:
        running.app = app
        yield running


def test_timeout_mid_generation_and_in_queue(slow_server):
    with httpx.Client(base_url=slow_server.url, timeout=30) as client:
        started = time.monotonic()
        response = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 200})
        assert response.status_code == 504 and "1 s" in response.json()["error"]["message"]
        assert time.monotonic() - started < 4
        events = sse_events(client, {"prompt": PROMPT, "max_tokens": 200, "stream": True})
        assert events[-1]["error"]["code"] == "timeout"
        release = hold_worker(slow_server.app)                     # times out while queued
        try:
            response = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2})
            assert response.status_code == 504
        finally:
            release.set()
        assert metric(client, "multidraft:requests_timed_out_total") == 3
        assert client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}).status_code == 200


def test_client_disconnect_cancels_generation(slow_server):
    url = slow_server.url
    with httpx.Client(base_url=url, timeout=30) as client:
        tokens_before = metric(client, "vllm:generation_tokens_total")
        cancelled_before = metric(client, "multidraft:requests_cancelled_total")
        # Streaming: read two chunks, then hang up.
        with client.stream("POST", "/v1/completions", json={"prompt": PROMPT, "max_tokens": 200, "stream": True,
                                                            "stop": ["zzz"]}) as response:
            lines = response.iter_lines()
            next(lines), next(lines)
        # Non-streaming: the client gives up after 0.3 s.
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 200}, timeout=0.3)
        deadline = time.monotonic() + 5
        while metric(client, "multidraft:requests_cancelled_total") < cancelled_before + 2:
            assert time.monotonic() < deadline, "the server did not notice the disconnects"
            time.sleep(0.05)
        started = time.monotonic()
        assert client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}).status_code == 200
        assert time.monotonic() - started < 0.9            # the worker was free: the 200-token jobs stopped
        # Cancelled jobs stopped within a token of the hang-up: far fewer than 2 x 200 tokens were made.
        assert metric(client, "vllm:generation_tokens_total") - tokens_before < 100


def test_serve_command_fails_fast_on_a_bad_method(capsys):
    from multidraft.cli import build_parser, main
    args = build_parser().parse_args(["serve", "--model", "smollm2-135m", "--draft", "x", "--port", "0"])
    assert (args.host, args.draft) == ("127.0.0.1", "x")
    from multidraft.server.cli import build_config
    assert build_config(args).max_queue == ServerConfig().max_queue
    assert main(["serve", "--model", "no-such-model", "--method", "nope"]) == 2      # before any model loads
    assert "unknown method 'nope'" in capsys.readouterr().err
    assert main(["serve", "--model", "no-such-model", "--max-queue", "0"]) == 2
    assert "max_queue" in capsys.readouterr().err


def test_draft_model_from_the_command_line_feeds_speculative_methods(lm):
    draft = make_tiny_lm("qwen2", seed=9)                  # same tokenizer as the target
    with ServerThread(create_app(lm, ServerConfig(), draft_lm=draft)) as running:
        with httpx.Client(base_url=running.url, timeout=60) as client:
            body = {"prompt": PROMPT, "max_tokens": 8, "method": "speculative", "num_draft_tokens": 3}
            reply = client.post("/v1/completions", json=body).json()
            assert reply["choices"][0]["text"] == multidraft.generate(lm, PROMPT, max_new_tokens=8).text
            assert reply["stats"]["draft_tokens_proposed"] > 0
            response = client.post("/v1/completions", json={**body, "draft_model": "other"})
            assert response.status_code == 400 and "--draft" in response.json()["error"]["message"]

"""Bounded load over loopback: 200 requests from 8 concurrent clients against a queue of 4. Every answer
is a 200 or a deliberate 429 (queue full; the client retries after a pause), every request ends in a 200,
the server's own counters agree, and it keeps serving."""

import httpx
import pytest

from multidraft.server import ServerConfig, ServerThread, create_app
from tests.tiny_models import make_tiny_lm

pytestmark = pytest.mark.slow


def load_benchmark_module():
    from multidraft.eval.presets import serve_load     # `multidraft bench serve load`
    return serve_load


def counter(text, name, **labels):
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and all(w in line for w in wanted))


def test_200_requests_from_8_clients(capsys):
    bench = load_benchmark_module()
    assert bench.percentile([1, 2, 3, 4], 50) == 2 and bench.percentile([1, 2, 3, 4], 99) == 4
    app = create_app(make_tiny_lm("qwen2", seed=4), ServerConfig(max_queue=4))
    with ServerThread(app) as server:
        result = bench.run_load(server.url, requests=200, concurrency=8, max_tokens=4)
        with capsys.disabled():
            print("\n" + bench.format_report(result))
        statuses = result["statuses"]
        assert result["errors"] == [] and set(statuses) <= {"200", "429"}
        assert result["final_statuses"] == {"200": 200} and statuses["200"] == 200
        metrics = httpx.get(server.url + "/metrics").text
        assert counter(metrics, "multidraft:http_requests_total", path="/v1/completions", status="200") == statuses["200"]
        assert counter(metrics, "multidraft:requests_rejected_total") == statuses.get("429", 0)
        assert counter(metrics, "vllm:e2e_request_latency_seconds_count") == statuses["200"]
        assert counter(metrics, "vllm:num_requests_waiting") == 0
        assert httpx.post(server.url + "/v1/completions", json={"prompt": "the cat", "max_tokens": 2}).status_code == 200


def test_the_load_curve_streams_plain_text_to_a_model_without_a_chat_template(capsys):
    """A base model (no chat template) answers chat requests with a 400: the curve's clients then stream the same
    conversations as plain-text completions, and a model with a template keeps its chat requests."""
    bench = load_benchmark_module()
    conversations = [[{"role": "user", "content": "the cat sat"}, {"role": "user", "content": "on the mat"}]]
    lm = make_tiny_lm("qwen2", seed=4)
    assert not getattr(lm.tokenizer, "chat_template", None)
    with ServerThread(create_app(lm, ServerConfig(max_queue=4))) as server:
        prompts = bench._as_plain_text_without_chat_template(server.url, conversations)
        assert prompts == ["the cat sat\n\non the mat"]
        row = bench.run_stream_load(server.url, prompts, clients=2, per_client=1, max_tokens=4, method="greedy")
        assert row["errors"] == [] and row["tokens"] == 8
        assert bench.run_stream_load(server.url, conversations, 1, 1, 4, "greedy")["errors"] == ["400"]
    lm.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    with ServerThread(create_app(lm, ServerConfig(max_queue=4))) as server:
        assert bench._as_plain_text_without_chat_template(server.url, conversations) == conversations
        assert bench.run_stream_load(server.url, conversations, 1, 1, 4, "greedy")["errors"] == []

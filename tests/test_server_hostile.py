"""Hostile requests found by a sweep of the server that the other server tests did not cover: each got a 500, a
message that did not say what to do, or was accepted when it should not be."""

import json
import socket

import httpx
import pytest

from multidraft.server import ServerConfig, ServerThread, create_app
from tests.tiny_models import make_tiny_lm, perturbed_copy

PROMPT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def server():
    lm = make_tiny_lm("llama", seed=3)
    app = create_app(lm, ServerConfig(max_tokens=16, max_num_seqs=1), draft_lm=perturbed_copy(lm, 0.1))
    with ServerThread(app) as running:
        running.app = app
        yield running


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as http:
        yield http


def error_of(response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


def post(client, body, path="/v1/completions"):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, content=content, headers={"Content-Type": "application/json"})


def test_a_huge_integer_option_is_refused_before_anything_is_sized_by_it(client):
    # multi_draft's own check built [1.0] * num_drafts before the cap was checked: 2**70 was a 500 (OverflowError),
    # 10**9 an 8 GB list.
    for value in (2 ** 70, -2 ** 70):
        error = error_of(post(client, {"prompt": PROMPT, "method": "multi_draft", "num_drafts": value}), 400)
        assert error["param"] == "num_drafts" and "serve --max-drafts" in error["message"]
    assert post(client, {"prompt": PROMPT, "max_tokens": 2}).status_code == 200


def test_a_message_never_echoes_a_huge_value_whole(client):
    for body in ({"prompt": PROMPT, "method": "x" * 500_000}, {"prompt": PROMPT, "model": "x" * 500_000},
                 {"prompt": PROMPT, "method": "pld", "variant": "x" * 500_000}):
        error = error_of(post(client, body), 404 if "model" in body else 400)
        assert len(error["message"]) < 1100 and "characters cut" in error["message"]
    error = error_of(post(client, {"prompt": PROMPT, "method": "x" * 500_000}), 400)
    assert error["message"].endswith("superposed")        # the end says what to do: the methods on offer


def test_an_unexpected_error_is_one_500_and_the_connection_is_kept(server, client, monkeypatch):
    def broken(*_args):
        raise RuntimeError("boom at /srv/secret")

    monkeypatch.setattr(server.app.state.service, "plan", broken)
    error = error_of(post(client, {"prompt": PROMPT}), 500)
    assert "RuntimeError" in error["message"] and "secret" not in error["message"]
    monkeypatch.undo()
    # The same keep-alive connection answers the next request (it was dropped after the 500).
    assert post(client, {"prompt": PROMPT, "max_tokens": 2}).status_code == 200


def raw_status(url: str, headers: list[tuple[str, str]]) -> str:
    body = json.dumps({"prompt": PROMPT, "max_tokens": 2}).encode()
    head = "".join(f"{name}: {value}\r\n" for name, value in headers)
    request = (f"POST /v1/completions HTTP/1.1\r\n{head}Content-Length: {len(body)}\r\n"
               f"Connection: close\r\n\r\n").encode("latin-1") + body
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode()


JSON = ("Content-Type", "application/json")


@pytest.mark.parametrize("headers", [
    [("Host", "127.0.0.1:80:evil.example"), JSON],
    [("Host", "[::1]evil.example"), JSON],
    [("Host", "localhost:8\u00b2"), JSON],                                # "²" is a digit to str.isdigit
    [("Host", "127.0.0.1"), ("Host", "evil.example"), JSON],             # which one counts would be a guess
    [("Host", "127.0.0.1"), ("Origin", "http://127.0.0.1"), ("Origin", "https://evil.example"), JSON],
    [("Host", "127.0.0.1"), JSON, ("Content-Type", "text/plain")],
], ids=["port-then-more", "v6-then-name", "unicode-port", "two-hosts", "two-origins", "two-content-types"])
def test_host_and_single_headers_are_checked_strictly(server, headers):
    assert raw_status(server.url, headers).split(" ")[1] == "400"
    assert raw_status(server.url, [("Host", "LOCALHOST:8000"), JSON]).endswith("200 OK")


@pytest.mark.parametrize("path,body,param,words", [
    ("/v1/completions", {"prompt": [1.5]}, "prompt", "a list of token ids"),
    ("/v1/completions", {"prompt": None}, "prompt", "a string, a list of strings"),
    ("/v1/completions", {"prompt": PROMPT, "stop": [1]}, "stop", "a string or a list of strings"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages", "a list of text parts"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "prompt": "hi"}, "prompt",
     "/v1/chat/completions takes 'messages'"),
    ("/v1/completions", {"messages": [{"role": "user", "content": "hi"}]}, "messages",
     "/v1/completions takes 'prompt'"),
    ("/v1/completions", {"prompt": PROMPT, "max_completion_tokens": 4}, "max_completion_tokens", "takes 'max_tokens'"),
    ("/v1/completions", {"prompt": PROMPT, "method": "pld", "max_ngrams": 3}, "max_ngrams", "max_ngram"),
    ("/v1/completions", {"prompt": PROMPT, "method": ""}, "method", "unknown method ''"),
    ("/v1/completions", {"prompt": PROMPT, "stream_options": {"include_usage": True}}, "stream_options",
     "without a stream"),
    ("/v1/completions", {"prompt": PROMPT, "stream": True, "stream_options": {"continuous_usage_stats": True}},
     "stream_options", '{"include_usage": true or false}'),
], ids=["prompt-floats", "prompt-null", "stop-ints", "content-int", "prompt-on-chat", "messages-on-completions",
        "max-completion-tokens-on-completions", "unknown-option-is-the-param", "empty-method",
        "stream-options-without-a-stream", "stream-option-not-honoured"])
def test_messages_name_the_field_and_what_it_takes(client, path, body, param, words):
    error = error_of(post(client, body, path), 400)
    assert error["param"] == param and words in error["message"], error
    assert ".str'" not in error["message"] and "multidraft.load_model" not in error["message"]


def test_a_draft_method_on_a_server_without_a_draft_model_says_how_to_give_one():
    # The library's words were for its Python callers: "needs draft_model=: an LM (multidraft.load_model(...))".
    with ServerThread(create_app(make_tiny_lm("llama", seed=3), ServerConfig(max_num_seqs=1))) as running, \
            httpx.Client(base_url=running.url, timeout=60) as client:
        for method in ("speculative", "multi_draft", "mtad", "bild"):
            error = error_of(post(client, {"prompt": PROMPT, "method": method, "max_tokens": 2}), 400)
            assert error["code"] == "no_draft_model" and "multidraft serve --draft MODEL" in error["message"]


def test_a_draft_method_never_loads_the_librarys_default_draft(monkeypatch):
    """Served as qwen2.5-coder-1.5b (whose library default draft is the 0.5b) with no --draft: a speculative request
    made the model thread load a model the operator never named (~1 GB, every client stalled). Now a 400."""
    from types import SimpleNamespace

    from multidraft.models import draft_models

    def no_load(*args, **kwargs):
        raise AssertionError("a request loaded a draft model")

    monkeypatch.setattr(draft_models, "load_model", no_load, raising=False)
    monkeypatch.setattr(draft_models, "resolve_draft_model", no_load)
    lm = make_tiny_lm("llama", seed=3)
    lm.info = SimpleNamespace(name="qwen2.5-coder-1.5b")
    assert lm.info.name in draft_models.DEFAULT_DRAFTS
    with ServerThread(create_app(lm, ServerConfig(max_num_seqs=1))) as running, \
            httpx.Client(base_url=running.url, timeout=60) as client:
        error = error_of(post(client, {"prompt": PROMPT, "method": "speculative", "max_tokens": 2}), 400)
        assert error["code"] == "no_draft_model"


def test_a_method_whose_default_file_is_missing_says_it_is_the_servers(client):
    """The library's advice ("train them with `multidraft heads train ...`") read as if the client could act on it."""
    for method in ("blockwise", "superposed"):
        error = error_of(post(client, {"prompt": PROMPT, "method": method, "max_tokens": 2}), 400)
        assert error["code"] == "missing_artifact" and "this server lacks a file" in error["message"], error


def test_health_answers_a_head_probe(client):
    head = client.head("/health")
    assert head.status_code == 200 and head.content == b""
    assert client.get("/health").status_code == 200


def test_json_problems_are_said_in_json_terms(client):
    error = error_of(post(client, b'{"prompt": "a", "seed": 1' + b"0" * 5000 + b"}"), 400)
    assert "4300 digits" in error["message"] and "sys." not in error["message"]
    assert "not an array" in error_of(post(client, b"[1]"), 400)["message"]
    assert "not null" in error_of(post(client, b"null"), 400)["message"]

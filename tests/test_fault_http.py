"""Issue 46 item 4: every refusal names its field and keeps OpenAI's error shape, down to the HTTP layer.

- 400s about a known field carry "param" (stop: "", prompt: [[]], token ids out of range, a prompt over the server's
  token cap: "prompt", or "messages" for a chat request), one at a time and batching;
- a request uvicorn cannot parse (Content-Length: -1, an unknown verb) is a 400 in OpenAI's JSON shape, not
  uvicorn's plain text; headers over 16 KiB are a 431 in the same shape;
- pld_plus with rank_by "attention" refuses a "layer" out of range, as rank_by "hidden" does."""

import json
import socket
from urllib.parse import urlsplit

import httpx
import pytest

from multidraft.server import ServerConfig, ServerThread, create_app
from multidraft.server.connections import MAX_HEADER_BYTES
from tests.tiny_models import make_tiny_lm


@pytest.fixture(scope="module", params=[1, 4], ids=["one-at-a-time", "batching"])
def server(request):
    lm = make_tiny_lm("llama", seed=3)
    with ServerThread(create_app(lm, ServerConfig(max_prompt_tokens=20, max_num_seqs=request.param))) as running:
        yield running


def raw(url: str, data: bytes) -> bytes:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(data)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


def error_of(reply: bytes, status: int) -> dict:
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), head
    assert b"content-type: application/json" in head.lower(), head
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    return error


@pytest.mark.parametrize("body,param", [
    ({"prompt": "hi", "stop": ""}, "stop"),
    ({"prompt": "hi", "stop": ["ok", ""]}, "stop"),
    ({"prompt": [[]]}, "prompt"),
    ({"prompt": [[1, 99999]]}, "prompt"),
    ({"prompt": [5, -1]}, "prompt"),
    ({"prompt": "hi " * 50}, "prompt"),
    ({"prompt": "hi", "method": "pld_plus", "rank_by": "attention", "induction_head_set": "all", "layer": 1000000},
     "layer"),
    ({"prompt": "hi", "method": "pld_plus", "rank_by": "hidden", "layer": 1000000}, "layer"),
], ids=["stop-empty", "stop-list-empty", "prompt-no-tokens", "token-out-of-range", "negative-token",
        "over-token-cap", "attention-layer", "hidden-layer"])
def test_a_400_names_its_field(server, body, param):
    reply = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
    assert reply.status_code == 400, reply.text
    assert reply.json()["error"]["param"] == param, reply.text


def test_a_chat_over_the_token_cap_names_messages(server):
    reply = httpx.post(server.url + "/v1/chat/completions", timeout=30,
                       json={"messages": [{"role": "user", "content": "hi " * 50}]})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "messages", reply.text


@pytest.mark.parametrize("request_bytes", [
    b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
    b"FOO /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,          # a TLS hello on the plain port
], ids=["negative-length", "unknown-verb", "two-lengths", "tls-hello"])
def test_malformed_http_gets_a_json_400(server, request_bytes):
    error = error_of(raw(server.url, request_bytes), 400)
    assert "malformed HTTP request" in error["message"]
    assert httpx.get(server.url + "/health").status_code == 200


def test_headers_over_the_cap_get_a_json_431_and_smaller_ones_pass(server):
    big = b"X-Big: " + b"a" * (MAX_HEADER_BYTES + 100) + b"\r\n"
    error = error_of(raw(server.url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + big + b"\r\n"), 431)
    assert str(MAX_HEADER_BYTES) in error["message"]
    ok = b"X-Big: " + b"a" * (MAX_HEADER_BYTES // 2) + b"\r\n"
    reply = raw(server.url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + ok + b"\r\n")
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:200]
    # A body is not a header: a body well over the header cap is read as usual.
    body = json.dumps({"prompt": "hi", "max_tokens": 1, "user": "u" * (4 * MAX_HEADER_BYTES)}).encode()
    reply = raw(server.url, b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:300]


def test_the_library_refuses_a_layer_out_of_range_for_every_ranker():
    import multidraft
    lm = make_tiny_lm("llama", seed=3)
    for rank_by in ("hidden", "attention", "first"):
        options = {"induction_heads": [(0, 0)]} if rank_by == "attention" else {}
        with pytest.raises(multidraft.InvalidOptionError, match="layer 9 does not exist"):
            multidraft.generate(lm, "a b a b", method="pld_plus", max_new_tokens=2, rank_by=rank_by, layer=9,
                                **options)

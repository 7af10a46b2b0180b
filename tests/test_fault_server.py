"""Clients that hang up in every state (queued, prefilling, streaming) and deadlines that fire inside a forward,
with and without attention capture: the queue slot is freed at once, the model is free within a layer, a hung-up
client is counted as cancelled (never as a 500), a deadline is a 504, and the server keeps serving. These servers run
one request at a time (max_num_seqs=1: ModelWorker, whose `current` job the gate reads and hold_worker occupies);
the batching server's faults are test_fault_batching.py's."""

import json
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest

from multidraft.server import ServerConfig, ServerThread, create_app
from tests.test_server_api import PROMPT, hold_worker, metric
from tests.tiny_models import make_tiny_lm

LONG_PROMPT = " ".join([PROMPT] * 4)
CAPTURES = {
    "none": {"method": "greedy"},
    "attention": {"method": "pld_plus", "rank_by": "attention", "induction_head_set": "all"},
    "hidden": {"method": "pld_plus", "rank_by": "hidden", "layer": 1},
}


class StopInside:
    """A pre-hook on one decoder layer: when armed, the next forward that reaches the layer says so (`inside`) and
    waits there until its job is cancelled or past its deadline, so the stop lands inside that layer."""

    def __init__(self, lm, layer):
        self.armed, self.inside = threading.Event(), threading.Event()
        self.worker = None
        lm._decoder_layers[layer].register_forward_pre_hook(self._hook)

    def _hook(self, _module, _args):
        if not self.armed.is_set():
            return
        self.armed.clear()
        self.inside.set()
        job = self.worker.current
        end = time.monotonic() + 10
        while time.monotonic() < end and not job.cancelled.is_set() and time.monotonic() <= job.deadline:
            time.sleep(0.005)


@pytest.fixture(scope="module", params=[0, 1], ids=["layer0", "layer1"])
def gated(request):
    lm = make_tiny_lm("llama", seed=3)
    gate = StopInside(lm, request.param)
    app = create_app(lm, ServerConfig(max_queue=4, request_timeout=20, max_tokens=64, max_num_seqs=1))
    gate.worker = app.state.worker
    with ServerThread(app) as running:
        running.app, running.gate = app, gate
        yield running


def raw_request(url, body: dict, path="/v1/completions") -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
    data = json.dumps(body).encode()
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return sock


def wait_for(condition, seconds=5.0, what=""):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def health(client):
    return client.get("/health").json()


@pytest.mark.parametrize("capture", sorted(CAPTURES))
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_hang_up_inside_the_prefill(gated, capture, stream):
    with httpx.Client(base_url=gated.url, timeout=30) as client:
        cancelled = metric(client, "multidraft:requests_cancelled_total")
        errors = metric(client, "multidraft:http_requests_total", status="500")
        gated.gate.armed.set()
        sock = raw_request(gated.url, {"prompt": LONG_PROMPT, "max_tokens": 40, "stream": stream, **CAPTURES[capture]})
        assert gated.gate.inside.wait(10)
        gated.gate.inside.clear()
        sock.close()
        wait_for(lambda: metric(client, "multidraft:requests_cancelled_total") == cancelled + 1, what="the cancel")
        wait_for(lambda: health(client)["running"] == 0, what="the worker to stop")
        assert metric(client, "multidraft:http_requests_total", status="500") == errors
        reply = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 3, **CAPTURES[capture]})
        assert reply.status_code == 200, reply.text


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_hang_up_while_streaming(gated, capture):
    with httpx.Client(base_url=gated.url, timeout=30) as client:
        cancelled = metric(client, "multidraft:requests_cancelled_total")
        errors = metric(client, "multidraft:http_requests_total", status="500")
        body = {"prompt": PROMPT, "max_tokens": 60, "stream": True, "stop": ["zzz"], **CAPTURES[capture]}
        with client.stream("POST", "/v1/completions", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            next(lines)
            gated.gate.armed.set()                         # the next forward stops inside the gated layer
            assert gated.gate.inside.wait(10)
            gated.gate.inside.clear()
        wait_for(lambda: metric(client, "multidraft:requests_cancelled_total") == cancelled + 1, what="the cancel")
        wait_for(lambda: health(client)["running"] == 0, what="the worker to stop")
        assert metric(client, "multidraft:http_requests_total", status="500") == errors
        gated.gate.armed.clear()


@pytest.mark.parametrize("capture", sorted(CAPTURES))
def test_a_deadline_inside_a_capturing_forward_is_a_504(capture):
    """The probe's case: `pld_plus` ranked by attention, the deadline fires mid-forward -> 504, never a 500."""
    lm = make_tiny_lm("llama", seed=3)
    gate = StopInside(lm, 1)
    app = create_app(lm, ServerConfig(request_timeout=0.5, max_tokens=64, max_num_seqs=1))
    gate.worker = app.state.worker
    with ServerThread(app) as running, httpx.Client(base_url=running.url, timeout=30) as client:
        gate.armed.set()
        reply = client.post("/v1/completions", json={"prompt": LONG_PROMPT, "max_tokens": 40, **CAPTURES[capture]})
        assert reply.status_code == 504 and reply.json()["error"]["code"] == "timeout", reply.text
        assert metric(client, "multidraft:http_requests_total", status="500") == 0


def test_hung_up_clients_free_their_queue_slots_at_once(gated):
    """The probe's case: one long request runs, the queue fills, every queued client hangs up: /health says 0
    waiting at once, and new requests are queued (not 429) while the long one still runs."""
    app = gated.app
    with httpx.Client(base_url=gated.url, timeout=30) as client:
        release = hold_worker(app)
        try:
            socks = [raw_request(gated.url, {"prompt": PROMPT, "max_tokens": 2}) for _ in range(4)]
            wait_for(lambda: health(client)["waiting"] == 4, what="4 queued")
            full = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2})
            assert full.status_code == 429
            for sock in socks:
                sock.close()
            wait_for(lambda: health(client)["waiting"] == 0, seconds=3, what="the slots to be freed")
            replies = []
            threads = [threading.Thread(target=lambda: replies.append(
                httpx.post(gated.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}, timeout=30)))
                for _ in range(4)]
            for thread in threads:
                thread.start()
            wait_for(lambda: health(client)["waiting"] == 4, what="the new requests to queue")
        finally:
            release.set()
        for thread in threads:
            thread.join(30)
        assert [r.status_code for r in replies] == [200] * 4
        assert health(client)["waiting"] == 0


def test_a_queued_request_past_its_deadline_leaves_the_queue():
    lm = make_tiny_lm("llama", seed=3)
    app = create_app(lm, ServerConfig(max_queue=1, request_timeout=0.3, max_num_seqs=1))
    with ServerThread(app) as running, httpx.Client(base_url=running.url, timeout=30) as client:
        release = hold_worker(app)
        try:
            started = time.monotonic()
            reply = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2})
            assert reply.status_code == 504 and time.monotonic() - started < 5
            assert health(client)["waiting"] == 0
            second = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2})
            assert second.status_code == 504                  # queued (the slot was free), then timed out: not 429
        finally:
            release.set()


def closed_by_server(sock, seconds) -> bool:
    """True when the server closes `sock` within `seconds` (recv returns b"" or the connection resets)."""
    sock.settimeout(seconds)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def test_idle_and_trickling_connections_are_closed():
    """The probe's case: idle sockets and one-byte-a-second headers or bodies held connections for ever."""
    lm = make_tiny_lm("llama", seed=3)
    app = create_app(lm, ServerConfig(read_timeout=0.6, max_num_seqs=1))
    with ServerThread(app) as running, httpx.Client(base_url=running.url, timeout=30) as client:
        parts = urlsplit(running.url)
        address = (parts.hostname, parts.port)
        idle = [socket.create_connection(address) for _ in range(20)]
        header_trickle = socket.create_connection(address)
        body_trickle = socket.create_connection(address)
        body_trickle.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 100\r\n\r\n{")
        started = time.monotonic()
        for _ in range(3):                                   # a byte every 0.3 s: never a whole request
            header_trickle.sendall(b"G")
            time.sleep(0.3)
        assert all(closed_by_server(sock, 3) for sock in idle)
        assert closed_by_server(header_trickle, 3)
        body_trickle.settimeout(3)
        answer = body_trickle.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408") and closed_by_server(body_trickle, 3)
        assert time.monotonic() - started < 5
        # a keep-alive client that sends its next request in time is served; the server is unaffected
        for _ in range(3):
            assert client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}).status_code == 200
        assert client.get("/health").json()["status"] == "ok"


def test_a_long_answer_is_not_cut_by_the_read_timeout():
    """The limit is on sending a request, not on waiting for the answer: a generation longer than it completes."""
    lm = make_tiny_lm("llama", seed=3)
    gate = StopInside(lm, 0)
    app = create_app(lm, ServerConfig(read_timeout=0.3, request_timeout=0.9, max_num_seqs=1))
    gate.worker = app.state.worker
    with ServerThread(app) as running, httpx.Client(base_url=running.url, timeout=30) as client:
        gate.armed.set()                                      # holds the forward until the deadline (0.9 s)
        reply = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2})
        assert reply.status_code == 504                       # answered (after 0.9 s > read_timeout), not dropped
        assert client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}).status_code == 200

"""Issue #16, server half: every finding of the attacker/careless-user probe replayed as a regression test, on
tiny random models over loopback, plus a bounded fuzz of request bodies (no 5xx, the server stays up)."""

import json
import socket
import sys
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import multidraft
from multidraft.server import ServerConfig, ServerThread, create_app
from tests.tiny_models import make_tiny_lm

PROMPT = "the cat sat on the mat and the cat sat on the"
KEY = "sk-test-0123456789"
NGRAM_WEIGHTS = [0.01, 0.04, 0.15, 0.18]

# Paths the server saw opened (sys.addaudithook cannot be removed: it only records, filtered by a marker).
OPENED: list[str] = []
MARKER = "multidraft-secret-marker"


def _audit(event, args):
    if event == "open" and args and MARKER in str(args[0]):
        OPENED.append(str(args[0]))


sys.addaudithook(_audit)


@pytest.fixture(scope="module")
def lm():
    return make_tiny_lm("llama", seed=3)


@pytest.fixture(scope="module")
def secret(tmp_path_factory):
    path = tmp_path_factory.mktemp(MARKER) / f"{MARKER}.bin"
    path.write_bytes(b"not for requests")
    OPENED.clear()                        # writing it was the one legitimate open
    return path


@pytest.fixture(scope="module")
def server(lm, dense_ngram_path):
    config = ServerConfig(max_n=4, max_tokens=32, max_prompt_tokens=100, max_beams=8, max_body_bytes=4096,
                          artifacts={"ngram": {"tiny": str(dense_ngram_path)}})
    with ServerThread(create_app(lm, config)) as running:
        yield running


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as http:
        yield http


def metric_lines(client, name):
    return [line for line in client.get("/metrics").text.splitlines() if line.startswith(name + "{")]


def metric(client, name, **labels):
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(float(line.rsplit(" ", 1)[1]) for line in metric_lines(client, name) if all(w in line for w in wanted))


def error_of(response, status):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


# ------------------------------------------------------------------ 1. requests never name server files

PATH_OPTIONS = [
    ("superposed", "ngram", "{secret}"), ("superposed", "ngram", "~/.bashrc"), ("superposed", "ngram", "/etc/passwd"),
    ("blockwise", "heads", "/etc"), ("blockwise", "heads", "{secret}"), ("blockwise", "ngram", "{secret}"),
    ("blockwise", "rescorer", "{secret}"), ("speculative", "draft_model", "{secret}"),
    ("mtad", "draft_model", "smollm2-135m"), ("multi_draft", "draft_model", "/tmp"),
]


@pytest.mark.parametrize("method,option,value", PATH_OPTIONS, ids=[f"{m}-{o}-{v}" for m, o, v in PATH_OPTIONS])
def test_path_options_are_refused_and_never_opened(client, secret, method, option, value):
    value = value.format(secret=secret)
    body = {"prompt": PROMPT, "max_tokens": 2, "method": method, option: value, "rescoring": "neural"}
    if method != "blockwise":
        body.pop("rescoring")
    error = error_of(client.post("/v1/completions", json=body), 400)
    assert error["param"] == option and error["type"] == "invalid_request_error" and error["code"] == "unknown_artifact"
    assert "'default'" in error["message"] and "multidraft serve --" in error["message"]
    if option == "ngram":
        assert "'tiny'" in error["message"]               # the allowed names are listed
    assert OPENED == []


def test_no_existence_oracle_and_other_path_options(client, secret):
    here = client.post("/v1/completions", json={"prompt": PROMPT, "method": "superposed", "ngram": str(secret)})
    gone = client.post("/v1/completions", json={"prompt": PROMPT, "method": "superposed", "ngram": str(secret) + "x"})
    assert here.status_code == gone.status_code == 400
    assert here.json()["error"]["message"].replace(str(secret), "P") == gone.json()["error"]["message"].replace(
        str(secret) + "x", "P")
    for method, option in (("blockwise", "ngram_path"), ("multi_draft", "selection_options")):
        error = error_of(client.post("/v1/completions", json={"prompt": PROMPT, "method": method, option: "/etc"}), 400)
        assert error["param"] == option and "cannot be set in a request" in error["message"]
    assert OPENED == []


def test_an_operator_named_ngram_file_is_used_by_name(client, lm, dense_ngram_path):
    body = {"prompt": PROMPT, "max_tokens": 4, "n": 2, "method": "superposed", "ngram": "tiny",
            "ngram_weights": NGRAM_WEIGHTS}
    reply = client.post("/v1/completions", json=body)
    assert reply.status_code == 200, reply.text
    direct = multidraft.generate(lm, PROMPT, method="superposed", max_new_tokens=4, num_drafts=2,
                                 ngram=str(dense_ngram_path), ngram_weights=NGRAM_WEIGHTS)
    assert [c["text"] for c in reply.json()["choices"]] == [d.text for d in direct.drafts]
    config = client.get("/config").json()
    assert config["artifacts"]["ngram"] == ["default", "tiny"]
    assert "ngram" in config["methods"]["superposed"]["request_options"]
    assert "ngram_path" not in config["methods"]["blockwise"]["request_options"]


# ------------------------------------------------------------------ 2. limits on the work of one request

LIMITS = [
    ({"method": "beam", "num_beams": 10000}, "num_beams"),
    ({"method": "beam", "num_beams": 9}, "num_beams"),
    ({"method": "mtad", "num_beams": 10000}, "num_beams"),
    ({"method": "pld", "num_draft_tokens": 10 ** 9}, "num_draft_tokens"),
    ({"method": "multi_draft", "num_drafts": 10 ** 6}, "num_drafts"),
    ({"method": "multi_draft", "n": 4, "num_drafts": 16, "temperature": 1.0}, None),    # n x num_drafts > 32
    ({"method": "multi_draft", "num_drafts": 32, "num_draft_tokens": 64}, None),        # tree of 2048 tokens
    ({"method": "blockwise", "lattice_k": 10 ** 6}, "lattice_k"),
    ({"method": "superposed", "n_token_sample": 10 ** 6}, "n_token_sample"),
]


@pytest.mark.parametrize("extra,param", LIMITS, ids=[json.dumps(e) for e, _ in LIMITS])
def test_work_limits(client, extra, param):
    error = error_of(client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2, **extra}), 400)
    assert error["param"] == param and error["code"] == "limit_exceeded" and "serve --max-" in error["message"]


def test_beam_within_the_cap_still_runs(client, lm):
    reply = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 3, "method": "beam", "num_beams": 8})
    assert reply.status_code == 200
    direct = multidraft.generate(lm, PROMPT, method="beam", num_beams=8, max_new_tokens=3)
    assert reply.json()["choices"][0]["text"] == direct.text


def test_body_too_large_is_refused_before_it_is_read(server, client):
    # A declared 50 MB body: refused on the headers alone; the rest is never sent.
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 52428800\r\n\r\n{\"prompt\": \"")
        answer = b""
        while b"body_too_large" not in answer:             # headers and body may come in separate segments
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
        answer = answer.decode("latin-1")
    assert answer.startswith("HTTP/1.1 413") and "body_too_large" in answer
    # A chunked body with no length: refused once it passes the limit.
    def chunks():
        yield b'{"prompt": "'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}'
    error = error_of(client.post("/v1/completions", content=chunks(), headers={"Content-Type": "application/json"}),
                     413)
    assert error["type"] == "invalid_request_error" and "4096 bytes" in error["message"]
    assert client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}).status_code == 200


# ------------------------------------------------------------------ 3. who may call

@pytest.fixture(scope="module")
def guarded(lm):
    config = ServerConfig(api_key=KEY, allowed_hosts=("localhost", "127.0.0.1", "[::1]", "api.example"),
                          allowed_origins=("https://app.example",), max_tokens=8)
    with ServerThread(create_app(lm, config)) as running:
        yield running


def test_api_key_has_openai_401_semantics(guarded):
    url = guarded.url + "/v1/completions"
    body = {"prompt": PROMPT, "max_tokens": 2}
    missing = error_of(httpx.post(url, json=body), 401)
    assert missing["code"] == "invalid_api_key" and missing["type"] == "invalid_request_error"
    assert "Authorization: Bearer" in missing["message"]
    for wrong in ("Bearer wrong", "Bearer " + KEY[:-1], "Basic " + KEY, KEY, "Bearer " + KEY + "x", "Bearer"):
        response = httpx.post(url, json=body, headers={"Authorization": wrong})
        assert error_of(response, 401)["code"] == "invalid_api_key", wrong
        assert response.headers["www-authenticate"].startswith("Bearer")
    assert httpx.get(guarded.url + "/v1/models").status_code == 401
    assert httpx.post(url, json=body, headers={"Authorization": f"Bearer {KEY}"}).status_code == 200
    assert httpx.get(guarded.url + "/v1/models", headers={"Authorization": f"bearer {KEY}"}).status_code == 200
    for open_path in ("/health", "/", "/config", "/static/app.js"):          # no model work, no secrets
        assert httpx.get(guarded.url + open_path).status_code == 200
    assert httpx.get(guarded.url + "/config").json()["auth"] is True


def test_official_openai_client_with_the_key(guarded):
    import openai

    client = openai.OpenAI(base_url=guarded.url + "/v1", api_key=KEY, max_retries=0, timeout=60)
    assert client.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=2).choices[0].text is not None
    bad = openai.OpenAI(base_url=guarded.url + "/v1", api_key="sk-wrong", max_retries=0, timeout=60)
    with pytest.raises(openai.AuthenticationError):
        bad.completions.create(model="tiny-llama", prompt=PROMPT, max_tokens=2)


def test_api_key_from_the_environment(monkeypatch):
    from multidraft.cli import build_parser
    from multidraft.server.cli import build_config
    monkeypatch.setenv("MULTIDRAFT_API_KEY", "from-env")
    assert build_config(build_parser().parse_args(["serve"])).api_key == "from-env"
    assert build_config(build_parser().parse_args(["serve", "--api-key", "flag"])).api_key == "flag"


def test_host_header_allow_list_stops_dns_rebinding(server, guarded, client):
    for host in ("evil.example", "evil.example:8000", "localhost.evil.example", "127.0.0.1.evil.example", ""):
        response = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 2}, headers={"Host": host})
        assert error_of(response, 400)["code"] == "host_not_allowed", host
        assert client.get("/", headers={"Host": host}).status_code == 400
    for host in ("localhost", "LOCALHOST:1234", "127.0.0.1", "[::1]:80"):
        assert client.get("/health", headers={"Host": host}).status_code == 200, host
    headers = {"Host": "api.example", "Authorization": f"Bearer {KEY}"}     # listed with --allowed-hosts
    assert httpx.get(guarded.url + "/v1/models", headers=headers).status_code == 200


def test_cross_site_simple_requests_are_refused(client):
    body = json.dumps({"prompt": PROMPT, "max_tokens": 2})
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = {"Content-Type": content_type} if content_type else {}
        response = client.post("/v1/completions", content=body, headers=headers)
        assert error_of(response, 415)["type"] == "invalid_request_error", content_type
    ok = client.post("/v1/completions", content=body, headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200


def test_origin_policy(server, guarded, client):
    body = {"prompt": PROMPT, "max_tokens": 2}
    for origin in ("https://evil.example", "null", "http://localhost.evil.example"):
        response = client.post("/v1/completions", json=body, headers={"Origin": origin})
        assert error_of(response, 403)["code"] == "origin_not_allowed"
        assert "access-control-allow-origin" not in response.headers
    same = client.post("/v1/completions", json=body, headers={"Origin": server.url})     # the page itself
    assert same.status_code == 200 and "access-control-allow-origin" not in same.headers
    # CORS is off by default: a preflight from any other origin is refused.
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    assert client.options("/v1/completions", headers=preflight).status_code == 403
    # With --allowed-origins https://app.example: that origin (only) passes the preflight and gets CORS headers.
    answer = httpx.options(guarded.url + "/v1/completions", headers=preflight)
    assert answer.status_code == 204 and answer.headers["access-control-allow-origin"] == "https://app.example"
    assert "Authorization" in answer.headers["access-control-allow-headers"]
    assert "POST" in answer.headers["access-control-allow-methods"]
    assert httpx.options(guarded.url + "/v1/completions",
                         headers={**preflight, "Origin": "https://evil.example"}).status_code == 403
    reply = httpx.post(guarded.url + "/v1/completions", json=body,
                       headers={"Origin": "https://app.example", "Authorization": f"Bearer {KEY}"})
    assert reply.status_code == 200 and reply.headers["access-control-allow-origin"] == "https://app.example"


# ------------------------------------------------------------------ bad values that used to be 500s

BAD_VALUES = [
    ('{"prompt": "a \\ud800 b"}', "prompt", "lone surrogate"),
    ('{"prompt": ["ok", "\\udfff"]}', "prompt", "lone surrogate"),
    ('{"prompt": "a", "stop": ["\\ud800"]}', "stop", "lone surrogate"),
    ('{"prompt": "a", "method": "pld", "variant": "\\ud800"}', "variant", "lone surrogate"),
    ('{"prompt": "a", "temperature": 1e-300}', "temperature", "at least 0.01"),
    ('{"prompt": "a", "temperature": 1e-300, "stream": true}', "temperature", "at least 0.01"),
    ('{"prompt": "a", "top_p": 1e-300, "temperature": 1}', "top_p", "top_p must be"),
    ('{"prompt": "a", "temperature": Infinity}', None, "not valid JSON"),
    ('{"prompt": "a", "temperature": NaN}', None, "not valid JSON"),
    ('{"prompt": "a", "temperature": 1e999}', "temperature", "temperature must be"),
    ('{"prompt": "a", "seed": 9223372036854775808}', "seed", "seed must be"),
    ('{"prompt": "a", "method": "beam", "length_penalty": "x"}', "length_penalty", "a finite number"),
    ('{"prompt": "a", "method": "beam", "num_beams": true}', "num_beams", "an integer"),
    ('{"prompt": "a", "method": "beam", "num_beams": 2.0}', "num_beams", "an integer"),
    ('{"prompt": "a", "method": "blockwise", "heads": [1, 2]}', "heads", "names a set of trained heads"),
    ('{"prompt": "a", "method": "superposed", "tau": 1e-300}', "tau", "this server's limit"),
    ('{"prompt": "a", "method": "speculative", "draft_temperature": 1e-300}', "draft_temperature", "at least"),
    ('{"prompt": "a", "method": "pld", "max_ngram": true}', "max_ngram", "an integer"),
    ('{"prompt": "a", "method": "pld_plus", "theta": NaN}', None, "not valid JSON"),
    ('{"prompt": "a", "method": "pld_plus", "induction_heads": [[0, "x"]]}', "induction_heads", "integer pairs"),
    ('{"prompt": "a", "method": "pld_plus", "heads": [[0, 1]]}', "heads", "it is now 'induction_heads'"),
    ('{"prompt": [1, 2, 3, 9223372036854775808]}', None, "outside the vocabulary"),
    ('{"prompt": [-1]}', None, "outside the vocabulary"),
    ('{"messages": [{"role": "user", "content": "\\ud800"}]}', "messages", "lone surrogate"),
    ('{"messages": [{"role": "wizard", "content": "hi"}]}', "messages", "the roles this model's chat template takes are"),
]


@pytest.mark.parametrize("body,param,message", BAD_VALUES, ids=[b for b, _, _ in BAD_VALUES])
def test_bad_values_are_400s_not_500s(client, body, param, message):
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    error = error_of(client.post(path, content=body, headers={"Content-Type": "application/json"}), 400)
    assert message in error["message"] and error["type"] == "invalid_request_error"
    if param is not None:
        assert error["param"] == param


def test_405_is_a_client_error(client):
    error = error_of(client.get("/v1/completions"), 405)
    assert error["type"] == "invalid_request_error"


def test_greedy_with_a_temperature_reports_the_sampling_that_ran(client, lm):
    body = {"prompt": PROMPT, "max_tokens": 5, "method": "greedy", "temperature": 1.0, "seed": 5}
    reply = client.post("/v1/completions", json=body).json()
    assert reply["method"] == "sample" and reply["stats"]["method"] == "sample"
    direct = multidraft.generate(lm, PROMPT, method="sample", temperature=1.0, seed=5, max_new_tokens=5)
    assert reply["choices"][0]["text"] == direct.text


def test_serve_finds_a_port_in_use_before_loading_a_model(capsys):
    from multidraft.cli import main
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["serve", "--model", "no-such-model", "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err and "no-such-model" not in err
    assert main(["serve", "--model", "no-such-model", "--port", "99999"]) == 2
    assert "between 0 and 65535" in capsys.readouterr().err
    assert main(["serve", "--model", "no-such-model", "--ngram", "x=/no/such/file"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_serve_config_file(tmp_path, dense_ngram_path):
    from multidraft.cli import build_parser
    from multidraft.server.cli import ServeError, build_config
    path = tmp_path / "serve.json"
    path.write_text(json.dumps({"max_beams": 4, "allowed_hosts": ["box.lan"],
                                "artifacts": {"ngram": {"code": str(dense_ngram_path)}}}))
    config = build_config(build_parser().parse_args(["serve", "--config", str(path), "--max-beams", "6",
                                                     "--ngram", "more=/x", "--allowed-origins", "https://a.example"]))
    assert config.max_beams == 6 and "box.lan" in config.allowed_hosts and "127.0.0.1" in config.allowed_hosts
    assert config.artifacts["ngram"] == {"code": str(dense_ngram_path), "more": "/x"}
    assert config.allowed_origins == ("https://a.example",)
    path.write_text(json.dumps({"max_beamz": 4}))
    with pytest.raises(ServeError, match="unknown settings"):
        build_config(build_parser().parse_args(["serve", "--config", str(path)]))


# ------------------------------------------------------------------ deadlines free the model; aborted work counted

class SlowLayers:
    """Every decoder layer of a tiny model sleeps: one forward takes a while, as on a big model."""

    def __init__(self, lm, seconds):
        self.calls = 0
        self.handles = []
        for layer in lm._find_layers():
            self.handles.append(layer.register_forward_pre_hook(self._slow))
        self.seconds = seconds

    def _slow(self, _module, _args):
        self.calls += 1
        time.sleep(self.seconds)

    def remove(self):
        for handle in self.handles:
            handle.remove()


def test_a_timeout_stops_the_model_inside_a_long_step():
    lm = make_tiny_lm("llama", seed=5)
    slow = SlowLayers(lm, 0.05)
    try:
        config = ServerConfig(request_timeout=1.0, max_tokens=64)
        with ServerThread(create_app(lm, config)) as running, httpx.Client(base_url=running.url, timeout=60) as client:
            # Beam search reports no token until it ends, so only a check inside the forwards can stop it.
            response = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 64, "method": "beam",
                                                            "num_beams": 8})
            assert error_of(response, 504)["code"] == "timeout"
            after_504 = slow.calls
            deadline = time.monotonic() + 60          # a safety net, not a timing assertion
            while metric(client, "vllm:num_requests_running") > 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert slow.calls - after_504 <= 2        # the worker had already stopped when the 504 went out
            assert client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 1}).status_code == 200
    finally:
        slow.remove()


def test_cancelled_requests_are_counted_like_vllm():
    lm = make_tiny_lm("llama", seed=6)
    slow = SlowLayers(lm, 0.01)
    try:
        with ServerThread(create_app(lm, ServerConfig(max_tokens=200))) as running, \
                httpx.Client(base_url=running.url, timeout=60) as client:
            tokens = metric(client, "vllm:generation_tokens_total")
            with client.stream("POST", "/v1/completions", json={"prompt": PROMPT, "max_tokens": 200, "stream": True,
                                                                "stop": ["zzz"]}) as response:
                lines = response.iter_lines()
                first = next(line for line in lines if line.startswith("data: "))
                assert json.loads(first[6:])["choices"][0]["text"]        # at least one token was made
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(running.url + "/v1/completions", json={"prompt": PROMPT, "max_tokens": 200}, timeout=0.5)
            deadline = time.monotonic() + 30
            while metric(client, "multidraft:requests_cancelled_total") < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            while metric(client, "vllm:num_requests_running") > 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert metric(client, "multidraft:requests_cancelled_total") == 2
            assert metric(client, "vllm:request_success_total", finished_reason="abort") >= 1
            assert metric(client, "vllm:generation_tokens_total") > tokens          # their tokens are not lost
            statuses = [line for line in metric_lines(client, "multidraft:http_requests_total")
                        if 'path="/v1/completions"' in line]
            assert not any('status="499"' in line or 'status="500"' in line for line in statuses), statuses
    finally:
        slow.remove()


# ------------------------------------------------------------------ fuzz

KEYS = ["prompt", "messages", "max_tokens", "n", "temperature", "top_p", "top_k", "stop", "stream", "seed", "method",
        "model", "num_beams", "length_penalty", "num_draft_tokens", "max_ngram", "ngram", "heads", "rescorer",
        "draft_model", "num_drafts", "lattice_k", "tau", "alpha", "logprobs", "max_completion_tokens", "variant",
        "ngram_weights", "rescoring", "num_paths", "selection", "draft_temperatures", "n_token_sample",
        "reset_every", "rank_by", "induction_head_set", "induction_heads", "layer", "theta"]
METHODS = ["greedy", "sample", "beam", "pld", "pld_plus", "superposed", "blockwise", "speculative", "multi_draft",
           "mtad", "nope"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70), st.integers(-3, 40),
                    st.floats(allow_nan=False, allow_infinity=False), st.floats(0, 2),
                    st.text(max_size=20), st.sampled_from(["/etc/passwd", "~", "\ud800", "tiny", "default"] + METHODS))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                                         max_size=3), max_leaves=8)
bodies = st.dictionaries(st.sampled_from(KEYS), values, max_size=7).map(
    lambda body: {**body, "prompt": body.get("prompt", PROMPT)} if "messages" not in body else body)


@settings(max_examples=60, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=bodies, method=st.sampled_from(METHODS), raw=st.booleans())
def test_fuzzed_bodies_never_get_a_5xx(server, body, method, raw):
    body = {**body, "method": body.get("method", method), "max_tokens": 2}
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    content = json.dumps(body) if not raw else json.dumps(body)[: len(json.dumps(body)) // 2]
    response = httpx.post(server.url + path, content=content.encode("utf-8", "surrogatepass"),
                          headers={"Content-Type": "application/json"}, timeout=60)
    assert response.status_code < 500, (body, response.text)
    assert "error" in response.json() or response.status_code == 200
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200


def test_a_stream_that_fails_at_the_start_gets_a_real_status(lm):
    with ServerThread(create_app(lm, ServerConfig(max_tokens=200))) as running:
        body = {"prompt": "the " * 80, "max_tokens": 200, "stream": True}      # 80 + 200 tokens > the context of 256
        response = httpx.post(running.url + "/v1/completions", json=body, timeout=60)
        error = error_of(response, 400)
        assert "exceeds the context" in error["message"] and error["param"] == "prompt"     # a library error

"""`multidraft serve --ray`: replicas of the server on Ray Serve behind one OpenAI endpoint (issue #32).

First the parts on their own (routing, merged metrics, the in-process app call, shipped files, flags), then one
local deployment of SmolLM2-135M, 2 replicas with 1 thread each: the openai client end to end, session affinity,
metrics that add up, and a replica killed under load. Ray is shut down at the end whatever happens.
"""

import asyncio
import json
import random
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from multidraft.server import ServerConfig, create_app  # noqa: E402
from multidraft.server.asgi_call import ForwardedRequest, call  # noqa: E402
from multidraft.server.metrics import Metrics, merge_pages  # noqa: E402
from multidraft.server.ray_deployment import REPLICA_HEADER, SESSION_HEADER, session_of  # noqa: E402
from multidraft.server.ray_router import pick_replica  # noqa: E402
from multidraft.server.security import AUTHENTICATED_CLIENT  # noqa: E402
from multidraft.server.shipping import ShippingError, describe, local_copy  # noqa: E402
from tests.tiny_models import make_tiny_lm  # noqa: E402

PROMPT = "def fibonacci(n):\n    "
MODEL = "smollm2-135m"
KEYS = tuple(f"key-{i:02d}" for i in range(16))     # one per client: sessions by API key


# ----- routing

def test_rendezvous_keeps_sessions_and_moves_only_a_leaving_replicas_ones():
    replicas = ["r1", "r2", "r3"]
    sessions = [f"s{i}" for i in range(300)]
    before = {s: pick_replica(s, replicas, {}) for s in sessions}
    assert before == {s: pick_replica(s, list(reversed(replicas)), {}) for s in sessions}   # order does not matter
    assert set(before.values()) == set(replicas)                 # sessions spread over every replica
    after = {s: pick_replica(s, ["r1", "r3"], {}) for s in sessions}
    moved = {s for s in sessions if after[s] != before[s]}
    assert moved == {s for s in sessions if before[s] == "r2"}   # only r2's sessions moved
    # A retry avoids the replica that failed, unless it is the only one.
    assert all(pick_replica(s, replicas, {}, avoid=before[s]) != before[s] for s in sessions)
    assert pick_replica("s0", ["r1"], {}, avoid="r1") == "r1"
    # No session: the shortest known queue.
    assert pick_replica(None, replicas, {"r1": 3, "r2": 0, "r3": 5}) == "r2"


def test_session_precedence_header_then_user_then_key():
    def scope(headers=(), client=None):
        s = {"headers": [(k.encode(), v.encode()) for k, v in headers]}
        if client:
            s[AUTHENTICATED_CLIENT] = client
        return s

    body = json.dumps({"prompt": "x", "user": "alice"}).encode()
    by_header = session_of(scope([(SESSION_HEADER, "tab-1")], client="digest-a"), body)
    assert by_header == session_of(scope([(SESSION_HEADER, "tab-1")], client="digest-b"), b"")
    by_user = session_of(scope(client="digest-a"), body)
    assert by_user == session_of(scope(client="digest-b"), body) != by_header
    by_key = session_of(scope(client="digest-a"), b'{"prompt": "x"}')
    assert by_key != session_of(scope(client="digest-b"), b'{"prompt": "x"}')
    assert session_of(scope([("authorization", "Bearer tok")]), b"") == session_of(scope([("Authorization", "Bearer tok")]), b"")
    assert session_of(scope(), b"not json") is None
    assert "alice" not in by_user and len(by_user) == 32        # only a digest reaches the router


# ----- metrics of several replicas

def test_merged_pages_label_each_replica_and_keep_types():
    pages = {}
    for replica, tokens in (("r1", 5), ("r2", 7)):
        metrics = Metrics("m")
        metrics.inc("vllm:generation_tokens_total", tokens)
        metrics.inc("multidraft:http_requests_total", path="/v1/completions", status="200")
        metrics.observe_latency(0.3)
        pages[replica] = metrics.render()
    families = {f.name: f for f in text_string_to_metric_families(
        merge_pages(pages, drop=("multidraft:http_requests_total",)))}
    tokens = {s.labels["replica"]: s.value for s in families["vllm:generation_tokens"].samples}
    assert tokens == {"r1": 5.0, "r2": 7.0} and families["vllm:generation_tokens"].type == "counter"
    assert "multidraft:http_requests" not in families
    latency = [s for s in families["vllm:e2e_request_latency_seconds"].samples if s.name.endswith("_count")]
    assert sorted(s.labels["replica"] for s in latency) == ["r1", "r2"] and all(s.value == 1 for s in latency)


# ----- the plain server's app, called in process (what each replica does)

HEADERS = [(b"host", b"127.0.0.1"), (b"content-type", b"application/json")]


@pytest.fixture(scope="module")
def tiny_app():
    app = create_app(make_tiny_lm("llama", seed=3), ServerConfig(max_tokens=64))
    yield app
    app.state.service.close()


def _request(body: dict) -> ForwardedRequest:
    return ForwardedRequest("POST", "/v1/completions", headers=HEADERS, body=json.dumps(body).encode())


async def _collect(app, request, stop_after=None):
    messages = []
    stream = call(app, request)
    async for message in stream:
        messages.append(message)
        if stop_after is not None and len(messages) >= stop_after:
            await stream.aclose()
            break
    return messages


def test_in_process_call_answers_streams_and_refuses_like_the_server(tiny_app):
    messages = asyncio.run(_collect(tiny_app, _request({"prompt": "the cat", "max_tokens": 5})))
    assert messages[0]["type"] == "http.response.start" and messages[0]["status"] == 200
    assert json.loads(messages[1]["body"])["usage"]["completion_tokens"] == 5

    streamed = asyncio.run(_collect(tiny_app, _request({"prompt": "the cat", "max_tokens": 5, "stream": True})))
    body = b"".join(m.get("body", b"") for m in streamed[1:])
    assert len(streamed) > 3 and body.endswith(b"data: [DONE]\n\n")

    refused = asyncio.run(_collect(tiny_app, ForwardedRequest("POST", "/v1/completions", headers=[(b"host", b"evil.example")],
                                                               body=b"{}")))
    assert refused[0]["status"] == 400                            # the replica checks Host too


def test_in_process_call_cancels_the_job_when_the_caller_stops(tiny_app):
    metrics = tiny_app.state.metrics
    before = metrics.value("multidraft:requests_cancelled_total")
    request = _request({"prompt": "the cat", "max_tokens": 60, "stream": True, "method": "greedy"})
    asyncio.run(_collect(tiny_app, request, stop_after=2))       # start + first chunk, then the caller goes
    deadline = time.monotonic() + 10
    while metrics.value("multidraft:requests_cancelled_total") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metrics.value("multidraft:requests_cancelled_total") == before + 1
    while tiny_app.state.worker.running and time.monotonic() < deadline:     # it stops at its next token
        time.sleep(0.05)
    assert tiny_app.state.worker.running == 0


# ----- the operator's files on another node

def test_shipped_file_is_fetched_where_its_path_is_missing(tmp_path):
    source = tmp_path / "data.ngram"
    source.write_bytes(bytes(range(256)) * 1000)
    shipped = describe(str(source))
    assert local_copy(shipped, None, tmp_path / "cache") == str(source)       # same node: the file itself
    elsewhere = type(shipped)(str(tmp_path / "other-node" / "data.ngram"), shipped.size, shipped.sha256)
    with pytest.raises(ShippingError, match="not on this node"):
        local_copy(elsewhere, None, tmp_path / "cache")
    calls = []

    def read(sha256, offset, size):             # the holder's answer: chunks of the file it has by this digest
        calls.append((sha256, offset))
        return source.read_bytes()[offset:offset + min(size, 100_000)]

    copy = local_copy(elsewhere, read, tmp_path / "cache")
    assert open(copy, "rb").read() == source.read_bytes()
    assert calls == [(shipped.sha256, 0), (shipped.sha256, 100_000), (shipped.sha256, 200_000)]
    assert local_copy(elsewhere, None, tmp_path / "cache") == copy            # fetched once, then reused
    damaged = type(shipped)(elsewhere.path, shipped.size, "0" * 64)
    with pytest.raises(ShippingError, match="another SHA-256"):
        local_copy(damaged, read, tmp_path / "cache2")
    assert not (tmp_path / "cache2").exists() or not any((tmp_path / "cache2").iterdir())


def test_ray_flags_are_checked_before_anything_starts():
    import argparse

    from multidraft.server import cli
    from multidraft.server.ray_cli import RayServeError

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers())

    def config_of(*flags):
        return cli.serve_config(parser.parse_args(["serve", "--model", "x", *flags]))

    for flags, message in ((["--replicas", "2"], "needs --ray"),
                           (["--ray", "--replicas", "2", "--autoscale", "1..3"], "not both"),
                           (["--ray", "--autoscale", "3..1"], "MIN..MAX"),
                           (["--ray", "--autoscale", "0..2"], "MIN..MAX"),
                           (["--ray", "--threads", "auto"], "threads per replica"),
                           (["--ray", "--suffix-store-path", "/tmp/x"], "in memory")):
        with pytest.raises(RayServeError, match=message):
            config_of(*flags)
    from multidraft.server.ray_cli import spec_from_args
    args = parser.parse_args(["serve", "--model", "x", "--ray", "--autoscale", "1..3", "--threads", "2"])
    spec = spec_from_args(args, cli.serve_config(args))
    assert spec.autoscale == (1, 3) and spec.threads == 2 and spec.max_replicas == 3
    from multidraft.server.ray_deployment import application
    application(spec)                       # Serve accepts the options (autoscaling, router, drain) as built


# ----- a local deployment: smollm2-135m, 2 replicas x 1 thread

@pytest.fixture(scope="module")
def deployment(smollm):
    import socket

    from ray import serve

    from multidraft.server.ray_deployment import ServeSpec, deploy

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = ServerConfig(api_key=KEYS, max_tokens=32, request_timeout=120, model_name=MODEL).validate()
    spec = ServeSpec(config=config, model=MODEL, dtype="float32", runner="eager", threads=1, replicas=2,
                     app_name="multidraft-test")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        deploy(spec, "127.0.0.1", port)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:          # serve.run returned: the proxy learns the route soon after
            try:
                if _health(url).json().get("replicas") == 2:
                    break
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)
        yield url
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


def _openai(url, key=KEYS[0]):
    import openai
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=120)


def _metrics(url) -> dict:
    """{(name, labels without replica): value summed over replicas} and the per-replica values, from /metrics."""
    text = httpx.get(url + "/metrics", timeout=30).text
    summed, per_replica = {}, {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k not in ("replica", "model_name")}
            key = (sample.name, tuple(sorted(labels.items())))
            summed[key] = summed.get(key, 0.0) + sample.value
            if "replica" in sample.labels:
                per_replica.setdefault(key, {})[sample.labels["replica"]] = sample.value
    return {"sum": summed, "replica": per_replica}


def _health(url):
    return httpx.get(url + "/health", timeout=30)


@pytest.mark.real_model
def test_openai_client_end_to_end_through_the_deployment(deployment, smollm):
    import openai
    import torch

    import multidraft

    client = _openai(deployment)
    assert [m.id for m in client.models.list()] == [MODEL]
    reply = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                 # as in each replica: eager fp32 bits depend on the thread count
    try:
        direct = multidraft.generate(smollm, PROMPT, max_new_tokens=8)
    finally:
        torch.set_num_threads(threads)
    assert reply.choices[0].text == direct.text
    chunks = list(client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == direct.text
    messages = [{"role": "user", "content": "Name a colour."}]
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=6, temperature=0, stream=True) if c.choices)
    whole = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6, temperature=0)
    assert streamed == whole.choices[0].message.content
    # The plain server's checks, once, at the ingress; its errors come back as they are.
    with pytest.raises(openai.AuthenticationError):
        _openai(deployment, key="wrong").completions.create(model=MODEL, prompt=PROMPT, max_tokens=2)
    with pytest.raises(openai.BadRequestError, match="'n' must be between"):
        client.completions.create(model=MODEL, prompt=PROMPT, n=99)
    assert httpx.get(deployment + "/health", headers={"Host": "evil.example"}).status_code == 400
    assert httpx.post(deployment + "/v1/completions", headers={"Origin": "https://evil.example",
                                                              "Authorization": f"Bearer {KEYS[0]}"},
                      json={"prompt": "x"}).status_code == 403
    health = _health(deployment)
    assert health.status_code == 200 and health.json()["replicas"] == 2


def _replica_of(client, **kwargs) -> str:
    raw = client.completions.with_raw_response.create(model=MODEL, prompt=PROMPT, max_tokens=2,
                                                      temperature=0, **kwargs)
    return raw.headers[REPLICA_HEADER]


@pytest.mark.real_model
def test_a_session_stays_on_one_replica_and_sessions_spread(deployment):
    client = _openai(deployment)
    by_key = {_replica_of(client) for _ in range(20)}
    assert len(by_key) == 1                                      # 20 requests of one API key: one replica
    keys = {_replica_of(_openai(deployment, key)) for key in KEYS}
    assert len(keys) == 2                                        # 16 keys: both replicas (chance 2^-15 not to)
    users = [_replica_of(_openai(deployment, key), user="alice") for key in KEYS[:5]]
    assert len(set(users)) == 1                                  # a `user` is one session, whatever its key
    header = {_replica_of(_openai(deployment, key), extra_headers={"X-Session-Id": "tab-7"}) for key in KEYS[:5]}
    assert len(header) == 1
    # The session's suffix store is on its replica only: the other one learnt nothing.
    session = {"X-Session-Id": "suffix-session"}
    home = _replica_of(client, extra_headers=session)
    for _ in range(3):
        assert _replica_of(client, extra_headers=session, extra_body={"method": "suffix"}) == home
    stores = _metrics(deployment)["replica"][("multidraft:suffix_store_tokens", ())]
    assert stores[home] > 0 and all(v == 0 for r, v in stores.items() if r != home)


@pytest.mark.real_model
def test_metrics_add_up_to_what_was_sent(deployment):
    before = _metrics(deployment)["sum"]
    completions = 0
    replicas = set()
    for i in range(6):
        raw = _openai(deployment, KEYS[i % 2]).completions.with_raw_response.create(
            model=MODEL, prompt=PROMPT, max_tokens=3 + i, temperature=0, user=f"m-{i}")
        completions += raw.parse().usage.completion_tokens
        replicas.add(raw.headers[REPLICA_HEADER])
    refused = httpx.post(deployment + "/v1/completions", json={"prompt": "x"})        # no key: 401 at the ingress
    assert refused.status_code == 401
    after = _metrics(deployment)["sum"]

    def delta(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("vllm:generation_tokens_total") == completions
    assert delta("multidraft:method_requests_total", method="greedy") == 6
    assert delta("vllm:e2e_request_latency_seconds_count") == 6
    assert delta("multidraft:http_requests_total", path="/v1/completions", status="200") == 6
    assert delta("multidraft:http_requests_total", path="/v1/completions", status="401") == 1
    assert after[("multidraft:replicas", ())] == 2


@pytest.mark.real_model
def test_files_are_fetched_from_the_operators_node(deployment, tmp_path):
    from multidraft.server.ray_deployment import ServeSpec, _file_reader, start_file_holder
    from multidraft.server.shipping import ShippedFile

    source = tmp_path / "code.ngram"
    source.write_bytes(bytes(random.Random(0).getrandbits(8) for _ in range(70_000)))
    shipped = describe(str(source))
    spec = ServeSpec(config=ServerConfig(), model=MODEL, shipped={"ngram": {"code": shipped}}, app_name="files-test")
    holder = start_file_holder(spec)
    try:
        on_another_node = ShippedFile(str(tmp_path / "node-b" / "code.ngram"), shipped.size, shipped.sha256)
        copy = local_copy(on_another_node, _file_reader(spec.file_holder), tmp_path / "cache")
        assert open(copy, "rb").read() == source.read_bytes()
        with pytest.raises(Exception, match="no such file is shipped"):     # the holder serves its files only
            ray.get(holder.read.remote("f" * 64, 0, 10))
    finally:
        ray.kill(holder)


def _replica_actor(replica: str):
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if replica in entry["name"]:
            return ray.get_actor(entry["name"], namespace=entry["namespace"])
    raise AssertionError(f"no actor for replica {replica}")


@pytest.mark.real_model
@pytest.mark.slow
def test_a_replica_killed_under_load_loses_no_request(deployment):
    client = _openai(deployment)
    session = {"X-Session-Id": "doomed"}
    doomed = _replica_of(client, extra_headers=session)
    answers, errors = [], []

    def one(i):
        # the first request is short and the others long: when it answers, they are still running (the replica
        # batches them all; with equal lengths they could all finish before the kill)
        try:
            raw = client.completions.with_raw_response.create(model=MODEL, prompt=PROMPT, temperature=0,
                                                              max_tokens=2 if i == 0 else 32, extra_headers=session)
            answers.append(raw.headers[REPLICA_HEADER])
        except Exception as exc:              # noqa: BLE001  (counted, then asserted empty)
            errors.append(exc)

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(one, i) for i in range(6)]
        deadline = time.monotonic() + 60
        while not answers and time.monotonic() < deadline:         # mid-load: one answered, five queued/running
            time.sleep(0.05)
        ray.kill(_replica_actor(doomed), no_restart=True)
        for future in futures:
            future.result()
    assert errors == [] and len(answers) == 6                       # nothing lost
    assert answers[0] == doomed and sum(a != doomed for a in answers) >= 3   # the rest: answered elsewhere
    # The deployment answers again, and Serve brings the replica count back.
    assert _replica_of(client, extra_headers=session) != doomed
    deadline = time.monotonic() + 180
    while _health(deployment).json()["replicas"] < 2 and time.monotonic() < deadline:
        time.sleep(1)
    assert _health(deployment).json()["replicas"] == 2

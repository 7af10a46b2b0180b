"""Load test for `multidraft serve`: R requests from C concurrent clients over loopback.

    multidraft bench serve load --model smollm2-135m --requests 200 --concurrency 8 --max-tokens 4
    multidraft bench serve load --url http://127.0.0.1:8000 --requests 200 --concurrency 8
    # load curve: 1/2/4/8/16 clients, greedy and pld on code edits, batched serving vs one at a time
    multidraft bench serve load --model qwen2.5-coder-1.5b --curve 1,2,4,8,16 --methods greedy,pld \
        --max-tokens 128 --json benchmarks/results/server_load_curve.json

With --model the benchmark starts `multidraft serve` as a separate process on a free loopback port (with
--max-queue, so that a queue smaller than the number of clients shows the deliberate 429s) and stops it
at the end. A client that gets a 429 waits the server's Retry-After (or --retry-delay, if given) and
sends the same request again, as a well-behaved client does. Prints latency
percentiles of the successful attempts (server time) and of whole requests (retries included), counts
of every status and throughput; --json writes the same as one JSON object.

--curve C1,C2,... runs the load curve of issue 31 instead: two servers in turn on the same model, one serving one
request at a time (--max-num-seqs 1) and one batching (--max-num-seqs = the largest C); for each method and each
client count C, C clients stream chat completions of code-edit prompts (the `code_edit` task: `multidraft data pull
cpython-stdlib`), --requests-per-client each. Reported per row: total generated tokens/s, p50/p99 latency, p50/p99
time to first token, mean acceptance length; and the batched/one-at-a-time throughput ratio per row.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections import Counter
from multidraft.errors import InvalidOptionError
from multidraft.eval.timing import Span, clock

read_clock = clock()    # the clock every latency here is read from


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already-sorted values (q in [0, 100])."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


def _summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"p50": percentile(ordered, 50), "p90": percentile(ordered, 90), "p99": percentile(ordered, 99),
            "max": ordered[-1] if ordered else float("nan"),
            "mean": sum(ordered) / len(ordered) if ordered else float("nan")}


def run_load(base_url: str, requests: int = 200, concurrency: int = 8, max_tokens: int = 4,
             method: str = "greedy", prompt: str = "def fibonacci(n):", timeout: float = 120.0,
             retry_delay: float | None = None, give_up_after: float = 600.0) -> dict:
    """Send `requests` completions from `concurrency` threads, retrying 429s; returns statuses and latencies.

    `statuses` counts every response (429s included); `final_statuses` counts each request's last answer."""
    import httpx

    lock = threading.Lock()
    next_index = [0]
    statuses: Counter = Counter()
    final_statuses: Counter = Counter()
    attempt_latencies: list[float] = []
    request_latencies: list[float] = []
    errors: list[str] = []

    def one_request(client, index):
        body = {"prompt": f"{prompt} # {index}", "max_tokens": max_tokens, "method": method}
        first_sent = read_clock()
        while read_clock() - first_sent < give_up_after:
            sent = read_clock()
            try:
                response = client.post("/v1/completions", json=body)
            except httpx.HTTPError as exc:
                return "transport_error", f"{type(exc).__name__}: {exc}"
            now = read_clock()
            with lock:
                statuses[response.status_code] += 1
            if response.status_code == 429:
                time.sleep(retry_delay if retry_delay is not None else float(response.headers.get("retry-after", 1)))
                continue
            if response.status_code == 200:
                with lock:
                    attempt_latencies.append(now - sent)
                    request_latencies.append(now - first_sent)
                return 200, None
            return response.status_code, f"{response.status_code}: {response.text[:200]}"
        return 429, f"still 429 after {give_up_after:g} s of retries"

    def client_loop():
        with httpx.Client(base_url=base_url, timeout=timeout) as client:
            while True:
                with lock:
                    if next_index[0] >= requests:
                        return
                    index = next_index[0]
                    next_index[0] += 1
                status, error = one_request(client, index)
                with lock:
                    final_statuses[status] += 1
                    if error:
                        errors.append(error)

    clock = Span.start()
    threads = [threading.Thread(target=client_loop) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = clock.elapsed()
    as_dict = lambda counter: {str(k): v for k, v in sorted(counter.items(), key=lambda kv: str(kv[0]))}
    return {
        "requests": requests, "concurrency": concurrency, "max_tokens": max_tokens, "method": method,
        "statuses": as_dict(statuses), "final_statuses": as_dict(final_statuses), "errors": errors,
        "wall_seconds": wall, "successful_per_second": len(request_latencies) / wall if wall else 0.0,
        "attempt_latency_seconds": _summary(attempt_latencies),
        "request_latency_seconds": _summary(request_latencies),
    }


def format_report(result: dict) -> str:
    ms = lambda lat: "/".join(f"{lat[q] * 1000:.0f}" for q in ("p50", "p90", "p99", "max"))
    return (f"{result['requests']} requests, {result['concurrency']} clients, max_tokens={result['max_tokens']}, "
            f"method={result['method']}: final {result['final_statuses']}, all responses {result['statuses']}, "
            f"{len(result['errors'])} errors, {result['wall_seconds']:.1f} s, {result['successful_per_second']:.1f} "
            f"requests/s\n  latency p50/p90/p99/max (ms): successful attempt {ms(result['attempt_latency_seconds'])}; "
            f"whole request incl. 429 retries {ms(result['request_latency_seconds'])}")


def run_stream_load(base_url: str, prompts: list, clients: int, per_client: int, max_tokens: int, method: str,
                    timeout: float = 600.0, sessions: bool = False) -> dict:
    """`clients` threads each stream `per_client` chat completions (prompts taken in turn: message lists; plain
    strings stream /v1/completions instead); tokens from usage. `sessions`: each client sends its own `user`, which
    keeps it on one replica of `serve --ray`."""
    import httpx

    lock = threading.Lock()
    latencies, first_tokens, tokens, acceptance, errors = [], [], [0], [], []

    def client_loop(client_index):
        with httpx.Client(base_url=base_url, timeout=timeout) as client:
            for k in range(per_client):
                prompt = prompts[(client_index * per_client + k) % len(prompts)]
                chat = not isinstance(prompt, str)
                body = {"messages" if chat else "prompt": prompt, "max_tokens": max_tokens, "method": method,
                        "stream": True, "stream_options": {"include_usage": True}}     # the last chunk's stats
                if sessions:
                    body["user"] = f"client-{client_index}"
                sent, first = read_clock(), None
                try:
                    with client.stream("POST", "/v1/chat/completions" if chat else "/v1/completions",
                                       json=body) as response:
                        if response.status_code != 200:
                            errors.append(f"{response.status_code}")
                            continue
                        for line in response.iter_lines():
                            if not line.startswith("data: ") or line == "data: [DONE]":
                                continue
                            event = json.loads(line[6:])
                            if first is None and event.get("choices"):
                                first = read_clock()
                            if event.get("usage"):
                                with lock:
                                    tokens[0] += event["usage"]["completion_tokens"]
                                    stats = event.get("stats") or {}
                                    if "mean_acceptance_length" in stats:
                                        acceptance.append(stats["mean_acceptance_length"])
                except httpx.HTTPError as exc:
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                done = read_clock()
                with lock:
                    latencies.append(done - sent)
                    first_tokens.append((first or done) - sent)

    clock = Span.start()
    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = clock.elapsed()
    return {"clients": clients, "requests": clients * per_client, "method": method, "wall_seconds": wall,
            "tokens": tokens[0], "tokens_per_second": tokens[0] / wall if wall else 0.0,
            "latency_seconds": _summary(latencies), "first_token_seconds": _summary(first_tokens),
            "mean_acceptance_length": sum(acceptance) / len(acceptance) if acceptance else float("nan"),
            "errors": errors}


def run_curve(model: str, levels: list[int], methods: list[str], max_tokens: int, per_client: int,
              prompts: list, extra: list[str], timeout: float = 3600.0) -> dict:
    """The load curve: the same levels and methods against a one-at-a-time and a batching server. `timeout`: what a
    request may take, queueing included, for the servers (--timeout; their default 120 s would turn the one-at-a-time
    server's long queues into 504s) and the clients (a queued stream sends nothing until its job starts)."""
    rows = []
    for mode, seqs in (("one_at_a_time", 1), ("batched", max(levels))):
        server, url = start_server(model, max_queue=2 * max(levels),
                                   extra=["--max-num-seqs", str(seqs), "--timeout", str(timeout), *extra])
        try:
            prompts = _as_plain_text_without_chat_template(url, prompts)
            for method in methods:
                run_stream_load(url, prompts, 1, 1, 8, method)         # warm-up: kernels, caches, forward costs
                for clients in levels:
                    row = run_stream_load(url, prompts, clients, per_client, max_tokens, method, timeout=timeout)
                    row["mode"] = mode
                    rows.append(row)
                    print(format_curve_row(row), flush=True)
        finally:
            server.terminate()
            server.wait(30)
    alone = {(r["method"], r["clients"]): r for r in rows if r["mode"] == "one_at_a_time"}
    for row in rows:
        base = alone.get((row["method"], row["clients"]))
        row["throughput_vs_one_at_a_time"] = (row["tokens_per_second"] / base["tokens_per_second"]
                                              if base and base["tokens_per_second"] else float("nan"))
    return {"model": model, "levels": levels, "methods": methods, "max_tokens": max_tokens, "rows": rows}


def _as_plain_text_without_chat_template(url: str, prompts: list) -> list:
    """The prompts as they are, or, when the served model has no chat template (a base model: the server answers
    chat requests with a 400 that says so), each conversation's messages as plain text for /v1/completions."""
    import httpx

    if all(isinstance(prompt, str) for prompt in prompts):
        return prompts
    probe = httpx.post(url + "/v1/chat/completions", json={"messages": prompts[0], "max_tokens": 1}, timeout=600)
    if probe.status_code != 400 or "chat template" not in probe.text:
        return prompts
    print("the model has no chat template: plain-text completions of the same prompts", flush=True)
    return ["\n\n".join(message["content"] for message in messages) for messages in prompts]


def format_curve_row(row: dict) -> str:
    ms = lambda lat: f"{lat['p50'] * 1000:.0f}/{lat['p99'] * 1000:.0f}"
    return (f"{row['mode']:>13} {row['method']:>7} {row['clients']:>3} clients: {row['tokens_per_second']:7.1f} tok/s, "
            f"latency p50/p99 {ms(row['latency_seconds'])} ms, first token p50/p99 {ms(row['first_token_seconds'])} ms, "
            f"acceptance {row['mean_acceptance_length']:.2f}, {len(row['errors'])} errors")


def code_edit_prompts(limit: int = 32) -> list:
    from multidraft.eval.tasks import load_task
    return [item.messages for item in load_task("code_edit", limit=limit)]


def start_server(model: str, max_queue: int, timeout: float = 600.0, extra: tuple = (), replicas: int = 1):
    """`multidraft serve` in a child process on a free loopback port; returns (process, url) once healthy (with
    `serve --ray`: once /health counts `replicas` ready replicas)."""
    import socket
    import subprocess

    import httpx

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "multidraft.cli", "serve", "--model", model, "--port", str(port),
                                "--max-queue", str(max_queue), "--log-level", "warning", *(extra or
                                                                                            ["--dtype", "float32"])])
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with status {process.returncode}")
        try:
            health = httpx.get(url + "/health", timeout=5)
            if health.status_code == 200 and health.json().get("replicas", 1) >= replicas:
                return process, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.terminate()
            raise SystemExit("the server did not become healthy in time")
        time.sleep(0.5)


def add_arguments(parser) -> None:
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="an already running server")
    where.add_argument("--model", help="start a server for this model in-process on a free loopback port")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--method", default="greedy")
    parser.add_argument("--max-queue", type=int, default=4, help="queue size of the in-process server")
    parser.add_argument("--retry-delay", type=float, default=None,
                        help="seconds a client waits after a 429 (default: the server's Retry-After)")
    parser.add_argument("--json", help="write the result to this file as JSON")
    parser.add_argument("--curve", default=None, metavar="C1,C2,...",
                        help="the load curve (with --model): these client counts, batched vs one at a time")
    parser.add_argument("--methods", default="greedy,pld", help="methods of the curve")
    parser.add_argument("--requests-per-client", type=int, default=2, help="streamed requests per client (curve)")
    parser.add_argument("--curve-timeout", type=float, default=3600.0,
                        help="seconds a curve request may take, queueing included (servers and clients)")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="extra `multidraft serve` argument for the curve's servers (e.g. --server-arg=--runner "
                             "--server-arg=quantized)")


def run(args) -> int:
    if args.curve:
        if not args.model:
            raise InvalidOptionError("--curve starts its own servers: give --model, not --url")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        levels = [int(c) for c in args.curve.split(",")]
        result = run_curve(args.model, levels, args.methods.split(","), args.max_tokens, args.requests_per_client,
                           code_edit_prompts(), args.server_arg, args.curve_timeout)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(result, handle, indent=2)
        return 0

    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the child server is stopped below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    server = None
    url = args.url
    if args.model:
        server, url = start_server(args.model, args.max_queue)
    try:
        result = run_load(url, args.requests, args.concurrency, args.max_tokens, args.method,
                          retry_delay=args.retry_delay)
    finally:
        if server is not None:
            server.terminate()
            server.wait(30)
    print(format_report(result))
    for error in result["errors"][:5]:
        print("  error:", error, file=sys.stderr)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 1 if result["errors"] else 0


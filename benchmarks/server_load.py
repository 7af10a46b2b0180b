"""Load test for `multidraft serve`: R requests from C concurrent clients over loopback.

    python benchmarks/server_load.py --model smollm2-135m --requests 200 --concurrency 8 --max-tokens 4
    python benchmarks/server_load.py --url http://127.0.0.1:8000 --requests 200 --concurrency 8

With --model the server runs in this process on a free loopback port (with --max-queue, so that a
queue smaller than the number of clients shows the deliberate 429s). Prints latency percentiles of the
successful requests, status counts and throughput; --json writes the same as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections import Counter


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already-sorted values (q in [0, 100])."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), int(-(-q * len(sorted_values) // 100))))
    return sorted_values[rank - 1]


def run_load(base_url: str, requests: int = 200, concurrency: int = 8, max_tokens: int = 4,
             method: str = "greedy", prompt: str = "def fibonacci(n):", timeout: float = 120.0) -> dict:
    """Fire `requests` completions from `concurrency` threads; returns statuses, errors and latencies."""
    import httpx

    lock = threading.Lock()
    next_index = [0]
    statuses: Counter = Counter()
    latencies: list[float] = []
    errors: list[str] = []

    def client_loop():
        with httpx.Client(base_url=base_url, timeout=timeout) as client:
            while True:
                with lock:
                    if next_index[0] >= requests:
                        return
                    index = next_index[0]
                    next_index[0] += 1
                body = {"prompt": f"{prompt} # {index}", "max_tokens": max_tokens, "method": method}
                started = time.perf_counter()
                try:
                    response = client.post("/v1/completions", json=body)
                except httpx.HTTPError as exc:
                    with lock:
                        statuses["transport_error"] += 1
                        errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                elapsed = time.perf_counter() - started
                with lock:
                    statuses[response.status_code] += 1
                    if response.status_code == 200:
                        latencies.append(elapsed)
                    elif response.status_code != 429:
                        errors.append(f"{response.status_code}: {response.text[:200]}")

    started = time.perf_counter()
    threads = [threading.Thread(target=client_loop) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "requests": requests, "concurrency": concurrency, "max_tokens": max_tokens, "method": method,
        "statuses": {str(k): v for k, v in sorted(statuses.items(), key=lambda kv: str(kv[0]))},
        "errors": errors, "wall_seconds": wall, "successful_per_second": len(ordered) / wall if wall else 0.0,
        "latency_seconds": {"p50": percentile(ordered, 50), "p90": percentile(ordered, 90),
                            "p99": percentile(ordered, 99), "max": ordered[-1] if ordered else float("nan"),
                            "mean": sum(ordered) / len(ordered) if ordered else float("nan")},
    }


def format_report(result: dict) -> str:
    lat = result["latency_seconds"]
    return (f"{result['requests']} requests, {result['concurrency']} clients, max_tokens={result['max_tokens']}, "
            f"method={result['method']}: statuses {result['statuses']}, {len(result['errors'])} errors, "
            f"{result['wall_seconds']:.1f} s, {result['successful_per_second']:.1f} ok/s; latency of successful "
            f"requests p50 {lat['p50'] * 1000:.0f} ms, p90 {lat['p90'] * 1000:.0f} ms, p99 {lat['p99'] * 1000:.0f} ms, "
            f"max {lat['max'] * 1000:.0f} ms")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="an already running server")
    where.add_argument("--model", help="start a server for this model in-process on a free loopback port")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--method", default="greedy")
    parser.add_argument("--max-queue", type=int, default=4, help="queue size of the in-process server")
    parser.add_argument("--json", help="write the result to this file as JSON")
    args = parser.parse_args(argv)

    server = None
    url = args.url
    if args.model:
        import torch

        import multidraft
        from multidraft.server import ServerConfig, ServerThread, create_app
        lm = multidraft.load_model(args.model, dtype=torch.float32)
        server = ServerThread(create_app(lm, ServerConfig(max_queue=args.max_queue))).start()
        url = server.url
    try:
        result = run_load(url, args.requests, args.concurrency, args.max_tokens, args.method)
    finally:
        if server is not None:
            server.stop()
    print(format_report(result))
    for error in result["errors"][:5]:
        print("  error:", error, file=sys.stderr)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""When do replicas beat one bigger process? `multidraft serve --ray` at C concurrent clients (issue #32).

    multidraft bench serve ray --model smollm2-135m --clients 4 --requests-per-client 4 --max-tokens 64 \
        --json benchmarks/results/ray_serve.json

Each configuration is started as its own `multidraft serve` process on a free loopback port, warmed up, loaded by C
clients streaming chat completions of code-edit prompts (`multidraft bench serve load`'s client: tokens from usage,
latency and time to first token per request), and stopped (Ctrl-C: the replicas drain) before the next starts:
- plain-1t:       `serve --threads 1`, no Ray (what Ray's ingress and proxy add is the difference to ray-1x1t)
- ray-1x1t:       `serve --ray --replicas 1 --threads 1`
- ray-2x1t:       `serve --ray --replicas 2 --threads 1` (two model copies, one core each)
- ray-1x2t-batch: `serve --ray --replicas 1 --threads 2 --max-num-seqs C` (one copy, both cores, batching)
- plain-2t-batch: `serve --threads 2 --max-num-seqs C`, no Ray
Requests carry no session by default (each goes to the replica with the shortest queue); --sessions gives each
client its own `user`, so affinity pins it to one replica (rendezvous hashing may put several on one). Timings need
an otherwise idle machine with at least the cores the row names.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from multidraft.eval.bench_args import add_model_argument
from multidraft.eval.presets.serve_load import code_edit_prompts, run_stream_load, start_server

CONFIGS = {
    "plain-1t": ["--threads", "1"],
    "ray-1x1t": ["--ray", "--replicas", "1", "--threads", "1"],
    "ray-2x1t": ["--ray", "--replicas", "2", "--threads", "1"],
    "ray-1x2t-batch": ["--ray", "--replicas", "1", "--threads", "2", "--max-num-seqs", "{clients}"],
    "plain-2t-batch": ["--threads", "2", "--max-num-seqs", "{clients}"],
}


def stop(process) -> None:
    process.send_signal(signal.SIGINT)          # serve --ray drains its replicas and stops its local Ray
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)


def add_arguments(parser) -> None:
    add_model_argument(parser, "smollm2-135m")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests-per-client", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--method", default="greedy")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"any of {', '.join(CONFIGS)}")
    parser.add_argument("--sessions", action="store_true", help="each client sends its own `user` (affinity)")
    parser.add_argument("--server-arg", action="append", default=[], help="extra `multidraft serve` argument")
    parser.add_argument("--json", help="write the rows to this file as JSON")


def run(args) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    prompts = code_edit_prompts()
    rows = []
    for name in args.configs.split(","):
        flags = [flag.format(clients=args.clients) for flag in CONFIGS[name]]
        replicas = int(flags[flags.index("--replicas") + 1]) if "--replicas" in flags else 1
        process, url = start_server(args.model, 64, timeout=900, extra=[*flags, *args.server_arg], replicas=replicas)
        try:
            run_stream_load(url, prompts, replicas, 1, 8, args.method)           # warm-up: each replica once
            row = run_stream_load(url, prompts, args.clients, args.requests_per_client, args.max_tokens,
                                  args.method, sessions=args.sessions)
        finally:
            stop(process)
        row.update(config=name, flags=flags)
        rows.append(row)
        ms = lambda lat: f"{lat['p50'] * 1000:.0f}/{lat['p99'] * 1000:.0f}"   # noqa: E731
        print(f"{name:>15}: {row['tokens_per_second']:7.1f} tok/s, latency p50/p99 {ms(row['latency_seconds'])} ms, "
              f"first token p50/p99 {ms(row['first_token_seconds'])} ms, {row['tokens']} tokens, "
              f"{len(row['errors'])} errors", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"model": args.model, "clients": args.clients, "max_tokens": args.max_tokens,
                       "method": args.method, "sessions": args.sessions, "rows": rows}, handle, indent=2)
    return 1 if any(row["errors"] for row in rows) else 0


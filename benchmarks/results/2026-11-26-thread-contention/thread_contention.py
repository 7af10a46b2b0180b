"""Greedy tokens/s at 1 and 2 threads, with and without a CPU-busy neighbour process, per OpenMP wait policy.

Issue #35 item 11: with torch's default 2 threads on 2 cores and another process computing on one core, smollm2
greedy fell from ~17-30 to 0.5-0.8 tok/s (1 thread did not collapse). This measures that grid so the thread /
wait-policy defaults can be chosen from numbers: every cell runs in a fresh process (OMP_WAIT_POLICY and
GOMP_SPINCOUNT are read once, when the OpenMP runtime starts), the neighbour is one process spinning on one core,
and each cell records the load average and the threads it ran with. `--threads auto` rows show what
multidraft.models.threads.auto_threads picks in each situation.

Run it on an otherwise idle machine (it is meaningless while other work shares the CPU):
    python benchmarks/results/2026-11-26-thread-contention/thread_contention.py --model smollm2-135m --tokens 64 --out benchmarks/results/thread_contention.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import subprocess
import sys
import time

PROMPTS = ["def quicksort(items):\n", "The history of the printing press", "import numpy as np\n\n# load the data\n"]
POLICIES = {"default": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"}, "spin10k": {"GOMP_SPINCOUNT": "10000"}}


def _spin() -> None:
    while True:
        pass


def measure(model: str, threads: str, tokens: int, runner: str) -> dict:
    """In this process: load, warm up, then time greedy decoding of every prompt (one cell of the grid)."""
    import torch

    import multidraft
    from multidraft.models.threads import apply_threads

    chosen = apply_threads(threads if threads == "auto" else int(threads))
    lm = multidraft.load_model(model, runner=runner)
    multidraft.generate(lm, PROMPTS[0], max_new_tokens=4)                    # warm-up (kernels, caches)
    load_before = os.getloadavg()[0]
    generated, seconds = 0, 0.0
    for prompt in PROMPTS:
        started = time.perf_counter()
        out = multidraft.generate(lm, prompt, max_new_tokens=tokens)
        seconds += time.perf_counter() - started
        generated += len(out.token_ids)
    return {"tok_per_s": generated / seconds, "tokens": generated, "seconds": seconds, "threads": chosen,
            "torch_threads": torch.get_num_threads(), "load_average_before": load_before,
            "load_average_after": os.getloadavg()[0], "runner": getattr(lm, "runner", "eager")}


def run_cell(args, threads: str, neighbour: bool, policy: str) -> dict:
    env = {**os.environ, **POLICIES[policy]}
    env.pop("OMP_NUM_THREADS", None)
    env.pop("MKL_NUM_THREADS", None)
    if threads != "auto":
        env["OMP_NUM_THREADS"] = threads
    spinner = None
    if neighbour:
        spinner = multiprocessing.Process(target=_spin, daemon=True)
        spinner.start()
        time.sleep(1.0)                          # let the scheduler see it (and auto_threads measure it)
    try:
        done = subprocess.run([sys.executable, __file__, "--cell", threads, "--model", args.model, "--tokens",
                               str(args.tokens), "--runner", args.runner], env=env, capture_output=True, text=True,
                              timeout=args.cell_timeout)
    finally:
        if spinner is not None:
            spinner.terminate()
            spinner.join()
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per prompt (3 prompts per cell)")
    parser.add_argument("--runner", default="auto")
    parser.add_argument("--threads", default="1,2,auto", help="comma-separated thread counts (or auto)")
    parser.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated, of {', '.join(POLICIES)}")
    parser.add_argument("--cell-timeout", type=float, default=900, help="seconds before a cell is given up")
    parser.add_argument("--out", default=None, help="write the grid as JSON here")
    parser.add_argument("--cell", default=None, help=argparse.SUPPRESS)      # internal: measure one cell
    args = parser.parse_args()
    if args.cell is not None:
        print(json.dumps(measure(args.model, args.cell, args.tokens, args.runner)))
        return 0
    rows = []
    print(f"{'threads':>7} {'neighbour':>9} {'policy':>8} {'tok/s':>7} {'used':>4} {'load':>5}", flush=True)
    for threads, neighbour, policy in itertools.product(args.threads.split(","), (False, True),
                                                        args.policies.split(",")):
        if threads == "1" and policy != "default":
            continue                             # one thread never waits at a barrier: the policy does not apply
        cell = {"threads_asked": threads, "neighbour": neighbour, "policy": policy,
                **run_cell(args, threads, neighbour, policy)}
        rows.append(cell)
        rate = f"{cell['tok_per_s']:7.2f}" if "tok_per_s" in cell else f"{'error':>7}"
        print(f"{threads:>7} {'busy' if neighbour else 'none':>9} {policy:>8} {rate} {cell.get('threads', '-'):>4} "
              f"{cell.get('load_average_after', float('nan')):5.1f}" + (f"  {cell['error']}" if "error" in cell else ""),
              flush=True)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as handle:
            json.dump({"model": args.model, "tokens": args.tokens, "cpu_count": os.cpu_count(), "rows": rows},
                      handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

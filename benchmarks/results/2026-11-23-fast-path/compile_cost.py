"""What torch.compile (inductor) buys on this CPU, beside the eager and fast runners: the measurement issue #22
asked for before choosing a CPU fast path.

    .venv/bin/python benchmarks/results/2026-11-23-fast-path/compile_cost.py --random qwen2.5-1.5b --layers 6 --threads 2
    .venv/bin/python benchmarks/results/2026-11-23-fast-path/compile_cost.py --model qwen2.5-coder-1.5b --threads 2 --modes freezing-autotune

For each number of new tokens T (--tokens), one forward over a 300-token static cache (HF StaticCache) is
compiled with `torch.compile(dynamic=False)` in each --modes setting:
  default            inductor's default CPU code (weights stay as they are; GEMMs go to MKL/oneDNN)
  freezing           torch._inductor.config.freezing = True (weights become constants; oneDNN prepacks them)
  freezing-autotune  freezing plus mode="max-autotune-no-cudagraphs" (inductor's own CPU GEMM template)
and timed against the same forward run eagerly on the static cache and through multidraft's runners (eager
HF DynamicCache, fast kernel). Prints compile seconds per shape, the minimum forward time over --reps, its ratio
to eager's 1-token forward, and the process's peak RSS after each mode (freezing keeps packed weight copies).
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import torch

from multidraft.eval.forward_cost import random_model

PREFIX = 300


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def static_step(model, cache):
    """The function compiled: T new tokens at positions [PREFIX, PREFIX+T) on the static cache."""
    def step(input_ids, cache_position):
        return model(input_ids=input_ids, cache_position=cache_position, position_ids=cache_position[None],
                     past_key_values=cache, use_cache=True, logits_to_keep=0).logits
    return step


def timed(fn, reps: int, clock) -> float:
    fn()
    best = float("inf")
    for _ in range(reps):
        start = clock()
        fn()
        best = min(best, clock() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="registry alias")
    parser.add_argument("--random", default=None, help="random weights of this shape (qwen2.5-1.5b)")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--tokens", default="1,4,8")
    parser.add_argument("--modes", default="default,freezing,freezing-autotune")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cpu-time", action="store_true", help="process CPU time (for --threads 1 on a busy machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    clock = time.process_time if args.cpu_time else time.perf_counter
    import multidraft
    from transformers import StaticCache
    import torch._inductor.config as inductor_config

    if args.model:
        lm = multidraft.load_model(args.model, dtype="float32", device="cpu", runner="eager")
    else:
        lm = random_model(args.random or "qwen2.5-1.5b", args.layers)
    model = lm.model.eval()
    tokens = [int(t) for t in args.tokens.split(",")]
    print(f"model {lm.name}, fp32, threads {args.threads}, {'CPU' if args.cpu_time else 'wall'} time, "
          f"load {os.getloadavg()[0]:.1f}, rss {peak_rss_gb():.1f} GB", flush=True)
    results: dict = {}

    def run_modes(name, make_step):
        for t in tokens:
            ids = torch.full((1, t), 2000, dtype=torch.long)
            position = torch.arange(PREFIX, PREFIX + t)
            start = time.perf_counter()
            fn = make_step(t)
            with torch.no_grad():
                rewind()
                fn(ids, position)
                setup = time.perf_counter() - start
                best = timed(lambda: (rewind(), fn(ids, position)), args.reps, clock)
            results.setdefault(name, {})[t] = best
            print(f"  {name:18s} T={t:2d}: {best * 1000:7.1f} ms  (setup {setup:6.1f} s, peak rss {peak_rss_gb():.1f} GB,"
                  f" load {os.getloadavg()[0]:.1f})", flush=True)

    with torch.no_grad():
        cache = StaticCache(config=model.config, max_cache_len=PREFIX + 64)
        model(input_ids=torch.full((1, PREFIX), 1000), past_key_values=cache, use_cache=True,
              cache_position=torch.arange(PREFIX))
    def rewind():
        """StaticCache writes at its own running length: back to the prefix before each timed forward."""
        for layer in cache.layers:
            layer.cumulative_length.fill_(PREFIX)

    eager_step = static_step(model, cache)
    run_modes("eager-static", lambda t: eager_step)

    for runner in ("eager", "fast"):
        view = multidraft.models.runner.LM(model, lm.tokenizer, name=lm.name, runner=runner)
        kv = view.new_cache()
        view.forward(kv, list(range(1000, 1000 + PREFIX)), logits_rows=slice(-1, None))

        def make(t, view=view, kv=kv):
            def fn(ids, position):
                view.forward(kv, ids[0].tolist(), logits_rows=slice(0, None))
                kv.crop(PREFIX)
            return fn
        run_modes(f"runner:{view.runner}", make)

    for mode in args.modes.split(","):
        torch._dynamo.reset()
        inductor_config.freezing = mode.startswith("freezing")
        compile_mode = "max-autotune-no-cudagraphs" if mode.endswith("autotune") else None

        def make(t, mode=mode):
            return torch.compile(static_step(model, cache), dynamic=False, mode=compile_mode)
        run_modes(f"compiled:{mode}", make)

    base = results["eager-static"][tokens[0]]
    print("\nratios to eager-static's T=%d forward (%.1f ms):" % (tokens[0], base * 1000))
    for name, by_t in results.items():
        print(f"  {name:26s} " + "  ".join(f"T={t}: {v / base:.2f}x ({v / by_t[tokens[0]]:.2f}x own)"
                                            for t, v in by_t.items()))


if __name__ == "__main__":
    main()

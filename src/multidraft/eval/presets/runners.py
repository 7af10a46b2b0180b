"""End-to-end cost of decoding with the eager and the fast runner, beside HF generate(), in process CPU time.

    multidraft bench runners --model qwen2.5-coder-1.5b --prompts 2 --tokens 32 --threads 1
    multidraft bench runners --clock wall --threads 2 --runners fast --draft-lengths fixed,adaptive

Why CPU time: on a machine shared with other busy processes, wall time mostly measures waiting for a core. With
--threads 1, this process's CPU time is what the decoding costs on a free core (memory and SMT contention
aside). `multidraft bench` (wall time) is the tool on a quiet machine; `--clock wall` here measures wall time too.
`--draft-lengths fixed,adaptive` runs pld once per draft-length policy (decoders/draft_length.py); the adaptive
policy's forward-cost table is warmed up on a short prompt first, as a long-running process would have it.

Per code_edit prompt, in this order: HF greedy and HF prompt lookup (stock modules, `prompt_lookup_num_tokens`
= pld's draft length), then our greedy and pld on the eager runner, then on the fast runner. Prints tokens per
CPU-second pooled over prompts, ratios to HF greedy and HF prompt lookup, mean acceptance length, equality with HF
greedy, and the process's peak RSS.
"""

from __future__ import annotations

import os
import resource

import multidraft
from multidraft.eval import timing
from multidraft.eval.bench_args import add_model_options, load_from_args
from multidraft.eval.hf_peers import hf_generate
from multidraft.eval.tasks import load_task


def add_arguments(parser) -> None:
    add_model_options(parser, runner=False, dtype=False)      # fp32 HF weights: the eager and fast runners
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--runners", default="eager,fast")
    parser.add_argument("--draft-lengths", default="fixed", help="pld's draft-length policies, e.g. fixed,adaptive")
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")


def run(args) -> int:
    print("load:", os.popen("uptime").read().strip(), flush=True)
    lm = load_from_args(args, dtype="float32", runner="eager")
    print(f"peak RSS after load: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB", flush=True)
    runners = [r for r in args.runners.split(",") if r]
    for runner in runners:                                   # builds/loads the kernel before any timing
        lm.use_runner(runner)
    pld_k = multidraft.available_methods()["pld"].options.get("num_draft_tokens", 10)
    totals: dict[str, list[float]] = {}
    mal: dict[str, list[float]] = {}
    equal: dict[str, bool] = {}
    items = load_task("code_edit", limit=args.prompts)
    cpu = args.clock == "cpu"
    clock = timing.clock(cpu)
    draft_lengths = [d for d in args.draft_lengths.split(",") if d]
    multidraft.generate(lm, "def f(x):", max_new_tokens=2)   # warm-up
    for runner in runners:                                   # the adaptive policy's cost table, per runner
        lm.use_runner(runner)
        multidraft.generate(lm, "def f(x):\n    return x\n\ndef f(x):\n    return x", method="pld",
                            max_new_tokens=24, draft_length="adaptive")
    for item in items:
        ids = lm.encode(item.messages)
        lm.use_runner("eager")
        reference, seconds = hf_generate(lm, ids, args.tokens, cpu=cpu)
        runs = {"hf_greedy": (reference, seconds, None)}
        tokens, seconds = hf_generate(lm, ids, args.tokens, cpu=cpu, prompt_lookup_num_tokens=pld_k)
        runs["hf_prompt_lookup"] = (tokens, seconds, None)
        for runner in runners:
            lm.use_runner(runner)
            variants = [("greedy", "fixed", "greedy")] + [
                ("pld", d, "pld" if len(draft_lengths) == 1 else f"pld {d}") for d in draft_lengths]
            for method, draft_length, label in variants:
                start = clock()
                gen = multidraft.generate(lm, ids, method=method, max_new_tokens=args.tokens, draft_length=draft_length)
                runs[f"{label} [{runner}]"] = (gen.token_ids, clock() - start, gen.stats.mean_acceptance_length)
        for name, (tokens, seconds, accepted) in runs.items():
            total = totals.setdefault(name, [0.0, 0.0])
            total[0] += len(tokens)
            total[1] += seconds
            equal[name] = equal.get(name, True) and tokens == reference
            if accepted is not None:
                mal.setdefault(name, []).append(accepted)
        print(item.id, {name: f"{len(t)} tok {s:.1f}s" for name, (t, s, _) in runs.items()}, flush=True)
    rate = {name: t / s for name, (t, s) in totals.items()}
    print(f"\n{args.model} fp32, {len(items)} code_edit prompts x {args.tokens} tokens, {args.threads} thread(s), "
          f"tokens per {'CPU-' if args.clock == 'cpu' else ''}second pooled")
    print(f"| method | tok/{'CPU-' if args.clock == 'cpu' else ''}s | vs HF greedy | vs HF prompt lookup | acceptance length | same as HF greedy |")
    print("|---|---|---|---|---|---|")
    for name, value in rate.items():
        accepted = f"{sum(mal[name]) / len(mal[name]):.2f}" if name in mal else "—"
        print(f"| {name} | {value:.2f} | {value / rate['hf_greedy']:.2f}x | {value / rate['hf_prompt_lookup']:.2f}x "
              f"| {accepted} | {'yes' if equal[name] else 'NO'} |")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    print("load:", os.popen("uptime").read().strip(), flush=True)


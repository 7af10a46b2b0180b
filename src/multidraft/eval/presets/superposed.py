"""Superposed Decoding benchmark: latency vs k against nucleus sampling, and draft quality scored by a
larger model. Runs `multidraft.superposed.evaluation` and prints a markdown report.

    multidraft bench superposed                                  # qwen2.5-coder-0.5b, 1.5b scores
    multidraft bench superposed --model smollm2-135m --quality-prefixes 0   # latency only
    multidraft bench superposed --latency-prefixes 0 --quality-prefixes 100

Needs the default n-gram file: `multidraft ngram build-default --model qwen2.5-coder-0.5b`.
Times are wall clock; the machine's load average at start and end is printed beside them (on a shared
machine only ratios measured side by side in one run mean anything).
"""

import json
import tempfile
from pathlib import Path

from multidraft.eval.bench_args import THREADS_HELP, add_model_argument, add_threads_argument, apply_threads

# Every option of multidraft.superposed.evaluation not declared here (--ngram, --k, --prefix-tokens, --new-tokens,
# --alpha, --tau, --dtype, --seed) goes to it as given.
PASS_THROUGH = True


def report(results: dict) -> str:
    lines = [f"model {results['model']} ({results['dtype']}, {results['threads']} threads), "
             f"{results['prefix_tokens']}-token prefixes, {results['new_tokens']} new tokens, "
             f"alpha={results['alpha']}, tau={results['tau']}; load average start "
             f"{' '.join(f'{x:.1f}' for x in results['load_average_start'])}, end "
             f"{' '.join(f'{x:.1f}' for x in results['load_average_end'])}"]
    if "latency" in results:
        lines += ["", "seconds per prefix, wall (CPU of the process, all threads)", "",
                  "| k | SPD | of which n-gram | k sequential nucleus | speedup wall (CPU) | batched nucleus | "
                  "speedup wall (CPU) |", "|---|---|---|---|---|---|---|"]
        for r in results["latency"]:
            cpu = {key: r.get(f"{key}_cpu_s", float("nan")) for key in ("spd", "sequential_nucleus", "batched_nucleus")}
            lines.append(
                f"| {r['k']} | {r['spd_s']:.2f} ({cpu['spd']:.2f}) | {r['spd_ngram_s']:.3f} | "
                f"{r['sequential_nucleus_s']:.2f} ({cpu['sequential_nucleus']:.2f}) | {r['speedup_vs_sequential']:.2f}x "
                f"({r.get('cpu_speedup_vs_sequential', float('nan')):.2f}x) | {r['batched_nucleus_s']:.2f} "
                f"({cpu['batched_nucleus']:.2f}) | {r['speedup_vs_batched']:.2f}x "
                f"({r.get('cpu_speedup_vs_batched', float('nan')):.2f}x) |")
    if "quality" in results:
        s = results["quality"]["summary"]
        ranks = " / ".join(f"{p:.2f}" for p in s["spd_ppl_by_rank"])
        lines += ["", f"quality: {s['prefixes']} prefixes, k={s['k']}, scorer {results['scorer']} (perplexity, lower is better)",
                  "", "| nucleus (1 draft) | nucleus best-of-k | greedy | SPD #1 / #2 / ... | SPD best-of-k |",
                  "|---|---|---|---|---|",
                  f"| {s['nucleus_ppl']:.2f} | {s['nucleus_best_of_k_ppl']:.2f} | {s['greedy_ppl']:.2f} | {ranks} | "
                  f"{s['spd_best_of_k_ppl']:.2f} |", "",
                  f"SPD best-of-k beats the nucleus draft on {100 * s['spd_best_beats_nucleus_fraction']:.0f}% of prefixes; "
                  f"Self-BLEU SPD {s['spd_self_bleu']:.3f} vs nucleus {s['nucleus_self_bleu']:.3f}; unique 1/2/3-gram "
                  f"ratio SPD {'/'.join(f'{x:.3f}' for x in s['spd_unique_ngram_ratio'])} vs nucleus "
                  f"{'/'.join(f'{x:.3f}' for x in s['nucleus_unique_ngram_ratio'])}"]
    return "\n".join(lines)


def add_arguments(parser) -> None:
    add_model_argument(parser, "qwen2.5-coder-0.5b")
    add_model_argument(parser, "qwen2.5-coder-1.5b", "larger model with the same tokenizer that scores the drafts",
                       flag="--scorer")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3, 4, 8])
    parser.add_argument("--latency-prefixes", type=int, default=3)
    parser.add_argument("--quality-prefixes", type=int, default=20)
    add_threads_argument(parser, THREADS_HELP)
    parser.add_argument("--out", help="JSON results (default: a temporary file)")


def run(args) -> int:
    from multidraft.superposed import evaluation as superposed_eval

    rest = args.rest
    threads = [] if args.threads is None else ["--threads", str(apply_threads(args.threads))]
    out = args.out or str(Path(tempfile.mkdtemp(prefix="spd-bench-")) / "results.json")
    code = superposed_eval.main(["--model", args.model, "--scorer", args.scorer, "--ks", *map(str, args.ks),
                                 "--latency-prefixes", str(args.latency_prefixes),
                                 "--quality-prefixes", str(args.quality_prefixes),
                                 *threads, "--out", out, *rest])
    if code:
        return code
    print()
    print(report(json.loads(Path(out).read_text())))
    return 0


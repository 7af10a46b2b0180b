"""Paired statistics of a bench run: for each task, speedup over the run's baseline (HF greedy unless the run chose
`--baseline greedy`) as pooled, geometric mean and median, and how many prompts one method beat another on, head to
head on the same prompt.

    multidraft bench paired benchmarks/results/2026-11-23-cpu-bf16-pldplus-128 \
        --method "pld_plus[rank_by=hidden]" --against pld,hf_prompt_lookup

Why: with a handful of prompts per task the median of per-prompt ratios jumps with one prompt; pooled speedup
(total tokens / total seconds) is dominated by long outputs; the geometric mean and the paired win count use every
prompt equally. Rows that failed are left out. Each pooled ratio carries a 95 % bootstrap interval over prompts
(`multidraft.eval.bootstrap`); `--pair A/B` adds the pooled ratio of two rows with its interval (e.g. `pld/greedy`:
the algorithm's own share on one runner, apart from the kernel's share `greedy/hf_greedy`).
"""

import math
import statistics
from collections import defaultdict

from multidraft.eval.bootstrap import pooled_ratio_ci
from multidraft.eval.results import baseline_of, read_results


def add_arguments(parser) -> None:
    parser.add_argument("run", help="bench output folder (holds results.jsonl)")
    parser.add_argument("--method", default="pld_plus[rank_by=hidden]")
    parser.add_argument("--against", default="pld,hf_prompt_lookup,pld_plus[rank_by=attention]")
    parser.add_argument("--pair", action="append", default=[],
                        help="A/B: also print A's pooled tok/s over B's with its interval (repeatable)")


def run(args) -> int:
    header, rows = read_results(args.run)            # a clear error for a missing folder or a file of another kind
    baseline = baseline_of(header)
    by_prompt = defaultdict(dict)
    for row in rows:
        if row.get("kind") == "row" and not row.get("error"):
            by_prompt[(row["task"], row["prompt_id"])][row["method"]] = row
    methods = [args.method] + args.against.split(",")
    print("| task (prompts) | method | pooled [95 % CI over prompts] | geometric mean | median | "
          f"prompts where {args.method} is faster |")
    print("|---|---|---|---|---|---|")
    for task in dict.fromkeys(task for task, _ in by_prompt):
        needed = methods + [baseline]
        prompts = [p for (t, p), r in by_prompt.items() if t == task and all(m in r for m in needed)]
        if not prompts:
            missing = [m for m in needed if not any(m in r for (t, _), r in by_prompt.items() if t == task)]
            raise SystemExit(f"multidraft bench paired: no {task} prompt has a row of every one of "
                             f"{', '.join(needed)} without an error (never ran: "
                             f"{', '.join(missing) or 'none'}); choose --method / --against among the run's rows")
        table = {p: by_prompt[(task, p)] for p in prompts}
        base = sum(r[baseline]["tokens"] for r in table.values()) / sum(r[baseline]["seconds"] for r in table.values())
        for method in methods:
            ratios = [r[method]["tokens_per_second"] / r[baseline]["tokens_per_second"] for r in table.values()]
            pooled = sum(r[method]["tokens"] for r in table.values()) / sum(r[method]["seconds"] for r in table.values())
            wins = "" if method == args.method else str(sum(
                r[args.method]["tokens_per_second"] > r[method]["tokens_per_second"] for r in table.values()))
            geomean = math.exp(statistics.mean(math.log(x) for x in ratios))
            ci = pooled_ratio_ci(_pairs(table.values(), method, baseline))
            print(f"| {task} ({len(prompts)}) | `{method}` | {pooled / base:.2f}x [{ci.low:.2f}, {ci.high:.2f}] | "
                  f"{geomean:.2f}x | {statistics.median(ratios):.2f}x | {wins} |")
        for pair in args.pair:
            a, b = pair.split("/")
            rows = [r for r in by_prompt.values() if a in r and b in r and r[a]["task"] == task]
            if rows:
                ci = pooled_ratio_ci(_pairs(rows, a, b))
                print(f"| {task} ({len(rows)}) | `{a}` over `{b}` | {ci.estimate:.2f}x [{ci.low:.2f}, {ci.high:.2f}] "
                      "| | | |")


def _pairs(rows, a: str, b: str) -> list[tuple]:
    """Per prompt (tokens, seconds) of row a and of row b: what pooled_ratio_ci resamples."""
    return [(r[a]["tokens"], r[a]["seconds"], r[b]["tokens"], r[b]["seconds"]) for r in rows]


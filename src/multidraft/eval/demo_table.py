"""The short side-by-side table `make demo` ends with, read from a bench folder's results.jsonl.

    python -m multidraft.eval.demo_table bench-out/demo

One line per method: pooled tok/s over every prompt (total tokens / total seconds), the speedup over each reference
that ran (our greedy, HF greedy, HF prompt lookup, llama.cpp greedy: `make llama`) on the same prompts, the mean
acceptance length, and whether the output equalled greedy's on every prompt. llama.cpp need not (8-bit
activations): its cell says on how many prompts it did and how many tokens matched before the first difference.
A method whose every run failed (a peer that crashed, hung or is not installed) gets a row saying
"failed: <reason>"; the llama.cpp build the peers ran is named under the table. Exit status 1 only when one of our
own methods failed. The full per-task tables are in the folder's report.md.
"""

from __future__ import annotations

import sys

from multidraft.eval.bench import read_results
from multidraft.eval.report import failed_cell, peer_configs
from multidraft.eval.results import BASELINE, BASELINE_NAMES, baseline_of


def failures(rows: list[dict]) -> dict[str, str]:
    """{method: the first error of its rows} for methods with a failed row."""
    failed: dict[str, str] = {}
    for row in rows:
        if row.get("kind") == "row" and row.get("error"):
            failed.setdefault(row["method"], row["error"])
    return failed


def demo_table(rows: list[dict], baseline: str = BASELINE) -> str:
    ok = [r for r in rows if r.get("kind") == "row" and r.get("error") is None]
    pooled: dict[str, list[float]] = {}
    accepted: dict[str, list[float]] = {}
    equal: dict[str, bool] = {}
    counts: dict[str, list[int]] = {}          # method -> [prompts equal, prompts compared]
    prefix: dict[str, list[int]] = {}          # method -> [tokens matching before a difference, reference tokens]
    for row in ok:
        tokens_seconds = pooled.setdefault(row["method"], [0.0, 0.0])
        tokens_seconds[0] += row["tokens"]
        tokens_seconds[1] += row["seconds"]
        stats = row.get("stats") or {}
        if stats.get("mean_acceptance_length") is not None and not row.get("peer"):
            accepted.setdefault(row["method"], []).append(float(stats["mean_acceptance_length"]))
        if row.get("equal_greedy") is not None:
            equal[row["method"]] = equal.get(row["method"], True) and bool(row["equal_greedy"])
            count = counts.setdefault(row["method"], [0, 0])
            count[0] += bool(row["equal_greedy"])
            count[1] += 1
        if row.get("greedy_prefix_match"):
            match = prefix.setdefault(row["method"], [0, 0])
            match[0] += row["greedy_prefix_match"]["common"]
            match[1] += row["greedy_prefix_match"]["reference"]
    rate = {m: t / s for m, (t, s) in pooled.items() if s > 0}
    runner = next((r.get("runner") for r in ok if not r.get("peer") and r.get("runner")), "eager")
    titles = {"greedy": "vs greedy", "hf_greedy": "vs HF greedy", "hf_prompt_lookup": "vs HF prompt lookup",
              "llama_cpp_greedy": "vs llama.cpp greedy"}
    peers = [p for p in titles if rate.get(p)]          # a ratio column for each reference that ran
    lines = ["| method | tok/s | " + " | ".join(titles[p] for p in peers) + " | acceptance length | same as greedy |",
             "|---" * (len(peers) + 4) + "|"]
    for method, value in rate.items():
        versus = [f"{value / rate[peer]:.2f}x" if rate.get(peer) else "—" for peer in peers]
        mal = accepted.get(method)
        mal_cell = f"{sum(mal) / len(mal):.2f}" if mal else "—"
        same = {True: "yes", False: "NO"}.get(equal.get(method), "—")
        if method in prefix and equal.get(method) is False:
            same = (f"{counts[method][0]}/{counts[method][1]} prompts, {prefix[method][0]}/{prefix[method][1]} "
                    f"tokens before a difference")
        lines.append(f"| {method} | {value:.2f} | " + " | ".join(versus) + f" | {mal_cell} | {same} |")
    for method, reason in failures(rows).items():
        if method not in rate:              # every run of it failed: the row says why
            lines.append(f"| {method} | {failed_cell(reason)} |" + " |" * (len(peers) + 2))
    prompts = len({(r["task"], r["prompt_id"]) for r in ok})
    lines.append("")
    builds = peer_configs(rows)
    llama = f" llama.cpp peers: {'; '.join(builds)}, on the same GGUF." if builds else ""
    lines.append(f"{prompts} prompts; tok/s pooled over them; our methods on the '{runner}' runner, HF peers stock; "
                 f"'same as greedy': the output equals {BASELINE_NAMES[baseline]}'s." + llama)
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m multidraft.eval.demo_table BENCH_FOLDER", file=sys.stderr)
        return 2
    header, rows = read_results(argv[0])
    print(demo_table(rows, baseline_of(header)))
    # A peer that failed (llama.cpp crashed, is not installed...) costs its own row; one of ours failing fails the demo.
    ours = sorted({r["method"] for r in rows if r.get("kind") == "row" and r.get("error") and not r.get("peer")})
    if ours:
        print(f"demo: our method(s) {', '.join(ours)} failed; see {argv[0]}/report.md", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

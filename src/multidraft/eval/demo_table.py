"""The short side-by-side table `make demo` ends with, read from a bench folder's results.jsonl.

    python -m multidraft.eval.demo_table bench-out/demo

One line per method: pooled tok/s over every prompt (total tokens / total seconds), the speedup over HF greedy
and over HF prompt lookup on the same prompts, the mean acceptance length, and whether a lossless method's
output equalled greedy's on every prompt. The full per-task tables are in the folder's report.md.
"""

from __future__ import annotations

import sys

from multidraft.eval.bench import read_results


def demo_table(rows: list[dict]) -> str:
    ok = [r for r in rows if r.get("kind") == "row" and r.get("error") is None]
    pooled: dict[str, list[float]] = {}
    accepted: dict[str, list[float]] = {}
    equal: dict[str, bool] = {}
    for row in ok:
        tokens_seconds = pooled.setdefault(row["method"], [0.0, 0.0])
        tokens_seconds[0] += row["tokens"]
        tokens_seconds[1] += row["seconds"]
        stats = row.get("stats") or {}
        if stats.get("mean_acceptance_length") is not None and not row.get("peer"):
            accepted.setdefault(row["method"], []).append(float(stats["mean_acceptance_length"]))
        if row.get("equal_greedy") is not None:
            equal[row["method"]] = equal.get(row["method"], True) and bool(row["equal_greedy"])
    rate = {m: t / s for m, (t, s) in pooled.items() if s > 0}
    runner = next((r.get("runner") for r in ok if not r.get("peer") and r.get("runner")), "eager")
    lines = ["| method | tok/s | vs HF greedy | vs HF prompt lookup | acceptance length | same as greedy |",
             "|---|---|---|---|---|---|"]
    for method, value in rate.items():
        versus = [f"{value / rate[peer]:.2f}x" if rate.get(peer) else "—" for peer in ("hf_greedy", "hf_prompt_lookup")]
        mal = accepted.get(method)
        mal_cell = f"{sum(mal) / len(mal):.2f}" if mal else "—"
        same = {True: "yes", False: "NO"}.get(equal.get(method), "—")
        lines.append(f"| {method} | {value:.2f} | {versus[0]} | {versus[1]} | {mal_cell} | {same} |")
    prompts = len({(r["task"], r["prompt_id"]) for r in ok})
    lines.append("")
    lines.append(f"{prompts} prompts; tok/s pooled over them; our methods on the '{runner}' runner, HF peers stock.")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m multidraft.eval.demo_table BENCH_FOLDER", file=sys.stderr)
        return 2
    _header, rows = read_results(argv[0])
    print(demo_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
